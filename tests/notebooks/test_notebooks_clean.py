"""Notebooks are committed without outputs: no outputs, no execution counts, no papermill traces."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from benchlib.paths import PROJECT_ROOT

NOTEBOOKS = sorted((PROJECT_ROOT / "notebooks").glob("*.ipynb"))


def test_notebooks_exist() -> None:
    assert "benchmark.ipynb" in [path.name for path in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_notebook_is_clean(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: cell {index} has outputs; clear them before committing"
            assert cell.execution_count is None, f"{path.name}: cell {index} has an execution count"
        assert "injected-parameters" not in cell.metadata.get("tags", []), f"{path.name}: cell {index} was injected by papermill"
    assert "papermill" not in notebook.metadata and "widgets" not in notebook.metadata, f"{path.name}: metadata of an executed copy"
