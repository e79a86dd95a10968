"""Every read of a ``/proc/PID`` file this process makes from now on, counted: what a test holds to one read per
file per scan."""

from __future__ import annotations

import os
import re
import sys
from collections import Counter

__all__ = ["counting"]

_PROC = re.compile(r"/proc/([0-9]+)(?:/(.*))?\Z")


def counting() -> Counter[tuple[int, str]]:
    """Count, from now on in this process, each read of a ``/proc/PID`` file by (pid, what): opened (``open``
    and ``os.open`` raise an audit event), listed, a link read or an entry stat'ed (``os.readlink`` and
    ``os.stat`` wrapped: they raise none)."""
    counts: Counter[tuple[int, str]] = Counter()

    def note(path: object, how: str) -> None:
        if isinstance(path, str) and (found := _PROC.match(path)) is not None:
            counts[(int(found.group(1)), f"{how} {found.group(2) or '.'}")] += 1

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event in ("open", "os.listdir", "os.scandir") and args:
            note(args[0], "read" if event == "open" else "list")

    sys.addaudithook(hook)
    readlink, stat = os.readlink, os.stat

    def counted_readlink(path: str, *args: object, **kwargs: object) -> str:
        note(path, "link")
        return readlink(path, *args, **kwargs)  # type: ignore[arg-type]

    def counted_stat(path: str, *args: object, **kwargs: object) -> os.stat_result:
        note(path, "stat")
        return stat(path, *args, **kwargs)  # type: ignore[arg-type]

    os.readlink, os.stat = counted_readlink, counted_stat  # type: ignore[assignment]
    return counts
