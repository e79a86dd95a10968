"""numapin numactl against the real numactl (2.0.16, Debian's) over generated argument vectors.

For each vector both read the same words: the real numactl runs them with ``numactl --show`` as the
program (or shows, or prints the machine, itself), numapin reads them in this process and works out
the binding it would run the program with. Either both refuse, or both bind the same CPUs with the same
memory policy on the same nodes, or numapin refuses by name an option it documents as not carried out.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numapin.base.errors import UsageError
from numapin.cpuset import CpuSet
from numapin.facts.machine import cached
from numapin.kernel.mempolicy import KernelMemoryPolicy
from numapin.tools.numactl import cpus_of, hardware, memory_of, parse_numactl

NEEDS = "apt-get install numactl"


@pytest.fixture(scope="module")
def numactl() -> str:
    found = shutil.which("numactl")
    if found is None:
        message = f"numactl not installed ({NEEDS})"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


_ALLOWED = CpuSet(os.sched_getaffinity(0))
_FIRST, _LAST = _ALLOWED.first(), max(_ALLOWED)
#: List words: numbers as C reads them (octal, hexadecimal, signs, white space), ranges either way round,
#: "all" and "same", and the malformed.
VALUES = [str(_FIRST), str(_LAST), f"{_FIRST}-{_LAST}", f"{_LAST}-{_FIRST}", f"{_FIRST},{_LAST}", "all",
          f"0{_LAST:o}", f"0x{_LAST:x}", f"0X{_FIRST:X}", "010", "0x", "00", f" {_LAST}", f"{_LAST} ", f"\t{_FIRST}",
          f"+{_FIRST}", f"!{_FIRST}", f"-{_FIRST}", f"{_FIRST},", f",{_FIRST}", f"{_FIRST}-", f"{_FIRST},all",
          "same", "", "x", "0", "1", "2", "9", "0-0", f"{_FIRST}--{_LAST}", "١"]
OPTIONS = ["-C", "-N", "-c", "-m", "-p", "--physcpubind", "--cpunodebind", "--membind", "--preferred", "--phys",
           "--cpun", "--mem", "--pref", "--cpu", "--c", "--p", "--preferred-many", "--cpubind"]
FLAGS = ["-l", "-s", "-H", "--localalloc", "--loc", "--show", "--sh", "--hardware", "--h", "-ls", "-sl", "-lC",
         "-Cl", "-lN", "-ll", "-x", "--bogus", "--show=1", "-i", "--balancing", "-a"]


@st.composite
def vectors(draw: st.DrawFn) -> list[str]:
    words: list[str] = []
    for _ in range(draw(st.integers(0, 3))):
        form = draw(st.sampled_from(["separate", "glued", "equals", "flag"]))
        if form == "flag":
            words.append(draw(st.sampled_from(FLAGS)))
            continue
        # Half the values well formed, so that many vectors bind and their bindings are compared.
        value = draw(st.sampled_from(VALUES[:10]) | st.sampled_from(VALUES))
        option = draw(st.sampled_from(OPTIONS))
        if form == "separate" or not value:
            words += [option, value]
        elif option.startswith("--"):
            words.append(f"{option}={value}")
        else:
            words.append(option + value)
    ending = draw(st.sampled_from(["--", "", "", "none"]))
    if ending != "none":
        words += ([ending] if ending else []) + ["PROGRAM", "--show"]
    return words


def _show(text: str) -> dict[str, str]:
    # numactl ends no line after "preferred node:" for the local policy: split fields wherever they begin.
    fields: dict[str, str] = {}
    for line in text.replace("preferred node: physcpubind:", "preferred node: \nphyscpubind:").splitlines():
        name, colon, value = line.partition(":")
        if colon:
            fields[name.strip()] = value.strip()
    return fields


_NAMES = {None: "default", KernelMemoryPolicy.BIND: "bind", KernelMemoryPolicy.PREFERRED: "preferred",
          KernelMemoryPolicy.LOCAL: "local"}


def _ours(argv: list[str]) -> tuple[str, dict[str, str] | str | None]:
    """What numapin would do: ("refused", reason), ("unsupported", reason), ("hardware", text) or ("bound", the
    fields numactl --show would print of the program)."""
    facts = cached(None, {})
    try:
        request = parse_numactl(argv)
        cpus = cpus_of(request, facts)
        policy, nodes = memory_of(request, facts)
    except UsageError as exc:
        return ("unsupported" if "not supported by numapin numactl" in str(exc) else "refused"), str(exc)
    if request.hardware:
        return "hardware", hardware(facts)
    allowed_mems = str(facts.topology.allowed_mems).replace(",", " ")
    return "bound", {
        "policy": _NAMES[policy],
        "physcpubind": " ".join(map(str, cpus if cpus is not None else _ALLOWED)),
        "membind": " ".join(map(str, nodes)) if policy is KernelMemoryPolicy.BIND else allowed_mems,
        "preferred": " ".join(map(str, nodes)) if policy in (KernelMemoryPolicy.BIND,
                                                              KernelMemoryPolicy.PREFERRED) else "",
    }


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vectors())
def test_numapin_numactl_reads_and_binds_as_numactl_does(numactl: str, argv: list[str]) -> None:
    real_argv = [numactl if w == "PROGRAM" else w for w in argv]
    real = subprocess.run([numactl, *real_argv], capture_output=True, text=True, timeout=30)
    kind, ours = _ours(real_argv)
    if kind == "unsupported":
        return  # refused by name, as documented (interleave, balancing, --all, shared memory...)
    if kind == "refused":
        assert real.returncode != 0, f"numapin refuses {argv!r} ({ours}); numactl runs it: {real.stdout!r}"
        return
    assert real.returncode == 0, f"numapin runs {argv!r}; numactl refuses it: {real.stderr[-300:]!r}"
    if kind == "hardware":
        def lines(text: str) -> list[str]:
            return [line.rstrip() for line in text.splitlines() if " free: " not in line and line.strip()]
        assert isinstance(ours, str) and lines(ours) == lines(real.stdout), argv
        return
    theirs = _show(real.stdout)
    assert isinstance(ours, dict)
    assert {k: theirs.get(k) for k in ours} == ours, (argv, real.stdout)
