"""One process as one scan sees it (:class:`ProcessView`), the views of one scan (:class:`Views`), and what a
long-running scanner keeps of a process between scans (:class:`Kept`).

A view reads each of the process's ``/proc`` files at most once, and only when a question needs it, through
:mod:`numapin.facts.procfs` (psutil's ``oneshot()`` is the model): a scan of a thousand shells reads of each its
entry and its open files, nothing more. The judge reads a process through its view alone, so that ``ps``,
``threads`` and ``doctor --pid`` read the same files the same way, each once. A view made with :class:`Kept`
takes from the scans before what the process cannot have changed while it lives (its namespaces, its
environment, its pod), and its GPU device files while its count of open files stays the same.
"""

from __future__ import annotations

import os

from ..base.errors import NoSuchProcess, ProcessError
from ..base.frozen import frozen, replace
from ..facts import procfs
from ..facts.pod import Pod, pod_of
from ..pinning.folders import namespaces

# A worker's record, declaration, rehearsal and memory are read where one is judged: a scan of a thousand shells
# imports none of their readers.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from collections.abc import Callable, Collection, Container, Iterable, Mapping
    from typing import Any

    from ..cpuset import CpuSet
    from ..kernel.residency import Residency
    from ..pinning.declaration import Declaration
    from ..pinning.record import Record
    from ..pinning.rehearsed import Rehearsed

__all__ = ["Kept", "ProcessView", "Task", "Views"]


@frozen
class _Held:
    """What a process held when last looked at: when its ``/proc`` entry was made (which names it while it lives),
    how many files it had open, its GPU device files among them, its namespaces, environment and pod."""

    born: int
    files: int | None
    devices: tuple[str, ...] | None = None
    namespaces: tuple[int, int] | None = None
    environ: dict[str, str] | None = None
    """Its environment as it started (what ``/proc/PID/environ`` shows does not change as it runs)."""
    pod: tuple[Pod | None] | None = None
    """Its pod, where it runs in one (a pod's processes stay in its cgroups)."""


class Kept:
    """What a long-running scanner (the exporter) keeps of each process between scans, by pid.

    A process seen before, whose entry is the same and whose count of open files did not change, costs one
    ``stat`` of its entry and one of its ``fd`` folder a scan; its files are read again once the count changes
    (a process that opens a GPU opens several files), or every scan where the kernel shows no count (before
    Linux 6.2). A process that may be a worker has its namespaces read again each scan."""

    def __init__(self) -> None:
        self.processes: dict[int, _Held] = {}

    def forget_all_but(self, pids: Collection[int]) -> None:
        """Forget the processes no longer listed (ended: their ids may name others later)."""
        for pid in set(self.processes) - set(pids):
            del self.processes[pid]


class ProcessView:
    """Process ``pid`` as one scan sees it: ``owner`` and ``born`` (when its ``/proc`` entry was made) where the
    scan read its entry; every other file read on first use, once."""

    __slots__ = ("_devices", "_held", "_kept", "_now", "_stat", "_views", "born", "owner", "pid")

    def __init__(self, pid: int, owner: int | None = None, born: int | None = None, kept: Kept | None = None,
                 views: Views | None = None) -> None:
        self.pid, self.owner, self.born, self._views = pid, owner, born, views
        self._kept = kept if born is not None else None
        held = None if self._kept is None else self._kept.processes.get(pid)
        self._held = held if held is not None and held.born == born else None  # the same process as then
        self._stat: list[procfs.Stat | None] = []
        self._devices: list[tuple[str, ...] | ProcessError] = []
        self._now: dict[str, Any] = {}  # what this scan read, by name

    def stat(self) -> procfs.Stat | None:
        """Its ``stat`` (None where it is gone)."""
        if not self._stat:
            try:
                self._stat.append(procfs.stat(self.pid))
            except ProcessError:
                self._stat.append(None)
        return self._stat[0]

    def alive(self) -> procfs.Stat:
        """Its ``stat``; NoSuchProcess where it is gone, or has exited (a zombie: what another tool reads of it is
        gone)."""
        seen = self.stat()
        if seen is None:
            raise NoSuchProcess(self.pid)
        return procfs.alive(self.pid, seen)

    @property
    def start(self) -> int | None:
        return None if (seen := self.stat()) is None else seen.start

    def ours(self) -> tuple[int, int]:
        """This process's mount and PID namespaces, read once a scan (what this view's are compared with)."""
        return self._views.ours() if self._views is not None else namespaces("self")

    def user(self) -> int | None:
        """Its owner: the scan's reading of its entry, else read now (None where it is gone)."""
        if self.owner is None:
            try:
                self.owner, self.born = procfs.seen(self.pid)
            except ProcessError:
                return None
        return self.owner

    def parent(self) -> ProcessView | None:
        """The view of its parent, in the same scan (None for a process without one, or gone)."""
        seen = self.stat()
        if seen is None or not seen.ppid:
            return None
        return self._views.of(seen.ppid) if self._views is not None else ProcessView(seen.ppid)

    def devices(self, device: re.Pattern[str]) -> tuple[str, ...]:
        """The GPU device files it holds open (``device``: their pattern), sorted; its errors raised again each
        time asked (AccessDenied for another user's)."""
        if not self._devices:
            self._devices.append(self._devices_now(device))
        found = self._devices[0]
        if isinstance(found, ProcessError):
            raise found
        return found

    def _devices_now(self, device: re.Pattern[str]) -> tuple[str, ...] | ProcessError:
        files = None if self._kept is None else procfs.open_files(self.pid)
        held = self._held
        if held is not None and held.devices is not None and files is not None and files == held.files:
            return held.devices
        try:
            # Only a target naming a dev/ folder is matched: a thousand shells' pipes and sockets are passed over.
            found = tuple(sorted({"/" + m.group(1) for m in map(device.search, (t for t in procfs.fd_targets(self.pid)
                                                                                   if "dev/" in t)) if m}))
        except ProcessError as exc:
            return exc
        self._keep(files=files, devices=found)
        return found

    def namespaces(self, *, may_be_worker: bool) -> tuple[int, int]:
        """Its mount and PID namespaces: kept from an earlier scan for a process that holds no GPU (one that may be
        a worker, whose records they lead to, is read each scan)."""
        found: tuple[int, int] = self._once("namespaces", lambda: namespaces(self.pid), kept=not may_be_worker)
        return found

    def environ(self) -> dict[str, str]:
        """Its environment (AccessDenied, NoSuchProcess as :func:`numapin.facts.procfs.environ`, raised again each
        time asked)."""
        found: dict[str, str] = self._once("environ", lambda: procfs.environ(self.pid))
        return found

    def pod(self) -> Pod | None:
        """The Kubernetes pod it runs in, from its cgroup path."""
        found: tuple[Pod | None] = self._once("pod", lambda: (pod_of(self.pid),))
        return found[0]

    def record(self) -> Record | None:
        """numapin's record of it: the scan's, where the scan looked for it, else looked up (once)."""
        if self._views is not None and self.pid in self._views.looked:
            return self._views.records.get(self.pid)

        def look() -> tuple[Record | None]:
            from ..pinning.record import lookup

            return (lookup(self.pid, self.start, self.user(), self),)

        found: tuple[Record | None] = self._now_only("record", look)
        return found[0]

    def tasks(self) -> tuple[Task, ...]:
        """Each of its threads now, with its mask and its ``stat`` (the main thread's is the process's); one that
        ended since the listing is left out. NoSuchProcess where the process is gone."""
        def read() -> tuple[Task, ...]:
            from ..kernel.affinity import LinuxThreads

            ops, found = LinuxThreads(self.pid), []
            for tid in sorted(procfs.tasks(self.pid)):
                try:
                    mask = ops.get_affinity(tid)
                except OSError:
                    continue  # ended since the listing: no longer one of its threads
                found.append(Task(tid, mask, self.stat() if tid == self.pid else ops.stat(tid)))
            return tuple(found)

        tasks: tuple[Task, ...] = self._now_only("tasks", read)
        return tasks

    def status(self) -> dict[str, str]:
        """Its ``status`` by field (its mask, its thread count...)."""
        found: dict[str, str] = self._now_only("status", lambda: procfs.status(self.pid))
        return found

    def foreign_root(self) -> str | None:
        """The path its files are seen through where its root is not this process's (a container's), else None
        (:func:`numapin.facts.procfs.foreign_root`; None for this process)."""
        found: tuple[str | None] = self._now_only(
            "foreign_root", lambda: (procfs.foreign_root(self.pid) if self.pid != os.getpid() else None,))
        return found[0]

    def inner_uid(self, uid: int) -> int | None:
        """What the host's user ``uid`` is in its user namespace (:func:`numapin.facts.procfs.inner_uid`: its
        ``uid_map``, read once)."""
        found: tuple[int | None] = self._now_only(f"inner_uid {uid}", lambda: (procfs.inner_uid(self.pid, uid),))
        return found[0]

    def own_memory(self) -> int | None:
        """The bytes of memory it made itself and holds resident (:func:`numapin.facts.procfs.own_memory`)."""
        size: int | None = self._now_only("own_memory", lambda: procfs.own_memory(self.pid))
        return size

    def residency(self, ranges: Iterable[tuple[int, int]] = ()) -> Residency:
        """Where its pages lie, node by node (``ranges`` as :func:`numapin.kernel.residency.residency`): its
        ``numa_maps``, read once, with the ranges of the first ask (AccessDenied for another user's)."""
        from ..kernel.residency import residency

        found: Residency = self._now_only("residency", lambda: residency(self.pid, ranges))
        return found

    def declaration(self, listed: Container[str] | None = None) -> Declaration:
        """The host buffers it declared (``listed``: the declarations a scan found in this namespace's folders)."""
        from ..pinning.declaration import declared

        found: Declaration = self._now_only("declaration",
                                            lambda: declared(self.pid, self.start, listed, self.user(), self))
        return found

    def rehearsal(self, root: str) -> Rehearsed | None:
        """Its entry among the processes a rehearsal under ``root`` started, where it is one."""
        from ..pinning.rehearsed import of

        start = self.start
        found: tuple[Rehearsed | None] = self._now_only("rehearsal",
                                                        lambda: (None if start is None else of(root, self.pid, start),))
        return found[0]

    def _once(self, name: str, read: Callable[[], Any], *, kept: bool = True) -> Any:
        """``name`` read once this scan: from the scans before where ``kept`` allows, else by ``read`` (and kept)."""
        held = getattr(self._held, name) if self._held is not None and kept and name not in self._now else None
        if held is not None:
            self._now[name] = held

        def read_and_keep() -> Any:
            found = read()
            self._keep(**{name: found})
            return found

        return self._now_only(name, read_and_keep)

    def _now_only(self, name: str, read: Callable[[], Any]) -> Any:
        """``name`` read once this scan and never kept (it can change while the process lives); its error raised
        again each time asked, never read twice."""
        if name not in self._now:
            try:
                self._now[name] = read()
            except ProcessError as exc:
                self._now[name] = exc
        found = self._now[name]
        if isinstance(found, ProcessError):
            raise found
        return found

    def _keep(self, **changes: Any) -> None:
        if self._kept is not None and self.born is not None:
            self._held = replace(self._held or _Held(self.born, None), **changes)
            self._kept.processes[self.pid] = self._held


@frozen
class Task:
    """One thread of a process as a view read it: its mask and its ``stat`` (its name and last CPU; None where it
    ended between the two reads)."""

    tid: int
    cpus: CpuSet
    stat: procfs.Stat | None


class Views:
    """The views of one scan, by pid: each process looked at once, whoever asks of it (its own judgement, a
    worker's ancestors asked who placed it); the records the scan read; and what a long-running scanner keeps
    between scans."""

    def __init__(self, kept: Kept | None = None) -> None:
        self.kept = kept
        self.by_pid: dict[int, ProcessView] = {}
        self._ours: tuple[int, int] | None = None
        self.records: Mapping[int, Record] = {}
        """The records the scan found, by pid."""
        self.looked: Container[int] = ()
        """The processes whose records the scan looked for (those of :attr:`records`, and those without one); a
        view of any other looks its process's record up itself."""

    def ours(self) -> tuple[int, int]:
        """This process's mount and PID namespaces, read once a scan."""
        if self._ours is None:
            self._ours = namespaces("self")
        return self._ours

    def seen(self, pid: int, owner: int, born: int) -> ProcessView:
        """The view of ``pid``, whose entry the scan read (its owner, when the entry was made)."""
        self.by_pid[pid] = found = ProcessView(pid, owner, born, self.kept, self)
        return found

    def of(self, pid: int) -> ProcessView:
        """The view of ``pid``: the scan's, or a new one for a process its listing did not show."""
        found = self.by_pid.get(pid)
        if found is None:
            self.by_pid[pid] = found = ProcessView(pid, views=self)
        return found
