"""The load scenarios (MLPerf's single-stream, multi-stream, server and offline, driven by LoadGen): each scenario's
figure per environment and model, the speed-ups over eager PyTorch float32, the fastest per scenario and the fastest
that keeps 99% agreement (an undecided agreement never named), a serving engine's overhead at one request over eager
PyTorch in the kit's process, every server trial, and a serving engine's concurrency sweep. No INVALID result is ranked."""

from __future__ import annotations

import pandas as pd

from benchlib.analysis import cost
from benchlib.analysis import load as under_load
from benchlib.report import plots
from benchlib.report.display import show_figure, show_table
from benchlib.report.sections.base import LOAD, SummaryRun, section


def _tables(run: SummaryRun) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(the scenario table, the speed-ups, the fastest per scenario)."""

    def make() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        table = under_load.scenario_table(run.loaded)
        return table, under_load.scenario_speedups(run.loaded), under_load.fastest_per_scenario(table)

    return run.shared("load", make)


def load_findings(run: SummaryRun) -> list[str]:
    table, speedups, fastest = _tables(run)
    sentences = under_load.findings(table, fastest, speedups, under_load.bound_text(run.loaded, run.run_dirs))
    sentences += under_load.overhead_sentences(run.loaded)
    # said once: where some machine has a price, the decision names those without
    missing = None if cost.priced_machines(run.machines) else cost.unpriced_sentence(run.machines)
    return sentences + ([missing] if missing else [])


@section(
    "load", "Under load", LOAD,
    "Per environment and model, the figure each scenario is judged by, as LoadGen's summary gives it (a latency "
    "percentile, the largest rate VALID under the bound, samples per second), with `invalid` naming what LoadGen found "
    "INVALID and why: an INVALID result has no figure and is never ranked. Then the speed-ups over eager PyTorch float32, "
    "the fastest per scenario and the fastest that keeps 99% agreement, every server trial, and a serving engine's sweep of "
    "the requests in flight (tokens per second against its time to first token and per output token, the knee starred).",
    findings=load_findings,
)  # fmt: skip
def show_load(run: SummaryRun) -> None:
    table, speedups, fastest = _tables(run)
    show_table(table, run.output_dir, "under_load", under_load.short_server_sentences(table))
    show_table(speedups, run.output_dir, "under_load_speedups",
               when_empty="No environment was measured under load beside eager PyTorch float32: there is no speed-up to give.")  # fmt: skip
    show_table(fastest, run.output_dir, "under_load_fastest", under_load.ranking_sentences(fastest),
               when_empty="Every model was measured under load in one environment: there is no fastest to name.")  # fmt: skip
    trials = under_load.load_trials(run.run_dirs)
    server = trials[trials["scenario"] == "server"] if not trials.empty else trials
    if not server.empty:
        show_figure(plots.server_trials(server, under_load.latency_bound_ms(run.run_dirs)), run.output_dir, "server_trials")
    levels = trials[(trials["scenario"] == "concurrency") & trials["trial"].notna()] if not trials.empty else trials
    if not levels.empty:
        knees = run.loaded[run.loaded["scenario"] == "concurrency"]
        ttft, tpot = under_load.token_bounds_ms(run.run_dirs)
        show_figure(plots.concurrency_sweep(levels, knees, ttft, tpot), run.output_dir, "concurrency_sweep")
