"""Shared fixtures: real machine snapshots, synthetic machines, and running a test in a child process (child.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import live
import numapin
import other_user
from child import in_child as in_child  # the tests import it from here too
from live import INPUTS
from numapin.base import environment
from numapin.facts import synthetic as machines

# No timed assertions in the tests: hypothesis's default deadline (200 ms an example) is one, and an emulated guest
# (no KVM) runs ten times slower than this host. Speed is the benchmarks' to measure.
settings.register_profile("numapin", deadline=None)
settings.load_profile("numapin")

REPO = Path(__file__).resolve().parents[1]
# hwloc's captures of real machines, carried in the repository (see its README for source and licence).
FIXTURES = Path(os.environ.get("NUMAPIN_FIXTURES", REPO / "tests" / "fixtures" / "hwloc-linux"))


def snapshot_names() -> list[str]:
    if not FIXTURES.is_dir():
        raise RuntimeError(f"hwloc snapshots not found at {FIXTURES} (set NUMAPIN_FIXTURES)")
    return sorted(p.name[: -len(".tar.bz2")] for p in FIXTURES.glob("*.tar.bz2"))


class Snapshots:
    """Unpacks each tarball once, into a temporary folder, on first use."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.roots: dict[str, Path] = {}

    def root(self, name: str) -> Path:
        if name not in self.roots:
            dest = self.base / name
            with tarfile.open(FIXTURES / f"{name}.tar.bz2") as archive:
                top = archive.getnames()[0].split("/")[0]
                # numeric_owner: as root, tarfile would otherwise look up every member's owner by name.
                archive.extractall(dest, filter="tar", numeric_owner=True)
            self.roots[name] = dest / top
        return self.roots[name]


_OWN_BASETEMP = pytest.StashKey[str]()
_PRIVATE = pytest.StashKey[str]()
#: Tiers that need more than the test extra: the guest tier boots QEMU, the integration tier
#: runs torchrun and Ray, the browser tier Chromium, the exporters tier Prometheus and node_exporter, the
#: kubernetes tier its schema validator and a gRPC server, the namespaces tier root's containers. Each runs only
#: when asked for by path (python -m pytest tests/guest).
_TIERS = {Path(__file__).resolve().parent / name
          for name in ("guest", "integration", "browser", "launchers", "exporters", "kubernetes", "namespaces")}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path in _TIERS:
        asked = [Path(a.split("::")[0]).resolve() for a in config.args]
        return not any(a == collection_path or collection_path in a.parents for a in asked)
    return None


def pytest_configure(config: pytest.Config) -> None:
    # The tests write tens of thousands of small files (snapshots, synthetic
    # machines); on tmpfs that is about ten times faster than on disk.
    shm = Path("/dev/shm")
    if config.option.basetemp is None and shm.is_dir() and os.access(shm, os.W_OK):
        config.option.basetemp = tempfile.mkdtemp(prefix="numapin-tests-", dir=shm)
        config.stash[_OWN_BASETEMP] = config.option.basetemp
    # The pins of the tests (and of the processes they start) are recorded in a folder of the
    # session's, not in the host's /run/numapin where a real worker's would be.
    if environment.RUNTIME_DIR not in os.environ:
        os.environ[environment.RUNTIME_DIR] = tempfile.mkdtemp(prefix="numapin-records-",
                                                              dir=config.option.basetemp or None)
    # The numactl stand-ins the tests (and the processes they start) write go to a runtime folder of the
    # session's, one that only this user and root may change all the way from / (as the stand-in demands:
    # /dev/shm and /tmp, where the rest of the session's files are, are everyone's).
    private = tempfile.mkdtemp(prefix="numapin-tests-", dir=_private_base())
    config.stash[_PRIVATE] = private
    os.environ["XDG_RUNTIME_DIR"] = private


def _private_base() -> str:
    """A folder only this user and root may change: /run for root, else the user's runtime folder or cache."""
    from numapin.base.files import only_theirs

    home_cache = os.path.join(os.path.expanduser("~"), ".cache")
    for base in ("/run" if os.geteuid() == 0 else "", os.environ.get("XDG_RUNTIME_DIR", ""), home_cache):
        if base and only_theirs(base, {0, os.geteuid()}):
            os.makedirs(base, mode=0o700, exist_ok=True)
            return base
    raise RuntimeError("no folder that only this user and root may change (set XDG_RUNTIME_DIR to one)")


def pytest_unconfigure(config: pytest.Config) -> None:
    for key in (_OWN_BASETEMP, _PRIVATE):
        own = config.stash.get(key, None)
        if own:
            shutil.rmtree(own, ignore_errors=True)


@pytest.fixture(scope="session")
def other() -> Iterator[other_user.Other]:
    """A second, unprivileged user of this host (root only), made for the session and removed after it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create and become another user")
    made = other_user.make()
    yield made
    other_user.remove(made)


@pytest.fixture
def private_tmp() -> Iterator[Path]:
    """A fresh folder that only this user and root may change all the way from / (``tmp_path`` is under a
    world-writable one): where a numactl stand-in may live."""
    folder = Path(tempfile.mkdtemp(dir=os.environ["XDG_RUNTIME_DIR"]))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


#: The start-up file this checkout ships (pip puts it at the top of site-packages).
STARTUP = REPO / "src" / "numapin-startup.pth"

Python = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def python(tmp_path_factory: pytest.TempPathFactory) -> Python:
    """Run an interpreter whose site-packages has the start-up file; env: only what the test gives."""
    home = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(subprocess.run([home / "bin" / "python", "-c", where], check=True, capture_output=True,
                               text=True).stdout.strip())
    # "_" sorts before "n": the path entry is in place when the start-up line runs.
    (site / "_numapin_under_test.pth").write_text(str(Path(numapin.__file__).parents[1]) + "\n")
    (site / STARTUP.name).write_bytes(STARTUP.read_bytes())
    base = live.without_inputs(dict(os.environ))

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(home / "bin" / "python"), *args], env={**base, **env}, capture_output=True,
                              text=True, timeout=60)

    return run



@pytest.fixture(scope="session")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    return lambda name: tmp_path_factory.mktemp(name)


@pytest.fixture(scope="session")
def snapshots(scratch: Callable[[str], Path]) -> Snapshots:
    return Snapshots(scratch("snapshots"))


@pytest.fixture(scope="session")
def machine_root(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Write each synthetic machine once per session; returns its root."""
    made: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in made:
            made[name] = machines.write(name, tmp_path_factory.mktemp(name) / "root")
        return made[name]

    return make


def use_root(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make ``root`` this test's machine (NUMAPIN_FSROOT), with no other numapin input set."""
    for name in INPUTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(environment.FSROOT, str(root))
    return root


@pytest.fixture(scope="session")
def _live_roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {"pair": live.write_pair(tmp_path_factory.mktemp("live-pair") / "root"),
            "refusing": live.write_refusing(tmp_path_factory.mktemp("live-refusing") / "root")}


@pytest.fixture
def pair_root(_live_roots: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """The live machine with one GPU per node (see ``live.py``: GPU 0 on ``NODE0``, GPU 1 on ``NODE1``),
    as NUMAPIN_FSROOT."""
    if not live.NODE0 or not live.NODE1:
        pytest.skip(f"needs allowed CPUs on both halves of the machine (allowed: {live.BASELINE})")
    return use_root(_live_roots["pair"], monkeypatch)


@pytest.fixture
def refusing_root(_live_roots: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """Like ``pair_root``, but GPU 1's node is one the real kernel lacks: binding memory there is refused."""
    if not live.NODE0 or not live.NODE1:
        pytest.skip(f"needs allowed CPUs on both halves of the machine (allowed: {live.BASELINE})")
    return use_root(_live_roots["refusing"], monkeypatch)


@pytest.fixture(autouse=True)
def _no_leaked_pin() -> Iterator[None]:
    """Every test must leave pytest's own CPU mask, and numapin's record, as it found them."""
    from numapin.pinning import process as pinning

    before = os.sched_getaffinity(0)
    yield
    assert os.sched_getaffinity(0) == before, "a test leaked a CPU pin into the test process"
    assert pinning.state().applied is None, "a test left numapin's record in the test process"
