"""What ``numapin doctor`` says: each finding, and the diagnosis that gathers them."""

from __future__ import annotations

from ...base.frozen import frozen
from ...base.text import counted, plural, printable
from ...observe.judge import Verdict
from ...placement.modes import Placement

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


__all__ = ["Diagnosis", "Finding"]


@frozen
class Finding:
    """One thing that fights or wastes the pin."""

    id: str
    severity: str  # "error", "warning" or "info"
    sees: str
    why: str
    fix: str

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "severity": self.severity, "sees": self.sees, "why": self.why, "fix": self.fix}

    def text(self) -> str:
        # What a finding quotes may come from another process or the kubelet (names of pods, claims, processes):
        # a terminal is never handed its control characters.
        return (f"{self.severity}: [{self.id}] {printable(self.sees)}\n    why: {printable(self.why)}\n"
                f"    fix: {printable(self.fix)}")


@frozen
class Diagnosis:
    """What ``numapin doctor`` found, and the placement it checked against."""

    placement: Placement | None
    findings: tuple[Finding, ...]
    pid: int | None = None
    basis: str | None = None
    """What the placement was judged by: the process's record, its launcher's rank, an option, or an assumption."""
    verdict: Verdict | None = None
    """With ``--pid``: the one judge's verdict on the process (as ``threads`` and ``ps`` give it)."""

    @property
    def exit_code(self) -> int:
        """0 when nothing is a warning or an error, else 1."""
        return 1 if any(f.severity in ("error", "warning") for f in self.findings) else 0

    def as_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "placement": None if self.placement is None else self.placement.as_dict(),
                "basis": self.basis, "verdict": None if self.verdict is None else self.verdict.value,
                "findings": [f.as_dict() for f in self.findings]}

    def text(self) -> str:
        who = "this process" if self.pid is None else f"process {self.pid}"
        lines = [f"numapin doctor: {who}"]
        if self.placement is not None:
            p = self.placement
            lines.append(f"placement: {plural(len(p.workers), 'CPU')} {p.workers}: {p.reason}")
        if self.basis:
            lines.append(f"judged by: {self.basis}")
        if self.verdict is not None:
            lines.append(f"verdict: {self.verdict}")
        lines.extend(f.text() for f in self.findings)
        lines.append(counted(len(self.findings), "finding") if self.findings else "no findings")
        return "\n".join(lines)
