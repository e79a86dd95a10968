"""A ``numactl`` on PATH that is ``numapin numactl``, for frameworks that exec numactl where none is installed.

vLLM and SGLang bind their workers by exec-ing ``numactl`` in front of Python,
after probing ``numactl OPTIONS true``; slim and ROCm images have no numactl,
and then vLLM stops with an error and SGLang binds nothing. Where no numactl is
on PATH, this puts a folder in front of PATH (for this process and, through the
environment, every process it starts) holding a two-line ``numactl`` that hands
its arguments to ``numapin numactl`` under this interpreter. A numactl that is
installed is never shadowed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import MutableMapping

from ..logger import log

__all__ = ["NAME", "ensure_front", "front_folder"]

NAME = "numactl"


def front_folder() -> str:
    """The folder of this interpreter's front: per user and interpreter, under the temporary folder."""
    tag = hashlib.sha256(sys.executable.encode()).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), f"numapin-front-{os.geteuid()}-{tag}")


def _write(folder: str) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o755)
    info = os.lstat(folder)
    import stat

    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise PermissionError(f"{folder} is not a folder of this user's")
    script = f'#!/bin/sh\nexec "{sys.executable}" -m numapin numactl "$@"\n'.encode()
    path = os.path.join(folder, NAME)
    try:
        with open(path, "rb") as f:
            if f.read() == script:
                return
    except OSError:
        pass
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o755)
    try:
        os.write(fd, script)
    finally:
        os.close(fd)
    os.replace(temporary, path)


def ensure_front(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Put the front first on PATH when no numactl is there; the folder added, or None (one is installed,
    or the folder cannot be written: one warning)."""
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    found = shutil.which(NAME, path=path)
    folder = front_folder()
    if found is not None:
        return folder if os.path.dirname(found) == folder else None
    try:
        _write(folder)
    except OSError as exc:
        log.warning("no numactl on PATH, and numapin's stand-in could not be written in %s: %s", folder, exc)
        return None
    env["PATH"] = f"{folder}{os.pathsep}{path}" if path else folder
    return folder
