"""The summary's parts (`benchlib.report.sections`): each section is shown where a run holds its data and absent where it
does not, each renders on the reference run (every forward-pass section), and each is explained on the documentation's
"Reading the summary" page, whose glossary covers every column its tables write."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from benchlib.paths import PROJECT_ROOT
from benchlib.report import sections
from benchlib.report.glossary import COLUMNS as GLOSSARY
from benchlib.store.layout import FIGURES_DIR, TABLES_DIR

REFERENCE = PROJECT_ROOT / "outputs" / "reference"
DOCS_PAGE = PROJECT_ROOT / sections.base.DOCS_PAGE
# Columns that name a model, a shape, a status or a framework's environment: self-explaining, left out of the glossary.
SELF_EXPLAINING = re.compile(r"^(\d+x\d+|ok|too_long|oom|unsupported|error|crashed|not measured)$")


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> sections.SummaryRun:
    run = shutil.copytree(REFERENCE, tmp_path_factory.mktemp("sections") / "reference")
    for made in (TABLES_DIR, FIGURES_DIR):  # the reference run ships its summary's: these sections write them anew
        shutil.rmtree(run / made, ignore_errors=True)
    return sections.SummaryRun.load([run])


def test_a_forward_pass_run_shows_its_sections_and_none_of_generation_or_load(reference_run: sections.SummaryRun) -> None:
    shown = [part.key for part in sections.present(reference_run)]
    # Every section of the cells but energy: the reference run's machine had no energy counter.
    assert shown == [part.key for part in sections.SECTIONS if part.kind == sections.CELLS and part.key != "energy"]
    assert sections.get("load") not in sections.present(reference_run) and sections.get("generation") not in sections.present(reference_run)
    assert sections.findings(reference_run)[-1] == (
        "Not measured in these runs: generation (`workload: generate`); the load scenarios (`scenario`: single-stream, "
        "multi-stream, server, offline); each runtime at its best settings (`tune:`); quality on your data (`eval_data`; perplexity "
        "on the text when generating)."
    )
    assert (
        "Not measured, so not shown: generation, the load scenarios, each runtime at its best settings, quality on your data."
        in sections.contents(reference_run)
    )


def test_every_present_section_renders_and_writes_its_tables_or_figures(reference_run: sections.SummaryRun, capsys: pytest.CaptureFixture[str]) -> None:
    output = reference_run.output_dir
    for part in sections.present(reference_run):
        before = {path.name for folder in (TABLES_DIR, FIGURES_DIR) for path in (output / folder).glob("*")}
        part.show(reference_run)
        after = {path.name for folder in (TABLES_DIR, FIGURES_DIR) for path in (output / folder).glob("*")}
        assert after - before, part.key  # each section writes what it shows
    capsys.readouterr()
    columns = {column for table in (output / TABLES_DIR).glob("*.csv") if "spreadsheet_2019" not in table.name for column in pd.read_csv(table, nrows=0).columns}
    models = set(reference_run.rows["model"])
    assert {column for column in columns - set(GLOSSARY) if column not in models and not SELF_EXPLAINING.match(column)} == set()


def test_a_run_without_results_has_no_section_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty" / "cpu-pytorch").mkdir(parents=True)
    run = sections.SummaryRun.load([tmp_path / "empty"])
    assert sections.present(run) == []
    assert sections.findings(run)[0] == "These runs have no results yet: there is nothing to summarise."


def test_every_section_is_explained_on_the_documentations_page() -> None:
    headings = {re.sub(r"[^\w\- ]", "", line[3:].strip().lower()).replace(" ", "-") for line in DOCS_PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("## ")}
    assert {part.anchor for part in sections.SECTIONS} - headings == set()
    assert len({part.key for part in sections.SECTIONS}) == len(sections.SECTIONS)
    with pytest.raises(ValueError, match="registered twice"):
        sections.section("load", "Again", sections.LOAD, "")(lambda run: None)
