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

from ..base.errors import UsageError, quoted
from ..base.frozen import frozen
from ..cpuset import CpuSet
from ..facts.machine import Facts
from ..facts.machine import cached as cached_facts
from ..facts.topology import node_free_bytes
from ..kernel.mempolicy import KernelMemoryPolicy
from ..pinning.memory import MemoryMode, MemoryNodes, allowed_nodes, get_mempolicy, place_memory, set_mempolicy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["NumactlRequest", "apply_memory", "cpus_of", "hardware", "memory_of", "parse_numactl", "run", "show"]

#: numactl's options (2.0.16, the version Debian and Ubuntu ship): long name → short letter, and whether
#: it takes a value. Read as its getopt_long reads them: ``--name=VALUE``, ``--name VALUE``, an unambiguous
#: beginning of a long name, ``-X VALUE``, ``-XVALUE``, flags clustered (``-lC0``).
_OPTIONS: dict[str, tuple[str, bool]] = {
    "all": ("a", False), "interleave": ("i", True), "preferred": ("p", True), "preferred-many": ("P", True),
    "cpubind": ("c", True), "cpunodebind": ("N", True), "physcpubind": ("C", True), "membind": ("m", True),
    "show": ("s", False), "localalloc": ("l", False), "balancing": ("b", False), "hardware": ("H", False),
    "shm": ("S", True), "file": ("f", True), "offset": ("o", True), "length": ("L", True), "strict": ("t", False),
    "shmmode": ("M", True), "dump": ("d", False), "dump-nodes": ("D", False), "shmid": ("I", True),
    "huge": ("u", False), "touch": ("T", False), "verify": ("V", False),
}
_LONG = {letter: name for name, (letter, _) in _OPTIONS.items()}
_SHARED_MEMORY = ("numactl's shared-memory options place a segment, not a program; numapin places programs "
                  "(bind the program that maps the segment instead)")
#: numactl's options this front does not carry out, and why (each is refused by name).
_UNSUPPORTED = {
    "i": "interleaving spreads memory over nodes, numapin places it on the GPU's",
    "P": "preferring several nodes is not a numactl option numapin carries out",
    "b": "NUMA balancing moves pages behind a placement (numapin doctor warns about it)",
    "a": "numapin always works inside the cgroup cpuset",
    **dict.fromkeys("SfoLtMdDIuTV", _SHARED_MEMORY),
}
#: The words of a node list that name a device instead of nodes (numactl finds the device's node).
_DEVICES = ("netdev:", "file:", "ip:", "block:", "pci:")


@frozen
class NumactlRequest:
    """numactl's options, as numapin reads them: what the program is run with, in numactl's order."""

    program: tuple[str, ...] = ()
    binds: tuple[tuple[str, str], ...] = ()
    """Each CPU binding in the order given, ``("cpus", LIST)`` (``--physcpubind``) or ``("nodes", LIST)``
    (``--cpunodebind``): numactl checks and applies each in turn, so the last one stands."""
    membind: str | None = None
    preferred: str | None = None
    local: bool = False
    show: bool = False
    """``--show`` met: what precedes it applied, the policy shown, nothing after it read."""
    hardware: bool = False
    """``--hardware`` met: the machine printed, nothing after it read."""


def _long(name: str, word: str) -> str:
    """The long option ``name`` is, whole or an unambiguous beginning of one (as getopt_long takes it)."""
    if name in _OPTIONS:
        return name
    found = [option for option in _OPTIONS if option.startswith(name)] if name else []
    if len({_OPTIONS[option] for option in found}) == 1:
        return found[0]
    if found:
        raise UsageError(f"numactl option {quoted(word)} is ambiguous: {', '.join('--' + f for f in found)}",
                         value=word)
    raise UsageError(f"unknown numactl option {quoted(word)}", value=word)


def _options(words: Sequence[str]) -> tuple[list[tuple[str, str | None]], int]:
    """numactl's options in order as (letter, value), up to ``--``, the first word that is none, ``--show`` or
    ``--hardware`` (numactl acts on those at once and reads no further); and where the program starts."""
    found: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            return found, i + 1
        if not word.startswith("-") or word == "-":
            return found, i
        if word.startswith("--"):
            name, has_value, value = word[2:].partition("=")
            letter, takes = _OPTIONS[_long(name, word)]
            spelled = f"--{_LONG[letter]}"
            if has_value and not takes:
                raise UsageError(f"numactl option {spelled} takes no value, got {quoted(value)}", value=word)
            if takes and not has_value:
                i += 1
                if i >= len(words):
                    raise UsageError(f"numactl option {spelled} needs a value", value=word)
                value = words[i]
            found.append((letter, value if takes else None))
        else:
            for at, letter in enumerate(word[1:], start=1):
                if letter not in _LONG:
                    raise UsageError(f"unknown numactl option {quoted('-' + letter)}", value=word)
                if not _OPTIONS[_LONG[letter]][1]:
                    found.append((letter, None))
                    if letter in "sH":
                        return found, len(words)
                    continue
                value = word[at + 1:]
                if not value:
                    i += 1
                    if i >= len(words):
                        raise UsageError(f"numactl option -{letter} needs a value", value=word)
                    value = words[i]
                found.append((letter, value))
                break
        if found and found[-1][0] in "sH":
            return found, len(words)
        i += 1
    return found, i


def parse_numactl(argv: Sequence[str]) -> NumactlRequest:
    """Read numactl's options up to PROGRAM, as numactl 2.0.16 reads them (see ``_OPTIONS``).

    Options end at ``--`` or at the first word that is none. ``--show`` and
    ``--hardware`` end them too: numactl acts on them at once (what comes after
    is never read). A node list ``same`` is the node list given before it. An
    unknown or ambiguous option, or one this front does not carry out, is a
    UsageError naming it; so are two memory policies, as numactl refuses them.
    """
    options, end = _options(argv)
    binds: list[tuple[str, str]] = []
    policy: tuple[str, str] | None = None
    last_nodes: str | None = None
    show = hardware = False
    for letter, value in options:
        if letter in _UNSUPPORTED:
            raise UsageError(f"numactl option --{_LONG[letter]} (-{letter}) is not supported by numapin numactl: "
                             f"{_UNSUPPORTED[letter]}", value=f"-{letter}")
        if value is not None and letter != "C":  # a node list: "same" is the one before it
            if value == "same":
                if last_nodes is None:
                    raise UsageError("node list 'same' needs a node list given before it", value=value)
                value = last_nodes
            last_nodes = value
        if letter == "s":
            show = True
        elif letter == "H":
            if policy is not None:  # numactl: "specify policy after --shm/--file"
                raise UsageError(f"--hardware prints the machine; --{policy[0]} before it is a memory policy "
                                 "numactl refuses there", value=list(argv))
            hardware = True
        elif letter in "CNc":
            binds.append(("cpus" if letter == "C" else "nodes", str(value)))
        else:
            name = {"m": "membind", "p": "preferred", "l": "localalloc"}[letter]
            if policy is not None:
                raise UsageError(f"--{policy[0]} and --{name} are two memory policies: give one (numactl: "
                                 "conflicting policies)", value=[policy[0], name])
            policy = (name, value or "")
    program = tuple(argv[end:]) if not (show or hardware) else ()
    if not (show or hardware) and not program:
        raise UsageError("no PROGRAM given (numapin numactl [options] PROGRAM [ARGS...])", value=list(argv))
    kind = None if policy is None else policy[0]
    return NumactlRequest(program=program, binds=tuple(binds),
                          membind=policy[1] if policy is not None and kind == "membind" else None,
                          preferred=policy[1] if policy is not None and kind == "preferred" else None,
                          local=kind == "localalloc", show=show, hardware=hardware)


def _number(text: str, at: int) -> tuple[int | None, int]:
    """C's ``strtoul(text + at, &end, 0)``, as libnuma reads a number: white space and a sign first, then
    ``0x`` hexadecimal, ``0`` octal or decimal; the number (None: no digits) and where it ends."""
    i = at
    while i < len(text) and text[i] in " \t\n\v\f\r":
        i += 1
    negative = i < len(text) and text[i] in "+-" and text[i] == "-"
    if i < len(text) and text[i] in "+-":
        i += 1
    if text[i:i + 2].lower() == "0x" and i + 2 < len(text) and text[i + 2] in "0123456789abcdefABCDEF":
        base, i = 16, i + 2
    elif text[i:i + 1] == "0":
        base = 8
    else:
        base = 10
    digits = "0123456789abcdef"[:base]
    first = i
    while i < len(text) and text[i].lower() in digits and text[i].isascii():
        i += 1
    if i == first:
        return None, at
    # Past 64 bits strtoul saturates at ULONG_MAX (ERANGE): so does this, before int() meets digits by the
    # thousand (Python refuses 4,300 and more, and slows long before).
    digits = text[first:i].lstrip("0")
    value = _ULONG_MAX if len(digits) > 22 else min(int(digits or "0", base), _ULONG_MAX)
    return (-value if negative else value), i


#: What C's strtoul gives for any number past it.
_ULONG_MAX = (1 << 64) - 1


def _list(text: str, allowed: CpuSet, what: str, plural_what: str, *, devices: bool) -> CpuSet:
    """A numactl list (``0,2``, ``0-3``, ``all``, ``0x1``, ``010``) of ``what``, as libnuma reads it: each number
    one of ``allowed``; a range keeps the allowed ones between its ends. numactl's refusals as UsageError."""
    if text[:1] in ("!", "+"):
        raise UsageError(f"{quoted(text)}: inverted (!) and cpuset-relative (+) {plural_what} are not supported "
                         "by numapin numactl", value=text)
    chosen: list[int] = []
    at = 0
    while True:
        if text[at:] == "all":
            chosen.extend(allowed)
            break
        if devices and text[at:at + 1].isalpha() and text[at:].startswith(_DEVICES):
            raise UsageError(f"{quoted(text)}: a node named by a device ({', '.join(_DEVICES)}) is not supported "
                             "by numapin numactl", value=text)
        first, end = _number(text, at)
        if first is None:
            raise UsageError(f"{quoted(text)} is not a list of {plural_what}", value=text)
        if first not in allowed:
            raise UsageError(f"{what} {first} is not available here (available: {allowed})", value=text)
        chosen.append(first)
        at = end
        if text[at:at + 1] == "-":
            last, end = _number(text, at + 1)
            if last is None:
                raise UsageError(f"{quoted(text)} is not a list of {plural_what}", value=text)
            if last not in allowed:
                raise UsageError(f"{what} {last} is not available here (available: {allowed})", value=text)
            chosen.extend(n for n in allowed if first <= n <= last)
            at = end
        if text[at:at + 1] != ",":
            break
        at += 1
    if at != len(text) and text[at:] != "all":
        raise UsageError(f"{quoted(text)} is not a list of {plural_what}", value=text)
    found = CpuSet(chosen)
    if not found:
        raise UsageError(f"no {what} given", value=text)
    return found


def _nodes(facts: Facts) -> CpuSet:
    """The nodes a list may name: those this process may allocate on (numactl's ``Mems_allowed``)."""
    return MemoryNodes.of(facts.topology).allowed


def cpus_of(request: NumactlRequest, facts: Facts) -> CpuSet | None:
    """The CPUs the request binds the program to (None: the CPUs are left as they are). Each binding is checked,
    as numactl checks each; the last stands."""
    t = facts.topology
    chosen = None
    for kind, text in request.binds:
        if kind == "cpus":  # numactl's CPUs are those of its own mask (Cpus_allowed)
            chosen = _list(text, t.allowed & CpuSet(os.sched_getaffinity(0)), "CPU", "CPUs", devices=False)
        else:
            nodes = _list(text, _nodes(facts), "node", "nodes", devices=True)
            chosen = t.cpus_of_nodes(nodes) & t.allowed
            if not chosen:
                raise UsageError(f"nodes {nodes} have no CPU this process may use (allowed: {t.allowed})",
                                 value=nodes)
    return chosen


def memory_of(request: NumactlRequest, facts: Facts) -> tuple[KernelMemoryPolicy | None, CpuSet]:
    """The memory policy the request sets (None: left as it is) and its nodes."""
    if request.membind is not None:
        return KernelMemoryPolicy.BIND, _list(request.membind, _nodes(facts), "node", "nodes", devices=True)
    if request.preferred is not None:
        nodes = _list(request.preferred, _nodes(facts), "node", "nodes", devices=True)
        if len(nodes) != 1:
            raise UsageError(f"--preferred takes one node, not {nodes}", value=request.preferred)
        return KernelMemoryPolicy.PREFERRED, nodes
    if request.local:
        return KernelMemoryPolicy.LOCAL, CpuSet()
    return None, CpuSet()


def apply_memory(policy: KernelMemoryPolicy | None, nodes: CpuSet, facts: Facts) -> None:
    """Set the memory policy as numactl would: strictly (a refusal raises, nothing steps down)."""
    if policy is KernelMemoryPolicy.LOCAL:
        set_mempolicy(KernelMemoryPolicy.LOCAL)  # --localalloc: numactl's policy "local", not "default"
    elif policy is not None:
        mode = MemoryMode.BIND if policy is KernelMemoryPolicy.BIND else MemoryMode.PREFERRED
        place_memory(nodes, mode, False, strict=True, limits=MemoryNodes.of(facts.topology))


def run(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """Carry out ``numactl ARGV``: print (--show, --hardware), or bind this process and exec the program.

    Returns only for a printout (0); raises UsageError (bad input) or EnvironmentProblem (a refusal)
    before anything runs, as numactl exits non-zero.
    """
    from ..base.environment import APPLIED
    from ..pinning.process import pin
    from ..pinning.request import ExecRequest, PreparedExec
    from ..pinning.state import acting
    from .exec import exec_program, which

    env = dict(os.environ if environ is None else environ)
    request = parse_numactl(argv)
    facts = cached_facts(None, env)
    executable = which(request.program[0], env) if request.program else ""
    cpus = cpus_of(request, facts)
    policy, nodes = memory_of(request, facts)
    if request.hardware:  # the bindings before it checked, as numactl checks them; the machine printed
        print(hardware(facts))
        return 0
    if cpus is not None:
        with acting("exec"):  # the process's record: bound at birth, as numapin exec binds
            result = pin(cpus=cpus, policy="override", strict=True, memory="none", environ=env)
        if result.mask is not None:
            env[APPLIED] = str(result.mask)
    apply_memory(policy, nodes, facts)  # kept across execve, as numactl's is
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
    first = str(nodes.first()) if nodes else "0"
    # numactl names no preferred node for "local", and ends no line there: its next field follows on the line.
    preferred = {KernelMemoryPolicy.DEFAULT: "current\n", KernelMemoryPolicy.LOCAL: ""}.get(policy, f"{first}\n")
    return "\n".join([
        f"policy: {name}",
        f"preferred node: {preferred}physcpubind: {_spaced(mask)}",
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
        size = "<not available>" if n.memory_bytes is None else f"{n.memory_bytes >> 20} MB"
        free = node_free_bytes(t.root, n.id)
        lines.append(f"node {n.id} size: {size}")
        lines.append(f"node {n.id} free: {'<not available>' if free is None else f'{free >> 20} MB'}")
    ids = [n.id for n in nodes]
    lines.append("node distances:")
    lines.append("node " + " ".join(f"{i:>3}" for i in ids) + " ")
    for n in nodes:
        distance = dict(n.distances)
        lines.append(f"{n.id:>3}: " + " ".join(f"{distance.get(i, '?'):>3}" for i in ids) + " ")
    return "\n".join(lines)
