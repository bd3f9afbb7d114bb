"""Energy per inference in the summary: each environment's joules per unit over the cells every environment measured,
and the most frugal named beside the fastest where they differ; the section shown only where a counter was read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from benchlib import run_environment
from benchlib.analysis import energy
from benchlib.analysis.runs import prepare
from benchlib.measure import sweep as sweep_module
from benchlib.measure.device_state import NvmlMonitor
from benchlib.report.render import render_summary
from benchlib.store.results import COLUMNS
from tests.measure.test_device_state import FakeNvml


def cell(environment: str, sequence_length: int, time_s: float, joules: float, **extra: object) -> dict:
    return {
        "environment": environment, "framework": "pytorch", "mode": "eager" if environment == "gpu-pytorch" else "compile",
        "precision": "float32", "device": "cuda", "machine": "H200", "model": "bert-base-cased", "batch_size": 1,
        "sequence_length": sequence_length, "status": "ok", "time_s": time_s, "median_s": time_s, "energy_j": joules,
        "energy_unit": "call", "energy_source": "nvml", "scenario": "cell", "workload": "forward", **extra,
    }  # fmt: skip


ROWS = pd.DataFrame([
    cell("gpu-pytorch", 128, 0.004, 0.8), cell("gpu-pytorch", 512, 0.005, 1.0),
    cell("gpu-torch-compile", 128, 0.002, 1.2), cell("gpu-torch-compile", 512, 0.0025, 1.5),
    cell("gpu-torch-compile", 1024, 0.004, 2.0),  # measured by one environment only: not compared
]).reindex(columns=[*COLUMNS, "time_s", "machine"])  # fmt: skip
ROWS["mean_s"], ROWS["samples_s"] = ROWS["time_s"], [[t] for t in ROWS["time_s"]]


def test_each_environments_energy_is_over_the_cells_both_measured_and_the_frugal_one_is_named_beside_the_fastest() -> None:
    table = energy.energy_table(prepare(ROWS)).set_index("environment")
    assert table.loc["gpu-pytorch", "energy_j"] == pytest.approx((0.8 * 1.0) ** 0.5) and table.loc["gpu-torch-compile", "cells"] == 2
    assert table.loc["gpu-torch-compile", "energy_j"] == pytest.approx((1.2 * 1.5) ** 0.5)
    assert table.loc["gpu-torch-compile", "vs_fastest"] == 1.0 and table.loc["gpu-pytorch", "vs_fastest"] == pytest.approx((0.8 / 1.2 * 1.0 / 1.5) ** 0.5)
    (sentence,) = energy.energy_findings(table.reset_index())
    assert sentence == (
        "For bert-base-cased (the forward pass), the fastest environment, gpu-torch-compile, uses 1.34 J per call; the most frugal, "
        "gpu-pytorch, 0.894 J per call (0.67x the fastest's) at 0.50x its speed, over the 2 cells both measured (NVML counter)."
    )


def test_no_finding_where_the_fastest_is_also_the_most_frugal_and_no_table_without_a_counter() -> None:
    frugal_and_fast = ROWS.assign(energy_j=ROWS["energy_j"].where(ROWS["environment"] == "gpu-pytorch", 0.1))
    assert energy.energy_findings(energy.energy_table(prepare(frugal_and_fast))) == []
    assert energy.energy_table(prepare(ROWS.assign(energy_j=float("nan"), energy_unit=float("nan")))).empty


def test_a_run_with_a_counter_shows_the_energy_section_and_its_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two real environments read through a fake NVML (what this machine lacks), then the real summary."""
    for environment, mode in (("cpu-pytorch", "eager"), ("cpu-torchscript", "torchscript")):
        monkeypatch.setattr(sweep_module, "make_monitor", lambda device: NvmlMonitor(FakeNvml(watts=200.0), handle=0))
        run_environment(dict(
            environment=environment, framework="pytorch", mode=mode, models=["bert-base-cased"], model_scale="tiny", batch_sizes=[1],
            sequence_lengths=[8], repeat=5, number=20, remeasure=0, max_interference=1.0, output_dir=str(tmp_path / "run" / environment),
        ), progress=False)  # fmt: skip
    page = render_summary([tmp_path / "run"]).read_text(encoding="utf-8")
    assert 'id="' in page and "Energy-per-inference" in page
    table = pd.read_csv(tmp_path / "run" / "tables" / "energy.csv")
    assert set(table["environment"]) == {"cpu-pytorch", "cpu-torchscript"} and set(table["unit"]) == {"call"} and set(table["source"]) == {"nvml"}
    assert (table["energy_j"] > 0).all() and table["vs_fastest"].min() <= 1.0
    shutil.rmtree(tmp_path / "run")
