"""Quality on the user's data: each environment's task metric per model on `eval_data` (or a causal model's perplexity on
the text), its ratio to eager PyTorch float32's with its interval and verdict against `quality_target`, what LoadGen's
accuracy mode under load scored, and the speed-up against quality picture. An environment below the target, or one
whose interval holds it (undecided), is never named the fastest that keeps it."""

from __future__ import annotations

import pandas as pd

from benchlib.analysis import load as under_load
from benchlib.analysis import speedups, task_quality
from benchlib.report import plots
from benchlib.report.display import show_figure, show_table
from benchlib.report.sections.base import QUALITY, SummaryRun, section


def _tables(run: SummaryRun) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the quality table, speed beside quality)."""

    def make() -> tuple[pd.DataFrame, pd.DataFrame]:
        quality = task_quality.quality_table(pd.concat([run.all_rows, run.loaded], ignore_index=True))
        cell_speedups = run.shared("speedups_per_model", lambda: speedups.speedups(run.rows, per_model=True)) if not run.rows.empty else None
        load_speedups = under_load.scenario_speedups(run.loaded) if not run.loaded.empty else None
        return quality, task_quality.speed_and_quality(quality, cell_speedups, load_speedups)

    return run.shared("task_quality", make)


def quality_findings(run: SummaryRun) -> list[str]:
    quality, speed = _tables(run)
    return task_quality.findings(quality, speed)


@section(
    "quality", "Quality on your data", QUALITY,
    "Per model and environment, the task's metric on your examples (accuracy, Spearman's correlation or perplexity) with "
    "its 95% interval over examples, eager PyTorch float32's, the ratio to it and its verdict against the target "
    "(MLPerf's 99% rule, read from the interval: `keeps`, `below`, or `undecided` with about how many examples would "
    "decide), and what LoadGen's accuracy mode scored under load. Then each speed-up beside the quality it keeps: an "
    "environment below the target, or undecided, is never named the fastest that keeps it.",
    findings=quality_findings,
)  # fmt: skip
def show_quality(run: SummaryRun) -> None:
    quality, speed = _tables(run)
    show_table(quality, run.output_dir, "quality")
    show_table(speed, run.output_dir, "speed_and_quality", when_empty="No environment has both a speed-up and a quality figure.")
    if ((speed["judged_by"] == task_quality.BY_TASK) & speed["speedup"].notna()).any():
        target = float(quality["target"].dropna().iloc[0]) if quality["target"].notna().any() else 0.99
        show_figure(plots.speed_quality(speed, target), run.output_dir, "speed_and_quality")
