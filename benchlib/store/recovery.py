"""Nothing lost: the cell in flight (and how its kernel stopped), rows cut off by a killed process, results set aside by --force."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from benchlib import status
from benchlib.store.layout import IN_FLIGHT_FILE, results_path, set_aside_path
from benchlib.store.results import CELL_SCENARIO, ResultsWriter, make_row, read_results, repair_results

RUNNER_PID_ENV = "BENCHLIB_RUNNER_PID"  # set by `benchlib run` in the environment of the kernels it starts


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def in_flight_path(output_dir: Path) -> Path:
    """The marker of the cell in flight in an environment folder."""
    return Path(output_dir) / IN_FLIGHT_FILE


def mark_in_flight(output_dir: Path, cell: dict[str, Any]) -> None:
    """Record, durably, that `cell` (environment fields, model and shape) is being measured, by this process
    and, in a kernel that `benchlib run` started, for which runner (`runner_pid`)."""
    path = in_flight_path(output_dir)
    temporary = path.with_suffix(".tmp")
    runner = {"runner_pid": int(pid)} if (pid := os.environ.get(RUNNER_PID_ENV)) else {}
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump({**cell, "started": _now(), "pid": os.getpid(), **runner}, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def clear_in_flight(output_dir: Path) -> None:
    """The cell in flight has its row: forget it."""
    (in_flight_path(output_dir)).unlink(missing_ok=True)


def read_in_flight(output_dir: Path) -> dict[str, Any] | None:
    """The cell that was being measured when the kernel stopped, if any."""
    path = in_flight_path(output_dir)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def record_crash(output_dir: Path, reason: str, state: str = status.CRASHED) -> dict[str, Any] | None:
    """Write a row (`crashed`, or `state`) for the cell in flight (if any) and clear the marker; return that cell.

    A cell whose row was written just before its process stopped (between the row and clearing the
    marker) keeps that row and gets no second one; None is returned then.
    """
    cell = read_in_flight(output_dir)
    if cell is None:
        return None
    repair_results(results_path(output_dir))
    if _has_row(results_path(output_dir), cell):
        clear_in_flight(output_dir)
        return None
    with ResultsWriter(output_dir) as writer:
        writer.append(make_row(cell, state, reason=f"{reason} (measuring since {cell.get('started', '?')})"))
    clear_in_flight(output_dir)
    return cell


def _has_row(path: Path, cell: dict[str, Any]) -> bool:
    """Whether `path` already holds a row for `cell`'s model, shape, scenario, round and attempt (a trial's is not the cell's)."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    return bool(row_of_cell(read_results(path, every_attempt=True), cell).any())


def row_of_cell(rows: pd.DataFrame, cell: dict[str, Any]) -> pd.Series:
    """Which of `rows` (read with every attempt) are the row of the in-flight record `cell`: its model, shape, scenario,
    round and attempt."""
    attempts = pd.to_numeric(rows["attempt"], errors="coerce").fillna(1)
    match = (rows["model"] == cell.get("model")) & (rows["batch_size"] == cell.get("batch_size")) & (rows["sequence_length"] == cell.get("sequence_length"))
    match &= rows["scenario"] == (cell.get("scenario") or CELL_SCENARIO)
    return match & (rows["round"] == cell.get("round", 1)) & (attempts == cell.get("attempt", 1))


def resolve_in_flight(output_dir: Path) -> None:
    """On resuming, settle the cell left in flight by a process that stopped before writing its row.

    A runner (`benchlib run`, or a Dask worker running its environment) records how its kernel ended
    (`crashed`, `oom`) before another kernel writes into the folder; a cell that one of its kernels left
    in flight therefore means that the runner was stopped too (killed, SIGTERM, a closed session, a lost
    machine) and took its kernel with it. The cell was not at fault: it is measured again (a cell that
    brought the whole machine down would be tried again by each rerun). A cell left by any other kernel
    (papermill alone, JupyterLab), whose end nobody recorded, gets a `crashed` row.
    """
    if (read_in_flight(output_dir) or {}).get("runner_pid"):
        clear_in_flight(output_dir)
    else:
        record_crash(output_dir, "the process measuring this cell stopped before writing its row")


def set_aside_results(output_dir: Path) -> Path | None:
    """Move an environment's results.csv to results.<timestamp>.csv (for --force); return the new path."""
    path = results_path(output_dir)
    if not path.exists():
        return None
    target = set_aside_path(output_dir, datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    os.replace(path, target)
    clear_in_flight(output_dir)
    return target
