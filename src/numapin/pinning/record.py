"""The per-process record: what numapin applied to a process, whole, readable by another process.

A pin made inside a process (the start-up hook, ``pin()``, a lease, the
TensorRT-LLM function) leaves no trace in ``/proc/PID/environ``, which holds
the environment the process started with. So each pin that changes something
also writes a small JSON file, one per process, that numapin's tools read from
outside: ``numapin threads``, ``doctor --pid`` and ``ps``.

Where: a runtime folder, as Linux tools keep per-boot state. ``$NUMAPIN_RUNTIME_DIR``
when set; else ``/run/numapin`` for root; else ``$XDG_RUNTIME_DIR/numapin`` (the
user's own tmpfs, which systemd-logind empties at logout); else
``/tmp/numapin-UID``. Runtime folders are memory (tmpfs) and emptied at boot, so
a record never outlives the boot whose process ids it names. A reader looks in
every folder a process of that user could have written, so root sees every
user's workers.

Keyed so that a reused process id is never taken for the old process: the file
is named ``PID-START-NS.json``, START being the process's start time in clock ticks
since boot (``/proc/PID/stat``), which a new process with the same id does not
share, and NS the process's PID namespace (the inode of ``/proc/self/ns/pid``):
a process id means something only in its namespace, and containers sharing a
folder (``-v /tmp:/tmp``, one runtime folder) number their processes alike. A
record whose process is gone, or whose id now names another process, is stale:
readers ignore it, and writers and ``numapin ps`` remove the stale files they
may remove. A record of another namespace is neither judged stale nor believed:
it is left for the processes of that namespace.

Writing never fails a worker: a read-only, full or foreign folder is one debug
line, and the pin stands.
"""

from __future__ import annotations

import os
import time

from ..base.errors import ProcessError, ScanTimeout
from ..base.files import Folder
from ..base.frozen import frozen, replace
from ..base.logger import log
from ..base.text import decimal, json_text, json_value, printable
from ..cpuset import CpuSet
from ..facts import procfs
from .folders import (
    DECLARATION,
    Where,
    file_name,
    folders,
    folders_of,
    inside,
    namespace,
    namespaces,
    owner,
    places,
    reading_folders,
    root_of,
    start_time,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any

    from ..placement.modes import Placement
    from .decision import ExternalMaskPolicy
    from .folders import Seen
    from .memory import MemoryMode

# Where records lie, and whose process each names, is :mod:`numapin.pinning.folders`'s; the names a reader of
# records uses most are given here too (``record.start_time``, ``record.folders``).
__all__ = ["CAP", "HOW", "VERSION", "Record", "Where", "across", "drift_words", "entries", "exact_int", "file_name",
           "folders", "locate", "lookup", "namespace", "owner", "publish", "rewrite", "stamp", "start_time",
           "withdraw"]

#: The record format; a reader skips files of another.
VERSION = 3

#: Who applied a pin: numapin exec, the start-up hook, pin(), a lease, a compatibility function.
HOW = ("exec", "autopin", "pin", "lease", "compat")


@frozen
class Record:
    """What numapin applied to one process, whole: enough to judge the process without deciding again."""

    pid: int
    start: int
    """The process's start time (clock ticks since boot): with ``pid``, names one process for the boot."""
    how: str
    """``exec``, ``autopin``, ``pin``, ``lease`` or ``compat``."""
    mask: CpuSet
    """The process mask numapin read back after applying it."""
    target: CpuSet
    """The CPUs numapin put the process's threads on: the placement's workers, or their part inside a
    launcher's mask (policy ``respect``), or the baseline (policy ``reset``)."""
    placement: Placement
    """The decision: CPUs, memory nodes, mode (``explicit`` included), the GPU by its index in the
    process's own view and by PCI address, rank, reserved cores, kind of cores."""
    memory: MemoryMode | None = None
    """The memory policy in force after the pin, None when none was asked."""
    policy: ExternalMaskPolicy | None = None
    pools: tuple[tuple[str, str], ...] = ()
    """Thread-pool variables set for the process (``OMP_NUM_THREADS`` ...), name and value."""
    written: float = 0.0
    """When (seconds since the epoch)."""
    drift: tuple[tuple[str, int], ...] = ()
    """What the keeper saw move the placement since the pin: each cause (``numapin.pinning.keeper.DriftCause``)
    with its count, the cause seen last at the end."""
    last_drift: str | None = None
    """The keeper's words for the last of those, with its time."""
    requested: tuple[Placement, CpuSet] | None = None
    """The placement and target asked for, where a keeper decided them again inside a narrower cpuset: a
    cpuset that widens again gets the request back, never the narrowing kept for good."""

    memory_refused: str | None = None
    """Who refused the memory policy asked for (``seccomp``, ``permission``: :attr:`MemoryResult.refused`)."""

    def asked(self) -> tuple[Placement, CpuSet]:
        """The placement and target asked for: :attr:`requested`, or what was applied when nothing narrowed it."""
        return self.requested or (self.placement, self.target)

    def as_dict(self) -> dict[str, Any]:
        out = {
            "version": VERSION, "pid": self.pid, "start": self.start, "how": self.how,
            "mask": str(self.mask), "target": str(self.target), "placement": self.placement.as_dict(),
            "memory": None if self.memory is None else self.memory.value,
            "policy": None if self.policy is None else self.policy.value,
            "pools": dict(self.pools), "written": self.written,
        }
        if self.drift:  # only a kept process has them: a reader of the same format without a keeper skips them
            out["drift"] = dict(self.drift)
            out["last_drift"] = self.last_drift
        if self.memory_refused is not None:
            out["memory_refused"] = self.memory_refused
        if self.requested is not None:
            out["requested"] = {"placement": self.requested[0].as_dict(), "target": str(self.requested[1])}
        return out


    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record | None:
        """The record a file holds; None for anything else (another version, a damaged file)."""
        # Imported when a record is read: ps looks for records among a host of ordinary processes without them.
        from ..placement.modes import Placement
        from .decision import ExternalMaskPolicy
        from .memory import LIFT, MemoryMode

        try:
            if data.get("version") != VERSION or data.get("how") not in HOW:
                return None
            pools = data.get("pools") or {}
            drift = data.get("drift") or {}
            last_drift = data.get("last_drift")
            requested = data.get("requested")
            memory, policy = data.get("memory"), data.get("policy")
            refused = data.get("memory_refused")
            return cls(
                pid=exact_int(data["pid"]), start=exact_int(data["start"]), how=str(data["how"]),
                mask=CpuSet.parse(str(data["mask"])), target=CpuSet.parse(str(data["target"])),
                placement=Placement.from_dict(data["placement"]),
                memory=None if memory is None else MemoryMode(memory),
                policy=None if policy is None else ExternalMaskPolicy(policy),
                pools=tuple((printable(str(k)), printable(str(v))) for k, v in dict(pools).items()),
                written=float(data.get("written") or 0.0),
                drift=_causes(dict(drift)),
                last_drift=None if last_drift is None else printable(str(last_drift)),
                requested=None if requested is None else (Placement.from_dict(requested["placement"]),
                                                          CpuSet.parse(str(requested["target"]))),
                memory_refused=refused if refused in LIFT else None,  # a closed set: any other word is no fact
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def placed_alike(self, other: Record | None) -> bool:
        """True when ``other`` records the same placement (the time and the drift seen since may differ)."""
        return other is not None and _written(self, _PLACED) == _written(other, _PLACED)

    def same_pin(self, other: Record | None) -> bool:
        """True when ``other`` records the same pin (only the time written may differ)."""
        return other is not None and _written(self, _WRITTEN) == _written(other, _WRITTEN)


#: What two records may differ in and still say the same: the time written; and, for one placement, the drift.
_WRITTEN = ("written",)
_PLACED = ("written", "drift", "last_drift")


def _written(record: Record, leaving: tuple[str, ...]) -> dict[str, Any]:
    """The record as its file holds it, less ``leaving``: compared so, a record read back from its file (its pools
    in the file's order) is the record that was written."""
    return {k: v for k, v in record.as_dict().items() if k not in leaving}


def drift_words(drift: tuple[tuple[str, int], ...]) -> str:
    """A record's drift in a table cell: ``3 cpuset`` (how many, the cause seen last), ``-`` for none."""
    total = sum(count for _, count in drift)
    return f"{total} {drift[-1][0]}" if total else "-"


def _count(value: object) -> int:
    found = exact_int(value)
    if found < 0:
        raise ValueError(f"not a count: {value!r}")
    return found


def _causes(drift: Mapping[str, object]) -> tuple[tuple[str, int], ...]:
    """A record's drift counts, each cause a :class:`numapin.pinning.drift.DriftCause` or counted as ``unknown``;
    the order kept (the cause seen last ends it)."""
    from .drift import UNKNOWN_CAUSE, DriftCause

    known = {cause.value for cause in DriftCause}
    counts: dict[str, int] = {}
    for cause, n in drift.items():
        word = cause if cause in known else UNKNOWN_CAUSE
        counts[word] = counts.pop(word, 0) + _count(n)
    return tuple(counts.items())


def exact_int(value: object) -> int:
    """``value`` where it is an int (a bool is none): what a file of numapin's holds, or TypeError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"not an int: {value!r}")
    return value


# -- writing ----------------------------------------------------------------------------


def publish(record: Record, ready: set[str] | None = None) -> str | None:
    """Write ``record`` for its process, replacing its earlier one; the path written, or None.

    ``ready`` holds the folders this process has checked and swept already (its
    pin state's): each is made if need be, and what dead processes left there
    removed, once a process. Every write goes through a folder checked on its
    descriptor (:class:`numapin.base.files.Folder`). Never raises: a folder that
    cannot be made or written is one debug line.
    """
    checked = set() if ready is None else ready
    data = json_text(record.as_dict()).encode()  # json's import would cost a worker pinned at start-up more
    ns = namespace()
    name = file_name(record.pid, record.start, ns)
    for path in folders():
        try:
            first = path not in checked
            with Folder.open(path, {os.geteuid()}, create=first) as folder:
                folder.replace(name, data, 0o644)
                if first:
                    checked.add(path)
                    _sweep(folder, name, ns)
        except OSError as exc:
            log.debug("pin record not written in %s: %s", path, exc)
            continue
        return os.path.join(path, name)
    return None


def _sweep(folder: Folder, keep: str, ns: int, start_of: Callable[[int], int | None] = start_time) -> None:
    """Remove the stale records and unfinished writes of namespace ``ns`` in ``folder`` (those this user may
    remove)."""
    try:
        names = folder.names()
    except OSError:
        return
    for name in names:
        if name != keep and _stale(name, ns, start_of):
            folder.remove(name)


def _stale(name: str, ns: int, start_of: Callable[[int], int | None] = start_time,
           named: tuple[int, int, int] | None = None) -> bool:
    """A record of namespace ``ns`` whose process is gone (or whose id names another now), or a write of one
    whose writer is gone. Another namespace's files are never stale here: its ids name other processes.
    ``named``: what :func:`_named` makes of ``name``, when the caller has it."""
    if name.endswith(".tmp"):
        record, _, rest = name.rpartition(".json.")
        writer = decimal(rest.removesuffix(".tmp"))
        named = _named(f"{record}.json".replace(DECLARATION, ".json"))
        return named is not None and named[2] == ns and writer is not None and writer > 0 \
            and not os.path.exists(f"/proc/{writer}")
    named = named or _named(name.replace(DECLARATION, ".json"))  # a declaration is stale with its process
    return named is not None and named[2] == ns and start_of(named[0]) != named[1]


def _named(name: str) -> tuple[int, int, int] | None:
    """``(pid, start, namespace)`` of a file named ``PID-START-NS.json`` (ASCII digits only), else None."""
    parts = name.removesuffix(".json").split("-")
    numbers = [decimal(part) for part in parts]
    if not name.endswith(".json") or len(numbers) != 3 or None in numbers:
        return None
    pid, start, ns = numbers
    if pid is None or start is None or ns is None or pid <= 0 or name != file_name(pid, start, ns):
        return None
    return pid, start, ns


def withdraw(pid: int | None = None) -> None:
    """Remove the record of process ``pid`` (default: this one), wherever this user wrote it."""
    target = os.getpid() if pid is None else pid
    start = start_time(target)
    if start is None:
        return
    name = file_name(target, start)
    for path in folders():
        try:
            with Folder.open(path, {os.geteuid()}) as folder:
                folder.remove(name)
        except OSError:
            continue


def stamp(entry: Record) -> Record:
    """``entry`` with the time it is written."""
    return replace(entry, written=time.time())


# -- reading ----------------------------------------------------------------------------


def _read(folder: Folder, name: str, uid: int | None, named: tuple[int, int, int] | None = None,
          ns: int | None = None) -> Record | None:
    """The record in ``name``, when it can be believed: the folder and the file belong to the process's
    owner (or root), the file is of PID namespace ``ns`` (default: this process's), and the content names
    the process the file's name does. ``named``: what :func:`_named` makes of ``name``, when the caller has it."""
    named = named or _named(name)
    if named is None or named[2] != (namespace() if ns is None else ns) or uid is None \
            or folder.owner not in (uid, 0):
        return None
    found = folder.read(name, CAP)
    if found is None or found[1] not in (uid, 0):
        return None
    data = json_value(found[0])
    record = Record.from_dict(data) if isinstance(data, dict) else None
    return record if record is not None and (record.pid, record.start) == named[:2] else None


#: The largest record a reader takes (a real one is under a kilobyte).
CAP = 1 << 16


def lookup(pid: int, start: int | None = None, uid: int | None = None, seen: Seen | None = None) -> Record | None:
    """The record of the live process ``pid``, or None (none written, none to believe, or left by a process
    now gone). ``start``, ``uid``: its start time and owner, where the caller read them; ``seen``: what the caller
    reads of it (its view, :func:`numapin.pinning.folders.places`)."""
    found = locate(pid, start, uid, seen)
    return None if found is None else found[0]


def locate(pid: int, start: int | None = None, uid: int | None = None,
           seen: Seen | None = None) -> tuple[Record, Where] | None:
    """The record of the live process ``pid`` and where it lies (where a keeper writes it again), looked for in
    the folders :func:`numapin.pinning.folders.places` names (``start``, ``uid``, ``seen`` as for :func:`lookup`)."""
    start = start if start is not None else start_time(pid)
    uid = uid if uid is not None else owner(pid)
    looked = None if start is None or uid is None else places(pid, start, uid, seen)
    if looked is None or start is None or uid is None:
        return None
    inner, ns, where = looked
    name = file_name(inner, start, ns)
    for path, through in where:
        try:
            with Where(path, name, through).open({uid, 0}) as folder:
                found = _read(folder, name, uid, (inner, start, ns), ns)
        except (OSError, ValueError):
            continue
        if found is not None:
            if through is None:
                return found, Where(path, name)
            return replace(found, pid=pid), Where(path, name, through, inner)
    return None


def rewrite(record: Record, where: Where) -> bool:
    """Write ``record`` again where this very look finds its process's record (``where``: where it was read), as
    the process's owner's file (root keeping a user's worker writes in that user's folder, never in its own);
    whether it was written. A container's process's record names it by its own id there, as it wrote it. Never
    raises: one debug line.

    The folder is found again now, by the rules of a read (resolved one name at a time from the process's root,
    for a container's), and must be the process's owner's; the record must still lie in it, believed as a read
    believes it, and is replaced through the descriptor it was just read by. So a mount laid over the folder since
    the last look (a user's own namespace binding a root-owned folder of the host there) is never written
    through, and a record that disappeared is not written again."""
    uid = owner(record.pid)
    named = _named(where.name)
    if uid is None or named is None or named[:2] != (where.inner or record.pid, record.start):
        return False
    data = record.as_dict()
    if where.inner is not None:
        data["pid"] = where.inner
    try:
        with where.open({uid}) as folder:
            if _read(folder, where.name, uid, named, named[2]) is None:
                log.debug("pin record of process %d no longer in %s: not written again", record.pid, where.folder)
                return False
            folder.replace(where.name, json_text(data).encode(), 0o644, owner=uid)
    except OSError as exc:
        log.debug("pin record of process %d not written in %s: %s", record.pid, where.folder, exc)
        return False
    return True


def across(pids: Iterable[int], start_of: Callable[[int], int | None] = start_time,
           owner_of: Callable[[int], int | None] | None = None, *, may_be_worker: Callable[[int], bool] | None = None,
           deadline: float | None = None,
           namespaces_of: Callable[[int], tuple[int, int]] = namespaces) -> tuple[dict[int, tuple[Record, Where]], int]:
    """The records of those of ``pids`` that run in another mount or PID namespace than this process (a
    container's workers, seen from the host or from a DaemonSet with the host's PIDs), by their PID here, each
    read in its own root under its own id; and how many of them could not be looked into (a process whose
    root this user may not open). Another user's processes, whose namespaces only their owner or root may
    see, are not counted: ``ps`` counts them once, as processes it could not look into.

    What a container's processes cost is bounded before it is spent, since their environments and folders are
    theirs to shape: only one that may be a worker (``may_be_worker``: it holds a GPU; default, every one) has
    its environment read for a folder of its own choosing, every other is looked for in its user's usual folders
    there; a folder is resolved within :data:`numapin.base.files.MAX_DEPTH` names; and past ``deadline``
    (``time.monotonic()``), checked at every process and folder, the scan ends in a :class:`ScanTimeout`.
    ``namespaces_of``: a process's namespaces, where the caller keeps them between scans."""
    mine = namespaces("self")
    groups: dict[tuple[int, int], list[int]] = {}
    for pid in pids:
        ScanTimeout.past(deadline, "among the processes of other namespaces")
        try:
            key = namespaces_of(pid)
        except ProcessError:
            continue
        if key != mine:
            groups.setdefault(key, []).append(pid)
    found: dict[int, tuple[Record, Where]] = {}
    unread = 0
    for (_, ns), members in groups.items():
        got, missed = _in_namespace(ns, members, start_of, owner_of or owner, may_be_worker or (lambda pid: True),
                                    deadline)
        found.update(got)
        unread += missed
    return found, unread


def _in_namespace(ns: int, pids: list[int], start_of: Callable[[int], int | None],
                  owner_of: Callable[[int], int | None], may_be_worker: Callable[[int], bool],
                  deadline: float | None) -> tuple[dict[int, tuple[Record, Where]], int]:
    """The records of ``pids``, processes of one mount namespace and PID namespace ``ns``, read under the root
    of the first whose root may be opened; how many could not be looked into.

    Believed as in this namespace, and more: the file lies in a folder of the process's own root (reached
    without following a link), is named by the process's id in its namespace, its start time and namespace
    ``ns``, and says the same inside; folder and file are its owner's or root's. So a container that writes
    records naming another namespace's processes (the host's, PID 1 of another container) names no
    process that is looked for there. Each folder is opened once, and each record asked for by its name (a
    folder's listing is the container's to make long)."""
    through, root = None, -1
    for pid in pids:
        try:
            root = root_of(pid)
        except OSError:
            continue
        through = pid
        break
    if through is None:
        return {}, len(pids)
    wanted: dict[str, list[tuple[int, int, str, int, int]]] = {}  # folder -> (pid, uid, name, inner, start)
    try:
        for pid in pids:
            ScanTimeout.past(deadline, "among the processes of other namespaces")
            start, uid = start_of(pid), owner_of(pid)
            try:
                inner = procfs.inner_pid(pid)
                inner_uid = procfs.inner_uid(pid, uid) if uid is not None else None
                env = procfs.environ(pid) if may_be_worker(pid) else {}
            except ProcessError:
                continue
            if start is None or uid is None or inner_uid is None:
                continue
            name = file_name(inner, start, ns)
            for path in folders_of(inner_uid, env, own=True):
                wanted.setdefault(path, []).append((pid, uid, name, inner, start))
        found: dict[int, tuple[Record, Where]] = {}
        for path, looked in wanted.items():
            ScanTimeout.past(deadline, "among the processes of other namespaces")
            looked = [entry for entry in looked if entry[0] not in found]  # a process's first folder wins
            if not looked:
                continue
            try:
                folder = inside(root, through, path, {uid for _, uid, *_ in looked} | {0})
            except (OSError, ValueError):
                continue
            with folder:
                for pid, uid, name, inner, start in looked:
                    entry = _read(folder, name, uid, (inner, start, ns), ns)
                    if entry is not None:
                        found[pid] = replace(entry, pid=pid), Where(path, name, through, inner)
    finally:
        os.close(root)
    return found, 0


def entries(uids: Iterable[int] = (), start_of: Callable[[int], int | None] = start_time,
            owner_of: Callable[[int], int | None] | None = None) -> dict[int, Record]:
    """Every live process's record in the folders of these users (and this one's), by process id.

    ``start_of`` and ``owner_of`` give a process's start time and owner (a caller
    that read every ``/proc/PID/stat`` already hands its answers, so none is read
    twice). A record counts only where :func:`lookup` would believe it. Stale
    records met on the way are removed where this user may remove them.
    """
    owners = {*uids, os.geteuid()}
    owner_of_pid = owner_of or owner
    ns = namespace()
    found: dict[int, Record] = {}
    by_owner: set[int] = set()  # the processes whose record came from their owner's own folder
    for path in reading_folders(owners):
        try:
            with Folder.open(path, owners | {0}) as folder:
                for name in folder.names():
                    named = _named(name)
                    if _stale(name, ns, start_of, named):
                        folder.remove(name)
                        continue
                    if named is None or named[2] != ns or named[0] in by_owner:
                        continue
                    uid = owner_of_pid(named[0])
                    # A record in a folder of root's yields to one in the owner's own (as lookup reads them).
                    if named[0] in found and folder.owner != uid:
                        continue
                    record = _read(folder, name, uid, named)
                    if record is not None:
                        found[named[0]] = record
                        if folder.owner == uid:
                            by_owner.add(named[0])
        except OSError:
            continue
    return found
