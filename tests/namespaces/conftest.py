"""The namespaces tier: numapin inside containers built as runtimes build them (``container.py``), and the
host's tools looking in. Run with ``python -m pytest tests/namespaces`` as root (util-linux's ``unshare`` and
``nsenter``). Without them it skips with one line saying what is missing; with ``CI`` set it fails instead."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from container import missing  # noqa: E402


@pytest.fixture(autouse=True)
def _containers() -> None:
    why = missing()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
