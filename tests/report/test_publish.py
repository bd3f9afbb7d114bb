"""`python -m benchlib publish`: runs as a static site whose every link and image resolves inside it, with no path of the
machine that made it and nothing loaded from the network; bad input is one line and exit status 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchlib.paths import OUTPUTS_DIR, PROJECT_ROOT
from benchlib.store.layout import environment_dirs
from tests.pages import site_problems

REFERENCE = OUTPUTS_DIR / "reference"


@pytest.mark.e2e
def test_the_reference_run_published_twice_over_is_a_site_that_opens_from_its_folder(tmp_path: Path, run_cli_in_process) -> None:
    """Two runs of one name (the reference run, and a copy of it elsewhere): each gets its folder, the index links both,
    each run's page its summary, every environment's files and its headline tables."""
    copy = shutil.copytree(REFERENCE, tmp_path / "copies" / "reference", ignore=shutil.ignore_patterns("site"))
    site = tmp_path / "site"
    code, out, err = run_cli_in_process(["publish", str(REFERENCE), str(copy), "--out", str(site)])
    assert code == 0, err
    assert f"site: {site / 'index.html'}" in out
    index = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="reference/index.html"' in index and 'href="reference-2/index.html"' in index
    assert "AMD EPYC" in index and "cpu-onnxruntime-int8" in index  # the machine and the environments, from environment.json
    for name in ("reference", "reference-2"):
        page = (site / name / "index.html").read_text(encoding="utf-8")
        assert 'href="summary.html"' in page and 'href="../index.html"' in page and "tables/speedups.csv" in page
        for env_dir in environment_dirs(REFERENCE):
            assert (site / name / env_dir.name / "results.csv").read_bytes() == (env_dir / "results.csv").read_bytes()
            assert f'href="{env_dir.name}/results.csv"' in page
    recorded = json.loads((REFERENCE / "cpu-pytorch" / "environment.json").read_text(encoding="utf-8"))["parameters"]["output_dir"]
    assert site_problems(site, [str(PROJECT_ROOT), str(tmp_path), str(Path(recorded).parent)]) == []  # the run where it was made too


def test_publish_refuses_a_folder_that_is_no_run_and_a_site_in_place_of_a_run(tmp_path: Path, run_cli_in_process) -> None:
    code, _, err = run_cli_in_process(["publish", str(tmp_path), "--out", str(tmp_path / "site")])
    assert code == 2 and err.strip() == f"RUN: {tmp_path} is not a run folder (no environment folder with a results.csv or a tune)"
    run = shutil.copytree(REFERENCE / "cpu-pytorch", tmp_path / "run" / "cpu-pytorch").parent
    code, _, err = run_cli_in_process(["publish", str(run), "--out", str(run)])
    assert code == 2 and err.strip() == f"--out: {run} is a run folder; give a folder of its own (e.g. {run / 'site'})"
    assert not (run / "index.html").exists()
