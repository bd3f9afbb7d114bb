"""The forward pass's cells timed one call at a time: what was measured, each environment's speed-up over eager PyTorch
float32 (with the summary's opening findings), and the fastest environment of each model and shape."""

from __future__ import annotations

import pandas as pd

from benchlib.analysis import speedups, tables
from benchlib.analysis.claims import claims_table
from benchlib.report import plots
from benchlib.report.display import show_figure, show_table
from benchlib.report.sections.base import CELLS, SummaryRun, section


def speedup(run: SummaryRun) -> pd.DataFrame:
    return run.shared("speedups", lambda: speedups.speedups(run.rows))


def model_speedup(run: SummaryRun) -> pd.DataFrame:
    return run.shared("speedups_per_model", lambda: speedups.speedups(run.rows, per_model=True))


def fastest(run: SummaryRun) -> pd.DataFrame:
    return run.shared("fastest", lambda: speedups.fastest(run.rows))


def claims(run: SummaryRun) -> pd.DataFrame:
    return run.shared("claims", lambda: claims_table(run.rows))


@section(
    "measured", "What was measured", CELLS,
    "One line per environment: its device, machine and how many cells ended with each status; a cell without a row counts as *not measured*.",
)  # fmt: skip
def show_measured(run: SummaryRun) -> None:
    show_table(tables.status_counts(run.rows), run.output_dir, "status_counts", tables.missing_comparisons(run.rows, "devices"))


def speedup_findings(run: SummaryRun) -> list[str]:
    return speedups.findings(run.rows, speedup(run), model_speedup(run), fastest(run), claims(run))


@section(
    "speedups", "Speed-up over eager PyTorch float32", CELLS,
    "Every environment against eager PyTorch float32 on the same device and machine, fastest first: the geometric mean "
    "speed-up over the cells `ok` in both, its 95% interval and verdict, beside its agreement with eager float32; then per model.",
    findings=speedup_findings,
)  # fmt: skip
def show_speedups(run: SummaryRun) -> None:
    show_table(speedup(run), run.output_dir, "speedups", speedups.warning_sentences(run.rows))
    show_table(model_speedup(run), run.output_dir, "speedups_per_model")


@section(
    "fastest", "The fastest environment for each model and shape", CELLS,
    "For each model and shape, the fastest environment `ok` there, the runner-up and the `margin` between them, with its "
    "interval and verdict; the figure colours each cell by its fastest environment.",
)  # fmt: skip
def show_fastest(run: SummaryRun) -> None:
    cells = fastest(run)
    show_table(cells, run.output_dir, "fastest")
    if (cells["fastest"] != "").any():
        show_figure(plots.fastest_heatmap(cells), run.output_dir, "fastest_heatmap")
