"""Intervals and verdicts for comparing two environments: how much faster, and how sure.

A comparison is a ratio of times, candidate / baseline, over a fixed set of cells (below 1:
the candidate is faster). Its 95% interval comes from a bootstrap over each cell's values: the
per-round medians when the cell was measured in two rounds or more (the spread between fresh
processes), else its raw samples (the spread within one process, which understates the first).
Each resample draws every cell's values again with replacement, baseline and candidate
independently, and recomputes the ratio; the interval is the 2.5th to 97.5th percentile. Where every cell of a side has
one value (a load cell measured in one round), there is no spread to resample: no interval, and the verdict is
`inconclusive`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
PRACTICAL_THRESHOLD = 0.03  # a change smaller than 3% is no clear difference, however certain

FASTER = "faster"
SLOWER = "slower"
NO_CLEAR_DIFFERENCE = "no clear difference"
INCONCLUSIVE = "inconclusive"
VERDICTS: tuple[str, ...] = (FASTER, SLOWER, NO_CLEAR_DIFFERENCE, INCONCLUSIVE)

GEOMEAN = "geomean"  # geometric mean over cells of candidate / baseline
RATIO_OF_MEANS = "ratio_of_means"  # mean candidate time over mean baseline time (the study's framework averages)

Values = Sequence[float]


@dataclass(frozen=True)
class RatioEstimate:
    """A ratio candidate / baseline with its bootstrap interval."""

    ratio: float
    low: float
    high: float
    cells: int
    over: str  # what was resampled: "rounds" or "samples"


def _aggregate(base: np.ndarray, candidate: np.ndarray, how: str) -> np.ndarray:
    """The ratio over cells (last axis) of per-cell medians."""
    if how == GEOMEAN:
        return np.exp(np.mean(np.log(candidate / base), axis=-1))
    if how == RATIO_OF_MEANS:
        return np.mean(candidate, axis=-1) / np.mean(base, axis=-1)
    raise ValueError(f"how must be {GEOMEAN} or {RATIO_OF_MEANS}, not {how!r}")


def _resampled_medians(values: Values, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Medians of `resamples` draws with replacement from `values`."""
    data = np.asarray(values, dtype=float)
    return np.median(rng.choice(data, size=(resamples, len(data)), replace=True), axis=1)


def median_interval(values: Values, resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """The bootstrap percentile interval of the median of `values` (one figure per round); NaNs for fewer than two."""
    if len(values) < 2:
        return math.nan, math.nan
    medians = _resampled_medians(values, np.random.default_rng(seed), resamples)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(low), float(high)


def ratio_interval(
    base: Sequence[Values], candidate: Sequence[Values], how: str = GEOMEAN, over: str = "samples",
    resamples: int = RESAMPLES, seed: int = 0,
) -> RatioEstimate:  # fmt: skip
    """The ratio candidate / baseline over cells, each cell given as its values (samples or per-round medians).

    `base[i]` and `candidate[i]` are the same cell in the two environments. The point estimate uses
    each cell's median; the interval is the bootstrap percentile interval (see the module's docstring).
    """
    if len(base) != len(candidate):
        raise ValueError("base and candidate must hold the same cells")
    if not base:
        return RatioEstimate(math.nan, math.nan, math.nan, 0, over)
    point = float(_aggregate(np.array([np.median(v) for v in base]), np.array([np.median(v) for v in candidate]), how))
    if all(len(v) < 2 for v in base) or all(len(v) < 2 for v in candidate):  # one value a cell: no spread to resample
        return RatioEstimate(point, math.nan, math.nan, len(base), over)
    rng = np.random.default_rng(seed)
    base_draws = np.column_stack([_resampled_medians(v, rng, resamples) for v in base])
    candidate_draws = np.column_stack([_resampled_medians(v, rng, resamples) for v in candidate])
    ratios = _aggregate(base_draws, candidate_draws, how)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return RatioEstimate(point, float(low), float(high), len(base), over)


def verdict(estimate: RatioEstimate, threshold: float = PRACTICAL_THRESHOLD, disturbed: int = 0) -> str:
    """`faster` or `slower` (the candidate against the baseline) only when the interval excludes 1 and the
    change is at least `threshold`; `inconclusive` when the comparison rests on disturbed cells, on none, or on one
    value a cell on a side (one round under load: no interval)."""
    if disturbed or estimate.cells == 0 or math.isnan(estimate.ratio) or math.isnan(estimate.low):
        return INCONCLUSIVE
    if estimate.high < 1 and estimate.ratio <= 1 - threshold:
        return FASTER
    if estimate.low > 1 and estimate.ratio >= 1 + threshold:
        return SLOWER
    return NO_CLEAR_DIFFERENCE
