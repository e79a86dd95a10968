"""What the integration tier's tests share: where things are, what each test requires, whose CPUs are whose."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sysconfig
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest

import live

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STARTUP = "numapin-startup.pth"
#: A memory policy every rank can hold here: node 1 of the pair root may not exist on this kernel.
MEMORY = "preferred" if live.NODE1_REAL else "none"

Run = Callable[..., subprocess.CompletedProcess[str]]


def _missing(why: str) -> None:
    message = f"{why} (pip install torch==2.13.0 '.[integration]', not editable)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        _missing(f"{module} is not installed")


def require_startup_file() -> None:
    installed = Path(sysconfig.get_path("purelib")) / STARTUP
    direct = metadata.distribution("numapin").read_text("direct_url.json") or "{}"
    if json.loads(direct).get("dir_info", {}).get("editable") or not installed.is_file():
        _missing(f"numapin's start-up file is not in {installed.parent}")


def node_of(gpu: int) -> set[int]:
    """The CPUs of the pair root's GPU ``gpu`` that this process may use."""
    return live.NODE0 if gpu == 0 else live.NODE1
