"""Memory placement: NUMA memory policies, their step-down, and page migration.

A memory policy belongs to a *thread*: ``set_mempolicy`` affects the calling
thread and the threads it creates afterwards. Threads that already exist keep
their own policy (normally DEFAULT: allocate on the node they run on) — which
the CPU pin makes the GPU's node, so they allocate there too. Pages touched
before the pin stay where they are until :func:`migrate` moves them.

The calls go through a :class:`numapin.kernel.mempolicy.MemoryKernel` (the real kernel by
default); which nodes exist and which the process may use are facts read
through :class:`numapin.facts.host.Host`, so a root folder stands in for them too.
Every policy is read back after it is set.
"""

from __future__ import annotations

import errno
import os

from ..base.choices import Choice, parse_choice
from ..base.errors import EnvironmentProblem, ProcessError, UsageError, errno_name, quoted
from ..base.frozen import frozen, replace
from ..base.text import counted, format_size, plural
from ..cpuset import CpuSet, CpuSpec
from ..facts.host import Host
from ..kernel.mempolicy import KernelMemoryPolicy, LinuxMemory, MemoryKernel

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..facts.topology import Topology

__all__ = [
    "LIFT",
    "PERMISSION",
    "REFUSER",
    "SECCOMP",
    "KernelMemoryPolicy",
    "MemoryMode",
    "MemoryNodes",
    "MemoryPolicyError",
    "MemoryResult",
    "MigrateResult",
    "NotSupported",
    "allowed_nodes",
    "get_mempolicy",
    "migrate",
    "parse_memory_mode",
    "place_memory",
    "refused_by",
    "set_mempolicy",
    "system_nodes",
]

_LINUX: list[LinuxMemory] = []  # made (libc loaded) on the first memory call, not at import


def _kernel(kernel: MemoryKernel | None) -> MemoryKernel:
    if kernel is not None:
        return kernel
    if not _LINUX:
        _LINUX.append(LinuxMemory())
    return _LINUX[0]


class MemoryPolicyError(EnvironmentProblem):
    """The kernel refused a memory call; names the call, the nodes and the errno (also as ``errno``)."""


class NotSupported(MemoryPolicyError):
    """This architecture has no known syscall numbers."""


def _refused(call: str, exc: OSError) -> MemoryPolicyError:
    name = errno_name(exc.errno)
    kind = NotSupported if exc.errno == errno.ENOSYS else MemoryPolicyError
    return kind(f"{call} failed: {name} ({exc.strerror})", errno=name)


def system_nodes(root: str | os.PathLike[str] | None = None) -> CpuSet:
    """The NUMA nodes of the machine under ``root`` that hold memory."""
    host = Host.at(root)
    for name in ("has_memory", "online"):
        found = CpuSet.parse_or_none(host.read(f"sys/devices/system/node/{name}"))
        if found is not None:
            return found
    return CpuSet([0])


def allowed_nodes(root: str | os.PathLike[str] | None = None) -> CpuSet:
    """The nodes this process may allocate on (its cpuset's ``mems``, as the kernel reports it)."""
    text = Host.at(root).read("proc/self/status") or ""
    for line in text.splitlines():
        if line.startswith("Mems_allowed_list:"):
            found = CpuSet.parse_or_none(line.split(":", 1)[1])
            if found is not None:
                return found
            break
    return system_nodes(root)


@frozen
class MemoryNodes:
    """The nodes memory may be asked of: those that hold memory, and those this process may use."""

    exist: CpuSet
    allowed: CpuSet

    @classmethod
    def read(cls, root: str | os.PathLike[str] | None = None) -> MemoryNodes:
        """Read from the machine under ``root`` (a pin hands its facts' instead: see :meth:`of`)."""
        return cls(system_nodes(root), allowed_nodes(root))

    @classmethod
    def of(cls, topology: Topology) -> MemoryNodes:
        """From facts already read: a pin's memory calls read no file."""
        exist = CpuSet(n.id for n in topology.nodes if n.has_memory) or CpuSet([0])  # as system_nodes()
        return cls(exist, topology.allowed_mems or exist)

    def check(self, nodes: CpuSet, call: str) -> None:
        """A node that does not exist, or lies outside the process's mems, is the caller's mistake."""
        missing = nodes - self.exist
        if missing:
            raise UsageError(f"{call}: node(s) {missing} do not exist (memory nodes: {self.exist})", value=missing)
        outside = nodes - self.allowed
        if outside:
            raise UsageError(f"{call}: node(s) {outside} are outside this process's allowed memory nodes "
                             f"{self.allowed} (cpuset.mems)", value=outside)


def _limits(limits: MemoryNodes | None, root: str | os.PathLike[str] | None) -> MemoryNodes:
    return MemoryNodes.read(root) if limits is None else limits


def get_mempolicy(*, kernel: MemoryKernel | None = None) -> tuple[KernelMemoryPolicy, CpuSet]:
    """The calling thread's memory policy and its nodes."""
    try:
        return _kernel(kernel).get_mempolicy()
    except OSError as exc:
        raise _refused("get_mempolicy", exc) from exc


def set_mempolicy(
    policy: KernelMemoryPolicy | str,
    nodes: CpuSpec = (),
    *,
    kernel: MemoryKernel | None = None,
    root: str | os.PathLike[str] | None = None,
    limits: MemoryNodes | None = None,
) -> tuple[KernelMemoryPolicy, CpuSet]:
    """Set the calling thread's memory policy and return it as read back.

    A node that does not exist or lies outside the allowed memory nodes (read
    under ``root``, or ``limits`` when the caller has them) is a
    :class:`UsageError` before any syscall. A kernel refusal raises
    :class:`MemoryPolicyError` and leaves the previous policy in place.
    """
    mode = policy if isinstance(policy, KernelMemoryPolicy) else _policy_named(policy)
    wanted = CpuSet(nodes)
    needs_nodes = mode in (KernelMemoryPolicy.BIND, KernelMemoryPolicy.INTERLEAVE, KernelMemoryPolicy.PREFERRED_MANY)
    if needs_nodes and not wanted:
        raise UsageError(f"set_mempolicy({mode.name}) needs at least one node", value=wanted)
    if mode in (KernelMemoryPolicy.DEFAULT, KernelMemoryPolicy.LOCAL) and wanted:
        raise UsageError(f"set_mempolicy({mode.name}) takes no nodes, got {wanted}", value=wanted)
    _limits(limits, root).check(wanted, f"set_mempolicy({mode.name})")
    ops = _kernel(kernel)
    try:
        ops.set_mempolicy(mode, wanted)
    except OSError as exc:
        raise _refused(f"set_mempolicy({mode.name}, nodes {wanted or 'none'})", exc) from exc
    got = get_mempolicy(kernel=ops)
    if not _same_policy(got, mode, wanted):
        raise MemoryPolicyError(f"set_mempolicy({mode.name}, {wanted}) read back as {got[0].name} {got[1]}")
    return got


def _same_policy(got: tuple[KernelMemoryPolicy, CpuSet], mode: KernelMemoryPolicy, nodes: CpuSet) -> bool:
    if mode is KernelMemoryPolicy.LOCAL:
        # Older kernels report LOCAL as PREFERRED with no node.
        return got in ((KernelMemoryPolicy.LOCAL, CpuSet()), (KernelMemoryPolicy.PREFERRED, CpuSet()))
    if mode is KernelMemoryPolicy.PREFERRED:
        return got[0] is mode and got[1] == CpuSet([nodes.first()]) if nodes else got[0] is mode
    return got == (mode, nodes)


def _policy_named(name: str) -> KernelMemoryPolicy:
    try:
        return KernelMemoryPolicy[name.strip().upper().replace("-", "_")]
    except KeyError:
        known = ", ".join(p.name.lower() for p in KernelMemoryPolicy)
        raise UsageError(f"unknown memory policy {quoted(name)} (expected one of: {known})", value=name) from None


@frozen
class MigrateResult:
    to_nodes: CpuSet
    from_nodes: CpuSet
    not_moved: int
    """What the kernel counted as not moved (its count, of pages or of larger folios, undercounts)."""
    stayed: tuple[tuple[int, int], ...] = ()
    """Where the kernel said some did not move: the process's own memory left off ``to_nodes``, bytes by node, read
    back from ``numa_maps``."""

    def __str__(self) -> str:
        return f"migrated {self.from_nodes} -> {self.to_nodes}, {self.not_moved} pages not moved"

    def stuck(self) -> str | None:
        """What did not move, in words (what it likely is and what to do); None where the kernel moved all."""
        if not self.not_moved:
            return None
        left = sum(b for _, b in self.stayed)
        what = (f"{format_size(left)} of its own memory stayed on node(s) {CpuSet(n for n, _ in self.stayed)}"
                if left else f"{counted(self.not_moved, 'page')} stayed off node(s) {self.to_nodes}")
        return (f"{what} after the migration: pages pinned for a device (cudaHostAlloc, cudaHostRegister, an RDMA "
                "registration) cannot move, nor can pages shared with another process or that the target has no "
                "free memory for; make pinned buffers after the placement (numapin exec, NUMAPIN_AUTOPIN) or inside "
                "numapin.allocating_for(gpu=N)")


def migrate(
    to_nodes: CpuSpec,
    from_nodes: CpuSpec | None = None,
    pid: int | None = None,
    *,
    kernel: MemoryKernel | None = None,
    root: str | os.PathLike[str] | None = None,
    limits: MemoryNodes | None = None,
) -> MigrateResult:
    """Move a process's pages (default: this one's) from ``from_nodes`` (default: all others) to ``to_nodes``."""
    target = CpuSet(to_nodes)
    if not target:
        raise UsageError("migrate needs at least one target node", value=target)
    known = _limits(limits, root)
    known.check(target, "migrate_pages")
    source = known.exist if from_nodes is None else CpuSet(from_nodes)
    try:
        left = _kernel(kernel).migrate_pages(pid or 0, source, target)
    except OSError as exc:
        raise _refused(f"migrate_pages({source} -> {target})", exc) from exc
    return MigrateResult(target, source, left)


# -- what pin() does with memory -------------------------------------------


class MemoryMode(Choice):
    """What :func:`numapin.pin` does with memory; each steps down to the next on a refusal."""

    NONE = "none"
    """Leave the memory policy as it is."""

    PREFERRED = "preferred"
    """Allocate on the placement's nodes while they have room (then elsewhere)."""

    BIND = "bind"
    """Allocate only on the placement's nodes."""


# The step-down order of each mode: bind -> preferred -> none.
_STEPS = {
    MemoryMode.BIND: (MemoryMode.BIND, MemoryMode.PREFERRED, MemoryMode.NONE),
    MemoryMode.PREFERRED: (MemoryMode.PREFERRED, MemoryMode.NONE),
    MemoryMode.NONE: (MemoryMode.NONE,),
}


def parse_memory_mode(mode: str | MemoryMode) -> MemoryMode:
    return parse_choice(MemoryMode, mode, "memory mode")


#: Who refused the memory-policy calls with EPERM (:attr:`MemoryResult.refused`).
SECCOMP = "seccomp"
PERMISSION = "permission"


def refused_by(pid: int | None = None) -> str:
    """Who refuses a memory-policy call with EPERM in process ``pid``: ``seccomp`` where it runs under a seccomp
    filter (``Seccomp: 2`` in its status: a container runtime's profile), else ``permission`` (a security
    module, a sandbox numapin cannot see)."""
    from ..facts.procfs import seccomp_mode

    return SECCOMP if seccomp_mode(os.getpid() if pid is None else pid) == 2 else PERMISSION


#: What of a process refused, in words (the messages of exec, numactl, doctor and host_buffer name it: "this
#: process's seccomp filter", "its security policy").
REFUSER = {SECCOMP: "seccomp filter", PERMISSION: "security policy"}
#: What would let the calls through, by who refused them.
LIFT = {
    SECCOMP: ("CAP_SYS_NICE for the container (docker run --cap-add SYS_NICE; Kubernetes: securityContext."
              "capabilities.add [SYS_NICE]), which Docker's default profile needs to allow mbind, set_mempolicy and "
              "get_mempolicy, or a seccomp profile that allows them (migrate_pages and move_pages it refuses always)"),
    PERMISSION: "CAP_SYS_NICE, or the security policy that refuses the call",
}


@frozen
class MemoryResult:
    """What was done with memory: the policy in force, migration, and any step-down."""

    asked: MemoryMode
    applied: MemoryMode
    nodes: CpuSet
    read_back: tuple[str, str] | None = None
    migration: MigrateResult | None = None
    problems: tuple[str, ...] = ()
    """The refusals met on the way down, each as the kernel worded it."""
    kernel_nodes: CpuSet | None = None
    """After a refusal: the memory nodes of the running kernel (which may not be the machine the facts describe)."""
    refused: str | None = None
    """Who refused a call with EPERM (:data:`SECCOMP`, :data:`PERMISSION`); None where none was refused so."""

    @property
    def warning(self) -> str | None:
        """One line on what went wrong and what is in force instead; None when nothing did."""
        return self.said()

    def said(self, cpu_nodes: CpuSet | None = None) -> str | None:
        """:attr:`warning`, saying what still holds where the process's CPUs are known: ``cpu_nodes``, the
        nodes of the CPUs every thread now runs on (None: the CPUs were left as they were)."""
        stuck = self.migration.stuck() if self.migration is not None else None
        if not self.problems:
            return stuck
        if stuck:
            return f"{self._refusal(cpu_nodes)}; {stuck}"
        return self._refusal(cpu_nodes)

    def _refusal(self, cpu_nodes: CpuSet | None) -> str:
        where = f"{plural(len(self.nodes), 'node')} {self.nodes}"
        absent = self.nodes - self.kernel_nodes if self.kernel_nodes is not None else CpuSet()
        if absent:
            # The usual case: facts read from a folder standing in for / (--machine, NUMAPIN_FSROOT)
            # name nodes this kernel does not have, and the kernel refuses them. Say that, not EINVAL.
            cause = (f"this kernel has no memory on {plural(len(absent), 'node')} {absent} (its memory "
                     f"{plural(len(self.kernel_nodes or ()), 'node')}: {self.kernel_nodes}), as when the machine is "
                     "read from a folder standing in for / (--machine, --root, NUMAPIN_FSROOT)")
        elif self.refused is not None:  # one refusal, not each step down the kernel refused alike
            cause = self.problems[0] + (f" (and {counted(len(self.problems) - 1, 'call')} after it)"
                                        if len(self.problems) > 1 else "")
        else:
            cause = "; ".join(self.problems)
        if self.refused is None:
            return f"memory not placed on {where}: {cause}; continuing with memory {self.applied}"
        who = f"this process's {REFUSER[self.refused]} refuses the memory-policy calls" + (
            " (Docker's and containerd's default profiles do, without CAP_SYS_NICE)" if self.refused == SECCOMP else "")
        return (f"memory not placed on {where}: {cause}: {who}. What holds: {self._holds(cpu_nodes)}. "
                f"To lift it: {LIFT[self.refused]}; continuing with memory {self.applied}")

    def _holds(self, cpu_nodes: CpuSet | None) -> str:
        if cpu_nodes is None:
            return ("the CPUs are as they were, so new pages land on the node of the CPU that first touches them "
                    "(the kernel's local default)")
        near = self.nodes & cpu_nodes
        said = []
        if near:
            said.append(f"every thread runs on {plural(len(near), 'node')} {near}, so the pages it touches from "
                        "now on land there under the kernel's local default, while there is free memory")
        said.append("pages touched before stay where they are")
        far = self.nodes - cpu_nodes
        if far:
            said.append(f"{plural(len(far), 'node')} {far} {'has' if len(far) == 1 else 'have'} none of its CPUs "
                        "(memory only): no page lands there without a policy")
        return "; ".join(said)

    def __str__(self) -> str:
        text = f"memory {self.applied} {self.nodes}" if self.applied is not MemoryMode.NONE \
            else "memory policy unchanged"
        if self.applied is not self.asked:
            text += f" (asked {self.asked})"
        if self.migration is not None:
            text += f", {self.migration}"
        return text


def _one_step(step: MemoryMode, nodes: CpuSet, kernel: MemoryKernel | None,
              limits: MemoryNodes) -> tuple[KernelMemoryPolicy, CpuSet]:
    if step is MemoryMode.BIND:
        return set_mempolicy(KernelMemoryPolicy.BIND, nodes, kernel=kernel, limits=limits)
    if len(nodes) > 1:
        try:
            return set_mempolicy(KernelMemoryPolicy.PREFERRED_MANY, nodes, kernel=kernel, limits=limits)
        except MemoryPolicyError:
            pass  # kernels before 5.15: prefer the first node
    return set_mempolicy(KernelMemoryPolicy.PREFERRED, CpuSet([nodes.first()]), kernel=kernel, limits=limits)


def _stayed(nodes: CpuSet) -> tuple[tuple[int, int], ...]:
    """This process's own memory off ``nodes``, bytes by node (nothing where numa_maps cannot be read)."""
    from ..kernel.residency import residency

    try:
        own = residency().own_bytes
    except ProcessError:
        return ()
    return tuple((n, b) for n, b in sorted(own.items()) if n not in nodes and b)


def place_memory(
    nodes: CpuSet,
    mode: MemoryMode,
    do_migrate: bool,
    *,
    strict: bool,
    kernel: MemoryKernel | None = None,
    root: str | os.PathLike[str] | None = None,
    limits: MemoryNodes | None = None,
) -> MemoryResult:
    """Apply ``mode`` for ``nodes`` to the calling thread, stepping down bind → preferred → none unless strict.

    ``limits``: the machine's memory nodes, when the caller has them (a pin's
    facts); otherwise they are read under ``root``.

    The nodes are a placement's, computed by numapin: a node that turns out
    missing or forbidden is a problem of the environment here, not a mistake
    of the caller, and in strict mode raises :class:`MemoryPolicyError`.
    """
    problems: list[str] = []
    refused = False
    applied = MemoryMode.NONE
    read_back = None
    known = _limits(limits, root)
    for step in _STEPS[mode] if not strict else (mode,):
        if step is MemoryMode.NONE:
            break
        try:
            got = _one_step(step, nodes, kernel, known)
        except (MemoryPolicyError, UsageError) as exc:
            if strict:
                raise _said_exactly(_as_environment(exc)) from exc
            problems.append(str(exc))
            refused = refused or getattr(exc, "errno", None) == "EPERM"
            continue
        applied, read_back = step, (got[0].name, str(got[1]))
        break
    migration = None
    if do_migrate:
        try:
            migration = migrate(nodes, kernel=kernel, limits=known)
            if migration.not_moved and kernel is None:
                migration = replace(migration, stayed=_stayed(nodes))
        except (MemoryPolicyError, UsageError) as exc:
            if strict:
                raise _said_exactly(_as_environment(exc)) from exc
            problems.append(str(exc))
            refused = refused or getattr(exc, "errno", None) == "EPERM"
    # No warning here: the caller says it once per process and problem (a worker pins again and again).
    # After a refusal, the kernel's own nodes (not the facts', which may describe another machine) tell why.
    return MemoryResult(mode, applied, nodes, read_back, migration, tuple(problems),
                        system_nodes("/") if problems and kernel is None else None,
                        refused_by() if refused and kernel is None else None)


def _as_environment(exc: MemoryPolicyError | UsageError) -> MemoryPolicyError:
    return exc if isinstance(exc, MemoryPolicyError) else MemoryPolicyError(str(exc))


def _said_exactly(exc: MemoryPolicyError) -> MemoryPolicyError:
    """A strict refusal with EPERM, saying who refused and what would lift it (the errno and class kept)."""
    if exc.errno != "EPERM":
        return exc
    who = refused_by()
    said = type(exc)(f"{exc}: this process's {REFUSER[who]} refuses it; to lift it: {LIFT[who]}", errno=exc.errno)
    said.__cause__ = exc.__cause__
    return said
