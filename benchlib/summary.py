"""The summary's tables: pure pandas functions over the rows of one or more runs.

Environments are compared within one device type (cpu, cuda) on one machine. A cell's
time (`time_s`) is the median over its rounds of each round's median per call; it enters a
comparison only when the cell is `ok` in every environment compared; every other status is
counted as excluded, never read as zero. Every comparison carries a 95% interval and a
verdict (`benchlib.significance`), and lists the disturbed cells it rests on.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import operator
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from benchlib import significance, status
from benchlib.results import CELL_KEY, ENVIRONMENT_FILE, RESULTS_FILE, is_true, read_results
from benchlib.significance import GEOMEAN, RATIO_OF_MEANS, RatioEstimate

GROUP: tuple[str, ...] = ("device_type", "machine")
NOT_MEASURED = "not measured"  # a cell without a row in an environment (a partial run)
ALL_MODELS = "all models"
UNKNOWN_MACHINE = "unknown machine"

# The 2019 script's CSV: these columns, in this order, "N/A" where there is no time.
SHAPES_2019: tuple[str, ...] = tuple(f"{b}x{s}" for b in (1, 2, 4, 8) for s in (8, 64, 128, 256, 512, 1024))
COLUMNS_2019: tuple[str, ...] = ("model", *SHAPES_2019)

AVERAGES_COLUMNS: tuple[str, ...] = (
    "device", "machine", "environment", "framework", "mode", "mean_s", "cells_used", "cells_excluded", "naive_mean_s",
    "vs_baseline", "ci95_low", "ci95_high", "verdict", "disturbed_cells",
)  # fmt: skip
# Columns every comparison table carries: the ratio's interval, the verdict, what it rests on.
INTERVAL_COLUMNS: tuple[str, ...] = ("ci95_low", "ci95_high", "verdict", "interval_over", "disturbed_cells")
DISTILLED_PAIRS: tuple[tuple[str, str], ...] = (("distilbert-base-uncased", "bert-base-cased"), ("distilgpt2", "gpt2"))
DEFAULT_PRECISION = "float32"  # what a row without a precision (from before the column existed) ran in


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
    (of `comparison_summary`; RATIO is the geometric mean ratio, named `ratio`) and, with `invert`,
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


def get_comparison(name: str | Comparison) -> Comparison:
    """The comparison called `name` in COMPARISONS (a Comparison is returned as it is)."""
    if isinstance(name, Comparison):
        return name
    if name not in COMPARISONS:
        raise ValueError(f"comparison must be one of {', '.join(COMPARISONS)}, not {name!r}")
    return COMPARISONS[name]


# ---------------------------------------------------------------- loading runs


def machine_label(environment: dict[str, Any], device: str) -> str:
    """A readable name for the hardware behind `device`: the GPU's name on cuda, else the CPU, its cores
    and the machine's memory. Environments are compared only within one label."""
    machine = environment.get("machine") or {}
    if device.split(":")[0] == "cuda":
        gpus = machine.get("gpus") or []
        index = int(device.split(":")[1]) if ":" in device else 0
        if gpus:
            gpu = gpus[min(index, len(gpus) - 1)]
            return " ".join(str(part) for part in (gpu.get("name"), gpu.get("memory")) if part)
        return UNKNOWN_MACHINE
    cpu = " ".join(str(machine.get("cpu") or "").split())
    cores = machine.get("affinity_cores") or machine.get("logical_cores")
    if not cpu:
        return UNKNOWN_MACHINE
    memory = machine.get("memory_bytes")
    return ", ".join([cpu, *([f"{cores} cores"] if cores else []), *([f"{memory / 2**30:.0f} GiB"] if memory else [])])


def _environment_rows(env_dir: Path, run: str) -> pd.DataFrame:
    """The rows of one environment folder, one per cell over its rounds (`collapse_rounds`), with `run` and `machine` added."""
    rows = collapse_rounds(read_results(env_dir / RESULTS_FILE))
    info_path = env_dir / ENVIRONMENT_FILE
    info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.exists() else {}
    devices = rows["device"].astype(str)
    return rows.assign(run=run, machine=[machine_label(info, d) for d in devices])


def collapse_rounds(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per environment and cell over its rounds (the kept attempt of each round).

    `time_s` is the median over the cell's `ok` rounds of each round's `median_s`; `rounds` counts
    those rounds and `round_spread_pct` is their range over `time_s` (%); `values` are what an
    interval resamples: the per-round medians with two rounds or more (`values_over` "rounds"),
    else the one round's raw samples ("samples"); `disturbed` is true when any kept round was.
    The status is `ok` when any round is, else that of the last round.
    """
    if rows.empty:
        return rows.assign(time_s=pd.Series(dtype=float), rounds=pd.Series(dtype=int), round_spread_pct=pd.Series(dtype=float),
                           values=pd.Series(dtype=object), values_over=pd.Series(dtype=str))  # fmt: skip
    rows = rows.assign(_ok=rows["status"] == status.OK, _disturbed=is_true(rows["disturbed"]) if "disturbed" in rows else False)
    # A round's time: its median per call (its mean in files that hold no median).
    rows["_round_s"] = pd.to_numeric(rows["median_s"], errors="coerce").fillna(pd.to_numeric(rows["mean_s"], errors="coerce"))
    records = []
    for _, cell in rows.groupby(["environment", *CELL_KEY], sort=False):
        ok = cell[cell["_ok"]]
        first = (ok if len(ok) else cell.iloc[[-1]]).iloc[0].to_dict()
        medians = ok["_round_s"].dropna().tolist()
        time_s = float(np.median(medians)) if medians else math.nan
        many = len(medians) > 1
        records.append({
            **first, "time_s": time_s, "rounds": len(medians),
            "round_spread_pct": (max(medians) - min(medians)) / time_s * 100 if many else math.nan,
            "values": medians if many else (list(first["samples_s"]) or [time_s]) if medians else [],
            "values_over": "rounds" if many else "samples", "disturbed": bool(cell.loc[cell["_ok"], "_disturbed"].any()),
        })  # fmt: skip
    return pd.DataFrame(records).drop(columns=["_ok", "_disturbed", "_round_s"])


def environment_dirs(run_dir: str | os.PathLike[str]) -> list[Path]:
    """The environment folders of a run: every `<run_dir>/<env>/` with a results.csv (or the run itself)."""
    run_dir = Path(run_dir)
    own = [run_dir] if (run_dir / RESULTS_FILE).is_file() else []
    return own + sorted(p.parent for p in run_dir.glob(f"*/{RESULTS_FILE}"))


def load_run(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """Every row of a run's environments, with `run`, `machine` and `device_type` columns added."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run_dirs: {run_dir} is not a folder")
    frames = [_environment_rows(env_dir, run_dir.name) for env_dir in environment_dirs(run_dir)]
    frames = [frame for frame in frames if not frame.empty]
    if not frames:
        return prepare(pd.DataFrame(columns=["environment", "framework", "mode", "device", "run", "machine", "status", "mean_s", *CELL_KEY]))
    return prepare(pd.concat(frames, ignore_index=True))


def load_runs(run_dirs: Iterable[str | os.PathLike[str]]) -> pd.DataFrame:
    """The rows of several runs. An environment name found in more than one run becomes `<env>@<run>`."""
    frames = [load_run(run_dir) for run_dir in run_dirs]
    if not frames:
        raise ValueError("run_dirs: give at least one run folder")
    rows = pd.concat(frames, ignore_index=True)
    runs_per_env = rows.groupby("environment")["run"].nunique()
    shared = set(runs_per_env[runs_per_env > 1].index)
    rows["environment"] = [f"{env}@{run}" if env in shared else env for env, run in zip(rows["environment"], rows["run"])]
    return rows


def default_run_dirs(outputs: str | os.PathLike[str] | None = None) -> list[Path]:
    """The newest run under `outputs/` that has results, else `outputs/reference`."""
    outputs = Path(outputs) if outputs is not None else Path(__file__).resolve().parent.parent / "outputs"
    runs = [p for p in outputs.glob("*") if p.is_dir() and p.name != "reference" and environment_dirs(p)]
    if runs:
        return [max(runs, key=lambda run: max((d / RESULTS_FILE).stat().st_mtime for d in environment_dirs(run)))]
    if (outputs / "reference").is_dir():
        return [outputs / "reference"]
    raise FileNotFoundError(f"run_dirs: no run with results under {outputs}; run `python -m benchlib run` or pass run folders")


def prepare(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` ready for the tables: `device_type` (cpu, cuda) and `machine` filled in where missing, `precision`
    float32 where missing or blank, `options` "" (the backend's defaults) where missing, `max_abs_diff` a number (NaN where not compared), sizes as integers, and each
    cell's `time_s`, `values` and `disturbed` (from `collapse_rounds`, or from the row itself)."""
    rows = rows.copy()
    if "machine" not in rows:
        rows["machine"] = UNKNOWN_MACHINE
    precisions = rows["precision"] if "precision" in rows else [None] * len(rows)
    rows["precision"] = [p if isinstance(p, str) and p else DEFAULT_PRECISION for p in precisions]
    options = rows["options"] if "options" in rows else [None] * len(rows)
    rows["options"] = [o if isinstance(o, str) else "" for o in options]
    rows["max_abs_diff"] = pd.to_numeric(rows["max_abs_diff"], errors="coerce") if "max_abs_diff" in rows else math.nan
    rows["device_type"] = [str(d).split(":")[0] for d in rows["device"]]
    rows["mean_s"] = pd.to_numeric(rows["mean_s"], errors="coerce")
    if "time_s" not in rows:  # rows not loaded through `collapse_rounds` (hand-made ones)
        rows["time_s"] = pd.to_numeric(rows["median_s"], errors="coerce") if "median_s" in rows else rows["mean_s"]
    rows["time_s"] = pd.to_numeric(rows["time_s"], errors="coerce")
    if "values" not in rows:
        rows["values"] = [[t] if pd.notna(t) else [] for t in rows["time_s"]]
        rows["values_over"] = "samples"
    rows["disturbed"] = is_true(rows["disturbed"]) if "disturbed" in rows else False
    for column in ("batch_size", "sequence_length"):
        rows[column] = rows[column].astype(int)
    return rows


def _groups(rows: pd.DataFrame) -> Iterable[tuple[str, str, pd.DataFrame]]:
    """(device type, machine, rows) for every device type and machine, in order of appearance."""
    for (device, machine), group in rows.groupby(list(GROUP), sort=False):
        yield device, machine, group


def shape_name(batch_size: int, sequence_length: int) -> str:
    """The study's name for a shape: `<batch>x<sequence>`."""
    return f"{batch_size}x{sequence_length}"


def _statuses(group: pd.DataFrame) -> pd.DataFrame:
    """Cell × environment: the status of each cell in each environment, `not measured` where it has no row."""
    table = group.pivot_table(index=list(CELL_KEY), columns="environment", values="status", aggfunc="last", sort=False)
    environments = list(dict.fromkeys(group["environment"]))
    return table.reindex(columns=environments).fillna(NOT_MEASURED)


# ---------------------------------------------------------------- 1. framework averages


def status_counts(rows: pd.DataFrame) -> pd.DataFrame:
    """Per environment: device, machine, model scale, number of rows and of each status."""
    rows = prepare(rows)
    keys = ["device_type", "machine", "environment", "framework", "mode"] + (["model_scale"] if "model_scale" in rows else [])
    counts = rows.groupby(keys, sort=False)["status"].value_counts().unstack(fill_value=0)
    present = [s for s in status.STATUSES if s in counts] + [s for s in counts if s not in status.STATUSES]
    counts = counts.reindex(columns=present).reset_index()
    counts.insert(len(keys), "rows", counts[present].sum(axis=1))
    counts.columns.name = None
    return counts.rename(columns={"device_type": "device"})


def study_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` prepared, of the environments of the study's four ways (`STUDY`) only."""
    rows = prepare(rows)
    return rows[rows["environment"].isin([name for selector in STUDY for name in selector.select(rows)])]


def framework_averages(rows: pd.DataFrame) -> pd.DataFrame:
    """The study's average time per environment of its four ways (`STUDY`), over the cells `ok` in every
    one of those environments on its device and machine; today's backends are in `speedups`.

    `cells_used` is the number of those cells, `cells_excluded` the number of the other cells
    seen on that device and machine (a non-`ok` status, or no row yet, in some environment), and
    `naive_mean_s` each environment's mean over its own `ok` cells. `vs_baseline` is the
    environment's average over eager PyTorch's on the same cells, with its interval and verdict.
    """
    rows = study_rows(rows)
    records = []
    for device, machine, group in _groups(rows):
        statuses = _statuses(group)
        common = statuses.index[(statuses == status.OK).all(axis=1)]
        by_env = {env: env_rows.set_index(list(CELL_KEY)) for env, env_rows in group.groupby("environment", sort=False)}
        baseline = next(iter(BASELINE.select(group)), None)
        for environment, env_rows in by_env.items():
            ok = env_rows[env_rows["status"] == status.OK]["time_s"]
            record = {
                "device": device, "machine": machine, "environment": environment,
                "framework": env_rows["framework"].iloc[0], "mode": env_rows["mode"].iloc[0],
                "mean_s": ok.reindex(common).mean() if len(common) else math.nan,
                "cells_used": len(common), "cells_excluded": len(statuses) - len(common),
                "naive_mean_s": ok.mean() if len(ok) else math.nan,
            }  # fmt: skip
            if baseline is not None and environment != baseline and len(common):
                base, other = by_env[baseline].loc[common], env_rows.loc[common]
                estimate = ratio_estimate(base, other, RATIO_OF_MEANS)
                record.update(vs_baseline=estimate.ratio, **interval_columns(estimate, _disturbed_labels(common, base, other, baseline, environment)))
            elif environment == baseline:
                record.update(vs_baseline=1.0, verdict=BASELINE_VERDICT)
            records.append(record)
    return pd.DataFrame(records, columns=list(AVERAGES_COLUMNS))


def ratio_estimate(base: pd.DataFrame, other: pd.DataFrame, how: str = GEOMEAN) -> RatioEstimate:
    """The ratio other / base over aligned cells (rows of the same cells in the same order), with its interval."""
    over = "rounds" if (base["values_over"] == "rounds").all() and (other["values_over"] == "rounds").all() else "samples"
    return significance.ratio_interval(list(base["values"]), list(other["values"]), how=how, over=over)


def _disturbed_labels(cells: Iterable[tuple[str, int, int]], base: pd.DataFrame, other: pd.DataFrame, base_env: str, other_env: str) -> list[str]:
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


def excluded_cells(rows: pd.DataFrame) -> pd.DataFrame:
    """The cells left out of the averages, with each non-`ok` status and its reason, one line per environment."""
    rows = study_rows(rows)
    records = []
    for device, machine, group in _groups(rows):
        statuses = _statuses(group)
        reasons = group.set_index(["environment", *CELL_KEY])["reason"] if "reason" in group else pd.Series(dtype=str)
        for cell, cell_statuses in statuses[(statuses != status.OK).any(axis=1)].iterrows():
            model, batch_size, sequence_length = cell
            for environment, state in cell_statuses.items():
                if state != status.OK:
                    records.append({
                        "device": device, "machine": machine, "model": model,
                        "shape": shape_name(batch_size, sequence_length), "environment": environment,
                        "status": state, "reason": reasons.get((environment, *cell), ""),
                    })  # fmt: skip
    return pd.DataFrame(records, columns=["device", "machine", "model", "shape", "environment", "status", "reason"])


# ---------------------------------------------------------------- 2-4. paired comparisons


PAIRED_COLUMNS: tuple[str, ...] = (
    "device", "machine", "base_environment", "other_environment", *CELL_KEY, "shape",
    "base_status", "other_status", "base_s", "other_s", "paired", "ratio", "base_values", "other_values",
    "base_disturbed", "other_disturbed", "base_values_over", "other_values_over", "base_max_abs_diff", "other_max_abs_diff",
)  # fmt: skip
_SIDE_COLUMNS = ("status", "values", "disturbed", "values_over", "max_abs_diff")
Pairs = Callable[[pd.DataFrame], Iterable[tuple[str, str]]]


def cells_of_pairs(rows: pd.DataFrame, pairs: Pairs) -> pd.DataFrame:
    """Every cell of each (base, other) environment pair that `pairs` picks from a device and machine's rows,
    with `ratio` = other / base where both are `ok`; columns PAIRED_COLUMNS."""
    rows = prepare(rows)
    frames = []
    for device, machine, group in _groups(rows):
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


def geometric_mean(values: Iterable[float]) -> float:
    """The geometric mean of positive values (NaN when there are none)."""
    values = np.asarray(list(values), dtype=float)
    return float(np.exp(np.log(values).mean())) if len(values) else math.nan


def paired_estimate(paired: pd.DataFrame, how: str = GEOMEAN) -> tuple[RatioEstimate, list[str]]:
    """The ratio other / base over paired cells (rows of `paired_cells` that are paired), with its interval, and the disturbed cells."""
    base = pd.DataFrame({"values": paired["base_values"], "values_over": paired["base_values_over"], "disturbed": paired["base_disturbed"]})
    other = pd.DataFrame({"values": paired["other_values"], "values_over": paired["other_values_over"], "disturbed": paired["other_disturbed"]})
    disturbed = []
    for row in paired.itertuples():
        disturbed += [f"{env} {row.model} {row.shape}" for env, hit in ((row.base_environment, row.base_disturbed), (row.other_environment, row.other_disturbed)) if hit]
    return ratio_estimate(base, other, how), disturbed


def _pair_statistics(cells: pd.DataFrame, label_model: bool) -> dict[str, Any]:
    paired = cells[cells["paired"]]
    ratios = paired["ratio"]
    estimate, disturbed = paired_estimate(paired)
    stats: dict[str, Any] = {
        "cells": len(paired), "cells_excluded": len(cells) - len(paired),
        "geomean_ratio": geometric_mean(ratios),
        "mean_change_pct": float((ratios - 1).mean() * 100) if len(paired) else math.nan,
        "largest_reduction_pct": math.nan, "largest_reduction_shape": "",
        **interval_columns(estimate, disturbed),
    }  # fmt: skip
    if len(paired):
        best = paired.loc[ratios.idxmin()]
        stats["largest_reduction_pct"] = float((1 - best["ratio"]) * 100)
        stats["largest_reduction_shape"] = f"{best['model']} {best['shape']}" if label_model else best["shape"]
    return stats


def comparison_summary(rows: pd.DataFrame, comparison: Comparison | str) -> pd.DataFrame:
    """Per model and over all models (`all models`): paired cells, excluded cells and statistics of other / base."""
    comparison = get_comparison(comparison)
    cells = paired_cells(rows, comparison)
    keys = ["device", "machine", "base_environment", "other_environment"]
    records = []
    for key, pair in cells.groupby(keys, sort=False):
        for model, model_cells in pair.groupby("model", sort=False):
            records.append({**dict(zip(keys, key)), "model": model, **_pair_statistics(model_cells, label_model=False)})
        records.append({**dict(zip(keys, key)), "model": ALL_MODELS, **_pair_statistics(pair, label_model=True)})
    columns = [*keys, "model", "cells", "cells_excluded", "geomean_ratio", "mean_change_pct", "largest_reduction_pct", "largest_reduction_shape", *INTERVAL_COLUMNS]
    table = pd.DataFrame(records, columns=columns)
    return table.rename(columns={"base_environment": comparison.base_label, "other_environment": comparison.other_label})


def comparison_table(rows: pd.DataFrame, comparison: Comparison | str) -> pd.DataFrame:
    """A comparison's table as declared in COMPARISONS: its environments, cells, `statistics` and interval columns."""
    comparison = get_comparison(comparison)
    table = comparison_summary(rows, comparison).rename(columns={"geomean_ratio": comparison.ratio})
    if comparison.invert:
        table[comparison.ratio] = 1 / table[comparison.ratio]
        table["ci95_low"], table["ci95_high"] = 1 / table["ci95_high"], 1 / table["ci95_low"]
    shown = [comparison.ratio if name == RATIO else name for name in comparison.statistics]
    return table[["device", "machine", comparison.base_label, comparison.other_label, "model", "cells", "cells_excluded", *shown, *INTERVAL_COLUMNS]]


def pytorch_vs_tensorflow(rows: pd.DataFrame) -> pd.DataFrame:
    """2. Eager PyTorch against TensorFlow (tf.function): geometric mean of the per-cell ratio TF / PT, its interval and verdict (TensorFlow against PyTorch)."""
    return comparison_table(rows, "pytorch_vs_tensorflow")


def torchscript_vs_eager(rows: pd.DataFrame) -> pd.DataFrame:
    """3. TorchScript against eager PyTorch: mean per-cell change in time (%; negative = TorchScript faster), the
    geometric mean ratio TorchScript / eager with its interval and verdict (TorchScript against eager)."""
    return comparison_table(rows, "torchscript_vs_eager")


def xla_vs_function(rows: pd.DataFrame) -> pd.DataFrame:
    """4. XLA against tf.function: speedup (geometric mean of function / XLA, its interval inverted to match) and the
    largest reduction in time, with its shape; the verdict is XLA's against tf.function."""
    return comparison_table(rows, "xla_vs_function")


# ---------------------------------------------------------------- 5. distilled models


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


def distilled_vs_teacher(rows: pd.DataFrame) -> pd.DataFrame:
    """5. distilbert-base-uncased / bert-base-cased and distilgpt2 / gpt2: geometric mean time ratio on matching cells,
    with its interval and verdict (the student against its teacher)."""
    cells = distilled_pairs(rows)
    keys = ["device", "machine", "environment", "student", "teacher"]
    records = []
    for key, group in cells.groupby(keys, sort=False):
        paired = group[group["paired"]]
        estimate, disturbed = distilled_estimate(paired)
        records.append({
            **dict(zip(keys, key)), "cells": len(paired), "cells_excluded": int((~group["paired"]).sum()),
            "student_over_teacher": geometric_mean(paired["ratio"]), **interval_columns(estimate, disturbed),
        })  # fmt: skip
    return pd.DataFrame(records, columns=[*keys, "cells", "cells_excluded", "student_over_teacher", *INTERVAL_COLUMNS])


# ---------------------------------------------------------------- 6. the study's spreadsheet


def environments(rows: pd.DataFrame) -> list[str]:
    """The environments of `rows`, in order of appearance."""
    return list(dict.fromkeys(rows["environment"]))


def spreadsheet(rows: pd.DataFrame, environment: str, digits: int | None = None) -> pd.DataFrame:
    """6. One environment as the study's spreadsheet: model × `<batch>x<sequence>`, seconds per call (`time_s`) or the status.

    With `digits`, times are strings with that many significant digits (for display).
    """
    env_rows = prepare(rows[rows["environment"] == environment])
    if env_rows.empty:
        raise ValueError(f"environment: {environment!r} has no rows; the rows have: {', '.join(environments(rows))}")
    shapes = [shape_name(b, s) for b, s in sorted(set(zip(env_rows["batch_size"], env_rows["sequence_length"])))]
    table = pd.DataFrame(index=pd.Index(list(dict.fromkeys(env_rows["model"])), name="model"), columns=shapes, dtype=object)
    for row in env_rows.itertuples():
        value = row.time_s if row.status == status.OK else row.status
        if digits is not None and row.status == status.OK:
            value = f"{value:.{digits}g}"
        table.loc[row.model, shape_name(row.batch_size, row.sequence_length)] = value
    return table.fillna(NOT_MEASURED)


def spreadsheet_2019_csv(rows: pd.DataFrame, environment: str) -> str:
    """6. One environment in exactly the 2019 script's CSV layout: `model,1x8,...,8x1024`, `N/A` where there is no time.

    Shapes outside the 2019 grid have no column there; they are in `spreadsheet`.
    """
    table = spreadsheet(rows, environment)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS_2019)
    writer.writeheader()
    for model, cells in table.iterrows():
        line = {shape: "N/A" for shape in SHAPES_2019}
        line.update({shape: float(value) for shape, value in cells.items() if shape in line and not isinstance(value, str)})
        writer.writerow({"model": model, **line})
    return out.getvalue()


def write_spreadsheet_2019(rows: pd.DataFrame, environment: str, output_dir: str | os.PathLike[str]) -> Path:
    """Write `tables/spreadsheet_2019_<environment>.csv` under `output_dir`; returns its path."""
    path = Path(output_dir) / "tables" / f"spreadsheet_2019_{_slug(environment)}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as file:
        file.write(spreadsheet_2019_csv(rows, environment))
    return path


# ---------------------------------------------------------------- 7. the 2019 claims


@cache
def load_claims() -> dict[str, Any]:
    """The study's claims and their source (`benchlib/data/claims_2019.yaml`)."""
    return yaml.safe_load(resources.files("benchlib").joinpath("data/claims_2019.yaml").read_text(encoding="utf-8"))


HOLDS, DOES_NOT_HOLD, INCONCLUSIVE, NOT_CHECKED = "holds", "does not hold", "inconclusive", "not checked"


@dataclass(frozen=True)
class ClaimValue:
    """This run's value of a claim's measure, its 95% interval and the disturbed cells it rests on; `value` None: not checked."""

    value: float | None
    detail: str
    low: float = math.nan
    high: float = math.nan
    disturbed: tuple[str, ...] = ()


def _from_estimate(estimate: RatioEstimate, disturbed: list[str], detail: str, scale: Callable[[float], float] = float) -> ClaimValue:
    """A claim value from a ratio estimate, mapped through `scale` (which may reverse the interval's order)."""
    low, high = sorted((scale(estimate.low), scale(estimate.high)))
    return ClaimValue(scale(estimate.ratio), detail, low, high, tuple(disturbed))


Metric = Callable[..., ClaimValue]


def _paired_or_why(group: pd.DataFrame, name: str) -> tuple[pd.DataFrame, str]:
    comparison = COMPARISONS[name]
    cells = paired_cells(group, comparison)
    for side in (comparison.base, comparison.other):
        if not side.select(group):
            return cells.iloc[:0], f"no {side.describe()} environment"
    if not cells["paired"].any():
        return cells.iloc[:0], f"no cell is ok in both {comparison.title.replace(' against ', ' and ')}"
    return cells, ""


def _tf_over_pt_mean(group: pd.DataFrame) -> ClaimValue:
    cells, why = _paired_or_why(group, "pytorch_vs_tensorflow")
    if why:
        return ClaimValue(None, why)
    paired = cells[cells["paired"]]
    pt, tf = paired["base_s"].mean(), paired["other_s"].mean()
    return _from_estimate(*paired_estimate(paired, RATIO_OF_MEANS), f"PyTorch {pt:.4g} s, TensorFlow {tf:.4g} s over {len(paired)} cells ok in both")


def _torchscript_change_pct(group: pd.DataFrame) -> ClaimValue:
    cells, why = _paired_or_why(group, "torchscript_vs_eager")
    if why:
        return ClaimValue(None, why)
    paired = cells[cells["paired"]]
    return _from_estimate(*paired_estimate(paired), f"over {len(paired)} cells ok in both", lambda ratio: (ratio - 1) * 100)


def _xla_speedup(group: pd.DataFrame) -> ClaimValue:
    cells, why = _paired_or_why(group, "xla_vs_function")
    if why:
        return ClaimValue(None, why)
    paired = cells[cells["paired"]]
    return _from_estimate(*paired_estimate(paired), f"over {len(paired)} cells ok in both", lambda ratio: 1 / ratio)


def _xla_largest_reduction_pct(group: pd.DataFrame) -> ClaimValue:
    cells, why = _paired_or_why(group, "xla_vs_function")
    if why:
        return ClaimValue(None, why)
    paired = cells[cells["paired"]]
    best = paired.loc[[paired["ratio"].idxmin()]]
    where = f"{best['model'].iloc[0]} {best['shape'].iloc[0]}"
    return _from_estimate(*paired_estimate(best), f"at {where}, the largest of {len(paired)} cells ok in both", lambda ratio: (1 - ratio) * 100)


def _distilled_ratio(group: pd.DataFrame, student: str, teacher: str) -> ClaimValue:
    missing = [m for m in (student, teacher) if m not in set(group["model"])]
    if missing:
        return ClaimValue(None, f"{' and '.join(missing)} not measured")
    cells = distilled_pairs(group, [(student, teacher)])
    paired = cells[cells["paired"]]
    if paired.empty:
        return ClaimValue(None, f"no cell is ok for both {student} and {teacher}")
    return _from_estimate(*distilled_estimate(paired), f"over {len(paired)} matching cells in {paired['environment'].nunique()} environments")


def _oom_earlier(group: pd.DataFrame) -> ClaimValue:
    cells, why = _paired_or_why(group, "pytorch_vs_tensorflow")
    if why:
        return ClaimValue(None, why)
    if not ((cells["base_status"] == status.OOM) | (cells["other_status"] == status.OOM)).any():
        return ClaimValue(None, "no cell ran out of memory in either framework")
    pt_only = int(((cells["base_status"] == status.OOM) & (cells["other_status"] == status.OK)).sum())
    tf_only = int(((cells["other_status"] == status.OOM) & (cells["base_status"] == status.OK)).sum())
    count = float(pt_only - tf_only)  # a count of statuses: no sampling interval
    return ClaimValue(count, f"{pt_only} cells out of memory in PyTorch only, {tf_only} in TensorFlow only", count, count)


METRICS: dict[str, Metric] = {
    "tf_over_pt_mean": _tf_over_pt_mean,
    "torchscript_change_pct": _torchscript_change_pct,
    "xla_speedup": _xla_speedup,
    "xla_largest_reduction_pct": _xla_largest_reduction_pct,
    "distilled_ratio": _distilled_ratio,
    "oom_earlier": _oom_earlier,
}
_OPERATORS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}


def passes(value: float, holds_if: str) -> bool:
    """Whether `value` passes a rule such as `>= 1.05`."""
    match = re.fullmatch(r"\s*(<=|>=|<|>)\s*(-?[0-9.]+)\s*", holds_if)
    if not match:
        raise ValueError(f"holds_if must be <=, >=, < or > and a number, not {holds_if!r}")
    return _OPERATORS[match.group(1)](value, float(match.group(2)))


def judge(value: ClaimValue, holds_if: str) -> tuple[str, str]:
    """`holds` or `does not hold` only when the whole 95% interval says so; else `inconclusive`, with the reason."""
    if value.value is None:
        return NOT_CHECKED, value.detail
    if value.disturbed:
        shown = "; ".join(value.disturbed[:3]) + ("; ..." if len(value.disturbed) > 3 else "")
        return INCONCLUSIVE, f"rests on {len(value.disturbed)} disturbed cells ({shown}); {value.detail}"
    low, high = (value.value, value.value) if math.isnan(value.low) else (value.low, value.high)
    if passes(low, holds_if) and passes(high, holds_if):
        return HOLDS, value.detail
    if not passes(low, holds_if) and not passes(high, holds_if):
        return DOES_NOT_HOLD, value.detail
    return INCONCLUSIVE, f"the 95% interval {low:.4g} to {high:.4g} straddles {holds_if.strip()}; {value.detail}"


CLAIMS_COLUMNS: tuple[str, ...] = ("claim", "device", "machine", "measure", "value_2019", "value_this_run", "ci95_low", "ci95_high", "holds_if", "holds", "detail")


def claims_table(rows: pd.DataFrame, claims: dict[str, Any] | None = None) -> pd.DataFrame:
    """7. Each 2019 claim checked on each device and machine it applies to: `holds`, `does not hold`, `inconclusive`
    or `not checked`; over the study's four ways only (`study_rows`), as the study measured them."""
    claims = claims or load_claims()
    groups = list(_groups(study_rows(rows)))
    records = []
    for claim in claims["claims"]:
        device = claim.get("device", "any")
        base = {key: claim.get(key) for key in ("claim", "measure", "value_2019", "holds_if")}
        targets = [(d, m, g) for d, m, g in groups if device in ("any", d)]
        if not targets:
            records.append({**base, "device": device, "machine": "", "value_this_run": math.nan, "holds": NOT_CHECKED,
                            "detail": f"no {device} environment in these runs" if device != "any" else "no results"})  # fmt: skip
        for d, machine, group in targets:
            value = METRICS[claim["metric"]](group, **claim.get("args", {}))
            holds, detail = judge(value, claim["holds_if"])
            records.append({
                **base, "device": d, "machine": machine, "value_this_run": math.nan if value.value is None else value.value,
                "ci95_low": value.low, "ci95_high": value.high, "holds": holds, "detail": detail,
            })  # fmt: skip
    table = pd.DataFrame(records, columns=list(CLAIMS_COLUMNS))
    table["value_2019"] = pd.to_numeric(table["value_2019"])
    return table


# ---------------------------------------------------------------- what cannot be compared


def missing_comparisons(rows: pd.DataFrame, table: str | None = None) -> list[str]:
    """One sentence per comparison these rows cannot give, and why.

    `table` keeps the sentences of one table: a key of COMPARISONS, `distilled_vs_teacher` or `devices`.
    """
    rows = prepare(rows)
    if rows.empty:
        return ["These runs have no results yet: every table is left out."]
    found = [("devices", f"There is no {device} environment in these runs.") for device in ("cpu", "cuda") if device not in set(rows["device_type"])]
    for device, machine, group in _groups(rows):
        where = f"on {device} ({machine})"
        for name, comparison in COMPARISONS.items():
            absent = [side.describe() for side in (comparison.base, comparison.other) if not side.select(group)]
            if absent:
                found.append((name, f"No {' or '.join(absent)} environment {where}: {comparison.title} is left out there."))
        for student, teacher in DISTILLED_PAIRS:
            absent = [m for m in (student, teacher) if m not in set(group["model"])]
            if absent:
                found.append(("distilled_vs_teacher", f"{' and '.join(absent)} not measured {where}: no {student} / {teacher} ratio there."))
    return [sentence for key, sentence in found if table in (None, key)]


# ---------------------------------------------------------------- files


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "table"


def save_table(table: pd.DataFrame, output_dir: str | os.PathLike[str], name: str) -> Path:
    """Write `table` as `tables/<name>.csv` under `output_dir`; returns its path."""
    path = Path(output_dir) / "tables" / f"{_slug(name)}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=not isinstance(table.index, pd.RangeIndex))
    return path
