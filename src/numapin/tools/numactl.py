"""``numapin numactl``: numactl's language for binding a program, carried out by numapin, no numactl needed.

Frameworks (vLLM, SGLang, DeepSpeed, torchrun's ``--numa-binding``) bind their
workers by exec-ing ``numactl OPTIONS PROGRAM``, after probing ``numactl
OPTIONS true`` and stepping down (membind → preferred → CPUs only) when the
probe fails. Slim and ROCm images have no numactl. This front takes the options
those frameworks emit and does what numactl would, through numapin: every
thread at birth (the program inherits the mask and the memory policy), inside
the cgroup cpuset, the mask marked as numapin's for ``pin()`` inside. Where
numactl would refuse (a node that does not exist, a policy the kernel refuses)
it exits non-zero and runs nothing, so a caller's probe and step-down work; an
option it does not carry out is refused by name, never ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ..base.errors import UsageError, quoted
from ..base.frozen import frozen
from ..cpuset import CpuSet
from ..facts.machine import Facts
from ..facts.machine import cached as cached_facts
from ..kernel.mempolicy import KernelMemoryPolicy
from ..pinning.memory import MemoryMode, MemoryNodes, allowed_nodes, get_mempolicy, place_memory, set_mempolicy

__all__ = ["NumactlRequest", "apply_memory", "cpus_of", "hardware", "memory_of", "parse_numactl", "run", "show"]

#: Options taken, long and short, and the field each fills.
_TAKES = {
    "--physcpubind": "cpus", "-C": "cpus",
    "--cpunodebind": "cpu_nodes", "-N": "cpu_nodes",
    "--membind": "membind", "-m": "membind",
    "--preferred": "preferred", "-p": "preferred",
}
_FLAGS = {"--localalloc": "local", "-l": "local", "--show": "show", "-s": "show", "--hardware": "hardware",
          "-H": "hardware"}
#: numactl's options this front does not carry out, and why (each is refused by name).
_UNSUPPORTED = {
    "--interleave": "interleaving spreads memory over nodes, numapin places it on the GPU's",
    "-i": "interleaving spreads memory over nodes, numapin places it on the GPU's",
    "--preferred-many": "preferring several nodes is not a numactl option numapin carries out",
    "-P": "preferring several nodes is not a numactl option numapin carries out",
    "--balancing": "NUMA balancing moves pages behind a placement (numapin doctor warns about it)",
    "-b": "NUMA balancing moves pages behind a placement (numapin doctor warns about it)",
    "--all": "numapin always works inside the cgroup cpuset",
    "-a": "numapin always works inside the cgroup cpuset",
    "--cpubind": "numactl itself deprecated it: use --cpunodebind",
    "-c": "numactl itself deprecated it: use --cpunodebind",
}


@frozen
class NumactlRequest:
    """numactl's options, as numapin reads them."""

    program: tuple[str, ...] = ()
    cpus: str | None = None
    """``--physcpubind``: a cpulist, or ``all``."""
    cpu_nodes: str | None = None
    """``--cpunodebind``: a node list, or ``all``."""
    membind: str | None = None
    preferred: str | None = None
    local: bool = False
    show: bool = False
    hardware: bool = False


def parse_numactl(argv: Sequence[str]) -> NumactlRequest:
    """Read numactl's options (``--opt=VALUE``, ``--opt VALUE``, ``-X VALUE``, ``-XVALUE``) up to PROGRAM.

    Options end at ``--`` or at the first word that is none, as numactl's do. An
    unknown option, or one this front does not carry out, is a UsageError naming it.
    """
    fields: dict[str, object] = {}
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        name, has_value, value = word.partition("=") if word.startswith("--") else (word[:2], bool(word[2:]),
                                                                                      word[2:])
        if name in _UNSUPPORTED:
            raise UsageError(f"numactl option {name} is not supported by numapin numactl: {_UNSUPPORTED[name]}",
                             value=name)
        if name in _FLAGS:
            if has_value:
                raise UsageError(f"numactl option {name} takes no value, got {quoted(value)}", value=word)
            fields[_FLAGS[name]] = True
        elif name in _TAKES:
            if not has_value:
                i += 1
                if i >= len(words):
                    raise UsageError(f"numactl option {name} needs a value", value=word)
                value = words[i]
            if _TAKES[name] in fields:
                raise UsageError(f"numactl option {name} given twice", value=word)
            fields[_TAKES[name]] = value
        else:
            raise UsageError(f"unknown numactl option {quoted(name)}", value=word)
        i += 1
    request = NumactlRequest(program=tuple(words[i:]), **fields)  # type: ignore[arg-type]
    policies = [n for n, v in (("--membind", request.membind), ("--preferred", request.preferred),
                               ("--localalloc", request.local or None)) if v]
    if len(policies) > 1:
        raise UsageError(f"{' and '.join(policies)} are two memory policies: give one", value=policies)
    if request.cpus is not None and request.cpu_nodes is not None:
        raise UsageError("--physcpubind and --cpunodebind both bind CPUs: give one", value=request.cpus)
    acts = bool(request.cpus or request.cpu_nodes or policies)
    if not (request.show or request.hardware) and not request.program:
        raise UsageError("no PROGRAM given (numapin numactl [options] PROGRAM [ARGS...])", value=list(argv))
    if (request.show or request.hardware) and request.program:
        raise UsageError("--show and --hardware print; they take no program", value=list(argv))
    if request.hardware and acts:
        raise UsageError("--hardware prints the machine; it takes no binding", value=list(argv))
    return request


def _set(text: str, every: CpuSet, what: str, plural_what: str) -> CpuSet:
    """A numactl list (``0,2``, ``0-3``, ``all``) of ``what``, within ``every``; numactl's refusals as UsageError."""
    word = text.strip()
    if word == "all":
        return every
    if word[:1] in ("!", "+") or ":" in word:
        raise UsageError(f"{quoted(text)}: inverted (!), cpuset-relative (+) and device-named {plural_what} are "
                         "not supported by numapin numactl", value=text)
    try:
        chosen = CpuSet.parse(word)
    except ValueError:
        raise UsageError(f"{quoted(text)} is not a list of {plural_what}", value=text) from None
    if not chosen:
        raise UsageError(f"no {what} given", value=text)
    missing = chosen - every
    if missing:
        one = len(missing) == 1
        raise UsageError(f"{what if one else plural_what} {missing} {'is' if one else 'are'} not available here "
                         f"(available: {every})", value=text)
    return chosen


def cpus_of(request: NumactlRequest, facts: Facts) -> CpuSet | None:
    """The CPUs the request binds the program to (None: the CPUs are left as they are)."""
    t = facts.topology
    if request.cpus is not None:
        return _set(request.cpus, t.allowed, "CPU", "CPUs")
    if request.cpu_nodes is not None:
        nodes = _set(request.cpu_nodes, CpuSet(n.id for n in t.cpu_nodes), "node", "nodes")
        chosen = t.cpus_of_nodes(nodes) & t.allowed
        if not chosen:
            raise UsageError(f"nodes {nodes} have no CPU this process may use (allowed: {t.allowed})", value=nodes)
        return chosen
    return None


def memory_of(request: NumactlRequest, facts: Facts) -> tuple[MemoryMode | None, CpuSet]:
    """The memory policy the request sets (None: left as it is; NONE with --localalloc: the default) and its nodes."""
    every = MemoryNodes.of(facts.topology).exist
    if request.membind is not None:
        return MemoryMode.BIND, _set(request.membind, every, "node", "nodes")
    if request.preferred is not None:
        nodes = _set(request.preferred, every, "node", "nodes")
        if len(nodes) != 1:
            raise UsageError(f"--preferred takes one node, not {nodes}", value=request.preferred)
        return MemoryMode.PREFERRED, nodes
    if request.local:
        return MemoryMode.NONE, CpuSet()
    return None, CpuSet()


def apply_memory(mode: MemoryMode | None, nodes: CpuSet, facts: Facts) -> None:
    """Set the memory policy as numactl would: strictly (a refusal raises, nothing steps down)."""
    if mode is MemoryMode.NONE:
        set_mempolicy(KernelMemoryPolicy.DEFAULT)
    elif mode is not None:
        place_memory(nodes, mode, False, strict=True, limits=MemoryNodes.of(facts.topology))


def run(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """Carry out ``numactl ARGV``: print (--show, --hardware), or bind this process and exec the program.

    Returns only for a printout (0); raises UsageError (bad input) or EnvironmentProblem (a refusal)
    before anything runs, as numactl exits non-zero.
    """
    from ..base.environment import APPLIED
    from ..pinning.process import pin
    from ..pinning.state import acting
    from .exec import ExecRequest, PreparedExec, exec_program, which

    env = dict(os.environ if environ is None else environ)
    request = parse_numactl(argv)
    facts = cached_facts(None, env)
    if request.hardware:
        print(hardware(facts))
        return 0
    executable = which(request.program[0], env) if request.program else ""
    cpus = cpus_of(request, facts)
    mode, nodes = memory_of(request, facts)
    if cpus is not None:
        with acting("exec"):  # the process's record: bound at birth, as numapin exec binds
            result = pin(cpus=cpus, policy="override", strict=True, memory="none", environ=env)
        if result.mask is not None:
            env[APPLIED] = str(result.mask)
    apply_memory(mode, nodes, facts)  # kept across execve, as numactl's is
    if request.show:  # numactl --membind=1 --show: the policy just set, as numactl shows it
        print(show(facts))
        return 0
    program = ExecRequest(program=request.program, cpus=cpus)
    return exec_program(PreparedExec(program, executable, None, None, ()), env)


# -- --show and --hardware --------------------------------------------------------------


def _spaced(cpus: CpuSet) -> str:
    return " ".join(map(str, cpus)) + " "


def show(facts: Facts) -> str:
    """What ``numactl --show`` prints for this process: its policy, CPUs and nodes."""
    policy, nodes = get_mempolicy()
    mask = CpuSet(os.sched_getaffinity(0))
    t = facts.topology
    cpu_nodes = CpuSet(n.id for n in t.cpu_nodes if n.cpus & mask)
    allowed = allowed_nodes()
    name = {KernelMemoryPolicy.DEFAULT: "default", KernelMemoryPolicy.PREFERRED: "preferred",
            KernelMemoryPolicy.BIND: "bind", KernelMemoryPolicy.INTERLEAVE: "interleave",
            KernelMemoryPolicy.LOCAL: "local", KernelMemoryPolicy.PREFERRED_MANY: "preferred-many"}[policy]
    first = str(nodes.first()) if nodes else "current"
    return "\n".join([
        f"policy: {name}",
        f"preferred node: {first if policy is not KernelMemoryPolicy.DEFAULT else 'current'}",
        f"physcpubind: {_spaced(mask)}",
        f"cpubind: {_spaced(cpu_nodes)}",
        f"nodebind: {_spaced(cpu_nodes)}",
        f"membind: {_spaced(nodes if policy is KernelMemoryPolicy.BIND else allowed)}",
        f"preferred: {_spaced(nodes) if policy in (KernelMemoryPolicy.PREFERRED, KernelMemoryPolicy.BIND) else ''}",
    ])


def hardware(facts: Facts) -> str:
    """What ``numactl --hardware`` prints: the nodes, their CPUs and memory, and their distances."""
    t = facts.topology
    nodes = list(t.nodes)
    lines = [f"available: {len(nodes)} nodes ({CpuSet(n.id for n in nodes)})"]
    for n in nodes:
        lines.append(f"node {n.id} cpus: {' '.join(map(str, n.cpus))}".rstrip())
        size = "unknown" if n.memory_bytes is None else f"{n.memory_bytes >> 20} MB"
        lines.append(f"node {n.id} size: {size}")
    ids = [n.id for n in nodes]
    lines.append("node distances:")
    lines.append("node " + " ".join(f"{i:>3}" for i in ids) + " ")
    for n in nodes:
        distance = dict(n.distances)
        lines.append(f"{n.id:>3}: " + " ".join(f"{distance.get(i, '?'):>3}" for i in ids) + " ")
    return "\n".join(lines)
