"""A process's declared host buffers (:func:`numapin.host_buffer`): what it made, for which node, with which
pages, in a file beside its record that numapin's tools read from outside.

The file is ``PID-START-NS.buffers.json``, under the record's names, folders and owner rules
(:mod:`numapin.pinning.folders`). Apart from the record, because the process that needs buffers most has no
pin to record (one process driving GPUs on two nodes, a buffer for each), and a buffer made or closed must
never rewrite what a pin recorded (or the keeper's drift counts).
"""

from __future__ import annotations

import os

from ..base.files import Folder
from ..base.frozen import frozen
from ..base.logger import log
from ..base.text import Written, json_text, json_value
from ..cpuset import CpuSet
from .folders import DECLARATION, Where, declaration_name, folders, owner, places, reading_folders, start_time
from .record import CAP, VERSION, exact_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Container, Iterable, Mapping
    from typing import Any

    from .folders import Seen

__all__ = ["LISTED_AT_MOST", "Declaration", "Declared", "declare", "declared", "present", "unbalanced"]


@frozen
class Declared:
    """A host buffer as its process declared it: its range, the nodes it was made for, its pages."""

    address: int
    nbytes: int
    nodes: CpuSet
    page_size: int
    asked_page_size: int
    """The page size asked for (``hugepages=``): larger than ``page_size`` where the node had too few free."""
    locked: bool = False
    spread: bool = False
    """Spread over :attr:`nodes` page by page on purpose (``nodes=[...]``), rather than bound to them."""
    transparent: bool = False
    """It asked for transparent huge pages (``hugepages="thp"``)."""
    huge_bytes: int = 0
    """Its bytes in transparent huge pages, read back after the fill."""

    def as_dict(self) -> dict[str, Any]:
        found = {"address": self.address, "nbytes": self.nbytes, "node": str(self.nodes), "page_size": self.page_size,
                 "asked_page_size": self.asked_page_size, "locked": self.locked}
        # Said only where set: a declaration of 256 plain buffers stays as small as before.
        return found | ({"spread": True} if self.spread else {}) | (
            {"transparent": True, "huge_bytes": self.huge_bytes} if self.transparent else {})

    def text(self) -> Written:
        """Its entry of a declaration, written once by its owner (:func:`declare` puts it in as it is)."""
        return Written(json_text(self.as_dict()))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Declared | None:
        try:
            found = cls(exact_int(data["address"]), exact_int(data["nbytes"]), CpuSet.parse(str(data["node"])),
                        exact_int(data["page_size"]), exact_int(data["asked_page_size"]), data.get("locked") is True,
                        data.get("spread") is True, data.get("transparent") is True,
                        exact_int(data.get("huge_bytes", 0)))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return found if found.address >= 0 and found.nbytes > 0 and found.page_size > 0 and found.huge_bytes >= 0 \
            else None


def unbalanced(on_nodes: Mapping[int, int], spread: CpuSet) -> list[str]:
    """Where a spread over ``spread`` lost its balance: each node holding under half its even share of the pages
    (a node that ran out of free memory, or a fill no policy spread), in words; empty where none did."""
    total = sum(on_nodes.values())
    if not total or not spread:
        return []
    even = total / len(spread)
    return [f"spread over node(s) {spread} lost its balance: node {n} holds {100 * on_nodes.get(n, 0) / total:.0f}% "
            f"of its pages (an even share is {100 / len(spread):.0f}%)"
            for n in spread if 2 * on_nodes.get(n, 0) < even]


@frozen
class Declaration:
    """What a process declared: its buffers listed one by one, and how many more it holds (and their bytes)."""

    buffers: tuple[Declared, ...] = ()
    more: int = 0
    more_bytes: int = 0


def declare(entries: Iterable[Written], *, more: int = 0, more_bytes: int = 0) -> None:
    """Declare this process's open host buffers, each its entry (:meth:`Declared.text`: written once, when the
    buffer is made; none: the declaration is removed), and how many more it holds than it lists (``more``, of
    ``more_bytes`` bytes). Never raises: one debug line, as a record's write."""
    listed = list(entries)
    pid, start = os.getpid(), start_time(os.getpid())
    if start is None:
        return
    name = declaration_name(pid, start)
    content: dict[str, Any] = {"version": VERSION, "pid": pid, "start": start, "buffers": listed}
    if more:
        content["more"] = {"buffers": more, "nbytes": more_bytes}
    data = json_text(content).encode()
    for path in folders():
        try:
            with Folder.open(path, {os.geteuid()}, create=bool(listed)) as folder:
                if listed:
                    folder.replace(name, data, 0o644)
                else:
                    folder.remove(name)
        except OSError as exc:
            log.debug("host buffers not declared in %s: %s", path, exc)
            continue
        return


def present(uids: Iterable[int]) -> frozenset[str]:
    """The names of the declarations in this namespace's folders of these users (and this one's): listed once by
    a caller that asks :func:`declared` of many processes (``ps``), so that a process that declared nothing
    costs no folder opened."""
    names: set[str] = set()
    for path in reading_folders({*uids, os.geteuid()}):
        try:
            names.update(name for name in os.listdir(path) if name.endswith(DECLARATION))
        except OSError:
            continue
    return frozenset(names)


def declared(pid: int, start: int | None = None, listed: Container[str] | None = None,
             uid: int | None = None, seen: Seen | None = None) -> Declaration:
    """The host buffers live process ``pid`` declared, believed as its record is (its owner's or root's file, in
    its owner's folders, of its namespace, naming it), looked for where :func:`numapin.pinning.folders.places`
    says. Nothing where none is declared or none can be believed. ``start``: its start time, where the caller
    read it; ``listed``: what :func:`present` found in this namespace's folders, where the caller listed them;
    ``uid``: its owner, where the caller read it; ``seen``: what the caller reads of it (its view)."""
    start, uid = start if start is not None else start_time(pid), uid if uid is not None else owner(pid)
    looked = None if start is None or uid is None else places(pid, start, uid, seen)
    if looked is None or start is None or uid is None:
        return Declaration()
    inner, ns, where = looked
    name = declaration_name(inner, start, ns)
    if listed is not None and name not in listed and all(through is None for _, through in where):
        return Declaration()  # this namespace's folders, listed already: it declared nothing
    for path, through in where:
        try:
            with Where(path, name, through).open({uid, 0}) as folder:
                if folder.owner not in (uid, 0):
                    continue
                found = folder.read(name, CAP)
        except (OSError, ValueError):
            continue
        if found is None or found[1] not in (uid, 0):
            continue
        data = json_value(found[0])
        if not isinstance(data, dict) or data.get("version") != VERSION or data.get("pid") != inner \
                or data.get("start") != start or not isinstance(data.get("buffers"), list):
            continue
        more = data.get("more")
        counts = (more.get("buffers"), more.get("nbytes")) if isinstance(more, dict) else (0, 0)
        return Declaration(tuple(b for b in (Declared.from_dict(item) for item in data["buffers"][:LISTED_AT_MOST]
                                             if isinstance(item, dict)) if b is not None),
                           *(n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 0 for n in counts))
    return Declaration()


#: The most buffers a declaration lists one by one; past them it counts the rest (``more``). So a process of many
#: small buffers writes a declaration of bounded size (each write O(1) however many it holds), which readers take
#: whole, under the read cap; and a forged one of more costs a reader no more.
LISTED_AT_MOST = 256
