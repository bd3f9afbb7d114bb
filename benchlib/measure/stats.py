"""Statistics of a cell's per-call sample times: median, interquartile range, 95% confidence interval.

Every figure here is a pure function of the samples kept in each results row (`samples_s`),
so any of them can be recomputed from results.csv alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from functools import cache

from scipy.special import stdtrit  # Student's t quantile; scipy.stats costs a kernel 0.5 s more to import

CONFIDENCE = 0.95
NOISY_IQR_FRACTION = 0.10  # a cell is noisy when its IQR exceeds this fraction of its median


@cache
def t_quantile(degrees_of_freedom: int) -> float:
    """The two-sided 95% quantile of Student's t distribution."""
    return float(stdtrit(degrees_of_freedom, 0.5 + CONFIDENCE / 2))


def quartiles(samples: Sequence[float]) -> tuple[float, float]:
    """First and third quartiles, linearly interpolated (numpy's and torch.utils.benchmark's rule)."""
    if len(samples) == 1:
        return samples[0], samples[0]
    first, _, third = statistics.quantiles(samples, n=4, method="inclusive")
    return first, third


def iqr(samples: Sequence[float]) -> float:
    """Interquartile range: third quartile minus first."""
    first, third = quartiles(samples)
    return third - first


def ci95_half_width(samples: Sequence[float]) -> float:
    """Half-width of the 95% confidence interval of the mean (t distribution); NaN below 2 samples."""
    if len(samples) < 2:
        return math.nan
    return t_quantile(len(samples) - 1) * statistics.stdev(samples) / math.sqrt(len(samples))


def ci95(samples: Sequence[float]) -> tuple[float, float]:
    """The 95% confidence interval of the mean, (low, high); NaN below 2 samples."""
    mean, half = statistics.fmean(samples), ci95_half_width(samples)
    return mean - half, mean + half


def is_noisy(samples: Sequence[float]) -> bool:
    """True when the interquartile range exceeds 10% of the median."""
    return iqr(samples) > NOISY_IQR_FRACTION * statistics.median(samples)


class RunningMean:
    """Mean and variance updated one sample at a time (Welford), for the adaptive stopping rule."""

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self._sum_squares = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self._sum_squares += delta * (value - self.mean)

    def relative_ci95_half_width(self) -> float:
        """Half-width of the mean's 95% confidence interval over the mean; inf below 2 samples."""
        if self.count < 2 or self.mean <= 0:
            return math.inf
        std = math.sqrt(max(self._sum_squares, 0.0) / (self.count - 1))
        return t_quantile(self.count - 1) * std / math.sqrt(self.count) / self.mean
