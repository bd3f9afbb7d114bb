"""Where the kit's own folders are: the project root, its notebooks, parameter files and outputs."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = PROJECT_ROOT / "notebooks"
BENCHMARK_NOTEBOOK = NOTEBOOKS_DIR / "benchmark.ipynb"
LIMITS_NOTEBOOK = NOTEBOOKS_DIR / "machine_limits.ipynb"
SUMMARY_NOTEBOOK = NOTEBOOKS_DIR / "summary.ipynb"
PARAMETERS_DIR = PROJECT_ROOT / "parameters"
OUTPUTS_DIR = PROJECT_ROOT / "outputs"


def display_path(path: str | Path) -> str:
    """`path` as a reader of a shared report should see it: relative to the kit's folder (or to the
    working folder) when it lies under it, else its own name; never an absolute path of this machine."""
    resolved = Path(path).resolve()
    for base in (PROJECT_ROOT, Path.cwd().resolve()):
        if resolved.is_relative_to(base):
            return str(resolved.relative_to(base)) or "."
    return resolved.name
