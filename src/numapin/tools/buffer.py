"""``numapin buffer``: fill a host buffer on a GPU's node and say where its pages went and how fast it filled.

For operators sizing pools on a host: the same :func:`numapin.host_buffer` a framework would call, made,
read back and given back. On a terminal, a fill of 1 GiB or more shows its progress (the process's resident
memory growing, read from ``/proc/self/statm``), on standard error.
"""

from __future__ import annotations

import os
import re
import threading

from ..base.errors import UsageError
from ..base.text import format_size
from ..cpuset import CpuSet

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

    from ..pinning.host_buffer import HostBuffer

__all__ = ["describe", "fill", "parse_size"]

_SIZE = re.compile(r"([0-9]{1,15})(?:\.([0-9]{1,6}))?\s*([KMGT]?)(?:IB|I|B)?", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
#: The smallest fill that shows its progress on a terminal.
_SHOWN = 1 << 30


def parse_size(text: str) -> int:
    """Bytes from ``8G``, ``512M``, ``1.5GiB``, ``4096`` (binary units, any case); UsageError for anything else."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise UsageError(f"{text!r} is no size: a number of bytes, or with K, M, G or T (binary: 8G, 512MiB)",
                         value=text)
    whole, part, unit = match.groups()
    scale = _UNITS[unit.upper()]
    size = int(whole) * scale + (int(part) * scale // 10 ** len(part) if part else 0)
    if size <= 0:
        raise UsageError(f"{text!r}: a size from 1 byte", value=text)
    return size


def fill(size: int, *, gpu: int | None = None, node: int | None = None, gpus: list[int] | None = None,
         nodes: list[int] | None = None, hugepages: str | None = None, threads: int | None = None,
         lock: bool = False, progress: TextIO | None = None) -> dict[str, Any]:
    """Make, fill and read back one buffer, then give it back: what :func:`describe` says."""
    from ..pinning.host_buffer import host_buffer

    stop = threading.Event()
    shown = progress is not None and progress.isatty() and size >= _SHOWN
    watcher = threading.Thread(target=_progress, args=(size, stop, progress), daemon=True) if shown else None
    if watcher is not None:
        watcher.start()
    try:
        with host_buffer(size, gpu=gpu, node=node, gpus=gpus, nodes=nodes, hugepages=hugepages, fill_threads=threads,
                         lock=lock) as buf:
            report = _report(buf, _for(gpu, node, gpus, nodes), buf._declared.spread)
    finally:
        stop.set()
        if watcher is not None:
            watcher.join()
    return report


def _for(gpu: int | None, node: int | None, gpus: list[int] | None, nodes: list[int] | None) -> str:
    """Whom the buffer was asked for, in words."""
    if gpus is not None:
        return "GPUs " + ",".join(map(str, gpus))
    if nodes is not None:
        return f"node(s) {CpuSet(nodes)}"
    return f"GPU {gpu}" if gpu is not None else f"node {node}" if node is not None else "this process's GPU"


def _report(buf: HostBuffer, asked: str, spread: bool) -> dict[str, Any]:
    seconds = buf.fill_seconds
    return {"nbytes": buf.nbytes, "for": asked, "spread": spread, "page_size": buf.page_size,
            "huge_bytes": buf.huge_bytes, "threads": buf.fill_threads, "fill_seconds": round(seconds, 4),
            "bytes_per_second": int(buf.nbytes / seconds) if seconds else None,
            "on_nodes": {str(n): b for n, b in sorted(buf.on_nodes.items())}, "locked": buf.locked,
            "nics": list(buf.nics), "notes": list(buf.notes)}


def describe(report: dict[str, Any]) -> str:
    """The report as lines of text."""
    rate = report["bytes_per_second"]
    spread = "spread over " if report["spread"] else "for "
    lines = [f"numapin buffer: {format_size(report['nbytes'])} {spread}{report['for']}, "
             f"{format_size(report['page_size'])} pages, filled by {report['threads']} thread(s) in "
             f"{report['fill_seconds']:.2f} s" + (f" ({format_size(rate)}/s)" if rate else "")]
    total = sum(report["on_nodes"].values()) or 1
    lines.append("pages: " + (", ".join(f"node {n} {format_size(b)} ({100 * b / total:.0f}%)"
                                        for n, b in report["on_nodes"].items()) or "none resident"))
    lines.append("nearest NICs: " + (", ".join(report["nics"]) or "none shown by this machine"))
    lines.extend(f"note: {note}" for note in report["notes"])
    return "\n".join(lines)


def _progress(size: int, stop: threading.Event, out: TextIO | None) -> None:
    from .progress import Bar

    bar = Bar(out, f"filling {format_size(size)}")
    page = os.sysconf("SC_PAGE_SIZE")
    start = _resident(page)
    while not stop.wait(0.2):
        bar.update(max(0, _resident(page) - start) / size)
    bar.close()


def _resident(page: int) -> int:
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * page
    except (OSError, ValueError, IndexError):
        return 0
