"""The summary's tables: pure pandas functions over the rows of one or more runs (`runs.load_runs`).

Environments are compared within one device type (cpu, cuda) on one machine. A cell enters a comparison
only when it is `ok` in every environment compared; every other status is counted as excluded, never read
as zero. Every comparison carries a 95% interval and a verdict (`benchlib.analysis.significance`), and
lists the disturbed cells it rests on.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from benchlib import status
from benchlib.analysis.comparisons import (
    BASELINE,
    BASELINE_VERDICT,
    COMPARISONS,
    DISTILLED_PAIRS,
    INTERVAL_COLUMNS,
    RATIO,
    Comparison,
    distilled_estimate,
    distilled_pairs,
    disturbed_labels,
    geometric_mean,
    get_comparison,
    interval_columns,
    paired_cells,
    paired_estimate,
    ratio_estimate,
    study_rows,
)  # fmt: skip
from benchlib.analysis.runs import NOT_MEASURED, groups, prepare, shape_name
from benchlib.analysis.significance import RATIO_OF_MEANS
from benchlib.store.layout import file_stem, table_path
from benchlib.store.results import CELL_KEY

ALL_MODELS = "all models"
AVERAGES_COLUMNS: tuple[str, ...] = (
    "device", "machine", "environment", "framework", "mode", "mean_s", "cells_used", "cells_excluded", "naive_mean_s",
    "vs_baseline", "ci95_low", "ci95_high", "verdict", "disturbed_cells",
)  # fmt: skip


def _statuses(group: pd.DataFrame) -> pd.DataFrame:
    """Cell × environment: the status of each cell in each environment, `not measured` where it has no row."""
    table = group.pivot_table(index=list(CELL_KEY), columns="environment", values="status", aggfunc="last", sort=False)
    environments = list(dict.fromkeys(group["environment"]))
    return table.reindex(columns=environments).fillna(NOT_MEASURED)


# ---------------------------------------------------------------- what was measured, 1. framework averages


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
    for device, machine, group in groups(rows):
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
                record.update(vs_baseline=estimate.ratio, **interval_columns(estimate, disturbed_labels(common, base, other, baseline, environment)))
            elif environment == baseline:
                record.update(vs_baseline=1.0, verdict=BASELINE_VERDICT)
            records.append(record)
    return pd.DataFrame(records, columns=list(AVERAGES_COLUMNS))


def excluded_cells(rows: pd.DataFrame) -> pd.DataFrame:
    """The cells left out of the averages, with each non-`ok` status and its reason, one line per environment."""
    rows = study_rows(rows)
    records = []
    for device, machine, group in groups(rows):
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


# ---------------------------------------------------------------- what cannot be compared


def missing_comparisons(rows: pd.DataFrame, table: str | None = None) -> list[str]:
    """One sentence per comparison these rows cannot give, and why.

    `table` keeps the sentences of one table: a key of COMPARISONS, `distilled_vs_teacher` or `devices`.
    """
    rows = prepare(rows)
    if rows.empty:
        return ["These runs have no results yet: every table is left out."]
    found = [("devices", f"There is no {device} environment in these runs.") for device in ("cpu", "cuda") if device not in set(rows["device_type"])]
    for device, machine, group in groups(rows):
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


def save_table(table: pd.DataFrame, output_dir: str | os.PathLike[str], name: str) -> Path:
    """Write `table` as the summary's table `name` (`store.layout.table_path`) under `output_dir`; returns its path."""
    path = table_path(output_dir, file_stem(name))
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=not isinstance(table.index, pd.RangeIndex))
    return path
