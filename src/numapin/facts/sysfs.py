"""Reading sysfs's small files under one root (:class:`numapin.facts.host.Host`): a malformed one is a warning
naming it, never an exception. The topology's readers (CPUs and nodes; the grouping of cores, packages and caches)
share it."""

from __future__ import annotations

from ..base.text import decimal
from ..cpuset import MAX_ID, CpuSet

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .host import Host

__all__ = ["SysfsReader"]


class SysfsReader:
    """Reads sysfs's small files under one root: a malformed one is a warning naming it, never an exception."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.warnings: list[str] = []

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def text(self, rel: str) -> str | None:
        return self.host.read(rel)

    def cpuset(self, rel: str, *, mask: bool = False, quiet: bool = False) -> CpuSet | None:
        return self.parse_cpuset(rel, self.host.read(rel), mask=mask, quiet=quiet)

    def parse_cpuset(self, rel: str, text: str | None, *, mask: bool = False, quiet: bool = False) -> CpuSet | None:
        """``text``, read from ``rel``, as a set; a malformed one is a warning naming ``rel``."""
        if text is None:
            return None
        try:
            return CpuSet.parse_mask(text) if mask else CpuSet.parse(text)
        except ValueError as exc:
            if not quiet:
                self.warn(f"{rel}: {exc}")
            return None

    def either(self, folder: str, listname: str, maskname: str) -> CpuSet | None:
        """A set from ``folder/listname`` (cpulist) or else ``folder/maskname`` (hex mask)."""
        found = self.cpuset(f"{folder}/{listname}")
        return found if found is not None else self.cpuset(f"{folder}/{maskname}", mask=True)

    def integer(self, rel: str) -> int | None:
        return self.parse_integer(rel, self.host.read(rel))

    def parse_integer(self, rel: str, text: str | None) -> int | None:
        if text is None:
            return None
        body = text.strip()
        if body.isdigit() and body.isascii() and len(body) <= 9:  # the common case, checked cheaply
            return int(body)
        if not body:
            return None
        value = decimal(body)
        if value is None:
            self.warn(f"{rel}: not an integer: {body[:40]!r}")
        return value

    def numbered(self, folder: str, prefix: str, names: list[str] | None = None) -> list[int]:
        """The ids of ``folder``'s entries (``names`` when listed already) named prefix + a decimal;
        ids past the kernel's limits are left out."""
        start = len(prefix)
        listed = self.host.listdir(folder) if names is None else names
        suffixes = [name[start:] for name in listed if name.startswith(prefix)]
        # The common case (cpu12) checked cheaply; decimal() for anything else (cpufreq, cpuidle...).
        values = [int(s) if len(s) <= 9 and s.isdigit() and s.isascii() else decimal(s) for s in suffixes]
        ids = [v for v in values if v is not None and 0 <= v <= MAX_ID]
        if len(ids) < len(values):  # some left out: say which were past the kernel's limits
            for suffix, value in zip(suffixes, values, strict=True):
                if value is not None and value > MAX_ID:
                    self.warn(f"{folder}/{prefix}{suffix}: id {value} is past any the kernel gives "
                              f"(up to {MAX_ID}); left out")
        ids.sort()
        return ids
