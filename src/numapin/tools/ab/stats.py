"""The statistics ``numapin ab`` reports, in plain Python: medians, bootstrap intervals, the rank test.

Run times are skewed and carry outliers (a page-cache miss, another process waking), so every figure
rests on medians and ranks, never on means: a variant's median with a percentile-bootstrap 95%
interval, the ratio of two medians with its own, and the Mann–Whitney U test (also called the
Wilcoxon rank-sum test) for "does one variant tend to give larger values than the other".

The U test follows its textbook definition, as SciPy's ``mannwhitneyu`` computes it with its defaults
(``tests`` hold them to SciPy's answers): U of the first sample from its rank sum (average ranks for
ties); two-sided, the p-value is twice the chance of a U at least as far from the middle; the exact
distribution of U when either sample has at most 8 values and no value repeats, otherwise the normal
approximation with the tie correction of the variance and a continuity correction of one half.
"""

from __future__ import annotations

import math
import random
import statistics

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["bootstrap", "mann_whitney", "median", "percentile", "ratio_bootstrap"]

#: Resamples of a bootstrap interval: enough that its ends move by well under the runs' own spread.
RESAMPLES = 4000


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of sorted values, interpolated linearly between the two nearest
    (the common definition, NumPy's default)."""
    if not ordered:
        raise ValueError("no values")
    at = (len(ordered) - 1) * q / 100
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _interval(estimates: list[float], level: float) -> tuple[float, float]:
    estimates.sort()
    tail = (1 - level) / 2 * 100
    return percentile(estimates, tail), percentile(estimates, 100 - tail)


def bootstrap(values: Sequence[float], rng: random.Random, *, level: float = 0.95, resamples: int = RESAMPLES,
              statistic: Callable[[Sequence[float]], float] = median) -> tuple[float, float]:
    """A percentile-bootstrap interval of ``statistic`` (the median) of ``values``: resample with
    replacement, take the statistic of each resample, and read the middle ``level`` of them."""
    if not values:
        raise ValueError("no values")
    n = len(values)
    return _interval([statistic(rng.choices(values, k=n)) for _ in range(resamples)], level)


def ratio_bootstrap(values: Sequence[float], baseline: Sequence[float], rng: random.Random, *,
                    level: float = 0.95, resamples: int = RESAMPLES) -> tuple[float, float]:
    """A percentile-bootstrap interval of median(values) / median(baseline), each sample resampled on its own
    (the runs of two variants are independent)."""
    if not values or not baseline:
        raise ValueError("no values")
    ratios = []
    for _ in range(resamples):
        below = median(rng.choices(baseline, k=len(baseline)))
        above = median(rng.choices(values, k=len(values)))
        ratios.append(above / below if below else math.inf)
    return _interval(ratios, level)


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) of ``values`` in their order, and the size of each group of equal values."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties = []
    start = 0
    while start < len(order):
        stop = start
        while stop + 1 < len(order) and values[order[stop + 1]] == values[order[start]]:
            stop += 1
        for i in range(start, stop + 1):
            ranks[order[i]] = (start + stop) / 2 + 1
        ties.append(stop - start + 1)
        start = stop + 1
    return ranks, ties


def _counts(m: int, n: int, size: int) -> list[int]:
    """How many orderings of m and n distinct values give each U (0..size) of the first sample."""
    # f(m, n)[k] = f(m-1, n)[k-n] + f(m, n-1)[k]: the largest value is the first sample's (it beats all n)
    # or the second's (it beats none of the first's).
    table = {(0, j): [1] + [0] * size for j in range(n + 1)}
    for i in range(1, m + 1):
        table[(i, 0)] = [1] + [0] * size
        for j in range(1, n + 1):
            above, beside = table[(i - 1, j)], table[(i, j - 1)]
            table[(i, j)] = [beside[k] + (above[k - j] if k >= j else 0) for k in range(size + 1)]
    return table[(m, n)]


def mann_whitney(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """The Mann–Whitney U test of ``x`` against ``y``, two-sided: (U of ``x``, p-value)."""
    m, n = len(x), len(y)
    if not m or not n:
        raise ValueError("each sample needs a value")
    ranks, ties = _ranks([*x, *y])
    u1 = sum(ranks[:m]) - m * (m + 1) / 2
    u = max(u1, m * n - u1)
    if min(m, n) <= 8 and all(t == 1 for t in ties):
        p = 2 * sum(_counts(m, n, m * n)[round(u):]) / math.comb(m + n, m)
    else:
        total = m + n
        spread = m * n / 12 * ((total + 1) - sum(t ** 3 - t for t in ties) / (total * (total - 1)))
        if spread <= 0:
            return u1, 1.0  # every value the same: nothing tells the samples apart
        z = (u - m * n / 2 - 0.5) / math.sqrt(spread)
        p = 2 * 0.5 * math.erfc(z / math.sqrt(2))
    return u1, min(max(p, 0.0), 1.0)
