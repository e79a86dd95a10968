"""numapin ab's statistics, held to SciPy's on fixed and generated data (SciPy is a test dependency only)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from numapin.tools.ab import stats
from numapin.tools.ab.report import Finding, analyse, threshold
from numapin.tools.ab.runs import Better, Design, Metric, MetricKind, Run, Status, Variant, experiment

SAMPLES = st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=14)
TIED = st.lists(st.integers(min_value=0, max_value=4).map(float), min_size=1, max_size=14)


@settings(max_examples=400, deadline=None)
@given(st.one_of(SAMPLES, TIED), st.one_of(SAMPLES, TIED))
def test_the_rank_test_is_scipys(x: list[float], y: list[float]) -> None:
    u, p = stats.mann_whitney(x, y)
    theirs = scipy_stats.mannwhitneyu(x, y)  # two-sided, exact or asymptotic as SciPy chooses by default
    assert u == pytest.approx(theirs.statistic, abs=1e-9)
    if np.isnan(theirs.pvalue):  # every value the same: SciPy says nan, numapin "nothing tells them apart"
        assert p == 1.0 and len(set(x + y)) == 1
    else:
        assert p == pytest.approx(theirs.pvalue, abs=1e-9)


@pytest.mark.parametrize(("x", "y", "p"), [
    # No ties, 5 and 6 values: the exact distribution (SciPy: 0.004329...).
    ([1.1, 2.2, 3.3, 4.4, 5.5], [6.1, 7.2, 8.3, 9.4, 10.5, 11.6], 0.004329004329004329),
    # Ties: the normal approximation with the tie correction.
    ([1, 1, 2, 2, 3, 3, 4, 9, 9, 9], [2, 3, 3, 4, 5, 5, 6, 7, 8, 8], None),
])
def test_the_rank_test_on_fixed_data(x: list[float], y: list[float], p: float | None) -> None:
    found = stats.mann_whitney(x, y)
    theirs = scipy_stats.mannwhitneyu(x, y)
    assert found == pytest.approx((theirs.statistic, theirs.pvalue), abs=1e-12)
    if p is not None:
        assert found[1] == pytest.approx(p, abs=1e-15)


@pytest.mark.parametrize("data", [
    [0.51, 0.49, 0.55, 0.62, 0.47, 0.5, 0.9, 0.52, 0.48, 0.53],
    [12.0, 15.5, 11.2, 30.1, 14.9, 13.3, 12.8, 16.0, 12.2, 14.1, 13.9, 12.7],
])
def test_the_median_interval_is_scipys_percentile_bootstrap(data: list[float]) -> None:
    mine = stats.bootstrap(data, random.Random(7), resamples=20000)
    theirs = scipy_stats.bootstrap((data,), np.median, method="percentile", n_resamples=20000,
                                   random_state=np.random.default_rng(7)).confidence_interval
    # Different random draws: the ends agree within what resampling moves them (a small share of the range).
    spread = max(data) - min(data)
    assert mine[0] == pytest.approx(theirs.low, abs=0.04 * spread)
    assert mine[1] == pytest.approx(theirs.high, abs=0.04 * spread)
    assert mine[0] <= stats.median(data) <= mine[1]


def test_the_ratio_interval_holds_the_ratio_of_medians_and_scipys_ends() -> None:
    slow = [1.02, 0.98, 1.05, 1.01, 0.99, 1.03, 1.0, 0.97]
    fast = [0.51, 0.49, 0.52, 0.5, 0.48, 0.53, 0.5, 0.47]
    low, high = stats.ratio_bootstrap(fast, slow, random.Random(3), resamples=20000)

    def ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(a, axis=axis) / np.median(b, axis=axis)

    theirs = scipy_stats.bootstrap((fast, slow), ratio, method="percentile", n_resamples=20000, paired=False,
                                   vectorized=True, random_state=np.random.default_rng(3)).confidence_interval
    assert low <= stats.median(fast) / stats.median(slow) <= high
    assert (low, high) == pytest.approx((theirs.low, theirs.high), abs=0.01)


def test_percentiles_interpolate_as_numpy() -> None:
    values = sorted([3.0, 1.0, 4.0, 1.5, 9.0, 2.6])
    for q in (0, 2.5, 25, 50, 97.5, 100):
        assert stats.percentile(values, q) == pytest.approx(np.percentile(values, q))


# -- the design, tested with simulated runs: no machine's noise, a fixed seed -------------------------


WALL = Metric(MetricKind.WALL, Better.LOWER)


def _simulated(seed: int, effect: float) -> list[Run]:
    """A whole experiment whose runs are drawn, not run: variant b's values ``effect`` times a's."""
    draws = random.Random(seed)
    variants = [Variant("a", ()), Variant("b", ("--cpus", "0"))]

    def measure(variant: Variant, round_: int) -> Run:
        value = draws.lognormvariate(0, 0.1) * (effect if variant.name == "b" else 1.0)
        return Run(variant.name, round_, Status.OK, value, value)

    runs, _ = experiment(["true"], variants, WALL, _design(seed), measure=measure)
    return runs


def _design(seed: int) -> Design:
    return Design(rounds=10, seed=seed, resamples=50)  # the intervals are not what these tests are about


def test_no_effect_is_invented() -> None:
    # The same placement under two names: the test of the test. In 400 experiments of 10 rounds, each with its
    # own seed (so this check is deterministic), a difference is called in at most 5% of them.
    variants = [Variant("a", ()), Variant("b", ("--cpus", "0"))]
    called = 0
    for seed in range(400):
        report = analyse(_simulated(seed, 1.0), ["true"], variants, WALL, _design(seed), "a")
        called += report.comparisons[0].finding is not Finding.SAME
    assert called <= 0.05 * 400, called


def test_a_real_difference_is_found_in_few_rounds() -> None:
    variants = [Variant("a", ()), Variant("b", ("--cpus", "0"))]
    found = [analyse(_simulated(seed, 0.5), ["true"], variants, WALL, _design(seed), "a")
             for seed in range(50)]
    assert all(r.comparisons[0].finding is Finding.BETTER and r.comparisons[0].p < 0.01 for r in found)
    assert all(r.best is not None and r.best.variant == "b" for r in found)


def test_the_error_rate_is_shared_over_comparisons_and_looks() -> None:
    assert threshold(Design(), 1) == 0.05
    assert threshold(Design(), 4) == pytest.approx(0.0125)
    assert threshold(Design(rounds=14, until_clear=True), 2) == pytest.approx(0.05 / 2 / 10)


def test_rounds_are_randomised_blocks_and_warm_up_comes_first() -> None:
    variants = [Variant(name, ()) for name in "abcd"]
    order: list[tuple[int, str]] = []

    def measure(variant: Variant, round_: int) -> Run:
        order.append((round_, variant.name))
        return Run(variant.name, round_, Status.OK, 1.0, 1.0)

    runs, interrupted = experiment(["true"], variants, WALL, Design(rounds=6, warmup=2, seed=5), measure=measure)
    assert len(runs) == 8 * 4 and not interrupted
    assert [r for r, _ in order] == sorted(r for r, _ in order), "round after round"
    assert [r for r, _ in order[:8]] == [-2] * 4 + [-1] * 4, "warm-up rounds first"
    blocks = [[name for r, name in order if r == k] for k in range(-2, 6)]
    assert all(sorted(block) == list("abcd") for block in blocks), "every variant once a round"
    assert len({tuple(block) for block in blocks}) > 1, "the order drawn afresh each round"
    again: list[tuple[int, str]] = []
    experiment(["true"], variants, WALL, Design(rounds=6, warmup=2, seed=5),
               measure=lambda v, r: again.append((r, v.name)) or Run(v.name, r, Status.OK, 1.0, 1.0))
    assert again == order, "a seed makes the same order"


def test_until_clear_stops_once_the_answer_is_clear_and_not_before_the_fifth_round() -> None:
    variants = [Variant("a", ()), Variant("b", ("--cpus", "0"))]
    draws = random.Random(1)

    def measure(variant: Variant, round_: int) -> Run:
        value = draws.uniform(0.9, 1.1) * (0.5 if variant.name == "b" else 1.0)
        return Run(variant.name, round_, Status.OK, value, value)

    from numapin.tools.ab.report import clear

    design = Design(rounds=30, warmup=0, until_clear=True, seed=1)
    runs, _ = experiment(["true"], variants, WALL, design, measure=measure,
                         clear=lambda found: clear(found, variants, design, "a"))
    rounds = max(r.round for r in runs) + 1
    assert 5 <= rounds < 30, rounds
    report = analyse(runs, ["true"], variants, WALL, design, "a")
    assert report.comparisons[0].finding is Finding.BETTER and report.comparisons[0].p < report.threshold


# -- the parsers: any text is a value or one UsageError ---------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60))
def test_a_variant_is_parsed_or_refused_by_name(text: str) -> None:
    from numapin.base.errors import UsageError
    from numapin.tools.ab.runs import parse_variant

    try:
        variant = parse_variant(text)
    except UsageError as exc:
        assert "--variant" in str(exc)
        return
    assert text.startswith(variant.name + "=") and "--" not in variant.options


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,39}", fullmatch=True),
       st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
                .filter(lambda w: w != "--" and not w.startswith(("--keep", "--dry", "--json"))), max_size=4))
def test_a_variant_written_as_a_shell_would_reads_back(name: str, options: list[str]) -> None:
    import shlex

    from numapin.tools.ab.runs import Variant, parse_variant

    assert parse_variant(f"{name}={shlex.join(options)}") == Variant(name, tuple(options))


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=40), st.sampled_from([None, "higher", "lower"]))
def test_a_metric_is_parsed_or_refused_by_name(text: str, better: str | None) -> None:
    from numapin.base.errors import UsageError
    from numapin.tools.ab.runs import parse_metric

    try:
        metric = parse_metric(text, better)
    except UsageError as exc:
        assert "--metric" in str(exc)
        return
    assert metric.kind in ("wall", "regex", "json") and text.startswith(metric.kind)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=20), st.floats(allow_nan=True), st.integers()))
def test_a_keepers_period_is_a_positive_number_of_seconds_or_refused(value: object) -> None:
    from numapin.base.errors import UsageError
    from numapin.pinning.keeper import environ_period, parse_period

    try:
        period = parse_period(value)  # type: ignore[arg-type]
    except UsageError:
        period = None
    assert period is None or 0 < period < 1e6
    if isinstance(value, str):
        try:
            said = environ_period({"NUMAPIN_KEEP": value}, "NUMAPIN_KEEP")
        except UsageError as exc:
            assert str(exc).startswith("NUMAPIN_KEEP=")
        else:
            assert said is None or 0 < said < 1e6
