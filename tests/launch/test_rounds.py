"""Rounds: every environment measured again in a fresh kernel, the order rotated; a killed round resumes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchlib import read_results
from benchlib.config.jobs import plan_run, round_schedule
from benchlib.paths import PROJECT_ROOT
from tests.kernels import kill_mid_cell


def params_file(tmp_path: Path, **values: object) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_rounds_rotate_the_order_of_environments(tmp_path):
    environments = ["cpu-pytorch", "cpu-torchscript", "cpu-tensorflow", "cpu-tensorflow-xla"]
    jobs = plan_run(tmp_path / "run", "smoke", environments, [params_file(tmp_path, rounds=3)])
    schedule = [(job.params.current_round, job.name) for job in round_schedule(jobs)]
    a, b, c, d = environments
    assert schedule == [(1, a), (1, b), (1, c), (1, d), (2, b), (2, c), (2, d), (2, a), (3, c), (3, d), (3, a), (3, b)]
    assert [job.executed_notebook.name for job in round_schedule(jobs)[:5]] == ["benchmark.ipynb"] * 4 + ["benchmark.round2.ipynb"]
    assert [job.params.current_round for job in round_schedule(plan_run(tmp_path / "one", "smoke", environments[:2]))] == [1, 1]


@pytest.mark.e2e
@pytest.mark.full
def test_a_round_killed_mid_cell_goes_on_where_it_stopped(tmp_path):
    grid = params_file(tmp_path, models=["bert-base-cased", "gpt2", "distilgpt2"], sequence_lengths=[8, 16], rounds=2, remeasure=0)
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "benchlib", "run", "--grid", "smoke", "--environments", "cpu-pytorch,cpu-torchscript",
               "--params", str(grid), "--out", str(run_dir), "--no-summary", "--no-limits", "--quiet"]  # fmt: skip
    runner = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:  # round 2 starts with cpu-torchscript
        kill_mid_cell(run_dir / "cpu-torchscript", runner, wanted=lambda cell: cell.get("round") == 2 and cell["model"] == "gpt2", timeout_s=600)
        output, _ = runner.communicate(timeout=900)
    finally:
        runner.kill()
    assert runner.returncode == 0, output
    assert "round 2 of 2" in output and "restarting" in output
    for environment in ("cpu-pytorch", "cpu-torchscript"):
        rows = read_results(run_dir / environment)
        keys = list(zip(rows.model, rows.sequence_length, rows["round"]))
        assert len(keys) == len(set(keys)) == 3 * 2 * 2, keys  # every cell once in each round
        assert (run_dir / environment / "benchmark.ipynb").exists() and (run_dir / environment / "benchmark.round2.ipynb").exists()
    script = read_results(run_dir / "cpu-torchscript")
    crashed = script[script.status == "crashed"]
    assert len(crashed) == 1 and crashed["round"].iloc[0] == 2 and crashed["model"].iloc[0] == "gpt2"
    assert (script[script["round"] == 1].status == "ok").all()  # round 1 untouched
    assert set(script.loc[script["round"] == 2, "model"]) == {"bert-base-cased", "gpt2", "distilgpt2"}
