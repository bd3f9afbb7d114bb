"""One benchmark run: the benchmark notebook executed by papermill once per environment and round, each in a fresh kernel.

A job's parameters are merged from YAML files in the order papermill's `-f` would apply
them: the grid, then the environment, then each extra parameter file. Every job is
validated before any kernel starts. Each environment writes into `<run>/<env>/`:
the executed notebook of each round (the record), `results.csv` and `environment.json`.
With `rounds: N`, every environment runs N times, the order rotated between rounds.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from tqdm import tqdm

from benchlib import status
from benchlib.environment_info import gpus
from benchlib.locking import FolderInUseError, environment_lock
from benchlib.limits import process_memory
from benchlib.recovery import IN_FLIGHT_FILE, RUNNER_PID_ENV, KernelEnd, crash_verdict, record_crash, set_aside_results
from benchlib.params import BenchmarkParams, ParameterError, format_validation_error
from benchlib.results import RESULTS_FILE

PROJECT_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = PROJECT_ROOT / "notebooks" / "benchmark.ipynb"
LIMITS_NOTEBOOK = PROJECT_ROOT / "notebooks" / "machine_limits.ipynb"
PARAMETERS_DIR = PROJECT_ROOT / "parameters"
OUTPUTS_DIR = PROJECT_ROOT / "outputs"
EXECUTED_NOTEBOOK = "benchmark.ipynb"
KERNEL_LOG = "kernel.log"
DEFAULT_GRID = "quick"
DEFAULT_MAX_RESTARTS = 3
SETS_FILE = PARAMETERS_DIR / "sets.yaml"
ALL_ENVIRONMENTS = "all"
DEFAULT_ENVIRONMENTS: tuple[str, ...] = ("default",)  # a set of parameters/sets.yaml
ENVIRONMENT_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"


@dataclass(frozen=True)
class EnvironmentJob:
    """One environment of a run: its validated parameters and where it writes."""

    name: str
    params: BenchmarkParams
    sources: tuple[Path, ...]

    @property
    def output_dir(self) -> Path:
        return Path(self.params.output_dir)

    @property
    def cell_count(self) -> int:
        p = self.params
        return len(p.models) * len(p.batch_sizes) * len(p.sequence_lengths)

    @property
    def executed_notebook(self) -> Path:
        """The record of this round: benchmark.ipynb for round 1, benchmark.round<N>.ipynb after."""
        r = self.params.current_round
        return self.output_dir / (EXECUTED_NOTEBOOK if r == 1 else f"benchmark.round{r}.ipynb")

    def for_round(self, round_number: int) -> EnvironmentJob:
        """This job in round `round_number`."""
        return dataclasses.replace(self, params=self.params.model_copy(update={"current_round": round_number}))


@dataclass(frozen=True)
class EnvironmentOutcome:
    """How one environment's notebook execution ended."""

    name: str
    succeeded: bool
    elapsed_s: float
    error: str = ""


def available(kind: str) -> list[str]:
    """Names of the parameter files shipped in `parameters/<kind>/` ("grids" or "environments")."""
    return sorted(path.stem for path in (PARAMETERS_DIR / kind).glob("*.yaml"))


def environment_sets() -> dict[str, list[str]]:
    """The named sets of environments: parameters/sets.yaml, and `all` (this machine's devices)."""
    sets = {name: list(members) for name, members in load_parameter_file(SETS_FILE).items()}
    devices = ("cpu", "gpu") if gpus() else ("cpu",)
    sets[ALL_ENVIRONMENTS] = [name for name in available("environments") if name.split("-", 1)[0] in devices]
    return sets


def expand_environments(names: Iterable[str | Path]) -> list[str | Path]:
    """`names` with each set's name replaced by its environments (in order, each once)."""
    sets = environment_sets()
    expanded = [member for name in names for member in (sets.get(str(name), [name]))]
    return list(dict.fromkeys(expanded))


def resolve_parameter_file(name: str | Path, kind: str | None = None) -> Path:
    """A YAML file given by path, or (with `kind`) by name in `parameters/<kind>/`."""
    path = Path(name)
    if kind is None or path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        if not path.is_file():
            raise ParameterError(f"{path}: no such parameter file")
        return path
    shipped = PARAMETERS_DIR / kind / f"{name}.yaml"
    if not shipped.is_file():
        sets = f"; sets: {', '.join(environment_sets())}" if kind == "environments" else ""
        raise ParameterError(f"{kind[:-1]} {name!r} not found; available: {', '.join(available(kind))}{sets} (or a path to a .yaml file)")
    return shipped


def load_parameter_file(path: Path) -> dict[str, Any]:
    """The mapping in a YAML parameter file; ParameterError naming the file otherwise."""
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ParameterError(f"{path}: unreadable YAML: {where}{exc.problem}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise ParameterError(f"{path}: unreadable YAML: {' '.join(str(exc).split())}") from None
    if values is None:
        return {}
    if not isinstance(values, dict) or not all(isinstance(key, str) for key in values):
        raise ParameterError(f"{path}: must be a mapping of parameter names to values")
    return values


def merge_parameters(files: Iterable[Path]) -> tuple[dict[str, Any], dict[str, Path]]:
    """Values of `files`, later files overriding earlier ones (as papermill's repeated `-f`), and the file each came from."""
    merged: dict[str, Any] = {}
    origin: dict[str, Path] = {}
    for path in files:
        values = load_parameter_file(path)
        merged.update(values)
        origin.update(dict.fromkeys(values, path))
    return merged, origin


def make_job(run_dir: Path, grid_file: Path, env_file: Path, extra_files: Sequence[Path] = ()) -> EnvironmentJob:
    """The job of one environment file, its parameters merged as papermill's `-f` would; output_dir is `<run_dir>/<environment>`."""
    sources = (grid_file, env_file, *extra_files)
    values, origin = merge_parameters(sources)
    name = str(values.setdefault("environment", env_file.stem))
    if not re.fullmatch(ENVIRONMENT_NAME, name):
        source = origin.get("environment", env_file)
        raise ParameterError(f"{source}: environment: {name!r} must start with a letter or digit and hold only letters, digits, '.', '_' or '-' (it names a folder)")
    values["output_dir"] = str(run_dir / name)
    try:
        return EnvironmentJob(name, BenchmarkParams(**values), sources)
    except ValidationError as error:
        lines = format_validation_error(error, source=name).splitlines()
        fields = [str(problem["loc"][0]) if problem["loc"] else "" for problem in error.errors()]
        raise ParameterError("\n".join(f"{line} (from {origin[f]})" if f in origin else line for line, f in zip(lines, fields))) from None


def unwritable(folder: Path) -> str | None:
    """Why `folder` cannot be created or written, or None when it can."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"--out: {folder}: cannot be created, {existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"--out: {folder}: cannot be written, {existing} is not writable"
    return None


def plan_run(
    run_dir: Path,
    grid: str | Path = DEFAULT_GRID,
    environments: Sequence[str | Path] = DEFAULT_ENVIRONMENTS,
    params_files: Sequence[str | Path] = (),
) -> list[EnvironmentJob]:
    """The validated jobs of a run, in order; ParameterError lists every problem found (one line each)."""
    run_dir = run_dir.absolute()  # the kernel works in the notebook's folder
    problems: list[str] = [problem] if (problem := unwritable(run_dir)) else []

    def resolved(name: str | Path, kind: str | None) -> Path | None:
        try:
            return resolve_parameter_file(name, kind)
        except ParameterError as error:
            problems.append(str(error))
            return None

    grid_file = resolved(grid, "grids")
    extra_files = [path for f in params_files if (path := resolved(f, None))]
    env_files = [path for e in expand_environments(environments) if (path := resolved(e, "environments"))]
    jobs = []
    if grid_file and len(extra_files) == len(params_files):
        for env_file in env_files:
            try:
                jobs.append(make_job(run_dir, grid_file, env_file, extra_files))
            except ParameterError as error:
                problems.append(str(error))
    names = [job.name for job in jobs]
    problems += [f"environment {n!r} appears more than once" for n in sorted({n for n in names if names.count(n) > 1})]
    if problems:
        raise ParameterError("\n".join(dict.fromkeys(problems)))  # a bad shared file is named once
    return jobs


def notebook_parameters(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The benchmark parameters defined in a notebook's namespace (its parameters cell and any injected by papermill)."""
    return {name: namespace[name] for name in BenchmarkParams.model_fields if name in namespace}


def rows_written(output_dir: Path, round_number: int | None = None) -> int:
    """Number of rows in `<output_dir>/results.csv` (of round `round_number` only, when given; 0 when there is none yet)."""
    try:
        with open(output_dir / RESULTS_FILE, encoding="utf-8", newline="") as file:
            rows = csv.DictReader(file)
            if round_number is None:
                return sum(1 for _ in rows)
            return sum(1 for row in rows if (row.get("round") or "1") == str(round_number))
    except OSError:
        return 0


class _ResultsProgress:
    """A progress bar over the cells of one environment, fed by the rows its kernel writes."""

    def __init__(self, job: EnvironmentJob, enabled: bool, interval_s: float = 1.0) -> None:
        self._job, self._interval_s = job, interval_s
        self._stop = threading.Event()
        self._bar = tqdm(total=job.cell_count, desc=job.name, unit="cell", disable=not enabled, dynamic_ncols=True)
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._refresh()

    def _refresh(self) -> None:
        rows = min(rows_written(self._job.output_dir, self._job.params.current_round), self._bar.total)
        if rows != self._bar.n:
            self._bar.update(rows - self._bar.n)

    def __enter__(self) -> _ResultsProgress:
        self._refresh()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._refresh()
        self._bar.close()


class KernelWatch:
    """The kernel process of one notebook execution, watched from outside: how it ended, and its memory.

    A thread reads the process's data and resident memory (/proc/<pid>/status) a few times a
    second and keeps the highest of each since the cell now in flight (`in_flight.json`) began;
    nothing runs inside the kernel. Where /proc is missing, no memory is seen.
    """

    def __init__(self, output_dir: Path, interval_s: float = 0.2) -> None:
        self.process: subprocess.Popen[bytes] | None = None  # set by the kernel manager once it starts
        self.peak_memory: tuple[int, int] | None = None
        self._marker, self._interval_s = Path(output_dir) / IN_FLIGHT_FILE, interval_s
        self._cell: tuple[int, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def _sample(self) -> None:
        try:
            marker = self._marker.stat()
            cell = (marker.st_ino, marker.st_mtime_ns)
        except OSError:
            cell = None
        if cell != self._cell:  # another cell, or none, is in flight: its peak starts afresh
            self._cell, self.peak_memory = cell, None
        process = self.process
        if cell is None or process is None or process.returncode is not None:
            return
        if memory := process_memory(process.pid):
            peak = self.peak_memory or (0, 0)
            self.peak_memory = (max(peak[0], memory[0]), max(peak[1], memory[1]))

    def end(self, error: str) -> KernelEnd:
        """How the kernel stopped: papermill's `error`, the signal that ended its process (if one did), its peak memory."""
        code = self.process.poll() if self.process else None
        if code is None or code >= 0:
            return KernelEnd(error, None, self.peak_memory)
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return KernelEnd(error, name, self.peak_memory)

    def __enter__(self) -> KernelWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _describe_failure(exc: BaseException) -> str:
    """One line for a failed execution: the notebook's own exception where papermill reports one."""
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename:
        message = " ".join(str(evalue).split())
        return f"{ename}: {message}" if message else str(ename)
    return status.describe(exc)


def kernel_manager_logging_to(path: Path, watch: KernelWatch | None = None) -> type:
    """A kernel manager class whose kernels write their process's stdout and stderr to `path`.

    Framework start-up messages then stay out of the console and remain for a post-mortem.
    With `watch`, the kernel's process is handed to it when the kernel starts. The kernel gets this
    process's PID in RUNNER_PID_ENV, which marks its cells in flight as a runner's (`resolve_in_flight`).

    A kernel ends with the process that started it, even one killed by SIGKILL: jupyter_client passes
    that PID to the kernel (JPY_PARENT_PID), and ipykernel's ParentPollerUnix, a thread of the kernel,
    polls its parent every second and exits once it has changed. That follows the process, not the
    thread that started the kernel, so it holds as well for a Dask worker, which runs environments in
    one of its threads; Linux's PR_SET_PDEATHSIG would kill the kernel when that thread ends, and would
    need Popen's preexec_fn, which is unsafe in a process with threads. tests/test_runner_death.py
    checks it, since the folder's lock (held by the kernel) depends on it.
    """
    from jupyter_client import AsyncKernelManager

    class LoggingKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kw: Any) -> None:
            with open(path, "ab") as log:  # the kernel process keeps its own copy of the descriptor
                await super().start_kernel(stdout=log, stderr=log, env={**os.environ, RUNNER_PID_ENV: str(os.getpid())}, **kw)
            if watch is not None:
                watch.process = getattr(self.provisioner, "process", None)  # a local kernel's Popen

    return LoggingKernelManager


def run_one_environment(
    job: EnvironmentJob,
    notebook: Path = NOTEBOOK,
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
    import papermill

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
            with _ResultsProgress(job, enabled=progress), watch:
                papermill.execute_notebook(
                    str(notebook),
                    str(job.executed_notebook),
                    parameters=job.params.model_dump(exclude_unset=True),
                    cwd=str(notebook.parent),
                    progress_bar=False,
                    kernel_manager_class=kernel_manager_logging_to(job.output_dir / KERNEL_LOG, watch),
                )
        except Exception as exc:  # the notebook raised, its kernel died or could not start: this environment only
            error = _describe_failure(exc)
            state, reason = crash_verdict(watch.end(error), job.params.memory_limit_gb)
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


def run_environments(
    jobs: Sequence[EnvironmentJob],
    notebook: Path = NOTEBOOK,
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
        report(
            f"{step} {job.name}: {p.framework}/{p.mode} on {p.device}, {job.cell_count} cells "
            f"({len(p.models)} models x {len(p.batch_sizes)} batch sizes x {len(p.sequence_lengths)} sequence lengths)"
        )
        outcome = run_one_environment(job, notebook, progress, max_restarts, force and p.current_round == 1, report)
        if rounds > 1:
            outcome = dataclasses.replace(outcome, name=f"{job.name} (round {p.current_round})")
        if outcome.succeeded:
            report(f"{step} {job.name}: done in {format_duration(outcome.elapsed_s)}, {rows_written(job.output_dir, p.current_round)} rows in {job.output_dir / RESULTS_FILE}")
        else:
            report(f"{step} {job.name}: FAILED after {format_duration(outcome.elapsed_s)}: {outcome.error} (record: {job.executed_notebook})")
        outcomes.append(outcome)
    return outcomes


def rounds_of(jobs: Sequence[EnvironmentJob]) -> int:
    """How many rounds a run of `jobs` has: the most any of them asks for (0 without jobs)."""
    return max((job.params.rounds for job in jobs), default=0)


def round_schedule(jobs: Sequence[EnvironmentJob]) -> list[EnvironmentJob]:
    """Every job of every round, in the order they run: round after round, the environments' order rotated
    by one each round (A B C D, then B C D A, ...), so that slow drift of the machine falls on all alike."""
    schedule: list[EnvironmentJob] = []
    for round_number in range(1, rounds_of(jobs) + 1):
        shift = (round_number - 1) % len(jobs)
        schedule += [job.for_round(round_number) for job in [*jobs[shift:], *jobs[:shift]] if round_number <= job.params.rounds]
    return schedule


def measure_machine_limits(jobs: Sequence[EnvironmentJob], notebook: Path = LIMITS_NOTEBOOK, report: Callable[[str], None] = print) -> None:
    """The machine's limits (peak GEMM rate, memory bandwidth) for each device of the run, measured once per run:
    `notebooks/machine_limits.ipynb` in a fresh kernel, with the thread count of the device's first environment,
    into `<run>/machine_limits.json` (its record: `<run>/machine_limits.<device>.ipynb`). A failure is reported
    and the run goes on; the summary then leaves the roofline out."""
    import papermill

    from benchlib.machine_limits import read_limits

    first = {job.params.device: job for job in reversed(jobs)}
    for device, job in reversed(first.items()):
        run_dir = job.output_dir.parent
        if read_limits(run_dir, device):
            continue
        start = time.perf_counter()
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            papermill.execute_notebook(
                str(notebook), str(run_dir / f"machine_limits.{device.replace(':', '-')}.ipynb"),
                parameters={"device": device, "num_threads": job.params.num_threads, "output_dir": str(run_dir)},
                cwd=str(notebook.parent), progress_bar=False, kernel_manager_class=kernel_manager_logging_to(run_dir / KERNEL_LOG),
            )  # fmt: skip
        except Exception as exc:  # the environments do not depend on it
            report(f"machine limits ({device}): not measured ({_describe_failure(exc)}); the summary leaves the roofline out")
            continue
        limits = read_limits(run_dir, device) or {}
        report(
            f"machine limits ({device}): float32 peak {limits.get('float32_flops_per_s', 0) / 1e9:.0f} GFLOP/s, "
            f"bandwidth {limits.get('bandwidth_bytes_per_s', 0) / 1e9:.1f} GB/s, in {format_duration(time.perf_counter() - start)}"
        )


def default_run_dir(now: datetime.datetime | None = None) -> Path:
    """`outputs/<timestamp>` in the kit's folder."""
    return OUTPUTS_DIR / (now or datetime.datetime.now()).strftime("%Y-%m-%d_%H%M%S")


def format_duration(seconds: float) -> str:
    """'42 s' or '3 min 05 s'."""
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
