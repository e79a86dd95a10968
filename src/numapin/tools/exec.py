"""``numapin exec``: bind at birth, then replace this process with the program.

The decision and the pin are the request's (:mod:`numapin.pinning.request`, which the start-up hook shares);
this room finds the program (:func:`which`), hands the pin's environment to it, and makes the process the
program (:func:`exec_program`): same pid, same stdio, the program's own exit code and signals.
"""

from __future__ import annotations

import os
import sys

from ..base.errors import UsageError
from ..pinning.request import ExecRequest, PreparedExec, bind, prepare

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["apply_exec", "exec_program", "prepare_exec", "which"]


def which(program: str, environ: Mapping[str, str]) -> str:
    """The executable ``program`` names, searched on PATH as execvp searches; UsageError when there is none."""
    if "/" in program:
        if os.path.isfile(program) and os.access(program, os.X_OK):
            return program
        raise UsageError(f"{program!r} is not an executable file", value=program)
    # As execvp searches (shutil.which would do, but importing shutil costs more than the search).
    for folder in environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(folder or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise UsageError(f"program {program!r} not found on PATH", value=program)


def prepare_exec(request: ExecRequest, environ: Mapping[str, str]) -> PreparedExec:
    """Decide what ``numapin exec`` will do: the program found on PATH first (its absence is the first mistake
    said), then the request's decision; raises on bad input, changes nothing."""
    return prepare(request, environ, which(request.program[0], environ) if request.program else "")


def apply_exec(prepared: PreparedExec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Pin this process as decided; return the environment the program gets (with numapin's marker)."""
    return bind(prepared, environ)[1]


def exec_program(prepared: PreparedExec, env: Mapping[str, str]) -> int:
    """Replace this process with the program. Returns only on failure (raising UsageError)."""
    if not prepared.request.program:
        raise UsageError("no program to run", value=prepared.request.program)
    sys.stdout.flush()
    sys.stderr.flush()
    _undo_python_start()
    try:
        os.execve(prepared.executable, list(prepared.request.program), _without_coerced_locale(env))
    except OSError as exc:
        raise UsageError(f"cannot run {prepared.executable!r}: {exc.strerror}", value=prepared.executable) from exc
    return 2  # pragma: no cover - execve does not return


#: Signals Python ignores at start-up, and that execve() would hand on ignored: a program under
#: ``numapin exec`` must meet a closed pipe (``yes | head -1``) or a file-size limit as it would
#: without it. Python's subprocess resets the same ones for its children (restore_signals).
_IGNORED_BY_PYTHON = ("SIGPIPE", "SIGXFSZ")


def _undo_python_start() -> None:
    """Put back the signal dispositions Python changed when it started, as a launcher must."""
    import signal

    for name in _IGNORED_BY_PYTHON:
        number = getattr(signal, name, None)
        if number is not None:
            signal.signal(number, signal.SIG_DFL)


def _without_coerced_locale(env: Mapping[str, str]) -> Mapping[str, str]:
    """``env`` with ``LC_CTYPE`` as the caller gave it, undoing Python's start-up coercion (PEP 538).

    Under the C locale Python writes ``LC_CTYPE=C.UTF-8`` into its own
    environment; a program exec'd from numapin would inherit a locale its
    caller never chose. The kernel's copy of the environment this process was
    started with (``/proc/self/environ``) holds the caller's value, or none.
    numapin itself never sets the variable.
    """
    if "LC_CTYPE" not in env:
        return env
    try:
        with open("/proc/self/environ", "rb") as file:
            started_with = file.read().split(b"\0")
    except OSError:
        return env
    given = [entry[len(b"LC_CTYPE="):] for entry in started_with if entry.startswith(b"LC_CTYPE=")]
    fixed = {k: v for k, v in env.items() if k != "LC_CTYPE"}
    if given:
        fixed["LC_CTYPE"] = os.fsdecode(given[-1])
    return fixed
