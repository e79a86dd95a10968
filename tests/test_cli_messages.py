"""What a newcomer meets in the first hour: messages that name the cause, options that do what they say."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

import numapin
from conftest import in_child

NUMAPIN = [sys.executable, "-m", "numapin"]


def _numapin(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NUMAPIN, *args], capture_output=True, text=True, timeout=120, env=env)


# -- logging: one "numapin:" however logging is configured ---------------------------------


def test_a_name_formatter_prints_numapin_once(pair_root: Path) -> None:
    code = ("import logging, numapin\n"
            "logging.basicConfig(level=logging.DEBUG, format='%(name)s: %(message)s')\n"
            "numapin.pin(1, memory='bind'); numapin.pin(1, memory='bind')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"NUMAPIN_FSROOT": str(pair_root), "PATH": "/usr/bin:/bin"})
    lines = proc.stderr.splitlines()
    assert proc.returncode == 0 and lines, proc.stderr
    assert all(line.startswith("numapin: ") and not line.startswith("numapin: numapin") for line in lines), lines


def test_unconfigured_logging_still_names_numapin(pair_root: Path) -> None:
    # Nobody configured logging: the last-resort handler would print the bare message.
    code = "import numapin\nnumapin.pin(cpus=[99999])\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"NUMAPIN_FSROOT": str(pair_root), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1 and "UsageError" in proc.stderr  # a caller's mistake raises, never logs
    # No GPU visible: one warning, on any host, the second pin quiet.
    warn = "import numapin\nnumapin.pin(); numapin.pin()\n"
    proc = subprocess.run([sys.executable, "-c", warn], capture_output=True, text=True, timeout=60,
                          env={"NUMAPIN_FSROOT": str(pair_root), "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0
    assert proc.stderr.startswith("numapin: no GPU is visible") and proc.stderr.count("\n") == 1, proc.stderr


def test_records_carry_the_message_without_the_name(pair_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    def child() -> list[str]:
        with caplog.at_level(logging.DEBUG, logger="numapin"):
            numapin.pin(0)
        return [r.getMessage() for r in caplog.records if r.name == "numapin"]

    messages = in_child(child)
    assert messages and not any(m.startswith("numapin") for m in messages), messages


# -- CUDA_VISIBLE_DEVICES: the exact cause, from every command ------------------------------


@pytest.mark.parametrize("value, entry", [("a,b", "'a'"), ("2", "'2'"), ("GPU-zzz", "'GPU-zzz'"), ("0x1", "'0x1'"),
                                          ("", None)])
@pytest.mark.parametrize("command", [["plan"], ["exec", "--strict", "--", "true"], ["doctor"]])
def test_a_bad_cuda_visible_devices_is_named_by_every_command(command: list[str], value: str,
                                                               entry: str | None) -> None:
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": value}
    proc = _numapin(command[0], "--machine", "pair", *command[1:], env=env)
    said = proc.stdout + proc.stderr
    assert proc.returncode in (1, 2) and "Traceback" not in said, said
    expected = f"CUDA_VISIBLE_DEVICES entry {entry} names no GPU" if entry else "CUDA_VISIBLE_DEVICES is empty"
    assert expected in said, said
    assert "none found, or" not in said  # the general guess is gone where the cause is known


def test_an_entry_that_cuts_the_list_short_is_said_where_some_gpus_stay_visible(
        pair_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "1,7,0"}
    plan = _numapin("plan", "--machine", "pair", env=env)
    assert plan.returncode == 0 and plan.stdout.count("\n0 ") == 1  # one rank: GPU 1 alone is visible
    assert "entry '7' names no GPU of this machine" in plan.stderr
    doctor = _numapin("doctor", "--machine", "pair", "--json", env=env)
    import json

    ids = [f["id"] for f in json.loads(doctor.stdout)["findings"]]
    assert "cuda-visible-devices" in ids and doctor.returncode == 1

    def child() -> tuple[int, str]:
        import os

        os.environ["CUDA_VISIBLE_DEVICES"] = "1,7,0"
        with caplog.at_level(logging.WARNING, logger="numapin"):
            first = numapin.pin()
            numapin.pin()
        return first.placement.gpu if first.placement else -1, "\n".join(r.getMessage() for r in caplog.records)

    gpu, said = in_child(child)
    assert gpu == 0 and said.count("entry '7' names no GPU") == 1, said


def test_a_machine_without_gpus_points_at_the_synthetic_ones(tmp_path: Path) -> None:
    from numapin.facts import synthetic as machines

    root = machines.write(machines.shape_named("laptop"), tmp_path / "root")
    # The laptop without its GPU: the PCI tree emptied of NVIDIA devices.
    import shutil

    for device in (root / "sys" / "bus" / "pci" / "devices").iterdir():
        if (device / "vendor").exists() and (device / "vendor").read_text().strip() == "0x10de":
            shutil.rmtree(device.resolve(), ignore_errors=True)
            device.unlink()
    env = {"PATH": "/usr/bin:/bin", "NUMAPIN_FSROOT": str(root)}
    plan = _numapin("plan", env=env)
    assert plan.returncode == 2 and plan.stderr.count("\n") == 1
    assert "none found on this machine" in plan.stderr and "--machine dgx-h100" in plan.stderr
    doctor = _numapin("doctor", env=env)
    assert "--machine dgx-h100" in doctor.stdout


def test_show_on_a_machine_without_gpus_suggests_a_synthetic_one() -> None:
    from numapin.facts.machine import gather

    facts = gather("/", {})
    proc = _numapin("show")
    if facts.inventory.gpus:
        assert "--machine dgx-h100" not in proc.stdout
    else:
        assert "try a synthetic one: numapin show --machine dgx-h100" in proc.stdout


# -- the library says what it assumed --------------------------------------------------------


def test_pin_without_a_rank_on_several_gpus_says_it_assumed_gpu_0(pair_root: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    def child() -> tuple[int | None, list[str]]:
        with caplog.at_level(logging.WARNING, logger="numapin"):
            result = numapin.pin()
            numapin.pin()
            numapin.pin(1)
        return result.placement.gpu if result.placement else None, [r.getMessage() for r in caplog.records]

    gpu, messages = in_child(child)
    assert gpu == 0
    assert len(messages) == 1 and "GPU 0 of the 2 visible is assumed" in messages[0] and "pin(gpu=N)" in messages[0]


def test_explicit_cpus_with_a_gpu_are_reported_as_the_callers(pair_root: Path) -> None:
    from live import ALL

    cpu = max(ALL)

    def child() -> str:
        return str(numapin.pin(0, cpus=[cpu]))

    said = in_child(child)
    assert f"target {cpu}; explicit CPUs, named for GPU 0" in said and "; for GPU 0" not in said


# -- options that do what their help says, or are refused in one line ----------------------


def test_verbose_is_taken_after_the_sub_command_too() -> None:
    for words in (["-v", "plan", "--machine", "pair"], ["plan", "-v", "--machine", "pair"]):
        assert _numapin(*words).returncode == 0, words
    # -v after `--` belongs to the program.
    proc = _numapin("exec", "--cpus", "0", "--memory", "none", "--", sys.executable, "-c",
                    "import sys; print(sys.argv[1:])", "-v")
    assert proc.stdout == "['-v']\n"


@pytest.mark.parametrize("words", [["exec", "--bogus", "--", "true"], ["exec", "--mode", "nearest", "--", "true"],
                                   ["plan", "--reserve"], ["threads"], ["snapshot"]])
def test_a_usage_error_is_one_line_that_points_at_help(words: list[str]) -> None:
    proc = _numapin(*words)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--help" in proc.stderr, proc.stderr
    assert "usage:" not in proc.stderr


def test_a_picture_to_standard_output(tmp_path: Path) -> None:
    proc = subprocess.run([*NUMAPIN, "plan", "--machine", "pair", "--svg", "-"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("<svg") and proc.stdout.rstrip().endswith("</svg>")
    assert not (tmp_path / "-").exists()
    both = _numapin("show", "--svg", "-", "--html", "-")
    assert both.returncode == 2 and "standard output" in both.stderr


@pytest.mark.parametrize(("words", "says"), [
    (["exec", "--cpus", "0", "--json", "--", "true"], "add --dry-run"),
    (["snapshot", "out.zip"], "gzip-compressed tar"),
])
def test_an_option_that_would_be_ignored_is_refused(words: list[str], says: str, tmp_path: Path) -> None:
    proc = subprocess.run([*NUMAPIN, *words], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_snapshot_to_standard_output_is_the_archive(tmp_path: Path) -> None:
    import tarfile

    out = tmp_path / "s.tar.gz"
    with out.open("wb") as f:
        proc = subprocess.run([*NUMAPIN, "snapshot", "-", "--machine", "pair"], stdout=f, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    assert proc.returncode == 0 and "standard output" in proc.stderr
    with tarfile.open(out) as archive:
        assert "numapin-snapshot/sys/devices/system/cpu/online" in archive.getnames()


def test_file_errors_are_said_as_the_system_says_them(tmp_path: Path) -> None:
    proc = _numapin("plan", "--machine", "pair", "--svg", str(tmp_path / "no" / "such" / "x.svg"))
    assert proc.returncode == 2 and proc.stderr.strip().endswith("x.svg: No such file or directory")
    assert "[Errno" not in proc.stderr


def test_plan_says_the_same_footer_for_one_gpu_as_for_several() -> None:
    one = _numapin("plan", "--machine", "pair", "--gpus", "1").stdout.splitlines()
    two = _numapin("plan", "--machine", "pair").stdout.splitlines()
    assert one[-1] == "mode node, 1 rank" and two[-1] == "mode node, 2 ranks"


def test_counts_agree_with_their_nouns() -> None:
    from numapin.base.text import counted

    assert [counted(n, "thread") for n in (0, 1, 2)] == ["0 threads", "1 thread", "2 threads"]
    proc = _numapin("plan", "--machine", "pair", "--reserve", "1")
    assert "has 1 core" in proc.stderr and "1 cores" not in proc.stderr
    proc = _numapin("plan", "--machine", "pair", "--cpus", "99")
    assert "CPU 99 is outside" in proc.stderr


# -- options that cannot go together, and input taken too little or too much --------

#: Each command line, and the one line it gets (exit 2): nothing given is dropped silently.
REFUSED = [
    (["exec", "--gpu", "0", "--nodes", "1"], "--gpu and --nodes both choose the CPUs"),
    (["exec", "--local-rank", "1", "--nodes", "1"], "--local-rank and --nodes both choose the CPUs"),
    (["exec", "--cpus", "0-3", "--nodes", "1"], "--cpus and --nodes both choose the CPUs"),
    (["exec", "--mode", "exclusive", "--cpus", "0-3"], "--cpus and --mode both choose the CPUs"),
    (["exec", "--nodes", "0", "--mode", "exclusive"], "--nodes and --mode both choose the CPUs"),
    (["exec", "--mems", "1", "--memory", "none"], "--mems and --memory none"),
    (["plan", "--cpus", "0-3", "--mode", "exclusive"], "--cpus and --mode both say which CPUs"),
    (["plan", "--gpus", "0,0", "--mode", "exclusive"], "GPU 0 listed twice in --gpus"),
    (["plan", "--gpus", "0-1", "--ranks", "2"], "--gpus and --ranks both say which ranks"),
    (["plan", "--ranks", "12"], "local rank 8, but 8 GPUs are visible"),
    (["plan", "--gpus", "3-1"], "not a list of GPU indices"),
]


@pytest.mark.parametrize(("argv", "says"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_options_that_cannot_go_together_are_refused_in_one_line(argv: list[str], says: str) -> None:
    words = [*argv, "--machine", "dgx-h100"] + (["--", "true"] if argv[0] == "exec" else [])
    proc = _numapin(*words)
    assert proc.returncode == 2 and says in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stdout == ""


def test_a_local_rank_past_the_gpus_is_named_not_wrapped() -> None:
    proc = subprocess.run([*NUMAPIN, "exec", "--machine", "dgx-h100", "--dry-run", "--", "true"], capture_output=True,
                          text=True, timeout=120, env={**live_env(), "LOCAL_RANK": "12"})
    assert proc.returncode == 2 and "local rank 12, but 8 GPUs are visible" in proc.stderr, proc.stderr


def test_plan_takes_gpu_ranges_and_a_number_of_ranks() -> None:
    import json

    ranges = json.loads(_numapin("plan", "--machine", "dgx-h100", "--gpus", "4-5,0", "--json").stdout)
    assert [p["gpu"] for p in ranges] == [4, 5, 0] and [p["rank"] for p in ranges] == [0, 1, 2]
    ranks = json.loads(_numapin("plan", "--machine", "dgx-h100", "--ranks", "3", "--json").stdout)
    assert [(p["rank"], p["gpu"]) for p in ranks] == [(0, 0), (1, 1), (2, 2)]


def live_env() -> dict[str, str]:
    import live

    return live.without_inputs(dict(__import__("os").environ))


@pytest.mark.parametrize("placement", ["0", 0, {"cpus": "0"}])
def test_pin_refuses_a_placement_that_is_none(placement: object) -> None:
    with pytest.raises(numapin.UsageError, match="takes a Placement"):
        numapin.pin(placement=placement)  # type: ignore[arg-type]


# -- help and messages ---------------------------------------------------


def test_an_argument_no_parser_takes_points_at_the_sub_commands_help() -> None:
    proc = _numapin("exec", "--bogus", "--", "true")
    assert proc.returncode == 2 and proc.stderr == (
        "numapin exec: unrecognized arguments: --bogus (see numapin exec --help)\n"), proc.stderr


def test_show_promises_no_rank_cpus_and_pictures_are_named_for_their_format() -> None:
    assert "each rank's CPUs" not in _numapin("show", "--help").stdout
    assert "each rank's CPUs" in _numapin("plan", "--help").stdout
    for option, name in (("--svg", "x.png"), ("--html", "x.svg")):
        proc = _numapin("plan", "--machine", "laptop", option, name)
        assert proc.returncode == 2 and "must end in" in proc.stderr and proc.stderr.count("\n") == 1


def test_ps_as_root_does_not_advise_running_as_root(tmp_path: Path) -> None:
    import os

    from numapin.observe.judge import judge

    judged = None
    for pid in (1, 2):  # a process this one may not read the environment of, where there is one
        try:
            judged = judge(pid, memory=False)
        except numapin.NumapinError:
            continue
        if judged.verdict.value == "unreadable":
            break
    if judged is None or judged.verdict.value != "unreadable":
        pytest.skip("every process's environment is readable here")
    assert ("(or root)" in (judged.note or "")) == (os.geteuid() != 0), judged.note


# -- rehearsing a large machine on this host ------------------------------------------


def _rehearsal_only() -> None:
    from numapin.facts import synthetic as machines
    from numapin.facts.machine import this_host_cpus

    spec = machines.shape_named("dgx-h100")
    if len(this_host_cpus()) >= spec.sockets * spec.cores_per_socket * spec.threads_per_core:
        pytest.skip("this host has a DGX H100's CPUs: --machine dgx-h100 is no rehearsal here")


def test_exec_on_a_machine_that_is_not_this_host_says_it_is_a_rehearsal() -> None:
    _rehearsal_only()
    env = {**live_env(), "LOCAL_RANK": "3"}
    strict = subprocess.run([*NUMAPIN, "exec", "--machine", "dgx-h100", "--strict", "--", "true"], capture_output=True,
                            text=True, timeout=120, env=env)
    assert strict.returncode == 2 and "--machine dgx-h100 is not this host" in strict.stderr, strict.stderr
    assert strict.stderr.count("\n") == 1 and "--dry-run" in strict.stderr
    plain = subprocess.run([*NUMAPIN, "exec", "--machine", "dgx-h100", "--", sys.executable, "-c", "print('ran')"],
                           capture_output=True, text=True, timeout=120, env={**env, "LOCAL_RANK": "5"})
    assert plain.returncode == 0 and plain.stdout == "ran\n"
    assert "a rehearsal" in plain.stderr and "someone else" not in plain.stderr, plain.stderr


def test_ps_on_a_rehearsal_machine_does_not_blame_someone_else() -> None:
    import json

    _rehearsal_only()
    child = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True, env={**live_env(), "LOCAL_RANK": "1"})
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        proc = _numapin("ps", str(child.pid), "--machine", "dgx-h100", "--json")
    finally:
        child.kill()
        child.wait()
    workers = json.loads(proc.stdout)["workers"]
    assert [w["placed_by"] for w in workers] == ["nobody"], workers
    said = _numapin("ps", "--machine", "dgx-h100").stdout
    assert "machine: dgx-h100 is a rehearsal" in said, said  # visible, not a silent change


# -- fail-open outcomes say so where the user looks ------------------------------------------


def test_a_dry_run_that_would_run_unpinned_says_numapin_fails_open_and_strict_refuses() -> None:
    import os

    import live

    env = live.without_inputs(dict(os.environ)) | {"CUDA_VISIBLE_DEVICES": ""}  # no GPU for it, on any host
    said = _numapin("exec", "--machine", "pair", "--dry-run", "--", "true", env=env)
    assert said.returncode == 0 and "would run unpinned" in said.stdout, said.stdout + said.stderr
    assert "fails open: with --strict this is an error" in said.stdout
    refused = _numapin("exec", "--machine", "pair", "--dry-run", "--strict", "--", "true", env=env)
    assert refused.returncode == 2 and "fails open" not in refused.stdout + refused.stderr


def test_threads_says_when_a_small_processs_memory_is_not_judged() -> None:
    import os

    small = subprocess.Popen(["sleep", "60"])
    try:
        first = min(os.sched_getaffinity(0))
        text = _numapin("threads", str(small.pid), "--cpus", str(first)).stdout
    finally:
        small.kill()
        small.wait()
    assert "of its own memory outside" in text and "(not judged: under 32 MiB of its own memory)" in text, text


def test_ps_fits_100_columns_by_default_and_gives_every_column_when_wide(pair_root: Path, tmp_path: Path) -> None:
    import os

    import live

    # A worker as wide as a row gets: the longest name a process has, misplaced by its threads, kept drifting.
    code = ("import time, numapin; open('/proc/self/comm', 'w').write('fifteen-letters'); numapin.pin(0); "
            "print('ready', flush=True); time.sleep(60)")
    env = live.without_inputs(dict(os.environ)) | {"NUMAPIN_FSROOT": str(pair_root),
                                                   "NUMAPIN_RUNTIME_DIR": str(tmp_path / "records")}
    worker = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
        os.sched_setaffinity(worker.pid, live.NODE1)
        narrow = _numapin("ps", str(worker.pid), env=env).stdout.splitlines()
        wide = _numapin("ps", "--wide", str(worker.pid), env=env).stdout.splitlines()
    finally:
        worker.kill()
        worker.wait()
    rows = narrow[:2]
    assert rows[0].split()[:2] == ["pid", "name"] and "fifteen-letters" in rows[1] and "misplaced" in rows[1], narrow
    assert max(len(line) for line in rows) <= 100, rows
    assert "expected" in wide[0] and "seen by" in wide[0] and "rank" in wide[0], wide
