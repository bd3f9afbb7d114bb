"""LoadGen's early stopping: the fewest queries it accepts at a percentile, as the kit computes them, are LoadGen's own."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from benchlib.scenarios.loadgen import LoadSettings, early_stopping_minimum, early_stopping_queries, run_loadgen


def steady_call(ids: np.ndarray, first_token=None) -> np.ndarray:
    """A system under test whose every answer takes the same millisecond."""
    time.sleep(0.001)
    return ids


@pytest.mark.parametrize("percentile", [90, 99])
@pytest.mark.parametrize("scenario", ["single-stream", "multi-stream", "server"])
def test_early_stoppings_fewest_queries_are_those_loadgen_asks_for(tmp_path: Path, scenario: str, percentile: int) -> None:
    """A test of 8 queries, none of them slow: INVALID for early stopping alone, which asks for the kit's count exactly."""
    settings = LoadSettings(
        scenario=scenario, min_duration_s=0.01, min_query_count=8, expected_qps=500.0, samples_per_query=2, target_qps=200.0,
        latency_bound_s=0.1, latency_percentile=percentile,
    )  # fmt: skip
    report = run_loadgen(settings, [np.arange(4)] * 8, [steady_call], 2, 0.0, tmp_path / "test")
    assert not report.valid and "Early stopping satisfied" in report.unmet
    assert early_stopping_queries(report) == early_stopping_minimum(scenario, percentile)
