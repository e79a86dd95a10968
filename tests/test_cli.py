from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import Snapshots
from numapin.cli import main

NUMAPIN = [sys.executable, "-m", "numapin"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_show_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show")
    assert code == 0
    assert "NUMA nodes" in out and "this process may run on" in out and "Cores:" in out
    from numapin.cpuset import CpuSet

    assert f"this process may run on {CpuSet(os.sched_getaffinity(0))}\n" in out


def test_show_json_has_the_documented_keys(capsys: pytest.CaptureFixture[str],
                                          machine_root: Callable[[str], Path]) -> None:
    code, out, _ = run(capsys, "show", "--json", "--root", str(machine_root("dgx-h100")))
    data = json.loads(out)
    assert code == 0
    assert set(data["cpus"]) >= {"online", "allowed", "process"}
    assert data["cpus"]["online"] == "0-223"
    assert data["nodes"][0] == {**data["nodes"][0], "id": 0, "cpus": "0-55,112-167", "memory_only": False}
    assert data["packages"][1] == {"id": 1, "cpus": "56-111,168-223"}
    assert data["cores"][0] == {"package": 0, "id": 0, "cpus": "0,112"}
    gpu = data["gpus"][3]
    assert {k: gpu[k] for k in ("index", "pci", "node", "cpus", "memory_nodes")} == {
        "index": 3, "pci": "0000:48:00.0", "node": 0, "cpus": "0-55,112-167", "memory_nodes": "0"}
    assert gpu["uuid"].startswith("GPU-")


def test_show_gpus_under_cuda_visible_devices(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch,
                                              machine_root: Callable[[str], Path]) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    code, out, _ = run(capsys, "show", "--root", str(machine_root("gb300")))
    assert code == 0 and "GPUs (2 visible of 4" in out
    assert out.index("cuda:0 0000:38:00.0") < out.index("cuda:1 0000:18:00.0")
    assert "GPU memory node 4" in out and "memory-only" in out


def test_show_says_plainly_when_there_is_no_gpu(capsys: pytest.CaptureFixture[str], snapshots: Snapshots) -> None:
    code, out, _ = run(capsys, "show", "--root", str(snapshots.root("16amd64-8n2c")))
    assert code == 0 and "GPUs: none found on this machine" in out
    code, out, _ = run(capsys, "show", "--json", "--root", str(snapshots.root("16amd64-8n2c")))
    assert json.loads(out)["gpus"] == []


def test_show_a_capture_with_gpu_memory_nodes(capsys: pytest.CaptureFixture[str], snapshots: Snapshots) -> None:
    code, out, _ = run(capsys, "show", "--root", str(snapshots.root("nvidiagpunumanodes")))
    assert code == 0
    assert "node 255: memory-only" in out and "memory of GPU 0004:05:00.0" in out


@pytest.mark.parametrize("args", [["show", "--root", "/does/not/exist"], ["plan", "--root", "/proc/self"]])
def test_unusable_root_is_a_one_line_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_machine_flag_shows_a_synthetic_machine(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--machine", "pair")
    assert code == 0 and "node 1: cpus 1 (1)" in out and "cuda:1 0000:28:00.0" in out


def test_fsroot_variable_and_root_flag_agree(capsys: pytest.CaptureFixture[str],
                                             machine_root: Callable[[str], Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(machine_root("epyc-nps4"))
    _, by_flag, _ = run(capsys, "show", "--json", "--root", root)
    monkeypatch.setenv("NUMAPIN_FSROOT", root)
    _, by_env, _ = run(capsys, "show", "--json")
    assert by_flag == by_env


def test_plan_table_and_json(capsys: pytest.CaptureFixture[str], machine_root: Callable[[str], Path]) -> None:
    code, out, _ = run(capsys, "plan", "--root", str(machine_root("dgx-h100")), "--mode", "exclusive",
                       "--reserve", "1")
    lines = out.splitlines()
    # The workers' CPUs (what exec pins every thread to) apart from the reserved ones.
    assert code == 0 and lines[0].split() == ["rank", "gpu", "pci", "node", "workers", "mems", "reserved", "nic"]
    assert lines[1].split() == ["0", "0", "0000:18:00.0", "0", "0-12,112-124", "0", "13,125", "mlx5_0", "(PXB)"]
    assert lines[-1] == "mode exclusive, 8 ranks; numapin exec exports each rank's reserved CPUs to it as " \
                        "NUMAPIN_RESERVED"
    code, out, _ = run(capsys, "plan", "--root", str(machine_root("epyc-nps4")), "--gpus", "7,0", "--json")
    data = json.loads(out)
    assert [(p["rank"], p["gpu"], p["cpus"], p["mems"]) for p in data] == [
        (0, 7, "112-127,240-255", "7"), (1, 0, "0-15,128-143", "0")]
    assert "reserved" not in data[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [(["plan", "--root", "DGX", "--gpus", "9"], "not visible"),
     (["plan", "--root", "DGX", "--reserve", "56"], "leaves no core"),
     (["plan", "--root", "DGX", "--cpus", "0-999"], "outside the allowed CPUs"),
     (["plan", "--root", "/", "--mode", "node"], "no GPU is visible")],
)
def test_plan_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str],
                     machine_root: Callable[[str], Path]) -> None:
    args = [str(machine_root("dgx-h100")) if a == "DGX" else a for a in args]
    code, _, err = run(capsys, *args)
    assert code == 2 and message in err


@pytest.mark.parametrize("args", [["--mode", "numa"], ["--cpus", "3-1"], ["--machine", "cray"]])
def test_argument_errors_exit_2(args: list[str]) -> None:
    proc = subprocess.run([*NUMAPIN, "plan", *args], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr


@pytest.mark.parametrize("command", ["show", "plan", "exec", "threads", "doctor", "snapshot", "machine"])
def test_every_command_has_help(command: str) -> None:
    proc = subprocess.run([*NUMAPIN, command, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "usage: numapin " + command in proc.stdout


def test_help_names_every_synthetic_machine() -> None:
    from numapin.cli import MACHINE_NAMES
    from numapin.facts.synthetic import SHAPES

    assert tuple(sorted(SHAPES)) == MACHINE_NAMES
    proc = subprocess.run([*NUMAPIN, "show", "--help"], capture_output=True, text=True, env={**os.environ,
                                                                                               "COLUMNS": "200"})
    assert ", ".join(MACHINE_NAMES) in proc.stdout


def test_an_unknown_machine_is_named_in_the_error() -> None:
    proc = subprocess.run([*NUMAPIN, "show", "--machine", "cray"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown machine 'cray'" in proc.stderr and "dgx-h100" in proc.stderr


def test_console_script_is_installed() -> None:
    from importlib.metadata import entry_points

    assert any(ep.value == "numapin.cli:main" for ep in entry_points(group="console_scripts", name="numapin"))


def test_the_installed_version_is_the_package_s_own() -> None:
    # One answer: pyproject.toml names no version of its own but reads numapin/version.py, so what pip
    # records and what `numapin --version` prints cannot drift apart.
    from importlib.metadata import version

    from numapin.version import __version__

    assert version("numapin") == __version__


def test_show_names_the_gpus_a_container_was_not_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    root = tmp_path / "dgx"
    run(capsys, "machine", "dgx-h100", str(root))
    listed = sorted(p.name for p in (root / "proc/driver/nvidia/gpus").iterdir())
    for bus in listed[:3]:  # a container given the others: the runtime mounted only their entries
        shutil.rmtree(root / "proc/driver/nvidia/gpus" / bus)
    code, out, _ = run(capsys, "show", "--root", str(root))
    assert code == 0 and f"GPUs ({len(listed) - 3} visible of {len(listed) - 3}" in out
    assert f"cuda:0 {listed[3]}" in out
    assert "Not in this process's view (3 of the machine's GPUs" in out
    assert all(f"  {bus} node " in out for bus in listed[:3])
    code, out, _ = run(capsys, "show", "--json", "--root", str(root))
    data = json.loads(out)
    assert [g["pci"] for g in data["gpus"]] == listed[3:]
    assert [h["pci"] for h in data["hidden_gpus"]] == listed[:3] and all(h["why"] for h in data["hidden_gpus"])


# -- synthetic machines on disk, and --machine wherever --root is ---------------


def test_machine_writes_a_root_that_show_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "dgx"
    code, out, _ = run(capsys, "machine", "dgx-h100", str(dest))
    assert code == 0 and f"--root {dest}" in out and "224 CPUs" in out
    code, out, _ = run(capsys, "show", "--json", "--root", str(dest))
    data = json.loads(out)
    assert data["root"] == str(dest) and data["cpus"]["online"] == "0-223" and len(data["gpus"]) == 8
    # Never over something that is there already.
    code, _, err = run(capsys, "machine", "pair", str(dest))
    assert code == 2 and "holds synthetic machine dgx-h100" in err
    code, _, err = run(capsys, "machine", "pair", str(dest / "sys" / "devices" / "system" / "cpu" / "online"))
    assert code == 2 and "holds other files" in err
    # The same machine again is harmless: README's `numapin machine pair DIR && ...` runs twice.
    code, out, _ = run(capsys, "machine", "dgx-h100", str(dest))
    assert code == 0 and f"--root {dest}" in out


def test_show_json_of_a_synthetic_machine_names_no_vanished_folder(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--json", "--machine", "gb300")
    data = json.loads(out)
    assert code == 0 and data["root"] is None and data["machine"] == "gb300"
    code, out, _ = run(capsys, "show", "--machine", "gb300")
    assert out.splitlines()[0].endswith("synthetic machine gb300")


def test_machine_option_for_exec_threads_and_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "exec", "--machine", "dgx-h100", "--gpu", "5", "--dry-run", "--json", "--", "true")
    assert code == 0 and json.loads(out)["placement"]["cpus"] == "56-111,168-223"
    code, out, _ = run(capsys, "threads", str(os.getpid()), "--machine", "pair", "--cpus", "0")
    assert code == 0 and " outside CPUs 0" in out
    code, out, _ = run(capsys, "snapshot", str(tmp_path / "s.tar.gz"), "--machine", "epyc-nps4")
    assert code == 0 and (tmp_path / "s.tar.gz").is_file()
    with pytest.raises(SystemExit) as exit_:
        main(["show", "--root", "/", "--machine", "pair"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def _machine_folders(*pids: int) -> set[Path]:
    """The synthetic machines' folders the commands of ``pids`` left (named for the PID that made them)."""
    return {p for d in ("/dev/shm", tempfile.gettempdir()) for pid in pids
            for p in Path(d).glob(f"numapin-machine-{pid}-*")}


def test_exec_with_a_synthetic_machine_runs_the_program_and_leaves_no_folder(tmp_path: Path) -> None:
    code = "import os; print(sorted(os.sched_getaffinity(0)), os.getpid())"
    proc = subprocess.run([*NUMAPIN, "exec", "--machine", "pair", "--cpus", "0", "--memory", "none", "--",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout.split(" ")[0], proc.stderr) == (0, "[0]", "")
    # The program has numapin's PID (exec), and that PID's folder is gone.
    assert not _machine_folders(int(proc.stdout.split()[-1]))


def test_a_sigterm_where_exceptions_are_dropped_still_ends_a_machine_command_and_removes_its_folder() -> None:
    # A weakref callback prints and drops a handler's exception: an ending raised there would leave the command
    # running on with its folder gone. The signal is sent from inside one.
    import signal

    code = """
import gc, os, signal, weakref
from numapin.cli.common import machine_folder
with machine_folder() as folder:
    print(folder, flush=True)
    class Thing: pass
    thing = Thing()
    ref = weakref.ref(thing, lambda _: os.kill(os.getpid(), signal.SIGTERM))
    del thing
    gc.collect()
    print("went on", flush=True)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    folder = proc.stdout.splitlines()[0]
    assert (proc.returncode, proc.stdout) == (128 + signal.SIGTERM, folder + "\n"), proc
    assert folder.startswith(tuple(str(p) for p in ("/dev/shm", tempfile.gettempdir()))) and not Path(folder).exists()


def test_messages_say_their_prefix_once(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "exec", "--")
    assert code == 2 and err.startswith("numapin exec: no PROGRAM given") and err.count("exec:") == 1
    code, _, err = run(capsys, "exec", "--", "no-such-program-numapin")
    assert code == 2 and err.count("exec:") == 1 and "not found on PATH" in err


def test_dry_run_without_a_gpu_says_so_once(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([*NUMAPIN, "exec", "--dry-run", "--", "true"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0
    assert (proc.stdout + proc.stderr).count("no GPU is visible") == 1 and "would run unpinned" in proc.stdout


def test_plan_help_states_the_rank_rule_as_the_guide_does() -> None:
    proc = subprocess.run([*NUMAPIN, "plan", "--help"], capture_output=True, text=True)
    guide = (Path(__file__).resolve().parents[1] / "docs" / "library.md").read_text()
    assert "r % visible GPUs" in guide and "r % N" in " ".join(proc.stdout.split())


@pytest.mark.parametrize("args", [
    ["exec", "--gpu", "\u0663", "--dry-run", "--", "true"],
    ["exec", "--local-rank", "\u00b2", "--dry-run", "--", "true"],
    ["plan", "--machine", "pair", "--reserve", "\u00b2"],
    ["plan", "--machine", "pair", "--gpus", "0,\u0663"],
    ["threads", "\u0663"],
    ["threads", "--cpus", "0", "--check", "--max-remote-memory", "\u0663"],
    ["plan", "--machine", "pair", "--gpus", "9" * 4400],
])
def test_numbers_are_ascii_decimals_or_exit_2(args: list[str]) -> None:
    # Other scripts' digits, superscripts and huge numbers are a one-line error, no traceback.
    proc = subprocess.run([*NUMAPIN, *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.strip(), proc.stderr


@pytest.mark.slow
def test_sigterm_during_a_machine_command_leaves_no_folder_behind() -> None:
    # Early signals at spread delays: while the synthetic machine is written, read and shown.
    import signal
    import time

    codes, pids = set(), []
    for step in range(16):
        proc = subprocess.Popen([*NUMAPIN, "show", "--machine", "dgx-h100"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        pids.append(proc.pid)
        time.sleep(0.06 + 0.03 * step)
        proc.send_signal(signal.SIGTERM)
        codes.add(proc.wait(timeout=60))
    assert not _machine_folders(*pids)
    assert codes & {128 + signal.SIGTERM}, f"no signal landed while the folder existed: exit codes {codes}"


@pytest.mark.parametrize("option", ["--svg", "--html"])
def test_an_empty_picture_file_name_is_refused(option: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["show", option, ""])
    assert exit_.value.code == 2
    assert "an empty file name" in capsys.readouterr().err
