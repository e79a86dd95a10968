"""Plumbing every layer may use: the environment's names, errors, the logger, frozen records, text,
closed choices and the writing of files other processes read. Imports nothing else of numapin."""
