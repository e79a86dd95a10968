"""TensorRT-LLM in a shared process (TensorRT-LLM#18847): what configure_cpu_affinity applied is
given back — by release(), and by the worker's shutdown once NUMAPIN_PATCH's patch is installed — so that
two LLM() objects one after the other on different GPUs each get their own placement, and the process its
own mask in between."""

from __future__ import annotations

import importlib
import os
import sys
import threading
from pathlib import Path

import pytest

import live
import trtllm_like
from conftest import in_child
from numapin.base.environment import TLLM_AFFINITY

needs_two = pytest.mark.skipif(not live.NODE0 or not live.NODE1, reason="needs two CPUs (one per pair node)")


def _masks() -> set[frozenset[int]]:
    return {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}


@needs_two
def test_two_llms_one_after_the_other_each_get_their_gpu_and_the_process_its_mask_between(
        pair_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TLLM_AFFINITY, raising=False)
    site = trtllm_like.write(tmp_path / "site")

    def child() -> list[set[frozenset[int]]]:
        from numapin.compat import tensorrt_llm

        tensorrt_llm.install()
        sys.path.insert(0, str(site))
        base_worker = importlib.import_module("tensorrt_llm.executor.base_worker")
        stop = threading.Event()
        helpers = [threading.Thread(target=stop.wait) for _ in range(3)]
        for helper in helpers:
            helper.start()
        seen = [_masks()]
        first = base_worker.BaseWorker(0)
        seen.append(_masks())
        first.shutdown()
        seen.append(_masks())
        second = base_worker.BaseWorker(1)
        seen.append(_masks())
        second.shutdown()
        second.shutdown()  # a second shutdown gives back nothing more
        seen.append(_masks())
        stop.set()
        for helper in helpers:
            helper.join()
        return seen

    start, on_first, between, on_second, end = in_child(child)
    original = {frozenset(live.BASELINE)}
    assert start == original and between == original and end == original
    assert on_first == {frozenset(live.NODE0)} and on_second == {frozenset(live.NODE1)}


@needs_two
def test_calls_and_releases_pair_up(pair_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TLLM_AFFINITY, raising=False)

    def child() -> list[object]:
        from numapin.compat.tensorrt_llm import configure_cpu_affinity, release

        configure_cpu_affinity(1)
        configure_cpu_affinity(1)  # two LLM() objects on one GPU
        steps: list[object] = [release(), sorted(os.sched_getaffinity(0))]
        steps += [release(), sorted(os.sched_getaffinity(0)), release()]
        return steps

    assert in_child(child) == [False, sorted(live.NODE1), True, sorted(live.BASELINE), False]
