"""What is compared with what: the ways of running a model (`Selector`), the comparisons of two of them
(`Comparison`, `COMPARISONS`), the distilled models against their teachers, and their paired cells and estimates.

A cell enters a comparison only when it is `ok` on both sides; every other status is counted as excluded,
never read as zero. Every estimate carries a 95% interval (`benchlib.analysis.significance`) and the
disturbed cells it rests on.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from benchlib import status
from benchlib.analysis import significance
from benchlib.analysis.runs import DEFAULT_PRECISION, NOT_MEASURED, groups, prepare, shape_name
from benchlib.analysis.significance import GEOMEAN, RatioEstimate
from benchlib.store.results import CELL_KEY


@dataclass(frozen=True)
class Selector:
    """The environments of one way of running a model: a framework, a mode and a precision."""

    framework: str
    mode: str
    precision: str = DEFAULT_PRECISION

    def select(self, rows: pd.DataFrame) -> list[str]:
        """The environments of `rows` (prepared) that this selector picks, in order of appearance: with the
        backend's default options (an environment that sets options, e.g. another attention, is another way)."""
        picked = (rows["framework"] == self.framework) & (rows["mode"] == self.mode) & (rows["precision"] == self.precision)
        chosen = rows[picked & (rows["options"] == "")]
        return list(dict.fromkeys(chosen["environment"]))

    def describe(self) -> str:
        """`framework (mode)`, with the precision when it is not float32."""
        extra = "" if self.precision == DEFAULT_PRECISION else f", {self.precision}"
        return f"{self.framework} ({self.mode}{extra})"


# Every environment is compared with this one on its device and machine (the framework averages, the speed-ups).
BASELINE = Selector("pytorch", "eager")
BASELINE_VERDICT = "baseline"  # the verdict column of the baseline's own row
# The 2019 study's four ways: its averages and claims are over these environments only.
STUDY: tuple[Selector, ...] = (BASELINE, Selector("pytorch", "torchscript"), Selector("tensorflow", "function"), Selector("tensorflow", "xla"))
RATIO = "ratio"  # in `Comparison.statistics`: the geometric mean ratio, under the comparison's `ratio` name


@dataclass(frozen=True)
class Comparison:
    """Two selectors compared cell by cell on one device and machine: other / base, per model and over all models.

    Its table names the two environments' columns `base_label` and `other_label`, shows `statistics`
    (of `tables.comparison_summary`; RATIO is the geometric mean ratio, named `ratio`) and, with `invert`,
    gives that ratio and its interval as base / other (a speed-up); the verdict stays the other's against the base.
    """

    title: str
    base: Selector
    other: Selector
    base_label: str
    other_label: str
    ratio: str
    statistics: tuple[str, ...] = (RATIO,)
    invert: bool = False


COMPARISONS: dict[str, Comparison] = {
    "pytorch_vs_tensorflow": Comparison("PyTorch against TensorFlow", BASELINE, Selector("tensorflow", "function"), "pytorch", "tensorflow", "tf_over_pt"),
    "torchscript_vs_eager": Comparison("TorchScript against eager PyTorch", BASELINE, Selector("pytorch", "torchscript"), "eager", "torchscript",
                                       "torchscript_over_eager", ("mean_change_pct", RATIO)),
    "xla_vs_function": Comparison("XLA against tf.function", Selector("tensorflow", "function"), Selector("tensorflow", "xla"), "function", "xla",
                                  "speedup", (RATIO, "largest_reduction_pct", "largest_reduction_shape"), invert=True),
}  # fmt: skip
# The distilled models and their teachers (student, teacher), compared within each environment.
DISTILLED_PAIRS: tuple[tuple[str, str], ...] = (("distilbert-base-uncased", "bert-base-cased"), ("distilgpt2", "gpt2"))
# Columns every comparison table carries: the ratio's interval, the verdict, what it rests on.
INTERVAL_COLUMNS: tuple[str, ...] = ("ci95_low", "ci95_high", "verdict", "interval_over", "disturbed_cells")


def get_comparison(name: str | Comparison) -> Comparison:
    """The comparison called `name` in COMPARISONS (a Comparison is returned as it is)."""
    if isinstance(name, Comparison):
        return name
    if name not in COMPARISONS:
        raise ValueError(f"comparison must be one of {', '.join(COMPARISONS)}, not {name!r}")
    return COMPARISONS[name]


def study_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` prepared, of the environments of the study's four ways (`STUDY`) only."""
    rows = prepare(rows)
    return rows[rows["environment"].isin([name for selector in STUDY for name in selector.select(rows)])]


# ---------------------------------------------------------------- estimates


def geometric_mean(values: Iterable[float]) -> float:
    """The geometric mean of positive values (NaN when there are none)."""
    values = np.asarray(list(values), dtype=float)
    return float(np.exp(np.log(values).mean())) if len(values) else math.nan


def ratio_estimate(base: pd.DataFrame, other: pd.DataFrame, how: str = GEOMEAN) -> RatioEstimate:
    """The ratio other / base over aligned cells (rows of the same cells in the same order), with its interval."""
    over = "rounds" if (base["values_over"] == "rounds").all() and (other["values_over"] == "rounds").all() else "samples"
    return significance.ratio_interval(list(base["values"]), list(other["values"]), how=how, over=over)


def disturbed_labels(cells: Iterable[tuple[str, int, int]], base: pd.DataFrame, other: pd.DataFrame, base_env: str, other_env: str) -> list[str]:
    """`<environment> <model> <shape>` of each aligned cell that was disturbed in either environment."""
    labels = []
    for (model, batch_size, sequence_length), base_hit, other_hit in zip(cells, base["disturbed"], other["disturbed"]):
        labels += [f"{env} {model} {shape_name(batch_size, sequence_length)}" for env, hit in ((base_env, base_hit), (other_env, other_hit)) if hit]
    return labels


def interval_columns(estimate: RatioEstimate, disturbed: list[str]) -> dict[str, Any]:
    """The interval, the verdict (of the second environment against the first) and the disturbed cells behind it."""
    return {
        "ci95_low": estimate.low, "ci95_high": estimate.high,
        "verdict": significance.verdict(estimate, disturbed=len(disturbed)),
        "interval_over": estimate.over, "disturbed_cells": "; ".join(disturbed),
    }  # fmt: skip


# ---------------------------------------------------------------- paired cells of two environments


PAIRED_COLUMNS: tuple[str, ...] = (
    "device", "machine", "base_environment", "other_environment", *CELL_KEY, "shape",
    "base_status", "other_status", "base_s", "other_s", "paired", "ratio", "base_values", "other_values",
    "base_disturbed", "other_disturbed", "base_values_over", "other_values_over", "base_max_abs_diff", "other_max_abs_diff",
    "base_agreement", "other_agreement", "base_weights", "other_weights",
)  # fmt: skip
_SIDE_COLUMNS = ("status", "values", "disturbed", "values_over", "max_abs_diff", "agreement", "weights")
Pairs = Callable[[pd.DataFrame], Iterable[tuple[str, str]]]


def cells_of_pairs(rows: pd.DataFrame, pairs: Pairs) -> pd.DataFrame:
    """Every cell of each (base, other) environment pair that `pairs` picks from a device and machine's rows,
    with `ratio` = other / base where both are `ok`; columns PAIRED_COLUMNS."""
    rows = prepare(rows)
    frames = []
    for device, machine, group in groups(rows):
        for base_env, other_env in pairs(group):
            sides = [group[group["environment"] == env].set_index(list(CELL_KEY))[["time_s", *_SIDE_COLUMNS]] for env in (base_env, other_env)]
            order = list(dict.fromkeys([*sides[0].index, *sides[1].index]))
            cells = sides[0].merge(sides[1], how="outer", left_index=True, right_index=True, suffixes=("_base", "_other")).reindex(order).reset_index()
            cells[["status_base", "status_other"]] = cells[["status_base", "status_other"]].fillna(NOT_MEASURED)
            frames.append(cells.assign(device=device, machine=machine, base_environment=base_env, other_environment=other_env))
    if not frames:
        return pd.DataFrame(columns=list(PAIRED_COLUMNS))
    cells = pd.concat(frames, ignore_index=True)
    cells = cells.rename(columns={f"{name}_{side}": f"{side}_{name}" for name in _SIDE_COLUMNS for side in ("base", "other")})
    cells = cells.rename(columns={"time_s_base": "base_s", "time_s_other": "other_s"})
    cells["shape"] = [shape_name(b, s) for b, s in zip(cells["batch_size"], cells["sequence_length"])]
    cells["paired"] = (cells["base_status"] == status.OK) & (cells["other_status"] == status.OK)
    cells["ratio"] = (cells["other_s"] / cells["base_s"]).where(cells["paired"])
    for side in ("base", "other"):
        cells[f"{side}_disturbed"] = cells[f"{side}_disturbed"].fillna(False).astype(bool)
    return cells[list(PAIRED_COLUMNS)]


def paired_cells(rows: pd.DataFrame, comparison: Comparison | str) -> pd.DataFrame:
    """Every cell of both sides of `comparison` on each device and machine, with `ratio` = other / base where both are `ok`."""
    comparison = get_comparison(comparison)
    return cells_of_pairs(rows, lambda group: itertools.product(comparison.base.select(group), comparison.other.select(group)))


def paired_estimate(paired: pd.DataFrame, how: str = GEOMEAN) -> tuple[RatioEstimate, list[str]]:
    """The ratio other / base over paired cells (rows of `paired_cells` that are paired), with its interval, and the disturbed cells."""
    base = pd.DataFrame({"values": paired["base_values"], "values_over": paired["base_values_over"], "disturbed": paired["base_disturbed"]})
    other = pd.DataFrame({"values": paired["other_values"], "values_over": paired["other_values_over"], "disturbed": paired["other_disturbed"]})
    disturbed = []
    for row in paired.itertuples():
        disturbed += [f"{env} {row.model} {row.shape}" for env, hit in ((row.base_environment, row.base_disturbed), (row.other_environment, row.other_disturbed)) if hit]
    return ratio_estimate(base, other, how), disturbed


# ---------------------------------------------------------------- paired cells of a distilled model and its teacher


def distilled_pairs(rows: pd.DataFrame, pairs: Iterable[tuple[str, str]] = DISTILLED_PAIRS) -> pd.DataFrame:
    """Per cell shape of each environment: student time / teacher time where both are `ok`."""
    rows = prepare(rows)
    frames = []
    for student, teacher in pairs:
        sides = [rows[rows["model"] == m].set_index(["device_type", "machine", "environment", "batch_size", "sequence_length"])[["status", "time_s", "values", "values_over", "disturbed"]] for m in (student, teacher)]
        cells = sides[0].merge(sides[1], how="inner", left_index=True, right_index=True, suffixes=("_student", "_teacher")).reset_index()
        frames.append(cells.assign(student=student, teacher=teacher))
    columns = ["device", "machine", "environment", "student", "teacher", "batch_size", "sequence_length", "paired", "ratio",
               "values_student", "values_teacher", "values_over_student", "values_over_teacher", "disturbed_student", "disturbed_teacher"]  # fmt: skip
    if not frames or all(frame.empty for frame in frames):
        return pd.DataFrame(columns=columns)
    cells = pd.concat([frame for frame in frames if not frame.empty], ignore_index=True).rename(columns={"device_type": "device"})
    cells["paired"] = (cells["status_student"] == status.OK) & (cells["status_teacher"] == status.OK)
    cells["ratio"] = (cells["time_s_student"] / cells["time_s_teacher"]).where(cells["paired"])
    return cells[columns]


def distilled_estimate(paired: pd.DataFrame) -> tuple[RatioEstimate, list[str]]:
    """Student / teacher over paired rows of `distilled_pairs`, with its interval, and the disturbed cells."""
    sides = [pd.DataFrame({"values": paired[f"values_{who}"], "values_over": paired[f"values_over_{who}"]}) for who in ("teacher", "student")]
    disturbed = [
        f"{row.environment} {model} {shape_name(row.batch_size, row.sequence_length)}"
        for row in paired.itertuples() for model, hit in ((row.student, row.disturbed_student), (row.teacher, row.disturbed_teacher)) if hit
    ]  # fmt: skip
    return ratio_estimate(sides[0], sides[1], GEOMEAN), disturbed
