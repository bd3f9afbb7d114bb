"""benchlib's public surface: a few names, imported when first used, so that `import benchlib` stays cheap
and sets the environment variables before anything imports transformers or TensorFlow."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

import benchlib

PUBLIC = {
    "run_environment", "plan_run", "run_jobs", "load_runs", "read_results", "results_table", "compare_runs", "render_summary",
    "claims_table", "display_path", "show_table", "show_figure", "show_findings",
}  # fmt: skip
# The modules the summary notebook is built from, offered by name.
MODULES = {"runs", "tables", "speedups", "spreadsheet", "generation", "under_load", "quality", "variance", "efficiency", "machine_limits", "plots", "sections"}
# Imported by `import benchlib` alone: none of these (the frameworks, pandas and the plotting libraries, the analysis).
HEAVY = (
    "torch", "tensorflow", "transformers", "onnxruntime", "openvino", "pandas", "numpy", "scipy", "matplotlib", "seaborn",
    "papermill", "distributed", "benchlib.measure", "benchlib.analysis", "benchlib.report", "benchlib.launch",
)  # fmt: skip
VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "TF_USE_LEGACY_KERAS")


def in_fresh_python(code: str, environ: dict[str, str] | None = None) -> dict:
    """The JSON that `code` prints, run by a fresh interpreter (nothing imported beforehand)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=environ, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_benchlib_imports_nothing_heavy_and_sets_the_environment_first() -> None:
    environ = {key: value for key, value in os.environ.items() if key not in VARIABLES}
    environ["HF_DATASETS_OFFLINE"] = "0"  # a value the user set is kept
    found = in_fresh_python(
        "import json, os, sys; import benchlib; "
        f"print(json.dumps({{'heavy': [m for m in {HEAVY!r} if m in sys.modules], 'env': {{v: os.environ.get(v) for v in {VARIABLES!r}}}}}))",
        environ,
    )
    assert found["heavy"] == []
    assert found["env"] == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "0", "TF_USE_LEGACY_KERAS": "1"}


@pytest.mark.e2e
def test_the_benchmark_kernel_does_not_import_the_analysis_or_plotting() -> None:
    """What notebooks/benchmark.ipynb imports to measure, every backend registered: no seaborn, matplotlib, analysis,
    report or TensorFlow, nor the serving engines' HTTP client."""
    found = in_fresh_python(
        "import json, sys; import benchlib; from benchlib.config.params import notebook_parameters; benchlib.run_environment; benchlib.results_table; "
        "from benchlib.backends import registry; registry(); "
        "print(json.dumps([m for m in ('seaborn', 'matplotlib', 'tensorflow', 'papermill', 'benchlib.analysis', 'benchlib.report', 'httpx') if m in sys.modules]))"
    )
    assert found == []


def test_the_summary_kernel_does_not_import_the_hosts_rendering() -> None:
    """What notebooks/summary.ipynb imports to show a run (its sections, their tables, findings and figures): not the
    notebook rendering of the host (`report.render`: nbformat, whose jsonschema builds its IRI checker's parsers for
    seconds, nbconvert, papermill), nor a framework."""
    found = in_fresh_python(
        "import json, sys; import benchlib; benchlib.sections; benchlib.show_table; benchlib.show_figure; benchlib.show_findings; "
        "print(json.dumps([m for m in ('nbformat', 'jsonschema', 'nbconvert', 'papermill', 'benchlib.report.render', 'torch', 'tensorflow') if m in sys.modules]))"
    )
    assert found == []


def test_the_command_line_starts_without_scipy_stats_or_rfc3987_syntax_and_still_validates_notebooks() -> None:
    """What every `benchlib` command imports before its work: neither scipy.stats (imported where a statistic is taken)
    nor jsonschema's IRI checker (`rfc3987_syntax`, seconds to import); nbformat still validates the kit's notebooks."""
    found = in_fresh_python(
        "import json, sys; import benchlib.cli; stats = 'scipy.stats' in sys.modules; import nbformat, papermill; "
        "from benchlib.paths import PROJECT_ROOT; "
        "nbformat.validate(nbformat.read(PROJECT_ROOT / 'notebooks' / 'benchmark.ipynb', as_version=4)); "
        "print(json.dumps([stats, sys.modules['rfc3987_syntax'] is None]))"
    )
    assert found == [False, True]


def test_the_summary_notebook_imports_only_the_public_api() -> None:
    """notebooks/summary.ipynb takes the kit only from `benchlib`'s public names (`from benchlib import ...`)."""
    import ast

    import nbformat

    from benchlib.paths import SUMMARY_NOTEBOOK

    imported = set()
    for cell in nbformat.read(SUMMARY_NOTEBOOK, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchlib"):
                assert node.module == "benchlib", f"the summary notebook imports {node.module}: take it from benchlib's public API"
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.Import):
                assert not any(alias.name.startswith("benchlib") for alias in node.names), ast.unparse(node)
    assert imported and imported <= set(benchlib.__all__), imported - set(benchlib.__all__)


def test_every_public_name_resolves_to_its_home() -> None:
    assert set(benchlib.__all__) == PUBLIC | MODULES | {"__version__"}
    for name in MODULES:
        assert getattr(benchlib, name).__name__.startswith("benchlib."), name
    assert set(benchlib.__all__) <= set(dir(benchlib))
    for name in PUBLIC:
        value = getattr(benchlib, name)
        assert isinstance(value, Callable) and value.__name__ == name, name
        assert getattr(importlib.import_module(value.__module__), name) is value
    namespace: dict = {}
    exec("from benchlib import *", namespace)
    assert PUBLIC <= set(namespace) and namespace["__version__"] == benchlib.__version__


def test_other_names_are_reachable_in_their_packages_but_not_advertised() -> None:
    from benchlib.config.params import BenchmarkParams

    assert "BenchmarkParams" not in benchlib.__all__ and BenchmarkParams.model_fields["repeat"].default == 30
    with pytest.raises(AttributeError, match="module 'benchlib' has no attribute 'BenchmarkParams'"):
        benchlib.BenchmarkParams  # noqa: B018
