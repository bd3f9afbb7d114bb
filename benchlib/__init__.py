"""benchlib: rerunnable Transformer inference benchmarks (PyTorch, TorchScript, TensorFlow, XLA, and today's ways).

The public surface, what a notebook needs (everything else is reachable in its package, but not promised):

- measure: `run_environment(params)` measures one environment's grid in this process; `plan_run(run_dir,
  grid, environments)` validates a run's environments into jobs, `run_jobs(jobs)` runs them, each in a
  fresh kernel (as `python -m benchlib run` does);
- read: `read_results(folder)` the rows of one environment, `results_table(rows)` its times as a
  model x shape table, `load_runs(run_dirs)` every environment of one or more runs;
- compare and show: `compare_runs(run_a, run_b)` run B against run A (cells, environments, verdicts),
  `render_summary(run_dirs)` the summary notebook executed and rendered to HTML;
- summarise: `sections`, the summary's parts, which notebooks/summary.ipynb shows (and imports from here only); the
  analysis modules they are built from (`runs`, `tables`, `speedups`, `spreadsheet`, `generation`, `under_load`,
  `quality`, `variance`, `efficiency`, `machine_limits`), `plots`, `claims_table`, `display_path`, and `show_table`,
  `show_figure`, `show_findings`, which show (and save) a table, a figure and the findings in a notebook.

Importing `benchlib` is cheap: these names are imported at their first use (PEP 562), so that a
benchmark kernel never imports the analysis or the plotting libraries.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

# Offline by default, and TensorFlow's Keras 2 (tf-keras) for transformers' TF models:
# both must be set before transformers or TensorFlow is first imported.
for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TF_USE_LEGACY_KERAS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}.items():
    os.environ.setdefault(_name, _value)
del _name, _value

__version__ = "0.1.0"

# Each public name and the module it lives in, imported when the name is first used.
_EXPORTS: dict[str, str] = {
    "run_environment": "benchlib.measure.sweep",
    "plan_run": "benchlib.config.jobs",
    "run_jobs": "benchlib.launch.local",
    "read_results": "benchlib.store.results",
    "results_table": "benchlib.store.results",
    "load_runs": "benchlib.analysis.runs",
    "compare_runs": "benchlib.analysis.compare",
    "render_summary": "benchlib.report.render",
    "claims_table": "benchlib.analysis.claims",
    "display_path": "benchlib.paths",
    "show_table": "benchlib.report.display",
    "show_figure": "benchlib.report.display",
    "show_findings": "benchlib.report.display",
}
# The modules the summary notebook uses, by their own names and two by the names it gives them, imported when first used.
_MODULES: dict[str, str] = {
    **{path.rpartition(".")[2]: path for path in (
        "benchlib.analysis.runs", "benchlib.analysis.tables", "benchlib.analysis.speedups", "benchlib.analysis.spreadsheet",
        "benchlib.analysis.generation", "benchlib.analysis.quality", "benchlib.analysis.variance", "benchlib.analysis.efficiency",
        "benchlib.report.plots",
    )},
    "under_load": "benchlib.analysis.load", "machine_limits": "benchlib.measure.peak", "sections": "benchlib.report.sections",
}  # fmt: skip

__all__ = ["__version__", *_EXPORTS, *_MODULES]

if TYPE_CHECKING:  # for type checkers and editors; at run time `__getattr__` imports them when first used
    from benchlib.analysis import (
        efficiency,
        generation,
        quality,
        runs,
        speedups,
        spreadsheet,
        tables,
        variance,
    )
    from benchlib.analysis import load as under_load
    from benchlib.analysis.claims import claims_table
    from benchlib.analysis.compare import compare_runs
    from benchlib.analysis.runs import load_runs
    from benchlib.config.jobs import plan_run
    from benchlib.launch.local import run_jobs
    from benchlib.measure import peak as machine_limits
    from benchlib.measure.sweep import run_environment
    from benchlib.paths import display_path
    from benchlib.report import plots, sections
    from benchlib.report.display import show_figure, show_findings, show_table
    from benchlib.report.render import render_summary
    from benchlib.store.results import read_results, results_table


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later uses find it directly
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_MODULES})
