"""Host pools, second pass: a spread over several nodes (judged by its own nodes), transparent huge pages (the
kernel's settings read, the pages got read back), the NICs nearest a buffer. Real buffers on this machine's nodes;
two nodes, and THP settings changed: the guest tier's checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import live
import numapin
from child import in_child
from numapin.cpuset import CpuSet
from numapin.facts import synthetic as machines
from numapin.facts.machine import gather
from numapin.facts.thp import read_thp, setting
from numapin.kernel.residency import Residency
from numapin.observe.judge import Judgement
from numapin.observe.verdict import Verdict
from numapin.pinning.declaration import Declared, unbalanced
from numapin.pinning.host_buffer import nics_near

NODE = min(n.id for n in live.TOPOLOGY.nodes if n.cpus & CpuSet(live.BASELINE))
NUMAPIN = [sys.executable, "-m", "numapin"]
MIB = 1 << 20


# -- transparent huge pages -------------------------------------------------------------------------------------


@given(st.lists(st.sampled_from(["always", "madvise", "never", "defer", "defer+madvise", "[", "]", "x", ""]),
                max_size=6), st.integers(min_value=-1, max_value=5))
def test_the_setting_in_force_is_the_bracketed_word(words: list[str], chosen: int) -> None:
    marked = [f"[{w}]" if i == chosen and w and "[" not in w and "]" not in w else w for i, w in enumerate(words)]
    found = setting(" ".join(marked))
    bracketed = [w[1:-1] for w in " ".join(marked).split() if len(w) > 2 and w[0] == "[" and w[-1] == "]"]
    assert found == (bracketed[0] if bracketed else None)


def test_this_kernels_settings_read_as_the_files_say() -> None:
    folder = Path("/sys/kernel/mm/transparent_hugepage")
    if not (folder / "enabled").exists():
        pytest.skip("this kernel has no transparent huge pages")
    thp = read_thp("/")
    assert f"[{thp.enabled}]" in (folder / "enabled").read_text()
    assert f"[{thp.defrag}]" in (folder / "defrag").read_text()
    assert thp.size == int((folder / "hpage_pmd_size").read_text())


def test_a_buffer_asking_for_transparent_huge_pages_reads_back_what_it_got() -> None:
    thp = read_thp("/")

    def child() -> dict[str, object]:
        with numapin.host_buffer(16 * MIB, node=NODE, hugepages="thp") as buf:
            smaps = Path("/proc/self/smaps").read_text().splitlines()
            first = next(i for i, x in enumerate(smaps) if x.startswith(f"{buf.address:x}-"))
            huge = next(int(x.split()[1]) * 1024 for x in smaps[first:] if x.startswith("AnonHugePages:"))
            return {"huge": buf.huge_bytes, "smaps": huge, "page": buf.page_size, "notes": buf.notes,
                    "entry": json.loads(str(buf._entry))}

    got = in_child(child)
    assert got["huge"] == got["smaps"] and got["entry"]["transparent"] is True, got
    assert got["entry"]["huge_bytes"] == got["huge"] and got["entry"]["asked_page_size"] == thp.size, got
    notes = " ".join(got["notes"])  # type: ignore[arg-type]
    if not thp.available:
        assert got["huge"] == 0 and got["page"] == os.sysconf("SC_PAGE_SIZE") and "base pages" in notes, got
    else:
        assert "transparent huge pages:" in notes, got
        assert (f"transparent_hugepage/defrag is {thp.defrag}" in notes) == thp.stalls, got
        assert got["page"] == (thp.size if 2 * int(got["huge"]) >= 16 * MIB else os.sysconf("SC_PAGE_SIZE"))  # type: ignore[call-overload]


# -- spreads judged by their own nodes --------------------------------------------------------------------------


def test_a_spread_that_lost_its_balance_says_which_node() -> None:
    assert unbalanced({0: 50, 1: 50}, CpuSet([0, 1])) == []
    assert unbalanced({0: 60, 1: 40}, CpuSet([0, 1])) == []
    said = unbalanced({0: 80, 1: 20}, CpuSet([0, 1]))
    assert len(said) == 1 and "node 1 holds 20%" in said[0] and "even share is 50%" in said[0]
    assert len(unbalanced({0: 100}, CpuSet([0, 1, 2, 3]))) == 3
    assert unbalanced({}, CpuSet([0, 1])) == []


def _judged(buffers: tuple[Declared, ...], in_ranges: dict[int, dict[int, int]], own: dict[int, int]) -> Judgement:
    """A judgement of a worker expected on node 0, from facts (the judge's own record of what it read)."""
    from numapin.observe.judge import Expected
    from numapin.placement.modes import resolve

    facts = gather(machines.write("pair", Path(os.environ["NUMAPIN_TEST_TMP"]) / "pair"), {})
    placement = resolve(facts, {}, gpu=0)
    memory = Residency(1, {}, dict(own), dict(own), {"anon": dict(own)}, in_ranges)
    return Judgement(1, "w", Verdict.OK, Expected(placement, placement.workers, "GPU 0"), (), "numapin", memory,
                     max_remote=0.1, buffers=buffers)


@pytest.fixture(autouse=True)
def _tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMAPIN_TEST_TMP", str(tmp_path))


def test_a_spread_including_the_gpus_node_is_never_told_it_lies_elsewhere() -> None:
    spread = Declared(0x1000, 96 * MIB, CpuSet([0, 1]), 4096, 4096, spread=True)
    judged = _judged((spread,), {0x1000: {0: 48 * MIB, 1: 48 * MIB}}, {0: 60 * MIB, 1: 48 * MIB})
    assert judged.remote_share() == 0.0 and judged.misplaced_by == ()
    assert judged.buffer_words() == []
    assert judged.verified_buffers()[0].unbalanced == () and judged.verified_buffers()[0].on_its_node
    assert judged.verified_buffers()[0].as_dict()["unbalanced"] == []  # said in JSON for a spread, even when none
    # The same pages, bound rather than spread, are memory elsewhere: the spread's pass is for what was asked.
    bound = Declared(0x1000, 96 * MIB, CpuSet([0, 1]), 4096, 4096)
    plain = _judged((bound,), {0x1000: {0: 48 * MIB, 1: 48 * MIB}}, {0: 60 * MIB, 1: 48 * MIB})
    assert plain.remote_share() == pytest.approx(48 / 108) and plain.misplaced_by == ("memory",)


def test_a_spread_still_says_where_it_lost_its_balance_or_lies_off_the_gpu() -> None:
    spread = Declared(0x1000, 100 * MIB, CpuSet([0, 1]), 4096, 4096, spread=True)
    judged = _judged((spread,), {0x1000: {0: 90 * MIB, 1: 10 * MIB}}, {0: 100 * MIB, 1: 10 * MIB})
    words = judged.buffer_words()
    assert len(words) == 1 and "lost its balance: node 1 holds 10%" in words[0], words
    # Memory beyond the spread's own pages off the GPU's node is still counted.
    away = _judged((spread,), {0x1000: {0: 50 * MIB, 1: 50 * MIB}}, {0: 50 * MIB, 1: 100 * MIB})
    assert away.remote_share() == pytest.approx(50 / 150)


def test_a_declared_spread_and_its_pages_survive_the_round_trip() -> None:
    made = Declared(0x2000, 8 * MIB, CpuSet([0, 1]), 2 * MIB, 2 * MIB, True, True, True, 6 * MIB)
    assert Declared.from_dict(json.loads(str(made.text()))) == made
    plain = Declared(0x2000, 8 * MIB, CpuSet([0]), 4096, 4096)
    assert set(json.loads(str(plain.text()))) == {"address", "nbytes", "node", "page_size", "asked_page_size",
                                                  "locked"}, "a plain buffer's entry grew"
    assert Declared.from_dict({**plain.as_dict(), "transparent": True, "huge_bytes": -1}) is None
    assert Declared.from_dict({**plain.as_dict(), "spread": "yes"}) == plain  # only true is a spread


# -- the NICs nearest a buffer ----------------------------------------------------------------------------------


def test_a_buffers_nics_are_those_of_its_nodes() -> None:
    dgx = gather(machines.write("dgx-h100", Path(os.environ["NUMAPIN_TEST_TMP"]) / "dgx"), {})
    nics = dgx.network().nics
    for node in (0, 1):
        assert nics_near(dgx, CpuSet([node])) == tuple(n.name for n in nics if n.node == node) != ()
    assert set(nics_near(dgx, CpuSet([0, 1]))) == {n.name for n in nics}


def test_a_grace_gpus_memory_node_takes_the_nics_of_the_cpu_node_nearest_it() -> None:
    gb300 = gather(machines.write("gb300", Path(os.environ["NUMAPIN_TEST_TMP"]) / "gb300"), {})
    memory_only = [n.id for n in gb300.topology.memory_only_nodes]
    assert memory_only
    for node in memory_only:
        nearest = min((gb300.topology.distance(node, c.id) or 999, c.id) for c in gb300.topology.cpu_nodes)[1]
        # the synthetic's GPU memory nodes are equally far from both CPU nodes: both nodes' NICs are named
        ties = {c.id for c in gb300.topology.cpu_nodes if gb300.topology.distance(node, c.id) ==
                gb300.topology.distance(node, nearest)}
        assert set(nics_near(gb300, CpuSet([node]))) == {n.name for n in gb300.network().nics if n.node in ties}


# -- the command ------------------------------------------------------------------------------------------------


def test_numapin_buffer_says_its_nics_and_its_spread() -> None:
    env = live.without_inputs(dict(os.environ))
    nodes = str(CpuSet(n.id for n in live.TOPOLOGY.nodes if n.cpus & CpuSet(live.BASELINE)))
    done = subprocess.run([*NUMAPIN, "buffer", "--nodes", nodes, "--size", "8M", "--json"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["spread"] == (len(CpuSet.parse(nodes)) > 1) and report["for"] == f"node(s) {nodes}"
    assert sum(report["on_nodes"].values()) == 8 * MIB and isinstance(report["nics"], list)
    text = subprocess.run([*NUMAPIN, "buffer", "--nodes", nodes, "--size", "8M"], capture_output=True, text=True,
                          timeout=60, env=env).stdout
    assert "nearest NICs: " in text
    for bad in (["--nodes", "4095", "--size", "1M"], ["--nodes", "x", "--size", "1M"],
                ["--nodes", "0", "--node", "0", "--size", "1M"], ["--gpus", "9", "--size", "1M"]):
        done = subprocess.run([*NUMAPIN, "buffer", *bad], capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (bad, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (bad, done.stderr)


def test_doctor_of_a_process_whose_buffer_asked_for_thp_says_what_the_settings_do() -> None:
    from numapin.tools.doctor import diagnose

    thp = read_thp("/")
    worker = subprocess.Popen([sys.executable, "-c", "import numapin, time\n"
                               f"b = numapin.host_buffer(4 << 20, node={NODE}, hugepages='thp')\n"
                               "print('ready', flush=True)\ntime.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, env=live.without_inputs(dict(os.environ)))
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        found = [f for f in diagnose(None, pid=worker.pid).findings if f.id.startswith("thp-")]
    finally:
        worker.kill()
        worker.wait()
    expected = [] if thp.enabled is None else ["thp-unavailable"] if not thp.available else \
        ["thp-defrag-stalls"] if thp.stalls else []
    assert [f.id for f in found] == expected, found
    assert all("its host buffer at 0x" in f.sees for f in found), found
