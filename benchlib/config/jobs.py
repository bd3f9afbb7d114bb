"""The run plan: parameter files (grids, environments, sets) merged as papermill's `-f` merges them,
validated into one job per environment, and the order of rounds.

A job's parameters are merged from YAML files in the order papermill's `-f` would apply
them: the grid, then the environment, then each extra parameter file. Every job is
validated before any kernel starts. With `rounds: N`, every environment runs N times,
the order rotated between rounds.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from benchlib.backends import backend_info, frameworks, installed, not_installed
from benchlib.config.catalogue import load_catalogue
from benchlib.config.params import CELL, BenchmarkParams, ParameterError, format_validation_error, problem_field
from benchlib.machine import gpus
from benchlib.paths import OUTPUTS_DIR, PARAMETERS_DIR, PROJECT_ROOT
from benchlib.store import layout

DEFAULT_GRID = "quick"
SETS_FILE = PARAMETERS_DIR / "sets.yaml"
ALL_ENVIRONMENTS = "all"
DEFAULT_ENVIRONMENTS: tuple[str, ...] = ("default",)  # a set of parameters/sets.yaml
GPU_DEFAULT_ENVIRONMENTS: tuple[str, ...] = ("gpu-default",)  # the default job where nvidia-smi finds a GPU
GPU_SET = "gpu"  # every GPU environment that runs with what is installed here (`environment_sets`)
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
        return len(p.models) * len(p.scenario) * len(p.batch_sizes) * len(p.sequence_lengths)

    def describe(self) -> str:
        """What this job measures, in one line: backend, device and the grid's size."""
        p = self.params
        generating = f", generating {p.new_tokens} tokens" if p.workload == "generate" else ""
        if p.tune is not None:
            return f"{p.framework}/{p.mode} on {p.device}, a tune of {p.tune.objective} for {len(p.models)} models (at most {p.tune_trials} points each, then {p.confirm_rounds} rounds of the best and the default)"
        if p.scenario != [CELL]:
            lengths = ", ".join(str(n) for n in p.request_lengths or ())
            shape = f"{len(p.models)} models x {len(p.scenario)} scenarios; requests of {lengths} tokens batched up to {p.max_batch}{generating}"
            return f"{p.framework}/{p.mode} on {p.device}, {self.cell_count} cells ({shape})"
        lengths = f"{len(p.sequence_lengths)} prompt lengths{generating}" if generating else f"{len(p.sequence_lengths)} sequence lengths"
        return f"{p.framework}/{p.mode} on {p.device}, {self.cell_count} cells ({len(p.models)} models x {len(p.batch_sizes)} batch sizes x {lengths})"

    @property
    def executed_notebook(self) -> Path:
        """The record of this round: benchmark.ipynb for round 1, benchmark.round<N>.ipynb after."""
        return layout.executed_notebook(self.output_dir, self.params.current_round)

    def notebook_parameters(self) -> dict[str, Any]:
        """Every parameter of this job, resolved (defaults included), as papermill injects them: the
        notebook's own values never stand in for one the job did not set."""
        return self.params.model_dump(mode="json")

    def for_round(self, round_number: int) -> EnvironmentJob:
        """This job in round `round_number`."""
        return dataclasses.replace(self, params=self.params.model_copy(update={"current_round": round_number}))


def available(kind: str) -> list[str]:
    """Names of the parameter files shipped in `parameters/<kind>/` ("grids" or "environments")."""
    return sorted(path.stem for path in (PARAMETERS_DIR / kind).glob("*.yaml"))


def environment_sets() -> dict[str, list[str]]:
    """The named sets of environments: parameters/sets.yaml, `all` (this machine's devices) and `gpu` (every GPU
    environment whose packages are installed here: `runs_with_what_is_installed`)."""
    sets = {name: list(members) for name, members in load_parameter_file(SETS_FILE).items()}
    devices = ("cpu", "gpu") if gpus() else ("cpu",)
    sets[ALL_ENVIRONMENTS] = [name for name in available("environments") if name.split("-", 1)[0] in devices]
    sets[GPU_SET] = [name for name in available("environments") if name.startswith("gpu-") and runs_with_what_is_installed(name)]
    return sets


def runs_with_what_is_installed(name: str) -> bool:
    """Whether the shipped environment `name` has what it needs installed: its backend's distributions, and on a GPU
    the GPU build where its backend has one (onnxruntime-gpu for ONNX Runtime). Reads metadata only."""
    values = load_parameter_file(PARAMETERS_DIR / "environments" / f"{name}.yaml")
    framework = values.get("framework", "pytorch")
    if framework not in frameworks() or not_installed(framework) is not None:
        return False
    build = backend_info(framework).gpu_build
    return build is None or not str(values.get("device", "cpu")).startswith("cuda") or installed(build)


def default_environments() -> tuple[tuple[str, ...], str | None]:
    """The default job's environments, and where a GPU was found, the sentence that says so: the GPU default set where
    nvidia-smi finds a GPU, else the CPU's."""
    found = gpus()
    if not found:
        return DEFAULT_ENVIRONMENTS, None
    names = ", ".join(dict.fromkeys(gpu.get("name", "a GPU") for gpu in found))
    return GPU_DEFAULT_ENVIRONMENTS, f"nvidia-smi finds {names}: the default job is the GPU default set ({', '.join(GPU_DEFAULT_ENVIRONMENTS)})"


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


def is_relative_folder(model: Any) -> bool:
    """Whether `model` names a folder relative to the current one (and no catalogue entry)."""
    return isinstance(model, str) and model not in load_catalogue() and not Path(model).is_absolute() and Path(model).is_dir()


def kit_relative_file(name: str) -> Path:
    """`name` as an absolute path: relative to the current folder where a file is there, else to the kit's folder."""
    path = Path(name)
    if path.is_absolute() or path.is_file() or not (PROJECT_ROOT / path).is_file():
        return path.absolute()
    return PROJECT_ROOT / path


def make_job(
    run_dir: Path, grid_file: Path, env_file: Path, extra_files: Sequence[Path] = (), overrides: dict[str, tuple[Any, str]] | None = None,
) -> EnvironmentJob:  # fmt: skip
    """The job of one environment file, its parameters merged as papermill's `-f` would, then `overrides` (name: (value,
    the option that set it), e.g. `--models`); output_dir is `<run_dir>/<environment>`."""
    sources = (grid_file, env_file, *extra_files)
    values, origin = merge_parameters(sources)
    for name, (value, option) in (overrides or {}).items():
        values[name], origin[name] = value, Path(option)
    name = str(values.setdefault("environment", env_file.stem))
    if not re.fullmatch(ENVIRONMENT_NAME, name):
        source = origin.get("environment", env_file)
        raise ParameterError(f"{source}: environment: {name!r} must start with a letter or digit and hold only letters, digits, '.', '_' or '-' (it names a folder)")
    values["output_dir"] = str(run_dir / name)
    if isinstance(values.get("models"), list):  # a folder given relative to here is found by kernels that run elsewhere
        values["models"] = [str(Path(m).absolute()) if is_relative_folder(m) else m for m in values["models"]]
    if isinstance(values.get("eval_data"), str):  # so is a file of examples, here or in the kit's folder (its shipped examples)
        values["eval_data"] = str(kit_relative_file(values["eval_data"]))
    try:
        return EnvironmentJob(name, BenchmarkParams(**values), sources)
    except ValidationError as error:
        lines = format_validation_error(error, source=name).splitlines()
        fields = [problem_field(problem) for problem in error.errors()]
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
    overrides: dict[str, tuple[Any, str]] | None = None,
) -> list[EnvironmentJob]:
    """The validated jobs of a run, in order, with `overrides` (name: (value, the option that set it)) over every file;
    ParameterError lists every problem found (one line each)."""
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
                jobs.append(make_job(run_dir, grid_file, env_file, extra_files, overrides))
            except ParameterError as error:
                problems.append(str(error))
    names = [job.name for job in jobs]
    problems += [f"environment {n!r} appears more than once" for n in sorted({n for n in names if names.count(n) > 1})]
    if problems:
        raise ParameterError("\n".join(dict.fromkeys(problems)))  # a bad shared file is named once
    return jobs


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


def default_run_dir(now: datetime.datetime | None = None) -> Path:
    """`outputs/<timestamp>` in the kit's folder."""
    return OUTPUTS_DIR / (now or datetime.datetime.now()).strftime("%Y-%m-%d_%H%M%S")
