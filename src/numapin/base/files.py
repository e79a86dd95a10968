"""Files numapin writes for other processes to read: in a folder of this user's, replaced whole."""

from __future__ import annotations

import contextlib
import os
import stat

__all__ = ["own_folder", "replace_file"]


def own_folder(folder: str) -> None:
    """Make ``folder`` (mode 0755, parents as needed), or accept it only when it is a real folder of this
    user's: a symlink or someone else's folder would let another user choose what numapin writes where."""
    with contextlib.suppress(FileExistsError):  # a file of that name: refused just below
        os.makedirs(folder, mode=0o755, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise PermissionError(f"{folder} is not a folder of this user's")


def replace_file(path: str, data: bytes, mode: int) -> None:
    """Write ``path`` through a temporary file renamed over it: a reader sees the old content or the new,
    never half of one. OSError as the kernel says it."""
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(temporary, path)
