"""The server scenario's answer: the largest arrival rate whose LoadGen result is VALID under the latency bound, found with
a bounded number of trials: from a first guess, doubled while VALID or halved while INVALID until a VALID rate and an
INVALID one bracket it, then bisected until they are within `resolution` of each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

RESOLUTION = 0.1  # bisect until the INVALID rate is within 10% above the VALID one


@dataclass(frozen=True)
class Search:
    """The rates tried, in order, with LoadGen's verdict; `max_qps` is the largest VALID one with no INVALID one below it
    (None when none was VALID), `above` the smallest INVALID rate above it (None when every rate tried was VALID)."""

    trials: tuple[tuple[float, bool], ...]
    max_qps: float | None
    above: float | None


def search_max_qps(valid_at: Callable[[float], bool], first_qps: float, max_trials: int, resolution: float = RESOLUTION) -> Search:
    """Bracket, then bisect, the largest rate for which `valid_at(rate)` (one LoadGen trial) is true, in at most `max_trials` trials."""
    if first_qps <= 0 or max_trials < 1:
        raise ValueError("the search needs a positive first rate and one trial or more")
    trials: list[tuple[float, bool]] = []
    low: float | None = None  # the largest VALID rate below every INVALID one
    high: float | None = None  # the smallest INVALID rate

    def trial(rate: float) -> bool:
        nonlocal low, high
        valid = valid_at(rate)
        trials.append((rate, valid))
        if valid:
            low = rate if low is None else max(low, rate)
        else:
            high = rate if high is None else min(high, rate)
        return valid

    rate = first_qps
    valid = trial(rate)
    while len(trials) < max_trials and (low is None or high is None):
        rate = rate * 2 if valid else rate / 2
        valid = trial(rate)
    while len(trials) < max_trials and low is not None and high is not None and high > low * (1 + resolution):
        trial((low + high) / 2)
    return Search(tuple(trials), low, high)
