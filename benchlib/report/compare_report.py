"""`python -m benchlib compare`'s report: `analysis.compare`'s comparison written as cells.csv, environments.csv,
differences.csv, a plot of each environment's change (compare.png) and a page (compare.html) rendered as the summary
is (`render.markdown_html`); the command itself prints the few lines of `analysis.compare.summary_lines`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd

from benchlib.analysis.compare import (
    CELL_COLUMNS, DEFAULT_ALPHA, DEFAULT_THRESHOLD, SLOWER, CompareError, RunComparison, compare_runs, signed_percent, summary_lines,
)  # fmt: skip
from benchlib.analysis.cost import PriceError
from benchlib.paths import display_path
from benchlib.report.plots import change_plot, save_figure_file
from benchlib.report.reference import markdown_table
from benchlib.report.render import markdown_html
from benchlib.store.layout import COMPARE_CELLS, COMPARE_DIFFERENCES, COMPARE_ENVIRONMENTS, COMPARE_HTML, COMPARE_PLOT, COMPARE_QUALITY, compare_dir

PERCENT_COLUMNS: tuple[str, ...] = ("change", "geomean_change", "ci95_low", "ci95_high")


def _shown(table: pd.DataFrame, empty: str) -> str:
    """`table` in Markdown, changes as signed percentages; `empty` when it has no row."""
    if table.empty:
        return empty
    percent = {column: table[column].map(signed_percent) for column in PERCENT_COLUMNS if column in table}
    return markdown_table(table.assign(**percent))


def _notes(notes: tuple[str, ...]) -> str:
    """The comparison's notes (models matched by checkpoint) as a Markdown list after a blank line; "" when none."""
    return "\n\n" + "\n".join(f"- {note}" for note in notes) if notes else ""


def report_markdown(comparison: RunComparison, plot: str) -> str:
    """The report: how to read it, the environments, the plot (file name `plot`), the differences, the cells. Each run
    is named by its folder relative to the kit, or by its name (`display_path`): never a path of this machine."""
    a, b = (display_path(run.path) for run in (comparison.run_a, comparison.run_b))
    return f"""# Run B against run A

A: `{a}`, B: `{b}`{_notes(comparison.notes)}

A change is B's time over A's, minus 1: positive means B is slower. A cell is **faster** or **slower** only when a
two-sided Mann-Whitney U test on its raw samples gives p < {comparison.alpha:g} and its median changed by at least
{comparison.threshold:.0%} (or the environment's threshold, raised to the spread between processes where both runs have
rounds); otherwise **no change**. An environment's change is the geometric mean over its cells with a 95% bootstrap
interval; it is faster or slower when the interval excludes no change and the geometric mean is at least the threshold
away from it, *inconclusive* when it rests on disturbed cells.

## Environments

{_shown(comparison.environments, "No environment.")}

![geometric mean change per environment]({plot})

## What differs between the runs (environment.json)

{_shown(comparison.differences, "Nothing differs in software versions, machine, threads or parameters.")}

## Cells

{_shown(comparison.cells[list(CELL_COLUMNS)], "No cell.")}
{_quality(comparison)}"""


def _quality(comparison: RunComparison) -> str:
    """The quality section of the report, where both runs scored the same data: `changed` when the verdict against the
    target changed or B's score is outside A's 95% interval."""
    if comparison.quality.empty:
        return ""
    return f"""
## Quality on your data

Each environment's score on the same examples in both runs; `changed` when its verdict against the target changed or
B's score is outside A's 95% interval.

{_shown(comparison.quality, "")}
"""


def write_report(comparison: RunComparison, out: str | os.PathLike[str]) -> Path:
    """Write cells.csv, environments.csv, differences.csv, compare.png and compare.html into `out`; returns the HTML's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    comparison.cells[list(CELL_COLUMNS)].to_csv(out / COMPARE_CELLS, index=False)
    comparison.environments.to_csv(out / COMPARE_ENVIRONMENTS, index=False)
    comparison.differences.to_csv(out / COMPARE_DIFFERENCES, index=False)
    if not comparison.quality.empty:
        comparison.quality.to_csv(out / COMPARE_QUALITY, index=False)
    save_figure_file(change_plot(comparison.environments, comparison.threshold), out / COMPARE_PLOT)
    a, b = (display_path(run.path) for run in (comparison.run_a, comparison.run_b))
    path = out / COMPARE_HTML
    path.write_text(markdown_html(f"{b} against {a}", report_markdown(comparison, COMPARE_PLOT)), encoding="utf-8")
    return path


def run_compare(
    run_a: str | os.PathLike[str], run_b: str | os.PathLike[str], threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA, out: str | os.PathLike[str] | None = None,
) -> int:  # fmt: skip
    """The `compare` command: compare, write the report, print the summary; 1 when an environment got slower,
    2 (with a one-line error) for bad input, else 0."""
    try:
        comparison = compare_runs(run_a, run_b, threshold, alpha)
    except (CompareError, PriceError) as error:
        print(f"compare: {error}", file=sys.stderr)
        return 2
    report = write_report(comparison, out if out is not None else compare_dir(run_a, run_b))
    print("\n".join(summary_lines(comparison)))
    print(f"report: {report}")
    return 1 if (comparison.environments["verdict"] == SLOWER).any() else 0
