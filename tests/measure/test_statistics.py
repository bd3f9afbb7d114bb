"""Statistics of a cell's samples: median, IQR, 95% confidence interval, noisy flag, all from the raw samples."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from scipy import stats as scipy_stats

from benchlib.measure import stats
from benchlib.measure.timing import Measurement
from benchlib.store.results import make_row

ONE_TO_TEN = [float(v) for v in range(1, 11)]


def test_known_samples_by_hand():
    # 1..10: median 5.5; quartiles 3.25 and 7.75 (linear interpolation); s = sqrt(55/6); t(0.975, 9) = 2.2621572
    assert stats.quartiles(ONE_TO_TEN) == (3.25, 7.75)
    assert stats.iqr(ONE_TO_TEN) == 4.5
    half = 2.2621571627982 * math.sqrt(55 / 6) / math.sqrt(10)
    assert stats.ci95_half_width(ONE_TO_TEN) == pytest.approx(half, rel=1e-9)
    assert stats.ci95(ONE_TO_TEN) == pytest.approx((5.5 - half, 5.5 + half), rel=1e-9)
    assert stats.ci95(ONE_TO_TEN) == pytest.approx((3.33415, 7.66585), abs=1e-5)


@pytest.mark.parametrize("size", [2, 3, 7, 30, 101])
def test_against_numpy_and_scipy(size):
    generator = random.Random(size)
    samples = [generator.lognormvariate(-3, 0.2) for _ in range(size)]
    q1, q3 = np.percentile(samples, [25, 75])
    assert stats.quartiles(samples) == pytest.approx((q1, q3), rel=1e-12)
    low, high = scipy_stats.t.interval(0.95, size - 1, loc=np.mean(samples), scale=scipy_stats.sem(samples))
    assert stats.ci95(samples) == pytest.approx((low, high), rel=1e-10)


def test_one_sample_has_no_interval():
    assert math.isnan(stats.ci95_half_width([0.5]))
    assert stats.iqr([0.5]) == 0.0 and not stats.is_noisy([0.5])


def test_noisy_means_iqr_above_ten_percent_of_median():
    # Median 1 in both; the outlier 2.0 widens the standard deviation but not the IQR.
    assert stats.iqr([1, 1, 1, 1.09, 2]) == pytest.approx(0.09)
    assert not stats.is_noisy([1, 1, 1, 1.09, 2])
    assert stats.is_noisy([1, 1, 1, 1.11, 2])


def test_running_mean_matches_the_batch_computation():
    generator = random.Random(1)
    samples = [generator.gauss(0.02, 0.001) for _ in range(50)]
    running = stats.RunningMean()
    assert running.relative_ci95_half_width() == math.inf
    for count, value in enumerate(samples, start=1):
        running.add(value)
        if count >= 2:
            prefix = samples[:count]
            expected = stats.ci95_half_width(prefix) / np.mean(prefix)
            assert running.relative_ci95_half_width() == pytest.approx(expected, rel=1e-9)
    assert running.mean == pytest.approx(np.mean(samples), rel=1e-12)


def test_row_statistics_recompute_from_the_kept_samples():
    samples = (0.0101, 0.0102, 0.0099, 0.0140, 0.0100, 0.0098, 0.0101)
    row = make_row({"model": "gpt2", "batch_size": 1, "sequence_length": 8}, "ok", Measurement(samples, number=3, peak_memory_bytes=123))
    kept = json.loads(row["samples_s"])
    assert row["median_s"] == np.median(kept) and row["mean_s"] == pytest.approx(np.mean(kept))
    assert row["iqr_s"] == pytest.approx(np.subtract(*np.percentile(kept, [75, 25])))
    low, high = scipy_stats.t.interval(0.95, len(kept) - 1, loc=np.mean(kept), scale=scipy_stats.sem(kept))
    assert (row["ci95_low_s"], row["ci95_high_s"]) == pytest.approx((low, high))
    assert row["noisy"] is False and row["stop_reason"] == "fixed" and row["peak_memory_bytes"] == 123
    single = make_row({"model": "gpt2"}, "ok", Measurement((0.01,), number=1))
    assert single["ci95_low_s"] == single["ci95_high_s"] == "" and single["peak_memory_bytes"] == ""
