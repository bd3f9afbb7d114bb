"""The spread within and between processes, and compare's rule sized from it: drift alone gets no verdict."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import f_oneway

from benchlib.analysis import compare, variance
from benchlib.cli import main
from tests.analysis.test_compare import CELLS, write_run


def rounds_of(levels: list[float], within: float, n: int, seed: int) -> list[list[float]]:
    """Per round, `n` samples around the round's level (log scale `levels`), spread `within` (log scale)."""
    rng = np.random.default_rng(seed)
    return [list(np.exp(level + rng.normal(0.0, within, n))) for level in levels]


def test_the_split_matches_a_one_way_anova() -> None:
    rng = np.random.default_rng(1)
    rounds = rounds_of(list(np.log(0.02) + rng.normal(0.0, 0.08, 6)), within=0.03, n=40, seed=2)
    within, between, per_round = variance.split(rounds)
    # An independent computation: scipy's F statistic is the between mean square over the within one,
    # and with equal rounds the between mean square is n * between^2 + within^2.
    f_statistic = f_oneway(*[np.log(r) for r in rounds]).statistic
    assert per_round == 40
    assert f_statistic == pytest.approx((per_round * between**2 + within**2) / within**2, rel=1e-9)
    pooled = np.mean([np.var(np.log(r), ddof=1) for r in rounds])  # equal rounds: the within mean square
    assert within == pytest.approx(math.sqrt(pooled), rel=1e-12)


def test_the_split_finds_the_spreads_it_was_built_with() -> None:
    rng = np.random.default_rng(3)
    rounds = rounds_of(list(rng.normal(0.0, 0.10, 400)), within=0.02, n=20, seed=4)
    within, between, _ = variance.split(rounds)
    assert within == pytest.approx(0.02, rel=0.05) and between == pytest.approx(0.10, rel=0.1)
    steady = rounds_of([0.0] * 50, within=0.05, n=20, seed=5)  # no spread between processes at all
    assert variance.split(steady)[1] < 0.01
    assert variance.split(steady[:1]) is None and variance.split([[1.0], [1.1]]) is None  # one round; one sample a round


def test_rounds_needed_grow_with_the_spread_between_processes() -> None:
    assert variance.rounds_needed(0.01, 0.0, 100) == 1
    # 2 * (1.96 * 0.06 / ln 1.05)^2 = 11.7: twelve rounds to tell 5% from a 6% spread between processes
    assert variance.rounds_needed(0.0, 0.06, 100) == 12
    assert variance.rounds_needed(0.02, 0.06, 10) > variance.rounds_needed(0.02, 0.03, 10)


def spread_rows(environment: str, between: float, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {"environment": environment, "model": f"m{i}", "batch_size": 1, "sequence_length": 8, "status": "ok",
         "round_samples": rounds_of(list(rng.normal(0.0, between, 4)), within=0.01, n=30, seed=seed + i)}
        for i in range(9)
    ]  # fmt: skip


def test_environment_spread_per_environment() -> None:
    rows = pd.DataFrame(spread_rows("cpu-tensorflow", 0.10, 10) + spread_rows("cpu-pytorch", 0.0, 20))
    table = variance.environment_spread(rows).set_index("environment")
    assert list(table.index) == ["cpu-tensorflow", "cpu-pytorch"] and (table["cells"] == 9).all()
    assert table.loc["cpu-tensorflow", "between_pct"] > 4 > table.loc["cpu-pytorch", "between_pct"]
    assert table.loc["cpu-tensorflow", "between_share"] > 0.9
    assert table.loc["cpu-tensorflow", "within_pct"] == pytest.approx(1.0, rel=0.2)
    assert table.loc["cpu-tensorflow", "rounds_for_5pct"] > table.loc["cpu-pytorch", "rounds_for_5pct"] == 1
    assert variance.environment_spread(rows.drop(columns=["round_samples"])).empty  # runs of one round


def two_rounds(tmp_path, name: str, levels: dict, factor: float = 1.0):
    """A run of CELLS in two rounds: each round's samples around 0.1 s times exp(level of that round), times `factor`."""
    cells = {cell: [list(np.array(samples) * factor) for samples in rounds_of([0.0 + np.log(0.1 * (i + 1)) + level for level in levels[cell]], 0.005, 10, i)]
             for i, cell in enumerate(CELLS)}  # fmt: skip
    return write_run(tmp_path / name, cells, rounds=2)


def test_compare_gives_no_verdict_for_drift_between_processes(tmp_path, capsys) -> None:
    # Every process of either run settles 0 to 12% off (as TensorFlow's do): B's processes happen to be slower.
    a = two_rounds(tmp_path, "a", {CELLS[0]: [0.0, 0.10], CELLS[1]: [0.02, 0.12], CELLS[2]: [0.0, 0.11]})
    b = two_rounds(tmp_path, "b", {CELLS[0]: [0.08, 0.16], CELLS[1]: [0.10, 0.15], CELLS[2]: [0.09, 0.16]})
    assert main(["compare", str(a), str(b)]) == 0
    environments = pd.read_csv(tmp_path / "b" / "compare-a" / "environments.csv")
    env = environments.iloc[0]
    # A fixed 5% rule would call this slower: the change is past 5% and its interval excludes no change.
    assert env.geomean_change > 0.05 and env.ci95_low > 0
    assert env.verdict == "no clear difference" and env.threshold > env.geomean_change
    cells = pd.read_csv(tmp_path / "b" / "compare-a" / "cells.csv")
    assert set(cells.verdict) == {"no change"}  # each cell's samples differ, but by less than processes do
    assert "threshold raised to the spread between processes: cpu-pytorch" in capsys.readouterr().out


def test_compare_still_sees_a_real_change_through_the_spread(tmp_path) -> None:
    levels = {CELLS[0]: [0.0, 0.10], CELLS[1]: [0.02, 0.12], CELLS[2]: [0.0, 0.11]}
    a = two_rounds(tmp_path, "a", levels)
    b = two_rounds(tmp_path, "b", levels, factor=1.6)
    comparison = compare.compare_runs(a, b)
    env = comparison.environments.iloc[0]
    assert env.verdict == "slower" and env.geomean_change == pytest.approx(0.6, abs=0.02) and 0.05 < env.threshold < 0.6
    assert set(comparison.cells.verdict) == {"slower"}
