"""Killing a benchmark kernel at a known point, the same on a fast or a slow machine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from benchlib import read_results
from benchlib.paths import PROJECT_ROOT
from benchlib.store.recovery import read_in_flight, row_of_cell
from benchlib.store.results import rows_written


def has_row(env_dir: Path, cell: dict[str, Any]) -> bool | None:
    """Whether results.csv holds a row for the in-flight record `cell` (its model, shape, scenario, round and attempt);
    None when the file cannot be read whole now."""
    try:
        rows = read_results(env_dir, every_attempt=True)
    except (OSError, ValueError, pd.errors.ParserError):
        return None
    return bool(row_of_cell(rows, cell).any())


def kill_mid_cell(
    env_dir: Path, runner: subprocess.Popen, min_rows: int = 0, wanted: Callable[[dict[str, Any]], bool] = lambda cell: True,
    timeout_s: float = 300, signum: signal.Signals = signal.SIGKILL,
) -> dict[str, Any]:  # fmt: skip
    """Kill the kernel writing into `env_dir` with `signum` once `min_rows` rows (a server's trials among them) are written
    and a `wanted` cell is in flight with no row yet (the kernel is in the speed probe before its model, building it, or
    measuring it); return that cell's in-flight record. The kernel is stopped (SIGSTOP) while this is checked, so that
    the cell cannot end between the check and the kill, however fast the machine: the cell returned is the one that the
    kit must record as `crashed`. A signal other than SIGKILL waits until the kernel is continued (SIGCONT), and is then
    delivered before it runs anything else."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert time.monotonic() < deadline and runner.poll() is None, f"no wanted cell was in flight after {min_rows} rows in {env_dir}"
        marker = read_in_flight(env_dir)
        if marker and wanted(marker) and rows_written(env_dir, trials=True) >= min_rows:
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


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """`command` started from the kit's folder (with environment `env`, else this process's), its output (both streams)
    captured as text; killed on the way out if it still runs, so that a failed test leaves no runner behind."""
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
