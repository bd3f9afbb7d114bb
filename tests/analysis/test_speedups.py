"""Speed-ups over eager PyTorch float32, the fastest environment per cell, the findings, comparisons declared
as data, and how the summary shows a table; on hand-made results with known times."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from benchlib.analysis import claims, comparisons, runs, speedups, spreadsheet, tables
from benchlib.report import plots
from benchlib.report import display as report

KINDS = {  # environment: framework, mode, precision ("" as in a row written without one)
    "cpu-pytorch": ("pytorch", "eager", ""),
    "cpu-pytorch-bf16": ("pytorch", "eager", "bfloat16"),
    "cpu-torchscript": ("pytorch", "torchscript", "float32"),
    "cpu-onnxruntime": ("onnxruntime", "session", "float32"),
    "cpu-openvino": ("openvino", "compiled", "float32"),
    "cpu-tensorflow": ("tensorflow", "function", "float32"),
    "gpu-pytorch-fp16": ("pytorch", "eager", "float16"),
}
CELLS = [("bert-base-cased", 1, 8, 0.04), ("bert-base-cased", 1, 64, 0.08), ("gpt2", 1, 8, 0.05), ("gpt2", 1, 64, 0.1)]
NOISE = 1 + 0.02 * np.random.default_rng(0).standard_normal(15)  # the same relative spread in every cell


def row(environment: str, model: str, batch_size: int, sequence_length: int, median: float | None, state: str = "ok", **extra: object) -> dict:
    """A results row of one round: 15 samples around `median` (the same pattern in every environment)."""
    framework, mode, precision = KINDS[environment]
    samples = list(median * NOISE) if state == "ok" else []
    return {
        "environment": environment, "framework": framework, "mode": mode, "precision": precision,
        "device": "cuda" if environment.startswith("gpu") else "cpu", "machine": "box", "model": model,
        "batch_size": batch_size, "sequence_length": sequence_length, "status": state,
        "mean_s": float(np.mean(samples)) if samples else math.nan, "median_s": float(np.median(samples)) if samples else math.nan,
        "samples_s": samples, "reason": "" if state == "ok" else f"{state} here", "round": 1, "disturbed": False, **extra,
    }  # fmt: skip


def collapsed(rows: list[dict]) -> pd.DataFrame:
    """The rows as `load_runs` gives them: one per environment and cell over its rounds."""
    frame = pd.DataFrame(rows)
    return pd.concat([runs.collapse_rounds(group) for _, group in frame.groupby("environment", sort=False)], ignore_index=True)


@pytest.fixture
def rows() -> pd.DataFrame:
    """ONNX Runtime exactly 2x faster than eager PyTorch on every cell, TorchScript the same, bfloat16 1.25x faster
    (with output differences), OpenVINO failed everywhere, and a cuda environment without a baseline there."""
    made = []
    for model, b, s, t in CELLS:
        made += [
            row("cpu-pytorch", model, b, s, t),
            row("cpu-onnxruntime", model, b, s, t / 2, max_abs_diff=1e-6),
            row("cpu-torchscript", model, b, s, t),
            row("cpu-pytorch-bf16", model, b, s, t / 1.25, max_abs_diff=0.01 if model == "gpt2" else 0.002),
            row("cpu-openvino", model, b, s, None, "error"),
            row("gpu-pytorch-fp16", model, b, s, t / 10),
        ]  # fmt: skip
    return collapsed(made)


def test_speedups_over_eager_pytorch_float32(rows: pd.DataFrame) -> None:
    table = speedups.speedups(rows)
    assert list(table.columns) == list(speedups.SPEEDUP_COLUMNS)
    assert list(table["environment"]) == ["cpu-onnxruntime", "cpu-pytorch-bf16", "cpu-pytorch", "cpu-torchscript", "cpu-openvino"]
    assert set(table["baseline"]) == {"cpu-pytorch"} and set(table["device"]) == {"cpu"}  # no cuda baseline: no cuda rows
    by_env = table.set_index("environment")
    onnx = by_env.loc["cpu-onnxruntime"]
    assert onnx["speedup"] == pytest.approx(2.0) and onnx["verdict"] == "faster" and onnx["cells"] == 4
    assert onnx["ci95_low"] <= 2.0 <= onnx["ci95_high"] and onnx["ci95_low"] > 1.5
    assert by_env.loc["cpu-torchscript", "speedup"] == pytest.approx(1.0)
    assert by_env.loc["cpu-torchscript", "verdict"] == "no clear difference"
    assert by_env.loc["cpu-pytorch-bf16", "speedup"] == pytest.approx(1.25)
    assert by_env.loc["cpu-pytorch-bf16", "max_abs_diff"] == pytest.approx(0.01)
    assert by_env.loc["cpu-pytorch", "verdict"] == "baseline" and by_env.loc["cpu-pytorch", "precision"] == "float32"
    failed = by_env.loc["cpu-openvino"]
    assert failed["cells"] == 0 and failed["cells_excluded"] == 4 and math.isnan(failed["speedup"]) and failed["verdict"] == "inconclusive"


def test_speedups_per_model_and_disturbed_cells(rows: pd.DataFrame) -> None:
    rows.loc[(rows["environment"] == "cpu-onnxruntime") & (rows["model"] == "gpt2") & (rows["sequence_length"] == 8), "disturbed"] = True
    table = speedups.speedups(rows, per_model=True)
    assert "model" in table.columns
    onnx = table[table["environment"] == "cpu-onnxruntime"].set_index("model")
    assert onnx["speedup"].tolist() == pytest.approx([2.0, 2.0]) and onnx["cells"].tolist() == [2, 2]
    assert onnx.loc["bert-base-cased", "verdict"] == "faster"
    assert onnx.loc["gpt2", "verdict"] == "inconclusive" and onnx.loc["gpt2", "disturbed_cells"] == "cpu-onnxruntime gpt2 1x8"
    assert list(table["model"]) == ["bert-base-cased"] * 5 + ["gpt2"] * 5
    assert table[table["model"] == "gpt2"]["max_abs_diff"].max() == pytest.approx(0.01)


def test_fastest_environment_per_cell_with_its_margin(rows: pd.DataFrame) -> None:
    extra = collapsed([
        row("cpu-pytorch", "ctrl", 1, 8, 0.2), row("cpu-torchscript", "ctrl", 1, 8, 0.2),  # a tie
        row("cpu-pytorch", "ctrl", 1, 64, 0.3), row("cpu-torchscript", "ctrl", 1, 64, None, "oom"),  # one ok
        row("cpu-pytorch", "ctrl", 2, 8, None, "oom"), row("cpu-torchscript", "ctrl", 2, 8, None, "oom"),  # none ok
    ])  # fmt: skip
    table = speedups.fastest(pd.concat([rows, extra], ignore_index=True))
    assert list(table.columns) == list(speedups.FASTEST_COLUMNS)
    cpu = table[table["device"] == "cpu"].set_index(["model", "batch_size", "sequence_length"])
    bert = cpu.loc[("bert-base-cased", 1, 8)]
    assert bert["fastest"] == "cpu-onnxruntime" and bert["runner_up"] == "cpu-pytorch-bf16" and bert["environments"] == 4
    assert bert["time_s"] == pytest.approx(0.02, rel=0.02) and bert["margin"] == pytest.approx(1.6) and bert["verdict"] == "faster"
    assert bert["ci95_low"] <= 1.6 <= bert["ci95_high"] and bert["max_abs_diff"] == pytest.approx(1e-6)
    tie = cpu.loc[("ctrl", 1, 8)]
    assert tie["margin"] == pytest.approx(1.0) and tie["verdict"] == "no clear difference"
    assert cpu.loc[("ctrl", 1, 64), ["fastest", "runner_up", "verdict"]].tolist() == ["cpu-pytorch", "", speedups.NO_RUNNER_UP]
    assert cpu.loc[("ctrl", 2, 8), ["fastest", "verdict"]].tolist() == ["", speedups.NONE_OK]
    assert set(table.loc[table["device"] == "cuda", "fastest"]) == {"gpu-pytorch-fp16"}  # the fastest needs no baseline

    figure = plots.fastest_heatmap(table)
    texts = {text.get_text() for ax in figure.axes for text in ax.texts}
    assert {"1.60x", "(1.00x)", "only", "none ok"} <= texts
    assert len(figure.axes) == 2 and all(ax.get_title() and ax.get_xlabel() and ax.get_ylabel() for ax in figure.axes)
    legend = {text.get_text() for text in figure.axes[0].get_legend().get_texts()}
    assert legend == {"cpu-onnxruntime", "cpu-pytorch"}
    plt.close(figure)
    with pytest.raises(ValueError, match="no cell is ok in any environment"):
        plots.fastest_heatmap(table[table["fastest"] == ""])


def test_findings_give_the_answer_the_claims_and_the_warnings(rows: pd.DataFrame) -> None:
    frames = speedups.speedups(rows), speedups.speedups(rows, per_model=True), speedups.fastest(rows), claims.claims_table(rows)
    sentences = speedups.findings(rows, *frames)
    assert sentences[0] == (
        "On cpu (box), the fastest environment overall is cpu-onnxruntime (onnxruntime, session, float32): 2.00x as fast as eager PyTorch "
        f"float32 (cpu-pytorch) (95% interval {frames[0]['ci95_low'].iloc[0]:.2f}x to {frames[0]['ci95_high'].iloc[0]:.2f}x over 4 cells "
        "ok in both; verdict: faster). Its outputs differ from eager PyTorch float32's by at most 1e-06."
    )
    assert sentences[1] == (
        "Per model there, the highest speed-up over eager PyTorch float32: bert-base-cased: cpu-onnxruntime 2.00x (faster); "
        "gpt2: cpu-onnxruntime 2.00x (faster)."
    )
    assert sentences[2] == "Cell by cell on cpu (box), the fastest environment of the 4 cells (model and shape) is cpu-onnxruntime in 4 (clearly in 4)."
    assert "Cell by cell on cuda (box), the fastest environment of the 4 cells (model and shape) is gpu-pytorch-fp16 in 4 (clearly in 0)." in sentences
    verdicts = next(s for s in sentences if s.startswith("The 2019 claims: "))
    assert "“A TorchScript-traced model is about 20% faster than the same eager PyTorch model on average” does not hold on cpu (0; 2019: -20)" in verdicts
    assert any(s.endswith("claims are not checked here: these runs lack what they need (the 2019 claims' table says what).") for s in sentences)
    assert "There is no eager PyTorch float32 environment on cuda (box): gpu-pytorch-fp16 have no speed-up there." in sentences
    assert "cpu-openvino has no ok cell on cpu (box) (error 4): it is in no comparison." in sentences
    assert not any("disturbed" in s for s in sentences)


def test_findings_when_the_baseline_is_fastest_or_cells_are_missing_or_disturbed() -> None:
    rows = collapsed([
        row("cpu-pytorch", "gpt2", 1, 8, 0.05, disturbed=True), row("cpu-pytorch", "gpt2", 1, 64, 0.1),
        row("cpu-torchscript", "gpt2", 1, 8, 0.1),  # half as fast; 1x64 not written yet
        row("cpu-pytorch", "gpt2", 2, 8, None, "oom"), row("cpu-torchscript", "gpt2", 2, 8, None, "oom"),
    ])  # fmt: skip
    speedup = speedups.speedups(rows)
    sentences = speedups.findings(rows, speedup, speedups.speedups(rows, per_model=True), speedups.fastest(rows), claims.claims_table(rows))
    assert sentences[0].startswith(
        "On cpu (box), eager PyTorch float32 (cpu-pytorch) is the fastest environment overall: the next, cpu-torchscript "
        "(pytorch, torchscript, float32), runs 0.50x as fast (95% interval"
    )
    assert sentences[0].endswith("over 1 cells ok in both; verdict: inconclusive).")
    assert "cpu-torchscript has no row for 1 of the 3 cells measured on cpu (box) (still running, or stopped)." in sentences
    assert "Cell by cell on cpu (box), the fastest environment of the 3 cells (model and shape) is cpu-pytorch in 2 (clearly in 0); 1 are ok in no environment." in sentences
    assert sentences[-1] == "1 of 3 ok cells were disturbed by other work on the machine: comparisons that rest on them are inconclusive (*How far to trust these numbers* lists them)."
    assert speedups.findings(rows.iloc[:0], speedup.iloc[:0], speedup.iloc[:0], speedups.fastest(rows).iloc[:0], claims.claims_table(rows)) == [
        "These runs have no results yet: there is nothing to compare."
    ]


def test_precision_defaults_to_float32_and_selects_the_baseline(rows: pd.DataFrame) -> None:
    prepared = runs.prepare(rows.drop(columns=["precision"]))
    assert set(prepared["precision"]) == {"float32"}
    assert comparisons.BASELINE.select(runs.prepare(rows)) == ["cpu-pytorch"]  # not the bfloat16 or float16 ones
    # The study's averages are over its four ways only; the bfloat16 one is in the speed-ups, against the float32 baseline.
    averages = tables.framework_averages(rows).set_index("environment")
    assert averages.loc["cpu-pytorch", "verdict"] == "baseline" and "cpu-pytorch-bf16" not in averages.index
    assert speedups.speedups(rows).set_index("environment").loc["cpu-pytorch-bf16", "speedup"] == pytest.approx(1.25)


def test_a_comparison_is_one_line_of_data(rows: pd.DataFrame) -> None:
    onnx = comparisons.Comparison("ONNX Runtime against eager PyTorch", comparisons.BASELINE, comparisons.Selector("onnxruntime", "session"), "eager", "onnxruntime", "speedup", invert=True)
    table = tables.comparison_table(rows, onnx).set_index("model")
    assert list(table.columns) == ["device", "machine", "eager", "onnxruntime", "cells", "cells_excluded", "speedup", *comparisons.INTERVAL_COLUMNS]
    assert table.loc["all models", "speedup"] == pytest.approx(2.0) and table.loc["all models", "verdict"] == "faster"
    assert table.loc["all models", "ci95_low"] <= 2.0 <= table.loc["all models", "ci95_high"]
    bf16 = comparisons.Comparison("bfloat16 against float32", comparisons.BASELINE, comparisons.Selector("pytorch", "eager", "bfloat16"), "float32", "bfloat16", "ratio")
    assert tables.comparison_table(rows, bf16).set_index("model").loc["all models", "ratio"] == pytest.approx(0.8)
    assert comparisons.Selector("pytorch", "eager", "bfloat16").describe() == "pytorch (eager, bfloat16)"
    with pytest.raises(ValueError, match="comparison must be one of pytorch_vs_tensorflow, torchscript_vs_eager, xla_vs_function, not 'nope'"):
        tables.comparison_table(rows, "nope")


def test_show_table_leaves_out_the_index_and_constant_columns(rows: pd.DataFrame, tmp_path, monkeypatch) -> None:
    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    table = speedups.speedups(rows)
    report.show_table(table, tmp_path, "speedups")
    assert list(pd.read_csv(tmp_path / "tables" / "speedups.csv").columns) == list(table.columns)  # the file keeps every column
    html = shown[0].to_html()
    assert "row_heading" not in html  # no index
    assert "device: cpu · machine: box · baseline: cpu-pytorch · disturbed_cells: none" in html
    assert list(shown[0].data.columns) == [
        "environment", "framework", "mode", "precision", "cells", "cells_excluded", "speedup", "ci95_low", "ci95_high", "verdict", "interval_over", "max_abs_diff", "agreement", "weights"
    ]  # fmt: skip
    assert ">2<" in html and ">nan<" not in html  # floats to 4 significant digits, blanks where there is no value

    view, caption = report.table_view(spreadsheet.spreadsheet(rows, "cpu-pytorch"))
    assert list(view.columns) == ["model", "1x8", "1x64"] and caption == ""  # the index becomes a column
    one_row, caption = report.table_view(table.iloc[:1])
    assert list(one_row.columns) == list(table.columns) and caption == ""  # one row: nothing is constant


def test_an_environment_with_other_options_is_another_way_not_the_baseline(rows: pd.DataFrame) -> None:
    other_attention = rows[rows["environment"] == "cpu-pytorch"].assign(environment="cpu-pytorch-eager-attention", options='{"attn_implementation": "eager"}')
    both = pd.concat([rows, other_attention], ignore_index=True)
    assert comparisons.BASELINE.select(runs.prepare(both)) == ["cpu-pytorch"]
    assert "cpu-pytorch-eager-attention" not in set(tables.framework_averages(both)["environment"])
    assert "cpu-pytorch-eager-attention" in set(speedups.speedups(both)["environment"])


def test_the_study_claims_are_judged_on_the_study_environments_only(rows: pd.DataFrame) -> None:
    # DistilBERT half of BERT's time in the study's environments, twice it in bfloat16.
    bert = rows[rows["model"] == "bert-base-cased"]
    factor = np.where(bert["environment"] == "cpu-pytorch-bf16", 2.0, 0.5)
    scaled = {column: bert[column] * factor for column in ("median_s", "mean_s", "time_s")}
    lists = {column: [[t * f for t in values] for values, f in zip(bert[column], factor)] for column in ("samples_s", "values")}
    distilbert = bert.assign(model="distilbert-base-uncased", **scaled, **lists)
    both = pd.concat([rows, distilbert], ignore_index=True)
    study = both[both["environment"].isin(set(comparisons.study_rows(both)["environment"]))]
    assert len(study) < len(both)  # the fixture has today's environments too
    checked = claims.claims_table(both).set_index("claim")
    pd.testing.assert_frame_equal(checked, claims.claims_table(study).set_index("claim"))
    distilled = checked.loc[[claim for claim in checked.index if claim.startswith("DistilBERT")][0]]
    assert distilled["value_this_run"] == pytest.approx(0.5, rel=0.05) and distilled["holds"] == "holds"


def test_findings_name_the_fastest_environment_that_keeps_agreement() -> None:
    """int8-like ONNX Runtime is fastest but agrees 95% with eager float32 in one cell; bfloat16 keeps 99.9%."""
    made = []
    for model, b, s, t in CELLS:
        made += [
            row("cpu-pytorch", model, b, s, t, weights="random"),
            row("cpu-onnxruntime", model, b, s, t / 2, max_abs_diff=0.2, agreement=0.95 if model == "gpt2" else 0.999, weights="random"),
            row("cpu-pytorch-bf16", model, b, s, t / 1.25, max_abs_diff=0.01, agreement=0.999, weights="random"),
        ]  # fmt: skip
    rows = collapsed(made)
    table = speedups.speedups(rows).set_index("environment")
    assert table.loc["cpu-onnxruntime", "agreement"] == pytest.approx(0.95) and table.loc["cpu-pytorch", "agreement"] == 1.0
    assert set(table["weights"]) == {"random"}
    sentences = speedups.findings(rows, speedups.speedups(rows), speedups.speedups(rows, per_model=True), speedups.fastest(rows), claims.claims_table(rows))
    agreeing = next(s for s in sentences if s.startswith("The fastest environment whose agreement"))
    assert "at least 99% in every cell is cpu-pytorch-bf16 (1.25x)" in agreeing
    assert "faster but below that bar: cpu-onnxruntime (2.00x, agreement 0.950)" in agreeing
    assert "Agreement on random weights says how far an environment's numbers move, not how accurate its answers are" in agreeing
    pretrained = collapsed([{**r, "weights": "pretrained"} for r in made])
    again = speedups.findings(pretrained, speedups.speedups(pretrained), speedups.speedups(pretrained, per_model=True), speedups.fastest(pretrained), claims.claims_table(pretrained))
    assert not any("random weights" in s for s in again) and any("cpu-pytorch-bf16 (1.25x)" in s for s in again)
    high = collapsed([{**r, "agreement": 0.9999} if r["environment"] != "cpu-pytorch" else r for r in made])
    sentences = speedups.findings(high, speedups.speedups(high), speedups.speedups(high, per_model=True), speedups.fastest(high), claims.claims_table(high))
    agreeing = next(s for s in sentences if s.startswith("The fastest environment whose agreement"))
    assert "in every cell is cpu-onnxruntime (2.00x)." in agreeing and "below that bar" not in agreeing
