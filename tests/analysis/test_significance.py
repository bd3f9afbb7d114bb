"""Intervals of ratios between environments, checked against scipy, and the verdicts on constructed data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from benchlib.analysis.significance import (
    FASTER,
    GEOMEAN,
    INCONCLUSIVE,
    NO_CLEAR_DIFFERENCE,
    RATIO_OF_MEANS,
    SLOWER,
    RatioEstimate,
    ratio_interval,
    verdict,
)  # fmt: skip


def cells(medians, spread, n=15, seed=1):
    """One list of `n` samples per cell, normally spread by `spread` (relative) around each median."""
    rng = np.random.default_rng(seed)
    return [list(m * (1 + spread * rng.standard_normal(n))) for m in medians]


def scipy_interval(base, candidate, how):
    def statistic(*samples):
        k = len(samples) // 2
        b = np.array([np.median(s) for s in samples[:k]])
        c = np.array([np.median(s) for s in samples[k:]])
        return float(np.exp(np.mean(np.log(c / b)))) if how == GEOMEAN else float(c.mean() / b.mean())

    result = stats.bootstrap((*base, *candidate), statistic, vectorized=False, paired=False, n_resamples=4000,
                             method="percentile", confidence_level=0.95, random_state=7)  # fmt: skip
    return result.confidence_interval.low, result.confidence_interval.high


@pytest.mark.parametrize("how", [GEOMEAN, RATIO_OF_MEANS])
def test_interval_matches_scipy_bootstrap(how):
    base = cells([0.010, 0.020, 0.040], spread=0.05, seed=1)
    candidate = cells([0.008, 0.017, 0.035], spread=0.05, seed=2)
    estimate = ratio_interval(base, candidate, how=how, resamples=4000)
    low, high = scipy_interval(base, candidate, how)
    medians = [np.median(c) / np.median(b) for b, c in zip(base, candidate)]
    expected = np.exp(np.mean(np.log(medians))) if how == GEOMEAN else sum(map(np.median, candidate)) / sum(map(np.median, base))
    assert estimate.ratio == pytest.approx(expected, rel=1e-12) and estimate.cells == 3
    width = high - low
    assert estimate.low == pytest.approx(low, abs=0.1 * width) and estimate.high == pytest.approx(high, abs=0.1 * width)
    assert estimate.low < estimate.ratio < estimate.high


def test_clearly_faster_and_clearly_slower():
    base = cells([0.010, 0.020], spread=0.02, seed=3)
    quicker = cells([0.007, 0.014], spread=0.02, seed=4)
    faster = ratio_interval(base, quicker)
    assert faster.high < 1 and verdict(faster) == FASTER
    slower = ratio_interval(quicker, base)
    assert slower.low > 1 and verdict(slower) == SLOWER


def test_overlapping_times_give_no_clear_difference():
    base = cells([0.010, 0.020], spread=0.10, seed=5)
    same = cells([0.010, 0.020], spread=0.10, seed=6)
    estimate = ratio_interval(base, same)
    assert estimate.low < 1 < estimate.high and verdict(estimate) == NO_CLEAR_DIFFERENCE


def test_a_certain_but_small_change_is_no_clear_difference():
    estimate = RatioEstimate(ratio=0.98, low=0.975, high=0.985, cells=10, over="samples")
    assert verdict(estimate) == NO_CLEAR_DIFFERENCE and verdict(estimate, threshold=0.01) == FASTER


def test_a_comparison_resting_on_disturbed_cells_is_inconclusive():
    estimate = ratio_interval(cells([0.01], 0.01, seed=8), cells([0.005], 0.01, seed=9))
    assert verdict(estimate) == FASTER and verdict(estimate, disturbed=1) == INCONCLUSIVE
    empty = ratio_interval([], [])
    assert empty.cells == 0 and verdict(empty) == INCONCLUSIVE


def test_one_value_a_cell_gives_no_interval_and_an_inconclusive_verdict() -> None:
    """A load cell measured in one round has one figure: there is no spread to resample, so no interval and no verdict
    but `inconclusive`, however large the change."""
    estimate = ratio_interval([[10.0], [20.0]], [[5.0], [10.0]], over="rounds")
    assert estimate.ratio == pytest.approx(0.5) and math.isnan(estimate.low) and math.isnan(estimate.high)
    assert verdict(estimate) == INCONCLUSIVE
    two_rounds = ratio_interval([[10.0, 10.5], [20.0, 21.0]], [[5.0, 5.2], [10.0, 10.1]], over="rounds")
    assert verdict(two_rounds) == FASTER
