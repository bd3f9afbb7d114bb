"""The summary's "Under load" tables (`analysis.load`): each scenario's figure per environment and model, and the fastest
per scenario with a sentence where the fastest one request at a time is not the one that serves the most."""

from __future__ import annotations

import math

import pandas as pd

from benchlib.analysis import load as under_load


def load_row(environment: str, scenario: str, round_number: int = 1, valid: bool = True, **figures: object) -> dict:
    return {
        "environment": environment, "model": "bert", "scenario": scenario, "round": round_number, "status": "ok", "valid": valid,
        "loadgen_value": "", "max_qps": "", "samples_per_s": "", **figures,
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
    assert table.loc["cpu-onnxruntime", "invalid"] == "multi-stream" and table.loc["cpu-pytorch", "invalid"] == ""


def test_the_fastest_per_scenario_and_where_the_ranking_under_load_differs() -> None:
    fastest = under_load.fastest_per_scenario(under_load.scenario_table(ROWS)).set_index("scenario")["fastest"]
    assert fastest.to_dict() == {"single-stream": "cpu-pytorch", "multi-stream": "cpu-onnxruntime", "server": "cpu-onnxruntime", "offline": "cpu-pytorch"}
    assert under_load.ranking_sentences(under_load.fastest_per_scenario(under_load.scenario_table(ROWS))) == [
        "For bert, cpu-pytorch is the fastest one request at a time, but cpu-onnxruntime serves the most requests per second "
        "under the latency bound (server)."
    ]
    alone = under_load.scenario_table(ROWS[ROWS["environment"] == "cpu-pytorch"])
    assert under_load.fastest_per_scenario(alone).empty  # one environment: no fastest to name
