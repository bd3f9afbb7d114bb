"""The summary's parts: what a summary reads of its runs (`SummaryRun`), a section (`Section`), the registry that
`@section` fills in the summary's order, and what the summary shows above its sections (findings, contents)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from benchlib.analysis import load as under_load
from benchlib.analysis import cost, quality, runs, tune
from benchlib.paths import display_path
from benchlib.store.results import has_text

# The kinds of measurement a run can hold, as the contents line names them, and how a run measures each.
CELLS, GENERATION, LOAD, TUNE, QUALITY = "cells", "generation", "load", "tune", "quality"
KINDS: dict[str, tuple[str, str]] = {
    CELLS: ("the forward pass one call at a time", "`scenario: cell`, the default"),
    GENERATION: ("generation", "`workload: generate`"),
    LOAD: ("the load scenarios", "`scenario`: single-stream, multi-stream, server, offline"),
    TUNE: ("each runtime at its best settings", "`tune:`"),
    QUALITY: ("quality on your data", "`eval_data`; perplexity on the text when generating"),
}
DOCS_PAGE = "docs/summary.md"  # the documentation's page that explains every section


@dataclass
class SummaryRun:
    """What the summary reads of one or more runs: every row, split by kind of measurement, and where it writes its tables
    and figures; what several sections share is computed once, when first asked for."""

    run_dirs: list[Path]
    output_dir: Path
    prices: Path | None = None
    cache: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(
        cls, run_dirs: list[str | os.PathLike[str]], output_dir: str | os.PathLike[str] | None = None, prices: str | os.PathLike[str] | None = None
    ) -> SummaryRun:
        """The runs in `run_dirs` (empty: the newest under outputs/), writing to `output_dir` (None: the first run), their
        machines priced by the prices file `prices` where given (else by their own environment.json)."""
        folders = [Path(run_dir) for run_dir in run_dirs] or runs.default_run_dirs()
        return cls(folders, Path(output_dir) if output_dir else folders[0], Path(prices) if prices else None)

    @cached_property
    def all_rows(self) -> pd.DataFrame:
        return runs.load_runs(self.run_dirs)

    @cached_property
    def rows(self) -> pd.DataFrame:
        """The forward pass's cells timed one call at a time."""
        return runs.by_workload(self.all_rows, runs.FORWARD)

    @cached_property
    def generated(self) -> pd.DataFrame:
        """The generate cells timed one call at a time."""
        return runs.by_workload(self.all_rows, runs.GENERATE)

    @cached_property
    def loaded(self) -> pd.DataFrame:
        """The load scenarios' cells."""
        return under_load.load_rows(self.run_dirs)

    @cached_property
    def machines(self) -> pd.DataFrame:
        """Per run and environment folder: its machine's name, hardware and price (`cost.run_machines`)."""
        return cost.run_machines(self.run_dirs, self.prices)

    @cached_property
    def environments(self) -> list[dict[str, Any]]:
        """Every environment's environment.json."""
        return quality.load_environments(self.run_dirs)

    def shared(self, name: str, make: Callable[[], Any]) -> Any:
        """A value several sections use (`make()` once)."""
        if name not in self.cache:
            self.cache[name] = make()
        return self.cache[name]

    def measured(self) -> dict[str, bool]:
        """Per kind of measurement (KINDS), whether these runs hold any of it."""
        return {
            CELLS: not self.rows.empty, GENERATION: not self.generated.empty, LOAD: not self.loaded.empty,
            TUNE: bool(tune.tuned_environments(self.run_dirs)),
            QUALITY: any("quality_metric" in frame and has_text(frame["quality_metric"]).any() for frame in (self.all_rows, self.loaded)),
        }  # fmt: skip

    def runs_line(self) -> str:
        return "Runs: " + ", ".join(f"`{display_path(run_dir)}`" for run_dir in self.run_dirs)


@dataclass(frozen=True)
class Section:
    """One part of the summary: its title, the kind of measurement it reads, a caption of a line or two, the anchor of
    its explanation on DOCS_PAGE, and its functions: `show(run)` its tables and figures, `findings(run)` its sentences
    for the summary's findings, `has_data(run)` whether the run holds what it shows (default: its kind was measured), and
    `lead(run)` what it shows above the findings, on the summary's first screen (a decision)."""

    key: str
    title: str
    kind: str | tuple[str, ...]  # several: the section reads any of them
    caption: str
    show: Callable[[SummaryRun], None]
    findings: Callable[[SummaryRun], list[str]] | None = None
    has_data: Callable[[SummaryRun], bool] | None = None
    lead: Callable[[SummaryRun], None] | None = None

    def present(self, run: SummaryRun) -> bool:
        """Whether `run` holds this section's data."""
        kinds = (self.kind,) if isinstance(self.kind, str) else self.kind
        return any(run.measured()[kind] for kind in kinds) and (self.has_data is None or self.has_data(run))

    @property
    def anchor(self) -> str:
        return self.title.lower().replace(" ", "-").replace(".", "").replace("'", "").replace(",", "")


SECTIONS: list[Section] = []


def section(
    key: str, title: str, kind: str | tuple[str, ...], caption: str, findings: Callable[[SummaryRun], list[str]] | None = None,
    has_data: Callable[[SummaryRun], bool] | None = None, lead: Callable[[SummaryRun], None] | None = None,
) -> Callable[[Callable[[SummaryRun], None]], Callable[[SummaryRun], None]]:  # fmt: skip
    """Register the decorated `show(run)` as a section of the summary, after those registered before it."""

    def register(show: Callable[[SummaryRun], None]) -> Callable[[SummaryRun], None]:
        if any(known.key == key for known in SECTIONS):
            raise ValueError(f"a summary section {key!r} is registered twice")
        SECTIONS.append(Section(key, title, kind, caption, show, findings, has_data, lead))
        return show

    return register


def present(run: SummaryRun) -> list[Section]:
    """The sections whose data `run` holds, in the summary's order."""
    return [part for part in SECTIONS if part.present(run)]


def get(key: str) -> Section:
    """The section registered as `key`."""
    for part in SECTIONS:
        if part.key == key:
            return part
    raise KeyError(f"no summary section {key!r}: one of {', '.join(part.key for part in SECTIONS)}")


def not_measured_sentence(run: SummaryRun) -> str | None:
    """One sentence naming the kinds of measurement these runs hold none of, and how a run measures each."""
    missing = [f"{KINDS[kind][0]} ({KINDS[kind][1]})" for kind, held in run.measured().items() if not held]
    return f"Not measured in these runs: {'; '.join(missing)}." if missing else None


def findings(run: SummaryRun) -> list[str]:
    """The summary's findings: every present section's, in order, then what these runs did not measure."""
    sentences = [sentence for part in present(run) if part.findings for sentence in part.findings(run)]
    if not any(run.measured().values()):
        sentences.append("These runs have no results yet: there is nothing to summarise.")
    missing = not_measured_sentence(run)
    return sentences + ([missing] if missing else [])


def contents(run: SummaryRun) -> str:
    """The contents line: the sections shown, numbered, then the kinds of measurement not in these runs."""
    shown = [f"{number}. {part.title}" for number, part in enumerate(present(run), 1)]
    line = "**Contents:** " + (" · ".join(shown) if shown else "none")
    missing = [KINDS[kind][0] for kind, held in run.measured().items() if not held]
    if missing:
        line += f". Not measured, so not shown: {', '.join(missing)}"
    return line + f". What each section and column means: the documentation's *Reading the summary* page ({DOCS_PAGE})."


def show_section(part: Section, number: int, run: SummaryRun) -> None:
    """In the notebook: the section's heading, its caption with where its method is explained, then its tables and figures."""
    from IPython.display import Markdown, display

    display(Markdown(f"## {number}. {part.title}\n\n{part.caption} (Method: {DOCS_PAGE}#{part.anchor}.)"))
    part.show(run)


def show_summary(run: SummaryRun) -> None:
    """In the notebook: the runs, what the present sections lead with (a decision), the findings, the contents line, then
    every present section."""
    from IPython.display import Markdown, display

    from benchlib.report.display import show_findings

    display(Markdown(run.runs_line()))
    for part in present(run):
        if part.lead:
            part.lead(run)
    show_findings(findings(run), run.output_dir)
    display(Markdown(contents(run)))
    for number, part in enumerate(present(run), 1):
        show_section(part, number, run)
