"""A load scenario's cells, for real: MLPerf's LoadGen drives tiny models behind the serving loop (`measure.load`), and each
row's figures are LoadGen's own summary's."""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchlib import read_results, run_environment
from benchlib.backends import load_backend
from benchlib.analysis.compare import compare_runs
from benchlib.backends.pytorch import as_array
from benchlib.config.jobs import EnvironmentJob
from benchlib.config.params import validate_params
from benchlib.measure import load as measure_load
from benchlib.measure import sweep
from benchlib.measure.load import agreement_columns, load_samples
from benchlib.report.glossary import COLUMNS as GLOSSARY
from benchlib.report.render import render_summary
from benchlib.scenarios.loadgen import PERCENTILES, TPOT_PERCENTILES, TTFT_PERCENTILES, early_stopping_minimum, parse_summary
from benchlib.scenarios.serving import Request, ServingLoop
from benchlib.store.layout import LOADGEN_DETAIL, LOADGEN_SUMMARY
from benchlib.store.results import rows_written
from benchlib.workloads.agreement import agreement
from benchlib.workloads.inputs import NO_TOKENIZER
from tests.kernels import kill_mid_cell, running

SCENARIOS = ["single-stream", "multi-stream", "server", "offline"]


def load_params(tmp_path: Path, **overrides: object) -> dict:
    values = dict(
        environment="cpu-pytorch", framework="pytorch", mode="eager", models=["gpt2"], model_scale="tiny", scenario=SCENARIOS,
        request_lengths=[8, 16], max_batch=4, samples_per_query=2, latency_bound_ms=200, min_duration_s=1.0, min_query_count=32,
        max_trials=6, remeasure=0, output_dir=str(tmp_path / "cpu-pytorch"),
    )  # fmt: skip
    return {**values, **overrides}


@pytest.fixture(scope="module")
def load_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("load")
    run_environment(load_params(folder), progress=False)
    return folder / "cpu-pytorch"


@pytest.mark.e2e
def test_each_scenario_has_one_row_whose_figures_are_loadgens_summary(load_run: Path) -> None:
    rows = read_results(load_run).set_index("scenario")
    assert sorted(rows.index) == sorted(SCENARIOS) and set(rows["status"]) == {"ok"}, rows["reason"].tolist()
    assert set(rows["batch_size"]) == {4} and set(rows["sequence_length"]) == {16}
    assert set(rows["inputs"]) == {NO_TOKENIZER}  # text by default under load; a catalogue model has no tokenizer
    for scenario, row in rows.iterrows():
        summary = parse_summary((load_run / row["loadgen_log"] / LOADGEN_SUMMARY).read_text(encoding="utf-8"))
        assert row["loadgen_value"] == summary[row["loadgen_metric"]], scenario
        assert bool(row["valid"]) == (summary["Result is"] == "VALID"), scenario
        for percentile, name in PERCENTILES.items():
            assert row[f"latency_{percentile}_s"] == pytest.approx(float(summary[name]) * 1e-9), (scenario, percentile)
        assert (load_run / row["loadgen_log"] / LOADGEN_DETAIL).stat().st_size > 0
    assert rows.loc["offline", "loadgen_metric"] == "Samples per second" and float(rows.loc["offline", "samples_per_s"]) > 0
    assert rows.loc["single-stream", "loadgen_metric"] == "90.0th percentile latency (ns)"
    assert rows.loc["multi-stream", "loadgen_metric"] == "99.0th percentile latency (ns)"
    assert bool(rows.loc["offline", "valid"]) and bool(rows.loc["single-stream", "valid"]), rows["reason"].tolist()


@pytest.mark.e2e
def test_the_server_row_is_the_largest_valid_rate_and_the_next_trial_above_it_is_invalid(load_run: Path) -> None:
    server = read_results(load_run).set_index("scenario").loc["server"]
    every_trial = read_results(load_run, trials=True)  # the server's, and any test run again on LoadGen's advice
    trials = every_trial[every_trial["scenario"] == "server"].reset_index(drop=True)
    assert len(trials) >= 2 and list(trials["trial"]) == list(range(1, len(trials) + 1))
    valid = trials["valid"].astype(str) == "True"
    max_qps = float(server["max_qps"])
    assert max_qps == trials.loc[valid, "target_qps"].max() and float(server["target_qps"]) == max_qps
    assert rows_written(load_run) == len(SCENARIOS) and rows_written(load_run, trials=True) == len(SCENARIOS) + len(every_trial)  # a trial is no cell
    above = trials.loc[~valid & (trials["target_qps"] > max_qps), "target_qps"]
    assert len(above) and not (valid & (trials["target_qps"] > above.min())).any()  # VALID at max_qps, INVALID at the bracket above
    at_max = trials[valid & (trials["target_qps"] == max_qps)].iloc[-1]
    assert server["loadgen_log"] == at_max["loadgen_log"] and server["latency_p99_s"] == at_max["latency_p99_s"]
    assert at_max["latency_p99_s"] <= 0.200 and server["loadgen_metric"] == "Completed samples per second"
    for _, trial in trials.iterrows():
        summary = parse_summary((load_run / trial["loadgen_log"] / LOADGEN_SUMMARY).read_text(encoding="utf-8"))
        assert (summary["Result is"] == "VALID") == (str(trial["valid"]) == "True") and trial["loadgen_value"] == summary["Completed samples per second"]


@pytest.mark.e2e
def test_a_rerun_measures_nothing_again(load_run: Path, tmp_path: Path) -> None:
    before = (load_run / "results.csv").read_bytes()
    rows = run_environment(load_params(load_run.parent), progress=False)
    assert (load_run / "results.csv").read_bytes() == before and len(rows) == len(SCENARIOS)


@pytest.mark.e2e
@pytest.mark.parametrize(("framework", "mode"), [("pytorch", "eager"), ("onnxruntime", "session")])
def test_a_requests_output_in_a_batch_equals_its_output_alone(framework: str, mode: str, tmp_path: Path) -> None:
    params = validate_params(load_params(tmp_path, framework=framework, mode=mode, models=["bert-base-cased"], scenario="offline"))
    spec = params.model_spec("bert-base-cased")
    backend = load_backend(framework, mode, num_threads=1)
    model = backend.build(spec, "tiny")
    samples = load_samples(spec, params)[0][:12]  # of two lengths
    outputs: dict[int, dict[int, np.ndarray]] = {1: {}, 4: {}}
    with backend.inference_context():
        for max_batch in outputs:
            examples = [backend.as_inputs(np.stack([sample] * size)) for sample in samples[:1] + samples[-1:] for size in (1, 2, 4)]
            serve = backend.server_call(model, examples)

            def complete(batch: list[Request], output: object, into: dict = outputs[max_batch]) -> None:
                rows = as_array(output)
                for i, request in enumerate(batch):
                    into[request.id] = rows[i]

            with ServingLoop([lambda ids, first_token: serve(backend.as_inputs(ids))], max_batch, 0.05, complete) as loop:
                loop.submit(Request(i, sample) for i, sample in enumerate(samples))
    assert sorted(outputs[1]) == sorted(outputs[4]) == list(range(len(samples)))
    for i in outputs[1]:
        compared = agreement("feature-extraction", outputs[4][i][None], outputs[1][i][None])
        assert compared.value >= 0.999 and compared.max_abs_diff <= 1e-4, (i, compared)
    # What the row reports: a full batch served, against eager PyTorch float32's (eager PyTorch is that reference).
    full = np.stack([samples[-1]] * 4)
    with backend.inference_context():
        columns, compared = agreement_columns(backend, model, spec, params, full, lambda ids, first_token=None: serve(backend.as_inputs(ids)))
    if framework == "pytorch":
        assert (columns, compared) == ({}, None)
    else:
        assert columns["agreement_metric"] == compared.metric and columns["agreement"] >= 0.999 and columns["max_abs_diff"] <= 1e-4, columns


def test_without_loadgen_the_scenario_cells_are_unsupported_with_the_pip_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep, "installed", lambda distribution: distribution != "mlcommons-loadgen")
    rows = run_environment(load_params(tmp_path, scenario=["offline", "server"]), progress=False)
    assert rows["status"].tolist() == ["unsupported"] * 2
    assert set(rows["reason"]) == {"mlcommons-loadgen is not installed: pip install 'benchlib[loadgen]'"}
    assert sweep.loadgen_missing(validate_params(load_params(tmp_path, scenario="cell", batch_sizes=[1], sequence_lengths=[8], request_lengths=None))) is None
    assert pd.isna(rows["max_qps"]).all()


@pytest.mark.e2e
def test_a_rerun_numbers_a_server_cells_trials_after_those_already_written(load_run: Path) -> None:
    """A run stopped during the server scenario leaves its trials; the rerun that measures the cell again goes on after them."""
    trials = read_results(load_run, trials=True)
    server = {"model": "gpt2", "batch_size": 4, "sequence_length": 16, "scenario": "server", "round": 1, "attempt": 1}
    assert sweep.next_trial(load_run / "results.csv", server) == (trials["scenario"] == "server").sum() + 1
    assert sweep.next_trial(load_run / "results.csv", {**server, "attempt": 2}) == 1


@pytest.mark.e2e
@pytest.mark.full  # make test kills a kernel mid-cell in a forward sweep (tests/launch/test_crash_recovery.py): the same in-flight record
def test_a_kernel_killed_during_a_scenario_leaves_a_crashed_row_and_the_others_are_measured(tmp_path: Path) -> None:
    """The kernel is killed once the server scenario has a trial: that cell is `crashed`, its trials are kept, and a new kernel
    measures the next scenario (offline). LoadGen's files of the trial it was in stay in the run's folder: none are left
    in the temporary folder."""
    run_dir, two, scratch = tmp_path / "run", tmp_path / "two.yaml", tmp_path / "tmp"
    scratch.mkdir()
    two.write_text("scenario: [server, offline]\n", encoding="utf-8")
    command = [
        sys.executable, "-m", "benchlib", "run", "--grid", "load-smoke", "--models", "gpt2", "--environments", "cpu-pytorch",
        "--params", str(two), "--out", str(run_dir), "--no-summary", "--no-limits", "--quiet",
    ]  # fmt: skip
    with running(command, env={**os.environ, "TMPDIR": str(scratch)}) as runner:
        killed = kill_mid_cell(run_dir / "cpu-pytorch", runner, min_rows=1, wanted=lambda cell: cell.get("scenario") == "server")
        output, _ = runner.communicate(timeout=600)
    assert runner.returncode == 0, output
    rows = read_results(run_dir / "cpu-pytorch").set_index("scenario")
    assert sorted(rows.index) == ["offline", "server"] and killed["scenario"] == "server"
    assert rows.loc["server", "status"] == "crashed" and rows.loc["server", "reason"].startswith("kernel died (SIGKILL: Killed) while measuring with torch ")
    assert set(rows.drop("server")["status"]) == {"ok"}
    trials = read_results(run_dir / "cpu-pytorch", trials=True)
    assert (trials["scenario"] == "server").sum() >= 1  # the trials it finished before the kill are kept
    assert not list(scratch.glob("*loadgen*")), list(scratch.iterdir())
    for folder in {run_dir / "cpu-pytorch" / log for log in trials["loadgen_log"]}:  # a finished trial keeps its summary and detail only
        assert sorted(path.name for path in folder.iterdir()) == sorted([LOADGEN_DETAIL, LOADGEN_SUMMARY])


@pytest.mark.e2e
def test_the_summary_of_a_run_under_load_has_the_under_load_section(load_run: Path, tmp_path: Path) -> None:
    run = shutil.copytree(load_run.parent, tmp_path / "run")
    page = render_summary([run]).read_text(encoding="utf-8")
    assert re.findall(r'<h2 id="([^"]+)"', page) == ["Findings", "1.-Under-load"]  # a load-only run: its section alone
    assert "Under load, gpt2 was measured in cpu-pytorch only: one request at a time (single-stream) " in page  # the findings give its figures
    table = pd.read_csv(run / "tables" / "under_load.csv")
    server = read_results(load_run).set_index("scenario").loc["server"]
    assert list(table["environment"]) == ["cpu-pytorch"] and table.loc[0, "server_max_qps"] == pytest.approx(float(server["max_qps"]))
    assert table.loc[0, "single_stream_p90_ms"] == pytest.approx(float(read_results(load_run).set_index("scenario").loc["single-stream", "loadgen_value"]) * 1e-6)
    assert (run / "figures" / "server_trials.png").stat().st_size > 0
    speedups = pd.read_csv(run / "tables" / "under_load_speedups.csv")  # one environment: the baseline's own rows
    assert sorted(speedups["scenario"]) == sorted(SCENARIOS) and set(speedups["verdict"]) == {"baseline"}


@pytest.mark.e2e
def test_loadgens_advice_is_followed_and_an_invalid_result_is_never_ranked_nor_a_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kit's guess of a call's time is made 5 s, so LoadGen's expected latency is far too long: it pre-generates too few
    queries for the minimum duration, and the single-stream test is INVALID. Eager PyTorch (the baseline) may not run it
    again (no reruns) and stays INVALID; TorchScript follows LoadGen's advice, and its test run again is VALID. The summary
    ranks TorchScript alone, gives no speed-up over the INVALID baseline, and names the INVALID result with its reason."""
    monkeypatch.setattr(measure_load, "seconds_per_call", lambda call, ids, calls=3: 5.0)
    # early stopping's 64 queries are asked for from the start: the minimum duration must be well past what they take on any machine
    single = dict(scenario=["single-stream"], latency_percentile=90, min_duration_s=3.0, min_query_count=8)
    with monkeypatch.context() as no_reruns:
        no_reruns.setattr(measure_load, "RERUNS", 0)
        baseline = run_environment(load_params(tmp_path, **single), progress=False).iloc[0]
    advised = run_environment(load_params(tmp_path, **single, environment="cpu-torchscript", mode="torchscript", output_dir=str(tmp_path / "cpu-torchscript")), progress=False).iloc[0]

    assert str(baseline["valid"]) == "False" and baseline["reason"] == "LoadGen: INVALID (Min duration satisfied: NO)"
    assert "Decrease the expected latency" in (tmp_path / "cpu-pytorch" / baseline["loadgen_log"] / LOADGEN_SUMMARY).read_text(encoding="utf-8")
    assert str(advised["valid"]) == "True" and advised["reason"] == ""
    tries = read_results(tmp_path / "cpu-torchscript", trials=True)  # each test run again is a row of its own, its logs kept
    assert 1 <= len(tries) <= measure_load.RERUNS and set(tries["valid"].astype(str)) == {"False"} and set(tries["scenario"]) == {"single-stream"}
    assert tries.loc[0, "reason"].startswith("LoadGen: INVALID (Min duration satisfied: NO); run again as LoadGen advised: expected latency ")
    assert tries["reason"].str.contains("; run again as LoadGen advised: ").all() and list(tries["trial"]) == list(range(1, len(tries) + 1))
    assert "Decrease the expected latency" in (tmp_path / "cpu-torchscript" / tries.loc[0, "loadgen_log"] / LOADGEN_SUMMARY).read_text(encoding="utf-8")
    assert parse_summary((tmp_path / "cpu-torchscript" / advised["loadgen_log"] / LOADGEN_SUMMARY).read_text(encoding="utf-8"))["Result is"] == "VALID"

    page = render_summary([tmp_path]).read_text(encoding="utf-8")
    fastest = pd.read_csv(tmp_path / "tables" / "under_load_fastest.csv").iloc[0]
    assert (fastest["fastest"], fastest["environments"]) == ("cpu-torchscript", 1)
    speedup = pd.read_csv(tmp_path / "tables" / "under_load_speedups.csv").set_index("environment").loc["cpu-torchscript"]
    assert math.isnan(speedup["speedup"]) and speedup["no_valid_result"] == "baseline"
    findings = (tmp_path / "findings.md").read_text(encoding="utf-8")
    assert "Under load, for gpt2, the fastest is cpu-torchscript, and it keeps 99% agreement with eager PyTorch float32." in findings
    assert re.search(r"^\| single-stream +\| cpu-torchscript +\| [0-9.]+ ms at the 90th percentile +\|", findings, re.MULTILINE)  # its table
    assert "Not ranked, INVALID in LoadGen's judgement: cpu-pytorch for gpt2 (single-stream: INVALID (Min duration satisfied: NO))." in findings
    # A load-only run's summary: its findings, then the load section alone; the contents line names what was not measured.
    assert "Not measured in these runs: the forward pass one call at a time" in findings
    assert page.index("Findings") < page.index("Contents:") < page.index('id="1.-Under-load"')
    assert "<table" in page[page.index("Findings") : page.index("Contents:")]  # the finding's table, rendered as one
    assert re.findall(r'<h2 id="([^"]+)"', page) == ["Findings", "1.-Under-load"]
    # Every column of the load section's tables is in the column glossary the summary links to.
    columns = {column for table in (tmp_path / "tables").glob("*.csv") for column in pd.read_csv(table, nrows=0).columns}
    assert columns - set(GLOSSARY) == set()


@pytest.mark.e2e
def test_a_latency_percentile_is_the_one_loadgen_judges_by_and_the_summary_names(tmp_path: Path) -> None:
    """`latency_percentile: 90`: LoadGen is asked for it (its detail log says so), the multi-stream figure is LoadGen's 90th
    percentile, the server's trials are judged at it, the rows say so, and the summary's column and plot name it."""
    params = load_params(tmp_path, scenario=["multi-stream", "server"], latency_percentile=90, max_trials=2)
    rows = run_environment(params, progress=False).set_index("scenario")
    assert set(rows["status"]) == {"ok"} and set(rows["latency_percentile"]) == {90}, rows["reason"].tolist()
    env_dir = tmp_path / "cpu-pytorch"
    multi = rows.loc["multi-stream"]
    assert multi["loadgen_metric"] == "90.0th percentile latency (ns)"
    assert multi["loadgen_value"] == parse_summary((env_dir / multi["loadgen_log"] / LOADGEN_SUMMARY).read_text(encoding="utf-8"))[multi["loadgen_metric"]]
    trials = read_results(env_dir, trials=True)
    for log in [multi["loadgen_log"], *trials["loadgen_log"]]:
        detail = (env_dir / log / LOADGEN_DETAIL).read_text(encoding="utf-8")
        assert '"key": "effective_target_latency_percentile", "value": 0.9,' in detail, log
        queries = int(re.search(r'"key": "effective_min_query_count", "value": (\d+)', detail).group(1))
        fewest = early_stopping_minimum("multi-stream" if log == multi["loadgen_log"] else "server", 90)
        assert queries >= fewest > params["min_query_count"], log  # early stopping's fewest, asked for from the start
    render_summary([tmp_path])
    table = pd.read_csv(tmp_path / "tables" / "under_load.csv")
    assert table.loc[0, "multi_stream_p90_ms"] == pytest.approx(float(multi["loadgen_value"]) * 1e-6)
    assert "multi_stream_p99_ms" not in table and "single_stream_p90_ms" not in table  # a scenario not measured has no column
    assert (tmp_path / "figures" / "server_trials.png").stat().st_size > 0


def generate_params(tmp_path: Path, environment: str, framework: str, mode: str, **overrides: object) -> dict:
    """Generation under load on the tiny distilgpt2: prompts of 8 and 16 tokens, 4 tokens each, bounds a tiny model meets."""
    values = load_params(
        tmp_path, environment=environment, framework=framework, mode=mode, models=["distilgpt2"], workload="generate", new_tokens=4,
        scenario=["server", "offline"], ttft_bound_ms=500, tpot_bound_ms=100, max_trials=2, output_dir=str(tmp_path / environment),
    )  # fmt: skip
    return {**values, **overrides}


@pytest.mark.e2e
def test_generation_under_load_reports_loadgens_first_token_and_per_token_percentiles(tmp_path: Path) -> None:
    """Each batch's first token is reported to LoadGen from inside transformers' generation loop: the rows' time to first token
    and per output token are LoadGen's percentiles, the server judged by both bounds and the figures in tokens per second."""
    rows = run_environment(generate_params(tmp_path, "cpu-pytorch", "pytorch", "eager"), progress=False).set_index("scenario")
    assert set(rows["status"]) == {"ok"}, rows["reason"].tolist()
    assert rows.loc["server", "loadgen_metric"] == "Completed tokens per second" and rows.loc["offline", "loadgen_metric"] == "Tokens per second"
    trials = read_results(tmp_path / "cpu-pytorch", trials=True)
    for _, row in [*rows.reset_index().iterrows(), *trials.iterrows()]:
        summary = parse_summary((tmp_path / "cpu-pytorch" / row["loadgen_log"] / LOADGEN_SUMMARY).read_text(encoding="utf-8"))
        assert float(row["tokens_per_s"]) == pytest.approx(float(summary[row["loadgen_metric"]])) and float(row["tokens_per_s"]) > 0
        assert bool(row["valid"]) == (summary["Result is"] == "VALID")
        if row["scenario"] == "server":  # Offline has no first token of its own: every request is there at once
            ttft, tpot = (float(row[f"ttft_{p}"]) for p in ("s", "p99_s")), (float(row[f"tpot_{p}"]) for p in ("s", "p90_s", "p99_s"))
            assert list(ttft) == pytest.approx([float(summary[TTFT_PERCENTILES[p]]) * 1e-9 for p in ("p50", "p99")])
            assert list(tpot) == pytest.approx([float(summary[TPOT_PERCENTILES[p]]) * 1e-9 for p in ("p50", "p90", "p99")])
            assert 0 < float(row["ttft_s"]) < float(row["latency_p50_s"])  # the first token comes before the request's end
            limits = (summary["Result is"] == "VALID") == (float(row["ttft_p99_s"]) <= 0.5 and float(row["tpot_p99_s"]) <= 0.1)
            assert limits or summary.get("Early stopping satisfied") == "NO"
    assert float(rows.loc["server", "max_qps"]) == trials.loc[trials["valid"].astype(str) == "True", "target_qps"].max()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("environment", "framework", "mode", "outcome"),
    [
        ("cpu-onnxruntime", "onnxruntime", "session", "ok"),
        ("cpu-torch-compile", "pytorch", "compile", "pytorch compile compiles generation again for each prompt's shape"),
    ],
)  # fmt: skip
def test_generation_under_load_in_other_backends(environment: str, framework: str, mode: str, outcome: str, tmp_path: Path) -> None:
    """ONNX Runtime's generation loop is transformers' (its first token is seen), and its tokens agree with eager PyTorch's;
    torch.compile's generation, which would compile again for each batch's shape while timed, is `unsupported`."""
    rows = run_environment(generate_params(tmp_path, environment, framework, mode, scenario="offline"), progress=False)
    row = rows.iloc[0]
    if outcome == "ok":
        assert row["status"] == "ok" and float(row["token_agreement"]) == 1.0 and float(row["tokens_per_s"]) > 0, row["reason"]
    else:
        assert row["status"] == "unsupported" and row["reason"].startswith(outcome), row["reason"]


@pytest.mark.e2e
def test_tensorflows_generation_under_load_is_unsupported_it_gives_no_first_token(run_cli, tmp_path: Path) -> None:
    """TensorFlow generates in one compiled graph (in its own kernel, as TensorFlow always runs here): nothing inside it can
    report a first token to LoadGen."""
    generating = tmp_path / "generate.yaml"
    generating.write_text("workload: generate\nnew_tokens: 4\nscenario: offline\n", encoding="utf-8")
    completed = run_cli(
        "run", "--grid", "load-smoke", "--models", "distilgpt2", "--environments", "cpu-tensorflow", "--params", str(generating),
        "--out", str(tmp_path / "run"), "--no-summary", "--no-limits", "--quiet",
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    row = read_results(tmp_path / "run" / "cpu-tensorflow").iloc[0]
    assert row["status"] == "unsupported" and row["scenario"] == "offline"
    assert row["reason"] == "tensorflow function generates in one compiled graph: no first token can be reported to LoadGen from inside it"


@pytest.mark.e2e
def test_compare_keys_a_load_cell_by_its_scenario(load_run: Path, tmp_path: Path) -> None:
    """`compare` reads a run of load scenarios only: one cell per model and scenario, its time the scenario's figure where
    less is better (one over the server's largest rate), never matched with another scenario's cell of the same shape."""
    a, b = (shutil.copytree(load_run.parent, tmp_path / name) for name in ("a", "b"))
    cells = compare_runs(a, b).cells.set_index("scenario")
    assert sorted(cells.index) == sorted(SCENARIOS) and set(cells["status_a"]) == {"ok"}
    assert set(cells["verdict"]) == {"no change"} and (cells["change"] == 0).all()  # one round each: nothing to judge a change by
    server = read_results(load_run).set_index("scenario").loc["server"]
    assert cells.loc["server", "median_a_s"] == pytest.approx(1 / float(server["max_qps"]))


def test_a_load_jobs_line_counts_its_scenarios(tmp_path: Path) -> None:
    job = EnvironmentJob("cpu-pytorch", validate_params(load_params(tmp_path)), ())
    assert job.cell_count == len(SCENARIOS)
    assert job.describe() == "pytorch/eager on cpu, 4 cells (1 models x 4 scenarios; requests of 8, 16 tokens batched up to 4)"
