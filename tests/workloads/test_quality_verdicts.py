"""The quality verdict follows the interval (keeps, below, undecided), and the examples that would likely decide an
undecided one are where the interval, computed again on a set that many times as large, stops holding the target."""

from __future__ import annotations

import numpy as np
import pytest

from benchlib.config.eval_data import CLASSIFICATION
from benchlib.workloads.quality import BELOW, KEEPS, UNDECIDED, Prepared, examples_to_decide, score, verdict


@pytest.mark.parametrize(
    ("value", "low", "high", "expected"),
    [
        (1.0005, 0.964, 1.044, UNDECIDED),  # the shipped similarity pairs' int8 on all-MiniLM-L6-v2: holds 0.99 and 1.0
        (0.987, 0.936, 1.029, UNDECIDED),  # another 30 pairs: the same environment, the point on the other side
        (0.995, 0.991, 0.999, KEEPS),
        (0.99, 0.99, 0.995, KEEPS),  # the lower end at the target keeps it
        (0.95, 0.90, 0.989, BELOW),
        (0.995, None, None, KEEPS),  # no interval (agreement on one batch): the point decides
        (0.98, float("nan"), float("nan"), BELOW),
    ],
)  # fmt: skip
def test_the_interval_decides_the_verdict(value: float, low: float | None, high: float | None, expected: str) -> None:
    assert verdict(value, low, high, 0.99) == expected


def test_no_value_has_no_verdict() -> None:
    assert verdict(float("nan"), 0.9, 1.0, 0.99) == "" and verdict(None, None, None, 0.99) == ""


def test_the_examples_that_would_decide_are_where_the_interval_facing_the_target_reaches_it() -> None:
    assert examples_to_decide(0.95, 0.90, 0.99, 0.98, 40) == 72  # 40 x ((0.99 - 0.95) / (0.98 - 0.95))^2 = 71.1: the upper half faces it
    assert examples_to_decide(1.0, 0.96, 1.04, 0.99, 40) == 640  # four times as far as the target: sixteen times the examples
    assert examples_to_decide(0.99, 0.95, 1.03, 0.99, 40) is None  # the estimate on the target: no number of examples decides
    assert examples_to_decide(1.0, float("nan"), float("nan"), 0.99, 40) is None


def test_the_set_at_that_size_decides() -> None:
    """A classification set where the environment answers 45 of 50 right: undecided against 84%; the same answers
    repeated to the size `examples_to_decide` gives have an interval that no longer holds the target."""
    answers = np.r_[np.ones(45), np.zeros(5)]

    def scored(copies: int) -> tuple[float, float, float]:
        gold = np.ones(len(answers) * copies, dtype=np.int64)
        prepared = Prepared(CLASSIFICATION, [np.zeros(1)] * len(gold), gold, len(gold))
        logits = [np.array([1.0 - a, a]) for a in np.tile(answers, copies)]
        result = score(prepared, "accuracy", logits, None, seed=0)
        return result.value, result.low, result.high

    value, low, high = scored(1)
    assert value == 0.9 and verdict(value, low, high, 0.84) == UNDECIDED
    needed = examples_to_decide(value, low, high, 0.84, len(answers))
    assert needed is not None and len(answers) < needed < 20 * len(answers)
    copies = -(-needed // len(answers))  # the next whole number of copies at or above that size
    assert verdict(*scored(copies), 0.84) == KEEPS
