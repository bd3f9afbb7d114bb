"""A run's summary: notebooks/summary.ipynb executed with papermill, rendered to HTML without its code."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pandas as pd
from matplotlib.figure import Figure

from benchlib.runner import KERNEL_LOG, PROJECT_ROOT, kernel_manager_logging_to
from benchlib.summary import save_table

SUMMARY_NOTEBOOK = "summary.ipynb"
SUMMARY_HTML = "summary.html"


def notebook_path() -> Path:
    """notebooks/summary.ipynb of the kit's checkout (the folder that holds benchlib/)."""
    path = PROJECT_ROOT / "notebooks" / SUMMARY_NOTEBOOK
    if not path.is_file():
        raise FileNotFoundError(f"the summary notebook is missing: {path} (benchlib renders summaries from a checkout of the kit)")
    return path


def render_summary(run_dirs: list[Path] | list[str], output_dir: Path | None = None) -> Path:
    """Execute the summary notebook on `run_dirs` into `<output_dir>/summary.ipynb`, render `summary.html`, return its path.

    `output_dir` defaults to the first run folder; the notebook writes tables/*.csv and figures/*.png there.
    """
    import papermill
    from nbconvert import HTMLExporter

    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    runs = [Path(run_dir).resolve() for run_dir in run_dirs]
    if not runs:
        raise ValueError("run_dirs: give at least one run folder")
    missing = [str(run) for run in runs if not run.is_dir()]
    if missing:
        raise FileNotFoundError(f"run_dirs: not a folder: {', '.join(missing)}")
    output = Path(output_dir).resolve() if output_dir is not None else runs[0]
    output.mkdir(parents=True, exist_ok=True)
    notebook = notebook_path()
    executed = output / SUMMARY_NOTEBOOK
    papermill.execute_notebook(
        str(notebook), str(executed), parameters={"run_dirs": [str(run) for run in runs], "output_dir": str(output)},
        cwd=str(notebook.parent), progress_bar=False, kernel_manager_class=kernel_manager_logging_to(output / KERNEL_LOG),
    )  # fmt: skip
    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nbformat.read(executed, as_version=4))
    html = output / SUMMARY_HTML
    html.write_text(body, encoding="utf-8")
    return html


def _display_notes(notes: list[str]) -> None:
    from IPython.display import Markdown, display

    if notes:
        display(Markdown("\n".join(f"- {note}" for note in notes)))


def show_table(table: pd.DataFrame, output_dir: str | os.PathLike[str], name: str, notes: list[str] | None = None, when_empty: str | None = None) -> None:
    """In the notebook: save `table` as tables/<name>.csv and display it with `notes`.

    An empty table is left out: `when_empty` (else the notes, else a sentence saying so) is shown instead.
    """
    from IPython.display import display

    notes = list(notes or [])
    if table.empty:
        _display_notes([when_empty] if when_empty else notes or [f"These runs have nothing for this table ({name}): it is left out."])
        return
    save_table(table, output_dir, name)
    display(table)
    _display_notes(notes)


def show_figure(figure: Figure, output_dir: str | os.PathLike[str], name: str) -> None:
    """In the notebook: save `figure` as figures/<name>.png and display it."""
    from IPython.display import Image, display

    from benchlib.plots import save_figure

    display(Image(filename=save_figure(figure, output_dir, name)))
