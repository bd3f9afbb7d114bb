"""A run on this machine: the benchmark notebook executed once per environment and round, each in a fresh
kernel, one after another (`launch.execution`; a tune's points and confirmation: `launch.tune`); the machine's
limits are measured first (or reused: those measured today on this machine). Each environment writes into
`<run>/<env>/`: the executed notebook of each round (the record), `results.csv` and `environment.json`.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchlib.config.jobs import EnvironmentJob, round_schedule, rounds_of
from benchlib.launch.estimate import Remaining
from benchlib.launch.execution import DEFAULT_MAX_RESTARTS, EnvironmentOutcome, run_job
from benchlib.launch.notebook import describe_failure, execute_notebook
from benchlib.launch.tune import Tune
from benchlib.machine import cpu_model, gpus, package_version
from benchlib.measure import peak
from benchlib.measure.device_state import ENERGY_SOURCES, make_monitor
from benchlib.paths import BENCHMARK_NOTEBOOK, LIMITS_NOTEBOOK
from benchlib.store.disk import raise_if_disk_full
from benchlib.store.layout import KERNEL_LOG, TUNE_DIR, TUNE_TABLE, limits_notebook, results_path
from benchlib.store.limits import keep_limits, read_limits, reuse_limits
from benchlib.store.results import rows_written


def run_jobs(
    jobs: Sequence[EnvironmentJob],
    notebook: Path = BENCHMARK_NOTEBOOK,
    progress: bool = True,
    report: Callable[[str], None] = print,
    max_restarts: int = DEFAULT_MAX_RESTARTS,
    force: bool = False,
    remaining: Remaining | None = None,
) -> list[EnvironmentOutcome]:
    """Run every job, round after round (`round_schedule`); one that fails does not stop the others, but a full disk
    stops them all (`run_job` raises a DiskFullError). With `remaining` (the run's estimate), what is left is shown
    beside the progress bar and after each environment."""
    schedule = round_schedule(jobs)
    rounds = rounds_of(jobs)
    if remaining is not None and len(remaining.cost.jobs) != len(schedule):
        remaining = None  # the estimate covers load scenarios; a grid of cells has none
    outcomes = []
    for index, job in enumerate(schedule, start=1):
        p = job.params
        step = f"[{index}/{len(schedule)}]" + (f" round {p.current_round} of {rounds}:" if rounds > 1 else "")
        report(f"{step} {job.name}: {job.describe()}")
        postfix = functools.partial(remaining.text, index - 1) if remaining is not None else None
        if p.tune is not None:  # its points and confirmation are environment runs of their own
            outcome = Tune(job, notebook, progress, max_restarts, report).run()
        else:
            outcome = run_job(job, notebook, progress, max_restarts, force and p.current_round == 1, report, postfix)
        if rounds > 1:
            outcome = dataclasses.replace(outcome, name=f"{job.name} (round {p.current_round})")
        left = f"; {remaining.text(index)}" if remaining is not None and index < len(schedule) else ""
        if outcome.succeeded:
            written = job.output_dir / TUNE_DIR / TUNE_TABLE if p.tune is not None else f"{rows_written(job.output_dir, p.current_round)} rows in {results_path(job.output_dir)}"
            report(f"{step} {job.name}: done in {format_duration(outcome.elapsed_s)}, {written}{left}")
        else:
            report(f"{step} {job.name}: FAILED after {format_duration(outcome.elapsed_s)}: {outcome.error} (record: {job.executed_notebook}){left}")
        outcomes.append(outcome)
    return outcomes


def needs_machine_limits(jobs: Sequence[EnvironmentJob]) -> bool:
    """Whether the summary has a use for the machine's limits: the roofline places forward passes only (a generate
    call has no FLOPs figure), so a run of generation alone does not measure them."""
    return any(job.params.workload == "forward" for job in jobs)


def measure_machine_limits(jobs: Sequence[EnvironmentJob], notebook: Path = LIMITS_NOTEBOOK, report: Callable[[str], None] = print) -> None:
    """The machine's limits (peak GEMM rate, memory bandwidth) for each device of the run, measured once per run:
    `notebooks/machine_limits.ipynb` in a fresh kernel, with the thread count of the device's first environment,
    into `<run>/machine_limits.json` (its record: `<run>/machine_limits.<device>.ipynb`); or the limits measured the
    same way today on this machine, kept in the build cache (`store.limits.reuse_limits`). A failure is reported
    and the run goes on; the summary then leaves the roofline out. A full disk raises a DiskFullError."""
    first = {job.params.device: job for job in reversed(jobs)}
    for device, job in reversed(first.items()):
        run_dir = job.output_dir.parent
        if read_limits(run_dir, device):
            continue
        start = time.perf_counter()
        run_dir.mkdir(parents=True, exist_ok=True)
        key = limits_key(device, job.params.num_threads)
        if (limits := reuse_limits(run_dir, device, key)) is not None:
            report(f"machine limits ({device}): {describe_roofs(limits)}, measured at {limits['measured_at']} on this machine (reused; `benchlib cache clear` measures them again)")
            continue
        try:
            parameters = {"device": device, "num_threads": job.params.num_threads, "output_dir": str(run_dir)}
            execute_notebook(notebook, limits_notebook(run_dir, device), parameters, run_dir / KERNEL_LOG)
        except Exception as exc:  # the environments do not depend on it, but would meet a full disk too
            raise_if_disk_full(exc, run_dir)
            report(f"machine limits ({device}): not measured ({describe_failure(exc)}); the summary leaves the roofline out")
            continue
        keep_limits(run_dir, device, key)
        report(f"machine limits ({device}): {describe_roofs(read_limits(run_dir, device) or {})}, in {format_duration(time.perf_counter() - start)}")


# The switches that hold a library to fewer instruction sets (a rehearsal of a slower CPU) or hide GPUs: other roofs.
CODE_PATH_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "CUDA_VISIBLE_DEVICES")


def limits_key(device: str, num_threads: int | str | None) -> dict[str, Any]:
    """What the limits of `device` measured by this process's kernels depend on: the machine and its CPUs (GPUs), the
    CPUs this process may use, the thread setting, the code-path caps in force, torch, the measuring code, the day."""
    return {
        "device": device, "hostname": platform.node(), "cpu": cpu_model(), "gpus": gpus() if device.startswith("cuda") else [],
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "num_threads": num_threads, "caps": {name: os.environ.get(name) for name in CODE_PATH_VARIABLES},
        "torch": package_version("torch"), "method": hashlib.sha256(Path(peak.__file__).read_bytes()).hexdigest()[:16],
        "day": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
    }  # fmt: skip


def describe_roofs(limits: dict[str, Any]) -> str:
    """'float32 peak 216 GFLOP/s, bandwidth 28.3 GB/s'."""
    return f"float32 peak {limits.get('float32_flops_per_s', 0) / 1e9:.0f} GFLOP/s, bandwidth {limits.get('bandwidth_bytes_per_s', 0) / 1e9:.1f} GB/s"


def report_energy_counters(jobs: Sequence[EnvironmentJob], report: Callable[[str], None] = print) -> None:
    """Once per device of the run: the counter its energy per inference is read from (NVML's, RAPL's), or that there is
    none on this machine, and why (the energy columns are then empty)."""
    for device in dict.fromkeys(job.params.device for job in jobs):
        monitor = make_monitor(device)
        report(f"energy ({device}): {ENERGY_SOURCES[monitor.source]}" if monitor.source else f"energy ({device}): {monitor.reason}")


def format_duration(seconds: float) -> str:
    """'42 s' or '3 min 05 s'."""
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
