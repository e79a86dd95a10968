"""Where numapin's per-process files lie (a pin's record, :mod:`numapin.pinning.record`; the host buffers
declared, :mod:`numapin.pinning.declaration`), whose process each names, and how the folders of a process of
another mount or PID namespace (a container's) are reached: through its own root, never by a path of the
reader's.
"""

from __future__ import annotations

import os

from ..base.environment import RUNTIME_DIR
from ..base.errors import ProcessError
from ..base.files import Folder
from ..base.frozen import frozen
from ..facts import procfs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Protocol

    class Seen(Protocol):
        """What a caller reads of a process once for every question (a scan's view,
        :class:`numapin.observe.view.ProcessView`): its namespaces, environment, status and user mapping, and this
        process's namespaces (``ours``: read once a scan)."""

        def namespaces(self, *, may_be_worker: bool) -> tuple[int, int]: ...
        def ours(self) -> tuple[int, int]: ...
        def environ(self) -> dict[str, str]: ...
        def status(self) -> dict[str, str]: ...
        def inner_uid(self, uid: int) -> int | None: ...

__all__ = ["DECLARATION", "Where", "declaration_name", "file_name", "folders", "folders_of", "inside", "namespace",
           "namespaces", "owner", "places", "reading_folders", "root_of", "start_time"]


def folders(uid: int | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The folders a process of user ``uid`` (default: this one) keeps its record in, first choice first.

    ``$NUMAPIN_RUNTIME_DIR`` alone when it is set: an operator who names the
    folder wants the records there, or nowhere.
    """
    me = os.geteuid()
    user = me if uid is None else uid
    return folders_of(user, os.environ if environ is None else environ, own=user == me)


def folders_of(user: int, env: Mapping[str, str], *, own: bool) -> list[str]:
    """The folders of :func:`folders` for a process of ``user`` whose environment is ``env`` (``own``: its
    ``XDG_RUNTIME_DIR`` is that user's own, not the reader's)."""
    explicit = env.get(RUNTIME_DIR)
    if explicit:
        return [explicit]
    found = []
    if user == 0:
        found.append("/run/numapin")
    runtime = env.get("XDG_RUNTIME_DIR") if own else None
    found.append(os.path.join(runtime, "numapin") if runtime else f"/run/user/{user}/numapin")
    found.append(f"/tmp/numapin-{user}")
    return list(dict.fromkeys(found))


def reading_folders(uids: Iterable[int]) -> list[str]:
    """Every folder a record of these users may lie in: each other user's own first, then the reader's (its
    explicit folder first). A process's own record comes before any copy another user made of it: root's
    keeper of a user's worker writes into that user's folder, and a copy left in root's folder by an older
    keeper never shadows the worker's later pins."""
    me = os.geteuid()
    seen: dict[str, None] = {}
    for uid in uids:
        if uid != me:
            seen.update(dict.fromkeys(folders(uid, environ={})))
    for folder in folders():
        seen.setdefault(folder, None)
    return list(seen)


def owner(pid: int) -> int | None:
    """The user id that owns process ``pid``; None when it is gone."""
    try:
        return procfs.owner(pid)
    except ProcessError:
        return None


def start_time(pid: int) -> int | None:
    """Process ``pid``'s start time in clock ticks since boot; None when it is gone."""
    try:
        return procfs.stat(pid).start
    except ProcessError:
        return None


def namespace() -> int:
    """This process's PID namespace (the inode of ``/proc/self/ns/pid``); 0 where it cannot be read."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def file_name(pid: int, start: int, ns: int | None = None) -> str:
    """The name of the record of process ``pid`` started at ``start`` in PID namespace ``ns`` (default: this
    process's)."""
    return f"{pid}-{start}-{namespace() if ns is None else ns}.json"


#: How a process's declaration of host buffers is named: its record's name with this ending.
DECLARATION = ".buffers.json"


def declaration_name(pid: int, start: int, ns: int | None = None) -> str:
    """The name of the host-buffer declaration of the process :func:`file_name` names."""
    return file_name(pid, start, ns).replace(".json", DECLARATION)


@frozen
class Where:
    """Where a process's record lies: a folder as the process sees it, and the file's name there. For a process
    of another mount or PID namespace (a container's), the folder lies under ``/proc/THROUGH/root`` and the
    record names the process by its id in its own namespace, ``inner``."""

    folder: str
    name: str
    through: int | None = None
    inner: int | None = None

    def open(self, owners: set[int]) -> Folder:
        """The folder, checked (PermissionError, OSError as :class:`Folder` says them)."""
        if self.through is None:
            return Folder.open(self.folder, owners)
        root = root_of(self.through)
        try:
            return inside(root, self.through, self.folder, owners)
        finally:
            os.close(root)


def root_of(pid: int) -> int:
    """A descriptor of process ``pid``'s root (``/proc/PID/root``: its mount namespace's ``/``); OSError where
    this user may not look."""
    return os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def inside(root: int, through: int, folder: str, owners: set[int]) -> Folder:
    """``folder`` of the root ``root`` (process ``through``'s), as :meth:`Folder.inside` checks it."""
    return Folder.inside(root, folder, owners, f"/proc/{through}/root{folder}")


def namespaces(pid: int | str) -> tuple[int, int]:
    """Process ``pid``'s mount and PID namespaces (``"self"``: this one's); ProcessError where it may not be looked
    into."""
    return procfs.namespace(pid, "mnt"), procfs.namespace(pid, "pid")


def places(pid: int, start: int, uid: int,
           seen: Seen | None = None) -> tuple[int, int, list[tuple[str, int | None]]] | None:
    """Where the files of live process ``pid`` (started at ``start``, of user ``uid``) may lie: its id and PID
    namespace as its files name them, and each folder with the process through whose root it is reached (None:
    this namespace's own). A process of another mount or PID namespace (a container's) is looked for in its own
    root, under its own id there; None where it may not be looked into. ``seen``: what the caller reads of the
    process (its view), which these readings are taken from."""
    mine = None
    if pid != os.getpid():
        try:
            mine = namespaces("self") if seen is None else seen.ours()
            theirs = namespaces(pid) if seen is None else seen.namespaces(may_be_worker=True)
            elsewhere = theirs != mine
        except ProcessError:
            elsewhere = False  # not ours to look into: only this namespace's folders, as for any process
        if elsewhere:
            try:
                inner = procfs.inner_pid(pid, None if seen is None else seen.status())
                inner_uid = procfs.inner_uid(pid, uid) if seen is None else seen.inner_uid(uid)
                env = procfs.environ(pid) if seen is None else seen.environ()
            except ProcessError:
                return None
            if inner_uid is None:
                return None
            return inner, theirs[1], [(path, pid) for path in folders_of(inner_uid, env, own=True)]
    return pid, namespace() if mine is None else mine[1], [(path, None) for path in reading_folders({uid})]
