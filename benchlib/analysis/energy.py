"""Energy per inference, from the machine's own counter (`measure.device_state`: NVML's on a GPU, RAPL's on a CPU):
each environment's joules per call (forward pass), per generated token or per served sample (load), over the cells or
tests measured in every environment compared, and the environment that uses the least beside the fastest.

Pure functions of results rows (`read_results`, with `machine` and `device_type` added by `runs.prepare`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from benchlib import status
from benchlib.analysis.speedups import times_text
from benchlib.store.results import has_text

ENERGY_COLUMNS: tuple[str, ...] = (
    "device", "machine", "model", "measured", "environment", "energy_j", "unit", "per_s", "cells", "source", "vs_fastest",
)  # fmt: skip
FORWARD_PASS = "the forward pass"


def _measured(rows: pd.DataFrame) -> pd.Series:
    """What each row measured: the forward pass, generation, or its load scenario."""
    scenario = rows["scenario"].astype(str) if "scenario" in rows else pd.Series("cell", index=rows.index)
    workload = rows["workload"].astype(str) if "workload" in rows else pd.Series("forward", index=rows.index)
    return pd.Series(np.where(scenario != "cell", scenario, np.where(workload == "generate", "generation", FORWARD_PASS)), index=rows.index)


def _rate(rows: pd.DataFrame) -> pd.Series:
    """Units of work per second of each row (calls, tokens, samples), where less energy per unit must not cost speed."""
    time_s = pd.to_numeric(rows.get("time_s", rows.get("median_s")), errors="coerce")
    tokens = pd.to_numeric(rows.get("tokens_per_s"), errors="coerce") if "tokens_per_s" in rows else pd.Series(np.nan, index=rows.index)
    samples = pd.to_numeric(rows.get("samples_per_s"), errors="coerce") if "samples_per_s" in rows else pd.Series(np.nan, index=rows.index)
    unit = rows["energy_unit"].astype(str)
    return pd.Series(np.where(unit == "token", tokens, np.where(unit == "sample", samples, 1 / time_s)), index=rows.index)


def energy_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per device, machine, model, what was measured and environment with an energy figure: the geometric mean of its
    joules per unit over the cells (shape, or scenario) that every such environment measured `ok`, the rate of work
    beside it, and how it compares with the fastest of them (`vs_fastest`: its energy over the fastest's). Empty where no
    row has an energy figure."""
    if rows.empty or "energy_j" not in rows:
        return pd.DataFrame(columns=list(ENERGY_COLUMNS))
    rows = rows.assign(energy_j=pd.to_numeric(rows["energy_j"], errors="coerce"))
    rows = rows[(rows["status"] == status.OK) & (rows["energy_j"] > 0) & has_text(rows["energy_unit"])]
    if rows.empty:
        return pd.DataFrame(columns=list(ENERGY_COLUMNS))
    rows = rows.assign(measured=_measured(rows), per_s=_rate(rows), shape=list(zip(rows["batch_size"], rows["sequence_length"])))
    lines = []
    for (device, machine, model, measured), group in rows.groupby(["device_type", "machine", "model", "measured"], sort=False):
        shared = set.intersection(*(set(cells["shape"]) for _, cells in group.groupby("environment")))
        common = group[group["shape"].isin(shared)]
        for environment, cells in common.groupby("environment", sort=False):
            lines.append({
                "device": device, "machine": machine, "model": model, "measured": measured, "environment": environment,
                "energy_j": float(stats.gmean(cells["energy_j"])), "unit": cells["energy_unit"].iloc[0],
                "per_s": float(stats.gmean(cells["per_s"].dropna())) if cells["per_s"].notna().any() else np.nan, "cells": len(cells),
                "source": cells["energy_source"].iloc[0],
            })  # fmt: skip
    table = pd.DataFrame(lines, columns=[c for c in ENERGY_COLUMNS if c != "vs_fastest"])
    timed = table[table["per_s"].notna()]
    fastest = timed.loc[timed.groupby(["device", "machine", "model", "measured"], sort=False)["per_s"].idxmax()]
    reference = fastest.set_index(["device", "machine", "model", "measured"])["energy_j"]
    keys = list(zip(table["device"], table["machine"], table["model"], table["measured"]))
    table["vs_fastest"] = [energy / reference.get(key, np.nan) for energy, key in zip(table["energy_j"], keys)]
    return table.reindex(columns=list(ENERGY_COLUMNS))


def energy_findings(table: pd.DataFrame) -> list[str]:
    """Per model and what was measured where several environments have an energy figure: the fastest and the most
    frugal (least joules per unit), where they differ, with what each costs."""
    sentences = []
    for (_, _, model, measured), group in table.groupby(["device", "machine", "model", "measured"], sort=False):
        if len(group) < 2 or group["per_s"].isna().all():
            continue
        fastest, frugal = group.loc[group["per_s"].idxmax()], group.loc[group["energy_j"].idxmin()]
        if fastest["environment"] == frugal["environment"]:
            continue
        unit = fastest["unit"]
        sentences.append(
            f"For {model} ({measured}), the fastest environment, {fastest['environment']}, uses {fastest['energy_j']:.3g} J per {unit}; "
            f"the most frugal, {frugal['environment']}, {frugal['energy_j']:.3g} J per {unit} ({times_text(frugal['vs_fastest'])} the "
            f"fastest's) at {times_text(frugal['per_s'] / fastest['per_s'])} its speed, over the {int(frugal['cells'])} cells both measured "
            f"({frugal['source'].upper()} counter)."
        )
    return sentences
