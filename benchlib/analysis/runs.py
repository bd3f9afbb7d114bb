"""Run folders loaded into rows: one row per environment and cell over its rounds, ready for the tables.

Environments are compared within one device type (cpu, cuda) on one machine (`GROUP`). A cell's time
(`time_s`) is the median over its rounds of each round's median per call: of the whole call by default, or of
another per-call time of the rows (`Timing`: a generate cell's time to first token, `TTFT`).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchlib import status
from benchlib.config.models import short_names
from benchlib.machine import UNKNOWN_MACHINE, machine_label
from benchlib.paths import OUTPUTS_DIR
from benchlib.store.environment import read_environment
from benchlib.store.layout import environment_dirs, last_written
from benchlib.store.results import CELL_KEY, CELL_SCENARIO, COLUMNS, is_true, read_results

GROUP: tuple[str, ...] = ("device_type", "machine")
NOT_MEASURED = "not measured"  # a cell without a row in an environment (a partial run)
DEFAULT_PRECISION = "float32"  # what a row without a precision (from before the column existed) ran in
REFERENCE_RUN = "reference"  # the run under outputs/ that ships with the kit
FORWARD, GENERATE = "forward", "generate"  # the workloads: a row without one is from before generation, a forward one
# A generate cell's figures besides its time that a cell over rounds gives as the median over its ok rounds.
ROUND_MEDIANS: tuple[str, ...] = ("ttft_s", "tpot_s", "tpot_p90_s")


@dataclass(frozen=True)
class Timing:
    """Which columns of a results row are a round's time (`median`, else `fallback` where blank) and its raw samples."""

    median: str = "median_s"
    samples: str = "samples_s"
    fallback: str | None = "mean_s"  # files that hold no median


CALL = Timing()  # the whole timed call (a generate cell's: every token)
TTFT = Timing("ttft_s", "ttft_samples_s", None)  # a generate cell's time to first token


@dataclass(frozen=True)
class Run:
    """One run folder: its rows (`load_run`) and each environment's environment.json, by the environment's name."""

    path: Path
    rows: pd.DataFrame
    environments: dict[str, dict[str, Any]]


def collapse_rounds(rows: pd.DataFrame, timing: Timing = CALL) -> pd.DataFrame:
    """One row per environment and cell over its rounds (the kept attempt of each round).

    `time_s` is the median over the cell's `ok` rounds of each round's `median_s` (`timing` names the columns); `rounds` counts
    those rounds and `round_spread_pct` is their range over `time_s` (%); `values` are what an
    interval resamples: the per-round medians with two rounds or more (`values_over` "rounds"),
    else the one round's raw samples ("samples"); `samples` are the raw samples of every `ok` round,
    pooled (what a rank test compares), `round_samples` each `ok` round's samples (`analysis.variance`);
    `disturbed` is true when any kept round was; the ROUND_MEDIANS that the rows have are the median over the `ok` rounds.
    The status is `ok` when any round is, else that of the last round.
    """
    if rows.empty:
        return rows.assign(time_s=pd.Series(dtype=float), rounds=pd.Series(dtype=int), round_spread_pct=pd.Series(dtype=float),
                           values=pd.Series(dtype=object), values_over=pd.Series(dtype=str), samples=pd.Series(dtype=object),
                           round_samples=pd.Series(dtype=object))  # fmt: skip
    rows = rows.assign(_ok=rows["status"] == status.OK, _disturbed=is_true(rows["disturbed"]) if "disturbed" in rows else False)
    # A round's time: its median per call (its mean in files that hold no median).
    rows["_round_s"] = pd.to_numeric(rows[timing.median], errors="coerce")
    if timing.fallback:
        rows["_round_s"] = rows["_round_s"].fillna(pd.to_numeric(rows[timing.fallback], errors="coerce"))
    round_medians = [column for column in ROUND_MEDIANS if column in rows]
    records = []
    for _, cell in rows.groupby(["environment", *CELL_KEY], sort=False):
        ok = cell[cell["_ok"]]
        first = (ok if len(ok) else cell.iloc[[-1]]).iloc[0].to_dict()
        medians = ok["_round_s"].dropna().tolist()
        time_s = float(np.median(medians)) if medians else math.nan
        many = len(medians) > 1
        records.append({
            **first, "time_s": time_s, "rounds": len(medians),
            "round_spread_pct": (max(medians) - min(medians)) / time_s * 100 if many else math.nan,
            "values": medians if many else (list(first[timing.samples]) or [time_s]) if medians else [],
            "values_over": "rounds" if many else "samples", "disturbed": bool(cell.loc[cell["_ok"], "_disturbed"].any()),
            "samples": list(itertools.chain.from_iterable(ok[timing.samples])), "round_samples": [list(samples) for samples in ok[timing.samples]],
            **({column: pd.to_numeric(ok[column], errors="coerce").median() for column in round_medians} if len(ok) else {}),
        })  # fmt: skip
    return pd.DataFrame(records).drop(columns=["_ok", "_disturbed", "_round_s"])


def read_run(run_dir: str | os.PathLike[str], timing: Timing = CALL) -> Run:
    """A run folder: every row of its environments (each `<run_dir>/<env>/`, or the folder's own results), one per
    cell timed one call at a time over its rounds (`collapse_rounds` with `timing`; a load scenario's rows are left out), with `run` (the folder's name), `machine` and `device_type`
    added (`prepare`), each model by its short name (`short_model_names`), and each environment's environment.json.
    FileNotFoundError when `run_dir` is not a folder."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run_dirs: {run_dir} is not a folder")
    frames, environments = [], {}
    for env_dir in environment_dirs(run_dir):
        cells = read_results(env_dir)
        rows, info = collapse_rounds(cells[cells["scenario"] == CELL_SCENARIO], timing), read_environment(env_dir)
        if rows.empty:
            continue
        frames.append(rows.assign(run=run_dir.name, machine=[machine_label(info, device) for device in rows["device"].astype(str)]))
        environments.update(dict.fromkeys(rows["environment"], info))
    if not frames:  # no cell yet, or a run of load scenarios only: every column, no row
        empty = collapse_rounds(pd.DataFrame(columns=list(COLUMNS)), timing).assign(run=pd.Series(dtype=str), machine=pd.Series(dtype=str))
        return Run(run_dir, prepare(short_model_names(empty)), {})
    return Run(run_dir, prepare(short_model_names(pd.concat(frames, ignore_index=True), run_models(run_dir))), environments)


def load_run(run_dir: str | os.PathLike[str], timing: Timing = CALL) -> pd.DataFrame:
    """Every row of a run's environments (`read_run`: the cells timed one call at a time; a load scenario's rows are
    not among them), with `run`, `machine` and `device_type` columns added."""
    return read_run(run_dir, timing).rows


def load_runs(run_dirs: Iterable[str | os.PathLike[str]], timing: Timing = CALL) -> pd.DataFrame:
    """The rows of several runs, each cell's time taken as `timing` says. An environment name found in more than one
    run becomes `<env>@<run>`."""
    frames = [load_run(run_dir, timing) for run_dir in run_dirs]
    if not frames:
        raise ValueError("run_dirs: give at least one run folder")
    rows = pd.concat(frames, ignore_index=True)
    runs_per_env = rows.groupby("environment")["run"].nunique()
    shared = set(runs_per_env[runs_per_env > 1].index)
    rows["environment"] = [f"{env}@{run}" if env in shared else env for env, run in zip(rows["environment"], rows["run"])]
    return rows


def run_models(run_dir: str | os.PathLike[str]) -> list[str]:
    """Every model a run's environments were given (each environment.json's `parameters.models`), in order."""
    given = ((read_environment(env_dir).get("parameters") or {}).get("models") or [] for env_dir in environment_dirs(run_dir))
    return list(dict.fromkeys(itertools.chain.from_iterable(given)))


def short_model_names(rows: pd.DataFrame, among: Iterable[str] = ()) -> pd.DataFrame:
    """`rows` with each `model` by its short name (`config.models.short_names`: a folder by its name, unique among the
    rows' models and `among`, e.g. `run_models`), and the name the run gave it (a folder's path) in `model_path`.
    Rows that have a `model_path` already keep their names."""
    named = rows["model_path"].notna() if "model_path" in rows else pd.Series(False, index=rows.index)
    paths = rows["model_path"].where(named, rows["model"]) if "model_path" in rows else rows["model"]
    names = short_names([*map(str, paths), *among])
    return rows.assign(model_path=paths, model=rows["model"].where(named, [names[str(path)] for path in paths]))


def default_run_dirs(outputs: str | os.PathLike[str] | None = None) -> list[Path]:
    """The newest run under `outputs/` (the kit's, by default) that has results, else `outputs/reference`."""
    outputs = Path(outputs) if outputs is not None else OUTPUTS_DIR
    runs = [p for p in outputs.glob("*") if p.is_dir() and p.name != REFERENCE_RUN and environment_dirs(p)]
    if runs:
        return [max(runs, key=lambda run: max(last_written(d) for d in environment_dirs(run)))]
    if (outputs / REFERENCE_RUN).is_dir():
        return [outputs / REFERENCE_RUN]
    raise FileNotFoundError(f"run_dirs: no run with results under {outputs}; run `python -m benchlib run` or pass run folders")


def prepare(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` ready for the tables: `device_type` (cpu, cuda) and `machine` filled in where missing, `precision`
    float32 where missing or blank, `options` "" (the backend's defaults) where missing, `workload` FORWARD where missing or blank,
    `max_abs_diff` and `agreement` numbers (NaN where not compared), `weights` random where missing, sizes as integers, and each
    cell's `time_s`, `values` and `disturbed` (from `collapse_rounds`, or from the row itself)."""
    rows = rows.copy()
    if "machine" not in rows:
        rows["machine"] = UNKNOWN_MACHINE
    precisions = rows["precision"] if "precision" in rows else [None] * len(rows)
    rows["precision"] = [p if isinstance(p, str) and p else DEFAULT_PRECISION for p in precisions]
    options = rows["options"] if "options" in rows else [None] * len(rows)
    rows["options"] = [o if isinstance(o, str) else "" for o in options]
    rows["workload"] = workload_of(rows)
    rows["max_abs_diff"] = pd.to_numeric(rows["max_abs_diff"], errors="coerce") if "max_abs_diff" in rows else math.nan
    rows["agreement"] = pd.to_numeric(rows["agreement"], errors="coerce") if "agreement" in rows else math.nan
    weights = rows["weights"] if "weights" in rows else [None] * len(rows)
    rows["weights"] = [w if isinstance(w, str) and w else "random" for w in weights]  # files from before weights: the catalogue's
    rows["device_type"] = [str(d).split(":")[0] for d in rows["device"]]
    rows["mean_s"] = pd.to_numeric(rows["mean_s"], errors="coerce")
    if "time_s" not in rows:  # rows not loaded through `collapse_rounds` (hand-made ones)
        rows["time_s"] = pd.to_numeric(rows["median_s"], errors="coerce") if "median_s" in rows else rows["mean_s"]
    rows["time_s"] = pd.to_numeric(rows["time_s"], errors="coerce")
    if "values" not in rows:
        rows["values"] = [[t] if pd.notna(t) else [] for t in rows["time_s"]]
        rows["values_over"] = "samples"
    rows["disturbed"] = is_true(rows["disturbed"]) if "disturbed" in rows else False
    for column in ("batch_size", "sequence_length"):
        rows[column] = rows[column].astype(int)
    return rows


def workload_of(rows: pd.DataFrame) -> list[str]:
    """Each row's workload: FORWARD where the row has none (a file from before generation)."""
    workloads = rows["workload"] if "workload" in rows else [None] * len(rows)
    return [w if isinstance(w, str) and w else FORWARD for w in workloads]


def by_workload(rows: pd.DataFrame, workload: str) -> pd.DataFrame:
    """The rows of one workload (FORWARD or GENERATE), in their order."""
    if workload not in (FORWARD, GENERATE):
        raise ValueError(f"workload must be {FORWARD} or {GENERATE}, not {workload!r}")
    return rows[pd.Series(workload_of(rows), index=rows.index, dtype=object) == workload].reset_index(drop=True)


def groups(rows: pd.DataFrame) -> Iterable[tuple[str, str, pd.DataFrame]]:
    """(device type, machine, rows) for every device type and machine, in order of appearance."""
    for (device, machine), group in rows.groupby(list(GROUP), sort=False):
        yield device, machine, group


def environments(rows: pd.DataFrame) -> list[str]:
    """The environments of `rows`, in order of appearance."""
    return list(dict.fromkeys(rows["environment"]))


def shape_name(batch_size: int, sequence_length: int) -> str:
    """The study's name for a shape: `<batch>x<sequence>`."""
    return f"{batch_size}x{sequence_length}"
