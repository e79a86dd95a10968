"""Every run of ``numapin ab``, drawn: one row per variant, one dot per run, the median and its interval.

Standard library only, as the plan's picture. Each row is a ``g`` with ``id="variant-NAME"``; each run
a ``circle`` with ``data-value`` and a ``title`` (its round and value); the 95% interval is a band of
the variant's colour (Paul Tol's palette, as the plan's), the median a black bar across it. Runs that
gave no value are counted at the row's end, never drawn as values. The axis starts where the values
do, with its ticks labelled; the comparison with the baseline is written beside each row, so colour
is never the only label.
"""

from __future__ import annotations

import math

from ...base.text import markup
from ..picture import PALETTE, fit
from .report import Report

__all__ = ["html", "svg"]

_FONT = "font-family:sans-serif"
_LEFT, _RIGHT, _ROW, _TOP = 150, 300, 44, 56
_PLOT = 520


def _ticks(low: float, high: float) -> list[float]:
    """Round numbers across [low, high]: 4 to 8 of them."""
    span = high - low or abs(high) or 1.0
    step = 10 ** math.floor(math.log10(span / 5))
    for factor in (1, 2, 5, 10):
        if span / (step * factor) <= 7:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _draw(report: Report) -> tuple[str, int, int]:
    values = [v for s in report.summaries for v in s.values]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (high - low) * 0.06 or abs(high) * 0.06 or 1.0
    low, high = low - pad, high + pad

    def x(value: float) -> float:
        return _LEFT + (value - low) / (high - low) * _PLOT

    width = _LEFT + _PLOT + _RIGHT
    parts = [f'<text x="12" y="22" style="{_FONT};font-size:15px;font-weight:bold">'
             f"{markup(fit('numapin ab: ' + ' '.join(report.command), 15 * 1.09, width - 24))}</text>",
             f'<text x="12" y="42" style="{_FONT};font-size:12px">{markup(report.metric.words)}, '
             f"{report.metric.better.value} is better: each dot a run, the band its variant's 95% interval, the bar"
             " its median</text>"]
    compared = {c.variant: c for c in report.comparisons}
    for row, summary in enumerate(report.summaries):
        name = summary.variant.name
        colour = PALETTE[row % len(PALETTE)]
        top = _TOP + row * _ROW
        middle = top + _ROW / 2
        inner = [f'<text x="12" y="{middle + 4:g}" style="{_FONT};font-size:13px">'
                 f"{markup(fit(name, 13, _LEFT - 24))}<title>{markup(name)}</title></text>"]
        if summary.interval is not None:
            left, right = x(summary.interval[0]), x(summary.interval[1])
            inner.append(f'<rect class="interval" x="{left:.1f}" y="{top + 8:g}" width="{max(right - left, 2):.1f}" '
                         f'height="{_ROW - 16:g}" style="fill:{colour};fill-opacity:0.25;stroke:{colour}"/>')
        if summary.median is not None:
            at = x(summary.median)
            inner.append(f'<rect class="median" x="{at - 1.5:.1f}" y="{top + 4:g}" width="3" height="{_ROW - 8:g}" '
                         f'style="fill:#000000"><title>median {summary.median:.6g}</title></rect>')
        for i, run in enumerate(r for r in summary.runs if r.value is not None):
            jitter = ((i * 7) % 11 - 5) * 1.4  # the same runs always drawn the same way
            inner.append(f'<circle cx="{x(run.value or 0):.1f}" cy="{middle + jitter:.1f}" r="4" '
                         f'data-value="{run.value:.6g}" style="fill:{colour};stroke:#000000;stroke-width:0.6">'
                         f"<title>round {run.round + 1}: {run.value:.6g}</title></circle>")
        said = "baseline" if name == report.baseline else ""
        comparison = compared.get(name)
        if comparison is not None:
            said = f"{comparison.ratio:.3f}x, p={comparison.p:.2g}: {report.words(comparison.finding)}"
        if summary.lost:
            said += f"; {len(summary.lost)} lost"
        inner.append(f'<text x="{_LEFT + _PLOT + 14}" y="{middle + 4:g}" style="{_FONT};font-size:12px">'
                     f"{markup(fit(said, 12, _RIGHT - 24))}</text>")
        parts.append(f'<g id="variant-{markup(name)}">' + "".join(inner) + "</g>")
    bottom = _TOP + len(report.summaries) * _ROW
    parts.append(f'<line x1="{_LEFT}" y1="{bottom + 4}" x2="{_LEFT + _PLOT}" y2="{bottom + 4}" '
                 'style="stroke:#000000"/>')
    for tick in _ticks(low, high):
        at = x(tick)
        parts.append(f'<line x1="{at:.1f}" y1="{bottom + 4}" x2="{at:.1f}" y2="{bottom + 9}" style="stroke:#000000"/>'
                     f'<text x="{at:.1f}" y="{bottom + 22}" text-anchor="middle" style="{_FONT};font-size:11px">'
                     f"{tick:.4g}</text>")
    parts.append(f'<text x="12" y="{bottom + 46}" style="{_FONT};font-size:12px">'
                 f"{markup(fit(report.recommendation(), 12, width - 24))}</text>")
    return "\n".join(parts), width, bottom + 60


def svg(report: Report) -> str:
    """Every run as a standalone SVG document."""
    body, width, height = _draw(report)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="numapin ab">\n'
            f'<rect x="0" y="0" width="{width}" height="{height}" style="fill:#FFFFFF"/>\n{body}\n</svg>\n')


def html(report: Report) -> str:
    """The picture and the table in a self-contained HTML page (inline SVG, no script)."""
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>numapin ab</title>"
            "<style>body{margin:12px;font-family:sans-serif} pre{font-size:12px}</style></head><body>\n"
            f"{svg(report)}<pre>{markup(report.table())}</pre></body></html>\n")
