"""The summary's figures (seaborn). Each function returns a matplotlib Figure, closed in pyplot: `save_figure` writes it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:  # outside a notebook: draw to files only
    matplotlib.use("Agg")

import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.colors import ListedColormap, LogNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, NullLocator, PercentFormatter, ScalarFormatter  # noqa: E402

from benchlib import status  # noqa: E402
from benchlib.analysis import quality, significance  # noqa: E402
from benchlib.analysis.comparisons import paired_cells  # noqa: E402
from benchlib.analysis.runs import GENERATE, NOT_MEASURED, by_workload, prepare, shape_name  # noqa: E402
from benchlib.analysis.significance import FASTER, SLOWER  # noqa: E402
from benchlib.store.layout import figure_path  # noqa: E402
from benchlib.workloads.quality import KEEPS, UNDECIDED  # noqa: E402
from benchlib.store.results import judged_percentile  # noqa: E402


def _against_length(ok: pd.DataFrame, y: str, labels: tuple[str, str], title: str, style: str | None = None) -> Figure:
    """`y` against `sequence_length` in `ok` rows: one panel per model and batch size, one line per environment
    (and per `style`), log scales, the x axis ticked at the lengths measured, `labels` on the axes."""
    grid = sns.relplot(
        data=ok, x="sequence_length", y=y, hue="environment", style=style, row="model", col="batch_size",
        kind="line", marker="o", height=2.2, aspect=1.5, facet_kws={"sharey": "row", "margin_titles": True},
    )  # fmt: skip
    lengths = sorted(ok["sequence_length"].unique())
    for ax in grid.axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(FixedLocator(lengths))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_locator(NullLocator())
    grid.set_axis_labels(*labels)
    grid.set_titles(row_template="{row_name}", col_template="batch size {col_name}")
    sns.move_legend(grid, "lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(4, ok["environment"].nunique()), frameon=False)
    grid.figure.suptitle(title, y=1.04)
    plt.close(grid.figure)
    return grid.figure


def time_vs_sequence(rows: pd.DataFrame) -> Figure:
    """Time per call (`time_s`: the median over rounds of each round's median) against sequence length:
    one panel per model and batch size, one line per environment, log scales."""
    ok = prepare(rows)
    ok = ok[ok["status"] == status.OK]
    if ok.empty:
        raise ValueError("rows: no ok cell to plot")
    return _against_length(ok, "time_s", ("sequence length (tokens)", "time per call (s)"), "Inference time against sequence length (cells with status ok)")


def tpot_vs_prompt_length(rows: pd.DataFrame) -> Figure:
    """A generate cell's time per output token after the first (`tpot_s`, median over its steps) against prompt length:
    one panel per model and batch size, one line per environment (a style per count of new tokens where there are
    several), log scales. Forward rows are left out."""
    ok = prepare(by_workload(rows, GENERATE))
    ok["tpot_s"] = pd.to_numeric(ok["tpot_s"], errors="coerce") if "tpot_s" in ok else np.nan
    ok = ok[(ok["status"] == status.OK) & ok["tpot_s"].notna()]
    if ok.empty:
        raise ValueError("rows: no ok generate cell with a time per output token to plot")
    return _against_length(
        ok, "tpot_s", ("prompt length (tokens)", "time per output token (s)"),
        "Time per output token after the first against prompt length (generate cells with status ok)",
        style="new_tokens" if ok["new_tokens"].nunique() > 1 else None,
    )  # fmt: skip


def ratio_heatmap(rows: pd.DataFrame) -> Figure:
    """TensorFlow / PyTorch time per model and shape; cells without a ratio show their statuses."""
    cells = paired_cells(rows, "pytorch_vs_tensorflow")
    if not cells["paired"].any():
        raise ValueError("rows: no cell is ok in both eager PyTorch and TensorFlow (tf.function)")
    keys = ["device", "machine", "base_environment", "other_environment"]
    pairs = list(cells.groupby(keys, sort=False))
    ratios = cells.loc[cells["paired"], "ratio"]
    span = max(float(np.abs(np.log(ratios)).max()), np.log(1.5))
    shapes = [shape_name(b, s) for b, s in sorted(set(zip(cells["batch_size"], cells["sequence_length"])))]
    models = list(dict.fromkeys(cells["model"]))
    figure = plt.figure(figsize=(2.5 + 0.9 * len(shapes), (1.5 + 0.45 * len(models)) * len(pairs)), layout="constrained")
    for ax, ((device, machine, pt_env, tf_env), pair) in zip(figure.subplots(len(pairs), 1, squeeze=False)[:, 0], pairs):
        labels = [f"{r:.2f}" if ok else f"{b}/{o}" for r, ok, b, o in zip(pair["ratio"], pair["paired"], pair["base_status"], pair["other_status"])]
        table = pair.assign(label=labels).pivot(index="model", columns="shape", values=["ratio", "label"])
        table = table.reindex(index=[m for m in models if m in set(pair["model"])], columns=shapes, level=1)
        sns.heatmap(
            table["ratio"].astype(float), annot=table["label"].to_numpy(), fmt="", ax=ax,
            cmap="RdBu_r", norm=LogNorm(np.exp(-span), np.exp(span)), annot_kws={"fontsize": 7},
            cbar_kws={"label": "TF time / PT time (ratio, log scale)"},
        )  # fmt: skip
        ax.set_facecolor("0.9")
        for (i, j), label in np.ndenumerate(table["label"].to_numpy()):
            if pd.isna(table["ratio"].iloc[i, j]):  # seaborn leaves masked cells blank
                ax.text(j + 0.5, i + 0.5, label if isinstance(label, str) else NOT_MEASURED, ha="center", va="center", fontsize=6, color="0.3")
        colorbar = ax.collections[0].colorbar
        colorbar.set_ticks([t for t in (0.125, 0.25, 0.5, 1, 2, 4, 8) if np.exp(-span) <= t <= np.exp(span)])
        colorbar.set_ticklabels([f"{t:g}" for t in colorbar.get_ticks()])
        colorbar.ax.yaxis.set_minor_locator(NullLocator())
        ax.set_title(f"TensorFlow ({tf_env}) / PyTorch ({pt_env}) time on {device} ({machine})\nabove 1: PyTorch faster; PT/TF status where no ratio")
        ax.set_xlabel("shape (batch size x sequence length)")
        ax.set_ylabel("model")
    plt.close(figure)
    return figure


def averages_bars(averages: pd.DataFrame) -> Figure:
    """The framework averages (from `tables.framework_averages`) as bars, the study's beside the naive, with the cells used."""
    if averages.empty:
        raise ValueError("averages: no environment to plot")
    kinds = {"mean_s": "cells ok in every environment (study)", "naive_mean_s": "each environment's own ok cells (naive)"}
    groups = list(averages.groupby(["device", "machine"], sort=False))
    figure = plt.figure(figsize=(3 + 1.6 * averages["environment"].nunique(), 4.2 * len(groups)), layout="constrained")
    for ax, ((device, machine), group) in zip(figure.subplots(len(groups), 1, squeeze=False)[:, 0], groups):
        long = group.melt(id_vars=["environment"], value_vars=list(kinds), var_name="average", value_name="seconds")
        long["average"] = long["average"].map(kinds)
        order = list(group["environment"])
        sns.barplot(data=long, x="environment", y="seconds", hue="average", hue_order=list(kinds.values()), order=order, ax=ax)
        used = group.set_index("environment")["cells_used"]
        ax.bar_label(ax.containers[0], labels=[f"{used[e]} cells" for e in order], fontsize=8)
        excluded = int(group["cells_excluded"].iloc[0])
        ax.set_title(f"Average inference time per call on {device} ({machine})\n{excluded} cells excluded: not ok in some environment")
        ax.set_xlabel("environment")
        ax.set_ylabel("mean time per call (s)")
        ax.legend(title="averaged over", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    plt.close(figure)
    return figure


def _margin_label(margin: float, verdict: str) -> str:
    """A fastest cell's text: its margin over the runner-up, in parentheses where it is not clear; `only` without a runner-up."""
    if pd.isna(margin):
        return "only"
    return f"{margin:.2f}x" if verdict == significance.FASTER else f"({margin:.2f}x)"


def fastest_heatmap(fastest: pd.DataFrame) -> Figure:
    """The fastest environment per model and shape (from `speedups.fastest`), one panel per device and machine:
    colour = the environment, text = its margin over the runner-up (in parentheses where the margin is not clear)."""
    won = fastest[fastest["fastest"].fillna("") != ""]
    if won.empty:
        raise ValueError("fastest: no cell is ok in any environment")
    winners = list(dict.fromkeys(won["fastest"]))
    palette = sns.color_palette("tab10" if len(winners) <= 10 else "husl", len(winners))
    shapes = [shape_name(b, s) for b, s in sorted(set(zip(fastest["batch_size"], fastest["sequence_length"])))]
    models = list(dict.fromkeys(fastest["model"]))
    groups = list(fastest.groupby(["device", "machine"], sort=False))
    figure = plt.figure(figsize=(4.5 + 0.9 * len(shapes), (1.5 + 0.45 * len(models)) * len(groups)), layout="constrained")
    for ax, ((device, machine), group) in zip(figure.subplots(len(groups), 1, squeeze=False)[:, 0], groups):
        cells = group.assign(
            shape=[shape_name(b, s) for b, s in zip(group["batch_size"], group["sequence_length"])],
            code=group["fastest"].map({env: i for i, env in enumerate(winners)}),
            label=[_margin_label(m, v) if env else "none ok" for m, v, env in zip(group["margin"], group["verdict"], group["fastest"].fillna(""))],
        )  # fmt: skip
        table = cells.pivot(index="model", columns="shape", values=["code", "label"])
        table = table.reindex(index=[m for m in models if m in set(cells["model"])], columns=shapes, level=1)
        sns.heatmap(
            table["code"].astype(float), annot=table["label"].to_numpy(), fmt="", ax=ax, cbar=False, linewidths=0.5,
            cmap=ListedColormap(palette), vmin=-0.5, vmax=len(winners) - 0.5, annot_kws={"fontsize": 7},
        )  # fmt: skip
        ax.set_facecolor("0.9")
        for (i, j), label in np.ndenumerate(table["label"].to_numpy()):
            if pd.isna(table["code"].iloc[i, j]):  # seaborn leaves masked cells blank
                ax.text(j + 0.5, i + 0.5, label if isinstance(label, str) else NOT_MEASURED, ha="center", va="center", fontsize=6, color="0.3")
        present = [env for env in winners if env in set(cells["fastest"])]
        ax.legend(handles=[Patch(color=palette[winners.index(env)], label=env) for env in present], title="fastest environment",
                  fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # fmt: skip
        ax.set_title(f"The fastest environment per model and shape on {device} ({machine})\ntext: its margin over the runner-up (time ratio); in parentheses: not clear")
        ax.set_xlabel("shape (batch size x sequence length)")
        ax.set_ylabel("model")
    plt.close(figure)
    return figure


def save_figure_file(figure: Figure, path: Path) -> Path:
    """Write `figure` as the PNG file `path` (its folder made), as every figure of the kit is written; returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight")
    return path


def save_figure(figure: Figure, output_dir: str | os.PathLike[str], name: str) -> Path:
    """Write `figure` as the summary's figure `name` (`store.layout.figure_path`) under `output_dir`; returns its path."""
    return save_figure_file(figure, figure_path(output_dir, name))


def change_plot(environments: pd.DataFrame, threshold: float) -> Figure:
    """Each compared environment's geometric mean change with its 95% interval, the ±`threshold` band shaded."""
    shown = environments.dropna(subset=["geomean_change"]).reset_index(drop=True)
    figure = Figure(figsize=(7, 1.5 + 0.4 * len(shown)), layout="constrained")
    ax = figure.subplots()
    ax.axvspan(-threshold * 100, threshold * 100, color="0.92", label=f"within ±{threshold:.0%}")
    ax.axvline(0, color="0.5", linewidth=0.8)
    colors = {SLOWER: "tab:red", FASTER: "tab:green"}
    for verdict, group in shown.groupby("verdict", sort=False):
        errors = [(group["geomean_change"] - group["ci95_low"]) * 100, (group["ci95_high"] - group["geomean_change"]) * 100]
        ax.errorbar(group["geomean_change"] * 100, group.index, xerr=errors, fmt="o", capsize=4, color=colors.get(verdict, "0.3"), label=verdict)
    ax.set_yticks(range(len(shown)), shown["environment"])
    ax.set_ylim(max(len(shown), 1) - 0.5, -0.5)  # top to bottom in table order
    ax.xaxis.set_major_formatter(PercentFormatter())
    ax.set_xlabel("change in time per call, B / A - 1 (geometric mean over cells, 95% interval)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return figure


def server_trials(trials: pd.DataFrame, latency_bound_ms: float | None = None) -> Figure:
    """Every server trial: latency at the percentile it was judged at (the 99th unless `latency_percentile` said otherwise)
    against the rate LoadGen achieved (completed samples per second), one panel per model, one line per environment
    through its trials in the order of the rates asked for, LoadGen's verdict as the marker; the latency bound drawn
    where given."""
    if trials.empty:
        raise ValueError("trials: no server trial to plot")
    percentiles = [judged_percentile(row) for _, row in trials.iterrows()]
    judged = "/".join(f"p{p}" for p in sorted(set(percentiles)))
    data = trials.assign(
        latency_ms=[pd.to_numeric(row[f"latency_p{p}_s"], errors="coerce") * 1e3 for p, (_, row) in zip(percentiles, trials.iterrows())],
        achieved_qps=pd.to_numeric(trials["samples_per_s"], errors="coerce"), target_qps=pd.to_numeric(trials["target_qps"], errors="coerce"),
        verdict=["VALID" if str(valid) == "True" else "INVALID" for valid in trials["valid"]],
    ).sort_values("target_qps")
    grid = sns.relplot(  # in the order of the rates asked for: past what it sustains, a system completes fewer
        data=data, x="achieved_qps", y="latency_ms", hue="environment", col="model", kind="line", sort=False, height=3, aspect=1.3,
        facet_kws={"sharey": False},
    )  # fmt: skip
    markers = {"VALID": "o", "INVALID": "X"}
    grid.map_dataframe(sns.scatterplot, x="achieved_qps", y="latency_ms", hue="environment", style="verdict", markers=markers, s=60, legend=False)
    for ax in grid.axes.flat:
        ax.set_yscale("log")
        if latency_bound_ms:
            ax.axhline(latency_bound_ms, color="grey", linestyle="--", linewidth=1)
    grid.set_axis_labels("achieved rate (samples/s)", f"{judged} latency (ms)")
    bound = f"; the bound {latency_bound_ms:g} ms dashed" if latency_bound_ms else ""
    grid.figure.suptitle(f"Server trials: {judged} latency against the rate achieved (o VALID, x INVALID{bound})", y=1.04)
    plt.close(grid.figure)
    return grid.figure


def concurrency_sweep(levels: pd.DataFrame, knees: pd.DataFrame, ttft_bound_ms: float | None = None, tpot_bound_ms: float | None = None) -> Figure:
    """A serving engine's sweep of the requests in flight: tokens per second against the time to first token and the time
    per output token (medians solid, 99th percentiles dotted), one line per environment through its levels (each labelled
    with its requests in flight), one row per model; the knee (`knees`: the scenario's rows, `knee`) starred, the bounds
    dashed where given."""
    if levels.empty:
        raise ValueError("levels: no level of a concurrency sweep to plot")
    data = levels.assign(**{
        column: pd.to_numeric(levels[column], errors="coerce") for column in ("concurrency", "tokens_per_s", "ttft_s", "ttft_p99_s", "tpot_s", "tpot_p99_s")
    }).sort_values("concurrency")  # fmt: skip
    models = list(dict.fromkeys(data["model"]))
    environments = list(dict.fromkeys(data["environment"]))
    colours = dict(zip(environments, sns.color_palette(n_colors=len(environments))))
    figure, axes = plt.subplots(len(models), 2, figsize=(9, 3.2 * len(models)), squeeze=False)
    panels = (("ttft", "time to first token (ms)", ttft_bound_ms), ("tpot", "time per output token (ms)", tpot_bound_ms))
    for row, model in zip(axes, models):
        for ax, (figure_name, label, bound) in zip(row, panels):
            for environment, line in data[data["model"] == model].groupby("environment", sort=False):
                colour = colours[environment]
                ax.plot(line["tokens_per_s"], line[f"{figure_name}_s"] * 1e3, marker="o", color=colour, label=environment)
                ax.plot(line["tokens_per_s"], line[f"{figure_name}_p99_s"] * 1e3, linestyle=":", color=colour)
                for _, level in line.iterrows():
                    ax.annotate(f"{level['concurrency']:g}", (level["tokens_per_s"], level[f"{figure_name}_s"] * 1e3), textcoords="offset points", xytext=(4, 4), fontsize=8)
                knee = knees[(knees["model"] == model) & (knees["environment"] == environment)]
                at = line[line["concurrency"].isin(pd.to_numeric(knee["knee"], errors="coerce"))]
                ax.scatter(at["tokens_per_s"], at[f"{figure_name}_s"] * 1e3, marker="*", s=220, color=colour, zorder=3)
            if bound:
                ax.axhline(bound, color="grey", linestyle="--", linewidth=1)
            ax.set_yscale("log")
            ax.set_xlabel("tokens per second")
            ax.set_ylabel(label)
            ax.set_title(model, fontsize=10)
        row[0].legend(fontsize=8)
    figure.suptitle("Concurrency sweep: each point a number of requests in flight (labelled), the knee starred; medians solid, p99 dotted, bounds dashed", fontsize=10)
    figure.tight_layout()
    plt.close(figure)
    return figure


def pareto_front(points: pd.DataFrame) -> pd.DataFrame:
    """The points no other beats on both throughput (`figure`, higher) and latency (`latency_ms`, lower), by throughput."""
    ordered = points.sort_values(["figure", "latency_ms"], ascending=[False, True])
    front, best_latency = [], np.inf
    for index, row in ordered.iterrows():
        if row["latency_ms"] < best_latency:
            front.append(index)
            best_latency = row["latency_ms"]
    return points.loc[front].sort_values("figure")


def cost_latency(costs: pd.DataFrame, latency_bound_ms: float | None = None) -> Figure:
    """Cost per million requests against the server's latency at its judged percentile (`cost.cost_table`'s server lines):
    one panel per model, one point per machine and environment with the cost's interval, a dot where it keeps the
    quality target, an x below it, a hollow square undecided; the Pareto front of those that keep drawn (none cheaper and
    faster), the bound dashed where given."""
    data = costs[(costs["scenario"] == "server")].dropna(subset=["cost_per_million", "latency_ms"])
    if data.empty:
        raise ValueError("costs: no priced server line with a latency to plot")
    models = list(dict.fromkeys(data["model"]))
    figure, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 2.8), squeeze=False)
    labels = data["environment"] + " on " + data["machine"]
    colours = dict(zip(labels.unique(), sns.color_palette(n_colors=labels.nunique())))
    for ax, model in zip(axes[0], models):
        lines = data[data["model"] == model]
        for label, row in zip(labels[lines.index], lines.itertuples()):
            y_err = [[max(row.cost_per_million - row.cost_low, 0)], [max(row.cost_high - row.cost_per_million, 0)]] if pd.notna(row.cost_low) else None
            marker = {KEEPS: "o", UNDECIDED: "s"}.get(row.quality_verdict, "X")
            ax.errorbar(row.latency_ms, row.cost_per_million, yerr=y_err, fmt=marker, color=colours[label], label=label, capsize=3,
                        markerfacecolor="none" if row.quality_verdict == UNDECIDED else colours[label])  # fmt: skip
        keeping = lines[lines["quality_verdict"] == KEEPS]
        if len(keeping):
            front = pareto_front(keeping.assign(figure=-keeping["cost_per_million"]))
            ax.plot(front["latency_ms"], front["cost_per_million"], color="black", linewidth=1, linestyle="-", label="Pareto front")
        if latency_bound_ms:
            ax.axvline(latency_bound_ms, color="grey", linestyle="--", linewidth=1)
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("latency at the percentile (ms)")
    currency = data["currency"].iloc[0]
    axes[0][0].set_ylabel(f"{currency} per million requests")
    handles = {label: handle for ax in axes[0] for handle, label in zip(*ax.get_legend_handles_labels())}
    figure.legend(handles.values(), handles.keys(), loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    bound = f"; the bound {latency_bound_ms:g} ms dashed" if latency_bound_ms else ""
    figure.suptitle(f"Cost against latency at the largest rate VALID under the bound (x: below the quality target, never ranked{bound})", y=1.02)
    figure.tight_layout()
    plt.close(figure)
    return figure


def tune_points(points: pd.DataFrame, latency_bound_ms: float | None = None) -> Figure:
    """Every point of a tune: latency at the percentile against the objective's rate, one panel per model, one colour
    per environment, each environment's Pareto frontier drawn through its points that may be chosen, refused points as
    x, the bound dashed where given."""
    data = points.assign(latency_ms=pd.to_numeric(points["latency_s"], errors="coerce") * 1e3, figure=pd.to_numeric(points["figure"], errors="coerce"))
    data["chosen"] = np.where(data["figure"].notna(), "may be chosen", "refused")
    data["figure"] = data["figure"].fillna(0.0)
    data = data.dropna(subset=["latency_ms"])
    if data.empty:
        raise ValueError("points: no point with a latency to plot")
    grid = sns.relplot(
        data=data, x="figure", y="latency_ms", hue="environment", style="chosen", markers={"may be chosen": "o", "refused": "X"},
        col="model", kind="scatter", s=60, height=3, aspect=1.3, facet_kws={"sharey": False, "sharex": False},
    )  # fmt: skip
    colours = dict(zip(data["environment"].unique(), sns.color_palette(n_colors=data["environment"].nunique())))
    for (model, environment), group in data[data["chosen"] == "may be chosen"].groupby(["model", "environment"]):
        front = pareto_front(group)
        grid.axes_dict[model].plot(front["figure"], front["latency_ms"], color=colours[environment], linewidth=1)
    for ax in grid.axes.flat:
        ax.set_yscale("log")
        if latency_bound_ms:
            ax.axhline(latency_bound_ms, color="grey", linestyle="--", linewidth=1)
    objective = points["objective"].iloc[0]
    grid.set_axis_labels("largest rate VALID under the bound (/s)" if objective == "server" else "samples per second", "latency at the percentile (ms)")
    bound = f"; the bound {latency_bound_ms:g} ms dashed" if latency_bound_ms else ""
    grid.figure.suptitle(f"Every point tried: each environment's Pareto frontier drawn (x refused{bound})", y=1.04)
    plt.close(grid.figure)
    return grid.figure


def speed_quality(table: pd.DataFrame, target: float) -> Figure:
    """Speed-up over eager float32 against the quality ratio (`task_quality.speed_and_quality` rows judged by the task
    metric): one panel per model and what was measured, one point per environment with both intervals, the target
    dashed; a dot keeps the target, an x is below it (never ranked), a hollow square is undecided (its interval holds
    the target: neither ranked nor set aside)."""
    data = table[table["judged_by"] == "task metric"].dropna(subset=["speedup", "quality"]).copy()
    if data.empty:
        raise ValueError("table: no environment has both a speed-up and a quality ratio to plot")
    data["panel"] = data["model"] + " · " + data["measured"]
    panels = list(dict.fromkeys(data["panel"]))
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    colours = dict(zip(data["environment"].unique(), sns.color_palette(n_colors=data["environment"].nunique())))
    for ax, panel in zip(axes[0], panels):
        for row in data[data["panel"] == panel].itertuples():
            x_err = [[max(row.quality - row.quality_low, 0)], [max(row.quality_high - row.quality, 0)]] if pd.notna(row.quality_low) else None
            y_err = [[max(row.speedup - row.ci95_low, 0)], [max(row.ci95_high - row.speedup, 0)]] if pd.notna(row.ci95_low) else None
            marker = {KEEPS: "o", UNDECIDED: "s"}.get(row.quality_verdict, "X")
            ax.errorbar(row.quality, row.speedup, xerr=x_err, yerr=y_err, fmt=marker, color=colours[row.environment], label=row.environment,
                        capsize=3, markerfacecolor="none" if row.quality_verdict == UNDECIDED else colours[row.environment])  # fmt: skip
        ax.axvline(target, color="grey", linestyle="--", linewidth=1)
        ax.axhline(1.0, color="grey", linewidth=0.5)
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("quality, share of eager float32's")
        ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=1))
    axes[0][0].set_ylabel("speed-up over eager float32")
    handles = {label: handle for ax in axes[0] for handle, label in zip(*ax.get_legend_handles_labels())}
    figure.legend(handles.values(), handles.keys(), loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    figure.suptitle(f"Speed against quality on your data: the target {target:.1%} dashed; x: below it, never ranked; hollow square: undecided", y=1.02)
    figure.tight_layout()
    plt.close(figure)
    return figure


def peak_memory(rows: pd.DataFrame) -> Figure:
    """Peak memory (MiB) against sequence length, one panel per model, one line per environment and batch size."""
    measured = rows[(rows["status"] == status.OK)].copy()
    measured["peak_mib"] = pd.to_numeric(measured["peak_memory_bytes"], errors="coerce") / quality.MIB
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
    plt.close(grid.figure)
    return grid.figure


def speed_probe(table: pd.DataFrame) -> Figure:
    """The speed probe (ms) over time, one colour per environment, one panel per machine and device, with ±10% of its median shaded."""
    table = table.dropna(subset=["seconds", "time"]).assign(ms=lambda t: 1000 * t["seconds"])
    if table.empty:
        raise ValueError("table: no speed probe to plot")
    groups = list(table.groupby(["machine", "device"], sort=True))
    palette = dict(zip(dict.fromkeys(table["environment"]), sns.color_palette(n_colors=table["environment"].nunique())))
    figure = plt.figure(figsize=(8, 3.2 * len(groups)), layout="constrained")
    for ax, ((machine, device), group) in zip(figure.subplots(len(groups), 1, squeeze=False)[:, 0], groups):
        median = float(group["ms"].median())
        ax.axhspan((1 - quality.PROBE_TOLERANCE) * median, (1 + quality.PROBE_TOLERANCE) * median, color="0.9", label=f"median ±{100 * quality.PROBE_TOLERANCE:.0f}%")
        ax.axhline(median, color="0.6", linestyle="--", linewidth=1)
        sns.lineplot(data=group, x="time", y="ms", hue="environment", palette=palette, marker="o", ax=ax)
        ax.set_ylim(0, max(float(group["ms"].max()), (1 + quality.PROBE_TOLERANCE) * median) * 1.1)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
        ax.set_title(f"{machine} ({device}): environments' medians vary {100 * quality.probe_variation(group)[0]:.0f}% (slowest / fastest - 1)", fontsize=10)
        ax.set_xlabel("time (UTC)")
        ax.set_ylabel("probe time (ms)")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    workloads = ", ".join(str(w) for w in dict.fromkeys(table["workload"].dropna())) or "a fixed reference workload"
    figure.suptitle(f"Speed probe through the run: {workloads}")
    plt.close(figure)
    return figure
