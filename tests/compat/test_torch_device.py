"""numapin.compat.torch_device: a process placed when it names its GPU through PyTorch's functions.

Here PyTorch is a small package of the same shape (its ``torch.cuda.set_device`` and
``torch.accelerator.set_device_index`` record their calls); real PyTorch is the integration tier's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import live
from child import in_child
from numapin.base.environment import AUTOPIN, AUTOPIN_OPTIONS, FSROOT
from numapin.compat.torch_device import named_gpu

#: PyTorch's refusal of a GPU it cannot use (``REFUSED``, set by a test), as its own functions raise it.
_REFUSE = "    if device in REFUSED:\n        raise RuntimeError('CUDA error: invalid device ordinal')\n"
TORCH = {
    "torch/__init__.py": "from . import accelerator, cuda\n",
    "torch/cuda.py": f"CALLS = []\nREFUSED = set()\ndef set_device(device):\n{_REFUSE}    CALLS.append(device)\n",
    "torch/accelerator.py": f"CALLS = []\nREFUSED = set()\ndef set_device_index(device, /):\n{_REFUSE}"
                            "    CALLS.append(device)\nset_device_idx = set_device_index\n",
}


class Device:
    """What a ``torch.device`` shows: its type and index."""

    def __init__(self, type: str, index: int | None) -> None:
        self.type, self.index = type, index


@given(st.integers(-(2**40), 2**40))
def test_an_index_names_that_gpu_and_a_negative_one_none(n: int) -> None:
    assert named_gpu(n) == (n if n >= 0 else None)
    assert named_gpu(Device("cuda", n)) == (n if n >= 0 else None)
    assert named_gpu(f"cuda:{n}") == (n if 0 <= n < 10**9 else None)


@given(st.sampled_from(["cpu", "xpu", "mps", "meta", "npu"]), st.integers(0, 64))
def test_a_device_of_another_type_names_no_gpu(kind: str, n: int) -> None:
    assert named_gpu(f"{kind}:{n}") is None
    assert named_gpu(Device(kind, n)) is None


@given(st.one_of(st.text(), st.none(), st.booleans(), st.floats(), st.lists(st.integers())))
def test_anything_else_names_no_gpu_or_a_plain_index_and_never_raises(value: object) -> None:
    got = named_gpu(value)
    assert got is None or (isinstance(got, int) and got >= 0 and isinstance(value, str))


def test_a_device_without_index_names_none() -> None:
    assert named_gpu("cuda") is None and named_gpu(Device("cuda", None)) is None and named_gpu(True) is None


def _warnings() -> list[str]:
    """Every warning numapin logs from now on in this process, as it is said."""
    import logging

    caught: list[str] = []

    class Keep(logging.Handler):
        def emit(self, entry: logging.LogRecord) -> None:
            if entry.levelno >= logging.WARNING:
                caught.append(entry.getMessage())

    logging.getLogger("numapin").addHandler(Keep())
    return caught


def _fake_torch(into: Path) -> Path:
    for name, text in TORCH.items():
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        (into / name).write_text(text)
    return into


def _namings(folder: Path, names: list[tuple[str, object]], env: dict[str, str],
             cpus: set[int] | None = None, refused: tuple[object, ...] = ()) -> dict[str, object]:
    """In a child: ``numapin.pin(cpus=...)`` where given, the start-up hook under ``env``, then the fake torch
    imported, a thread started, and each naming made (PyTorch refusing the devices ``refused``, its error caught by
    the caller); every thread's mask, numapin's warnings and whether PyTorch raised after each."""

    def child() -> dict[str, object]:
        import threading

        from numapin import startup
        from numapin.pinning import record

        os.environ.update(env)
        caught = _warnings()
        if cpus is not None:
            import numapin

            numapin.pin(cpus=sorted(cpus))
        started = startup.activate(os.environ)
        sys.path.insert(0, str(folder))
        import torch  # the fake one

        torch.cuda.REFUSED.update(refused)
        torch.accelerator.REFUSED.update(refused)
        stop = threading.Event()
        worker = threading.Thread(target=stop.wait)
        worker.start()
        steps = []
        for where, device in names:
            function = torch.cuda.set_device if where == "cuda" else torch.accelerator.set_device_index
            try:
                function(device)
                raised = None
            except RuntimeError as exc:  # PyTorch's own error, the caller's to catch
                raised = str(exc)
            entry = record.lookup(os.getpid())
            steps.append({"masks": {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")},
                          "how": None if entry is None else entry.how, "raised": raised,
                          "gpu": None if entry is None else entry.placement.gpu, "warnings": list(caught)})
        stop.set()
        worker.join()
        return {"left_alone": started.left_alone, "steps": steps,
                "calls": [repr(c) for c in torch.cuda.CALLS + torch.accelerator.CALLS]}

    return in_child(child)


@pytest.fixture
def torch_folder(tmp_path: Path) -> Path:
    return _fake_torch(tmp_path / "fake")


def _on(mask: dict[str, list[int]], cpus: set[int]) -> bool:
    return len(mask) >= 2 and all(set(m) == cpus for m in mask.values())


def test_a_worker_without_rank_is_placed_when_it_names_its_gpu(pair_root: Path, torch_folder: Path) -> None:
    got = _namings(torch_folder, [("cuda", 1), ("cuda", "cuda:1"), ("accelerator", Device("cuda", 1))],
                   {AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none"})
    assert got["left_alone"] == "not a worker: no local rank and 2 GPUs visible"
    steps = got["steps"]
    assert isinstance(steps, list)
    for step in steps:  # placed at the first naming; the same GPU named again changes nothing and says nothing
        assert _on(step["masks"], live.NODE1), step
        assert (step["how"], step["gpu"], step["warnings"]) == ("autopin", 1, []), step
    calls = got["calls"]
    assert isinstance(calls, list) and calls[:2] == ["1", "'cuda:1'"] and len(calls) == 3  # PyTorch's own ran


def test_a_process_that_names_a_second_gpu_keeps_the_first_and_says_so_once(pair_root: Path,
                                                                           torch_folder: Path) -> None:
    got = _namings(torch_folder, [("accelerator", 0), ("cuda", 1), ("accelerator", "cuda:1"), ("cuda", 0)],
                   {AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none"})
    steps = got["steps"]
    assert isinstance(steps, list)
    assert all(_on(step["masks"], live.NODE0) and step["gpu"] == 0 for step in steps), steps
    assert steps[0]["warnings"] == []
    assert len(steps[-1]["warnings"]) == 1 and "drives several GPUs" in steps[-1]["warnings"][0]
    assert len(got["calls"]) == 4  # PyTorch's own function ran every time


def test_a_worker_placed_by_its_rank_follows_a_first_naming_of_another_gpu(pair_root: Path,
                                                                           torch_folder: Path) -> None:
    # The contract's retarget: placed for GPU 0 by its rank at start-up, the process names GPU 1 first.
    got = _namings(torch_folder, [("cuda", 1), ("cuda", 0)],
                   {AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none", "LOCAL_RANK": "0"})
    assert got["left_alone"] is None
    steps = got["steps"]
    assert isinstance(steps, list)
    assert _on(steps[0]["masks"], live.NODE1) and steps[0]["gpu"] == 1 and steps[0]["warnings"] == []
    assert _on(steps[1]["masks"], live.NODE1) and len(steps[1]["warnings"]) == 1


def test_a_worker_placed_by_its_rank_naming_that_gpu_changes_nothing(pair_root: Path, torch_folder: Path) -> None:
    got = _namings(torch_folder, [("cuda", 1)], {AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none", "LOCAL_RANK": "1"})
    steps = got["steps"]
    assert isinstance(steps, list)
    assert _on(steps[0]["masks"], live.NODE1) and steps[0]["how"] == "autopin" and steps[0]["warnings"] == []


def test_a_process_on_explicit_cpus_stays_there_when_it_names_a_gpu(pair_root: Path, torch_folder: Path) -> None:
    steps = _namings(torch_folder, [("cuda", 1)], {AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none"},
                     cpus=live.NODE0)["steps"]
    assert isinstance(steps, list)
    assert _on(steps[0]["masks"], live.NODE0) and steps[0]["how"] == "pin", steps


def _exit_lines(folder: Path, pair: Path, code: str) -> list[str]:
    script = textwrap.dedent(f"""
        import sys
        from numapin import startup
        startup.at_start()
        sys.path.insert(0, {str(folder)!r})
        import torch
        {code}
    """)
    env = {**live.without_inputs(dict(os.environ)), AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none",
           FSROOT: str(pair)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stderr.splitlines() if line.startswith("numapin:")]


def test_a_process_that_names_no_gpu_says_once_at_exit_why_it_ran_unplaced(pair_root: Path,
                                                                           torch_folder: Path) -> None:
    lines = _exit_lines(torch_folder, pair_root, "pass")
    assert len(lines) == 1 and "left unplaced: no local rank and 2 GPUs visible" in lines[0], lines
    assert _exit_lines(torch_folder, pair_root, "torch.cuda.set_device(0)") == []


def test_a_forked_child_is_placed_for_the_gpu_it_names_itself(pair_root: Path, torch_folder: Path) -> None:
    def parent() -> dict[str, object]:

        from numapin import startup

        caught = _warnings()
        os.environ.update({AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none"})
        startup.activate(os.environ)
        sys.path.insert(0, str(torch_folder))
        import torch  # the fake one

        torch.cuda.set_device(0)

        def child() -> tuple[list[int], list[str]]:
            torch.cuda.set_device(1)  # its own GPU: no "second GPU" of its parent's
            return sorted(os.sched_getaffinity(0)), list(caught)

        return {"parent": sorted(os.sched_getaffinity(0)), "child": in_child(child)}

    got = in_child(parent)
    assert set(got["parent"]) == live.NODE0
    masks, warnings = got["child"]
    assert set(masks) == live.NODE1 and warnings == [], got


@pytest.mark.parametrize("refused", [7, 2])
def test_a_naming_of_a_gpu_the_process_does_not_see_changes_nothing_and_the_next_is_the_first(
        refused: int, pair_root: Path, torch_folder: Path) -> None:
    # set_device(N) of a GPU beyond the two it sees: PyTorch raises (the caller catches it), and numapin could not
    # place it either. Then set_device(0): placed for GPU 0, never "after GPU N".
    got = _namings(torch_folder, [("cuda", refused), ("accelerator", 0)],
                   {AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none"}, refused=(refused,))
    steps = got["steps"]
    assert isinstance(steps, list)
    before, after = steps
    assert before["raised"] == "CUDA error: invalid device ordinal" and before["how"] is None, before
    assert all(set(m) == set(live.BASELINE) for m in before["masks"].values()), before  # every thread as it was
    assert before["warnings"] == [], before
    assert after["raised"] is None and _on(after["masks"], live.NODE0), after
    assert (after["how"], after["gpu"], after["warnings"]) == ("autopin", 0, []), after


def test_a_pytorch_without_the_deprecated_alias_costs_no_warning(pair_root: Path, tmp_path: Path) -> None:
    # Newer PyTorch dropped torch.accelerator.set_device_idx: every worker warning of it would be noise.
    folder = _fake_torch(tmp_path / "newer")
    accelerator = folder / "torch" / "accelerator.py"
    accelerator.write_text(accelerator.read_text().replace("set_device_idx = set_device_index\n", ""))
    got = _namings(folder, [("accelerator", 1)], {AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none"})
    steps = got["steps"]
    assert isinstance(steps, list) and steps[0]["warnings"] == [], steps
    assert _on(steps[0]["masks"], live.NODE1) and steps[0]["gpu"] == 1, steps  # the function it has still places
