"""Transparent huge pages: what the kernel gives a range that asks for them, and what asking costs.

Read from ``sys/kernel/mm/transparent_hugepage`` (``enabled``, ``defrag``: the bracketed word is the setting;
``hpage_pmd_size``), under any root. Of ``defrag``'s settings, ``always``, ``madvise`` and ``defer+madvise`` make
each huge-page fault of a range that asked for them (``MADV_HUGEPAGE``) reclaim and compact memory in the faulting
thread until a huge page is free: on a host whose memory is fragmented, a pool's fill falls from gigabytes a second
to gigabytes a minute (TensorRT-LLM#15431). ``defer`` wakes kcompactd and takes a base page now; ``never`` does
neither.
"""

from __future__ import annotations

from ..base.frozen import frozen
from ..base.text import decimal
from .host import Host

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os

__all__ = ["FOLDER", "STALLING", "TransparentHugePages", "read_thp", "setting"]

FOLDER = "sys/kernel/mm/transparent_hugepage"
#: ``defrag`` settings under which a fault of a range that asked for huge pages compacts memory synchronously.
STALLING = frozenset({"always", "madvise", "defer+madvise"})
#: The huge page size where the kernel does not say (x86-64's and most arm64 kernels' PMD size).
_PMD = 2 << 20


@frozen
class TransparentHugePages:
    """The kernel's settings: None where a file is absent (a kernel built without THP: ``enabled`` is None)."""

    enabled: str | None
    defrag: str | None
    size: int = _PMD

    @property
    def available(self) -> bool:
        """Whether a range that asks (``MADV_HUGEPAGE``) can get them: ``enabled`` is ``always`` or ``madvise``."""
        return self.enabled in ("always", "madvise")

    @property
    def stalls(self) -> bool:
        """Whether each huge-page fault of a range that asked compacts memory in the faulting thread."""
        return self.available and self.defrag in STALLING

    def stall_words(self) -> str:
        """What the setting does to a pool's fill, and what avoids it (for a note or a finding)."""
        return (f"transparent_hugepage/defrag is {self.defrag}: each {self.size >> 20} MiB fault of a range that asks "
                "for huge pages reclaims and compacts memory in the faulting thread until one is free; on a host "
                "with fragmented memory a pool's fill falls from GB/s to GB/min (TensorRT-LLM#15431)")


def setting(text: str | None) -> str | None:
    """The bracketed word of a THP settings file (``always [madvise] never``): the one in force."""
    if text is None:
        return None
    for word in text.split():
        if len(word) > 2 and word[0] == "[" and word[-1] == "]":
            return word[1:-1]
    return None


def read_thp(root: str | os.PathLike[str] | None = None) -> TransparentHugePages:
    """The THP settings of the machine under ``root`` (default: this one)."""
    host = Host.at(root)
    size = decimal((host.read(f"{FOLDER}/hpage_pmd_size") or "").strip())
    return TransparentHugePages(setting(host.read(f"{FOLDER}/enabled")), setting(host.read(f"{FOLDER}/defrag")),
                                size if size is not None and size > 0 and size & (size - 1) == 0 else _PMD)
