"""How close to the machine's limit: each cell's achieved FLOP/s against the machine's measured roofs.

The roofline model (Williams, Waterman and Patterson, 2009): a cell of arithmetic intensity I
(FLOPs per byte moved) can run at most at min(peak FLOP/s, bandwidth × I). The FLOPs and bytes of
a cell come from `benchlib.measure.flops` (the analytic count, written to each `ok` row as `flops`, and
`cell_bytes`: the weights once plus the activations' estimate); the peak and
the bandwidth from `<run>/machine_limits.json` (`benchlib.measure.peak`), measured on the same
machine with the environments' thread count.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from benchlib import status
from benchlib.analysis.runs import prepare, shape_name
from benchlib.config.catalogue import get_model
from benchlib.measure.flops import cell_bytes
from benchlib.store.limits import read_limits

PEAK = "float32_flops_per_s"
BANDWIDTH = "bandwidth_bytes_per_s"
EFFICIENCY_COLUMNS = [
    "run", "device", "environment", "model", "batch_size", "sequence_length", "shape", "time_s", "flops", "cell_bytes",
    "intensity", "achieved_flops_per_s", "fraction_of_peak", "bound",
]  # fmt: skip


Limits = dict[tuple[str, str], dict[str, Any]]  # (run folder's name, device) -> machine_limits.json's entry


def load_limits(run_dirs: Iterable[str | os.PathLike[str]]) -> Limits:
    """The measured limits of every run folder and device, keyed as `runs.load_runs` names runs: (folder name, device)."""
    found: Limits = {}
    for run_dir in run_dirs:
        for device, limits in (read_limits(Path(run_dir)) or {}).items():
            found[(Path(run_dir).name, device)] = limits
    return found


def efficiency(rows: pd.DataFrame, limits: Limits) -> pd.DataFrame:
    """Per `ok` cell with a FLOP count, of a run with measured limits: intensity (FLOPs per byte), achieved FLOP/s
    (FLOPs / `time_s`), its fraction of the measured float32 peak, and the roof that bounds it (`compute` above
    the ridge point peak / bandwidth, `memory` below)."""
    rows = prepare(rows)
    rows["flops"] = pd.to_numeric(rows["flops"], errors="coerce") if "flops" in rows else np.nan
    keys = pd.Series(list(zip(rows["run"], rows["device"])), index=rows.index)
    rows = rows[(rows["status"] == status.OK) & rows["flops"].notna() & keys.isin(list(limits))]
    if rows.empty:
        return pd.DataFrame(columns=EFFICIENCY_COLUMNS)
    machine = [limits[key] for key in zip(rows["run"], rows["device"])]
    rows = rows.assign(cell_bytes=[
        cell_bytes(get_model(model), scale, b, s) for model, scale, b, s in zip(rows["model"], rows["model_scale"], rows["batch_size"], rows["sequence_length"])
    ])  # fmt: skip
    peak = pd.Series([m[PEAK] for m in machine], index=rows.index)
    bandwidth = pd.Series([m[BANDWIDTH] for m in machine], index=rows.index)
    table = rows.assign(
        shape=[shape_name(b, s) for b, s in zip(rows["batch_size"], rows["sequence_length"])],
        intensity=rows["flops"] / rows["cell_bytes"],
        achieved_flops_per_s=rows["flops"] / rows["time_s"],
    )
    table["fraction_of_peak"] = table["achieved_flops_per_s"] / peak
    table["bound"] = np.where(table["intensity"] >= peak / bandwidth, "compute", "memory")
    return table[EFFICIENCY_COLUMNS].reset_index(drop=True)


def efficiency_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Environment × model: the median fraction of the measured float32 peak over the model's cells (%)."""
    if cells.empty:
        return pd.DataFrame()
    table = cells.pivot_table(index="environment", columns="model", values="fraction_of_peak", aggfunc="median", sort=False) * 100
    table.columns.name = None
    return table.round(1).reset_index()


def efficiency_sentences(cells: pd.DataFrame) -> list[str]:
    """One sentence per environment: where it comes closest to the peak, and where it stays farthest."""
    sentences = []
    for environment, group in cells.groupby("environment", sort=False):
        best, worst = group.loc[group["fraction_of_peak"].idxmax()], group.loc[group["fraction_of_peak"].idxmin()]
        memory = (group["bound"] == "memory").sum()
        bound = f"; {memory} of its {len(group)} cells lie below the ridge point, where memory traffic, not arithmetic, sets the limit" if memory else ""
        sentences.append(
            f"{environment} reaches {100 * best['fraction_of_peak']:.0f}% of the measured float32 peak at {best['model']} {best['shape']}, "
            f"{100 * worst['fraction_of_peak']:.1f}% at {worst['model']} {worst['shape']}{bound}."
        )
    return sentences


def plot_roofline(cells: pd.DataFrame, limits: Limits) -> Figure:
    """Achieved FLOP/s against arithmetic intensity, one point per cell and environment, under the measured roofs
    (one panel per run and device)."""
    if cells.empty:
        raise ValueError("cells: no ok cell with a FLOP count and measured limits to plot")
    panels = list(dict.fromkeys(zip(cells["run"], cells["device"])))
    figure, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 5), squeeze=False, layout="constrained")
    for ax, (run, device) in zip(axes[0], panels):
        group, machine = cells[(cells["run"] == run) & (cells["device"] == device)], limits[(run, device)]
        peak, bandwidth = machine[PEAK], machine[BANDWIDTH]
        low, high = group["intensity"].min() / 2, max(group["intensity"].max() * 2, 2 * peak / bandwidth)
        intensity = np.geomspace(low, high, 200)
        ax.plot(intensity, np.minimum(peak, bandwidth * intensity), color="0.2", linewidth=1.5)
        ax.annotate(f"float32 peak {peak / 1e9:.0f} GFLOP/s", (high, peak), ha="right", va="bottom", fontsize=8)
        ax.annotate(f"bandwidth {bandwidth / 1e9:.1f} GB/s", (low, bandwidth * low), ha="left", va="bottom", fontsize=8, rotation=30)
        sns.scatterplot(data=group, x="intensity", y="achieved_flops_per_s", hue="environment", style="model", ax=ax, s=40)
        ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOPs per byte)", ylabel="achieved FLOP/s")
        ax.set_title(f"{run} ({device}): {machine.get('cpu', '')}, {machine.get('threads')} threads", fontsize=10)
        ax.legend(fontsize=7, loc="lower right", ncol=2)
    figure.suptitle("Roofline: each cell's achieved FLOP/s under the machine's measured compute and bandwidth roofs")
    plt.close(figure)
    return figure
