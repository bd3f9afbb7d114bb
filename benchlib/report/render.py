"""A run's summary: notebooks/summary.ipynb executed (`launch.notebook.execute_notebook`), rendered to HTML without its code;
the kit's one way of rendering a notebook or a page of Markdown as HTML. What the notebook itself calls to show its
tables, findings and figures is `report.display`'s (its kernel imports neither nbformat nor papermill)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat

from benchlib import paths
from benchlib.launch.notebook import execute_notebook
from benchlib.store import layout


def notebook_path() -> Path:
    """notebooks/summary.ipynb of the kit's checkout (the folder that holds benchlib/)."""
    path = paths.SUMMARY_NOTEBOOK
    if not path.is_file():
        raise FileNotFoundError(f"the summary notebook is missing: {path} (benchlib renders summaries from a checkout of the kit)")
    return path


def render_summary(run_dirs: list[Path] | list[str], output_dir: Path | None = None, prices: Path | None = None) -> Path:
    """Execute the summary notebook on `run_dirs` into `<output_dir>/summary.ipynb`, render `summary.html`, return its path.

    `output_dir` defaults to the first run folder; the notebook writes tables/*.csv and figures/*.png there. `prices`: a
    prices file pricing the runs' machines (`analysis.cost.read_prices`).
    """
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
    executed = output / layout.SUMMARY_NOTEBOOK
    execute_notebook(notebook_path(), executed, {"run_dirs": [str(run) for run in runs], "output_dir": str(output), "prices": str(Path(prices).resolve()) if prices else None}, output / layout.KERNEL_LOG)
    html = output / layout.SUMMARY_HTML
    html.write_text(notebook_html(nbformat.read(executed, as_version=4), code=False), encoding="utf-8")
    return html


TEMPLATES = Path(__file__).parent / "templates"


def notebook_html(notebook: nbformat.NotebookNode, code: bool) -> str:
    """`notebook` as one HTML page (the kit's one rendering path: the summary, `compare`'s report, `publish`'s pages):
    JupyterLab's look, images embedded, no script fetched from a CDN; without its code cells' input unless `code`."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        template_name="offline", extra_template_basedirs=[str(TEMPLATES)], embed_images=True,
        exclude_input=not code, exclude_input_prompt=not code, exclude_output_prompt=not code,
    )  # fmt: skip
    body, _ = exporter.from_notebook_node(notebook)
    return body


def markdown_html(title: str, markdown: str) -> str:
    """A page of Markdown (its tables, links and images), rendered as a notebook is (`notebook_html`)."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(markdown)], metadata={"title": title})
    return notebook_html(notebook, code=False)
