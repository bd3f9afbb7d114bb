"""The summary's tables and figures on hand-made results."""

from __future__ import annotations

import json
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from benchlib.analysis import claims, quality, runs, spreadsheet, tables
from benchlib.machine import UNKNOWN_MACHINE
from benchlib.paths import OUTPUTS_DIR
from benchlib.report import plots
from benchlib.store.results import COLUMNS

ENVIRONMENTS = {
    "cpu-pytorch": ("pytorch", "eager"),
    "cpu-torchscript": ("pytorch", "torchscript"),
    "cpu-tensorflow": ("tensorflow", "function"),
    "cpu-tensorflow-xla": ("tensorflow", "xla"),
}


def cell(environment: str, model: str, shape: str, state: str = "ok", mean_s: float | None = None, device: str = "cpu", **extra: object) -> dict:
    """One results row; `shape` is "<batch>x<sequence>"."""
    framework, mode = ENVIRONMENTS[environment.replace("gpu-", "cpu-")]
    batch_size, sequence_length = (int(part) for part in shape.split("x"))
    return {
        "environment": environment, "framework": framework, "mode": mode, "device": device, "model": model,
        "model_scale": "tiny", "batch_size": batch_size, "sequence_length": sequence_length, "status": state,
        "mean_s": mean_s if state == "ok" else math.nan, "reason": "" if state == "ok" else f"{state} here", **extra,
    }  # fmt: skip


def frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


@pytest.fixture
def oom_rows() -> pd.DataFrame:
    """bert 1x8 ok in both frameworks; bert 1x64 out of memory in PyTorch, ok (and slow) in TensorFlow."""
    return frame(
        cell("cpu-pytorch", "bert-base-cased", "1x8", mean_s=1.0),
        cell("cpu-pytorch", "bert-base-cased", "1x64", "oom"),
        cell("cpu-tensorflow", "bert-base-cased", "1x8", mean_s=2.0),
        cell("cpu-tensorflow", "bert-base-cased", "1x64", mean_s=10.0),
    )


def test_oom_cell_is_excluded_from_both_averages_and_counted(oom_rows: pd.DataFrame) -> None:
    averages = tables.framework_averages(oom_rows).set_index("environment")
    assert averages.loc["cpu-pytorch", "mean_s"] == 1.0
    assert averages.loc["cpu-tensorflow", "mean_s"] == 2.0  # not (2 + 10) / 2
    assert list(averages["cells_used"]) == [1, 1]
    assert list(averages["cells_excluded"]) == [1, 1]
    # The naive mean keeps TensorFlow's slow cell that PyTorch could not run: the survivor bias.
    assert averages.loc["cpu-pytorch", "naive_mean_s"] == 1.0
    assert averages.loc["cpu-tensorflow", "naive_mean_s"] == 6.0


def test_framework_averages_columns_are_the_published_ones(oom_rows: pd.DataFrame) -> None:
    averages = tables.framework_averages(oom_rows)
    assert list(averages.columns)[:9] == ["device", "machine", "environment", "framework", "mode", "mean_s", "cells_used", "cells_excluded", "naive_mean_s"]
    assert list(averages.columns)[9:] == ["vs_baseline", "ci95_low", "ci95_high", "verdict", "disturbed_cells"]
    assert set(averages["device"]) == {"cpu"}
    assert list(averages["framework"]) == ["pytorch", "tensorflow"]


def test_excluded_cells_name_every_non_ok_status_with_its_reason() -> None:
    rows = frame(
        cell("cpu-pytorch", "gpt2", "1x8", mean_s=1.0),
        cell("cpu-pytorch", "gpt2", "1x64", "crashed"),
        cell("cpu-tensorflow", "gpt2", "1x8", mean_s=1.0),
        cell("cpu-tensorflow", "gpt2", "1x64", "error"),
        cell("cpu-tensorflow", "ctrl", "1x8", "too_long"),  # no PyTorch row yet: not measured there
    )
    excluded = tables.excluded_cells(rows)
    found = set(zip(excluded["model"], excluded["shape"], excluded["environment"], excluded["status"]))
    assert found == {
        ("gpt2", "1x64", "cpu-pytorch", "crashed"),
        ("gpt2", "1x64", "cpu-tensorflow", "error"),
        ("ctrl", "1x8", "cpu-pytorch", runs.NOT_MEASURED),
        ("ctrl", "1x8", "cpu-tensorflow", "too_long"),
    }
    assert "crashed here" in set(excluded["reason"])
    averages = tables.framework_averages(rows)
    assert list(averages["cells_used"]) == [1, 1] and list(averages["cells_excluded"]) == [2, 2]


def test_partial_environment_compares_only_what_both_have() -> None:
    rows = frame(
        cell("cpu-pytorch", "gpt2", "1x8", mean_s=1.0),
        cell("cpu-pytorch", "gpt2", "1x64", mean_s=3.0),
        cell("cpu-tensorflow", "gpt2", "1x8", mean_s=4.0),  # still running: 1x64 not written yet
    )
    averages = tables.framework_averages(rows).set_index("environment")
    assert averages["mean_s"].to_dict() == {"cpu-pytorch": 1.0, "cpu-tensorflow": 4.0}
    assert averages.loc["cpu-pytorch", "naive_mean_s"] == 2.0
    counts = tables.status_counts(rows).set_index("environment")
    assert counts["rows"].to_dict() == {"cpu-pytorch": 2, "cpu-tensorflow": 1}


def test_environments_are_compared_per_device_and_machine() -> None:
    rows = frame(
        cell("cpu-pytorch", "gpt2", "1x8", mean_s=1.0, machine="laptop"),
        cell("cpu-tensorflow", "gpt2", "1x8", "oom", machine="laptop"),
        cell("gpu-pytorch", "gpt2", "1x8", mean_s=0.1, device="cuda:0", machine="V100"),
        cell("gpu-tensorflow", "gpt2", "1x8", mean_s=0.2, device="cuda:0", machine="V100"),
    )
    averages = tables.framework_averages(rows).set_index("environment")
    assert averages.loc["gpu-pytorch", "device"] == "cuda" and averages.loc["gpu-pytorch", "machine"] == "V100"
    assert averages.loc["gpu-tensorflow", "mean_s"] == 0.2 and averages.loc["gpu-tensorflow", "cells_used"] == 1
    assert averages.loc["cpu-pytorch", "cells_used"] == 0 and math.isnan(averages.loc["cpu-pytorch", "mean_s"])
    ratios = tables.pytorch_vs_tensorflow(rows)
    assert ratios.set_index(["device", "model"]).loc[("cuda", "all models"), "tf_over_pt"] == pytest.approx(2.0)


def test_pytorch_vs_tensorflow_geometric_mean_of_paired_ratios() -> None:
    rows = frame(
        cell("cpu-pytorch", "gpt2", "1x8", mean_s=1.0),
        cell("cpu-pytorch", "gpt2", "1x64", mean_s=2.0),
        cell("cpu-pytorch", "gpt2", "2x8", mean_s=4.0),
        cell("cpu-pytorch", "bert-base-cased", "1x8", mean_s=1.0),
        cell("cpu-pytorch", "bert-base-cased", "1x64", "oom"),
        cell("cpu-tensorflow", "gpt2", "1x8", mean_s=2.0),
        cell("cpu-tensorflow", "gpt2", "1x64", mean_s=2.0),
        cell("cpu-tensorflow", "gpt2", "2x8", mean_s=1.0),
        cell("cpu-tensorflow", "bert-base-cased", "1x8", mean_s=3.0),
        cell("cpu-tensorflow", "bert-base-cased", "1x64", mean_s=9.0),
        cell("cpu-torchscript", "gpt2", "1x8", mean_s=0.1),  # not part of this comparison
    )
    table = tables.pytorch_vs_tensorflow(rows).set_index("model")
    assert list(table.index) == ["gpt2", "bert-base-cased", "all models"]
    assert table.loc["gpt2", "tf_over_pt"] == pytest.approx((2 * 1 * 0.25) ** (1 / 3))
    assert table.loc["bert-base-cased", "tf_over_pt"] == pytest.approx(3.0)
    assert table.loc["bert-base-cased", ["cells", "cells_excluded"]].tolist() == [1, 1]
    assert table.loc["all models", "tf_over_pt"] == pytest.approx((2 * 1 * 0.25 * 3) ** (1 / 4))
    assert table.loc["all models", ["pytorch", "tensorflow"]].tolist() == ["cpu-pytorch", "cpu-tensorflow"]


def test_torchscript_mean_change_in_percent() -> None:
    rows = frame(
        cell("cpu-pytorch", "gpt2", "1x8", mean_s=1.0),
        cell("cpu-pytorch", "gpt2", "1x64", mean_s=2.0),
        cell("cpu-torchscript", "gpt2", "1x8", mean_s=0.8),
        cell("cpu-torchscript", "gpt2", "1x64", mean_s=1.0),
    )
    table = tables.torchscript_vs_eager(rows).set_index("model")
    assert table.loc["gpt2", "mean_change_pct"] == pytest.approx(-35.0)
    assert table.loc["all models", "cells"] == 2


def test_xla_speedup_and_largest_reduction_with_its_shape() -> None:
    rows = frame(
        cell("cpu-tensorflow", "gpt2", "1x8", mean_s=1.0),
        cell("cpu-tensorflow", "gpt2", "2x64", mean_s=1.0),
        cell("cpu-tensorflow", "ctrl", "1x8", mean_s=1.0),
        cell("cpu-tensorflow-xla", "gpt2", "1x8", mean_s=0.3),
        cell("cpu-tensorflow-xla", "gpt2", "2x64", mean_s=0.5),
        cell("cpu-tensorflow-xla", "ctrl", "1x8", mean_s=1.25),
    )
    table = tables.xla_vs_function(rows).set_index("model")
    assert table.loc["gpt2", "speedup"] == pytest.approx((1 / 0.3 * 2) ** 0.5)
    assert table.loc["gpt2", "largest_reduction_pct"] == pytest.approx(70.0)
    assert table.loc["gpt2", "largest_reduction_shape"] == "1x8"
    assert table.loc["ctrl", "speedup"] == pytest.approx(0.8)
    assert table.loc["all models", "largest_reduction_shape"] == "gpt2 1x8"


def test_distilled_against_teacher_on_matching_cells() -> None:
    rows = frame(
        cell("cpu-pytorch", "bert-base-cased", "1x8", mean_s=2.0),
        cell("cpu-pytorch", "bert-base-cased", "1x64", mean_s=8.0),
        cell("cpu-pytorch", "distilbert-base-uncased", "1x8", mean_s=1.0),
        cell("cpu-pytorch", "distilbert-base-uncased", "1x64", "oom"),
        cell("cpu-pytorch", "gpt2", "1x8", mean_s=4.0),
        cell("cpu-pytorch", "distilgpt2", "1x8", mean_s=1.0),
    )
    table = tables.distilled_vs_teacher(rows).set_index("student")
    assert table.loc["distilbert-base-uncased", "student_over_teacher"] == pytest.approx(0.5)
    assert table.loc["distilbert-base-uncased", ["cells", "cells_excluded"]].tolist() == [1, 1]
    assert table.loc["distilgpt2", "student_over_teacher"] == pytest.approx(0.25)
    assert table.loc["distilgpt2", "teacher"] == "gpt2"


def test_spreadsheet_shows_times_and_statuses() -> None:
    rows = frame(
        cell("cpu-pytorch", "gpt2", "1x8", mean_s=0.5),
        cell("cpu-pytorch", "gpt2", "2x8", "oom"),
        cell("cpu-pytorch", "ctrl", "1x8", mean_s=0.25),
        cell("cpu-tensorflow", "gpt2", "1x8", mean_s=9.0),
    )
    table = spreadsheet.spreadsheet(rows, "cpu-pytorch")
    assert list(table.columns) == ["1x8", "2x8"] and list(table.index) == ["gpt2", "ctrl"]
    assert table.loc["gpt2", "1x8"] == 0.5 and table.loc["gpt2", "2x8"] == "oom"
    assert table.loc["ctrl", "2x8"] == runs.NOT_MEASURED
    assert spreadsheet.spreadsheet(rows, "cpu-pytorch", digits=2).loc["ctrl", "1x8"] == "0.25"
    with pytest.raises(ValueError, match="environment: 'cpu-xla' has no rows"):
        spreadsheet.spreadsheet(rows, "cpu-xla")


def test_spreadsheet_export_matches_the_2019_layout(tmp_path) -> None:
    rows = frame(
        cell("cpu-pytorch", "gpt2", "1x8", mean_s=0.0123),
        cell("cpu-pytorch", "gpt2", "8x1024", "oom"),
        cell("cpu-pytorch", "bert-base-cased", "1x8", mean_s=0.5),
        cell("cpu-pytorch", "bert-base-cased", "8x1024", "too_long"),
        cell("cpu-pytorch", "bert-base-cased", "3x16", mean_s=0.7),  # outside the 2019 grid
    )
    header = "model,1x8,1x64,1x128,1x256,1x512,1x1024,2x8,2x64,2x128,2x256,2x512,2x1024,4x8,4x64,4x128,4x256,4x512,4x1024,8x8,8x64,8x128,8x256,8x512,8x1024"
    expected = "\r\n".join([header, "gpt2,0.0123" + ",N/A" * 23, "bert-base-cased,0.5" + ",N/A" * 23]) + "\r\n"
    assert spreadsheet.spreadsheet_2019_csv(rows, "cpu-pytorch") == expected
    path = spreadsheet.write_spreadsheet_2019(rows, "cpu-pytorch", tmp_path)
    assert path == tmp_path / "tables" / "spreadsheet_2019_cpu-pytorch.csv"
    assert path.read_bytes() == expected.encode()


def test_missing_environments_are_reported_not_crashed() -> None:
    rows = frame(cell("cpu-pytorch", "gpt2", "1x8", mean_s=1.0), cell("cpu-pytorch", "bert-base-cased", "1x8", mean_s=1.0))
    assert tables.pytorch_vs_tensorflow(rows).empty
    assert tables.xla_vs_function(rows).empty
    assert tables.torchscript_vs_eager(rows).empty
    missing = tables.missing_comparisons(rows)
    assert "There is no cuda environment in these runs." in missing
    assert any("No tensorflow (function) environment on cpu" in s and "PyTorch against TensorFlow" in s for s in missing)
    assert any("No tensorflow (function) or tensorflow (xla) environment on cpu" in s for s in missing)
    assert any("No pytorch (torchscript) environment on cpu" in s for s in missing)
    assert any(s.startswith("distilbert-base-uncased not measured on cpu") for s in missing)
    assert tables.missing_comparisons(rows, "xla_vs_function") == [s for s in missing if "XLA against tf.function" in s]
    assert tables.missing_comparisons(rows.iloc[:0]) == ["These runs have no results yet: every table is left out."]
    assert set(claims.claims_table(rows)["holds"]) == {"not checked"}


def claim(table: pd.DataFrame, claim_id: str, device: str = "cpu") -> pd.Series:
    text = next(c["claim"] for c in claims.load_claims()["claims"] if c["id"] == claim_id)
    return table[(table["claim"] == text) & (table["device"] == device)].squeeze()


def test_claims_hold_or_not_on_known_numbers() -> None:
    rows = frame(
        cell("cpu-pytorch", "bert-base-cased", "1x8", mean_s=1.0),
        cell("cpu-pytorch", "bert-base-cased", "8x1024", "oom"),
        cell("cpu-pytorch", "distilbert-base-uncased", "1x8", mean_s=0.9),
        cell("cpu-tensorflow", "bert-base-cased", "1x8", mean_s=1.2),
        cell("cpu-tensorflow", "bert-base-cased", "8x1024", mean_s=30.0),
        cell("cpu-tensorflow", "distilbert-base-uncased", "1x8", mean_s=1.08),
        cell("cpu-torchscript", "bert-base-cased", "1x8", mean_s=0.95),
        cell("cpu-tensorflow-xla", "bert-base-cased", "1x8", mean_s=0.4),
    )
    table = claims.claims_table(rows)
    assert list(table.columns) == list(claims.CLAIMS_COLUMNS)
    pt_tf = claim(table, "cpu_pytorch_faster")
    # (1.2 + 1.08) / (1.0 + 0.9): the oom cell, 30 s in TensorFlow, is left out
    assert pt_tf["value_this_run"] == pytest.approx(1.2) and pt_tf["holds"] == "holds"
    assert pt_tf["value_2019"] == pytest.approx(1.1)
    assert claim(table, "gpu_tensorflow_faster", "cuda")["holds"] == "not checked"
    torchscript = claim(table, "torchscript_faster")
    assert torchscript["value_this_run"] == pytest.approx(-5.0) and torchscript["holds"] == "does not hold"
    xla = claim(table, "xla_speedup")
    assert xla["value_this_run"] == pytest.approx(1.2 / 0.4) and xla["holds"] == "holds"
    assert claim(table, "xla_small_inputs")["value_this_run"] == pytest.approx(100 * (1 - 0.4 / 1.2))
    distilbert = claim(table, "distilbert_half")
    assert distilbert["value_this_run"] == pytest.approx(0.9) and distilbert["holds"] == "does not hold"
    assert claim(table, "distilgpt2_half")["holds"] == "not checked"
    oom = claim(table, "pytorch_oom_earlier")
    assert oom["value_this_run"] == 1 and oom["holds"] == "holds"

    slower_pytorch = rows.assign(mean_s=[3.0, math.nan, 0.9, 1.2, 30.0, 1.08, 0.95, 0.4])
    assert claim(claims.claims_table(slower_pytorch), "cpu_pytorch_faster")["holds"] == "does not hold"


def test_claims_data_carry_their_source_and_consistent_values() -> None:
    data = claims.load_claims()
    assert data["source"]["url"] == "https://medium.com/huggingface/benchmarking-transformers-pytorch-and-tensorflow-e2917fb891c2"
    by_id = {c["id"]: c for c in data["claims"]}
    for claim_id, (pt, tf) in {"cpu_pytorch_faster": (0.748, 0.823), "gpu_tensorflow_faster": (0.046, 0.043)}.items():
        reference = by_id[claim_id]["reference"]
        assert (reference["pytorch_mean_s"], reference["tensorflow_mean_s"]) == (pt, tf)
        assert by_id[claim_id]["value_2019"] == pytest.approx(tf / pt, abs=5e-4)
    assert all(c["metric"] in claims.METRICS for c in data["claims"])
    assert claims.passes(1.06, ">= 1.05") and not claims.passes(1.04, ">= 1.05") and claims.passes(-20, "<= -10")
    with pytest.raises(ValueError, match="holds_if must be"):
        claims.passes(1.0, "about 1")


def write_environment(env_dir, rows: pd.DataFrame, machine: dict) -> None:
    env_dir.mkdir(parents=True)
    extra = [c for c in rows.columns if c not in COLUMNS]
    rows.reindex(columns=[*COLUMNS, *extra]).assign(samples_s="[]").to_csv(env_dir / "results.csv", index=False)
    (env_dir / "environment.json").write_text(json.dumps({"machine": machine}))


def test_load_runs_adds_machine_and_device_and_keeps_environments_apart(tmp_path) -> None:
    laptop = {"hostname": "a", "cpu": "Intel(R) Xeon(R)  CPU @ 2.20GHz", "logical_cores": 4, "affinity_cores": 2, "memory_bytes": 16 * 2**30, "gpus": []}
    gpu_box = {"hostname": "b", "cpu": "AMD EPYC", "logical_cores": 12, "gpus": [{"name": "Tesla V100-SXM2-16GB", "memory": "16384 MiB"}]}
    pytorch = frame(cell("cpu-pytorch", "gpt2", "1x8", mean_s=1.0, peak_memory_bytes=123, noisy=False))
    write_environment(tmp_path / "run1" / "cpu-pytorch", pytorch, laptop)
    write_environment(tmp_path / "run2" / "cpu-pytorch", pytorch.assign(mean_s=2.0), gpu_box)
    write_environment(tmp_path / "run2" / "gpu-pytorch", frame(cell("gpu-pytorch", "gpt2", "1x8", mean_s=0.1, device="cuda")), gpu_box)
    (tmp_path / "run2" / "gpu-tensorflow").mkdir()  # started, nothing written yet

    rows = runs.load_runs([tmp_path / "run1", tmp_path / "run2"])
    machines = dict(zip(rows["environment"], rows["machine"]))
    assert machines == {
        "cpu-pytorch@run1": "Intel(R) Xeon(R) CPU @ 2.20GHz, 2 cores, 16 GiB",  # machines differing in memory are not compared
        "cpu-pytorch@run2": "AMD EPYC, 12 cores",
        "gpu-pytorch": "Tesla V100-SXM2-16GB 16384 MiB",
    }
    assert dict(zip(rows["environment"], rows["device_type"]))["gpu-pytorch"] == "cuda"
    assert rows["peak_memory_bytes"].iloc[0] == 123  # columns added by newer kits are kept
    assert len(tables.framework_averages(rows)) == 3
    with pytest.raises(FileNotFoundError, match="run_dirs: .* is not a folder"):
        runs.load_runs([tmp_path / "nowhere"])


def test_default_run_dirs_picks_the_newest_run_with_results(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no run with results"):
        runs.default_run_dirs(tmp_path)
    (tmp_path / "reference").mkdir()
    assert runs.default_run_dirs(tmp_path) == [tmp_path / "reference"]
    rows = frame(cell("cpu-pytorch", "gpt2", "1x8", mean_s=1.0))
    for name in ("older", "newer"):
        write_environment(tmp_path / name / "cpu-pytorch", rows, {})
    (tmp_path / "empty").mkdir()
    assert runs.default_run_dirs(tmp_path) == [tmp_path / "newer"]
    assert set(runs.load_run(tmp_path / "newer")["machine"]) == {UNKNOWN_MACHINE}
    assert runs.default_run_dirs()[0].parent == OUTPUTS_DIR  # the kit's own outputs/ by default


def test_tables_of_a_run_outside_the_kit_name_no_path_of_this_machine(tmp_path) -> None:
    run = tmp_path / "elsewhere"
    for environment, mean_s in (("cpu-pytorch", 1.0), ("cpu-tensorflow", 2.0)):
        write_environment(run / environment, frame(cell(environment, "gpt2", "1x8", mean_s=mean_s)), {"hostname": "a", "cpu": "AMD EPYC"})
    rows, environments = runs.load_runs([run]), quality.load_environments([run])
    shown = {
        "status_counts": tables.status_counts(rows), "framework_averages": tables.framework_averages(rows),
        "pytorch_vs_tensorflow": tables.pytorch_vs_tensorflow(rows), "claims_2019": claims.claims_table(rows),
        "threads": quality.thread_table(environments), "machines": quality.machine_table(environments),
    }  # fmt: skip
    written = [tables.save_table(table, tmp_path / "out", name) for name, table in shown.items()]
    written.append(spreadsheet.write_spreadsheet_2019(rows, "cpu-pytorch", tmp_path / "out"))
    assert [path.name for path in written if str(tmp_path) in path.read_text(encoding="utf-8")] == []
    assert set(shown["threads"]["run"]) == {"elsewhere"}  # the run by its name: it lies outside the kit


def test_figures_have_titles_and_labelled_axes(tmp_path, oom_rows: pd.DataFrame) -> None:
    figures = {
        "time_vs_sequence": plots.time_vs_sequence(oom_rows),
        "ratio": plots.ratio_heatmap(oom_rows),
        "averages": plots.averages_bars(tables.framework_averages(oom_rows)),
    }
    for name, figure in figures.items():
        axes = [ax for ax in figure.axes if ax.get_xlabel() and ax.get_ylabel()]
        assert axes, name
        assert figure.get_suptitle() or all(ax.get_title() for ax in axes), name
        path = plots.save_figure(figure, tmp_path, name)
        assert path.stat().st_size > 10_000
        plt.close(figure)
    heatmap_text = {text.get_text() for text in figures["ratio"].axes[0].texts}
    assert {"2.00", "oom/ok"} <= heatmap_text  # the oom cell is shown, not dropped
    assert "1 cells" in {text.get_text() for text in figures["averages"].axes[0].texts}
    assert "(s)" in figures["time_vs_sequence"].axes[0].get_ylabel()
    with pytest.raises(ValueError, match="no cell is ok in both"):
        plots.ratio_heatmap(oom_rows[oom_rows["environment"] == "cpu-pytorch"])


def sampled(environment: str, model: str, shape: str, median: float, spread: float = 0.02, seed: int = 0, round_number: int = 1, **extra: object) -> dict:
    """A row with 15 raw samples around `median` (relative normal spread), as a measured round would have."""
    rng = np.random.default_rng(seed)
    samples = list(median * (1 + spread * rng.standard_normal(15)))
    return cell(environment, model, shape, mean_s=float(np.mean(samples)), median_s=float(np.median(samples)), samples_s=samples, round=round_number, **extra)


def collapsed(*rows: dict) -> pd.DataFrame:
    return pd.concat([runs.collapse_rounds(group) for _, group in frame(*rows).groupby("environment", sort=False)], ignore_index=True)


def test_a_cell_s_time_is_the_median_over_rounds_of_each_round_s_median() -> None:
    rows = collapsed(*[sampled("cpu-pytorch", "gpt2", "1x8", m, seed=i, round_number=i + 1) for i, m in enumerate([1.0, 1.3, 1.1])])
    row = rows.squeeze()
    medians = sorted(frame(*[sampled("cpu-pytorch", "gpt2", "1x8", m, seed=i) for i, m in enumerate([1.0, 1.3, 1.1])])["median_s"])
    assert row["time_s"] == pytest.approx(medians[1]) and row["rounds"] == 3 and row["values_over"] == "rounds"
    assert sorted(row["values"]) == pytest.approx(medians)
    assert row["round_spread_pct"] == pytest.approx((medians[2] - medians[0]) / medians[1] * 100)
    one = collapsed(sampled("cpu-pytorch", "gpt2", "1x8", 1.0)).squeeze()
    assert one["rounds"] == 1 and one["values_over"] == "samples" and len(one["values"]) == 15


def test_a_round_that_failed_leaves_the_others_and_a_disturbed_round_marks_the_cell() -> None:
    rows = collapsed(
        sampled("cpu-pytorch", "gpt2", "1x8", 1.0, round_number=1, disturbed=True),
        cell("cpu-pytorch", "gpt2", "1x8", "crashed", round=2),
        sampled("cpu-pytorch", "gpt2", "1x8", 1.2, round_number=3, disturbed=False),
    ).squeeze()
    assert rows["status"] == "ok" and rows["rounds"] == 2 and bool(rows["disturbed"])


def pt_tf_rows(tf_median: float, spread: float, disturbed: bool = False) -> pd.DataFrame:
    rows = []
    for i, (model, shape, pt) in enumerate([("bert-base-cased", "1x8", 0.04), ("bert-base-cased", "1x64", 0.08), ("gpt2", "1x8", 0.05)]):
        rows += [sampled("cpu-pytorch", model, shape, pt, spread, seed=2 * i, disturbed=disturbed and i == 0),
                 sampled("cpu-tensorflow", model, shape, pt * tf_median, spread, seed=2 * i + 1)]  # fmt: skip
    return collapsed(*rows)


@pytest.mark.parametrize(
    "tf_over_pt, spread, disturbed, verdict, holds",
    [(1.5, 0.02, False, "slower", "holds"), (0.6, 0.02, False, "faster", "does not hold"),
     (1.05, 0.3, False, "no clear difference", "inconclusive"), (1.5, 0.02, True, "inconclusive", "inconclusive")],
    ids=["pytorch-clearly-faster", "tensorflow-clearly-faster", "overlapping", "disturbed"],
)  # fmt: skip
def test_comparisons_carry_an_interval_and_a_verdict_and_claims_follow_it(tf_over_pt, spread, disturbed, verdict, holds) -> None:
    rows = pt_tf_rows(tf_over_pt, spread, disturbed)
    table = tables.pytorch_vs_tensorflow(rows).set_index("model")
    overall = table.loc["all models"]
    assert overall["ci95_low"] <= overall["tf_over_pt"] <= overall["ci95_high"] and overall["interval_over"] == "samples"
    assert overall["verdict"] == verdict
    assert ("cpu-pytorch bert-base-cased 1x8" in overall["disturbed_cells"]) == disturbed
    pt_tf = claim(claims.claims_table(rows), "cpu_pytorch_faster")
    assert pt_tf["holds"] == holds
    if holds == "inconclusive":
        assert ("disturbed" if disturbed else "straddles >= 1.05") in pt_tf["detail"]
    averages = tables.framework_averages(rows).set_index("environment")
    assert averages.loc["cpu-pytorch", "verdict"] == "baseline"
    assert averages.loc["cpu-tensorflow", "verdict"] == verdict
