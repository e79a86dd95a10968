"""What a tier needs from the machine: a program, found, or the test skips saying how to install it (and fails
instead under CI, where a tier never skips)."""

from __future__ import annotations

import os
import shutil

import pytest

__all__ = ["missing", "program"]


def missing(message: str) -> None:
    """Skip saying ``message``; under CI, fail saying it."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def program(*names: str, install: str) -> str:
    """The first of ``names`` on PATH; else :func:`missing` (``install``: the command that installs it)."""
    for name in names:
        found = shutil.which(name)
        if found is not None:
            return found
    missing(f"{names[0]} is not installed ({install})")
    raise AssertionError("unreachable")  # pytest.skip and pytest.fail raise
