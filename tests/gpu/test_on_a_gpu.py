"""On a GPU (`make test-gpu`): every GPU environment of PyTorch on tiny models with the card's state in its rows (clocks,
busy share, energy from NVML), environment.json's GPU, and a short load run. Without a GPU every test here is skipped
with the reason: the CPU's tests cover the same logic with a fake of NVML's answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchlib import run_environment
from benchlib.config.jobs import available
from benchlib.paths import PARAMETERS_DIR


def gpu_reason() -> str | None:
    """Why these tests cannot run here (None on a machine where PyTorch sees a CUDA GPU)."""
    import torch

    return None if torch.cuda.is_available() else "no GPU: torch.cuda.is_available() is False on this machine (make test-gpu runs these on one)"


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(gpu_reason() is not None, reason=gpu_reason() or "")]
PYTORCH_GPU = [name for name in available("environments") if name.startswith("gpu-") and "tensorflow" not in name]


def environment(name: str, tmp_path: Path, **overrides: object) -> dict:
    values = yaml.safe_load((PARAMETERS_DIR / "environments" / f"{name}.yaml").read_text(encoding="utf-8"))
    grid = dict(models=["bert-base-cased", "gpt2"], model_scale="tiny", batch_sizes=[1], sequence_lengths=[8, 64], repeat=10, number=5,
                output_dir=str(tmp_path / name))  # fmt: skip
    return {**values, **grid, **overrides}


@pytest.mark.parametrize("name", PYTORCH_GPU)
def test_each_gpu_environment_measures_with_the_cards_state_in_every_row(name: str, tmp_path: Path) -> None:
    rows = run_environment(environment(name, tmp_path), progress=False)
    assert set(rows["status"]) == {"ok"}, rows[["model", "sequence_length", "status", "reason"]].to_string()
    assert (rows["gpu_clock_mhz"] > 0).all() and (rows["gpu_sustained_mhz"] > 0).all() and (rows["gpu_power_w"] > 0).all()
    assert rows["energy_source"].eq("nvml").all() and (rows["energy_j"] > 0).all() and rows["energy_unit"].eq("call").all()
    assert rows["gpu_busy"].between(0, 1, inclusive="right").all() and rows["launch_bound"].notna().all()
    assert set(rows["warmup_stop"]) <= {"stable", "time limit"}
    recorded = json.loads((tmp_path / name / "environment.json").read_text(encoding="utf-8"))["device_state"]
    assert recorded["gpu"]["name"] and recorded["gpu"]["sustained_sm_clock_mhz"] and recorded["energy"]["source"] == "nvml"


def test_a_short_load_run_on_the_gpu_reads_the_card_over_each_test(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_loadgen", reason="LoadGen is the load scenarios' extra")
    loaded = environment("gpu-pytorch", tmp_path, scenario="offline", request_lengths=[8, 64], max_batch=8, min_duration_s=1.0, min_query_count=10)
    del loaded["batch_sizes"], loaded["sequence_lengths"]
    row = run_environment(loaded, progress=False).iloc[0]
    assert row["status"] == "ok" and row["gpu_clock_mhz"] > 0 and row["energy_unit"] == "sample" and row["energy_j"] > 0
    assert 1 <= row["served_batch_mean"] <= 8 and row["served_call_p50_s"] > 0
