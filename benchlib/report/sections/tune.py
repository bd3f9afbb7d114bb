"""Each runtime at its best: per tuned environment and model, the best settings a tune found, the gain over the default
settings as confirmed in fresh kernels, and every point tried with each environment's Pareto frontier."""

from __future__ import annotations

import pandas as pd

from benchlib.analysis import tune
from benchlib.report import plots
from benchlib.report.display import show_figure, show_table
from benchlib.report.sections.base import TUNE, SummaryRun, section


def _table(run: SummaryRun) -> pd.DataFrame:
    return run.shared("tune", lambda: tune.at_its_best(run.run_dirs))


def tune_findings(run: SummaryRun) -> list[str]:
    return tune.findings(_table(run))


@section(
    "tune", "At its best", TUNE,
    "Per tuned environment and model: the best settings the search found (every point tried is in the tune's table of points), their "
    "figure in the search, then the best and the default measured again, alternately, in fresh kernels: the gain with its "
    "95% interval over those rounds and a verdict. Only a confirmed gain (`faster`) is a gain. A point LoadGen found INVALID "
    "or whose answer was beyond the tolerance is shown and never chosen.",
    findings=tune_findings,
)  # fmt: skip
def show_tune(run: SummaryRun) -> None:
    table = _table(run)
    show_table(table, run.output_dir, "at_its_best", tune.findings(table))
    points = tune.tune_points(run.run_dirs)
    if "latency_s" in points and points["objective"].isin(["server", "offline"]).any():
        show_figure(plots.tune_points(points[points["objective"] != "single-stream"], tune.latency_bound_ms(run.run_dirs)), run.output_dir, "tune_points")
