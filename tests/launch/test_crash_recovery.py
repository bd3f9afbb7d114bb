"""Nothing lost, for real: a kernel killed mid-cell, a second writer, a run with the network blocked (the session's smoke run)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from benchlib import read_results
from benchlib.paths import PARAMETERS_DIR, PROJECT_ROOT
from benchlib.store.recovery import read_in_flight
from tests.conftest import NetworkBlock
from tests.kernels import kill_mid_cell

SMOKE = yaml.safe_load((PARAMETERS_DIR / "grids" / "smoke.yaml").read_text())
MODELS = ["gpt2", "bert-base-cased", "distilgpt2", "roberta-base"]  # a few of the smoke grid's, for runs of the test's own
SMOKE_CELLS = len(MODELS) * len(SMOKE["batch_sizes"]) * len(SMOKE["sequence_lengths"])


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "benchlib", *args]


def smoke(run_dir: Path, environments: str = "cpu-pytorch", models: list[str] = MODELS) -> list[str]:
    """`benchlib run` of the smoke grid on `models`, without the machine's limits (they cost a kernel)."""
    return cli(
        "run", "--grid", "smoke", "--models", ",".join(models), "--environments", environments, "--out", str(run_dir),
        "--no-summary", "--quiet", "--no-limits",
    )  # fmt: skip


def complete_lines(data: bytes) -> bytes:
    return data[: data.rfind(b"\n") + 1]


@pytest.mark.e2e
def test_killed_kernel_costs_only_the_cell_in_flight(tmp_path):
    env_dir = tmp_path / "run" / "cpu-pytorch"
    runner = subprocess.Popen(smoke(tmp_path / "run"), cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        killed = kill_mid_cell(env_dir, runner, min_rows=5)  # the kernel, with a cell in flight that has no row
        finished_before = complete_lines((env_dir / "results.csv").read_bytes())
        output, _ = runner.communicate(timeout=600)
    finally:
        runner.kill()
    assert runner.returncode == 0, output
    assert "restarting" in output
    after = (env_dir / "results.csv").read_bytes()
    assert after.startswith(finished_before)  # finished rows kept as they were
    rows = read_results(env_dir)
    cells = list(zip(rows.model, rows.batch_size, rows.sequence_length))
    assert len(cells) == len(set(cells)) == SMOKE_CELLS  # the grid completes, every cell once
    crashed = rows[rows.status == "crashed"]
    assert len(crashed) == 1 and crashed.reason.iloc[0].startswith("kernel died (SIGKILL: Killed) while measuring with torch "), rows.reason.tolist()
    assert (crashed.model.iloc[0], crashed.batch_size.iloc[0], crashed.sequence_length.iloc[0]) == (killed["model"], killed["batch_size"], killed["sequence_length"])

    record = (env_dir / "benchmark.ipynb").stat().st_mtime_ns
    again = subprocess.run(smoke(tmp_path / "run"), cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert (env_dir / "results.csv").read_bytes() == after  # nothing measured twice
    assert "cpu-pytorch: every cell of round 1 has its row: nothing to measure, no kernel started" in again.stdout
    assert (env_dir / "benchmark.ipynb").stat().st_mtime_ns == record  # the record is the kernel's that measured


@pytest.mark.e2e
@pytest.mark.full
def test_a_second_run_on_a_folder_in_use_is_refused(tmp_path):
    env_dir = tmp_path / "run" / "cpu-pytorch"
    first = subprocess.Popen(smoke(tmp_path / "run"), cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while read_in_flight(env_dir) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run(smoke(tmp_path / "run"), cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
        assert first.poll() is None, "the first run ended before the second started"
    finally:
        first.wait(timeout=600)
    assert second.returncode != 0
    assert f"{env_dir} is in use by pid" in second.stdout + second.stderr
    rows = read_results(env_dir)
    assert len(rows) == SMOKE_CELLS and not rows.duplicated(["model", "batch_size", "sequence_length"]).any()


@pytest.mark.e2e
def test_run_completes_with_the_network_blocked(
    smoke_run: Path, smoke_environments: list[str], smoke_models: list[str], network_blocked: NetworkBlock, tmp_path: Path
):
    # The block works: a plain download attempt is stopped and logged.
    tried = tmp_path / "attempts.log"
    url = "import urllib.request; urllib.request.urlopen('https://huggingface.co')"
    probe = subprocess.run([sys.executable, "-c", url], env={**network_blocked.env, "NETWORK_ATTEMPTS_LOG": str(tried)}, capture_output=True, text=True)
    assert probe.returncode != 0 and "network blocked" in probe.stderr and tried.read_text()
    # The session's smoke run (its CPU environments, every model and the user's folders, the machine's limits) ran under it.
    for environment in smoke_environments:
        rows = read_results(smoke_run / environment)
        assert len(rows) == len(smoke_models) * len(SMOKE["batch_sizes"]) * len(SMOKE["sequence_lengths"]) and (rows.status != "error").all(), rows.reason.tolist()
    assert not network_blocked.log.exists(), network_blocked.log.read_text()  # the kit tried no connection at all


@pytest.mark.e2e
@pytest.mark.full
def test_force_measures_again_and_keeps_the_earlier_results(tmp_path):
    command = smoke(tmp_path / "run", models=["gpt2"])
    env_dir = tmp_path / "run" / "cpu-pytorch"
    assert subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, timeout=600).returncode == 0
    first = (env_dir / "results.csv").read_bytes()
    forced = subprocess.run(command + ["--force"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert forced.returncode == 0, forced.stderr
    [aside] = env_dir.glob("results.2*.csv")
    assert aside.read_bytes() == first and "earlier results set aside" in forced.stdout
    again = read_results(env_dir)
    assert len(again) == len(read_results(aside)) == len(SMOKE["sequence_lengths"])
    assert again.samples_s.tolist() != read_results(aside).samples_s.tolist()  # measured anew


def test_max_restarts_must_not_be_negative(capsys):
    from benchlib.cli import main

    assert main(["run", "--max-restarts", "-1"]) == 2
    assert "--max-restarts: must be 0 or more, not -1" in capsys.readouterr().err
