"""One process as one scan sees it (:class:`ProcessView`), and what a long-running scanner keeps of it between
scans (:class:`Kept`).

A view reads each of the process's ``/proc`` files at most once, and only when a question needs it, through
:mod:`numapin.facts.procfs` (psutil's ``oneshot()`` is the model): a scan of a thousand shells reads of each its
entry and its open files, nothing more. A view made with :class:`Kept` takes from the scans before what the
process cannot have changed while it lives (its namespaces, its environment, its pod), and its GPU device files
while its count of open files stays the same.
"""

from __future__ import annotations

from ..base.errors import ProcessError
from ..base.frozen import frozen, replace
from ..facts import procfs
from ..facts.pod import Pod, pod_of
from ..pinning.folders import namespaces

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from collections.abc import Callable, Collection
    from typing import Any

__all__ = ["Kept", "ProcessView"]


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

    __slots__ = ("_devices", "_held", "_kept", "_now", "_stat", "born", "owner", "pid")

    def __init__(self, pid: int, owner: int | None = None, born: int | None = None, kept: Kept | None = None) -> None:
        self.pid, self.owner, self.born = pid, owner, born
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

    @property
    def start(self) -> int | None:
        return None if (seen := self.stat()) is None else seen.start

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
            found = tuple(sorted({"/" + m.group(1) for m in map(device.search, procfs.fd_targets(self.pid)) if m}))
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
        """Its environment (AccessDenied, NoSuchProcess as :func:`numapin.facts.procfs.environ`)."""
        found: dict[str, str] = self._once("environ", lambda: procfs.environ(self.pid))
        return found

    def pod(self) -> Pod | None:
        """The Kubernetes pod it runs in, from its cgroup path."""
        found: tuple[Pod | None] = self._once("pod", lambda: (pod_of(self.pid),))
        return found[0]

    def _once(self, name: str, read: Callable[[], Any], *, kept: bool = True) -> Any:
        """``name`` read once this scan: from the scans before where ``kept`` allows, else by ``read``."""
        if name in self._now:
            return self._now[name]
        found = getattr(self._held, name) if self._held is not None and kept else None
        if found is None:
            found = read()
            self._keep(**{name: found})
        self._now[name] = found
        return found

    def _keep(self, **changes: Any) -> None:
        if self._kept is not None and self.born is not None:
            self._held = replace(self._held or _Held(self.born, None), **changes)
            self._kept.processes[self.pid] = self._held
