"""The two kinds of failure numapin tells apart.

A caller's mistake (:class:`UsageError`) is always raised, before anything is
changed. A problem of the environment (:class:`EnvironmentProblem`) is raised
only in strict mode; otherwise it becomes one warning and the process keeps
the mask it had, so a worker's start-up never aborts because of numapin.
"""

from __future__ import annotations

__all__ = ["EnvironmentProblem", "NumapinError", "UsageError"]


class NumapinError(Exception):
    """Base of every error numapin raises on purpose."""


class UsageError(NumapinError, ValueError):
    """Bad input from the caller: a malformed cpulist, an unknown mode, a GPU that is not visible."""


class EnvironmentProblem(NumapinError):
    """The machine or the kernel does not allow what was asked."""
