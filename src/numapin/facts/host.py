"""Where facts come from: a filesystem root standing in for ``/``.

Every reader goes through :class:`Host`, so pointing ``NUMAPIN_FSROOT`` (or a
``root=`` argument) at a captured or synthetic machine changes every fact at
once. Thread and memory operations never go through here: they always act on
the real process.
"""

from __future__ import annotations

import os
import stat

from ..base.environment import FSROOT
from ..base.errors import EnvironmentProblem, quoted

__all__ = ["Folder", "Host", "HostError", "resolve_root"]

# sysfs and procfs values are small; a file larger than this is no fact of ours.
_MAX_READ = 1 << 20
_PAGE = 4096
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
# A handle that only anchors relative opens (O_PATH: no read permission needed, nothing read).
_FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
class HostError(EnvironmentProblem):
    """The filesystem root cannot serve as a machine description."""


def resolve_root(root: str | os.PathLike[str] | None = None) -> str:
    """The root to read: ``root``, else ``$NUMAPIN_FSROOT``, else ``/`` (as a string path)."""
    if root is None:
        root = os.environ.get(FSROOT) or "/"
    return os.fspath(root)


def _rest(fd: int, first: bytes) -> bytes | None:
    """After a first read that came back empty or filled its page: None unless a regular file, else the rest too."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return None
    data = chunk = first
    # Until the end of the file (an empty read), up to the cap: a large host's /proc/interrupts runs past
    # 64 KiB, and a read may return less than asked before the end.
    while chunk and len(data) < _MAX_READ:
        chunk = os.read(fd, min(_PAGE * 16, _MAX_READ - len(data)))
        data += chunk
    return data


class Folder:
    """A folder under a :class:`Host`'s root, where :meth:`Host.read_in` opens ``prefix + name``.

    Held open by :meth:`Host.folder` (``fd``, with an empty prefix), or else
    named by its whole path (``fd`` None; so is the root itself). ``rel`` is
    its path under the root, ending in ``/`` (empty for the root).
    """

    __slots__ = ("fd", "prefix", "rel")

    def __init__(self, rel: str, fd: int | None, prefix: str) -> None:
        self.rel = rel
        self.fd = fd
        self.prefix = prefix

    # A context manager of its own, closing what Host.folder opened (contextlib would cost every start-up hook
    # its import, and functools').
    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *_: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Host:
    """A read-only view of one machine's ``sys/`` and ``proc/`` files.

    ``journal``, when given, collects the relative path of every file read
    successfully: ``numapin snapshot`` captures exactly those. (A plain class,
    not a record: it keeps the root's prefix ready for :meth:`read`, which runs
    once per file, thousands of times on a large machine.)
    """

    __slots__ = ("_prefix", "_root", "journal", "root")

    def __init__(self, root: str, journal: list[str] | None = None) -> None:
        self.root = root
        self.journal = journal
        self._prefix = root if root.endswith("/") else root + "/"
        self._root = Folder("", None, self._prefix)

    def __repr__(self) -> str:
        return f"Host(root={self.root!r})"

    @classmethod
    def at(cls, root: str | os.PathLike[str] | None = None, journal: list[str] | None = None) -> Host:
        return cls(resolve_root(root), journal)

    @property
    def is_live(self) -> bool:
        """True when the root is the real ``/`` of the running process."""
        try:
            return os.path.realpath(self.root) == "/"
        except OSError:
            return False

    def path(self, rel: str) -> str:
        # String concatenation: pathlib, or even os.path.join, costs more than the read on the hot path.
        return self._prefix + rel.lstrip("/")

    def read(self, rel: str) -> str | None:
        """The file's text, or None when it is absent, unreadable or not a regular file.

        At most 1 MiB, never waiting: the file is opened non-blocking (a FIFO
        would otherwise block the reader forever). A sysfs value comes whole in
        one short read, and that common case costs open, read, close; a read
        that returns nothing or fills its page is checked (fstat) to come from
        a regular file before it is taken or continued, so an empty FIFO or a
        device (``/dev/zero`` behind a symlink) reads as absent.
        """
        if rel.startswith("/"):
            rel = rel.lstrip("/")
        return self.read_in(self._root, rel)

    def read_in(self, folder: Folder, name: str) -> str | None:
        """:meth:`read` of ``name`` inside ``folder`` (see :meth:`folder`)."""
        # The whole read is here, not a layer below: a topology read calls this once per CPU file.
        try:
            fd = os.open(folder.prefix + name, _OPEN_FLAGS, dir_fd=folder.fd)
        except (OSError, ValueError):
            return None
        try:
            # A page at a time: a 1 MiB buffer for every read would cost more than
            # the read (Python allocates it each time).
            first = os.read(fd, _PAGE)
            data = first if 0 < len(first) < _PAGE else _rest(fd, first)
        except OSError:
            return None
        finally:
            os.close(fd)
        if data is None:
            return None
        # Some captures end sysfs values with NUL bytes; no real value holds one.
        text = data.decode("utf-8", "replace")
        if "\x00" in text:
            text = text.replace("\x00", "")
        if self.journal is not None:
            self.journal.append(folder.rel + name)
        return text

    def folder(self, rel: str) -> Folder:
        """``rel`` held open while a ``with`` block runs, for :meth:`read_in` of many files inside it.

        Opening each file relative to the open folder spares the kernel walking
        the folder's path for every file: about a sixth of a sysfs read, where
        a topology read opens one file per CPU under ``sys/devices/system/cpu``.
        A folder that cannot be opened still reads, by whole paths.
        """
        rel = rel.strip("/") + "/"
        try:
            return Folder(rel, os.open(self._prefix + rel, _FOLDER_FLAGS), "")
        except (OSError, ValueError):
            return Folder(rel, None, self._prefix + rel)  # read by whole paths

    def resolve(self, rel: str) -> str | None:
        """Where ``rel`` leads once its links are followed, as a path under the root (None when it leaves it).

        sysfs says where a device sits by its links: ``sys/class/net/eth0``
        leads into ``sys/devices/pci0000:00/...``, the device's PCI path.
        """
        base = os.path.realpath(self.root).rstrip("/") + "/"
        try:
            target = os.path.realpath(self.path(rel))
        except (OSError, ValueError):
            return None
        if not os.path.exists(target) or not target.startswith(base):
            return None
        if self.journal is not None:
            self.journal.append(rel.strip("/") + "/")  # a folder followed: numapin snapshot keeps its links
        return target[len(base):]

    def listdir(self, rel: str) -> list[str]:
        """Record names of a folder, or an empty list when it cannot be listed."""
        try:
            return os.listdir(self.path(rel))
        except OSError:
            return []

    def check(self) -> None:
        """Raise HostError when the root cannot describe a machine at all."""
        # The root is quoted short: a bad NUMAPIN_FSROOT is said in every interpreter of a job.
        root = quoted(self.root, 80)
        if not os.path.isdir(self.root):
            raise HostError(f"root {root} does not exist or is not a folder")
        cpu = self.path("sys/devices/system/cpu")
        if not os.path.isdir(cpu):
            raise HostError(f"root {root} has no CPU information (no sys/devices/system/cpu)")
        if not os.access(cpu, os.R_OK | os.X_OK):
            raise HostError(f"root {root}: sys/devices/system/cpu is not readable")
