"""Shared fixtures: the kit's command line, and one smoke run of every CPU environment per test session."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from benchlib.backends.pytorch import use_torch
from benchlib.config.jobs import available
from benchlib.paths import PROJECT_ROOT

use_torch()  # this process runs PyTorch only: transformers must not import TensorFlow here (TensorFlow runs in subprocesses)

# Every CPU environment shipped in parameters/environments/: the study's four and today's backends.
CPU_ENVIRONMENTS = [name for name in available("environments") if name.startswith("cpu-")]

RunCli = Callable[..., subprocess.CompletedProcess]


def _run_cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchlib", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session")
def run_cli() -> RunCli:
    """Runs `python -m benchlib ARGS...` from the kit's folder; returns the completed process (output captured)."""
    return _run_cli


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder of `python -m benchlib run --grid smoke` over every CPU environment (no summary).

    Made once per test session (a few minutes): each environment is the benchmark notebook
    executed by papermill in its own kernel. Tests must not change it; copy it first.
    """
    run_dir = tmp_path_factory.mktemp("smoke-run")
    completed = _run_cli(
        "run", "--grid", "smoke", "--environments", ",".join(CPU_ENVIRONMENTS),
        "--out", str(run_dir), "--no-summary", "--quiet",
    )  # fmt: skip
    assert completed.returncode == 0, f"smoke run failed:\n{completed.stdout}\n{completed.stderr}"
    return run_dir
