"""What a worker reports about itself: every thread's mask, and numapin's warnings while it ran."""

from __future__ import annotations

import logging
import os
from typing import Any


class Warnings(logging.Handler):
    """Keeps every WARNING or worse record of every logger (numapin's, a framework's)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        logging.getLogger().addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


def masks() -> dict[str, list[int]]:
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            found[tid] = sorted(os.sched_getaffinity(int(tid)))
        except ProcessLookupError:
            continue
    return found


def pin_again() -> dict[str, Any]:
    """numapin.pin() inside the worker: whether it changed anything, and its placement's CPUs."""
    import numapin

    result = numapin.pin()
    return {"changed": result.changed, "target": sorted(result.target or ()), "text": str(result)}
