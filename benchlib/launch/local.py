"""A run on this machine: the benchmark notebook executed once per environment and round, each in a fresh
kernel, one after another; a kernel that dies mid-cell is recorded and restarted; the machine's limits
are measured first. Each environment writes into `<run>/<env>/`: the executed notebook of each round
(the record), `results.csv` and `environment.json`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchlib.backends import backend_info
from benchlib.config.jobs import EnvironmentJob, round_schedule, rounds_of
from benchlib.launch.kernel import KernelWatch, crash_verdict
from benchlib.launch.notebook import describe_failure, execute_notebook
from benchlib.launch.progress import ResultsProgress
from benchlib.paths import BENCHMARK_NOTEBOOK, LIMITS_NOTEBOOK
from benchlib.store.layout import KERNEL_LOG, limits_notebook, results_path
from benchlib.store.limits import read_limits
from benchlib.store.locking import FolderInUseError, environment_lock
from benchlib.store.recovery import record_crash, set_aside_results
from benchlib.store.results import rows_written

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
) -> EnvironmentOutcome:
    """Execute the benchmark notebook for `job` in a fresh kernel; the executed copy goes to its output_dir.

    When the kernel dies while a cell is in flight, that cell gets a `crashed` row (`oom` when it
    died at the job's memory limit: `crash_verdict`) and the environment starts again in a new
    kernel, which resumes after it (at most `max_restarts` times). `force` first sets the
    folder's results aside, so that every cell is measured again.
    """
    start = time.perf_counter()
    try:
        job.output_dir.mkdir(parents=True, exist_ok=True)
        with environment_lock(job.output_dir):  # refuse now if another run writes here
            if force and (aside := set_aside_results(job.output_dir)):
                report(f"{job.name}: earlier results set aside as {aside}")
    except (OSError, FolderInUseError) as exc:
        return EnvironmentOutcome(job.name, False, time.perf_counter() - start, str(exc))
    restarts = 0
    while True:
        watch = KernelWatch(job.output_dir)
        try:
            with ResultsProgress(job, enabled=progress), watch:
                execute_notebook(notebook, job.executed_notebook, job.notebook_parameters(), job.output_dir / KERNEL_LOG, watch)
        except Exception as exc:  # the notebook raised, its kernel died or could not start: this environment only
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


def run_jobs(
    jobs: Sequence[EnvironmentJob],
    notebook: Path = BENCHMARK_NOTEBOOK,
    progress: bool = True,
    report: Callable[[str], None] = print,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    force: bool = False,
) -> list[EnvironmentOutcome]:
    """Run every job, round after round (`round_schedule`); one that fails does not stop the others."""
    schedule = round_schedule(jobs)
    rounds = rounds_of(jobs)
    outcomes = []
    for index, job in enumerate(schedule, start=1):
        p = job.params
        step = f"[{index}/{len(schedule)}]" + (f" round {p.current_round} of {rounds}:" if rounds > 1 else "")
        report(f"{step} {job.name}: {job.describe()}")
        outcome = run_job(job, notebook, progress, max_restarts, force and p.current_round == 1, report)
        if rounds > 1:
            outcome = dataclasses.replace(outcome, name=f"{job.name} (round {p.current_round})")
        if outcome.succeeded:
            report(f"{step} {job.name}: done in {format_duration(outcome.elapsed_s)}, {rows_written(job.output_dir, p.current_round)} rows in {results_path(job.output_dir)}")
        else:
            report(f"{step} {job.name}: FAILED after {format_duration(outcome.elapsed_s)}: {outcome.error} (record: {job.executed_notebook})")
        outcomes.append(outcome)
    return outcomes


def needs_machine_limits(jobs: Sequence[EnvironmentJob]) -> bool:
    """Whether the summary has a use for the machine's limits: the roofline places forward passes only (a generate
    call has no FLOPs figure), so a run of generation alone does not measure them."""
    return any(job.params.workload == "forward" for job in jobs)


def measure_machine_limits(jobs: Sequence[EnvironmentJob], notebook: Path = LIMITS_NOTEBOOK, report: Callable[[str], None] = print) -> None:
    """The machine's limits (peak GEMM rate, memory bandwidth) for each device of the run, measured once per run:
    `notebooks/machine_limits.ipynb` in a fresh kernel, with the thread count of the device's first environment,
    into `<run>/machine_limits.json` (its record: `<run>/machine_limits.<device>.ipynb`). A failure is reported
    and the run goes on; the summary then leaves the roofline out."""
    first = {job.params.device: job for job in reversed(jobs)}
    for device, job in reversed(first.items()):
        run_dir = job.output_dir.parent
        if read_limits(run_dir, device):
            continue
        start = time.perf_counter()
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            parameters = {"device": device, "num_threads": job.params.num_threads, "output_dir": str(run_dir)}
            execute_notebook(notebook, limits_notebook(run_dir, device), parameters, run_dir / KERNEL_LOG)
        except Exception as exc:  # the environments do not depend on it
            report(f"machine limits ({device}): not measured ({describe_failure(exc)}); the summary leaves the roofline out")
            continue
        limits = read_limits(run_dir, device) or {}
        report(
            f"machine limits ({device}): float32 peak {limits.get('float32_flops_per_s', 0) / 1e9:.0f} GFLOP/s, "
            f"bandwidth {limits.get('bandwidth_bytes_per_s', 0) / 1e9:.1f} GB/s, in {format_duration(time.perf_counter() - start)}"
        )


def format_duration(seconds: float) -> str:
    """'42 s' or '3 min 05 s'."""
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
