"""The two kinds of failure numapin tells apart, and the fields they carry.

A caller's mistake (:class:`UsageError`) is always raised, before anything is
changed. A problem of the environment (:class:`EnvironmentProblem`) is raised
only in strict mode; otherwise it becomes one warning and the process keeps
the mask it had, so a worker's start-up never aborts because of numapin.
"""

from __future__ import annotations

import errno

__all__ = ["AccessDenied", "EnvironmentProblem", "NoSuchProcess", "NumapinError", "ProcessError", "ScanTimeout",
           "UsageError", "errno_name", "quoted"]


class NumapinError(Exception):
    """Base of every error numapin raises on purpose.

    Every one pickles with its fields (``value``, ``errno``, a pin's
    ``result``): an error raised in a multiprocessing or Ray worker reaches the
    parent whole. Pickle's default would call the class with the message alone,
    which fails for a class whose constructor takes more.
    """

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuilt, (type(self), self.args, dict(vars(self)))


class UsageError(NumapinError, ValueError):
    """Bad input from the caller: a malformed cpulist, an unknown mode, a GPU that is not visible.

    ``value`` is the input at fault, when there is one.
    """

    def __init__(self, message: str, *, value: object = None) -> None:
        super().__init__(message)
        self.value = value


class EnvironmentProblem(NumapinError):
    """The machine or the kernel does not allow what was asked.

    ``errno`` names the kernel's refusal (``"EINVAL"``), when one was the cause.
    """

    def __init__(self, message: str, *, errno: str | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class ProcessError(NumapinError):
    """Another process could not be read: ``pid`` names it. Raised by :mod:`numapin.facts.procfs` alone,
    which translates the kernel's answers once for every tool."""

    def __init__(self, message: str, *, pid: int) -> None:
        super().__init__(message)
        self.pid = pid


class NoSuchProcess(ProcessError):
    """The process does not exist, or exited (a zombie counts as exited)."""

    def __init__(self, pid: int, message: str | None = None) -> None:
        super().__init__(message or f"process {pid} does not exist", pid=pid)


class AccessDenied(ProcessError):
    """The process belongs to another user, and this one may not read what was asked."""

    def __init__(self, pid: int, what: str = "it") -> None:
        super().__init__(f"process {pid}: permission denied to read {what} (it belongs to another user; "
                         "its owner or root may)", pid=pid)


class ScanTimeout(NumapinError):
    """A scan of the host's processes ran past the time it was given (the exporter's scrape bound): checked inside
    each step over a process, so that no process, however costly to look into, holds a scan past it."""

    @classmethod
    def past(cls, deadline: float | None, where: str) -> None:
        """Raise one, saying ``where`` the scan was, once ``time.monotonic()`` is past ``deadline`` (None: none)."""
        import time

        if deadline is not None and time.monotonic() > deadline:
            raise cls(f"the scan ran past its time bound, {where}")


def _rebuilt(cls: type[NumapinError], args: tuple[object, ...], fields: dict[str, object]) -> NumapinError:
    """An unpickled error: its message and fields restored without calling the class's constructor."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(fields)
    return error


def quoted(value: object, limit: int = 40) -> str:
    """``value`` as an error message quotes it: its repr, cut to ``limit`` characters with the length said.

    An environment variable of 100 KB must not become a 100 KB line of stderr in
    every interpreter of a job.
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return f"{text[:limit]}…{size}"


def errno_name(code: int | None) -> str:
    """``EINVAL`` for 22: the symbolic name of an errno value, or the number when it has none."""
    return errno.errorcode.get(code or 0, str(code))
