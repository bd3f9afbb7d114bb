"""`python -m benchlib compare RUN_A RUN_B`: what got faster or slower from run A to run B, and what differs between them.

A change is B's time over A's, minus 1 (positive: B is slower). As in asv and pyperf's
`compare_to`, a change counts only when it is both statistically significant and larger than a
practical threshold:

- a cell (model, batch size, sequence length of one environment, `ok` in both runs) is
  `faster` or `slower` when a two-sided Mann-Whitney U test on its raw samples (every `ok`
  round's samples pooled) gives p < `alpha` AND its change in median time (`time_s`: the median
  over rounds of each round's median) is at least `threshold`; otherwise `no change`. A cell
  that is `ok` in only one run, or has no row in one, is `not compared`, with why.
- a load scenario's cell (one model under single-stream, multi-stream, server or offline) is compared as a cell, its
  time the figure its scenario is judged by where less is better (the latency, or one over the rate) and its samples
  the rounds' figures: one per round, so that it needs several rounds in each run for the rank test to find a change.
- an environment's change is the geometric mean over its compared cells of B / A, with the
  bootstrap interval of `benchlib.analysis.significance` (resampling each cell's per-round medians with
  two rounds or more, else its raw samples). Its verdict is `significance.verdict`: `faster` or
  `slower` when the 95% interval excludes no change and the geometric mean is beyond `threshold`,
  `no clear difference` otherwise, `inconclusive` when a compared cell was disturbed in either run
  (or no cell could be compared). An environment found in only one run is `not compared`.

A model is named by its short name (`runs.short_model_names`). Where both runs recorded a folder model's checkpoint
(`model_digest`), one checkpoint found under two names (copied to two folders) is compared as one model, named as in
A, and a note says so; a note also says when the runs hold different checkpoints under one name. The runs' `models`
parameters are compared by checkpoint, not by folder.

Where both runs measured an environment in two rounds or more, its threshold (for its cells and
for itself) is raised to what the spread between processes could do alone (`variance.noise_floor`:
the 95% half-width of a cell's change, from the median cell's spread within and between processes
and the runs' rounds), so that two runs of one job on one quiet machine get no verdict from drift.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from benchlib import status
from benchlib.analysis import load as under_load
from benchlib.analysis import cost, significance, task_quality, tune, variance
from benchlib.analysis.runs import NOT_MEASURED, Run, read_run, run_models, short_model_names
from benchlib.analysis.significance import FASTER, SLOWER
from benchlib.store.layout import COMPARE_CELLS, COMPARE_DIFFERENCES, RESULTS_FILE, environment_dirs
from benchlib.store.results import CELL_KEY, CELL_SCENARIO, read_results

DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.05
NO_CHANGE = "no change"
NOT_COMPARED = "not compared"
# A generate cell is never compared with a forward one, nor a load scenario's cell with a cell timed one call at a time.
KEY: tuple[str, ...] = ("environment", "workload", "scenario", *CELL_KEY)
# What environment.json says about a run, compared key by key; run-specific values are left out.
SECTIONS: tuple[str, ...] = ("software", "machine", "threads", "parameters")
IGNORED: frozenset[tuple[str, str]] = frozenset({("machine", "hostname"), ("parameters", "output_dir"), ("parameters", "current_round")})
ABSENT = "(absent)"
CELL_COLUMNS: tuple[str, ...] = (
    "environment", "workload", "scenario", *CELL_KEY, "status_a", "status_b", "median_a_s", "median_b_s", "change", "p_value",
    "n_samples_a", "n_samples_b", "verdict", "disturbed", "why",
)  # fmt: skip
ENVIRONMENT_COLUMNS: tuple[str, ...] = (
    "environment", "cells_compared", "cells_not_compared", "faster_cells", "slower_cells",
    "geomean_change", "ci95_low", "ci95_high", "interval_over", "threshold", "verdict", "disturbed_cells", "why",
)  # fmt: skip
DIFFERENCE_COLUMNS: tuple[str, ...] = ("environment", "section", "key", "a", "b")
PRINTED_DIFFERENCES = 10
SHOWN_DIGEST = 12  # hex digits of a checkpoint's digest shown in notes and differences


class CompareError(ValueError):
    """Bad input for a comparison: a folder that is not a run, no environment in common, a threshold out of range."""


@dataclass(frozen=True)
class RunComparison:
    """Run B against run A: the cells, the environments, what differs between their environment.json."""

    run_a: Run
    run_b: Run
    cells: pd.DataFrame
    environments: pd.DataFrame
    differences: pd.DataFrame
    threshold: float
    alpha: float
    notes: tuple[str, ...] = ()  # models matched by checkpoint under other names, or one name holding two checkpoints
    quality: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(task_quality.CHANGE_COLUMNS)))


# ---------------------------------------------------------------- loading


def _read_run(run_dir: str | os.PathLike[str]) -> Run:
    """The run in `run_dir`: its cells (`runs.read_run`) and its load scenarios' cells (`load.compared_cells`);
    CompareError when it is not a folder or none of its environments has rows."""
    if not Path(run_dir).is_dir():
        raise CompareError(f"{run_dir} is not a run: no <environment>/{RESULTS_FILE} with rows in it")
    run = read_run(run_dir)
    loaded, infos = under_load.compared_cells(run_dir)
    tuned, tuned_infos = tune.compared_cells(run_dir)  # each keyed by its settings
    extra = [frame for frame in (loaded, tuned) if len(frame)]
    if not run.environments and not extra:
        raise CompareError(f"{run_dir} is not a run: no <environment>/{RESULTS_FILE} with rows in it")
    rows = short_model_names(pd.concat([run.rows, *extra], ignore_index=True) if extra else run.rows, run_models(run_dir))
    digests = _digests(run_dir)
    return Run(run.path, rows.assign(model_digest=[digests.get(path, "") for path in rows["model_path"]]), {**run.environments, **infos, **tuned_infos})


def _digests(run_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Each model's checkpoint digest in a run (`model_digest`), by the name the run gave it; models without one are left out."""
    found = {}
    for env_dir in environment_dirs(run_dir):
        rows = read_results(env_dir)
        found.update({model: digest for model, digest in zip(rows["model"], rows["model_digest"]) if isinstance(digest, str) and digest})
    return found


# ---------------------------------------------------------------- models


def _checkpoints(run: Run) -> dict[str, set[str]]:
    """Each model's short name in `run` and the checkpoint digests its rows recorded (none for a catalogue entry)."""
    found: dict[str, set[str]] = {}
    for name, digest in zip(run.rows["model"], run.rows["model_digest"]):
        found.setdefault(name, set()).update({digest} if digest else set())
    return found


def _short_digests(digests: set[str]) -> str:
    """Checkpoint digests, shortened, for a note."""
    return ", ".join(sorted(digest[:SHOWN_DIGEST] for digest in digests))


def match_models(run_a: Run, run_b: Run) -> tuple[Run, list[str]]:
    """Run B with each model that holds one of A's checkpoints (the same `model_digest`) under another name renamed to
    A's name, so that their cells compare; and a note for each such model and for each name under which the two runs
    hold different checkpoints."""
    in_a, in_b = _checkpoints(run_a), _checkpoints(run_b)
    renamed, notes = {}, []
    for name_b, digests in in_b.items():
        name_a = next((name for name, held in in_a.items() if held & digests), name_b)
        if name_a != name_b and name_a not in in_b:
            renamed[name_b] = name_a
            notes.append(f"one checkpoint under two names: {name_a} in A, {name_b} in B (sha256 {_short_digests(in_a[name_a] & digests)}); compared as {name_a}")
    for name in (name for name in in_a if name in in_b and name not in renamed):
        if in_a[name] and in_b[name] and in_a[name] != in_b[name]:
            notes.append(f"different checkpoints under one name: {name} is sha256 {_short_digests(in_a[name])} in A, {_short_digests(in_b[name])} in B")
    return Run(run_b.path, run_b.rows.assign(model=run_b.rows["model"].replace(renamed)), run_b.environments), notes


# ---------------------------------------------------------------- cells


def cell_verdict(change: float, p_value: float, threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA) -> str:
    """`faster` or `slower` when the test is significant (p < `alpha`) and the change is at least `threshold`; else `no change`."""
    if not p_value < alpha:  # NaN too: no test, no verdict
        return NO_CHANGE
    if change <= -threshold:
        return FASTER
    return SLOWER if change >= threshold else NO_CHANGE


def _side(run: Run, environments: list[str]) -> pd.DataFrame:
    """The cells of `environments` in `run`, indexed by environment and cell, with the columns a comparison reads."""
    cells = run.rows[run.rows["environment"].isin(environments)].set_index(list(KEY))
    samples = [s if isinstance(s, list) and s else v for s, v in zip(cells["samples"], cells["values"])]  # a file without raw samples
    return cells.assign(samples=samples)[["status", "reason", "time_s", "values", "values_over", "samples", "disturbed"]]


def _why(status_a: str, reason_a: Any, status_b: str, reason_b: Any) -> str:
    """Why a cell is not compared: its status (and reason) in each run where it is not `ok`."""
    parts = []
    for run, state, reason in (("A", status_a, reason_a), ("B", status_b, reason_b)):
        if state != status.OK:
            parts.append(f"{run}: {state}" + (f" ({reason})" if isinstance(reason, str) and reason else ""))
    return "; ".join(parts)


def _mann_whitney(samples_a: list[float], samples_b: list[float]) -> float:
    """The two-sided Mann-Whitney U test's p-value of two sets of samples."""
    from scipy.stats import mannwhitneyu  # here: scipy.stats costs every `benchlib` command a second more to start

    return float(mannwhitneyu(samples_a, samples_b, alternative="two-sided").pvalue)


def thresholds(run_a: Run, run_b: Run, threshold: float = DEFAULT_THRESHOLD) -> dict[str, float]:
    """Per environment found in both runs, the smallest change that counts: `threshold`, or the change that the
    spread between processes and the sampling could make alone where both runs measured it in two rounds or
    more (`variance.noise_floor`), whichever is larger."""
    found = {}
    for env in (env for env in run_a.environments if env in run_b.environments):
        timed_a, timed_b = (run.rows[(run.rows["environment"] == env) & (run.rows["scenario"] == CELL_SCENARIO)] for run in (run_a, run_b))
        floor = variance.noise_floor(timed_a, timed_b)
        found[env] = max(threshold, floor) if floor is not None else threshold
    return found


def compare_cells(run_a: Run, run_b: Run, limits: dict[str, float], alpha: float = DEFAULT_ALPHA) -> pd.DataFrame:
    """Every cell of the environments found in both runs: medians, change, p-value and verdict (`CELL_COLUMNS`,
    plus `values_a`/`values_b` and `values_over_a`/`values_over_b`, what an environment's interval resamples).
    A cell's change must clear its environment's threshold (`limits`, from `thresholds`)."""
    common = [env for env in run_a.environments if env in run_b.environments]
    a, b = _side(run_a, common), _side(run_b, common)
    cells = a.merge(b, how="outer", left_index=True, right_index=True, suffixes=("_a", "_b")).reindex(list(dict.fromkeys([*a.index, *b.index]))).reset_index()
    cells[["status_a", "status_b"]] = cells[["status_a", "status_b"]].fillna(NOT_MEASURED)
    compared = (cells["status_a"] == status.OK) & (cells["status_b"] == status.OK)
    cells["median_a_s"], cells["median_b_s"] = cells["time_s_a"].where(compared), cells["time_s_b"].where(compared)
    cells["change"] = cells["median_b_s"] / cells["median_a_s"] - 1
    cells["p_value"] = [_mann_whitney(x, y) if ok else math.nan for x, y, ok in zip(cells["samples_a"], cells["samples_b"], compared)]
    cells["verdict"] = [
        cell_verdict(c, p, limits[env], alpha) if ok else NOT_COMPARED for env, c, p, ok in zip(cells["environment"], cells["change"], cells["p_value"], compared)
    ]
    hits = cells[["disturbed_a", "disturbed_b"]].fillna(False).astype(bool)
    cells["disturbed"] = [", ".join(run for run, hit in (("A", x), ("B", y)) if hit) for x, y in zip(hits["disturbed_a"], hits["disturbed_b"])]
    cells["why"] = [_why(*values) for values in zip(cells["status_a"], cells["reason_a"], cells["status_b"], cells["reason_b"])]
    for run in ("a", "b"):
        cells[f"n_samples_{run}"] = [len(s) if ok else 0 for s, ok in zip(cells[f"samples_{run}"], compared)]
    return cells[[*CELL_COLUMNS, "values_a", "values_b", "values_over_a", "values_over_b"]]


# ---------------------------------------------------------------- environments


def _environment_record(environment: str, cells: pd.DataFrame, threshold: float) -> dict[str, Any]:
    """One environment's geometric mean change over its compared cells, with its interval and its verdict against
    `threshold` (the environment's, from `thresholds`)."""
    compared = cells[cells["verdict"] != NOT_COMPARED]
    rounds = not compared.empty and (compared["values_over_a"] == "rounds").all() and (compared["values_over_b"] == "rounds").all()
    estimate = significance.ratio_interval(list(compared["values_a"]), list(compared["values_b"]), over="rounds" if rounds else "samples")
    disturbed = [
        f"{row.model} {row.batch_size}x{row.sequence_length}{'' if row.scenario == CELL_SCENARIO else f' {row.scenario}'} ({row.disturbed})"
        for row in compared.itertuples() if row.disturbed
    ]  # fmt: skip
    return {
        "environment": environment, "cells_compared": len(compared), "cells_not_compared": len(cells) - len(compared),
        "faster_cells": int((compared["verdict"] == FASTER).sum()), "slower_cells": int((compared["verdict"] == SLOWER).sum()),
        "geomean_change": estimate.ratio - 1, "ci95_low": estimate.low - 1, "ci95_high": estimate.high - 1,
        "interval_over": estimate.over, "threshold": threshold, "verdict": significance.verdict(estimate, threshold, disturbed=len(disturbed)),
        "disturbed_cells": "; ".join(disturbed), "why": _environment_why(len(compared), len(disturbed), estimate),
    }  # fmt: skip


def _environment_why(compared: int, disturbed: int, estimate: significance.RatioEstimate) -> str:
    """Why an environment's verdict is inconclusive ("" when it is not for these reasons)."""
    if not compared:
        return "no cell is ok in both runs"
    if disturbed:
        return f"{disturbed} of its {compared} compared cells were disturbed"
    return "one figure per cell in a run (one round under load): no interval; measure two rounds or more" if math.isnan(estimate.low) else ""


def compare_environments(cells: pd.DataFrame, run_a: Run, run_b: Run, limits: dict[str, float]) -> pd.DataFrame:
    """Per environment of either run (`ENVIRONMENT_COLUMNS`): the change over its cells (from `compare_cells`) and its
    verdict; an environment found in only one run is `not compared`."""
    records = []
    for environment in dict.fromkeys([*run_a.environments, *run_b.environments]):
        if environment in run_a.environments and environment in run_b.environments:
            records.append(_environment_record(environment, cells[cells["environment"] == environment], limits[environment]))
        else:
            only = "A" if environment in run_a.environments else "B"
            records.append({"environment": environment, "verdict": NOT_COMPARED, "why": f"only in run {only}"})
    return pd.DataFrame(records, columns=list(ENVIRONMENT_COLUMNS))


# ---------------------------------------------------------------- environment.json


def _flatten(info: dict[str, Any], digests: dict[str, str]) -> dict[tuple[str, str], str]:
    """(section, key) → value as text, for the compared sections of an environment.json; the `models` parameter's folders
    by their checkpoint where `digests` (by the name the run gave a model) has it."""
    flat = {
        (section, key): value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        for section in SECTIONS for key, value in (info.get(section) or {}).items() if (section, key) not in IGNORED
    }  # fmt: skip
    models = (info.get("parameters") or {}).get("models")
    if isinstance(models, list):
        flat[("parameters", "models")] = json.dumps([f"sha256 {digests[m][:SHOWN_DIGEST]}" if m in digests else m for m in models])
    return flat


def _run_digests(run: Run) -> dict[str, str]:
    """Each model's checkpoint digest in `run`, by the name the run gave it (`model_path`)."""
    return {path: digest for path, digest in zip(run.rows["model_path"], run.rows["model_digest"]) if digest}


def environment_differences(run_a: Run, run_b: Run) -> pd.DataFrame:
    """What differs between the two runs' environment.json per environment found in both: software versions, machine,
    threads and parameters (not `IGNORED`: output folder, round, host name; dates and probes are not compared), a folder
    model by its checkpoint."""
    records = []
    digests_a, digests_b = _run_digests(run_a), _run_digests(run_b)
    for environment in (env for env in run_a.environments if env in run_b.environments):
        a, b = _flatten(run_a.environments[environment], digests_a), _flatten(run_b.environments[environment], digests_b)
        for section, key in dict.fromkeys([*a, *b]):
            value_a, value_b = a.get((section, key), ABSENT), b.get((section, key), ABSENT)
            if value_a != value_b:
                records.append({"environment": environment, "section": section, "key": key, "a": value_a, "b": value_b})
    return pd.DataFrame(records, columns=list(DIFFERENCE_COLUMNS))


# ---------------------------------------------------------------- the comparison and its report


def compare_runs(run_a: str | os.PathLike[str], run_b: str | os.PathLike[str], threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA) -> RunComparison:
    """Run B against run A; CompareError for a threshold or alpha outside (0, 1), a folder that is not a run, or no environment in common."""
    for name, value in (("threshold", threshold), ("alpha", alpha)):
        if not 0 < value < 1:
            raise CompareError(f"--{name} must be between 0 and 1 (exclusive), not {value}")
    a, b = _read_run(run_a), _read_run(run_b)
    if not set(a.environments) & set(b.environments):
        raise CompareError(f"no environment in common: A has {', '.join(a.environments)}; B has {', '.join(b.environments)}")
    b, notes = match_models(a, b)
    limits = thresholds(a, b, threshold)
    cells = compare_cells(a, b, limits, alpha)
    quality = task_quality.quality_changes(task_quality.run_quality(run_a), task_quality.run_quality(run_b))
    notes += cost.cheaper_sentences(run_costs(run_a), run_costs(run_b))
    return RunComparison(a, b, cells, compare_environments(cells, a, b, limits), environment_differences(a, b), threshold, alpha, tuple(notes), quality)


def run_costs(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """A run's cost per million at each load line's operating point, priced by its own environment.json (`cost.cost_table`)."""
    return cost.cost_table(under_load.load_rows([run_dir]), cost.run_machines([run_dir]), [run_dir])


def signed_percent(value: float) -> str:
    """A change as a signed percentage ("+4.2%"); "" for none."""
    return "" if pd.isna(value) else f"{value:+.1%}"


def summary_lines(comparison: RunComparison) -> list[str]:
    """A few lines: the environments that got slower and faster, the others, the cells not compared, what differs."""
    envs, cells = comparison.environments, comparison.cells
    lines = [f"B ({comparison.run_b.path}) against A ({comparison.run_a.path}): threshold {comparison.threshold:.0%}, alpha {comparison.alpha:g}"]
    lines += [f"note: {note}" for note in comparison.notes]
    for row in itertools.chain.from_iterable(envs[envs["verdict"] == verdict].itertuples() for verdict in (SLOWER, FASTER)):
        lines.append(
            f"{row.verdict}: {row.environment} {signed_percent(row.geomean_change)} (95% interval {signed_percent(row.ci95_low)} to "
            f"{signed_percent(row.ci95_high)}; of {row.cells_compared} cells {row.slower_cells} slower, {row.faster_cells} faster; "
            f"threshold {row.threshold:.1%})"
        )
    raised = envs[envs["threshold"].astype(float) > comparison.threshold]
    if len(raised):
        lines.append("threshold raised to the spread between processes: " + ", ".join(f"{r.environment} {r.threshold:.1%}" for r in raised.itertuples()))
    for verdict, group in envs[~envs["verdict"].isin([SLOWER, FASTER])].groupby("verdict", sort=False):
        lines.append(f"{verdict}: " + ", ".join(f"{e} ({w})" if w else e for e, w in zip(group["environment"], group["why"].fillna(""))))
    lines += task_quality.change_lines(comparison.quality)
    not_compared = int((cells["verdict"] == NOT_COMPARED).sum())
    if not_compared:
        lines.append(f"{not_compared} cells not compared (not ok in one run, or in one run only): see {COMPARE_CELLS}")
    grouped = comparison.differences.groupby(["section", "key", "a", "b"], sort=False)["environment"].agg(", ".join).reset_index()
    lines += [f"differs: {r.section}.{r.key}: {r.a} -> {r.b} ({r.environment})" for r in grouped.head(PRINTED_DIFFERENCES).itertuples()]
    if len(grouped) > PRINTED_DIFFERENCES:
        lines.append(f"differs: {len(grouped) - PRINTED_DIFFERENCES} more, see {COMPARE_DIFFERENCES}")
    return lines
