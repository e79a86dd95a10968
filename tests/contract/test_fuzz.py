"""Fuzzing each surface another user or a broken host can write, through the command line in this process:
any answer (exit 0, 1 or 2, a refusal on one line) but never a traceback.

- records: any file names and contents in a record folder;
- sysfs trees: any content in any file of a small machine, any name for a folder its readers list;
- names: any bytes a process or thread can take as its name.
(numactl's arguments: tests/tools/test_numactl.py, and against the real numactl, tests/launchers.)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import live
import numapin
from numapin.base.environment import RUNTIME_DIR
from numapin.cli import main
from numapin.facts import synthetic as machines
from numapin.pinning import record

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def run(*argv: str) -> tuple[int, str, str]:
    """numapin ARGV in this process: its exit code, standard output and error. An exception is a failure."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    if code == 2:
        assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("numapin "), err.getvalue()
    assert code in (0, 1, 2), (argv, code)
    return code, out.getvalue(), err.getvalue()


def printable(text: str) -> bool:
    """Nothing a terminal acts on, nothing that cannot be written out."""
    text.encode("utf-8")  # a lone surrogate raises here
    return not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text)


# -- records ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def worker() -> Iterator[int]:
    child = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(600)"],
                             stdout=subprocess.PIPE, text=True, env={**live.without_inputs(dict(os.environ)),
                                                                      "LOCAL_RANK": "0"})
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    yield child.pid
    child.kill()
    child.wait()


def _good(pid: int) -> str:
    start = record.start_time(pid)
    placement = {"cpus": "0", "mems": "0", "reason": "fuzz", "mode": "node", "gpu": 0, "pci": None, "node": 0,
                 "rank": None, "reserved": "", "cores": "all"}
    return json.dumps({"version": record.VERSION, "pid": pid, "start": start, "how": "exec", "mask": "0",
                       "target": "0", "placement": placement, "memory": None, "policy": "respect", "pools": {},
                       "written": 1.0})


def _names(content: str, pid: int, start: object) -> bool:
    """Whether ``content`` is a whole record of format VERSION naming process ``pid`` started at ``start``."""
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        return False
    found = record.Record.from_dict(data) if isinstance(data, dict) else None
    return found is not None and (found.pid, found.start) == (pid, start)


NAMES = st.one_of(
    st.just("{good}"),  # the one name that is read: its contents must be fuzzed most
    st.sampled_from(["{pid}-{start}.json", "{pid}-{start}-0.json", "{pid}-0{start}-{ns}.json", "{good}.1.tmp",
                     "{good}.x.tmp", "\u00b2-1-{ns}.json", "-1-{ns}.json", "{pid}--{ns}.json"]),
    st.text(alphabet="0123456789-.jsontmp\u00b2\u0663\ud800", min_size=1, max_size=24),
)
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
KEYS = ["version", "pid", "start", "how", "mask", "target", "placement", "memory", "policy", "pools", "written"]
#: A file's content, made from the believable record of the worker: itself, one field changed or gone, or other.
CONTENTS = st.one_of(
    st.just(lambda good: json.dumps(good)),
    st.tuples(st.sampled_from(KEYS), JSON).map(lambda kv: lambda good: json.dumps({**good, kv[0]: kv[1]})),
    st.sampled_from(KEYS).map(lambda key: lambda good: json.dumps({k: v for k, v in good.items() if k != key})),
    st.sampled_from(["", "{", "[" * 5000 + "]" * 5000, "null", '"\\ud800"', "1e999", '{"version": 3}',
                     '{"how": "\\udcff"}']).map(lambda text: lambda good: text),
    JSON.map(lambda value: lambda good: json.dumps(value)),
)


@FUZZ
@given(CONTENTS, st.lists(st.tuples(NAMES, CONTENTS, st.sampled_from(["file", "file", "fifo", "folder", "link"])),
                          max_size=3))
def test_any_record_folder_is_read_or_passed_over(worker: int, tmp_path_factory: pytest.TempPathFactory,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  content: Callable[[dict[str, Any]], str],
                                                  others: list[tuple[str, Callable[[dict[str, Any]], str], str]]
                                                  ) -> None:
    # The worker's own record name with fuzzed content (the one file a reader parses), and other files beside.
    planted = [("{good}", content, "file"), *others]
    folder = tmp_path_factory.mktemp("records")
    good_name = record.file_name(worker, record.start_time(worker) or 0)
    fill = {"good": good_name, "pid": worker, "start": record.start_time(worker), "ns": record.namespace()}
    believable = False
    good = json.loads(_good(worker))
    for name, make, kind in planted:
        with contextlib.suppress(KeyError, ValueError, IndexError):  # a fuzzed name with braces of its own
            name = name.format(**fill)
        content = make(good)
        path = folder / name
        if not name or "/" in name or name in (".", "..") or path.exists() or path.is_symlink():
            continue
        try:
            if kind == "file":
                path.write_text(content, errors="surrogatepass")
                believable |= name == good_name and _names(content, worker, fill["start"])
            elif kind == "fifo":
                os.mkfifo(path)
            elif kind == "folder":
                path.mkdir()
            else:
                path.symlink_to("/etc/passwd")
        except (OSError, UnicodeEncodeError):
            continue
    monkeypatch.setenv(RUNTIME_DIR, str(folder))
    found = record.entries()
    assert set(found) <= {worker} and (worker in found) == believable
    code, out, _ = run("ps", str(worker), "--json")
    assert code in (0, 1) and [w["pid"] for w in json.loads(out)["workers"]] == [worker]
    code, out, _ = run("ps", str(worker), "--prometheus")
    assert code in (0, 1) and printable(out)
    shutil.rmtree(folder)


# -- sysfs trees --------------------------------------------------------------------------

SMALL = machines.MachineSpec("fuzz-small", sockets=2, cores_per_socket=2, gpus_per_node=1, nic_relation="PIX",
                             storage_nics=True)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], list[Path]]:
    """A small machine with GPUs and NICs; its files, and the folders its readers list."""
    root = machines.write(SMALL, tmp_path_factory.mktemp("small") / "root")
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    listed = sorted({p.parent for p in root.rglob("*") if re.search(r"(node|cpu|ports|net|infiniband)$",
                                                                    str(p.parent))})
    return root, files, listed


WORDS = st.one_of(
    st.sampled_from(["", "\u00b2", "-1", "0x", "4294967296", "99999999999999999999", "0-", "1-0", "0,,1", "\xff",
                     "node\u00b2", "cpu-1", "1\n2", " 0", "0" * 70000]),
    st.text(max_size=30),
)


@FUZZ
@given(st.data())
def test_any_sysfs_tree_gives_an_answer_or_a_one_line_error(small: tuple[Path, list[Path], list[Path]],
                                                            data: st.DataObject) -> None:
    root, files, listed = small
    target = data.draw(st.sampled_from(files))
    saved = target.read_bytes()
    word = data.draw(WORDS)
    extra = None
    if data.draw(st.booleans()):
        target.write_text(word, errors="surrogatepass")
    else:
        folder = data.draw(st.sampled_from(listed))
        name = data.draw(st.sampled_from(["\u00b2", "node\u00b2", "cpu\u0663", "port-1", "1" * 30]) | st.text(
            alphabet="0123456789abnodecpu\u00b2-", min_size=1, max_size=12))
        extra = folder / name
        if extra.exists() or extra.is_symlink():
            extra = None
        else:
            extra.mkdir()
    try:
        for argv in (["show"], ["show", "--json"], ["plan"], ["doctor"],
                     ["exec", "--dry-run", "--gpu", "0", "--nics", "auto", "--", "true"]):
            numapin.refresh()  # the machine read afresh: the cache holds the tree before this change
            _, out, _ = run(argv[0], "--root", str(root), *argv[1:])
            assert printable(out), argv
    finally:
        target.write_bytes(saved)
        if extra is not None:
            extra.rmdir()
        numapin.refresh()


# -- names --------------------------------------------------------------------------------

NAMER = """
import ctypes, sys, threading
libc = ctypes.CDLL(None)
ready = threading.Event()
def helper():
    ready.wait()
helper_thread = threading.Thread(target=helper, daemon=True); helper_thread.start()
print(threading.get_native_id(), helper_thread.native_id, flush=True)
for line in sys.stdin.buffer:
    name = bytes.fromhex(line.decode().strip())
    libc.prctl(15, ctypes.c_char_p(name))  # PR_SET_NAME: this thread's name (the process's, for the main one)
    with open(f"/proc/self/task/{helper_thread.native_id}/comm", "wb") as comm:
        comm.write(name[::-1] or b"x")
    print("named", flush=True)
"""


@pytest.fixture(scope="module")
def named() -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen([sys.executable, "-c", NAMER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={**live.without_inputs(dict(os.environ)), "LOCAL_RANK": "0"})
    assert child.stdout is not None
    child.stdout.readline()
    yield child
    child.kill()
    child.wait()


@FUZZ
@given(st.binary(min_size=1, max_size=15).filter(lambda b: b"\0" not in b))
def test_any_process_name_stays_in_its_row_and_prints(named: subprocess.Popen[str], name: bytes) -> None:
    assert named.stdin is not None and named.stdout is not None
    named.stdin.write(name.hex() + "\n")
    named.stdin.flush()
    assert named.stdout.readline() == "named\n"
    pid = str(named.pid)
    code, out, _ = run("ps", pid)
    rows = [line for line in out.splitlines() if line.startswith(pid)]
    assert code in (0, 1) and len(rows) == 1 and printable(out)
    for argv in (("ps", pid, "--json"), ("ps", pid, "--prometheus"), ("threads", pid), ("threads", pid, "--json"),
                 ("doctor", "--pid", pid)):
        code, out, _ = run(*argv)
        assert printable(out), argv
        if argv[-1] == "--json":
            json.loads(out)


def test_the_name_fuzzer_can_fail() -> None:
    # The check the name fuzzer relies on finds what it must: a control character, a lone surrogate.
    assert not printable("evil\x1b[2J") and printable("caf\u00e9 \\x1b")
    with pytest.raises(UnicodeEncodeError):
        printable("\udcff")
