"""How close to the machine's limit: each cell's achieved FLOP/s against the machine's measured roofs.

The roofline model (Williams, Waterman and Patterson, 2009): a cell of arithmetic intensity I
(FLOPs per byte moved) can run at most at min(peak FLOP/s, bandwidth × I). The FLOPs and bytes of
a cell come from `benchlib.measure.flops` (the analytic count, written to each `ok` row as `flops`, and
`cell_bytes`: the weights once plus the activations' estimate, at the cell's precision's bytes per element); the peaks
(float32, TF32 on a GPU, bfloat16, float16)
and the bandwidth from `<run>/machine_limits.json` (`benchlib.measure.peak`), measured on the same
machine with the environments' thread count. A cell is set against its own precision's peak, never
another's, and a share above 1 is never shown. On a GPU, a cell whose call kept the GPU busy less than
half its time (`launch_bound`, from the profiler) is bound by the Python that launches its kernels.
"""

from __future__ import annotations

import os
import re
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
from benchlib.analysis.speedups import interval_text, times_text
from benchlib.config.catalogue import get_model
from benchlib.measure.flops import cell_bytes
from benchlib.store.limits import read_limits
from benchlib.store.results import is_true

FLOAT32 = "float32"
TF32 = "tf32"
# precision -> machine_limits.json's key
PEAKS = {FLOAT32: "float32_flops_per_s", TF32: "tf32_flops_per_s", "bfloat16": "bfloat16_flops_per_s", "float16": "float16_flops_per_s"}
BYTES_PER_ELEMENT = {"bfloat16": 2, "float16": 2}  # weights and activations of a cell's precision (else 4: float32's)
# float32 cells that run on TF32 units: PyTorch's `tf32: true`, and TensorRT's engines (TF32 by its default)
TF32_OPTIONS = re.compile(r'"tf32":\s*true|"gpu_provider":\s*"tensorrt"')
BANDWIDTH = "bandwidth_bytes_per_s"
NONE_MEASURED = "none measured for "  # `peak` of a cell whose precision has no measured peak: "none measured for int8"
EXCEEDED = " (exceeded)"  # `peak` of a cell that ran above its precision's peak: "float32 (exceeded)"
LAUNCH = "launch"  # `bound` of a launch-bound GPU cell
OVERHEAD_MODES = ("torchscript", "compile")  # PyTorch modes that take Python's kernel launches out of the call
OVERHEAD_OPTIONS = re.compile(r"reduce-overhead|(?<!no-)cuda_?graphs?", re.IGNORECASE)  # options that capture CUDA graphs
EFFICIENCY_COLUMNS = [
    "run", "device", "environment", "framework", "mode", "precision", "options", "model", "batch_size", "sequence_length",
    "shape", "time_s", "flops", "cell_bytes", "intensity", "achieved_flops_per_s", "peak", "fraction_of_peak", "gpu_busy", "bound",
]  # fmt: skip


Limits = dict[tuple[str, str], dict[str, Any]]  # (run folder's name, device) -> machine_limits.json's entry


def load_limits(run_dirs: Iterable[str | os.PathLike[str]]) -> Limits:
    """The measured limits of every run folder and device, keyed as `runs.load_runs` names runs: (folder name, device)."""
    found: Limits = {}
    for run_dir in run_dirs:
        for device, limits in (read_limits(Path(run_dir)) or {}).items():
            found[(Path(run_dir).name, device)] = limits
    return found


def peak_precision(precision: str, options: str) -> str:
    """The precision whose peak a cell is set against: TF32's for a float32 cell whose runtime runs it on TF32 units."""
    return TF32 if precision == FLOAT32 and TF32_OPTIONS.search(options or "") else precision


def precision_peak(machine: dict[str, Any], precision: str) -> tuple[str, float]:
    """The peak a cell of `precision` is set against on `machine`: (its name, FLOP/s), or (why none, NaN)."""
    value = machine.get(PEAKS.get(precision, ""))
    return (precision, float(value)) if value else (f"{NONE_MEASURED}{precision}", np.nan)


def efficiency(rows: pd.DataFrame, limits: Limits) -> pd.DataFrame:
    """Per `ok` cell with a FLOP count, of a run with measured limits: intensity (FLOPs per byte), achieved FLOP/s
    (FLOPs / `time_s`), the peak of its own precision (`peak`: its name) and its fraction of it (NaN where none is
    measured, or where the cell ran above it), the GPU's busy share (`gpu_busy`, where profiled), and the roof that
    bounds it: `launch` where the rows say `launch_bound`, else `compute` above its peak's ridge point (peak /
    bandwidth), `memory` below (blank without a peak)."""
    rows = prepare(rows)
    rows["flops"] = pd.to_numeric(rows["flops"], errors="coerce") if "flops" in rows else np.nan
    keys = pd.Series(list(zip(rows["run"], rows["device"])), index=rows.index)
    rows = rows[(rows["status"] == status.OK) & rows["flops"].notna() & keys.isin(list(limits))]
    if rows.empty:
        return pd.DataFrame(columns=EFFICIENCY_COLUMNS)
    machine = [limits[key] for key in zip(rows["run"], rows["device"])]
    rows = rows.assign(cell_bytes=[
        cell_bytes(get_model(model), scale, b, s, BYTES_PER_ELEMENT.get(precision, 4))
        for model, scale, b, s, precision in zip(rows["model"], rows["model_scale"], rows["batch_size"], rows["sequence_length"], rows["precision"])
    ])  # fmt: skip
    peaks = [peak_precision(precision, options) for precision, options in zip(rows["precision"], rows["options"])]
    names, values = zip(*(precision_peak(m, precision) for m, precision in zip(machine, peaks)))
    peak = pd.Series(values, index=rows.index)
    bandwidth = pd.Series([m[BANDWIDTH] for m in machine], index=rows.index)
    table = rows.assign(
        shape=[shape_name(b, s) for b, s in zip(rows["batch_size"], rows["sequence_length"])],
        intensity=rows["flops"] / rows["cell_bytes"],
        achieved_flops_per_s=rows["flops"] / rows["time_s"],
        gpu_busy=pd.to_numeric(rows["gpu_busy"], errors="coerce") if "gpu_busy" in rows else np.nan,
    )
    fraction = table["achieved_flops_per_s"] / peak
    exceeded = fraction > 1
    table["peak"] = [name + EXCEEDED if above else name for name, above in zip(names, exceeded)]
    table["fraction_of_peak"] = fraction.mask(exceeded)
    roof = np.where(table["intensity"] >= peak / bandwidth, "compute", "memory")
    launch = is_true(rows["launch_bound"]) if "launch_bound" in rows else False
    table["bound"] = np.where(launch, LAUNCH, np.where(peak.notna(), roof, None))
    return table[EFFICIENCY_COLUMNS].reset_index(drop=True)


def efficiency_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Environment × model: the median fraction of each cell's own precision's measured peak over the model's cells (%);
    blank where no cell has one (no peak measured for its precision, or every cell above it)."""
    if cells.empty:
        return pd.DataFrame()
    table = cells.pivot_table(index="environment", columns="model", values="fraction_of_peak", aggfunc="median", sort=False, dropna=False) * 100
    table.columns.name = None
    return table.round(1).reset_index()


def busy_text(cells: pd.DataFrame) -> str:
    """` (the GPU busy X% of the call at the median)` over `cells`, or "" where none was profiled."""
    busy = cells["gpu_busy"].median()
    return f" (the GPU busy {busy:.0%} of the call at the median)" if pd.notna(busy) else ""


def efficiency_sentences(cells: pd.DataFrame) -> list[str]:
    """Per environment: where it comes closest to its precision's peak and where it stays farthest; which of its cells
    ran above that peak (no share shown), have no peak of their precision, or are launch-bound."""
    sentences = []
    for environment, group in cells.groupby("environment", sort=False):
        shared, cells_of = group[group["fraction_of_peak"].notna()], f"of its {len(group)} cells"
        if not shared.empty:
            best, worst = shared.loc[shared["fraction_of_peak"].idxmax()], shared.loc[shared["fraction_of_peak"].idxmin()]
            memory = (group["bound"] == "memory").sum()
            bound = f"; {memory} {cells_of} lie below the ridge point, where memory traffic, not arithmetic, sets the limit" if memory else ""
            farthest = f", {100 * worst['fraction_of_peak']:.1f}% at {worst['model']} {worst['shape']}" if len(shared) > 1 else ""
            sentences.append(
                f"{environment} reaches {100 * best['fraction_of_peak']:.0f}% of the measured {best['peak']} peak at {best['model']} {best['shape']}{farthest}{bound}."
            )
        above = group[group["peak"].str.endswith(EXCEEDED)]
        if not above.empty:
            sentences.append(
                f"{environment}: {len(above)} {cells_of} ran above its precision's measured peak ({above['peak'].iloc[0].removesuffix(EXCEEDED)}), "
                f"so no share is shown for them: the peak is not the one {'this cell' if len(above) == 1 else 'these cells'} ran at (e.g. int8 or TF32 matrix units)."
            )
        unmeasured = group[group["peak"].str.startswith(NONE_MEASURED)]
        if not unmeasured.empty:
            sentences.append(
                f"{environment}: no share of a peak for {len(unmeasured)} {cells_of}: no {unmeasured['precision'].iloc[0]} peak is measured "
                "on this machine, and another precision's would mislead."
            )
        launch = group[group["bound"] == LAUNCH]
        if not launch.empty:
            sentences.append(
                f"{environment}: {len(launch)} {cells_of} are launch-bound{busy_text(launch)}: the GPU waits for the Python that launches "
                "its kernels, so its share of the peak says little of the GPU; CUDA graphs (`torch.compile` mode reduce-overhead), "
                "TorchScript or compilation remove that overhead."
            )
    return sentences


def overhead_findings(cells: pd.DataFrame, speedups: pd.DataFrame) -> list[str]:
    """Per model and device whose eager PyTorch cells are launch-bound: the environments of the run whose mode removes
    launch overhead (TorchScript, torch.compile, options capturing CUDA graphs) with their measured speed-up (`speedups`:
    `speedups.speedups(rows, per_model=True)`); [] where none was measured."""
    eager = cells[(cells["framework"] == "pytorch") & (cells["mode"] == "eager")]
    launch = eager[eager["bound"] == LAUNCH]
    if launch.empty or speedups.empty:
        return []
    options = cells.drop_duplicates("environment").set_index("environment")["options"].fillna("").astype(str)
    removes = speedups["mode"].isin(OVERHEAD_MODES) | speedups["environment"].map(options).fillna("").str.contains(OVERHEAD_OPTIONS)
    measured = speedups[removes & speedups["speedup"].notna()]
    sentences = []
    for (device, model), group in launch.groupby(["device", "model"], sort=False):
        found = measured[(measured["device"] == device) & (measured["model"] == model)]
        if found.empty:
            continue
        of = len(eager[(eager["device"] == device) & (eager["model"] == model)])
        named = "; ".join(
            f"{row['environment']} ({row['mode']}) runs {times_text(row['speedup'])} as fast as {row['baseline']} ({interval_text(row)})" for _, row in found.iterrows()
        )  # fmt: skip
        sentences.append(
            f"{model} on {device}: eager PyTorch is launch-bound in {len(group)} of its {of} cells{busy_text(group)}, the GPU waiting for "
            f"Python to launch its kernels; what removes that overhead, as this run measured it: {named}."
        )
    return sentences


def plot_roofline(cells: pd.DataFrame, limits: Limits) -> Figure:
    """Achieved FLOP/s against arithmetic intensity, one point per cell and environment, under the measured roofs
    (one panel per run and device): float32's solid, each other measured precision's peak dashed and labelled."""
    if cells.empty:
        raise ValueError("cells: no ok cell with a FLOP count and measured limits to plot")
    panels = list(dict.fromkeys(zip(cells["run"], cells["device"])))
    figure, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 5), squeeze=False, layout="constrained")
    for ax, (run, device) in zip(axes[0], panels):
        group, machine = cells[(cells["run"] == run) & (cells["device"] == device)], limits[(run, device)]
        peaks = {precision: machine[key] for precision, key in PEAKS.items() if machine.get(key)}
        bandwidth = machine[BANDWIDTH]
        low, high = group["intensity"].min() / 2, max(group["intensity"].max() * 2, 2 * max(peaks.values()) / bandwidth)
        intensity = np.geomspace(low, high, 200)
        for precision, peak in peaks.items():  # float32's solid, every other precision's dashed: each precision's cells under their own
            ax.plot(intensity, np.minimum(peak, bandwidth * intensity), color="0.2" if precision == FLOAT32 else "0.5", linewidth=1.5, linestyle="-" if precision == FLOAT32 else "--")
            ax.annotate(f"{precision} peak {peak / 1e9:.0f} GFLOP/s", (high, peak), ha="right", va="bottom", fontsize=8)
        ax.annotate(f"bandwidth {bandwidth / 1e9:.1f} GB/s", (low, bandwidth * low), ha="left", va="bottom", fontsize=8, rotation=30)
        sns.scatterplot(data=group, x="intensity", y="achieved_flops_per_s", hue="environment", style="model", ax=ax, s=40)
        ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOPs per byte)", ylabel="achieved FLOP/s")
        ax.set_title(f"{run} ({device}): {machine.get('cpu', '')}, {machine.get('threads')} threads", fontsize=10)
        ax.legend(fontsize=7, loc="lower right", ncol=2)
    figure.suptitle("Roofline: each cell's achieved FLOP/s under the machine's measured compute and bandwidth roofs")
    plt.close(figure)
    return figure
