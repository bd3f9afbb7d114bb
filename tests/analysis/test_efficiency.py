"""How close to the machine's limit: achieved FLOP/s against measured roofs, on constructed cells."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from benchlib.analysis import efficiency

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
