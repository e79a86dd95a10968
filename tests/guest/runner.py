"""Boot small Linux guests with real NUMA nodes under QEMU and run one shell script in each.

The guest is Debian's own kernel with a tiny initramfs built here (static
busybox, the 9p/virtio/overlay modules resolved from ``modules.dep``, an init
script). It sees this machine's whole file tree read-only over 9p under a
tmpfs overlay, so the same paths (the repository, the virtual environment,
Python) work inside; a second, writable 9p share carries the job's script in
and its output and exit status out. Output goes through files on that share,
never the serial console, which can lose its tail at power-off.

Emulation without KVM is slow (Python runs about 18 times slower than on the
host): boot once per shape and run many checks in that one boot.
"""

from __future__ import annotations

import gzip
import io
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SHAPES", "GuestError", "GuestRun", "Shape", "boot", "missing"]

#: What the tier needs from the host, and where it comes from.
NEEDS = "Debian packages qemu-system-x86, linux-image-amd64 and busybox-static (apt-get install ...)"

_MODULES = ("9p", "9pnet_virtio", "virtio_pci", "overlay")


@dataclass(frozen=True)
class Shape:
    """A guest's NUMA layout: ``cpus[i]`` CPUs on node i, then ``memory_nodes`` nodes without CPUs."""

    name: str
    cpus: tuple[int, ...]
    memory_nodes: int = 0
    node_mib: int = 1024
    memory_node_mib: int = 512

    @property
    def cpu_count(self) -> int:
        return sum(self.cpus)

    @property
    def memory_mib(self) -> int:
        return self.node_mib * len(self.cpus) + self.memory_node_mib * self.memory_nodes

    def numa_args(self) -> list[str]:
        args: list[str] = []
        first = 0
        sizes = [self.node_mib] * len(self.cpus) + [self.memory_node_mib] * self.memory_nodes
        for node, size in enumerate(sizes):
            args += ["-object", f"memory-backend-ram,id=m{node},size={size}M"]
            spec = f"node,nodeid={node},memdev=m{node}"
            if node < len(self.cpus):
                spec += f",cpus={first}-{first + self.cpus[node] - 1}"
                first += self.cpus[node]
            args += ["-numa", spec]
        return args


SHAPES: dict[str, Shape] = {
    shape.name: shape
    for shape in (
        Shape("two-node", (2, 2)),
        # Grace-shaped: two CPU nodes and two CPU-less nodes standing in for GPU memory.
        Shape("grace", (2, 2), memory_nodes=2),
        Shape("four-node", (1, 1, 1, 1), node_mib=512),
    )
}


class GuestError(RuntimeError):
    """A guest could not be booted or did not report back; the message names the step."""


@dataclass(frozen=True)
class GuestRun:
    """What one boot produced: the script's exit status and output, files it left, the console."""

    shape: Shape
    returncode: int
    output: str
    files: Mapping[str, bytes]
    console: str
    seconds: float


def _kernel() -> tuple[Path, Path] | None:
    """The newest Debian kernel image with its modules folder."""
    for image in sorted(Path("/boot").glob("vmlinuz-*"), reverse=True):
        modules = Path("/lib/modules") / image.name.removeprefix("vmlinuz-")
        if (modules / "modules.dep").is_file() and os.access(image, os.R_OK):
            return image, modules
    return None


def _qemu() -> str | None:
    return shutil.which("qemu-system-x86_64")


def _busybox() -> Path | None:
    for candidate in ("/bin/busybox", "/usr/bin/busybox"):
        path = Path(candidate)
        # The dynamic busybox cannot run inside the initramfs: no libc there.
        if path.is_file() and b"/lib64/ld-linux" not in path.read_bytes()[:4096]:
            return path
    return None


def missing() -> list[str]:
    """What this host lacks to boot a guest (empty when nothing)."""
    lacks = []
    if _qemu() is None:
        lacks.append("qemu-system-x86_64")
    if _kernel() is None:
        lacks.append("a readable /boot/vmlinuz-* with its /lib/modules")
    if _busybox() is None:
        lacks.append("a static busybox")
    return lacks


def _module_order(modules: Path, wanted: Iterable[str]) -> list[str]:
    """The wanted modules and what they depend on, dependencies first (paths relative to ``modules``)."""
    deps: dict[str, list[str]] = {}
    for line in (modules / "modules.dep").read_text().splitlines():
        name, _, rest = line.partition(":")
        deps[name] = rest.split()
    by_name = {Path(p).name.split(".ko")[0].replace("-", "_"): p for p in deps}
    order: list[str] = []

    def add(path: str) -> None:
        for dep in reversed(deps.get(path, [])):
            add(dep)
        if path not in order:
            order.append(path)

    for name in wanted:
        if name in by_name:  # absent: built into this kernel
            add(by_name[name])
    return order


_INIT = """#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
step() { echo "numapin-guest: $1" > /dev/ttyS0; }
fail() { step "FAILED: $1"; poweroff -f; }
for m in $(cat /modules/order); do insmod /modules/$m || fail "insmod $m"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 host /host || fail "mount host root"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 job /job || fail "mount job share"
mount -t tmpfs -o size=50% upper /upper && mkdir /upper/u /upper/w
mount -t overlay overlay -o lowerdir=/host,upperdir=/upper/u,workdir=/upper/w /new || fail "overlay"
mount -t proc proc /new/proc
mount -t sysfs sys /new/sys
mount -t devtmpfs dev /new/dev
mkdir -p /new/dev/shm /new/job
mount -t tmpfs -o size=75% shm /new/dev/shm
mount -t cgroup2 cgroup2 /new/sys/fs/cgroup 2>/dev/null
mount --bind /job /new/job
step "running"
chroot /new /bin/sh /job/script.sh > /job/output 2>&1
echo $? > /job/rc.tmp && mv /job/rc.tmp /job/rc
sync
poweroff -f
"""


def _cpio(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A newc cpio archive of (name, mode, data) entries."""
    out = io.BytesIO()
    for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], start=1):
        encoded = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
        out.write(b"070701" + b"".join(f"{v:08x}".encode() for v in fields) + encoded)
        out.write(b"\0" * (-(110 + len(encoded)) % 4))
        out.write(data)
        out.write(b"\0" * (-len(data) % 4))
    return out.getvalue()


def build_initramfs(dest: Path) -> Path:
    """Write the guest's initramfs to ``dest`` (gzip-compressed newc cpio)."""
    found = _kernel()
    busybox = _busybox()
    if found is None or busybox is None:
        raise GuestError("cannot build the initramfs: missing " + ", ".join(missing()))
    _, modules = found
    directory, regular = 0o040755, 0o100755
    entries = [(d, directory, b"") for d in ("bin", "dev", "proc", "sys", "host", "job", "upper", "new", "modules")]
    entries.append(("bin/busybox", regular, busybox.read_bytes()))
    entries.append(("init", regular, _INIT.encode()))
    order = _module_order(modules, _MODULES)
    for rel in order:
        entries.append((f"modules/{Path(rel).name}", 0o100644, (modules / rel).read_bytes()))
    entries.append(("modules/order", 0o100644, "\n".join(Path(r).name for r in order).encode() + b"\n"))
    dest.write_bytes(gzip.compress(_cpio(entries), compresslevel=1))
    return dest


def boot(shape: Shape, script: str, *, env: Mapping[str, str] | None = None, timeout: float = 600,
         workdir: Path | None = None) -> GuestRun:
    """Boot ``shape``, run ``script`` (sh) inside with ``env`` exported, and return what it left.

    Files the script writes under ``/job/out/`` come back in ``GuestRun.files``.
    Raises :class:`GuestError` naming the step that failed when the guest does
    not report an exit status.
    """
    lacks = missing()
    if lacks:
        raise GuestError("cannot boot a guest: missing " + ", ".join(lacks) + f" ({NEEDS})")
    image, _ = _kernel()  # type: ignore[misc]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="numapin-guest-", dir=workdir) as tmp:
        base = Path(tmp)
        job = base / "job"
        (job / "out").mkdir(parents=True)
        initrd = build_initramfs(base / "initrd.gz")
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in (env or {}).items())
        (job / "script.sh").write_text("set -u\n" + exports + script)
        console = base / "console.log"
        command = [
            _qemu() or "qemu-system-x86_64", "-machine", "pc,accel=tcg", "-cpu", "max",
            "-smp", str(shape.cpu_count), "-m", f"{shape.memory_mib}M", *shape.numa_args(),
            "-kernel", str(image), "-initrd", str(initrd),
            "-append", "console=ttyS0 quiet panic=-1 rdinit=/init",
            "-display", "none", "-no-reboot", "-monitor", "none", "-serial", f"file:{console}",
            "-fsdev", "local,id=hostfs,path=/,readonly=on,security_model=none,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=hostfs,mount_tag=host",
            "-fsdev", f"local,id=jobfs,path={job},security_model=none",
            "-device", "virtio-9p-pci,fsdev=jobfs,mount_tag=job",
        ]
        try:
            qemu = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise GuestError(f"{shape.name}: no exit within {timeout:.0f} s; console:\n"
                             + _tail(console)) from exc
        log = _tail(console)
        rc_file = job / "rc"
        if not rc_file.is_file():
            step = next((line for line in reversed(log.splitlines()) if "numapin-guest:" in line),
                        "the guest never reached its init script")
            raise GuestError(f"{shape.name}: the guest did not report back (qemu exit {qemu.returncode}; "
                             f"last step: {step}); qemu said: {qemu.stderr.strip()[-500:]}\nconsole:\n{log}")
        files = {p.relative_to(job / "out").as_posix(): p.read_bytes()
                 for p in sorted((job / "out").rglob("*")) if p.is_file()}
        output = (job / "output").read_text(errors="replace") if (job / "output").exists() else ""
        return GuestRun(shape, int(rc_file.read_text().strip() or "255"), output, files, log,
                        time.monotonic() - started)


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return "(no console output)"
