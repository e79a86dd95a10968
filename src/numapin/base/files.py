"""Files numapin shares with other processes, behind one trust boundary.

numapin writes files other processes read (the per-process records, the numactl
stand-in), and root reads them from timers. A path can be swapped between a
check and a use, and a folder can be a symlink another user planted, so a
folder is opened once (``O_DIRECTORY|O_NOFOLLOW``), its owner and mode checked
on the descriptor, and every listing, read, write and removal is made relative
to that descriptor. Files are opened ``O_NOFOLLOW|O_NONBLOCK`` (a FIFO or a
device named like a record never blocks a reader), regular files only, their
size capped, their owner returned to the caller to judge.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["MAX_DEPTH", "MAX_PATH", "Folder", "only_theirs", "settled"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: The most names, and characters, of a folder resolved under another process's root (:meth:`Folder.inside`): the
#: path comes from that process (its environment), and each name costs a system call. A runtime folder is a few
#: names deep (``/run/user/1000/numapin``); a path 60,000 names deep would cost a scan seconds per process.
MAX_DEPTH = 32
MAX_PATH = 1024


def only_theirs(path: str, owners: Collection[int]) -> bool:
    """Whether no user but ``owners`` can create, rename or replace what the real path of ``path`` names:
    every folder on it from ``/`` down to the last that exists is owned by one of them and writable by no
    one else (a sticky /tmp is writable by all: what it holds today, a cleaner removes and anyone makes
    again tomorrow). What does not exist yet, only ``owners`` can make. Use ``os.path.realpath(path)``
    itself afterwards: links on the way are resolved here, and a link is only as safe as its folder."""
    current = "/"
    for part in os.path.realpath(path).split("/"):
        current = os.path.join(current, part)
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return True  # the rest is for one of owners to make, in a folder no one else may write
        except OSError:
            return False
        if not stat.S_ISDIR(info.st_mode) or info.st_uid not in owners \
                or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
    return True


def settled(path: str, owners: Collection[int]) -> bool:
    """Whether no user but ``owners`` can replace the folder ``path`` names, or what it holds of theirs: it and
    every folder above it (links resolved) belong to one of them, and each is writable by no one else, or
    sticky (others may add names there, never rename or remove one of ``owners``'). Unlike
    :func:`only_theirs`, for a folder that exists and whose files are written by name through :class:`Folder`."""
    real = os.path.realpath(path)
    current = "/"
    for part in real.split("/"):
        current = os.path.join(current, part)
        try:
            info = os.lstat(current)
        except OSError:
            return False
        shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX
        if not stat.S_ISDIR(info.st_mode) or info.st_uid not in owners or shared:
            return False
    return True


class Folder:
    """A folder held by its descriptor, checked once: whoever renames or replaces its path afterwards
    changes nothing numapin reads, writes or removes."""

    def __init__(self, fd: int, path: str, owner: int) -> None:
        self.fd = fd
        self.path = path
        self.owner = owner

    # A context manager of its own, closing its descriptor (contextlib would cost every worker pinned at
    # start-up its import, and functools' and collections').
    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)

    @classmethod
    def open(cls, path: str, owners: Collection[int], *, create: bool = False, shared: bool = False) -> Folder:
        """``path`` as a folder owned by one of ``owners`` that neither its group nor others may write, held
        open until the ``with`` block that takes it ends; PermissionError for anything else (a symlink, a
        file, another user's folder, a shared one). ``create``: make it first (mode 0755, parents as needed)
        when it does not exist. ``shared``: others may write it when it is sticky (they add names, never
        replace one of ``owners``')."""
        if create:
            try:
                os.makedirs(path, mode=0o755, exist_ok=True)
            except FileExistsError:  # a file of that name: refused below
                pass
        return cls._checked(os.open(path, _DIR_FLAGS), path, owners, shared)

    @classmethod
    def inside(cls, root: int, path: str, owners: Collection[int], label: str | None = None) -> Folder:
        """The absolute ``path`` under the folder ``root`` (a descriptor: another mount namespace's ``/``,
        opened through ``/proc/PID/root``), checked as :meth:`open` checks a folder. It is resolved one name at
        a time, each opened without following a link, so nothing leads out of that root: a link anywhere on the
        way (an absolute one would be resolved against this process's ``/``), or ``..``, is a PermissionError; so
        is a path deeper than :data:`MAX_DEPTH` or longer than :data:`MAX_PATH`, refused before any name is opened.
        ``label``: the path said in errors and kept as :attr:`path`."""
        if len(path) > MAX_PATH or path.count("/") > MAX_DEPTH:
            raise PermissionError(f"{path[:80]!r}...: longer than {MAX_PATH} characters or deeper than {MAX_DEPTH} "
                                  "folders: not looked into")
        names = path.split("/")
        if not path.startswith("/") or any(name in (".", "..") for name in names) or not names[-1]:
            raise PermissionError(f"{path!r} is no plain absolute path")
        current = root
        try:
            for name in names[1:-1]:
                if name:
                    step = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
                    if current != root:
                        os.close(current)
                    current = step
            fd = os.open(names[-1], _DIR_FLAGS, dir_fd=current)
        finally:
            if current != root:
                os.close(current)
        return cls._checked(fd, label or path, owners, False)

    @classmethod
    def _checked(cls, fd: int, path: str, owners: Collection[int], shared: bool) -> Folder:
        try:
            info = os.fstat(fd)
            others_write = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            if info.st_uid not in owners or (others_write and not (shared and info.st_mode & stat.S_ISVTX)):
                raise PermissionError(f"{path} is not a folder of user {sorted(owners)[0]} that only it may write")
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path, info.st_uid)

    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def read(self, name: str, cap: int) -> tuple[bytes, int] | None:
        """The first ``cap`` bytes of the regular file ``name`` and its owner; None for anything else
        (a link, a FIFO, a device, a folder, nothing)."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self.fd)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None
            return os.read(fd, cap), info.st_uid
        except OSError:
            return None
        finally:
            os.close(fd)

    def replace(self, name: str, data: bytes, mode: int, owner: int | None = None) -> None:
        """Write ``name`` through a new temporary file renamed over it: a reader sees the old content or the
        new, never half of one; nothing of another user's is written through. ``owner``: the user the file is
        given to before it takes the name (root writing for that user). OSError as the kernel says it."""
        temporary = f"{name}.{os.getpid()}.tmp"
        try:
            os.unlink(temporary, dir_fd=self.fd)  # one this process left by a failed write before
        except FileNotFoundError:
            pass
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                     dir_fd=self.fd)
        try:
            try:
                written = os.write(fd, data)
                if owner is not None and owner != os.geteuid():
                    os.fchown(fd, owner, -1)
            finally:
                os.close(fd)
            if written != len(data):
                raise OSError(f"{self.path}/{temporary}: short write ({written} of {len(data)} bytes)")
            os.replace(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            try:
                os.unlink(temporary, dir_fd=self.fd)  # a full folder keeps no empty temporary file
            except OSError:
                pass
            raise

    def remove(self, name: str) -> None:
        """Remove ``name`` if this user may (another user's file stays for its owner or root)."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError:
            pass
