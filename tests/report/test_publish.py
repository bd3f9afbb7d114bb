"""`python -m benchlib publish`: runs as a static site whose every link and image resolves inside it, with no path of the
machine that made it and nothing loaded from the network; bad input is one line and exit status 2."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchlib.paths import OUTPUTS_DIR, PROJECT_ROOT
from benchlib.store.cache import CACHE_VARIABLE
from benchlib.store.layout import SITE_DIR, environment_dirs
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


@pytest.mark.e2e
def test_a_published_site_holds_no_secret_of_the_environment_and_no_path_of_the_machine(
    tmp_path: Path, network_blocked, run_cli_in_process, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real run (one model, one cell, its summary) made and published with secret-looking variables in its environment,
    reading a text file outside the kit: no file of either site (the run's own, and `publish`'s) holds a secret's value,
    the run's folder, the text file's, the build cache's, the kit's or the home folder. (The host name is in
    environment.json by design: not checked.)"""
    planted = {
        "HF_TOKEN": f"hf_kitTEST{secrets.token_hex(16)}",
        "AWS_SECRET_ACCESS_KEY": secrets.token_hex(20),
        "BENCHLIB_TEST_SECRET": secrets.token_hex(16),
    }
    text = tmp_path / "private" / "notes.txt"
    text.parent.mkdir()
    text.write_text("A few words of the user's own, tokenized by nobody here: the catalogue model has no tokenizer.\n", encoding="utf-8")
    params = tmp_path / "tiny.yaml"
    params.write_text(f"models: [gpt2]\nsequence_lengths: [8]\ninputs: text\ntext_file: {text}\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    completed = subprocess.run(
        [sys.executable, "-m", "benchlib", "run", "--grid", "smoke", "--environments", "cpu-pytorch", "--params", str(params),
         "--no-limits", "--quiet", "--out", str(run_dir)],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, env={**network_blocked.env, **planted},
    )  # fmt: skip
    assert completed.returncode == 0, f"{completed.stdout}\n{completed.stderr}"
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    site = tmp_path / "site"
    code, _, err = run_cli_in_process(["publish", str(run_dir), "--out", str(site)])
    assert code == 0, err

    needles = [*planted.values(), str(run_dir), str(text), str(tmp_path), os.environ[CACHE_VARIABLE], str(PROJECT_ROOT)]
    home = re.compile(re.escape(os.fsencode(Path.home())) + rb"(?![\w.-])")  # the home folder, not a longer name it begins
    leaks = []
    for folder in (run_dir / SITE_DIR, site):
        files = [file for file in sorted(folder.rglob("*")) if file.is_file()]
        assert any(file.name == "summary.html" for file in files) and any(file.name == "benchmark.html" for file in files)
        for file in files:
            data = file.read_bytes()
            leaks += [f"{file}: {needle}" for needle in needles if needle.encode() in data]
            leaks += [f"{file}: the home folder" for _ in home.finditer(data)][:1]
    assert leaks == []
    recorded = json.loads((site / "run" / "cpu-pytorch" / "environment.json").read_text(encoding="utf-8"))["parameters"]
    assert recorded["text_file"] == "notes.txt" and recorded["output_dir"] == "run/cpu-pytorch"
