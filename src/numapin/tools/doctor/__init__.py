"""``numapin doctor``: what in the job would undo the pin or waste it, each finding with its fix.

Reads an environment (this process's, or another's from ``/proc/PID/environ``),
the machine's facts and the placement numapin would make, and checks them
against each other. Nothing is changed. Every finding has a stable id (for
scripts: ``--json``), a severity — ``error``: the pin will be undone or cannot
hold; ``warning``: it will be wasted; ``info``: worth knowing — what was seen,
why it matters, and the fix.

What a check reads is gathered once into a case (:mod:`.case`); the checks are a table (:mod:`.checks`), each
kind of finding in its family's module (the machine's, the launcher's, the pod's, the memory's).
"""

from __future__ import annotations

import os

from ...base.errors import UsageError
from ...facts.podresources import SOCKET
from ...kernel.mapping import HUGEPAGES
from ...placement.modes import PlacementMode, parse_mode
from .case import Asked, gather
from .checks import CHECKS
from .finding import Diagnosis, Finding
from .launcher import STARTUP_FILE, slurm_binding, startup_file
from .pod import pod_findings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ...facts.dra import DraDevice


__all__ = ["STARTUP_FILE", "Diagnosis", "Finding", "diagnose", "pod_findings", "slurm_binding", "startup_file"]


def diagnose(
    environ: Mapping[str, str] | None = None,
    *,
    gpu: int | None = None,
    rank: str = "auto",
    mode: str | PlacementMode | None = None,
    reserve: int = 0,
    root: str | os.PathLike[str] | None = None,
    pid: int | None = None,
    pod_resources: str | None = SOCKET,
    buffer: int | None = None,
    hugepages: str | None = None,
    lock: bool = False,
    resource_slices: tuple[DraDevice, ...] = (),
) -> Diagnosis:
    """Check ``environ`` (default: this process's, or PID's when ``pid`` is given) against the placement.

    The GPU is ``gpu`` (an index in the process's own view, as everywhere),
    else ``rank``'s; with neither (``rank="auto"``), what numapin's record of the
    process says (a pin made inside the process is there too), else its
    launcher's local rank. The mode is ``mode``, else the record's, else
    ``node``. With ``pid``, the placement and the verdict are the one judge's
    (:func:`numapin.observe.judge.judge`), as ``threads`` and ``ps`` give them.
    What was used is the diagnosis's ``basis``, an assumption said as one. A process in a Kubernetes pod is
    checked against the kubelet's files and its pod-resources API at ``pod_resources`` (None: not asked).
    ``buffer``: bytes of a host buffer to be made for the GPU (``hugepages`` ``"2M"``/``"1G"``/``"thp"``, ``lock``),
    checked against the node's free huge pages, the kernel's transparent huge page settings and the process's
    ``RLIMIT_MEMLOCK``. ``resource_slices``: the devices DRA
    drivers published (:func:`numapin.facts.dra.read_slices`), their NUMA nodes checked against the kernel's.
    """
    if hugepages is not None and hugepages not in HUGEPAGES:
        raise UsageError(f"hugepages {hugepages!r}: {', '.join(HUGEPAGES)}", value=hugepages)
    if buffer is not None and (isinstance(buffer, bool) or not isinstance(buffer, int) or buffer <= 0):
        raise UsageError(f"buffer {buffer!r}: a size is a whole number of bytes from 1", value=buffer)
    asked = Asked(gpu, rank, None if mode is None else parse_mode(mode), reserve, root, pid, pod_resources, buffer,
                  hugepages, lock, resource_slices)
    case = gather(environ, asked)
    findings = tuple(finding for check in CHECKS for finding in check(case))
    judged = case.judged
    return Diagnosis(case.placement, findings, pid, None if case.want is None else case.want.basis,
                     None if judged is None else judged.verdict)
