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
from numapin.base.environment import TLLM_AFFINITY
from numapin.compat import tensorrt_llm as compat


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
        assert "late.configure_cpu_affinity" in report.restored and not report.replaced
        assert len(sys.meta_path) == len(finders) - 2  # the function's hook and the worker shutdown's
        assert _numapin_hooks() == []
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


# -- nothing odd breaks an import or raises out of install() --


def _numapin_hooks() -> list[object]:
    return [f for f in sys.meta_path if getattr(f, "numapin_target", None) is not None]


@pytest.mark.parametrize("shape", [
    "functools.partial(lambda gpu_id, scope, extra: None, extra=1)",  # no __name__, two parameters left
    "type('Callable', (), {'__call__': lambda self, a, b: None})()",  # an instance, no __name__
])
def test_a_function_of_another_shape_without_a_name_is_left_alone(stand_in: Path, shape: str,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    utils = stand_in / "tensorrt_llm" / "llmapi" / "utils.py"
    utils.write_text(f"import functools\nconfigure_cpu_affinity = {shape}\n")

    def child() -> list[str]:
        with caplog.at_level(logging.WARNING, logger="numapin"):
            assert compat.install().pending
            module = _import(stand_in, "tensorrt_llm.llmapi.utils")  # raised AttributeError before
        assert not _ours(module.configure_cpu_affinity)
        return [r.getMessage() for r in caplog.records]

    messages = in_child(child)
    assert len(messages) == 1 and "left alone" in messages[0] and "unknown signature" in messages[0]


def test_a_module_getattr_that_raises_leaves_the_import_working(stand_in: Path) -> None:
    utils = stand_in / "tensorrt_llm" / "llmapi" / "utils.py"
    utils.write_text("def __getattr__(name):\n    raise RuntimeError(f'lazy import of {name} failed')\n")

    def child() -> None:
        compat.install()
        module = _import(stand_in, "tensorrt_llm.llmapi.utils")
        assert module.__name__ == "tensorrt_llm.llmapi.utils"
        assert "lazy import" in (compat.install().refused or "")

    in_child(child)


def test_reloading_numapins_module_then_installing_leaves_one_hook(stand_in: Path) -> None:
    def child() -> None:
        compat.install()
        fresh = importlib.reload(compat)
        fresh.install()
        # One hook per target (the function, the worker shutdown), however often numapin was loaded.
        targets = [getattr(f, "numapin_target", None) for f in _numapin_hooks()]
        assert sorted(targets) == sorted({*targets}) and len(targets) == 2
        worker = _import(stand_in, "tensorrt_llm.worker")  # RecursionError before
        assert _ours(worker.configure_cpu_affinity)
        fresh.uninstall()
        assert _numapin_hooks() == [] and not _ours(worker.configure_cpu_affinity)

    in_child(child)


@pytest.mark.parametrize("install_first", [True, False])
def test_reloading_the_patched_module_keeps_the_patch_and_uninstall_restores_everything(
        stand_in: Path, install_first: bool) -> None:
    def child() -> None:
        if install_first:
            compat.install()
        worker = _import(stand_in, "tensorrt_llm.worker")
        if not install_first:
            compat.install()
        utils = importlib.reload(sys.modules["tensorrt_llm.llmapi.utils"])
        assert _ours(utils.configure_cpu_affinity), "the reload brought the original back"
        assert _ours(worker.configure_cpu_affinity)
        compat.uninstall()
        for module in (utils, worker):
            assert not _ours(module.configure_cpu_affinity), f"{module.__name__} keeps numapin's function"
        worker.start(0)
        assert utils.CALLS == [0]

    in_child(child)


class _ReadOnly(type(sys)):  # type: ignore[misc]
    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{self.__name__} is read-only")


class _Unreadable(type(sys)):  # type: ignore[misc]
    @property  # type: ignore[misc]
    def __dict__(self) -> dict[str, object]:
        raise RuntimeError("namespace unavailable")


class _RaisingGetattr(type(sys)):  # type: ignore[misc]
    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"no {name} here")


def test_odd_entries_in_sys_modules_never_make_install_raise_nor_half_apply(stand_in: Path) -> None:
    def child() -> None:
        worker = _import(stand_in, "tensorrt_llm.worker")
        original = worker.configure_cpu_affinity
        holder = type("Holder", (), {})()  # not a module, no __name__
        holder.affinity = original
        sys.modules["odd_holder"] = holder
        sys.modules["odd_getattr"] = _RaisingGetattr("odd_getattr")
        sys.modules["odd_unreadable"] = _Unreadable("odd_unreadable")
        report = compat.install()
        assert report.refused is None and "odd_holder.affinity" in report.replaced
        assert _ours(holder.affinity) and _ours(worker.configure_cpu_affinity)
        compat.uninstall()
        assert holder.affinity is original
        # A read-only module bound to it: all or nothing, never utils patched and that one not.
        frozen = _ReadOnly("odd_frozen")
        vars(frozen)["affinity"] = original
        sys.modules["odd_frozen"] = frozen
        report = compat.install()
        assert report.refused and "odd_frozen.affinity" in report.refused
        assert worker.configure_cpu_affinity is original
        assert sys.modules["tensorrt_llm.llmapi.utils"].configure_cpu_affinity is original

    in_child(child)


def test_an_unreadable_module_does_not_break_the_later_import(stand_in: Path) -> None:
    def child() -> None:
        sys.modules["odd_unreadable"] = _Unreadable("odd_unreadable")
        assert compat.install().pending
        worker = _import(stand_in, "tensorrt_llm.worker")
        assert _ours(worker.configure_cpu_affinity)

    in_child(child)


class _AsksEveryone:
    """Another project's import hook written as numapin's is: it asks every other finder of sys.meta_path
    (numapin's included) for the module, with no guard of its own."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "tensorrt_llm.llmapi.utils":
            return None
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None


@pytest.mark.parametrize("ours_first", [True, False])
def test_another_finder_that_asks_every_finder_does_not_recurse(stand_in: Path, ours_first: bool) -> None:
    def child() -> None:
        if ours_first:
            sys.meta_path.insert(0, _AsksEveryone())
            compat.install()
        else:
            compat.install()
            sys.meta_path.insert(0, _AsksEveryone())
        worker = _import(stand_in, "tensorrt_llm.worker")  # RecursionError before
        assert _ours(worker.configure_cpu_affinity)

    in_child(child)
