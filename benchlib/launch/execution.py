"""One environment's notebook execution in a fresh kernel (a round of it, or one point of a tune): started with what
its backend's options need, a kernel that dies mid-cell recorded and restarted, a full disk raised to stop the run."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchlib.backends import backend_info, kernel_variables
from benchlib.config.jobs import EnvironmentJob
from benchlib.launch.kernel import KernelWatch, crash_verdict
from benchlib.launch.notebook import describe_failure, execute_notebook
from benchlib.launch.progress import Postfix, ResultsProgress
from benchlib.measure.sweep import nothing_to_measure
from benchlib.paths import BENCHMARK_NOTEBOOK
from benchlib.store.disk import raise_if_disk_full
from benchlib.store.layout import KERNEL_LOG
from benchlib.store.locking import FolderInUseError, environment_lock
from benchlib.store.recovery import record_crash, set_aside_results

DEFAULT_MAX_RESTARTS = 3


@dataclass(frozen=True)
class EnvironmentOutcome:
    """How one environment's notebook execution ended."""

    name: str
    succeeded: bool
    elapsed_s: float
    error: str = ""


def run_job(
    job: EnvironmentJob,
    notebook: Path = BENCHMARK_NOTEBOOK,
    progress: bool = True,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    force: bool = False,
    report: Callable[[str], None] = print,
    postfix: Postfix | None = None,
) -> EnvironmentOutcome:
    """Execute the benchmark notebook for `job` in a fresh kernel; the executed copy goes to its output_dir. A rerun starts
    none where the round's record exists and its kernel would measure nothing (`sweep.nothing_to_measure`).

    When the kernel dies while a cell is in flight, that cell gets a `crashed` row (`oom` when it
    died at the job's memory limit: `crash_verdict`) and the environment starts again in a new
    kernel, which resumes after it (at most `max_restarts` times). `force` first sets the
    folder's results aside, so that every cell is measured again. `postfix` words follow the progress bar.

    A full disk, met by the kernel (a row, a LoadGen log) or by papermill (the executed notebook), raises a
    DiskFullError, its one line as worded where it was met: no cell is marked and nothing restarts, since every
    later cell and environment would fail the same way.
    """
    start = time.perf_counter()
    try:
        job.output_dir.mkdir(parents=True, exist_ok=True)
        with environment_lock(job.output_dir):  # refuse now if another run writes here
            if force and (aside := set_aside_results(job.output_dir)):
                report(f"{job.name}: earlier results set aside as {aside}")
            elif not force and job.executed_notebook.exists() and nothing_to_measure(job.params):
                report(f"{job.name}: every cell of round {job.params.current_round} has its row: nothing to measure, no kernel started")
                return EnvironmentOutcome(job.name, True, time.perf_counter() - start)
    except (OSError, FolderInUseError) as exc:
        raise_if_disk_full(exc, job.output_dir)
        return EnvironmentOutcome(job.name, False, time.perf_counter() - start, str(exc))
    restarts = 0
    while True:
        watch = KernelWatch(job.output_dir)
        try:
            with ResultsProgress(job, enabled=progress, postfix=postfix), watch:
                execute_notebook(
                    notebook, job.executed_notebook, job.notebook_parameters(), job.output_dir / KERNEL_LOG, watch,
                    kernel_variables(job.params.framework, job.params.options),
                )  # fmt: skip
        except Exception as exc:  # the notebook raised, its kernel died or could not start: this environment only
            raise_if_disk_full(exc, job.output_dir)
            error = describe_failure(exc)
            state, reason = crash_verdict(watch.end(error), job.params.memory_limit_gb, backend_info(job.params.framework).runtime())
            try:
                with environment_lock(job.output_dir):
                    crashed = record_crash(job.output_dir, reason, state)
            except FolderInUseError:
                crashed = None
            if crashed is None or restarts >= max_restarts:
                return EnvironmentOutcome(job.name, False, time.perf_counter() - start, error)
            restarts += 1
            cell = f"{crashed['model']} {crashed['batch_size']}x{crashed['sequence_length']}"
            report(f"{job.name}: the kernel stopped while measuring {cell} ({reason}); marked {state}, restarting ({restarts} of {max_restarts})")
            continue
        return EnvironmentOutcome(job.name, True, time.perf_counter() - start)
