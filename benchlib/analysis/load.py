"""The summary's "Under load" section: the load scenarios' rows of one or more runs (`scenario` other than `cell`), their
figures as LoadGen reported them, the fastest environment per scenario, and the server scenario's trials.

A load cell's figure is the one its scenario is judged by: the 90th percentile of latency one request at a time
(single-stream), the 99th percentile of a query's latency (multi-stream), the largest rate VALID under the bound
(server: `max_qps`) and samples per second (offline); over rounds, the median of the rounds' figures. The fastest
environment one request at a time (single-stream) is not always the one that serves the most under load: where it
differs, a sentence says so.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from benchlib import status
from benchlib.store.environment import read_environment
from benchlib.store.layout import environment_dirs
from benchlib.store.results import CELL_SCENARIO, read_results

SCENARIO_ORDER: tuple[str, ...] = ("single-stream", "multi-stream", "server", "offline")
# Per scenario: the table's column, how a row gives it, and whether more is better.
FIGURES: dict[str, tuple[str, str, bool]] = {
    "single-stream": ("single_stream_p90_ms", "latency", False),
    "multi-stream": ("multi_stream_p99_ms", "latency", False),
    "server": ("server_max_qps", "max_qps", True),
    "offline": ("offline_samples_per_s", "samples_per_s", True),
}
FASTEST_COLUMNS: tuple[str, ...] = ("model", "scenario", "fastest", "figure", "environments")
ONLY_LOAD = "These runs measured under load only: their figures are section 12, Under load; the sections of cells timed one call at a time are empty."
NO_LOAD = "No load scenario was measured in these runs: set `scenario` (e.g. `--grid load-smoke`; see the README's \"Under load\")."


def _rows(run_dirs: Iterable[str | os.PathLike[str]], trials: bool) -> pd.DataFrame:
    frames = []
    for run_dir in run_dirs:
        for env_dir in environment_dirs(run_dir):
            rows = read_results(env_dir, trials=trials)
            rows = rows[rows["scenario"] != CELL_SCENARIO]
            if not rows.empty:
                frames.append(rows.assign(run=Path(run_dir).name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_rows(run_dirs: Iterable[str | os.PathLike[str]]) -> pd.DataFrame:
    """Every load scenario's cell of the runs (the kept attempt of each round), with `run`; empty when there is none."""
    return _rows(run_dirs, trials=False)


def load_trials(run_dirs: Iterable[str | os.PathLike[str]]) -> pd.DataFrame:
    """Every server trial of the runs, with `run`; empty when there is none."""
    return _rows(run_dirs, trials=True)


def figure_of(row: pd.Series) -> float:
    """A load cell's figure (FIGURES), NaN where it has none (not ok, or no rate met the bound)."""
    if row["status"] != status.OK:
        return float("nan")
    _, source, _ = FIGURES[row["scenario"]]
    value = float(row["loadgen_value"]) * 1e-6 if source == "latency" else pd.to_numeric(row[source], errors="coerce")
    return float(value)


def scenario_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per environment and model: each scenario's figure (the median over its rounds), `rounds`, and `invalid`:
    the scenarios that LoadGen found INVALID in a round (for the server: no rate met the bound)."""
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(figure=[figure_of(row) for _, row in rows.iterrows()], invalid=rows["valid"].astype(str) != "True")
    lines = []
    for (environment, model), cells in rows.groupby(["environment", "model"], sort=False):
        line = {"environment": environment, "model": model, "rounds": int(cells["round"].nunique())}
        for scenario in SCENARIO_ORDER:
            line[FIGURES[scenario][0]] = cells.loc[cells["scenario"] == scenario, "figure"].median()
        line["invalid"] = ", ".join(dict.fromkeys(cells.loc[cells["invalid"] & (cells["status"] == status.OK), "scenario"]))
        lines.append(line)
    return pd.DataFrame(lines)


def latency_bound_ms(run_dirs: Iterable[str | os.PathLike[str]]) -> float | None:
    """The server's latency bound of the runs' load environments (environment.json), where they share one; else None."""
    bounds = set()
    for run_dir in run_dirs:
        for env_dir in environment_dirs(run_dir):
            parameters = read_environment(env_dir).get("parameters", {})
            if parameters.get("scenario", [CELL_SCENARIO]) != [CELL_SCENARIO]:
                bounds.add(parameters.get("latency_bound_ms"))
    return bounds.pop() if len(bounds) == 1 else None


def fastest_per_scenario(table: pd.DataFrame) -> pd.DataFrame:
    """Per model and scenario: the environment with the best figure (the lowest latency, the highest rate), its figure (in
    the unit of `scenario_table`'s column) and how many environments had one; models measured in one environment are left out."""
    lines = []
    for model, group in table.groupby("model", sort=False):
        if len(group) < 2:
            continue
        for scenario in SCENARIO_ORDER:
            column, _, more_is_better = FIGURES[scenario]
            figures = group.set_index("environment")[column].dropna()
            if figures.empty:
                continue
            best = figures.idxmax() if more_is_better else figures.idxmin()
            lines.append({"model": model, "scenario": scenario, "fastest": best, "figure": figures[best], "environments": len(figures)})
    return pd.DataFrame(lines, columns=list(FASTEST_COLUMNS))


def ranking_sentences(fastest: pd.DataFrame) -> list[str]:
    """A sentence per model where the fastest environment one request at a time (single-stream) is not the one that
    serves the most under the bound (server) or reaches the most samples per second (offline)."""
    sentences = []
    for model, group in fastest.groupby("model", sort=False):
        best = group.set_index("scenario")["fastest"]
        if "single-stream" not in best:
            continue
        for scenario, what in (("server", "serves the most requests per second under the latency bound"), ("offline", "reaches the most samples per second")):
            if scenario in best and best[scenario] != best["single-stream"]:
                sentences.append(f"For {model}, {best['single-stream']} is the fastest one request at a time, but {best[scenario]} {what} ({scenario}).")
    return sentences
