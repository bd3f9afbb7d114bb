"""The documentation's reference pages are generated from the code (`benchlib.report.reference`): they name every
parameter with its default, every status, environment and command; the README's table is the reference run's; and the
site builds with MkDocs in strict mode, every page in its navigation, with no marker left unfilled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchlib import status
from benchlib.cli import build_parser
from benchlib.config.jobs import available
from benchlib.config.params import BenchmarkParams
from benchlib.measure import peak, timing
from benchlib.paths import PROJECT_ROOT
from benchlib.report import reference
from tests.pages import site_problems

MKDOCS = PROJECT_ROOT / "mkdocs.yml"


def test_the_parameters_page_has_every_field_with_its_type_default_and_description() -> None:
    page = reference.generate("parameters")
    rows = {line.split("|")[1].strip(): line for line in page.splitlines()[2:]}
    assert set(rows) == {f"`{name}`" for name in BenchmarkParams.model_fields}
    for name, field in BenchmarkParams.model_fields.items():
        assert field.description, f"{name} has no description"
        row = rows[f"`{name}`"]
        assert field.description in row, name
        if not field.is_required() and field.default_factory is None:
            shown = yaml.safe_dump(field.default, default_flow_style=True).strip().removesuffix("...").strip()
            assert f"`{shown}`" in row, (name, row)
    assert "`90`, `99`" in rows["`latency_percentile`"] and "`pytorch`, `tensorflow`" in rows["`framework`"]  # Literal values, the registry's


def test_the_statuses_environments_grids_and_commands_pages_name_each_one() -> None:
    statuses = reference.generate("statuses")
    assert all(f"`{name}`" in statuses and status.MEANINGS[name] in statuses for name in status.STATUSES)
    environments = reference.generate("environments")
    assert all(f"`{name}`" in environments for name in available("environments"))
    assert "ONNX Runtime: the PyTorch model exported to ONNX" in environments  # the file's own comment
    grids = reference.generate("grids")
    assert all(f"`{name}`" in grids for name in available("grids"))
    parser = build_parser()
    cli = reference.cli_page(parser)
    for command in ("run", "summary", "compare", "publish", "cache", "lab"):
        assert f"### `{command}`" in cli
    assert "`--environments`" in cli and "`--threshold`" in cli and "`--out`" in cli


def test_a_marker_is_filled_and_an_unknown_one_is_refused() -> None:
    parser = build_parser()
    page = reference.fill("a <!-- default: warmup_max_seconds --> b\n<!-- generated: statuses -->", parser)
    assert page.startswith(f"a `{BenchmarkParams.model_fields['warmup_max_seconds'].default}` b") and "`crashed`" in page
    with pytest.raises(KeyError, match="no generated page 'nothing'"):
        reference.fill("<!-- generated: nothing -->", parser)
    with pytest.raises(KeyError, match="no parameter 'nothing'"):
        reference.fill("<!-- default: nothing -->", parser)
    constants = "<!-- constant: benchlib.measure.timing.WARMUP_TOLERANCE % -->, <!-- constant: benchlib.measure.peak.GEMM_SIZE[cpu] -->"
    assert reference.fill(constants, parser) == f"{timing.WARMUP_TOLERANCE * 100:g}%, {peak.GEMM_SIZE['cpu']}"


def test_the_readme_table_is_the_reference_runs_and_the_readme_is_short() -> None:
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    start, end = reference.README_TABLE
    shown = readme[readme.index(start) : readme.index(end) + len(end)]
    assert shown == reference.readme_table(), f"README.md's table differs from outputs/reference; it should read:\n{reference.readme_table()}"
    assert len(readme.splitlines()) <= 150


@pytest.mark.e2e
def test_the_site_builds_strict_with_every_page_generated_and_the_reference_run_published(tmp_path: Path) -> None:
    """`mkdocs build --strict` (as `make docs`): no warning, each navigation page built with its markers filled, and
    the reference run published inside the site with every link resolving."""
    site = tmp_path / "site"
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(MKDOCS), "--site-dir", str(site)],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert "WARNING" not in completed.stderr, completed.stderr
    navigation = yaml.safe_load(MKDOCS.read_text(encoding="utf-8").replace("!!python", "#"))["nav"]

    def pages(entries: list) -> list[str]:
        return [p for entry in entries for value in entry.values() for p in (pages(value) if isinstance(value, list) else [value])]

    listed = pages(navigation)
    assert sorted(listed) == sorted(path.name for path in (PROJECT_ROOT / "docs").glob("*.md"))  # every page in the navigation
    for page in listed:
        html = (site / page).with_suffix(".html").read_text(encoding="utf-8")
        assert not any(f"<!-- {kind}:" in html for kind in ("generated", "default", "constant")), page
    parameters = (site / "parameters.html").read_text(encoding="utf-8")
    assert all(f"<code>{name}</code>" in parameters for name in BenchmarkParams.model_fields)
    published = site / "reference-run"
    assert (published / "index.html").is_file() and (published / "reference" / "summary.html").is_file()
    assert 'href="reference-run/index.html"' in (site / "results.html").read_text(encoding="utf-8")
    assert site_problems(published, [str(PROJECT_ROOT), str(tmp_path)]) == []
