"""`python -m benchlib publish`: one or more runs as a static site that opens from its folder (`file://`) or any static
host, with no network: an index (per run: its machine, date, grid, environments and findings), each run's page with its
headline tables, its summary, each environment's executed notebooks rendered to HTML, and the CSV files beside them.
Every link is relative, and no file names the run's folder, the kit's, the home folder or the files the run read (its
models, its text and evaluation data) as paths of the machine that made it (`Paths`).

```
<site>/index.html
<site>/<run>/index.html, summary.html, tables/*.csv, figures/*.png
<site>/<run>/<environment>/benchmark.html (benchmark.round<N>.html), results.csv, environment.json
<site>/<run>/<environment>/points.csv, <site>/<run>/tuned/<environment>/<model>.yaml (a tune's points and settings to deploy)
```
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from benchlib.paths import PROJECT_ROOT, display_path
from benchlib.report.reference import run_facts, run_tables
from benchlib.report.render import markdown_html, notebook_html
from benchlib.store import layout
from benchlib.store.environment import read_environment

INDEX = "index.html"
INPUT_FILES: tuple[str, ...] = ("text_file", "eval_data")  # parameters naming a file the run read
TEXT_SUFFIXES: tuple[str, ...] = (".csv", ".json", ".md", ".html", ".txt")


def _site_names(run_dirs: Sequence[Path]) -> list[str]:
    """A folder name per run: its own name, numbered where two runs share one."""
    names: list[str] = []
    for run in run_dirs:
        name, number = run.name, 2
        while name in names:
            name, number = f"{run.name}-{number}", number + 1
        names.append(name)
    return names


class Paths:
    """Where a run lies, and lay, on the machine that made it, written as a reader of the site sees it: the run's folder
    (now, and as its environments recorded it) as the run's name, a model's folder and a file the run read (`INPUT_FILES`)
    as `display_path` gives it, the kit's folder as `.`, the home folder as `~`."""

    def __init__(self, run_dir: Path) -> None:
        found: dict[str, str] = {}
        for env_dir in layout.environment_dirs(run_dir):
            parameters = read_environment(env_dir).get("parameters", {})
            if Path(output_dir := parameters.get("output_dir") or "").is_absolute():
                found[str(Path(output_dir).parent)] = run_dir.name
            found |= {model: display_path(model) for model in parameters.get("models", []) if Path(model).is_absolute()}
            found |= {file: display_path(file) for name in INPUT_FILES if Path(file := parameters.get(name) or "").is_absolute()}
        found |= {str(run_dir): run_dir.name, str(PROJECT_ROOT): ".", str(Path.home()): "~"}
        self.replacements = sorted(found.items(), key=lambda item: -len(item[0]))  # the longest first: a run inside the kit

    def __call__(self, text: str) -> str:
        for path, shown in self.replacements:
            text = text.replace(path, shown)
        return text


def _copy(source: Path, target: Path, paths: Paths) -> bool:
    """Copy a file or folder into the site, text files (CSV, JSON, Markdown) with `paths` written as a reader sees them."""
    if not source.exists():
        return False
    for file in sorted(source.rglob("*")) if source.is_dir() else [source]:
        copy = target / file.relative_to(source) if source.is_dir() else target
        copy.parent.mkdir(parents=True, exist_ok=True)
        if file.is_dir():
            continue
        if file.suffix in TEXT_SUFFIXES:  # line endings kept as they are (a CSV's are \r\n)
            with open(file, encoding="utf-8", newline="") as text, open(copy, "w", encoding="utf-8", newline="") as written:
                written.write(paths(text.read()))
        else:
            shutil.copyfile(file, copy)
    return True


def _notebook_pages(env_dir: Path, site_env: Path, paths: Paths) -> list[str]:
    """Each executed notebook of an environment rendered to HTML (with its code: it is the record); their file names."""
    pages = []
    for notebook in sorted(env_dir.glob(f"{Path(layout.EXECUTED_NOTEBOOK).stem}*.ipynb")):
        page = site_env / notebook.with_suffix(".html").name
        page.write_text(paths(notebook_html(nbformat.read(notebook, as_version=4), code=True)), encoding="utf-8")
        pages.append(page.name)
    return pages


def publish_run(run_dir: Path, site_run: Path) -> str:
    """One run's part of the site, in `site_run`; returns its index's Markdown entry (for the site's index)."""
    site_run.mkdir(parents=True, exist_ok=True)
    paths = Paths(run_dir)
    links = []
    if _copy(run_dir / layout.SUMMARY_HTML, site_run / layout.SUMMARY_HTML, paths):
        links.append(f"- [The summary]({layout.SUMMARY_HTML})")
    for folder in (layout.TABLES_DIR, layout.FIGURES_DIR):
        _copy(run_dir / folder, site_run / folder, paths)
    for env_dir in sorted(run_dir.glob(f"*/{layout.TUNE_DIR}/{layout.TUNE_TABLE}")):  # a tune's points and its settings to deploy
        env_name = env_dir.parent.parent.name
        _copy(env_dir, site_run / env_name / layout.TUNE_TABLE, paths)
        tuned = sorted((run_dir / layout.TUNED_DIR / env_name).glob("*.yaml"))
        for settings in tuned:
            _copy(settings, site_run / layout.TUNED_DIR / env_name / settings.name, paths)
        shown = [f"[{layout.TUNE_TABLE}]({env_name}/{layout.TUNE_TABLE})"] + [f"[{s.name}]({layout.TUNED_DIR}/{env_name}/{s.name})" for s in tuned]
        links.append(f"- `{env_name}` tuned: " + ", ".join(shown))
    for env_dir in layout.environment_dirs(run_dir):
        site_env = site_run / env_dir.name
        site_env.mkdir(parents=True, exist_ok=True)
        files = [name for name in (layout.RESULTS_FILE, layout.ENVIRONMENT_FILE) if _copy(env_dir / name, site_env / name, paths)]
        pages = _notebook_pages(env_dir, site_env, paths)
        shown = [f"[{page}]({env_dir.name}/{page})" for page in pages] + [f"[{name}]({env_dir.name}/{name})" for name in files]
        links.append(f"- `{env_dir.name}`: " + ", ".join(shown or ["no file"]))
    findings = run_dir / layout.FINDINGS_FILE
    found = findings.read_text(encoding="utf-8").strip() if findings.is_file() else ""
    facts = run_facts(run_dir)
    page = "\n\n".join(part for part in (
        f"# {run_dir.name}", "[All runs](../index.html)", facts, "## Findings\n\n" + found if found else "",
        "## Pages and files\n\n" + "\n".join(links), run_tables(run_dir),
    ) if part)  # fmt: skip
    (site_run / INDEX).write_text(paths(markdown_html(run_dir.name, page)), encoding="utf-8")
    return paths("\n\n".join(part for part in (f"## [{run_dir.name}]({site_run.name}/{INDEX})", facts, found) if part))


def publish(run_dirs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], progress: bool = True) -> Path:
    """Publish `run_dirs` as a static site in `out` (see the module's docstring); returns the index's path."""
    runs = [Path(run_dir).resolve() for run_dir in run_dirs]
    if not runs:
        raise ValueError("RUN: give at least one run folder")
    for run in runs:
        if not layout.environment_dirs(run) and not any(run.glob(f"*/{layout.TUNE_DIR}/{layout.TUNE_TABLE}")):
            raise ValueError(f"RUN: {run} is not a run folder (no environment folder with a {layout.RESULTS_FILE} or a tune)")
    site = Path(out).resolve()
    if site in runs:
        raise ValueError(f"--out: {site} is a run folder; give a folder of its own (e.g. {site / layout.SITE_DIR})")
    site.mkdir(parents=True, exist_ok=True)
    entries = [
        publish_run(run, site / name)
        for run, name in tqdm(list(zip(runs, _site_names(runs))), desc="publish", unit="run", disable=not progress)
    ]  # fmt: skip
    index = site / INDEX
    index.write_text(markdown_html("benchlib runs", "# Runs\n\n" + "\n\n".join(entries)), encoding="utf-8")
    return index
