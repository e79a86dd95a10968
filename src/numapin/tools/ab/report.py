"""What the runs of ``numapin ab`` say: per variant the median and its interval, each against the baseline,
and what to deploy.

A comparison calls a difference only when the rank test's p-value is below the design's error rate
shared out (Bonferroni) over every comparison with the baseline and, with ``--until-clear``, over every
look the design may take: the chance of calling a difference where there is none stays at or under
``alpha`` (5%) for the whole experiment. Otherwise it says "no difference detected after N runs".
"""

from __future__ import annotations

import random
import shlex

from ...base.choices import Choice
from ...base.environment import AUTOPIN, AUTOPIN_OPTIONS
from ...base.frozen import frozen
from ...base.text import counted
from . import stats
from .runs import Better, Design, Metric, MetricKind, Run, Status, Variant

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

__all__ = ["Comparison", "Finding", "Report", "Summary", "analyse", "clear", "threshold"]

#: The first round after which ``--until-clear`` may stop (fewer runs cannot show a difference at 5%).
FIRST_LOOK = 5


class Finding(Choice):
    """What one comparison with the baseline found."""

    BETTER = "better"
    WORSE = "worse"
    SAME = "no difference detected"


@frozen
class Summary:
    """One variant's measured runs (warm-up left out)."""

    variant: Variant
    runs: tuple[Run, ...]
    median: float | None
    interval: tuple[float, float] | None

    @property
    def values(self) -> list[float]:
        return _values(self.runs)

    @property
    def lost(self) -> list[Run]:
        """Runs that gave no value: failed, timed out, printed none."""
        return [r for r in self.runs if r.status is not Status.OK]


@frozen
class Comparison:
    """One variant against the baseline."""

    variant: str
    ratio: float
    interval: tuple[float, float]
    p: float
    finding: Finding


@frozen
class Report:
    command: tuple[str, ...]
    metric: Metric
    design: Design
    baseline: str
    summaries: tuple[Summary, ...]
    comparisons: tuple[Comparison, ...]
    threshold: float
    """The p-value under which a comparison calls a difference."""
    rounds: int
    """Rounds measured (warm-up left out)."""
    interrupted: bool = False

    def words(self, finding: Finding) -> str:
        if finding is Finding.SAME:
            return f"no difference detected after {counted(self.rounds, 'run')} each"
        if self.metric.kind is MetricKind.WALL:
            return "faster" if finding is Finding.BETTER else "slower"
        return str(finding.value)

    @property
    def best(self) -> Comparison | None:
        """The variant to deploy: of those better than the baseline, the one with the best median."""
        better = [c for c in self.comparisons if c.finding is Finding.BETTER]
        if not better:
            return None
        higher = self.metric.better is Better.HIGHER
        return max(better, key=lambda c: c.ratio) if higher else min(better, key=lambda c: c.ratio)

    def recommendation(self) -> str:
        best = self.best
        if best is None:
            return (f"no variant measured better than {self.baseline} after {counted(self.rounds, 'run')} each: "
                    f"keep {self.baseline}")
        variant = next(s.variant for s in self.summaries if s.variant.name == best.variant)
        how = f"numapin exec {variant.words} -- ..." if variant.options else "numapin exec (its placement of nothing)"
        variables = _as_variables(variant.options)
        factor = best.ratio if self.metric.better is Better.HIGHER else 1 / best.ratio
        said = f"deploy {best.variant}: {how}" + (f" (or {variables} for the start-up hook)" if variables else "")
        return f"{said}; {factor:.2f}x {self.words(Finding.BETTER)} than {self.baseline}, p = {best.p:.2g}"

    def table(self) -> str:
        from ...base.text import table

        header = ["variant", "runs", "lost", "median", "95% interval", f"vs {self.baseline}", "95% interval", "p",
                  "finding"]
        rows = []
        compared = {c.variant: c for c in self.comparisons}
        for s in self.summaries:
            c = compared.get(s.variant.name)
            rows.append([
                s.variant.name, str(len(s.values)), str(len(s.lost)), _figure(s.median),
                "-" if s.interval is None else f"{_figure(s.interval[0])} - {_figure(s.interval[1])}",
                "baseline" if s.variant.name == self.baseline else "-" if c is None else f"{c.ratio:.3f}x",
                "-" if c is None else f"{c.interval[0]:.3f} - {c.interval[1]:.3f}",
                "-" if c is None else f"{c.p:.2g}",
                "-" if c is None else self.words(c.finding),
            ])
        lines = [f"numapin ab: {shlex.join(self.command)}",
                 f"metric: {self.metric.words}, {self.metric.better.value} is better; {counted(self.rounds, 'round')}"
                 f" after {counted(self.design.warmup, 'warm-up round')}, in random order; a difference is called at "
                 "p < "
                 f"{self.threshold:.2g} ({self.design.alpha:g} over every comparison"
                 + (" and look" if self.design.until_clear else "") + ")",
                 *table(header, rows)]
        for s in self.summaries:
            for r in s.lost[:3]:
                lines.append(f"lost: {s.variant.name}, round {r.round + 1}: {r.status.value}"
                             + (f" ({r.detail})" if r.detail else ""))
            if len(s.lost) > 3:
                lines.append(f"lost: {s.variant.name}: {len(s.lost) - 3} more")
            sampled = [r for r in s.runs if r.outside is not None]
            if sampled:
                remote = [r.remote for r in sampled if r.remote is not None]
                lines.append(f"placed: {s.variant.name}: at most {max(r.outside or 0 for r in sampled)} threads "
                             "outside the placement" + (f", {100 * max(remote):.1f}% of its memory on other nodes"
                                                        if remote else "") + f" ({counted(len(sampled), 'run')} "
                             "sampled)")
        if self.interrupted:
            lines.append(f"interrupted: what was measured before ^C ({counted(self.rounds, 'round')})")
        lines.append(self.recommendation())
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        compared = {c.variant: c for c in self.comparisons}
        return {
            "command": list(self.command), "metric": self.metric.words, "better": self.metric.better.value,
            "rounds": self.rounds, "warmup": self.design.warmup, "seed": self.design.seed,
            "alpha": self.design.alpha, "threshold": self.threshold, "baseline": self.baseline,
            "interrupted": self.interrupted,
            "variants": [{
                "name": s.variant.name, "options": list(s.variant.options), "median": s.median,
                "interval": None if s.interval is None else list(s.interval),
                "vs_baseline": None if s.variant.name not in compared else {
                    "ratio": compared[s.variant.name].ratio, "interval": list(compared[s.variant.name].interval),
                    "p": compared[s.variant.name].p, "finding": compared[s.variant.name].finding.value},
                "runs": [r.as_dict() for r in s.runs],
            } for s in self.summaries],
            "recommendation": self.recommendation(),
        }


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _as_variables(options: Sequence[str]) -> str | None:
    """The start-up hook's variables for exec options, when every option has one (``--mode node`` ->
    ``NUMAPIN_MODE=node``); None when one has none (``--cpus``, ``--gpu``)."""
    words = list(options)
    found = [f"{AUTOPIN}=1"]
    while words:
        option = words.pop(0)
        name, sep, value = option.partition("=")
        variable = AUTOPIN_OPTIONS.get(name.removeprefix("--"))
        if not option.startswith("--") or variable is None:
            return None
        if not sep:
            if not words:
                return None
            value = words.pop(0)
        found.append(f"{variable}={shlex.quote(value)}")
    return " ".join(found)


def threshold(design: Design, comparisons: int) -> float:
    """The p-value under which a difference is called: ``alpha`` shared over comparisons and looks."""
    looks = max(design.rounds - FIRST_LOOK + 1, 1) if design.until_clear else 1
    return design.alpha / max(comparisons, 1) / looks


def analyse(runs: Sequence[Run], command: Sequence[str], variants: Sequence[Variant], metric: Metric,
            design: Design, baseline: str, *, interrupted: bool = False) -> Report:
    """The report of ``runs`` (warm-up rounds left out)."""
    rng = random.Random(design.seed)  # the intervals of a seeded experiment are reproducible too
    measured = [r for r in runs if r.round >= 0]
    summaries = []
    for variant in variants:
        mine = tuple(r for r in measured if r.variant == variant.name)
        values = _values(mine)
        summaries.append(Summary(variant, mine, stats.median(values) if values else None,
                                 stats.bootstrap(values, rng, resamples=design.resamples) if values else None))
    bar = threshold(design, len(variants) - 1)
    base = next(s for s in summaries if s.variant.name == baseline)
    comparisons = []
    for s in summaries:
        if s is base or len(s.values) < 2 or len(base.values) < 2 or not base.median:
            continue
        _, p = stats.mann_whitney(s.values, base.values)
        assert s.median is not None
        ratio = s.median / base.median
        finding = Finding.SAME
        if p < bar:
            higher = ratio > 1
            finding = Finding.BETTER if higher == (metric.better is Better.HIGHER) else Finding.WORSE
        interval = stats.ratio_bootstrap(s.values, base.values, rng, resamples=design.resamples)
        comparisons.append(Comparison(s.variant.name, ratio, interval, p, finding))
    rounds = len({r.round for r in measured})
    return Report(tuple(command), metric, design, baseline, tuple(summaries), tuple(comparisons), bar, rounds,
                  interrupted)


def clear(runs: Sequence[Run], variants: Sequence[Variant], design: Design, baseline: str) -> bool:
    """Whether every comparison with the baseline already calls a difference (``--until-clear`` stops then):
    the rank tests alone, without the intervals."""
    values = {v.name: _values(r for r in runs if r.round >= 0 and r.variant == v.name) for v in variants}
    base = values[baseline]
    bar = threshold(design, len(variants) - 1)
    return all(len(found) >= 2 and len(base) >= 2 and stats.mann_whitney(found, base)[1] < bar
               for name, found in values.items() if name != baseline)


def _values(runs: Iterable[Run]) -> list[float]:
    """The values of the runs that gave one (failed, timed-out and valueless runs are never averaged in)."""
    return [r.value for r in runs if r.status is Status.OK and r.value is not None]
