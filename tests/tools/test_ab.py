"""numapin ab with real runs: a real effect found, every metric, every way a run can go wrong, ^C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from live import without_inputs

NUMAPIN = [sys.executable, "-m", "numapin"]
#: A program whose figure is its placement itself: the CPUs it may run on. No scheduler noise can hide the
#: difference between two variants that place it on one CPU and on two (a timing effect could: a loaded CI
#: machine made two busy threads on two CPUs no faster than on one).
CPUS_IT_MAY_USE = "import os; print(f'cpus: {len(os.sched_getaffinity(0))}')"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**without_inputs(dict(os.environ)), "NUMAPIN_RUNTIME_DIR": str(tmp_path / "records")}


def ab(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NUMAPIN, "ab", *args], env=env, capture_output=True, text=True, timeout=timeout)


def _json(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert result.returncode == 0, result.stderr
    found: dict[str, object] = json.loads(result.stdout)
    return found


def _variant(report: dict[str, object], name: str) -> dict[str, object]:
    return next(v for v in report["variants"] if v["name"] == name)  # type: ignore[attr-defined, index]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_variant_that_gives_the_program_more_cpus_is_found_better(env: dict[str, str], tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))[:2]
    report = _json(ab(env, "--variant", f"one=--cpus {cpus[0]}", "--variant", f"two=--cpus {cpus[0]},{cpus[1]}",
                      "--rounds", "7", "--seed", "1", "--metric", r"regex:cpus: ([0-9]+)", "--higher-is-better",
                      "--json", "--", sys.executable, "-c", CPUS_IT_MAY_USE))
    assert [r["value"] for r in _variant(report, "one")["runs"] if r["round"] >= 0] == [1] * 7  # type: ignore[attr-defined]
    two = _variant(report, "two")["vs_baseline"]
    assert isinstance(two, dict)
    assert two["finding"] == "better" and two["p"] < 0.01 and two["ratio"] == 2, two
    assert str(report["recommendation"]).startswith(f"deploy two: numapin exec --cpus {cpus[0]},{cpus[1]} -- ...")
    assert not os.listdir(tmp_path / "records"), "the runs' records swept: the host as it was"


def test_a_program_that_prints_without_end_is_kept_to_its_last_mebibyte(env: dict[str, str]) -> None:
    # 200 MB of output in each run; ab keeps the end (the figure is printed last) in about a mebibyte, never
    # the whole: measured as ab's own peak memory, from a parent that runs nothing else.
    program = "head -c 200000000 /dev/zero; echo; echo 'tok/s: 42.5'"
    peak = subprocess.run([sys.executable, "-c", RUSAGE_OF_AB, *NUMAPIN, "ab", "--variant", "a=", "--variant", "b=",
                           "--rounds", "1", "--warmup", "0", "--metric", r"regex:tok/s: ([0-9.]+)",
                           "--higher-is-better", "--json", "--", "sh", "-c", program],
                          env=env, capture_output=True, text=True, timeout=300)
    assert peak.returncode == 0, peak.stderr
    report, _, kib = peak.stdout.rpartition("\n")
    assert _variant(json.loads(report), "a")["median"] == 42.5
    assert int(kib) < 150 * 1024, f"ab's peak memory {int(kib) >> 10} MiB: it held the output whole"


#: Runs the command given and prints the peak resident size (KiB) of the largest process waited for: ab itself
#: (its runs exec into head and sh, which are small).
RUSAGE_OF_AB = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)
sys.stdout.write(done.stdout.decode() + "\\n" + str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(done.returncode)
"""


def test_a_run_whose_child_holds_its_output_ends_at_its_timeout_or_exit(env: dict[str, str]) -> None:
    # A child that leaves the run's session (setsid) keeps the run's output open: ab stops reading it at the
    # timeout (the run killed by its process group and session), or a moment after the run itself exits.
    try:
        started = time.monotonic()
        late = _json(ab(env, "--variant", "a=", "--variant", "b=", "--rounds", "1", "--warmup", "0", "--timeout",
                        "2", "--json", "--", "sh", "-c", f"setsid sleep {LONG}1 & sleep {LONG}2"))
        assert {r["status"] for v in late["variants"] for r in v["runs"]} == {"timeout"}  # type: ignore[attr-defined]
        assert time.monotonic() - started < 40, "each run ended at its timeout, not with its child"
        assert not _running(f"sleep {LONG}2"), "the run's own process group and session ended with it"
        started = time.monotonic()
        done = _json(ab(env, "--variant", "a=", "--variant", "b=", "--rounds", "1", "--warmup", "0", "--metric",
                        r"regex:v: ([0-9]+)", "--higher-is-better", "--json", "--", "sh", "-c",
                        f"setsid sleep {LONG}3 & echo 'v: 3'"))
        assert [r["status"] for r in _variant(done, "a")["runs"]] == ["ok"]  # type: ignore[attr-defined]
        assert time.monotonic() - started < 40, "the run ended when it exited, not when its child did"
    finally:
        subprocess.run(["pkill", "-f", f"sleep {LONG}"], check=False)


def _running(command: str) -> bool:
    """Whether a process runs ``command`` itself (not one that names it among its arguments, as ab does)."""
    return subprocess.run(["pgrep", "-f", "^" + command.replace(".", "[.]")], capture_output=True).returncode == 0


#: A sleep of about a minute whose command line is this test session's alone (pgrep and pkill find it, and
#: nothing of another session running the same tests on the machine).
LONG = f"60.{os.getpid()}"


def test_a_number_the_program_prints_and_one_it_writes(env: dict[str, str], tmp_path: Path) -> None:
    printed = _json(ab(env, "--variant", "a=", "--variant", "b=", "--rounds", "2", "--warmup", "0",
                       "--metric", r"regex:tok/s: ([0-9.]+)", "--higher-is-better", "--json", "--",
                       "sh", "-c", "echo 'tok/s: 1.0'; echo 'tok/s: 12.5'"))
    assert _variant(printed, "a")["median"] == 12.5, "the last match, its group"
    assert printed["better"] == "higher"
    out = tmp_path / "result.json"
    written = _json(ab(env, "--variant", "a=", "--variant", "b=", "--rounds", "2", "--warmup", "0",
                       "--metric", f"json:{out}:latency.p50", "--lower-is-better", "--json", "--",
                       "sh", "-c", f'echo \'{{"latency": {{"p50": 3.25}}}}\' > {out}'))
    assert [r["value"] for r in _variant(written, "b")["runs"]] == [3.25, 3.25]  # type: ignore[attr-defined]


def test_runs_that_fail_time_out_or_print_nothing_are_reported_not_averaged(env: dict[str, str]) -> None:
    failed = _json(ab(env, "--variant", "a=", "--variant", "b=", "--rounds", "2", "--warmup", "0", "--json",
                      "--", "sh", "-c", "echo broken >&2; exit 3"))
    runs = _variant(failed, "a")["runs"]
    assert [(r["status"], r["value"], r["detail"]) for r in runs] == [("failed", None, "exit 3: broken")] * 2  # type: ignore[attr-defined]
    assert _variant(failed, "a")["median"] is None and failed["recommendation"].startswith("no variant")  # type: ignore[attr-defined]
    started = time.monotonic()
    late = _json(ab(env, "--variant", "a=", "--variant", "b=", "--rounds", "1", "--warmup", "0", "--timeout", "1",
                    "--json", "--", "sleep", "30"))
    assert time.monotonic() - started < 20, "each run stopped at its timeout"
    assert {r["status"] for v in late["variants"] for r in v["runs"]} == {"timeout"}  # type: ignore[attr-defined]
    quiet = _json(ab(env, "--variant", "a=", "--variant", "b=", "--rounds", "1", "--warmup", "0", "--json",
                     "--metric", "regex:([0-9]+) ms", "--lower-is-better", "--", "echo", "nothing"))
    assert [r["status"] for r in _variant(quiet, "a")["runs"]] == ["no value"]  # type: ignore[attr-defined]
    text = ab(env, "--variant", "a=", "--variant", "b=", "--rounds", "1", "--warmup", "0", "--",
              "sh", "-c", "exit 3")
    assert "lost: a, round 1: failed (exit 3)" in text.stdout, text.stdout
    # What the program says last on stderr is shown as text: nothing in it acts on the terminal.
    loud = ab(env, "--variant", "a=", "--variant", "b=", "--rounds", "1", "--warmup", "0", "--",
              "sh", "-c", r"printf '\033]0;owned\007\033[2J\n' >&2; exit 3")
    assert "\x1b" not in loud.stdout + loud.stderr and "\\x1b]0;owned\\x07" in loud.stdout, loud.stdout


def test_ctrl_c_stops_the_run_and_reports_what_was_measured(env: dict[str, str]) -> None:
    proc = subprocess.Popen([*NUMAPIN, "ab", "--variant", "a=", "--variant", "b=", "--warmup", "0", "--rounds", "3",
                             "--", "sleep", LONG],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120  # in the first run's long sleep (however slowly a loaded machine gets there)
    while not _running(f"sleep {LONG}") and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted: what was measured before ^C" in out, out
    assert "round 1: interrupted (stopped by ^C)" in out, out
    assert not _running(f"sleep {LONG}"), "the run in progress was stopped with everything it started"


@pytest.mark.parametrize(("args", "says"), [
    (["--variant", "a=", "--variant", "b=", "--", "no-such-program-numapin"], "no program 'no-such-program-numapin'"),
    (["--variant", "a=", "--variant", "b="], "no COMMAND given"),
    (["--variant", "a", "--variant", "b=", "--", "true"], "expected NAME=EXEC-OPTIONS"),
    (["--variant", "a=", "--variant", "a=--cpus 0", "--", "true"], "each name once"),
    (["--variant", "a=", "--", "true"], "give two at least"),
    (["--variant", "a=", "--variant", "b=", "--baseline", "c", "--", "true"], "--baseline 'c': not a variant"),
    (["--variant", "a=", "--variant", "b=", "--metric", "regex:x", "--", "true"], "say which way is better"),
    (["--variant", "a=", "--variant", "b=", "--metric", "regex:(", "--lower-is-better", "--", "true"],
     "not a regular expression"),
    (["--variant", "a=", "--variant", "b=", "--metric", "wall", "--higher-is-better", "--", "true"], "contradicts"),
    (["--variant", "a=", "--variant", "b=", "--metric", "speed", "--", "true"], "expected wall, regex:PATTERN"),
    (["--variant", "a=--keep", "--variant", "b=", "--", "true"], "placement options only"),
    (["--variant", "a='--cpus", "--variant", "b=", "--", "true"], "No closing quotation"),
    (["--variant", "a=", "--variant", "b=", "--rounds", "0", "--", "true"], "--rounds"),
    (["--variant", "a=", "--variant", "b=", "--svg", "x.png", "--", "true"], "must end in .svg"),
    (["--variant", "a=", "--variant", "b=", "--svg", "-", "--json", "--", "true"], "--json and a picture"),
])
def test_bad_input_is_one_line(env: dict[str, str], args: list[str], says: str) -> None:
    result = ab(env, *args)
    assert result.returncode == 2 and says in result.stderr and len(result.stderr.splitlines()) == 1, result


def test_default_variants_need_a_gpu(env: dict[str, str], tmp_path: Path) -> None:
    from numapin.facts import synthetic

    root = synthetic.write("laptop", tmp_path / "laptop")
    result = ab({**env, "NUMAPIN_FSROOT": str(root), "CUDA_VISIBLE_DEVICES": ""}, "--", "true")
    assert result.returncode == 2 and "no GPU is visible here" in result.stderr, result.stderr


def test_the_table_the_picture_and_the_page(env: dict[str, str], tmp_path: Path) -> None:
    svg, page = tmp_path / "ab.svg", tmp_path / "ab.html"
    result = ab(env, "--variant", "quick=", "--variant", "slow=", "--rounds", "3", "--warmup", "0", "--svg",
                str(svg), "--html", str(page), "--", "true")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "numapin ab: true" and "3 rounds after 0 warm-up rounds" in lines[1]
    assert lines[2].split() == ["variant", "runs", "lost", "median", "95%", "interval", "vs", "quick", "95%",
                                "interval", "p", "finding"]
    assert lines[3].startswith("quick ") and "baseline" in lines[3]
    assert "no difference detected after 3 runs each" in lines[4] or "faster" in lines[4] or "slower" in lines[4]
    drawing = svg.read_text()
    assert drawing.startswith("<svg") and 'id="variant-quick"' in drawing and 'id="variant-slow"' in drawing
    assert drawing.count("<circle") == 6, "one dot per run"
    html = page.read_text()
    assert "<svg" in html and "numapin ab: true" in html and html.count("<circle") == 6
    assert result.stderr == "", "no terminal: nothing per run (the table says each loss)"


def test_a_run_that_lives_past_a_second_is_judged_where_it_ran(env: dict[str, str]) -> None:
    first = min(os.sched_getaffinity(0))
    text = ab(env, "--variant", "all=", "--variant", f"one=--cpus {first}", "--rounds", "1", "--warmup", "0", "--",
              "sleep", "1.6").stdout
    for name in ("all", "one"):  # sampled by the judge: every thread inside its placement
        line = next(line for line in text.splitlines() if line.startswith(f"placed: {name}: "))
        assert "at most 0 threads outside the placement" in line and line.endswith("(1 run sampled)"), text


def test_max_time_starts_no_run_after_it(env: dict[str, str]) -> None:
    report = _json(ab(env, "--variant", "a=", "--variant", "b=", "--rounds", "50", "--warmup", "0",
                      "--max-time", "1", "--json", "--", "sleep", "0.3"))
    runs = sum(len(v["runs"]) for v in report["variants"])  # type: ignore[attr-defined, misc]
    assert 2 <= runs < 12 and report["rounds"] < 50, report["rounds"]


def test_the_recommendation_names_exec_options_and_the_hooks_variables() -> None:
    from numapin.tools.ab.report import Comparison, Finding, Report, Summary
    from numapin.tools.ab.runs import Better, Design, Metric, MetricKind, Variant

    def report(options: tuple[str, ...]) -> Report:
        variants = (Variant("none", ()), Variant("bind", options))
        summaries = tuple(Summary(v, (), 1.0, (1.0, 1.0)) for v in variants)
        better = Comparison("bind", 0.5, (0.4, 0.6), 0.001, Finding.BETTER)
        return Report(("x",), Metric(MetricKind.WALL, Better.LOWER), Design(), "none", summaries, (better,), 0.05, 10)

    said = report(("--mode", "node", "--memory=bind")).recommendation()
    assert said == ("deploy bind: numapin exec --mode node --memory=bind -- ... (or NUMAPIN_AUTOPIN=1 "
                    "NUMAPIN_MODE=node NUMAPIN_MEMORY=bind for the start-up hook); 2.00x faster than none, p = 0.001")
    assert "start-up hook" not in report(("--cpus", "0-3")).recommendation(), "--cpus has no variable"


def test_the_default_variants_are_the_hosts_and_take_the_gpu_asked_for(env: dict[str, str], tmp_path: Path) -> None:
    from numapin.facts import synthetic
    from numapin.facts.machine import cached

    root = synthetic.write("laptop", tmp_path / "laptop")  # one GPU, and kinds of core (P and E)
    assert len(cached(str(root), {}).kinds().kinds) > 1
    report = _json(ab({**env, "NUMAPIN_FSROOT": str(root)}, "--gpu", "0", "--rounds", "1", "--warmup", "0",
                      "--json", "--", "true"))
    options = {v["name"]: v["options"] for v in report["variants"]}  # type: ignore[attr-defined]
    assert list(options) == ["none", "node-bind", "node-preferred", "exclusive", "fastest"]
    assert options["none"] == [] and report["baseline"] == "none", "the baseline places nothing"
    assert options["node-bind"] == ["--mode", "node", "--memory", "bind", "--gpu", "0"]
    assert options["fastest"][-4:] == ["--cores", "fastest", "--gpu", "0"]


def test_on_a_terminal_the_runs_show_as_one_progress_line(env: dict[str, str]) -> None:
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([*NUMAPIN, "ab", "--variant", "a=", "--variant", "b=", "--rounds", "2", "--warmup",
                                 "0", "--", "true"], env=env, stdout=subprocess.PIPE, stderr=follower, text=True)
        out, _ = proc.communicate(timeout=300)
        os.close(follower)
        said = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            said += chunk
    finally:
        os.close(leader)
    text = said.decode()
    assert proc.returncode == 0 and "variant" in out, out
    assert "\n" not in text.strip("\r\n ") and "numapin ab [" in text and "4/4 runs" in text, repr(text)
    assert text.endswith("\r"), "the line is cleared before the table"
