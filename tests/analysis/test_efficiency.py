"""How close to the machine's limit: achieved FLOP/s against measured roofs, on constructed cells."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from benchlib.analysis import efficiency, speedups

LIMITS = {("run", "cpu"): {"float32_flops_per_s": 100e9, "bandwidth_bytes_per_s": 10e9, "cpu": "CPU", "threads": 2}}


def row(environment: str, model: str, batch_size: int, sequence_length: int, time_s: float, flops: float, run: str = "run") -> dict:
    return {"environment": environment, "framework": "pytorch", "mode": "eager", "device": "cpu", "run": run, "machine": "CPU, 2 cores",
            "model": model, "model_scale": "full", "batch_size": batch_size, "sequence_length": sequence_length, "status": "ok",
            "mean_s": time_s, "median_s": time_s, "flops": flops}  # fmt: skip


def test_achieved_rate_fraction_of_peak_and_the_bounding_roof():
    rows = pd.DataFrame([
        row("cpu-pytorch", "bert-base-cased", 1, 8, 0.05, 1.3624934e9),
        row("cpu-pytorch", "bert-base-cased", 8, 512, 10.0, 7.731e11),
        row("cpu-tensorflow", "bert-base-cased", 1, 8, 0.025, 1.3624934e9),
        {**row("cpu-tensorflow", "bert-base-cased", 8, 512, 1.0, 7.731e11), "status": "oom"},
        row("cpu-pytorch", "gpt2", 1, 8, 0.05, 1.36e9, run="other"),  # a run without measured limits
    ])  # fmt: skip
    cells = efficiency.efficiency(rows, LIMITS)
    assert len(cells) == 3  # the oom cell and the run without limits are left out
    small = cells[(cells["environment"] == "cpu-pytorch") & (cells["batch_size"] == 1)].squeeze()
    assert small["achieved_flops_per_s"] == pytest.approx(1.3624934e9 / 0.05)
    assert small["fraction_of_peak"] == pytest.approx(1.3624934e9 / 0.05 / 100e9)
    assert small["intensity"] == pytest.approx(small["flops"] / small["cell_bytes"]) and small["cell_bytes"] > 4 * 100e6
    assert small["bound"] == "memory"  # a few FLOPs per byte, below the ridge point of 100e9 / 10e9 = 10
    assert cells.loc[cells["batch_size"] == 8, "bound"].tolist() == ["compute"]
    table = efficiency.efficiency_table(cells).set_index("environment")
    assert table.loc["cpu-tensorflow", "bert-base-cased"] == pytest.approx(round(100 * 1.3624934e9 / 0.025 / 100e9, 1))
    sentences = efficiency.efficiency_sentences(cells)
    assert sentences[0].startswith("cpu-pytorch reaches 77% of the measured float32 peak at bert-base-cased 8x512, 27.2% at bert-base-cased 1x8")
    assert "1 of its 2 cells lie below the ridge point" in sentences[0]
    figure = efficiency.plot_roofline(cells, LIMITS)
    assert figure.axes[0].get_xscale() == "log" and "roofs" in figure.get_suptitle()


def test_nothing_to_show_without_limits_or_flop_counts(tmp_path):
    rows = pd.DataFrame([{**row("cpu-pytorch", "gpt2", 1, 8, 0.05, 1e9), "flops": float("nan")}])
    assert efficiency.efficiency(rows, LIMITS).empty and efficiency.efficiency(rows.assign(flops=1e9), {}).empty
    assert efficiency.efficiency_table(efficiency.efficiency(rows, LIMITS)).empty
    with pytest.raises(ValueError, match="no ok cell"):
        efficiency.plot_roofline(efficiency.efficiency(rows, LIMITS), LIMITS)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "machine_limits.json").write_text(json.dumps({"cpu": LIMITS[("run", "cpu")]}))
    assert efficiency.load_limits([tmp_path / "run", tmp_path / "missing"]) == LIMITS


# A GPU's limits (no GPU here: synthetic rows and limits): float16's tensor-core peak far above float32's.
GPU = {"float32_flops_per_s": 50e12, "bfloat16_flops_per_s": 400e12, "float16_flops_per_s": 200e12, "bandwidth_bytes_per_s": 4e12, "cpu": "CPU", "gpu": "GPU", "threads": 16}
GPU_LIMITS = {("run", "cuda"): GPU, **LIMITS}


def gpu_row(environment: str, model: str, batch_size: int, sequence_length: int, time_s: float, flops: float, **columns) -> dict:
    return {**row(environment, model, batch_size, sequence_length, time_s, flops), "device": "cuda", **columns}


def test_each_cell_is_set_against_its_own_precisions_peak():
    rows = pd.DataFrame([
        gpu_row("gpu-pytorch", "bert-base-cased", 8, 512, 0.05, 7.731e11),
        gpu_row("gpu-pytorch", "bert-base-cased", 1, 64, 0.01, 1.09e10),
        gpu_row("gpu-pytorch-fp16", "bert-base-cased", 8, 512, 0.01, 7.731e11, precision="float16"),  # 77 TFLOP/s: above float32's peak
        gpu_row("gpu-pytorch-fp16", "bert-base-cased", 1, 64, 0.005, 1.09e10, precision="float16"),
        {**row("cpu-pytorch-bf16", "bert-base-cased", 8, 512, 1.0, 7.731e11), "precision": "bfloat16"},  # LIMITS: a file without bfloat16
    ])  # fmt: skip
    cells = efficiency.efficiency(rows, GPU_LIMITS)
    by_cell = cells.set_index(["environment", "sequence_length"])
    assert by_cell.loc[("gpu-pytorch", 512), "fraction_of_peak"] == pytest.approx(7.731e11 / 0.05 / 50e12)
    assert by_cell.loc[("gpu-pytorch-fp16", 512), "fraction_of_peak"] == pytest.approx(7.731e11 / 0.01 / 200e12)  # not 1.55 of float32's
    assert by_cell["peak"].tolist() == ["float32", "float32", "float16", "float16", "none measured for bfloat16"]
    assert pd.isna(by_cell.loc[("cpu-pytorch-bf16", 512), "fraction_of_peak"])
    # 1x64 does about 22 FLOP per byte: above float32's ridge (50e12 / 4e12 = 12.5), below float16's (200e12 / 4e12 = 50)
    assert 12.5 < by_cell.loc[("gpu-pytorch-fp16", 64), "intensity"] < 50
    assert by_cell.loc[("gpu-pytorch", 64), "bound"] == "compute" and by_cell.loc[("gpu-pytorch-fp16", 64), "bound"] == "memory"
    sentences = efficiency.efficiency_sentences(cells)
    assert sentences[1].startswith("gpu-pytorch-fp16 reaches 39% of the measured float16 peak at bert-base-cased 8x512")
    figure = efficiency.plot_roofline(cells, GPU_LIMITS)
    gpu_panel = figure.axes[0]
    assert {text.get_text() for text in gpu_panel.texts} >= {"float32 peak 50000 GFLOP/s", "bfloat16 peak 400000 GFLOP/s", "float16 peak 200000 GFLOP/s"}
    assert [line.get_linestyle() for line in gpu_panel.lines[:3]] == ["-", "--", "--"]
    assert [line.get_ydata().max() for line in gpu_panel.lines[:3]] == pytest.approx([50e12, 400e12, 200e12])


def test_a_tf32_cell_is_set_against_the_tf32_peak_and_half_precision_moves_two_bytes_an_element():
    limits = {("run", "cuda"): {**GPU, "tf32_flops_per_s": 150e12}}
    rows = pd.DataFrame([
        gpu_row("gpu-pytorch", "bert-base-cased", 8, 512, 0.01, 7.731e11),  # 77 TFLOP/s: above float32's peak, as float32 never runs
        gpu_row("gpu-pytorch-tf32", "bert-base-cased", 8, 512, 0.01, 7.731e11, options='{"tf32": true}'),
        gpu_row("gpu-onnxruntime-tensorrt", "bert-base-cased", 8, 512, 0.01, 7.731e11, framework="onnxruntime", options='{"gpu_provider": "tensorrt"}'),
        gpu_row("gpu-pytorch-fp16", "bert-base-cased", 8, 512, 0.01, 7.731e11, precision="float16"),
    ])  # fmt: skip
    cells = efficiency.efficiency(rows, limits).set_index("environment")
    assert cells["peak"].tolist() == ["float32 (exceeded)", "tf32", "tf32", "float16"]
    assert cells.loc["gpu-pytorch-tf32", "fraction_of_peak"] == pytest.approx(7.731e11 / 0.01 / 150e12)
    assert cells.loc["gpu-pytorch-fp16", "cell_bytes"] == pytest.approx(cells.loc["gpu-pytorch", "cell_bytes"] / 2, rel=1e-3)


def test_an_int8_cell_has_no_share_and_says_why():
    rows = pd.DataFrame([
        row("cpu-pytorch", "bert-base-cased", 1, 8, 0.05, 1.3624934e9),
        {**row("cpu-onnxruntime-int8", "bert-base-cased", 1, 8, 0.01, 1.3624934e9), "framework": "onnxruntime", "mode": "session", "precision": "int8"},
    ])  # fmt: skip
    cells = efficiency.efficiency(rows, LIMITS).set_index("environment")
    int8 = cells.loc["cpu-onnxruntime-int8"]
    assert int8["peak"] == "none measured for int8" and pd.isna(int8["fraction_of_peak"]) and pd.isna(int8["bound"])
    assert int8["achieved_flops_per_s"] == pytest.approx(1.3624934e9 / 0.01)  # still measured, set against no other precision's peak
    sentences = efficiency.efficiency_sentences(cells.reset_index())
    assert sentences[1] == "cpu-onnxruntime-int8: no share of a peak for 1 of its 1 cells: no int8 peak is measured on this machine, and another precision's would mislead."
    table = efficiency.efficiency_table(cells.reset_index()).set_index("environment")
    assert list(table.index) == ["cpu-pytorch", "cpu-onnxruntime-int8"] and pd.isna(table.loc["cpu-onnxruntime-int8", "bert-base-cased"])


def test_a_share_above_the_peak_is_never_shown():
    rows = pd.DataFrame([
        gpu_row("gpu-pytorch", "bert-base-cased", 8, 512, 0.01, 7.731e11),  # 77 TFLOP/s in float32: TF32 matrix units, above the float32 peak
        gpu_row("gpu-pytorch", "bert-base-cased", 1, 8, 0.01, 1.3624934e9),
    ])  # fmt: skip
    cells = efficiency.efficiency(rows, GPU_LIMITS)
    above = cells[cells["batch_size"] == 8].squeeze()
    assert pd.isna(above["fraction_of_peak"]) and above["peak"] == "float32 (exceeded)"
    assert above["achieved_flops_per_s"] == pytest.approx(7.731e11 / 0.01) and above["achieved_flops_per_s"] > GPU["float32_flops_per_s"]
    assert cells.loc[cells["batch_size"] == 1, "peak"].tolist() == ["float32"]
    sentences = efficiency.efficiency_sentences(cells)
    assert sentences[0].startswith("gpu-pytorch reaches 0% of the measured float32 peak at bert-base-cased 1x8")
    assert sentences[1] == (
        "gpu-pytorch: 1 of its 2 cells ran above its precision's measured peak (float32), so no share is shown for them: "
        "the peak is not the one this cell ran at (e.g. int8 or TF32 matrix units)."
    )
    shown = [float(number) for sentence in sentences for number in re.findall(r"([\d.]+)%", sentence)]
    assert shown and max(shown) <= 100
    assert (efficiency.efficiency_table(cells)["bert-base-cased"] <= 100).all()


def test_launch_bound_cells_and_what_removes_their_overhead():
    eager = {"gpu_busy": 0.2, "launch_bound": "True"}  # as read back from results.csv
    rows = pd.DataFrame([
        gpu_row("gpu-pytorch", "bert-base-cased", 1, 8, 0.010, 1.3624934e9, **eager),
        gpu_row("gpu-pytorch", "bert-base-cased", 1, 64, 0.011, 1.09e10, gpu_busy=0.4, launch_bound=True),
        gpu_row("gpu-pytorch", "bert-base-cased", 8, 512, 0.050, 7.731e11, gpu_busy=0.95, launch_bound=False),
        *(gpu_row("gpu-torchscript", "bert-base-cased", b, s, t, f, mode="torchscript", gpu_busy=0.9, launch_bound=False)
          for b, s, t, f in [(1, 8, 0.004, 1.3624934e9), (1, 64, 0.005, 1.09e10), (8, 512, 0.049, 7.731e11)]),
        *(gpu_row("gpu-tensorflow", "bert-base-cased", b, s, t, f, framework="tensorflow", mode="function")
          for b, s, t, f in [(1, 8, 0.002, 1.3624934e9), (1, 64, 0.003, 1.09e10), (8, 512, 0.04, 7.731e11)]),
    ])  # fmt: skip
    cells = efficiency.efficiency(rows, GPU_LIMITS)
    eager_cells = cells[cells["environment"] == "gpu-pytorch"]
    assert eager_cells["bound"].tolist() == ["launch", "launch", "compute"] and eager_cells["gpu_busy"].tolist() == [0.2, 0.4, 0.95]
    assert "launch" not in cells.loc[cells["environment"] != "gpu-pytorch", "bound"].tolist()
    assert cells.loc[cells["environment"] == "gpu-tensorflow", "gpu_busy"].isna().all()  # not profiled: blank
    sentences = efficiency.efficiency_sentences(cells)
    assert (
        "gpu-pytorch: 2 of its 3 cells are launch-bound (the GPU busy 30% of the call at the median): the GPU waits for the Python that "
        "launches its kernels, so its share of the peak says little of the GPU; CUDA graphs (`torch.compile` mode reduce-overhead), "
        "TorchScript or compilation remove that overhead."
    ) in sentences
    assert not any("launch-bound" in sentence for sentence in sentences if not sentence.startswith("gpu-pytorch:"))

    per_model = speedups.speedups(rows, per_model=True).set_index("environment")
    found = efficiency.overhead_findings(cells, per_model.reset_index())
    torchscript = per_model.loc["gpu-torchscript"]
    assert torchscript["speedup"] == pytest.approx((0.010 / 0.004 * 0.011 / 0.005 * 0.050 / 0.049) ** (1 / 3))
    assert found == [
        "bert-base-cased on cuda: eager PyTorch is launch-bound in 2 of its 3 cells (the GPU busy 30% of the call at the median), the GPU "
        "waiting for Python to launch its kernels; what removes that overhead, as this run measured it: gpu-torchscript (torchscript) "
        f"runs {speedups.times_text(torchscript['speedup'])} as fast as gpu-pytorch ({speedups.interval_text(torchscript)})."
    ]  # TensorFlow's tf.function, faster still, is not named: its mode does not take PyTorch's launches away
    # An option capturing CUDA graphs names its environment too; none measured, or nothing launch-bound: no finding.
    graphs = rows.copy()
    onnxruntime = graphs["environment"] == "gpu-tensorflow"
    graphs.loc[onnxruntime, ["environment", "framework", "mode", "options"]] = ["gpu-onnxruntime-graphs", "onnxruntime", "session", '{"enable_cuda_graph": true}']
    named = efficiency.overhead_findings(efficiency.efficiency(graphs, GPU_LIMITS), speedups.speedups(graphs, per_model=True))
    assert len(named) == 1 and "gpu-onnxruntime-graphs (session) runs" in named[0] and "gpu-torchscript (torchscript) runs" in named[0]
    assert efficiency.overhead_findings(cells, per_model[per_model.index != "gpu-torchscript"].reset_index()) == []
    assert efficiency.overhead_findings(efficiency.efficiency(rows.assign(launch_bound=False), GPU_LIMITS), per_model.reset_index()) == []
