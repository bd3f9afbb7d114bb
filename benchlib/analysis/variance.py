"""Where a cell's spread comes from: within a process (sample to sample) and between processes (round to round).

Each round measures a cell in a fresh kernel. On the log of the per-call times, a one-way random-effects
analysis of variance over the rounds (method of moments, as in a textbook ANOVA table) splits the
variance in two: `within`, one sample's standard deviation around its process's level, and `between`,
the standard deviation of the processes' levels themselves (thread pools, allocators, where memory
landed: whatever a process settles into). On the log scale both read as fractions of the time. A
comparison of two runs must clear what `between` alone moves: a figure taken in one process cannot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from benchlib import status

Z95 = 1.959964  # two-sided 95%


def split(round_samples: Sequence[Sequence[float]]) -> tuple[float, float, float] | None:
    """(within, between, samples per round) for one cell from its rounds' samples (seconds): the standard
    deviations of log time within a process and between processes, and the mean number of samples per round.
    None with fewer than two rounds of two samples or more."""
    groups = [np.log(np.asarray(samples, dtype=float)) for samples in round_samples if len(samples) >= 2]
    if len(groups) < 2:
        return None
    sizes = np.array([len(group) for group in groups], dtype=float)
    total, rounds = sizes.sum(), len(groups)
    means = np.array([group.mean() for group in groups])
    grand = np.concatenate(groups).mean()
    within_ms = sum(float(((group - group.mean()) ** 2).sum()) for group in groups) / (total - rounds)
    between_ms = float((sizes * (means - grand) ** 2).sum()) / (rounds - 1)
    per_round = (total - float((sizes**2).sum()) / total) / (rounds - 1)  # n0: the mean round size, for unequal rounds
    between = max((between_ms - within_ms) / per_round, 0.0)
    return math.sqrt(within_ms), math.sqrt(between), float(total / rounds)


def round_sd(within: float, between: float, per_round: float) -> float:
    """The standard deviation of a round's level (log scale): its process's, and its samples' mean."""
    return math.sqrt(between**2 + within**2 / per_round)


def rounds_needed(within: float, between: float, per_round: float, change: float = 0.05) -> int:
    """Rounds per run for the 95% interval of one cell's change between two runs to be narrower than ±`change`."""
    half_width = math.log1p(change)
    return max(1, math.ceil(2 * (Z95 * round_sd(within, between, per_round) / half_width) ** 2))


def cell_splits(rows: pd.DataFrame) -> pd.DataFrame:
    """Per `ok` cell measured in two rounds or more (rows of `runs.load_runs`, with `round_samples`): its
    `within`, `between` and `per_round`."""
    columns = ["environment", "model", "batch_size", "sequence_length", "within", "between", "per_round"]
    if "round_samples" not in rows:
        return pd.DataFrame(columns=columns)
    records = []
    for row in rows[rows["status"] == status.OK].itertuples():
        parts = split(row.round_samples) if isinstance(row.round_samples, list) else None
        if parts is not None:
            records.append({"environment": row.environment, "model": row.model, "batch_size": row.batch_size, "sequence_length": row.sequence_length,
                            "within": parts[0], "between": parts[1], "per_round": parts[2]})  # fmt: skip
    return pd.DataFrame(records, columns=columns)


def environment_spread(rows: pd.DataFrame, change: float = 0.05) -> pd.DataFrame:
    """Per environment measured in two rounds or more: the median over its cells of the spread within a process
    (`within_pct`: one sample; `within_round_pct`: a round's mean of its samples) and between processes
    (`between_pct`), the share of a round's variance that comes from between processes, and the rounds per
    run that a comparison needs to tell a change of `change` from this spread (`rounds_for_5pct` at 5%)."""
    name = f"rounds_for_{change:.0%}".replace("%", "pct")
    columns = ["environment", "cells", "within_pct", "within_round_pct", "between_pct", "between_share", name]
    records = []
    for env, cells in cell_splits(rows).groupby("environment", sort=False):
        within, between, per_round = (float(cells[column].median()) for column in ("within", "between", "per_round"))
        sampling = within**2 / per_round
        records.append({
            "environment": env, "cells": len(cells), "within_pct": 100 * within, "within_round_pct": 100 * math.sqrt(sampling),
            "between_pct": 100 * between, "between_share": between**2 / (between**2 + sampling) if between or sampling else 0.0,
            name: rounds_needed(within, between, per_round, change),
        })  # fmt: skip
    return pd.DataFrame(records, columns=columns)


def noise_floor(rows_a: pd.DataFrame, rows_b: pd.DataFrame) -> float | None:
    """The change between two runs of one environment (their rows) that the spread between processes and the
    sampling could make alone: the half-width of the 95% interval of a cell's log ratio, from the median
    cell's components over both runs and the rounds each run has, as a fraction. None when either run has
    fewer than two rounds (its spread between processes is not measured)."""
    a, b = cell_splits(rows_a), cell_splits(rows_b)
    if a.empty or b.empty:
        return None
    variance = 0.0
    for cells, frame in ((a, rows_a), (b, rows_b)):
        rounds = float(pd.to_numeric(frame.loc[frame["status"] == status.OK, "rounds"], errors="coerce").median())
        level = round_sd(float(cells["within"].median()), float(cells["between"].median()), float(cells["per_round"].median()))
        variance += level**2 / max(rounds, 1.0)
    return math.expm1(Z95 * math.sqrt(variance))
