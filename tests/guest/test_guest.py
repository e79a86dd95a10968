"""numapin on kernels with real NUMA nodes: small QEMU guests, each booted once (see runner.py).

Shapes: ``two-node`` (2 nodes × 2 CPUs), ``grace`` (2 CPU nodes + 2 CPU-less memory nodes, as
GPU memory shows on Grace), ``four-node`` (4 nodes × 1 CPU). In each boot the checks of
``checks.py`` run against what the kernel reports; in the first two the kernel-facing test
files run too, with README's test command.
"""

from __future__ import annotations

from collections.abc import Callable

import checks
import pytest
import runner

from conftest import SUITE_SHAPES, GuestReport

CASES = [(shape, name) for shape in runner.SHAPES for name in checks.names_for(shape)]


@pytest.mark.parametrize(("shape", "name"), CASES, ids=[f"{s}-{n}" for s, n in CASES])
def test_check_in_guest(shape: str, name: str, guest: Callable[[str], GuestReport]) -> None:
    report = guest(shape)
    result = report.checks.get(name)
    assert result is not None, f"{name} did not report; checks said:\n{report.text('checks.txt')[-3000:]}"
    assert result["ok"], f"{checks.CHECKS[name].doc}\n{result['detail']}"


@pytest.mark.parametrize("shape", SUITE_SHAPES)
def test_kernel_facing_suite_passes_in_guest(shape: str, guest: Callable[[str], GuestReport]) -> None:
    report = guest(shape)
    assert report.suite_rc == 0, report.suite_output[-6000:]
    assert " passed" in report.suite_output.splitlines()[-1], report.suite_output[-2000:]


def test_every_shape_has_its_real_nodes(guest: Callable[[str], GuestReport]) -> None:
    # The guests are what they claim: numactl's own view of each, read in the same boot.
    for shape in runner.SHAPES.values():
        detail = str(guest(shape.name).checks["show_matches_the_kernel"]["detail"])
        assert detail.count("(") == len(shape.cpus) + shape.memory_nodes, detail
