"""The summary's "Under load" tables (`analysis.load`): each scenario's figure per environment and model, and the fastest
per scenario with a sentence where the fastest one request at a time is not the one that serves the most."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from benchlib.analysis import load as under_load
from benchlib.analysis import task_quality

KINDS = {
    "cpu-pytorch": ("pytorch", "eager"), "cpu-onnxruntime": ("onnxruntime", "session"), "cpu-openvino": ("openvino", "model"),
    "cpu-transformers-serve": ("openai", "stream"), "cpu-vllm": ("openai", "stream"),
}  # fmt: skip


def load_row(environment: str, scenario: str, round_number: int = 1, valid: bool = True, **figures: object) -> dict:
    framework, mode = KINDS[environment]
    return {
        "environment": environment, "framework": framework, "mode": mode, "precision": "float32", "options": None, "model": "bert",
        "scenario": scenario, "round": round_number, "status": "ok", "valid": valid, "workload": "forward", "disturbed": False,
        "loadgen_value": "", "max_qps": "", "samples_per_s": "", "agreement": "" if framework == "pytorch" else 0.9999,
        "max_abs_diff": "" if framework == "pytorch" else 2e-6, "token_agreement": "",
        "reason": "" if valid else "LoadGen: INVALID (Min duration satisfied: NO)", **figures,
    }  # fmt: skip


ROWS = pd.DataFrame([
    load_row("cpu-pytorch", "single-stream", loadgen_value="8000000"), load_row("cpu-pytorch", "single-stream", 2, loadgen_value="10000000"),
    load_row("cpu-pytorch", "server", max_qps=40.0), load_row("cpu-pytorch", "offline", samples_per_s=100.0),
    load_row("cpu-onnxruntime", "single-stream", loadgen_value="12000000"), load_row("cpu-onnxruntime", "server", max_qps=55.0),
    load_row("cpu-onnxruntime", "offline", samples_per_s=90.0), load_row("cpu-onnxruntime", "multi-stream", valid=False, loadgen_value="30000000"),
])  # fmt: skip


def test_each_scenarios_figure_is_the_median_over_rounds_and_invalid_results_are_named() -> None:
    table = under_load.scenario_table(ROWS).set_index("environment")
    assert table.loc["cpu-pytorch", "single_stream_p90_ms"] == 9.0 and table.loc["cpu-pytorch", "rounds"] == 2
    assert table.loc["cpu-onnxruntime", "server_max_qps"] == 55.0 and table.loc["cpu-pytorch", "offline_samples_per_s"] == 100.0
    assert math.isnan(table.loc["cpu-pytorch", "multi_stream_p99_ms"])  # not measured there
    # An INVALID result has no figure: it is named with LoadGen's reason instead.
    assert math.isnan(table.loc["cpu-onnxruntime", "multi_stream_p99_ms"])
    assert table.loc["cpu-onnxruntime", "invalid"] == "multi-stream: INVALID (Min duration satisfied: NO)" and table.loc["cpu-pytorch", "invalid"] == ""
    assert table.loc["cpu-pytorch", "agreement"] == 1.0 and table.loc["cpu-onnxruntime", "agreement"] == 0.9999


def test_the_fastest_per_scenario_and_where_the_ranking_under_load_differs() -> None:
    fastest = under_load.fastest_per_scenario(under_load.scenario_table(ROWS)).set_index("scenario")["fastest"]
    # cpu-onnxruntime's multi-stream result is INVALID: no scenario has a fastest without a VALID result.
    assert fastest.to_dict() == {"single-stream": "cpu-pytorch", "server": "cpu-onnxruntime", "offline": "cpu-pytorch"}
    assert under_load.ranking_sentences(under_load.fastest_per_scenario(under_load.scenario_table(ROWS))) == [
        "For bert, cpu-pytorch is the fastest one request at a time, but cpu-onnxruntime serves the most requests per second "
        "under the latency bound (server)."
    ]
    alone = under_load.scenario_table(ROWS[ROWS["environment"] == "cpu-pytorch"])
    assert under_load.fastest_per_scenario(alone).empty  # one environment: no fastest to name


def test_a_server_rate_above_offlines_is_named_as_a_test_too_short() -> None:
    assert under_load.short_server_sentences(under_load.scenario_table(ROWS)) == []  # 40 < 100 and 55 < 90 samples/s
    rows = pd.concat([ROWS, pd.DataFrame([load_row("cpu-onnxruntime", "server", 2, max_qps=130.0)])], ignore_index=True)  # median 92.5
    assert under_load.short_server_sentences(under_load.scenario_table(rows)) == [
        "For bert in cpu-onnxruntime, the server's largest VALID rate (92.5/s) is above what Offline reached (90 samples/s): its "
        "tests were too short for a queue to build up (raise min_duration_s); the server cannot sustain more than Offline's rate."
    ]


def test_speed_ups_per_scenario_over_eager_pytorch_with_an_interval_over_rounds() -> None:
    rows = pd.DataFrame([
        *(load_row("cpu-pytorch", "server", r, max_qps=q) for r, q in ((1, 40.0), (2, 41.0), (3, 39.0))),
        *(load_row("cpu-onnxruntime", "server", r, max_qps=q) for r, q in ((1, 55.0), (2, 56.0), (3, 54.0))),
        load_row("cpu-pytorch", "single-stream", loadgen_value="8000000"), load_row("cpu-onnxruntime", "single-stream", loadgen_value="6000000"),
    ])  # fmt: skip
    table = under_load.scenario_speedups(rows).set_index(["scenario", "environment"])
    server = table.loc[("server", "cpu-onnxruntime")]
    assert server["speedup"] == pytest.approx(55.0 / 40.0) and server["rounds"] == 3 and server["verdict"] == "faster"
    assert 1 < server["ci95_low"] <= server["speedup"] <= server["ci95_high"]
    assert server["agreement"] == 0.9999 and server["max_abs_diff"] == 2e-6
    assert table.loc[("server", "cpu-pytorch"), "verdict"] == "baseline" and table.loc[("server", "cpu-pytorch"), "speedup"] == 1.0
    single = table.loc[("single-stream", "cpu-onnxruntime")]  # a latency: the baseline's over the environment's; one round
    assert single["speedup"] == pytest.approx(8.0 / 6.0) and single["verdict"] == "inconclusive" and math.isnan(single["ci95_low"])
    assert under_load.scenario_speedups(rows[rows["environment"] != "cpu-pytorch"]).empty  # no baseline, no speed-ups


def test_generation_under_load_adds_tokens_per_second_and_token_latencies() -> None:
    rows = pd.DataFrame([
        load_row("cpu-pytorch", "server", max_qps=20.0, workload="generate", tokens_per_s=600.0, ttft_p99_s=0.25, tpot_p99_s=0.02),
        load_row("cpu-pytorch", "offline", samples_per_s=30.0, workload="generate", tokens_per_s=960.0),
    ])  # fmt: skip
    line = under_load.scenario_table(rows).iloc[0]
    assert (line["server_tokens_per_s"], line["server_ttft_p99_ms"], line["server_tpot_p99_ms"], line["offline_tokens_per_s"]) == (600.0, 250.0, 20.0, 960.0)
    assert "server_tokens_per_s" not in under_load.scenario_table(ROWS)  # forward passes have no tokens
    assert "single_stream_p90_ms" not in under_load.scenario_table(rows)  # a scenario no row measured has no column


def test_an_invalid_result_is_never_the_fastest_nor_a_baseline_and_is_named_with_its_reason() -> None:
    rows = pd.DataFrame([
        load_row("cpu-pytorch", "single-stream", loadgen_value="8000000"), load_row("cpu-onnxruntime", "single-stream", valid=False, loadgen_value="1000000"),
        load_row("cpu-pytorch", "offline", valid=False, samples_per_s=500.0), load_row("cpu-onnxruntime", "offline", samples_per_s=90.0),
    ])  # fmt: skip
    table = under_load.scenario_table(rows)
    fastest = under_load.fastest_per_scenario(table).set_index("scenario")
    assert fastest.loc["single-stream", "fastest"] == "cpu-pytorch" and fastest.loc["single-stream", "environments"] == 1
    assert fastest.loc["offline", "fastest"] == "cpu-onnxruntime"
    speedups = under_load.scenario_speedups(rows).set_index(["scenario", "environment"])
    assert math.isnan(speedups.loc[("single-stream", "cpu-onnxruntime"), "speedup"])  # its only result is INVALID
    assert speedups.loc[("single-stream", "cpu-onnxruntime"), "no_valid_result"] == "environment"
    assert math.isnan(speedups.loc[("offline", "cpu-onnxruntime"), "speedup"])  # the baseline's is INVALID: no speed-up over it
    assert speedups.loc[("offline", "cpu-onnxruntime"), "no_valid_result"] == "baseline"
    sentences = under_load.findings(table, under_load.fastest_per_scenario(table), under_load.scenario_speedups(rows))
    assert "1 ms" not in " ".join(sentences) and "500 samples/s" not in " ".join(sentences)  # no INVALID figure in a sentence
    assert sentences[-1] == (
        "Not ranked, INVALID in LoadGen's judgement: cpu-pytorch for bert (offline: INVALID (Min duration satisfied: NO)); "
        "cpu-onnxruntime for bert (single-stream: INVALID (Min duration satisfied: NO))."
    )


def test_the_fastest_and_the_fastest_that_keeps_99_percent_agreement_are_both_named() -> None:
    rows = pd.DataFrame([
        *(load_row("cpu-pytorch", "server", r, max_qps=q) for r, q in ((1, 40.0), (2, 42.0))),
        *(load_row("cpu-onnxruntime", "server", r, max_qps=q, agreement=0.934) for r, q in ((1, 90.0), (2, 95.0))),
        *(load_row("cpu-openvino", "server", r, max_qps=q, agreement=0.99998) for r, q in ((1, 60.0), (2, 61.0))),
    ])  # fmt: skip
    table = under_load.scenario_table(rows)
    fastest = under_load.fastest_per_scenario(table).iloc[0]
    assert (fastest["fastest"], fastest["agreement"], fastest["fastest_keeping_99"], fastest["figure_keeping_99"]) == ("cpu-onnxruntime", 0.934, "cpu-openvino", 60.5)
    sentences = under_load.findings(table, under_load.fastest_per_scenario(table), under_load.scenario_speedups(rows), "under 100 ms at the 90th percentile")
    sentence, _, table_text = sentences[0].partition("\n\n")
    assert sentence == (
        "Under load, for bert, the fastest is cpu-onnxruntime; the fastest that keeps 99% agreement with eager PyTorch float32 is "
        "cpu-openvino. A server's figure is the largest rate it served under 100 ms at the 90th percentile."
    )
    lines = table_text.splitlines()  # a Markdown table: the header, its rule, one line per scenario
    assert len(lines) == 3 and [cell.strip() for cell in lines[0].strip("|").split("|")] == [
        "scenario", "fastest", "figure", "speed-up", "agreement", "fastest that keeps 99%", "its figure", "its speed-up",
    ]  # fmt: skip
    cells = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert cells[:3] == ["server", "cpu-onnxruntime", "92.5 requests/s"] and cells[3].startswith("2.26x (") and cells[4] == "0.934"
    assert cells[5:7] == ["cpu-openvino", "60.5 requests/s"] and cells[7].startswith("1.48x (") and cells[7].endswith(", faster)")
    assert len(sentence.split()) < 40  # at a glance: the figures are in the table


def engine_row(environment: str, scenario: str, token_agreement: float | str, ttft_s: float, **figures: object) -> dict:
    """A generate row under load as the kit writes it: a batch of one prompt's 32 tokens compared with eager float32's."""
    row = load_row(environment, scenario, workload="generate", batch_size=1, new_tokens=32, ttft_s=ttft_s, tokens_per_s="", ttft_p99_s="", tpot_p99_s="", **figures)
    return {**row, "agreement": "", "max_abs_diff": "", "token_agreement": token_agreement}


def test_engines_beside_eager_pytorch_the_fastest_that_keeps_token_agreement_and_the_overhead_at_one_request() -> None:
    """Engines and eager PyTorch generating under load on one model: per scenario, the fastest whose token agreement keeps
    99% by its interval; an engine whose 32 tokens all agree is undecided (too few to tell), never named, and one whose
    agreement is below is never named either; at one request, each engine's time to first token over eager PyTorch's."""
    rows = pd.DataFrame([
        engine_row("cpu-pytorch", "single-stream", "", 0.020, loadgen_value="150000000"), engine_row("cpu-pytorch", "server", "", 0.030, max_qps=1.0),
        engine_row("cpu-transformers-serve", "single-stream", 1.0, 0.032, loadgen_value="170000000"),
        engine_row("cpu-transformers-serve", "server", 1.0, 0.040, max_qps=0.9),
        engine_row("cpu-vllm", "single-stream", 0.5, 0.0155, loadgen_value="140000000"), engine_row("cpu-vllm", "server", 0.5, 0.05, max_qps=3.0),
    ])  # fmt: skip
    assert [under_load.token_verdict(1.0, n) for n in (32, 366, 368)] == ["undecided", "undecided", "keeps"]
    table = under_load.scenario_table(rows).set_index("environment")
    assert table["agreement_verdict"].to_dict() == {"cpu-pytorch": "keeps", "cpu-transformers-serve": "undecided", "cpu-vllm": "below"}
    fastest = under_load.fastest_per_scenario(table.reset_index()).set_index("scenario")
    assert fastest["fastest"].to_dict() == {"single-stream": "cpu-vllm", "server": "cpu-vllm"}
    assert fastest["fastest_keeping_99"].to_dict() == {"single-stream": "cpu-pytorch", "server": "cpu-pytorch"}
    assert fastest["undecided"].to_dict() == {"single-stream": "", "server": ""}  # slower than eager PyTorch: nothing to name
    faster = rows.assign(max_qps=rows["max_qps"].replace({0.9: 2.0}))  # the undecided engine now serves more than eager PyTorch
    table = under_load.scenario_table(faster)
    fastest = under_load.fastest_per_scenario(table)
    assert fastest.set_index("scenario").loc["server", "undecided"] == "cpu-transformers-serve"
    sentence = under_load.findings(table, fastest, under_load.scenario_speedups(faster))[0].partition("\n\n")[0]
    assert sentence == (
        "Under load, for bert, the fastest is cpu-vllm in every scenario; the fastest that keeps 99% agreement with eager PyTorch "
        "float32 is cpu-pytorch in every scenario. Faster, but too few tokens compared to tell whether it keeps 99% (undecided), "
        "so not named: cpu-transformers-serve (server). A server's figure is the largest rate it served under the latency bound."
    )
    # The quality section judges the same agreement the same way: from its interval, never by its point alone.
    judged = task_quality.speed_and_quality(pd.DataFrame(), pd.DataFrame(), under_load.scenario_speedups(faster)).set_index(["environment", "measured"])
    assert judged.loc[("cpu-transformers-serve", "server"), "quality_verdict"] == "undecided"
    assert judged.loc[("cpu-vllm", "server"), "quality_verdict"] == "below"
    interval = judged.loc[("cpu-transformers-serve", "server"), ["quality_low", "quality_high"]].tolist()
    assert interval == pytest.approx(list(under_load.token_interval(1.0, 32))) and interval[0] < 0.99 < interval[1]
    assert under_load.overhead_sentences(rows) == [
        "At one request (single-stream), cpu-transformers-serve's time to first token for bert is 12 ms above cpu-pytorch's in "
        "the kit's process (32 ms against 20 ms): what the HTTP request and the engine add.",
        "At one request (single-stream), cpu-vllm's time to first token for bert is 4.5 ms below cpu-pytorch's in the kit's "
        "process (15.5 ms against 20 ms): what the HTTP request and the engine save.",
    ]
    assert under_load.overhead_sentences(rows[rows["environment"] != "cpu-pytorch"]) == []  # no in-process baseline: no overhead
