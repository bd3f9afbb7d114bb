"""Killing a benchmark kernel at a known point, the same on a fast or a slow machine."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from benchlib import read_results
from benchlib.store.recovery import read_in_flight
from benchlib.store.results import rows_written


def has_row(env_dir: Path, cell: dict[str, Any]) -> bool | None:
    """Whether results.csv holds a row for the in-flight record `cell` (its model, shape, round and attempt);
    None when the file cannot be read whole now."""
    try:
        rows = read_results(env_dir, every_attempt=True)
    except (OSError, ValueError, pd.errors.ParserError):
        return None
    attempts = pd.to_numeric(rows["attempt"], errors="coerce").fillna(1)
    same = (
        (rows["model"] == cell["model"]) & (rows["batch_size"] == cell["batch_size"]) & (rows["sequence_length"] == cell["sequence_length"])
        & (rows["round"] == cell.get("round", 1)) & (attempts == cell.get("attempt", 1))
    )  # fmt: skip
    return bool(same.any())


def kill_mid_cell(
    env_dir: Path, runner: subprocess.Popen, min_rows: int = 0, wanted: Callable[[dict[str, Any]], bool] = lambda cell: True,
    timeout_s: float = 300, signum: signal.Signals = signal.SIGKILL,
) -> dict[str, Any]:  # fmt: skip
    """Kill the kernel writing into `env_dir` with `signum` once `min_rows` rows are written and a `wanted` cell is in
    flight with no row yet (the kernel is in the speed probe before its model, building it, or measuring it); return
    that cell's in-flight record. The kernel is stopped (SIGSTOP) while this is checked, so that the cell cannot
    end between the check and the kill, however fast the machine: the cell returned is the one that the kit
    must record as `crashed`. A signal other than SIGKILL waits until the kernel is continued (SIGCONT), and
    is then delivered before it runs anything else."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert time.monotonic() < deadline and runner.poll() is None, f"no wanted cell was in flight after {min_rows} rows in {env_dir}"
        marker = read_in_flight(env_dir)
        if marker and wanted(marker) and rows_written(env_dir) >= min_rows:
            pid = marker["pid"]
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            now = read_in_flight(env_dir)  # what the stopped kernel is doing
            if now and now["pid"] == pid and wanted(now) and has_row(env_dir, now) is False:
                os.kill(pid, signum)
                if signum != signal.SIGKILL:
                    os.kill(pid, signal.SIGCONT)
                return now
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.02)
