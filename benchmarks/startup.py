"""Start-up costs, measured side by side: what a Python process of a job pays for numapin.

Three ratios, each of a command to ``python -c pass`` in a virtual environment without numapin's
start-up file, measured in alternated pairs (A B A B ..., the ratio taken pair by pair, so a drift of
the machine's speed touches both alike), with the bound each must keep:

- a process that is no worker, with ``NUMAPIN_AUTOPIN=1`` exported (the launcher, a tokenizer
  subprocess, a helper script: no local rank, the pair machine's two GPUs visible) — bound 1.2x;
  also on the 8 x H100 machine (the glance reads each GPU's driver entry: which GPUs a container holds)
  and on the 8 x MI300X machine, whose GPUs the glance counts in the KFD topology;
- a worker (``LOCAL_RANK=1`` on the pair machine, memory policy none): pinned at start — bound 2x. Printed
  beside it, the floor of any layout of numapin's modules: the same worker with every module it imports
  served from one file of their compiled code, read at once (what merging them all into one module would
  save: a finder's search, two ``stat``s and a file per module), the code and the pin unchanged; and under
  that, the floor of the code itself: the same file with every function the worker never runs (a profile
  of it in a child says which) replaced by a stub that raises, what a perfect split of hot and cold code
  could leave;
- ``numapin exec --cpus 0 -- python -c pass`` — bound 3x. Printed beside it, the floor of any ``exec``
  written in Python that parses its options with argparse and sets a memory policy (ctypes, libc): a
  script that does only that and execs the same command, no numapin in it. Two interpreters start in
  either; what the floor adds to them is argparse (with ``re`` and ``enum``) and ctypes. Under it, the
  same without argparse (the arguments taken as they come): what the bound leaves numapin's code.

The pair machine is this host's CPUs 0 and 1 as two nodes with a GPU each (``numapin machine pair``).
Also printed: the start-up file inactive (no variable set), and its one line timed in process.
With ``--against CHECKOUT`` (another checkout of numapin: a worktree of the commit before a change), the three
bounded cases are timed again side by side with that checkout's code, each its start over the other's.
Run: python benchmarks/startup.py [PAIRS] [--against CHECKOUT]
"""

from __future__ import annotations

import ast
import importlib
import marshal
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import types
from importlib.abc import SourceLoader
from pathlib import Path

from numapin.facts import synthetic as machines

REPO = Path(__file__).resolve().parents[1]
_ARGS = sys.argv[1:]
#: ``--against CHECKOUT``: another checkout of numapin (its root folder), whose start-up is timed beside this one's.
AGAINST = Path(_ARGS[_ARGS.index("--against") + 1]).resolve() if "--against" in _ARGS else None
PAIRS = next((int(a) for a in _ARGS if a.isdigit()), 20)


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, of the child) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


# The floor of ``numapin exec``: parse as the CLI does (argparse), bind, load what set_mempolicy is called
# through (ctypes, libc), exec. No numapin module, no file read.
FLOOR = """\
import argparse, ctypes, os, sys
parser = argparse.ArgumentParser(prog="floor")
parser.add_argument("--cpus", type=int, required=True)
parser.add_argument("command", nargs=argparse.REMAINDER)
args = parser.parse_args()
os.sched_setaffinity(0, {args.cpus})
ctypes.CDLL(None, use_errno=True)
os.execv(args.command[1], args.command[1:])
"""

# The same without a parser: the arguments taken as they come.
FLOOR_UNPARSED = """\
import ctypes, os, sys
os.sched_setaffinity(0, {int(sys.argv[2])})
ctypes.CDLL(None, use_errno=True)
os.execv(sys.argv[4], sys.argv[4:])
"""

# The functions a worker's start runs (its exit's included, and what any later import asks of the finder the
# start-up hook leaves for torch), heard by a profile in a child that imports numapin without the start-up file:
# (file name, first line, name) of each.
RAN = """\
import atexit, importlib.util, os, sys
ran = set()
def hear(frame, event, arg):
    if event == "call":
        ran.add((os.path.basename(frame.f_code.co_filename), frame.f_code.co_firstlineno, frame.f_code.co_name))
sys.setprofile(hear)
import numapin.startup
numapin.startup.at_start()
importlib.util.find_spec("numapin_no_such_module")
atexit._run_exitfuncs()
sys.setprofile(None)
print(repr(sorted(ran)))
"""


# The finder of the layout floor: numapin's modules from one marshalled dict (name -> code, package?, file),
# put first on sys.meta_path by a .pth file that sorts before the start-up file's.
BUNDLE = """\
import marshal, sys
from importlib.machinery import ModuleSpec

class Bundle:
    def __init__(self, path):
        with open(path, "rb") as file:
            self.modules = marshal.loads(file.read())

    def find_spec(self, name, path=None, target=None):
        found = self.modules.get(name)
        if found is None:
            return None
        spec = ModuleSpec(name, self, origin=found[2], is_package=found[1])
        spec.has_location = True
        if found[1]:
            spec.submodule_search_locations = [found[2].rpartition("/")[0]]
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(self.modules[module.__name__][0], module.__dict__)

sys.meta_path.insert(0, Bundle(__file__.rpartition("/")[0] + "/numapin.bundle"))
"""


def venv(home: Path, *, startup: bool, bundle: dict[str, tuple[types.CodeType, bool, str]] | None = None,
         src: Path | None = None) -> str:
    """A venv whose site-packages points at this numapin (``src``: another checkout's ``src`` folder), with or
    without the start-up file; with ``bundle``, its modules are served from one file (the layout floor)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    site = next((home / "lib").glob("python3*/site-packages"))
    import numapin

    src = src or Path(numapin.__file__).parents[1]
    (site / "_numapin_under_test.pth").write_text(f"{src}\n")
    if startup:
        (site / "numapin-startup.pth").write_bytes((src / "numapin-startup.pth").read_bytes())
    if bundle is not None:
        (site / "numapin.bundle").write_bytes(marshal.dumps(bundle))
        (site / "_numapin_bundle.py").write_text(BUNDLE)
        (site / "_numapin_bundle.pth").write_text("import _numapin_bundle\n")
    return str(home / "bin" / "python")


def worker_bundle(python: str, env: dict[str, str]) -> dict[str, tuple[types.CodeType, bool, str]]:
    """Every numapin module a worker pinned at start imports, compiled: name -> (code, package?, file)."""
    listing = "import sys; print(*(m for m in sys.modules if m.startswith('numapin')))"
    names = subprocess.run([python, "-c", listing], env=env, check=True, capture_output=True, text=True).stdout.split()
    bundle: dict[str, tuple[types.CodeType, bool, str]] = {}
    for name in names:
        module = importlib.import_module(name)
        spec = module.__spec__
        assert spec is not None and spec.origin is not None and isinstance(spec.loader, SourceLoader)
        code = spec.loader.get_code(name)
        assert code is not None
        bundle[name] = (code, spec.submodule_search_locations is not None, spec.origin)
    return bundle


def runs_only(code: types.CodeType, ran: set[tuple[str, int, str]]) -> types.CodeType:
    """``code`` with each function (or method) it defines that the worker never ran replaced by a stub that
    raises: the code a worker runs and the definitions it makes, nothing more."""
    consts: list[object] = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            key = (os.path.basename(const.co_filename), const.co_firstlineno, const.co_name)
            const = runs_only(const, ran) if key in ran else _stub(const)  # a class body ran: its methods are seen
        consts.append(const)
    return code.replace(co_consts=tuple(consts))


def _stub(code: types.CodeType) -> types.CodeType:
    """A function's code that raises, with ``code``'s name and its free variables (a closure's cells)."""
    free = code.co_freevars
    source = (f"def outer():\n    {'; '.join(f'{name} = None' for name in free) or 'pass'}\n"
              f"    def stub(*args, **kwargs):\n        {''.join(f'{name}; ' for name in free)}"
              "raise RuntimeError('not run by a worker')\n    return stub\n")
    outer = next(c for c in compile(source, code.co_filename, "exec").co_consts if isinstance(c, types.CodeType))
    stub = next(c for c in outer.co_consts if isinstance(c, types.CodeType))
    assert stub.co_freevars == free, (stub.co_freevars, free)
    if sys.version_info >= (3, 11):  # where a function takes its qualified name from its code
        return stub.replace(co_name=code.co_name, co_qualname=code.co_qualname, co_firstlineno=code.co_firstlineno)
    return stub.replace(co_name=code.co_name, co_firstlineno=code.co_firstlineno)


def paired(a: tuple[list[str], dict[str, str]], b: tuple[list[str], dict[str, str]]) -> tuple[float, float]:
    """Median ratios A/B (wall, cpu) over PAIRS alternated pairs, after one warm-up of each."""
    timed(*a), timed(*b)
    walls, cpus = [], []
    for _ in range(PAIRS):
        (wall_a, cpu_a), (wall_b, cpu_b) = timed(*a), timed(*b)
        walls.append(wall_a / wall_b)
        cpus.append(cpu_a / cpu_b if cpu_b > 0 else float("nan"))
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    # Bytecode as an installed package has it (pip compiles it): none of the figures is a compiler's.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NUMAPIN_", "LOCAL_RANK", "CUDA_VISIBLE")) and k != "PYTHONDONTWRITEBYTECODE"}
    import compileall

    import numapin

    compileall.compile_dir(str(Path(numapin.__file__).parent), quiet=1)
    script = Path(sys.executable).parent / "numapin"
    numapin_cmd = [str(script)] if script.exists() else [sys.executable, "-m", "numapin"]
    with tempfile.TemporaryDirectory() as tmp:
        pair = str(machines.write("pair", Path(tmp) / "pair"))
        mi300x = str(machines.write("mi300x", Path(tmp) / "mi300x"))
        dgx = str(machines.write("dgx-h100", Path(tmp) / "dgx"))
        bare = venv(Path(tmp) / "bare", startup=False)
        hooked = venv(Path(tmp) / "hooked", startup=True)
        baseline = ([bare, "-c", "pass"], env)
        floor = Path(tmp) / "floor.py"
        floor.write_text(FLOOR)
        on_pair = {**env, "NUMAPIN_FSROOT": pair, "NUMAPIN_RUNTIME_DIR": str(Path(tmp) / "records")}
        worker = {**on_pair, "NUMAPIN_AUTOPIN": "1", "LOCAL_RANK": "1", "NUMAPIN_MEMORY": "none"}
        bundle = worker_bundle(hooked, worker)
        bundled = venv(Path(tmp) / "bundled", startup=True, bundle=bundle)
        ran = set(ast.literal_eval(
            subprocess.run([bare, "-c", RAN], env=worker, check=True, capture_output=True, text=True).stdout))
        hot = {name: (runs_only(code, ran), package, file) for name, (code, package, file) in bundle.items()}
        only_run = venv(Path(tmp) / "hot", startup=True, bundle=hot)
        sizes = [sum(len(marshal.dumps(code)) for code, _, _ in each.values()) // 1000 for each in (bundle, hot)]
        # Each floor must pin as the worker does, saying nothing (a stub run would leave it unpinned, with a
        # warning), from the bundle's code and from nothing else of numapin's.
        probe = ("import os, sys; print(sorted(os.sched_getaffinity(0))); print({type(m.__spec__.loader).__name__ "
                 "for n, m in sys.modules.items() if n.startswith('numapin')})")
        (pinned, _, said), *floors = (
            [*run.stdout.splitlines(), run.stderr] for run in (
                subprocess.run([python, "-c", probe], env=worker, check=True, capture_output=True, text=True)
                for python in (hooked, bundled, only_run)))
        assert not said and all(floor == [pinned, "{'Bundle'}", ""] for floor in floors), (pinned, said, floors)
        unparsed = Path(tmp) / "unparsed.py"
        unparsed.write_text(FLOOR_UNPARSED)
        cases = {
            "no worker, NUMAPIN_AUTOPIN=1 (no rank, 2 GPUs visible)": (
                ([hooked, "-c", "pass"], {**on_pair, "NUMAPIN_AUTOPIN": "1"}), 1.2),
            "no worker, 8 x H100 (each GPU's driver entry read), NUMAPIN_AUTOPIN=1": (
                ([hooked, "-c", "pass"], {**on_pair, "NUMAPIN_FSROOT": dgx, "NUMAPIN_AUTOPIN": "1"}), 1.2),
            "no worker, 8 x MI300X (KFD topology read), NUMAPIN_AUTOPIN=1": (
                ([hooked, "-c", "pass"], {**on_pair, "NUMAPIN_FSROOT": mi300x, "NUMAPIN_AUTOPIN": "1"}), 1.2),
            "worker, NUMAPIN_AUTOPIN=1 LOCAL_RANK=1 (pinned at start)": (([hooked, "-c", "pass"], worker), 2.0),
            "  its floor, any layout: every module from one file": (
                ([bundled, "-c", "pass"], worker), None),
            f"  its floor, the code it runs: the rest stubbed ({sizes[0]} -> {sizes[1]} KB)": (
                ([only_run, "-c", "pass"], worker), None),
            "numapin exec --cpus 0 -- python -c pass": (
                ([*numapin_cmd, "exec", "--cpus", "0", "--", bare, "-c", "pass"], env), 3.0),
            "  its floor: argparse, ctypes, exec (no numapin)": (
                ([bare, str(floor), "--cpus", "0", "--", bare, "-c", "pass"], env), None),
            "  the same without argparse": (
                ([bare, str(unparsed), "--cpus", "0", "--", bare, "-c", "pass"], env), None),
            "start-up file, no variable set": (([hooked, "-c", "pass"], env), None),
        }
        print(f"{PAIRS} alternated pairs each, median of the pair-by-pair ratios to python -c pass")
        for name, (command, bound) in cases.items():
            wall, cpu = paired(command, baseline)
            verdict = "" if bound is None else f"  (bound {bound}x: {'within' if max(wall, cpu) <= bound else 'OVER'})"
            print(f"  {name:66} {wall:5.2f}x wall  {cpu:5.2f}x cpu{verdict}")
    # The process figures cannot resolve a fraction of a millisecond: the line itself, timed in process.
    line = (REPO / "src" / "numapin-startup.pth").read_text()
    saved = {k: os.environ.pop(k) for k in ("NUMAPIN_AUTOPIN", "NUMAPIN_PATCH") if k in os.environ}
    try:
        runs = 10000
        seconds = timeit.timeit(lambda: exec(line, {}), number=runs)
    finally:
        os.environ.update(saved)
    print(f"  the start-up line itself, inactive: {seconds / runs * 1e6:.1f} µs per interpreter start")
    if AGAINST is not None:
        side_by_side(AGAINST, env)
    machine_read_on_many_cpus()
    glance_on_many_functions()
    nvml_import(env)


def side_by_side(other: Path, env: dict[str, str]) -> None:
    """The three bounded cases, this checkout's start over ``other``'s (its code compiled as pip would), in
    alternated pairs."""
    import compileall

    compileall.compile_dir(str(other / "src" / "numapin"), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        pair = str(machines.write("pair", Path(tmp) / "pair"))
        on_pair = {**env, "NUMAPIN_FSROOT": pair, "NUMAPIN_RUNTIME_DIR": str(Path(tmp) / "records")}
        worker = {**on_pair, "NUMAPIN_AUTOPIN": "1", "LOCAL_RANK": "1", "NUMAPIN_MEMORY": "none"}
        mine, theirs = (venv(Path(tmp) / name, startup=True, src=src)
                        for name, src in (("mine", None), ("theirs", other / "src")))
        print(f"side by side with {other}, {PAIRS} alternated pairs, this checkout's start over that one's")
        for name, command, case_env in (
                ("no worker, NUMAPIN_AUTOPIN=1 (pair machine)", lambda py: [py, "-c", "pass"],
                 {**on_pair, "NUMAPIN_AUTOPIN": "1"}),
                ("worker, NUMAPIN_AUTOPIN=1 LOCAL_RANK=1", lambda py: [py, "-c", "pass"], worker),
                ("numapin exec --cpus 0 -- python -c pass",
                 lambda py: [py, "-m", "numapin", "exec", "--cpus", "0", "--", py, "-c", "pass"], env)):
            wall, cpu = paired((command(mine), case_env), (command(theirs), case_env))
            print(f"  {name:66} {wall:5.2f}x wall  {cpu:5.2f}x cpu")


def machine_read_on_many_cpus() -> None:
    """The machine read a worker makes on the 8 x H100 machine (224 CPUs), in process (on this host that machine
    is a rehearsal, which pins nothing): its topology and GPUs, and the same with the cores and caches asked for,
    which a pin to a GPU's node (the default mode) never does."""
    from numapin.facts.machine import read_machine

    with tempfile.TemporaryDirectory() as tmp:
        root = machines.write("dgx-h100", Path(tmp) / "dgx")
        runs = 200
        pin = timeit.timeit(lambda: read_machine(root), number=runs) / runs
        whole = timeit.timeit(lambda: read_machine(root).topology.grouping, number=runs) / runs
    print(f"  a worker's machine read on 8 x H100 (224 CPUs): {pin * 1e6:.0f} µs; {whole * 1e6:.0f} µs with the "
          f"cores and caches, which a pin to a node never asks for")


def nvml_import(env: dict[str, str]) -> None:
    """What loading NVML's bindings (the ``nvml`` extra) costs an interpreter, where they are installed: a pin asks
    NVML only for what sysfs left untold, and ``numapin show`` to check sysfs."""
    import importlib.util

    if importlib.util.find_spec("pynvml") is None:
        print("  NVML's bindings: not installed here (pip install nvidia-ml-py to time their import)")
        return
    wall, cpu = paired(([sys.executable, "-c", "import pynvml"], env), ([sys.executable, "-c", "pass"], env))
    print(f"  importing NVML's bindings (pynvml), where installed: {wall:.2f}x wall {cpu:.2f}x cpu of python -c pass, "
          "before the driver starts; a pin asks NVML only for what sysfs left untold")


def glance_on_many_functions() -> None:
    """The glance on a root of many PCI functions (hwloc's capture of 137: bridges, NICs, disks, a coprocessor),
    read as a capture is (every function's vendor) and as a live sysfs is (the GPU drivers' lists), in process;
    and the full reading of its GPUs a worker makes, both ways too."""
    import tarfile

    from numapin.facts.glance import machine_gpus
    from numapin.facts.inventory import read_gpus
    from numapin.facts.topology import read_topology

    capture = REPO / "tests/fixtures/hwloc-linux/32em64t-2n8c+dax+nvme+mic+dimms.tar.bz2"
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(capture) as archive:
            archive.extractall(tmp, filter="tar")
        (root,) = (str(p) for p in Path(tmp).iterdir() if p.is_dir())
        functions = len(os.listdir(os.path.join(root, "sys/bus/pci/devices")))
        runs = 300
        topology = read_topology(root)
        full = timeit.timeit(lambda: read_gpus(topology, nvml=False), number=runs) / runs
        scanned = timeit.timeit(lambda: machine_gpus(root), number=runs) / runs
        os.makedirs(os.path.join(root, "sys/bus/pci/drivers"))  # as the live sysfs shows it (no GPU driver here)
        listed = timeit.timeit(lambda: machine_gpus(root), number=runs) / runs
        full_listed = timeit.timeit(lambda: read_gpus(topology, nvml=False), number=runs) / runs
    print(f"  the glance on {functions} PCI functions: {scanned * 1e6:.0f} µs reading each one's vendor, "
          f"{listed * 1e6:.0f} µs listing the GPU drivers' functions ({scanned / listed:.0f}x); the full reading "
          f"of its GPUs {full * 1e6:.0f} µs and {full_listed * 1e6:.0f} µs")


if __name__ == "__main__":
    main()
