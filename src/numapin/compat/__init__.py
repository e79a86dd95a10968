"""Drop-in functions that keep other projects' contracts, built on numapin's pinning.

Functions here never raise: a worker's start-up must not fail because of them.
"""
