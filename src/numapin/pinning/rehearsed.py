"""What a rehearsal would have done, kept beside the rehearsed machine.

A rehearsal (``numapin exec --root DIR``, ``NUMAPIN_FSROOT=DIR`` or the start-up hook under it, on a host whose
CPUs are not that machine's) pins nothing: the kernel here has none of the machine's CPUs. So that the whole
flow can still be seen — eight workers started, each with its GPU and CPUs — each rehearsed process leaves the
placement decided for it in ``DIR/run/numapin/rehearsed``, named by its pid and start time, and
``numapin ps --root DIR`` lists it with the verdict ``rehearsal``. It is written under ``DIR`` only: a ``ps`` of
the live host never reads it, and it is never taken for a placement (numapin's own records are elsewhere).

An entry is written only under a folder of the user's own (or root's) that no one else may change. A folder given
as ``--root`` is the user's choice of what to believe about a machine; still, each entry is read capped, parsed
strictly, and believed of a process only while that process lives with the start time written
and belongs to the file's owner (or the file is root's).
"""

from __future__ import annotations

import os
import time

from ..base.files import Folder, settled
from ..base.frozen import frozen
from ..base.logger import log
from ..base.text import json_text, printable
from .folders import owner, start_time
from .record import HOW, exact_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from ..placement.modes import Placement

__all__ = ["FOLDER", "Rehearsed", "listed", "note", "of"]

#: Under the rehearsed machine's root, where the machine's own ``/run`` would be.
FOLDER = "run/numapin/rehearsed"
#: The most entries read, and bytes of one: a rehearsal is a node's workers, a few hundred at most.
_MOST = 4096
_CAP = 64 << 10
_VERSION = 1


@frozen
class Rehearsed:
    """One rehearsed process: what would have been applied to it on the machine rehearsed."""

    pid: int
    start: int
    """Its start time (clock ticks since boot): with ``pid``, one process for the boot."""
    how: str
    """``exec`` or ``autopin`` (the start-up hook), as a record says it."""
    placement: Placement
    written: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"version": _VERSION, "pid": self.pid, "start": self.start, "how": self.how,
                "placement": self.placement.as_dict(), "written": self.written}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rehearsed | None:
        """The entry a file holds; None for anything else."""
        from ..placement.modes import Placement

        try:
            if data.get("version") != _VERSION or data.get("how") not in HOW:
                return None
            return cls(exact_int(data["pid"]), exact_int(data["start"]), printable(str(data["how"])),
                       Placement.from_dict(data["placement"]), float(data.get("written") or 0.0))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def _name(pid: int, start: int) -> str:
    return f"{pid}-{start}.json"


def note(root: str, placement: Placement, how: str) -> str | None:
    """Leave what a rehearsal decided for this process under ``root`` (the rehearsed machine's); the words that say
    where it was kept and what it holds, or None where it could not be (said at debug: the rehearsal itself goes
    on). What processes that ended left there is removed first."""
    pid, start = os.getpid(), start_time(os.getpid())
    if start is None:
        return None
    path = os.path.join(root, FOLDER)
    # Only into a folder of this user's (or root's) that no one else may change: root rehearsing on another user's
    # folder would otherwise make and write folders wherever a link planted in it leads.
    if not settled(root, {os.geteuid(), 0}):
        log.debug("rehearsal not recorded in %s: %s is not this user's alone", path, root)
        return None
    entry = Rehearsed(pid, start, how, placement, time.time())
    try:
        with Folder.open(path, {os.geteuid()}, create=True) as folder:
            for name in folder.names()[:_MOST]:
                if _ended(name):
                    folder.remove(name)
            folder.replace(_name(pid, start), json_text(entry.as_dict()).encode(), 0o644)
    except OSError as exc:
        log.debug("rehearsal not recorded in %s: %s", path, exc)
        return None
    gpu = "" if placement.gpu is None else f"GPU {placement.gpu}, "
    return f"its placement kept for numapin ps --root {root}: {gpu}CPUs {placement.workers}"


def _ended(name: str) -> bool:
    """Whether the entry ``name`` is of a process that no longer runs (a name of no entry is left alone)."""
    pid, _, start = name.removesuffix(".json").partition("-")
    if not (name.endswith(".json") and pid.isdigit() and start.isdigit()):
        return False
    return start_time(int(pid)) != int(start)


def _folder(root: str) -> Folder | None:
    """The rehearsal folder under ``root``, held open (None where there is none, or of a user it may not be)."""
    try:
        return Folder.open(os.path.join(root, FOLDER), {os.stat(root).st_uid, os.geteuid(), 0})
    except OSError:
        return None


def _believed(folder: Folder, name: str) -> Rehearsed | None:
    """The entry ``name`` of ``folder``, where it is believed: of a live process with the pid and start time of its
    name, which the file's owner runs (or the file is root's)."""
    import json

    if not name.endswith(".json") or _ended(name):
        return None
    read = folder.read(name, _CAP)
    if read is None:
        return None
    data, uid = read
    try:
        entry = Rehearsed.from_dict(json.loads(data))
    except (ValueError, RecursionError):
        return None
    if entry is None or _name(entry.pid, entry.start) != name or uid not in (0, owner(entry.pid)):
        return None
    return entry


def listed(root: str) -> list[Rehearsed]:
    """The processes rehearsed under ``root`` that still run, each as it was left (none where nothing was)."""
    folder = _folder(root)
    if folder is None:
        return []
    with folder:
        return [entry for name in sorted(folder.names())[:_MOST] if (entry := _believed(folder, name)) is not None]


def of(root: str, pid: int, start: int) -> Rehearsed | None:
    """Process ``pid``'s entry under ``root`` (it started at ``start``), asked for by name; None where it has none."""
    folder = _folder(root)
    if folder is None:
        return None
    with folder:
        return _believed(folder, _name(pid, start))
