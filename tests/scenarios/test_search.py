"""The server scenario's search (`scenarios.search`): bracket, then bisect, the largest rate LoadGen finds VALID."""

from __future__ import annotations

import pytest

from benchlib.scenarios.search import search_max_qps


@pytest.mark.parametrize("first", [1.0, 37.0, 500.0])
def test_the_search_brackets_then_bisects_to_within_its_resolution(first: float) -> None:
    search = search_max_qps(lambda rate: rate <= 37.0, first, max_trials=20, resolution=0.05)
    assert search.max_qps is not None and search.above is not None
    assert search.max_qps <= 37.0 < search.above <= search.max_qps * 1.05
    assert (search.max_qps, True) in search.trials and (search.above, False) in search.trials
    assert all(valid == (rate <= 37.0) for rate, valid in search.trials)


def test_the_search_stops_at_max_trials_and_says_what_it_has() -> None:
    tried = search_max_qps(lambda rate: True, 10.0, max_trials=3)
    assert [rate for rate, _ in tried.trials] == [10.0, 20.0, 40.0] and (tried.max_qps, tried.above) == (40.0, None)
    never = search_max_qps(lambda rate: False, 10.0, max_trials=3)
    assert [rate for rate, _ in never.trials] == [10.0, 5.0, 2.5] and (never.max_qps, never.above) == (None, 2.5)
