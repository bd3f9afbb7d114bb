"""The summary's quality checks: noisy cells, different thread counts, peak memory table and plot."""

from __future__ import annotations

import json

import matplotlib
import pandas as pd
import pytest

from benchlib import quality

matplotlib.use("Agg")
MIB = 2**20
QUIET = [0.100, 0.101, 0.099, 0.102, 0.100]
NOISY = [0.100, 0.130, 0.080, 0.150, 0.100]  # IQR 0.03 > 10% of the median 0.1


def row(environment, model, batch, sequence, state="ok", samples=QUIET, peak=None):
    return {
        "environment": environment, "model": model, "batch_size": batch, "sequence_length": sequence,
        "status": state, "samples_s": samples if state == "ok" else [], "peak_memory_bytes": peak if state == "ok" else None,
    }  # fmt: skip


def rows():
    return pd.DataFrame([
        row("cpu-pytorch", "gpt2", 1, 8, peak=500 * MIB),
        row("cpu-pytorch", "gpt2", 1, 64, samples=NOISY, peak=600 * MIB),
        row("cpu-pytorch", "gpt2", 8, 1024, state="oom"),
        row("cpu-tensorflow", "gpt2", 1, 8, samples=NOISY, peak=700 * MIB),
        row("cpu-tensorflow", "gpt2", 1, 64, peak=800 * MIB),
        row("cpu-tensorflow", "gpt2", 8, 1024, peak=4096 * MIB),
    ])  # fmt: skip


def test_noisy_cells_are_listed_from_the_samples():
    noisy = quality.noisy_cells(rows())
    assert noisy[["environment", "sequence_length"]].values.tolist() == [["cpu-pytorch", 64], ["cpu-tensorflow", 8]]
    assert noisy.iqr_s.tolist() == pytest.approx([0.03, 0.03]) and noisy.iqr_percent.tolist() == pytest.approx([30, 30])
    assert quality.noisy_cells(rows().iloc[[0, 2]]).empty


def write_environment(run, folder, threads, device="cpu", cpu="CPU One"):
    path = run / folder / "environment.json"
    path.parent.mkdir(parents=True)
    data = {"parameters": {"environment": folder, "device": device, "num_threads": None}, "machine": {"cpu": cpu, "logical_cores": 2}, "threads": {"num_threads": threads, "OMP_NUM_THREADS": None}}
    path.write_text(json.dumps(data))


def test_thread_count_warning_names_the_environments(tmp_path):
    write_environment(tmp_path, "cpu-pytorch", 2)
    write_environment(tmp_path, "cpu-tensorflow", 1)
    write_environment(tmp_path, "gpu-pytorch", 8, device="cuda", cpu="CPU Two")
    environments = quality.load_environments([tmp_path])
    assert [env["folder"] for env in environments] == ["cpu-pytorch", "cpu-tensorflow", "gpu-pytorch"]
    assert quality.thread_table(environments).num_threads.tolist() == [2, 1, 8]
    assert quality.thread_count_warnings(environments) == [
        "On CPU One, 2 cores (cpu) the environments compared ran with different thread counts (cpu-pytorch 2, "
        "cpu-tensorflow 1); their times are not directly comparable."
    ]


def test_no_warning_when_thread_counts_agree(tmp_path):
    write_environment(tmp_path, "cpu-pytorch", 2)
    write_environment(tmp_path, "cpu-tensorflow", 2)
    write_environment(tmp_path, "gpu-pytorch", 8, device="cuda", cpu="CPU Two")
    assert quality.thread_count_warnings(quality.load_environments([tmp_path])) == []


def test_peak_memory_table_shows_mib_and_statuses():
    table = quality.peak_memory_table(rows())
    assert list(table.columns) == ["1x8", "1x64", "8x1024"]
    assert table.loc[("cpu-pytorch", "gpt2")].tolist() == ["500", "600", "oom"]
    assert table.loc[("cpu-tensorflow", "gpt2")].tolist() == ["700", "800", "4096"]


def test_peak_memory_plot_has_labels_with_units():
    figure = quality.plot_peak_memory(rows())
    axis = figure.axes[0]
    assert axis.get_ylabel() == "peak memory (MiB)" and axis.get_xlabel() == "sequence length (tokens)"
    assert axis.get_title() == "gpt2" and len(axis.get_lines()) >= 3
    with pytest.raises(ValueError, match="no ok cell has a peak_memory_bytes value"):
        quality.plot_peak_memory(rows().iloc[[2]])
