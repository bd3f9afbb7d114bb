"""The summary's generation section on hand-made generate rows with known times: its table, speed-ups with intervals,
the fastest environment, the 2022 claims, divergence from eager PyTorch float32's tokens, and forward rows kept apart."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from benchlib.analysis import claims, generation, runs, speedups, tables
from benchlib.report import plots
from benchlib.report.render import render_summary
from benchlib.store.results import COLUMNS, SAMPLE_COLUMNS, read_results

KINDS = {  # environment: framework, mode, precision
    "cpu-pytorch": ("pytorch", "eager", "float32"),
    "cpu-pytorch-bf16": ("pytorch", "eager", "bfloat16"),
    "cpu-onnxruntime": ("onnxruntime", "session", "float32"),
    "cpu-tensorflow": ("tensorflow", "function", "float32"),
    "cpu-tensorflow-xla": ("tensorflow", "xla", "float32"),
}
NEW_TOKENS = 16
CELLS = [("gpt2", 1, 8, 0.4), ("gpt2", 1, 64, 0.5), ("llama", 1, 8, 0.8), ("llama", 2, 64, 1.2)]  # model, batch, prompt, eager call


def gen_row(environment: str, model: str, batch_size: int, prompt: int, call_s: float | None, ttft_s: float | None = None, state: str = "ok",
            spread: float = 0.02, seed: int = 0, round_number: int = 1, **extra: object) -> dict:  # fmt: skip
    """A generate row of one round: 15 calls around `call_s`, their first tokens around `ttft_s` (a tenth of the call by default)."""
    framework, mode, precision = KINDS[environment]
    ttft_s = call_s / 10 if ttft_s is None and call_s is not None else ttft_s
    noise = 1 + spread * np.random.default_rng(seed).standard_normal(15)
    calls, firsts = (list(call_s * noise), list(ttft_s * noise)) if state == "ok" else ([], [])
    tpot = (call_s - ttft_s) / (NEW_TOKENS - 1) if state == "ok" else math.nan
    return {
        "environment": environment, "framework": framework, "mode": mode, "precision": precision, "device": "cpu", "machine": "box",
        "model": model, "model_scale": "tiny", "batch_size": batch_size, "sequence_length": prompt, "status": state,
        "workload": "generate", "new_tokens": NEW_TOKENS,
        "mean_s": float(np.mean(calls)) if calls else math.nan, "median_s": float(np.median(calls)) if calls else math.nan, "samples_s": calls,
        "generate_s": float(np.median(calls)) if calls else math.nan, "ttft_s": float(np.median(firsts)) if firsts else math.nan,
        "ttft_samples_s": firsts, "tpot_s": tpot, "tpot_p90_s": tpot * 1.1, "token_clock": "each step", "weights": "random",
        "reason": "" if state == "ok" else f"{state} here", "round": round_number, "disturbed": False, **extra,
    }  # fmt: skip


def collapsed(made: list[dict], timing: runs.Timing = runs.CALL) -> pd.DataFrame:
    """The rows as `load_runs` gives them (with `timing`): one per environment and cell over its rounds."""
    frame = pd.DataFrame(made)
    return pd.concat([runs.collapse_rounds(group, timing) for _, group in frame.groupby("environment", sort=False)], ignore_index=True)


def made_rows(xla: float = 3.0, tf: float = 0.8, spread: float = 0.02, disturbed: bool = False) -> list[dict]:
    """Eager PyTorch float32 (the baseline); ONNX Runtime 2x faster on the whole call, its first token 1.5x faster, and its
    tokens differing from the 5th on in gpt2 1x64; bfloat16 1.25x faster, differing from the 2nd token on in every cell;
    TensorFlow `tf` times the baseline's speed and XLA `xla` times TensorFlow's (its first cell `disturbed` if asked)."""
    made = []
    for i, (model, b, s, t) in enumerate(CELLS):
        diverges = model == "gpt2" and s == 64
        made += [
            gen_row("cpu-pytorch", model, b, s, t, seed=i),
            gen_row("cpu-onnxruntime", model, b, s, t / 2, t / 10 / 1.5, seed=i, token_agreement=0.25 if diverges else 1.0,
                    first_divergence=5 if diverges else None),
            gen_row("cpu-pytorch-bf16", model, b, s, t / 1.25, seed=i, token_agreement=1 / 16, first_divergence=2),
            gen_row("cpu-tensorflow", model, b, s, t / tf, spread=spread, seed=i),
            gen_row("cpu-tensorflow-xla", model, b, s, t / tf / xla, spread=spread, seed=i, disturbed=disturbed and i == 0),
        ]  # fmt: skip
    return made


@pytest.fixture
def rows() -> pd.DataFrame:
    return collapsed(made_rows())


def forward_rows() -> pd.DataFrame:
    """Forward rows of a file from before generation (no workload column): ONNX Runtime 4x faster than eager PyTorch."""
    made = [gen_row(env, "bert-base-cased", 1, s, t / factor) for env, factor in (("cpu-pytorch", 1), ("cpu-onnxruntime", 4)) for s, t in ((8, 0.01), (64, 0.02))]
    return collapsed([{key: value for key, value in row.items() if key != "workload"} for row in made])


def test_the_table_gives_each_generate_cell_s_figures(rows: pd.DataFrame) -> None:
    failed = collapsed([gen_row("cpu-tensorflow-xla", "llama", 4, 64, None, state="oom")])
    table = generation.generation_table(pd.concat([rows, failed, forward_rows()], ignore_index=True))
    assert list(table.columns) == list(generation.GENERATION_COLUMNS)
    assert len(table) == 5 * len(CELLS) + 1  # the forward rows are left out
    cell = table.set_index(["environment", "model", "batch_size", "prompt_length"]).loc[("cpu-pytorch", "llama", 2, 64)]
    assert cell["generate_s"] == pytest.approx(1.2, rel=0.02) and cell["ttft_s"] == pytest.approx(0.12, rel=0.02)
    assert cell["tokens_per_s"] == pytest.approx(2 * 16 / cell["generate_s"]) and cell["tpot_s"] == pytest.approx((1.2 - 0.12) / 15)
    assert cell["new_tokens"] == 16 and cell["device"] == "cpu" and cell["machine"] == "box" and cell["token_clock"] == "each step"
    onnx = table[(table["environment"] == "cpu-onnxruntime") & (table["model"] == "gpt2")]
    assert onnx["first_divergence"].fillna(0).tolist() == [0, 5] and onnx["token_agreement"].tolist() == [1.0, 0.25]
    oom = table[table["status"] == "oom"].squeeze()
    assert oom["batch_size"] == 4 and math.isnan(oom["generate_s"]) and math.isnan(oom["tokens_per_s"])


def test_a_cell_over_rounds_takes_each_figure_s_median_and_the_first_token_has_its_own_interval_values() -> None:
    made = [gen_row("cpu-pytorch", "gpt2", 1, 8, call, call / 5, seed=i, round_number=i + 1) for i, call in enumerate([1.0, 1.4, 1.2])]
    call, first = collapsed(made).squeeze(), collapsed(made, runs.TTFT).squeeze()
    assert call["time_s"] == pytest.approx(1.2, rel=0.02) and first["time_s"] == pytest.approx(0.24, rel=0.02)
    assert call["ttft_s"] == pytest.approx(first["time_s"]) and call["tpot_s"] == pytest.approx((1.2 - 0.24) / 15)
    assert first["values_over"] == "rounds" and sorted(first["values"]) == pytest.approx(sorted(r["ttft_s"] for r in made))
    one = collapsed(made[:1], runs.TTFT).squeeze()
    assert one["values"] == made[0]["ttft_samples_s"] and one["samples"] == made[0]["ttft_samples_s"]


def test_speedups_on_the_whole_call_and_on_the_first_token(rows: pd.DataFrame) -> None:
    whole = generation.generation_speedups(rows)
    assert list(whole.columns[:3]) == ["device", "machine", "new_tokens"] and set(whole["new_tokens"]) == {16}
    by_env = whole.set_index("environment")
    assert list(whole["environment"]) == ["cpu-tensorflow-xla", "cpu-onnxruntime", "cpu-pytorch-bf16", "cpu-pytorch", "cpu-tensorflow"]
    onnx = by_env.loc["cpu-onnxruntime"]
    assert onnx["speedup"] == pytest.approx(2.0) and onnx["verdict"] == "faster" and onnx["cells"] == 4
    assert onnx["ci95_low"] <= 2.0 <= onnx["ci95_high"] and onnx["ci95_low"] > 1.8
    assert onnx["token_agreement"] == 0.25 and by_env.loc["cpu-pytorch", "token_agreement"] == 1.0
    assert by_env.loc["cpu-tensorflow", "verdict"] == "slower" and by_env.loc["cpu-tensorflow-xla", "speedup"] == pytest.approx(2.4)

    first = generation.generation_speedups(collapsed(made_rows(), runs.TTFT)).set_index("environment")
    assert first.loc["cpu-onnxruntime", "speedup"] == pytest.approx(1.5) and first.loc["cpu-onnxruntime", "verdict"] == "faster"
    assert first.loc["cpu-onnxruntime", "ci95_low"] <= 1.5 <= first.loc["cpu-onnxruntime", "ci95_high"]
    assert first.loc["cpu-pytorch-bf16", "speedup"] == pytest.approx(1.25)

    per_model = generation.generation_speedups(rows, per_model=True)
    assert set(per_model["model"]) == {"gpt2", "llama"} and (per_model.loc[per_model["environment"] == "cpu-onnxruntime", "cells"] == 2).all()


def test_cells_are_compared_only_with_cells_of_as_many_new_tokens(rows: pd.DataFrame) -> None:
    longer = rows.assign(new_tokens=64, environment=rows["environment"] + "@long", time_s=rows["time_s"] * 4)
    table = generation.generation_speedups(pd.concat([rows, longer], ignore_index=True))
    assert sorted(set(table["new_tokens"])) == [16, 64]
    assert set(table.loc[table["new_tokens"] == 64, "baseline"]) == {"cpu-pytorch@long"}
    assert table["speedup"].max() == pytest.approx(2.4)


def test_the_fastest_environment_per_cell(rows: pd.DataFrame) -> None:
    table = generation.generation_fastest(rows)
    assert len(table) == len(CELLS) and set(table["fastest"]) == {"cpu-tensorflow-xla"} and set(table["runner_up"]) == {"cpu-onnxruntime"}
    cell = table.set_index(["model", "batch_size", "prompt_length"]).loc[("llama", 2, 64)]
    assert cell["generate_s"] == pytest.approx(0.5, rel=0.02) and cell["tokens_per_s"] == pytest.approx(2 * 16 / cell["generate_s"])
    assert cell["margin"] == pytest.approx(1.2, rel=0.03) and cell["verdict"] == "faster" and cell["new_tokens"] == 16


def claim(table: pd.DataFrame, claim_id: str) -> pd.Series:
    text = next(c["claim"] for c in claims.load_claims(claims.CLAIMS_2022)["claims"] if c["id"] == claim_id)
    return table[table["claim"] == text].squeeze()


@pytest.mark.parametrize(
    "xla, tf, spread, disturbed, speedup_holds, pytorch_holds",
    [(3.0, 0.8, 0.02, False, "holds", "holds"), (1.2, 0.5, 0.02, False, "does not hold", "does not hold"),
     (3.0, 0.8, 0.02, True, "inconclusive", "inconclusive"), (2.0, 0.52, 0.4, False, "inconclusive", "inconclusive")],
    ids=["xla-clearly-faster", "xla-barely-faster", "disturbed", "straddling"],
)  # fmt: skip
def test_the_2022_claims(xla, tf, spread, disturbed, speedup_holds, pytorch_holds) -> None:
    table = generation.claims_2022(collapsed(made_rows(xla, tf, spread, disturbed)))
    assert list(table.columns[:5]) == ["claim", "device", "machine", "new_tokens", "device_2022"] and "value_2022" in table
    assert set(table["device"]) == {"cpu"} and set(table["device_2022"]) == {"GPU"} and len(table) == 2
    speedup, pytorch = claim(table, "xla_generation_speedup"), claim(table, "xla_faster_than_pytorch")
    assert speedup["value_this_run"] == pytest.approx(xla, rel=0.05 if spread < 0.1 else 0.3) and speedup["value_2022"] == 100
    assert pytorch["value_this_run"] == pytest.approx(xla * tf, rel=0.05 if spread < 0.1 else 0.3) and math.isnan(pytorch["value_2022"])
    assert (speedup["holds"], pytorch["holds"]) == (speedup_holds, pytorch_holds)
    if disturbed:
        assert speedup["detail"].startswith("rests on 1 disturbed cells (cpu-tensorflow-xla gpt2 1x8)")
    elif spread > 0.1:
        assert "straddles >= 2" in speedup["detail"] and "straddles >= 1.05" in pytorch["detail"]
    sentences = generation.generation_findings(collapsed(made_rows(xla, tf, spread, disturbed)), *speedups_of(xla, tf, spread, disturbed), table)
    assert next(s for s in sentences if s.startswith("The 2022 claims")).startswith(
        f"The 2022 claims on cpu (box), generating 16 tokens (the post measured a GPU): “XLA makes TensorFlow generation up to 100x faster” {speedup_holds}"
    )


def speedups_of(xla: float, tf: float, spread: float, disturbed: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    made = made_rows(xla, tf, spread, disturbed)
    return generation.generation_speedups(collapsed(made)), generation.generation_speedups(collapsed(made, runs.TTFT))


def test_the_2022_claims_are_not_checked_without_their_environments(rows: pd.DataFrame) -> None:
    table = generation.claims_2022(rows[rows["framework"] != "tensorflow"])
    assert set(table["holds"]) == {"not checked"} and set(table["detail"]) == {"no tensorflow (function) environment", "no tensorflow (xla) environment"}
    data = claims.load_claims(claims.CLAIMS_2022)
    assert data["source"]["url"] == "https://huggingface.co/blog/tf-xla-generate" and "GPU" in data["source"]["setup"]
    assert all(c["metric"] in claims.METRICS for c in data["claims"]) and "tf.function" in data["claims"][0]["measure"]


def test_float32_divergence_is_flagged_with_its_step_and_reduced_precision_reported(rows: pd.DataFrame) -> None:
    flagged, reported = generation.divergence(rows), generation.divergence(rows, reduced=True)
    assert list(flagged.columns) == list(generation.DIVERGENCE_COLUMNS)
    assert flagged[["environment", "model", "prompt_length", "first_divergence"]].values.tolist() == [["cpu-onnxruntime", "gpt2", 64, 5]]
    assert set(reported["environment"]) == {"cpu-pytorch-bf16"} and len(reported) == 4 and set(reported["first_divergence"]) == {2}

    sentences = generation.generation_findings(rows, *speedups_of(3.0, 0.8, 0.02, False), generation.claims_2022(rows))
    assert (
        "Flagged: cpu-onnxruntime (float32) generated other tokens than eager PyTorch float32 in 1 of 4 cells compared, "
        "first at token 5 (gpt2 1x64): in float32 it should follow the baseline's tokens."
    ) in sentences
    assert (
        "Reduced precision diverged from eager PyTorch float32's tokens, as it may (reported, not an error): "
        "cpu-pytorch-bf16 (bfloat16) in 4 cells, earliest at token 2."
    ) in sentences
    assert sentences[-1].startswith("Every model generated with random weights: near-ties between their logits make an early divergence likelier")

    reduced = rows["precision"] != "float32"
    same = rows.assign(token_agreement=rows["token_agreement"].where(reduced, 1.0), first_divergence=rows["first_divergence"].where(reduced))
    again = generation.generation_findings(same, *speedups_of(3.0, 0.8, 0.02, False), generation.claims_2022(same))
    assert generation.divergence(same).empty and "Every float32 environment compared generated the same tokens as eager PyTorch float32." in again
    pretrained = rows.assign(weights=np.where(rows["model"] == "llama", "pretrained", "random"))
    assert generation.weights_sentence(pretrained).startswith("gpt2 generated with random weights")
    assert generation.weights_sentence(rows.assign(weights="pretrained")).startswith("Every model generated with its pretrained weights")


def test_findings_name_the_fastest_environment_and_its_first_token(rows: pd.DataFrame) -> None:
    whole, first = speedups_of(3.0, 0.8, 0.02, False)
    sentences = generation.generation_findings(rows, whole, first, generation.claims_2022(rows))
    top = whole.iloc[0]
    assert sentences[0] == (
        "Generating 16 tokens on cpu (box), the fastest environment is cpu-tensorflow-xla: 2.40x the tokens per second of eager PyTorch "
        f"float32 (cpu-pytorch) (95% interval {top['ci95_low']:.2f}x to {top['ci95_high']:.2f}x over 4 cells ok in both; verdict: faster); "
        f"its first token comes {first.set_index('environment').loc['cpu-tensorflow-xla', 'speedup']:.2f}x as fast (faster)."
    )
    without = rows[rows["environment"] != "cpu-pytorch"]
    sentences = generation.generation_findings(without, generation.generation_speedups(without), first.iloc[:0], generation.claims_2022(without))
    assert sentences[0] == "Generating 16 tokens on cpu (box), there is no eager PyTorch float32 environment: no speed-up there."
    assert generation.generation_findings(forward_rows(), whole.iloc[:0], first.iloc[:0], generation.claims_2022(forward_rows())) == [generation.NO_GENERATION]


def test_forward_tables_see_forward_rows_only_and_generation_sees_generate_rows_only(rows: pd.DataFrame) -> None:
    forward = forward_rows()
    mixed = pd.concat([forward, rows], ignore_index=True)
    kept = runs.by_workload(mixed, runs.FORWARD)
    assert set(runs.prepare(forward)["workload"]) == {"forward"}  # rows without a workload are forward ones
    pd.testing.assert_frame_equal(speedups.speedups(kept), speedups.speedups(forward))
    pd.testing.assert_frame_equal(speedups.fastest(kept), speedups.fastest(forward))
    pd.testing.assert_frame_equal(tables.status_counts(kept), tables.status_counts(forward))
    assert speedups.speedups(mixed)["cells"].max() > speedups.speedups(forward)["cells"].max()  # what the filter keeps out
    pd.testing.assert_frame_equal(generation.generation_speedups(mixed), generation.generation_speedups(rows))
    pd.testing.assert_frame_equal(generation.generation_table(mixed), generation.generation_table(rows))
    assert generation.generation_table(forward).empty and generation.generation_speedups(forward).empty
    assert len(runs.by_workload(mixed, runs.GENERATE)) == len(rows) and runs.by_workload(mixed.iloc[:0], runs.GENERATE).columns.equals(mixed.columns)
    with pytest.raises(ValueError, match="workload must be forward or generate"):
        runs.by_workload(mixed, "train")


def test_results_files_keep_the_generation_columns_and_old_files_read_as_forward(tmp_path) -> None:
    generation = COLUMNS[COLUMNS.index("workload") : COLUMNS.index("workload") + 12]
    assert generation == ("workload", "new_tokens", "generate_s", "ttft_s", "ttft_samples_s", "tpot_s", "tpot_p90_s", "tpot_samples_s",
                          "tokens_per_s", "token_agreement", "first_divergence", "token_clock")  # fmt: skip
    made = gen_row("cpu-pytorch", "gpt2", 1, 8, 0.4, tpot_samples_s=[0.02, 0.021])
    lists = {column: json.dumps(made[column]) for column in ("samples_s", "ttft_samples_s", "tpot_samples_s")}
    pd.DataFrame([{**made, **lists}]).reindex(columns=list(COLUMNS)).to_csv(tmp_path / "results.csv", index=False)
    read = read_results(tmp_path).squeeze()
    assert read["ttft_samples_s"] == pytest.approx(made["ttft_samples_s"]) and read["tpot_samples_s"] == [0.02, 0.021]
    assert read["samples_s"] == pytest.approx(made["samples_s"]) and read["workload"] == "generate" and read["new_tokens"] == 16

    old = tmp_path / "old"
    old.mkdir()
    pd.DataFrame([{**made, "samples_s": "[]"}]).drop(columns=["workload", "ttft_samples_s"]).to_csv(old / "results.csv", index=False)
    assert read_results(old).squeeze()["ttft_samples_s"] == [] and runs.load_run(old).squeeze()["workload"] == "forward"


def test_tpot_against_prompt_length_plots_generate_cells_only(rows: pd.DataFrame, tmp_path) -> None:
    figure = plots.tpot_vs_prompt_length(pd.concat([forward_rows(), rows], ignore_index=True))
    axes = [ax for ax in figure.axes if ax.get_xlabel() or ax.get_ylabel()]
    assert "prompt length" in axes[-1].get_xlabel() and any("time per output token (s)" == ax.get_ylabel() for ax in axes)
    labels = [ax.get_title() for ax in figure.axes] + [text.get_text() for ax in figure.axes for text in ax.texts]
    assert not any("bert" in label for label in labels) and {"gpt2", "llama", "batch size 2"} <= set(labels)
    legend = {text.get_text() for text in figure.legends[0].get_texts()}
    assert set(KINDS) <= legend
    assert plots.save_figure(figure, tmp_path, "tpot").stat().st_size > 10_000
    plt.close(figure)
    with pytest.raises(ValueError, match="no ok generate cell"):
        plots.tpot_vs_prompt_length(forward_rows())


def write_run(run_dir: Path, made: list[dict]) -> None:
    """A run folder as the kit writes it: `<env>/results.csv` (the sample lists as JSON) and `<env>/environment.json`."""
    for environment, rows in pd.DataFrame(made).groupby("environment", sort=False):
        (run_dir / environment).mkdir(parents=True)
        lists = {column: [json.dumps(values) for values in rows[column]] for column in SAMPLE_COLUMNS}
        rows.assign(**lists).reindex(columns=list(COLUMNS)).to_csv(run_dir / environment / "results.csv", index=False)
        (run_dir / environment / "environment.json").write_text(json.dumps({"machine": {"hostname": "a", "cpu": "AMD EPYC"}}))


@pytest.mark.e2e
@pytest.mark.full
def test_the_summary_notebook_shows_the_generation_section_apart_from_the_forward_pass(tmp_path: Path) -> None:
    forward = [{**gen_row(env, "bert-base-cased", 1, s, t * factor, seed=s), "workload": "forward", "ttft_samples_s": [], "tpot_samples_s": []}
               for env, factor in (("cpu-pytorch", 1), ("cpu-tensorflow", 1.5)) for s, t in ((8, 0.01), (64, 0.02))]  # fmt: skip
    write_run(tmp_path / "fwd", forward)
    write_run(tmp_path / "gen", [{**row, "tpot_samples_s": [row["tpot_s"]] * 15} for row in made_rows()])

    page = render_summary([tmp_path / "fwd", tmp_path / "gen"]).read_text(encoding="utf-8")

    tables_dir = tmp_path / "fwd" / "tables"
    assert set(pd.read_csv(tables_dir / "speedups.csv")["environment"]) == {"cpu-pytorch@fwd", "cpu-tensorflow@fwd"}
    assert set(pd.read_csv(tables_dir / "status_counts.csv")["environment"]) == {"cpu-pytorch@fwd", "cpu-tensorflow@fwd"}
    table = pd.read_csv(tables_dir / "generation.csv")
    # Only the names found in both runs take the run's name.
    assert len(table) == 20
    assert set(table["environment"]) == {"cpu-pytorch@gen", "cpu-tensorflow@gen", "cpu-onnxruntime", "cpu-pytorch-bf16", "cpu-tensorflow-xla"}
    assert pd.read_csv(tables_dir / "generation_speedups.csv").set_index("environment").loc["cpu-onnxruntime", "speedup"] == pytest.approx(2.0)
    assert pd.read_csv(tables_dir / "generation_ttft_speedups.csv").set_index("environment").loc["cpu-onnxruntime", "speedup"] == pytest.approx(1.5)
    assert set(pd.read_csv(tables_dir / "claims_2022.csv")["holds"]) == {"holds"}
    assert len(pd.read_csv(tables_dir / "generation_divergence_float32.csv")) == 1
    assert {"generation_fastest.csv", "generation_divergence_reduced.csv"} <= {path.name for path in tables_dir.iterdir()}
    assert (tmp_path / "fwd" / "figures" / "tpot_vs_prompt_length.png").is_file()
    opening = "Generating 16 tokens on cpu (AMD EPYC), the fastest environment is cpu-tensorflow-xla"
    # The generation's findings are among the summary's, before its sections; its section comes after the forward pass's.
    assert page.index("Findings") < page.index(opening) < page.index('.-Speed-up-over-eager-PyTorch-float32"') < page.index('.-Generation"')
    assert "Flagged: cpu-onnxruntime (float32) generated other tokens" in page and "Not measured in these runs: the load scenarios" in page

    write_run(tmp_path / "only-forward", forward)
    page = render_summary([tmp_path / "only-forward"]).read_text(encoding="utf-8")
    assert "Not measured in these runs: generation (<code>workload: generate</code>)" in page and '.-Generation"' not in page
    assert not (tmp_path / "only-forward" / "tables" / "generation.csv").exists()

    # Generation alone, every token the baseline's: no first divergence anywhere.
    write_run(tmp_path / "only-generation", [{**row, "token_agreement": 1.0, "first_divergence": None, "tpot_samples_s": []} for row in made_rows()])
    page = render_summary([tmp_path / "only-generation"]).read_text(encoding="utf-8")
    assert 'id="1.-Generation"' in page and '-What-was-measured"' not in page  # generation alone: its section alone
    assert "Every float32 environment compared generated the same tokens as eager PyTorch float32." in page
    assert len(pd.read_csv(tmp_path / "only-generation" / "tables" / "generation.csv")) == 20
