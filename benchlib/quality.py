"""How far a run's numbers can be trusted, for the summary: noisy cells, thread counts, peak memory.

Pure functions of results rows (`read_results`) and of the environment.json files of a run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from benchlib import stats, status
from benchlib.results import ENVIRONMENT_FILE
from benchlib.summary import machine_label

MIB = 2**20
CELL_COLUMNS = ["environment", "model", "batch_size", "sequence_length"]


def noisy_cells(rows: pd.DataFrame) -> pd.DataFrame:
    """The `ok` cells whose interquartile range exceeds 10% of their median, recomputed from `samples_s`.

    Columns: environment, model, batch_size, sequence_length, median_s, iqr_s, iqr_percent, samples.
    """
    measured = rows[rows["status"] == status.OK]
    records = []
    for cell, samples in zip(measured[CELL_COLUMNS].itertuples(index=False), measured["samples_s"]):
        if samples and stats.is_noisy(samples):
            median, spread = float(pd.Series(samples).median()), stats.iqr(samples)
            records.append({**cell._asdict(), "median_s": median, "iqr_s": spread, "iqr_percent": 100 * spread / median, "samples": len(samples)})
    return pd.DataFrame(records, columns=[*CELL_COLUMNS, "median_s", "iqr_s", "iqr_percent", "samples"])


def load_environments(run_dirs: Iterable[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """The environment.json of every `<run>/<env>/` folder, each with the folder's names added as `run` and `folder`."""
    environments = []
    for run_dir in run_dirs:
        for path in sorted(Path(run_dir).glob(f"*/{ENVIRONMENT_FILE}")):
            data = json.loads(path.read_text(encoding="utf-8"))
            environments.append({**data, "run": str(run_dir), "folder": path.parent.name})
    return environments


def thread_table(environments: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per environment: its machine, device and the thread counts read back when it ran."""
    records = []
    for env in environments:
        threads, parameters = env.get("threads", {}), env.get("parameters", {})
        records.append({
            "run": env.get("run"),
            "environment": parameters.get("environment", env.get("folder")),
            "machine": machine_label(env, parameters.get("device", "cpu")),
            "device": parameters.get("device", "cpu"),
            "num_threads": threads.get("num_threads"),
            "requested_threads": parameters.get("num_threads"),
            "OMP_NUM_THREADS": threads.get("OMP_NUM_THREADS"),
        })  # fmt: skip
    return pd.DataFrame(records, columns=["run", "environment", "machine", "device", "num_threads", "requested_threads", "OMP_NUM_THREADS"])


def thread_count_warnings(environments: list[dict[str, Any]]) -> list[str]:
    """One sentence per machine and device whose compared environments ran with different thread counts."""
    table = thread_table(environments)
    warnings = []
    for (machine, device), group in table.groupby(["machine", "device"], sort=True, dropna=False):
        if group["num_threads"].nunique(dropna=False) > 1:
            counts = ", ".join(f"{env} {count}" for env, count in zip(group["environment"], group["num_threads"]))
            warnings.append(
                f"On {machine} ({device}) the environments compared ran with different thread counts "
                f"({counts}); their times are not directly comparable."
            )
    return warnings


def peak_memory_table(rows: pd.DataFrame) -> pd.DataFrame:
    """(environment, model) × "BxS": peak memory of `ok` cells in MiB, the status of every other cell."""
    shapes = sorted(set(zip(rows["batch_size"], rows["sequence_length"])))
    cells = rows.assign(shape=[f"{b}x{s}" for b, s in zip(rows["batch_size"], rows["sequence_length"])])
    cells["cell"] = [
        f"{peak / MIB:.0f}" if state == status.OK and pd.notna(peak) else state
        for peak, state in zip(pd.to_numeric(cells["peak_memory_bytes"], errors="coerce"), cells["status"])
    ]
    table = cells.pivot_table(index=["environment", "model"], columns="shape", values="cell", aggfunc="last", sort=False)
    return table.reindex(columns=[f"{b}x{s}" for b, s in shapes]).fillna("")


def plot_peak_memory(rows: pd.DataFrame) -> plt.Figure:
    """Peak memory (MiB) against sequence length, one panel per model, one line per environment and batch size."""
    measured = rows[(rows["status"] == status.OK)].copy()
    measured["peak_mib"] = pd.to_numeric(measured["peak_memory_bytes"], errors="coerce") / MIB
    measured = measured.dropna(subset=["peak_mib"])
    if measured.empty:
        raise ValueError("no ok cell has a peak_memory_bytes value to plot")
    grid = sns.relplot(
        data=measured, x="sequence_length", y="peak_mib", hue="environment", style="batch_size",
        col="model", col_wrap=min(5, measured["model"].nunique()), kind="line", marker="o",
        height=2.6, facet_kws={"sharey": False},
    )  # fmt: skip
    grid.set(xscale="log", yscale="log")
    grid.set_axis_labels("sequence length (tokens)", "peak memory (MiB)")
    grid.set_titles("{col_name}")
    grid.figure.suptitle("Peak memory per cell (GPU: framework counter; CPU: process peak resident set)", y=1.02)
    return grid.figure
