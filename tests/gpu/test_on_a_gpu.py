"""On a GPU (`make test-gpu`): every GPU environment of PyTorch on tiny models with the card's state in its rows (clocks,
busy share, energy from NVML), environment.json's GPU, and a short load run. Without a GPU every test here is skipped
with the reason: the CPU's tests cover the same logic with a fake of NVML's answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import pandas as pd

from benchlib import read_results
from benchlib.config.jobs import available
from benchlib.paths import PARAMETERS_DIR
from tests.frameworks import run_python


def gpu_reason() -> str | None:
    """Why these tests cannot run here (None on a machine where PyTorch sees a CUDA GPU)."""
    import torch

    return None if torch.cuda.is_available() else "no GPU: torch.cuda.is_available() is False on this machine (make test-gpu runs these on one)"


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(gpu_reason() is not None, reason=gpu_reason() or "")]
PYTORCH_GPU = [name for name in available("environments") if name.startswith("gpu-") and not any(other in name for other in ("tensorflow", "onnxruntime", "vllm"))]


def run_environment(values: dict, progress: bool = False) -> pd.DataFrame:
    """One environment run in a process of its own, as `make run` runs each in its kernel: nothing one sets for its
    process (TF32, the attention kernel, compiled graphs, CUDA's state) reaches another's; its rows read back."""
    run_python(f"""
        import json
        from benchlib import run_environment
        run_environment(json.loads({json.dumps(json.dumps(values))}), progress=False)
        print("{{}}")
    """)  # fmt: skip
    return read_results(Path(values["output_dir"]))


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
    assert set(rows["warmup_stop"]) <= {"stable", "time limit"} and rows["slowed"].isna().all()  # a quiet card: nothing slowed
    assert (rows["peak_memory_bytes"] > 0).all()  # the timed calls' own peak on the card
    recorded = json.loads((tmp_path / name / "environment.json").read_text(encoding="utf-8"))["device_state"]
    assert recorded["gpu"]["name"] and recorded["gpu"]["sustained_sm_clock_mhz"] and recorded["energy"]["source"] == "nvml"


def test_the_cards_limits_hold_tf32_beside_float32_from_ampere_on() -> None:
    import torch

    from benchlib.measure.peak import measure_limits

    limits = measure_limits("cuda", gemm_size=4096, copy_bytes=256 * 2**20, repeat=3, remeasure=0)
    if torch.cuda.get_device_capability()[0] >= 8:
        assert limits["tf32_reason"] is None and limits["tf32_flops_per_s"] > 1.5 * limits["float32_flops_per_s"]
        assert limits["bfloat16_reason"] is None and limits["bfloat16_flops_per_s"] > limits["float32_flops_per_s"]
    else:
        assert limits["tf32_flops_per_s"] is None and limits["bfloat16_flops_per_s"] is None


def test_onnx_runtimes_session_runs_on_cuda_or_its_cells_say_why(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime", reason="ONNX Runtime is the onnxruntime extra")
    rows = run_environment(environment("gpu-onnxruntime", tmp_path, models=["bert-base-cased"]), progress=False)
    reasons = rows["reason"].dropna()
    assert rows["status"].eq("ok").all() or reasons.str.contains("CUDAExecutionProvider").all(), rows[["status", "reason"]].to_string()
    if rows["status"].eq("ok").all():
        assert rows["peak_memory_bytes"].isna().all() and (rows["energy_j"] > 0).all()  # no counter of the card's memory: blank


def test_a_short_load_run_on_the_gpu_reads_the_card_over_each_test(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_loadgen", reason="LoadGen is the load scenarios' extra")
    loaded = environment("gpu-pytorch", tmp_path, scenario="offline", request_lengths=[8, 64], max_batch=8, min_duration_s=1.0, min_query_count=10)
    del loaded["batch_sizes"], loaded["sequence_lengths"]
    row = run_environment(loaded, progress=False).iloc[0]
    assert row["status"] == "ok" and row["gpu_clock_mhz"] > 0 and row["energy_unit"] == "sample" and row["energy_j"] > 0
    assert 1 <= row["served_batch_mean"] <= 8 and row["served_call_p50_s"] > 0


def test_cuda_graphs_serve_from_one_stream_recorded_before_timing_and_are_never_shared_by_two(tmp_path: Path) -> None:
    """torch.compile's CUDA graphs are recorded per thread: the stream's are recorded before LoadGen starts; two streams
    would share one call's graphs, and are refused with the reason."""
    pytest.importorskip("mlperf_loadgen", reason="LoadGen is the load scenarios' extra")
    for streams in (1, 2):
        loaded = environment("gpu-torch-compile-cudagraphs", tmp_path / str(streams), scenario="offline", request_lengths=[8, 64], max_batch=4,
                             streams=streams, min_duration_s=1.0, min_query_count=10)  # fmt: skip
        del loaded["batch_sizes"], loaded["sequence_lengths"]
        rows = run_environment(loaded, progress=False)
        if streams == 1:
            assert rows["status"].eq("ok").all(), rows[["model", "status", "reason"]].to_string()
            assert (rows["served_call_p99_s"] < 10 * rows["served_call_p50_s"]).all()  # no graph recorded while timed
        else:
            assert rows["status"].eq("unsupported").all() and rows["reason"].str.contains("captures CUDA graphs, which several streams").all()


@pytest.mark.parametrize("name", ["gpu-pytorch", "gpu-torch-compile-cudagraphs"])
def test_generation_on_the_gpu_eager_and_with_a_static_cache_in_cuda_graphs(name: str, tmp_path: Path) -> None:
    values = yaml.safe_load((PARAMETERS_DIR / "environments" / f"{name}.yaml").read_text(encoding="utf-8"))
    grid = yaml.safe_load((PARAMETERS_DIR / "grids" / "generate-smoke.yaml").read_text(encoding="utf-8"))
    rows = run_environment({**values, **grid, "output_dir": str(tmp_path / name)}, progress=False)
    assert set(rows["status"]) == {"ok"}, rows[["model", "status", "reason"]].to_string()
    assert (rows["tokens_per_s"] > 0).all()
    if name != "gpu-pytorch":  # eager float32 is the reference itself
        assert (rows["token_agreement"].astype(float) >= 0.99).all(), rows[["model", "token_agreement"]].to_string()
