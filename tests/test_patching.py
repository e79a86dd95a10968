"""numapin.compat.tensorrt_llm.install()/uninstall(): TensorRT-LLM's callers get numapin's function.

Each test runs in a forked child (``in_child``): imports, ``sys.meta_path``
and pins stay there. The package imported is ``trtllm_like``'s stand-in,
laid out like TensorRT-LLM (the function in ``tensorrt_llm.llmapi.utils``, a
worker module importing it by name).
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

import trtllm_like
from conftest import in_child
from numapin.compat import tensorrt_llm as compat
from numapin.environment import TLLM_AFFINITY


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in package on sys.path; TensorRT-LLM's switch off, so calls change no mask."""
    monkeypatch.setenv(TLLM_AFFINITY, "0")
    return trtllm_like.write(tmp_path / "site")


def _import(site: Path, name: str) -> Any:
    sys.path.insert(0, str(site))
    return importlib.import_module(name)


def _ours(function: Any) -> bool:
    return getattr(function, "__numapin_original__", None) is not None


def test_install_before_import_patches_at_first_import(stand_in: Path) -> None:
    def child() -> None:
        report = compat.install()
        assert report.pending and not report.replaced
        assert "tensorrt_llm" not in sys.modules, "install() must not import TensorRT-LLM"
        worker = _import(stand_in, "tensorrt_llm.worker")
        utils = sys.modules["tensorrt_llm.llmapi.utils"]
        assert _ours(utils.configure_cpu_affinity) and worker.configure_cpu_affinity is utils.configure_cpu_affinity
        worker.start(0)
        worker.configure_cpu_affinity(gpu_id=0)  # the original's parameter name still works
        assert utils.CALLS == [], "the original ran"

    in_child(child)


def test_install_after_import_replaces_names_already_bound(stand_in: Path) -> None:
    def child() -> None:
        worker = _import(stand_in, "tensorrt_llm.worker")
        original = worker.configure_cpu_affinity
        alias = type(sys)("elsewhere")  # a module that bound it under another name
        alias.affinity = original
        sys.modules["elsewhere"] = alias
        report = compat.install()
        assert not report.pending
        assert set(report.replaced) == {"tensorrt_llm.llmapi.utils.configure_cpu_affinity",
                                        "tensorrt_llm.worker.configure_cpu_affinity", "elsewhere.affinity"}
        assert _ours(worker.configure_cpu_affinity) and _ours(alias.affinity)
        assert worker.configure_cpu_affinity.__numapin_original__ is original
        worker.start(0)
        assert sys.modules["tensorrt_llm.llmapi.utils"].CALLS == []

    in_child(child)


def test_install_is_idempotent(stand_in: Path) -> None:
    def child() -> None:
        worker = _import(stand_in, "tensorrt_llm.worker")
        first = compat.install()
        patched = worker.configure_cpu_affinity
        second = compat.install()
        assert first.replaced and not second.replaced
        assert worker.configure_cpu_affinity is patched

    in_child(child)


def test_uninstall_restores_every_binding_and_stops_watching(stand_in: Path) -> None:
    def child() -> None:
        compat.install()
        finders = list(sys.meta_path)
        worker = _import(stand_in, "tensorrt_llm.worker")
        utils = sys.modules["tensorrt_llm.llmapi.utils"]
        late = type(sys)("late")  # bound after install(): numapin put it nowhere, but it is numapin's
        late.configure_cpu_affinity = worker.configure_cpu_affinity
        sys.modules["late"] = late
        original = worker.configure_cpu_affinity.__numapin_original__
        report = compat.uninstall()
        assert utils.configure_cpu_affinity is original and worker.configure_cpu_affinity is original
        assert late.configure_cpu_affinity is original
        assert "late.configure_cpu_affinity" in report.replaced
        assert len(sys.meta_path) == len(finders) - 1
        worker.start(0)
        assert utils.CALLS == [0], "the original is back"

    in_child(child)


def test_uninstall_before_import_leaves_the_module_alone(stand_in: Path) -> None:
    def child() -> None:
        compat.install()
        compat.uninstall()
        worker = _import(stand_in, "tensorrt_llm.worker")
        assert not _ours(worker.configure_cpu_affinity)

    in_child(child)


def test_unknown_signature_is_left_alone_with_one_warning(stand_in: Path, caplog: pytest.LogCaptureFixture) -> None:
    utils = stand_in / "tensorrt_llm" / "llmapi" / "utils.py"
    utils.write_text(utils.read_text().replace("def configure_cpu_affinity(gpu_id):",
                                               "def configure_cpu_affinity(gpu_id, scope='node'):"))

    def child() -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="numapin"):
            worker = _import(stand_in, "tensorrt_llm.worker")
            first = compat.install()
            second = compat.install()
        assert first.refused and "unknown signature" in first.refused and second.refused
        assert not _ours(worker.configure_cpu_affinity)
        return [r.getMessage() for r in caplog.records]

    messages = in_child(child)
    assert len(messages) == 1 and "left alone" in messages[0]


def test_a_module_without_the_function_is_reported(stand_in: Path) -> None:
    utils = stand_in / "tensorrt_llm" / "llmapi" / "utils.py"
    utils.write_text("")

    def child() -> None:
        _import(stand_in, "tensorrt_llm.llmapi.utils")
        report = compat.install()
        assert report.refused == "tensorrt_llm.llmapi.utils has no configure_cpu_affinity"

    in_child(child)
