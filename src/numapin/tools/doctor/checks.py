"""doctor's checks, listed once (:data:`CHECKS`): each a function from a :class:`~numapin.tools.doctor.case.Case`
to its findings, run in this order. Adding a finding is one function here or in its family's module, its row
in the table, and its tests.
"""

from __future__ import annotations

from ...base.text import counted
from ...observe.judge import Verdict
from .case import Case
from .finding import Finding
from .launcher import crowd_findings, launcher_findings, startup_file, thread_pool_findings
from .machine import interrupt_findings, link_findings, machine_findings, node_findings
from .memory import host_buffers, memory_refused, pinned_memory, transparent_huge_pages
from .pod import dra_findings, pod_findings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    Check = Callable[[Case], list[Finding]]

__all__ = ["CHECKS"]


def gathered(case: Case) -> list[Finding]:
    """What reading the case found: a rank its launcher got wrong, no placement."""
    return list(case.early)


def pod(case: Case) -> list[Finding]:
    """The kubelet's decisions for a process in a pod (a process, never an environment handed in)."""
    if case.process is None:
        return []
    return pod_findings(case.process, case.facts, case.placement, case.asked.root, case.env,
                        case.asked.pod_resources)


def misplaced(case: Case) -> list[Finding]:
    """``--pid``: the one judge's verdict is misplaced; said with what is off (threads, memory)."""
    judged, want = case.judged, case.want
    if judged is None or judged.verdict is not Verdict.MISPLACED or want is None:
        return []
    share = judged.remote_share()
    sees = [f"{len(judged.outside)} of {counted(len(judged.threads), 'thread')} run outside CPUs {want.target}"
            if judged.outside else "",
            f"{100 * (share or 0):.1f}% of its own memory lies outside node(s) {want.mems} (bound "
            f"{100 * (judged.max_remote or 0):.0f}%)" if "memory" in judged.misplaced_by else ""]
    return [Finding(
        "misplaced", "error", "; ".join(x for x in sees if x),
        "the process is not where its placement puts it: numapin threads PID and numapin ps PID say the same",
        "run it under numapin exec (or pin() it again, with migrate=True to move its pages); numapin threads "
        "PID shows which threads moved and where its memory lies")]


def memory_elsewhere(case: Case) -> list[Finding]:
    """``--pid``: its shared memory (pinned buffers) and its declared host buffers lying off its GPU's node."""
    judged = case.judged
    if judged is None:
        return []
    shared = judged.shared_words()
    found = [Finding(
        "shared-memory-elsewhere", "warning", shared,
        "pinned host memory off the GPU's node halves its copies' bandwidth (device-to-host 13.5 against 33 GiB/s "
        "on a DGX H100, openxla/xla#21708), and pinned pages cannot be moved afterwards",
        "place the worker before it allocates (numapin exec, NUMAPIN_AUTOPIN), make each GPU's buffers inside "
        "numapin.allocating_for(gpu=N), or make pools with numapin.host_buffer(nbytes, gpu=N)")] if shared else []
    return found + [Finding(
        "buffer-elsewhere", "warning", words,
        "a pool off its GPU's node carries each copy across the sockets' link, and its pages stay where they are",
        "make it for the GPU that uses it (numapin.host_buffer(nbytes, gpu=N)), with the node's free memory "
        "checked first (numapin buffer --gpu N --size S)") for words in judged.buffer_words()]


def crowd(case: Case) -> list[Finding]:
    """The other pinners the environment turns against the placement, and (``--pid``) those that set threads'
    masks, each where the table of the other pinners says they belong."""
    placement = case.placement
    found = crowd_findings(case.env, None if placement is None else case.facts.vendor_at(placement.pci))
    if case.judged is not None:
        from ..threads_report import crowd_words

        found += [Finding("other-pinners", "info", words, "a library's own threads: where the table of the other "
                          "pinners says they belong, they are expected there", "nothing where it says expected; "
                          "else the variable it names") for words in crowd_words(case.judged)]
    return found


def dra(case: Case) -> list[Finding]:
    return dra_findings(case.facts, case.asked.resource_slices)


def started(case: Case) -> list[Finding]:
    """The start-up file, where the environment asks for the start-up hook."""
    return startup_file(case.env)


#: Every check, in the order its findings are said.
CHECKS: tuple[Check, ...] = (
    gathered, machine_findings, node_findings, link_findings, interrupt_findings, launcher_findings,
    thread_pool_findings, pod, misplaced, memory_elsewhere, host_buffers, transparent_huge_pages, pinned_memory,
    memory_refused, crowd, dra, started,
)
