"""The run folder's layout: the one place that names its files.

```
<run>/                       machine_limits.json, machine_limits.<device>.ipynb, kernel.log,
                             summary.ipynb, summary.html, findings.md, tables/*.csv, figures/*.png, site/, compare-<run>/
<run>/<environment>/         results.csv, environment.json, benchmark.ipynb (benchmark.round<N>.ipynb),
                             kernel.log, in_flight.json, .lock, results.cutoff.txt, results.<timestamp>.csv
<run>/<environment>/loadgen_logs/<model>/<scenario>[.round<N>][.attempt<N>][.trial<N>]/
                             mlperf_log_summary.txt, mlperf_log_detail.txt (LoadGen's own logs of a load scenario)
<run>/<environment>/engine_logs/<model>.log   a serving engine's own output while it served the model
```
"""

from __future__ import annotations

import os
import re
from pathlib import Path

RESULTS_FILE = "results.csv"
ENVIRONMENT_FILE = "environment.json"
IN_FLIGHT_FILE = "in_flight.json"
LOCK_FILE = ".lock"
CUTOFF_FILE = "results.cutoff.txt"
KERNEL_LOG = "kernel.log"
EXECUTED_NOTEBOOK = "benchmark.ipynb"
LIMITS_FILE = "machine_limits.json"
SUMMARY_NOTEBOOK = "summary.ipynb"
SUMMARY_HTML = "summary.html"
FINDINGS_FILE = "findings.md"
SITE_DIR = "site"  # the run published as a static site (`publish`)  # the summary's findings, one sentence per line
TABLES_DIR = "tables"
FIGURES_DIR = "figures"
COMPARE_CELLS = "cells.csv"
COMPARE_ENVIRONMENTS = "environments.csv"
COMPARE_DIFFERENCES = "differences.csv"
COMPARE_HTML = "compare.html"
COMPARE_QUALITY = "quality.csv"  # a change in quality on the user's data between the runs
LOADGEN_DIR = "loadgen_logs"
LOADGEN_SUMMARY = "mlperf_log_summary.txt"
LOADGEN_DETAIL = "mlperf_log_detail.txt"
LOADGEN_ACCURACY = "mlperf_log_accuracy.json"  # LoadGen's accuracy mode: each response's bytes, by sample
ENGINE_LOGS_DIR = "engine_logs"
ACCURACY_TEST = "accuracy_test"  # the folder of a model's accuracy test under load, beside its scenarios'


PathLike = str | os.PathLike[str]


def results_path(path: PathLike) -> Path:
    """The results.csv of an environment folder (`path` itself when it names the file)."""
    path = Path(path)
    return path / RESULTS_FILE if path.is_dir() or path.suffix != ".csv" else path


def executed_notebook(env_dir: PathLike, round_number: int = 1) -> Path:
    """The record of one round: benchmark.ipynb for round 1, benchmark.round<N>.ipynb after."""
    name = EXECUTED_NOTEBOOK if round_number == 1 else f"{Path(EXECUTED_NOTEBOOK).stem}.round{round_number}.ipynb"
    return Path(env_dir) / name


def set_aside_path(env_dir: PathLike, stamp: str) -> Path:
    """Where --force keeps an earlier results.csv: results.<stamp>.csv."""
    return Path(env_dir) / f"{Path(RESULTS_FILE).stem}.{stamp}.csv"


def limits_notebook(run_dir: PathLike, device: str) -> Path:
    """The record of the machine's limits measured for `device`: machine_limits.<device>.ipynb."""
    return Path(run_dir) / f"{Path(LIMITS_FILE).stem}.{device.replace(':', '-')}.ipynb"


def limits_notebook_device(name: str) -> str | None:
    """The device whose limits notebook is named `name` (the inverse of `limits_notebook`), or None."""
    stem = Path(LIMITS_FILE).stem
    if not (name.startswith(f"{stem}.") and name.endswith(".ipynb")):
        return None
    return name.removeprefix(f"{stem}.").removesuffix(".ipynb").replace("-", ":")


def loadgen_folder(env_dir: PathLike, model: str, scenario: str, round_number: int = 1, attempt: int = 1, trial: int | None = None) -> Path:
    """Where one LoadGen test of a load scenario keeps LoadGen's logs (see the module's docstring)."""
    parts = [scenario, *([f"round{round_number}"] if round_number > 1 else []), *([f"attempt{attempt}"] if attempt > 1 else [])]
    parts += [f"trial{trial}"] if trial is not None else []
    return Path(env_dir) / LOADGEN_DIR / file_stem(model) / ".".join(parts)


def engine_log(env_dir: PathLike, model: str) -> Path:
    """Where a serving engine started for `model` writes its own output: engine_logs/<model>.log."""
    return Path(env_dir) / ENGINE_LOGS_DIR / f"{file_stem(model)}.log"


def host_file(path: Path, host: str) -> Path:
    """`path` set apart for another host of a cluster: <stem>.<host><suffix>."""
    return path.with_name(f"{path.stem}.{host}{path.suffix}")


def table_path(output_dir: PathLike, name: str) -> Path:
    """A summary table: tables/<name>.csv."""
    return Path(output_dir) / TABLES_DIR / f"{name}.csv"


def figure_path(output_dir: PathLike, name: str) -> Path:
    """A summary figure: figures/<name>.png."""
    return Path(output_dir) / FIGURES_DIR / f"{name}.png"


def environment_dirs(run_dir: PathLike) -> list[Path]:
    """The environment folders of a run: every `<run_dir>/<env>/` with a results.csv (or the run itself)."""
    run_dir = Path(run_dir)
    own = [run_dir] if (run_dir / RESULTS_FILE).is_file() else []
    return own + sorted(p.parent for p in run_dir.glob(f"*/{RESULTS_FILE}"))


def last_written(env_dir: PathLike) -> float:
    """When an environment folder's results.csv was last written (seconds since the epoch)."""
    return (Path(env_dir) / RESULTS_FILE).stat().st_mtime


# ---------------------------------------------------------------- a tune's files

TUNE_DIR = "tuning"  # <env>/tuning/: the search's study, its table and each point's folder
TUNE_JOURNAL = "study.journal"  # Optuna's journal of the study: a stopped tune resumes from it
TUNE_TABLE = "points.csv"  # one row per point: its settings, its figure, and whether it may be chosen
CONFIRM_DIR = "confirm"  # <env>/tuning/<model>/confirm/{best,default}/: the confirmation's fresh kernels
TUNED_DIR = "tuned"  # <run>/tuned/<env>/<model>.yaml: the settings to deploy


def point_folder(env_dir: PathLike, model_label: str, number: int) -> Path:
    """Where point `number` of a tune of the model labelled `model_label` runs (an environment folder of its own)."""
    return Path(env_dir) / TUNE_DIR / model_label / f"point-{number:03d}"


def point_folders(env_dir: PathLike) -> list[Path]:
    """Every point folder of the tunes of an environment, in order."""
    return sorted(Path(env_dir).glob(f"{TUNE_DIR}/*/point-*"))


def confirm_folder(env_dir: PathLike, model_label: str, which: str) -> Path:
    """Where the confirmation of `which` ("best" or "default") runs, round after round."""
    return Path(env_dir) / TUNE_DIR / model_label / CONFIRM_DIR / which


def tuned_settings_file(run_dir: PathLike, environment: str, model_label: str) -> Path:
    """The settings to deploy for one environment and model."""
    return Path(run_dir) / TUNED_DIR / environment / f"{model_label}.yaml"


# ---------------------------------------------------------------- the summary's and compare's files

SPREADSHEET_2019_PREFIX = "spreadsheet_2019_"
COMPARE_PLOT = "compare.png"
COMPARE_DIR_PREFIX = "compare-"


def file_stem(name: str) -> str:
    """`name` as the stem of a file name: each run of characters other than letters, digits and `_.-` becomes `_`."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "table"


def spreadsheet_2019_path(output_dir: PathLike, environment: str) -> Path:
    """One environment in the 2019 script's CSV layout: tables/spreadsheet_2019_<environment>.csv."""
    return table_path(output_dir, f"{SPREADSHEET_2019_PREFIX}{file_stem(environment)}")


def compare_dir(run_a: PathLike, run_b: PathLike) -> Path:
    """Where `compare RUN_A RUN_B` writes its report by default: <RUN_B>/compare-<name of RUN_A>/."""
    return Path(run_b) / f"{COMPARE_DIR_PREFIX}{Path(run_a).resolve().name}"
