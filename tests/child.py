"""A function run in a forked child, so that no pin, memory policy or user change leaks into the tests."""

from __future__ import annotations

import os
import pickle
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["in_child"]


def in_child(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a forked child so that no pin or memory policy leaks; re-raise its failure here.

    Returns what ``fn`` returned (it must pickle).
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_end)
        try:
            payload = (True, fn())
        except BaseException:  # report everything, including assertion failures
            payload = (False, traceback.format_exc())
        try:
            data = pickle.dumps(payload)
        except Exception:
            data = pickle.dumps((False, "result did not pickle:\n" + traceback.format_exc()))
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        raise AssertionError(f"child died without a report (wait status {status})")
    ok, value = pickle.loads(data)
    if not ok:
        raise AssertionError("in child process:\n" + value)
    return value
