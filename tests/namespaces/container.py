"""Containers as runtimes make them, without a runtime: new PID, mount, UTS and IPC namespaces (util-linux's
``unshare``, as runc and crun call ``clone``), ``/proc`` mounted for the new PID namespace, a private ``/run``
(tmpfs), optionally a seccomp filter as Docker's default profile (``seccomp_filter.py``) and a cgroup named as
the kubelet names a pod's container. The rest of the file system is the host's, as a bind-mounted image
would show it: the tests' own files and this Python reach inside.
"""

from __future__ import annotations

import os
import queue
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import live
import seccomp_filter
from numapin.base.environment import RUNTIME_DIR

NUMAPIN = [sys.executable, "-m", "numapin"]


@dataclass
class Container:
    """One running container: its first process on the host (``unshare``'s), and its PID namespace."""

    process: subprocess.Popen[str]
    namespace: int
    lines: queue.Queue[str]

    def host_pid(self, inner: int) -> int:
        """The host's id of the container's process ``inner``."""
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.stat(f"/proc/{entry}/ns/pid").st_ino != self.namespace:
                    continue
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            ids = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
            if ids and int(ids[-1]) == inner:
                return int(entry)
        raise LookupError(f"no process {inner} in the container")

    def line(self, timeout: float = 60) -> str:
        """The next line the container printed (its script's ``echo``s); AssertionError once it has ended."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the container printed nothing in {timeout} s") from None
        assert line, f"the container ended: {self.process.poll()}"
        return line.strip()

    def root(self, path: str) -> Path:
        """``path`` inside the container, as the host reaches it."""
        return Path(f"/proc/{self.host_pid(1)}/root") / path.lstrip("/")

    def run(self, command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
        """A command run inside, as ``docker exec`` would: nsenter into its namespaces."""
        first = self.host_pid(1)
        return subprocess.run(["nsenter", "-t", str(first), "-p", "-m", "-u", "-i", "--", *command],
                              env={**environment(), **env}, capture_output=True, text=True, timeout=120)


def environment(**more: str) -> dict[str, str]:
    """The tests' environment less numapin's variables (the session's private records folder too: a container's
    records lie in its own /run, as a worker's there would), with this Python's modules importable."""
    env = {k: v for k, v in live.without_inputs(dict(os.environ)).items() if k != RUNTIME_DIR}
    return {**env, "PYTHONPATH": os.pathsep.join(sys.path), **more}


def missing() -> str | None:
    """Why containers cannot be made here, or None."""
    if os.geteuid() != 0:
        return "making namespaces and mounting /proc and /run needs root"
    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    if not seccomp_filter.supported():
        return "no syscall table for the seccomp filter on this machine"
    return None


@contextmanager
def container(script: str, *, env: Mapping[str, str] | None = None, seccomp: bool = False,
              cgroup: Path | None = None) -> Iterator[Container]:
    """``sh -c script`` as PID 1 of a new container (killed with everything in it on the way out).

    ``seccomp``: under the filter refusing the memory-policy calls; ``cgroup``: the folder of a cgroup to run
    in (its ``cgroup.procs`` is written before the namespaces are made, so every process inside is in it)."""
    inner = f"mount -t tmpfs -o mode=755 tmpfs /run && {script}"
    command = ["unshare", "--pid", "--mount", "--uts", "--ipc", "--fork", "--mount-proc", "--", "sh", "-c", inner]
    if seccomp:
        command = [sys.executable, seccomp_filter.__file__, *command]
    if cgroup is not None:
        command = ["sh", "-c", f'echo $$ > {shlex.quote(str(cgroup / "cgroup.procs"))} && exec "$@"', "-",
                   *command]
    process = subprocess.Popen(command, env=dict(env or environment()), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        namespace = None
        while namespace is None and time.monotonic() < deadline:
            namespace = _child_namespace(process.pid)
            if namespace is None:
                time.sleep(0.02)
        assert namespace is not None, f"no container came up: {process.poll()}"
        lines: queue.Queue[str] = queue.Queue()

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line)
            lines.put("")  # the end

        threading.Thread(target=read, daemon=True).start()
        yield Container(process, namespace, lines)
    finally:
        try:
            os.killpg(process.pid, 9)
        except ProcessLookupError:
            pass
        process.communicate(timeout=30)


def _child_namespace(pid: int) -> int | None:
    """The PID namespace of ``unshare``'s child (the container's PID 1), once it has one of its own."""
    mine = os.stat("/proc/self/ns/pid").st_ino
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            ns = os.stat(f"/proc/{child}/ns/pid").st_ino
        except OSError:
            continue
        if ns != mine:
            return ns
        # unshare wrapped (seccomp, cgroup): look one level down
        found = _child_namespace(int(child))
        if found is not None:
            return found
    return None
