"""A tune: Optuna's search over an environment's serving settings with the real LoadGen, each point a fresh kernel; a stopped
tune resumed without measuring a finished point again; the best point confirmed against the default in fresh kernels;
the settings to deploy; the summary's "At its best"; bad input refused before any kernel."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from benchlib import read_results
from benchlib.analysis import cost
from benchlib.analysis import tune as analysis
from benchlib.analysis.compare import compare_runs
from benchlib.analysis.significance import VERDICTS
from benchlib.cli import main
from benchlib.config.tune import automatic_space
from benchlib.launch.tune import study_for
from benchlib.report.render import render_summary
from benchlib.store import layout
from benchlib.store.recovery import read_in_flight
from benchlib.store.results import objective_figure
from tests.kernels import running

MODEL = "bert-base-cased"
COMMAND = ["-m", "benchlib", "run", "--grid", "tune-smoke", "--environments", "cpu-pytorch", "--no-summary", "--no-limits", "--quiet"]


def write_params(path: Path, **values: object) -> Path:
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """tune-smoke in eager PyTorch, its runner killed while the second point's kernel measures, then run again to the end."""
    run = tmp_path_factory.mktemp("tune") / "run"
    command = [sys.executable, *COMMAND, "--out", str(run)]
    env_dir = run / "cpu-pytorch"
    first = layout.point_folder(env_dir, MODEL, 0)  # the default; the next point is numbered by its Optuna trial
    with running(command) as runner:
        deadline = time.monotonic() + 300
        while not ((second := next((f for f in layout.point_folders(env_dir) if f != first), None)) and (marker := read_in_flight(second))):
            assert runner.poll() is None and time.monotonic() < deadline, runner.communicate()[0]
            time.sleep(0.05)
        runner.kill()
        runner.wait()
    while True:  # the kernel notices its runner is gone within a second or so, and ends
        try:
            os.kill(marker["pid"], 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    before = {"rows": len(read_results(first, every_attempt=True)), "written": (first / "results.csv").stat().st_mtime_ns}
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    return {"run": run, "env_dir": env_dir, "first": first, "second": int(second.name.removeprefix("point-")), "before": before, "output": resumed.stdout}


@pytest.mark.e2e
def test_a_stopped_tune_resumes_its_study_and_measures_no_finished_point_again(tuned: dict) -> None:
    first = tuned["first"]
    assert len(read_results(first, every_attempt=True)) == tuned["before"]["rows"] == 1
    assert (first / "results.csv").stat().st_mtime_ns == tuned["before"]["written"]  # point 0 was not measured again
    assert "point 0:" not in tuned["output"] and f"point {tuned['second']}:" in tuned["output"]  # the half-measured point was finished
    points = pd.read_csv(tuned["env_dir"] / layout.TUNE_DIR / layout.TUNE_TABLE)
    assert sorted(points["point"]) == [0, tuned["second"]]  # every point once: the space (1 x 2) whole
    settings = {(row["streams"], row["max_batch"]) for _, row in points.iterrows()}
    assert settings == {(1, 1), (1, 4)}
    assert points.set_index("point").loc[0, "default"] and (points.loc[points["point"] == 0, ["streams", "max_batch"]].values.tolist() == [[1, 1]])


@pytest.mark.e2e
def test_each_point_is_a_kernel_of_its_settings_and_the_best_valid_point_is_chosen(tuned: dict) -> None:
    env_dir = tuned["env_dir"]
    points = pd.read_csv(env_dir / layout.TUNE_DIR / layout.TUNE_TABLE)
    for _, point in points.iterrows():
        recorded = json.loads((env_dir / point["folder"] / "environment.json").read_text(encoding="utf-8"))["parameters"]
        assert (recorded["streams"], recorded["max_batch"], recorded["tune"]) == (point["streams"], point["max_batch"], None)
        row = read_results(env_dir / point["folder"]).iloc[0]
        figure = objective_figure(row)[0]  # None where the point may not be chosen (INVALID at every rate tried): blank in the table
        assert row["scenario"] == "server" and (pd.isna(point["max_qps"]) if figure is None else figure == pytest.approx(point["max_qps"]))
    chosen = points.dropna(subset=["max_qps"])
    best = chosen.loc[chosen["max_qps"].idxmax()]
    table = analysis.at_its_best([tuned["run"]]).iloc[0]
    assert table["best_settings"] == best["settings"] and table["search_figure"] == pytest.approx(best["max_qps"])
    deploy = yaml.safe_load(layout.tuned_settings_file(tuned["run"], "cpu-pytorch", MODEL).read_text(encoding="utf-8"))
    assert (deploy["streams"], deploy["max_batch"], deploy["tune"], deploy["scenario"]) == (best["streams"], best["max_batch"], None, ["server"])
    assert f"torch.set_num_threads(" in layout.tuned_settings_file(tuned["run"], "cpu-pytorch", MODEL).read_text(encoding="utf-8")


def test_a_point_enqueued_with_one_grid_point_left_is_followed_by_that_point(tmp_path: Path) -> None:
    """A tune stopped while it measured a point, with one point of its grid left, is resumed by enqueuing the stopped
    point: after it, Optuna's grid sampler read a grid id that an enqueued trial does not have (KeyError,
    optuna/optuna#6844) and the resumed tune failed. The kit's sampler goes on to the point left."""
    study = study_for(tmp_path / "study.journal", "model", {"max_batch": [1, 4]}, "server", 2, 0)
    seen: list[int] = []
    objective = lambda trial: seen.append(trial.suggest_categorical("max_batch", [1, 4])) or 1.0  # noqa: E731
    study.optimize(objective, n_trials=1)
    study.enqueue_trial({"max_batch": seen[0]})  # the point measured, as a stopped tune's is enqueued again
    study.optimize(objective)  # the grid sampler stops the search once every point is measured
    assert len(seen) == 3 and seen[1] == seen[0] and set(seen) == {1, 4}  # the point again, then the one left
    assert [trial.state.name for trial in study.trials] == ["COMPLETE"] * 3


def test_a_point_beyond_the_tolerance_or_invalid_is_never_chosen() -> None:
    """The figure a tune judges a row by: none for an answer beyond the precision's tolerance (the cell an `error`) or a
    result LoadGen found INVALID, however fast."""
    row = pd.Series({"scenario": "server", "status": "ok", "valid": True, "max_qps": 500.0, "reason": "", "latency_percentile": 90})
    assert objective_figure(row) == (500.0, "")
    wrong = row.copy()
    wrong.update({"status": "error", "reason": "agreement 0.91 below the tolerance", "max_qps": 9000.0})
    assert objective_figure(wrong) == (None, "error: agreement 0.91 below the tolerance")
    invalid = row.copy()
    invalid.update({"valid": False, "reason": "LoadGen: INVALID (Early stopping satisfied: NO)"})
    assert objective_figure(invalid) == (None, "LoadGen: INVALID (Early stopping satisfied: NO)")


@pytest.mark.e2e
def test_the_best_point_is_confirmed_against_the_default_in_fresh_kernels(tuned: dict) -> None:
    table = analysis.at_its_best([tuned["run"]]).iloc[0]
    assert table["verdict"] != analysis.DEFAULT_WAS_BEST  # batches of 4 serve more than one request at a time
    for which in ("best", "default"):
        rows = read_results(layout.confirm_folder(tuned["env_dir"], MODEL, which))
        assert sorted(rows["round"]) == [1, 2] and set(rows["scenario"]) == {"server"}  # one fresh kernel a round
    assert table["verdict"] in VERDICTS and table["rounds"] == 2
    assert table["gain_low"] <= table["gain"] <= table["gain_high"] and not math.isnan(table["gain_low"])
    assert table["search_over_confirmed"] == pytest.approx(table["search_figure"] / table["confirmed_best"])


@pytest.mark.e2e
def test_compare_keys_a_tune_by_its_settings(tuned: dict, tmp_path: Path) -> None:
    """Two runs' tunes are compared where the same settings were confirmed, over their rounds; settings of another value
    are another environment, never compared with them."""
    a, b = (shutil.copytree(tuned["run"], tmp_path / name) for name in ("a", "b"))
    cells = compare_runs(a, b).cells
    tuned_cells = cells[cells["environment"].str.startswith("cpu-pytorch at ")]
    assert len(tuned_cells) == 2 and set(tuned_cells["verdict"]) == {"no change"} and set(tuned_cells["n_samples_a"]) == {2}
    record = layout.confirm_folder(b / "cpu-pytorch", MODEL, "best") / "environment.json"
    info = json.loads(record.read_text(encoding="utf-8"))
    info["parameters"]["streams"] = 3  # run B's best measured at other settings
    record.write_text(json.dumps(info), encoding="utf-8")
    comparison = compare_runs(a, b)
    assert list(comparison.cells["environment"].str.startswith("cpu-pytorch at ")).count(True) == 1  # the default's alone
    environments = comparison.environments.set_index("environment")
    renamed = [name for name in environments.index if "streams 3" in name]
    assert len(renamed) == 1 and environments.loc[renamed[0], "verdict"] == "not compared"


@pytest.mark.e2e
def test_the_deployable_settings_measure_the_chosen_point_again(tuned: dict, tmp_path: Path) -> None:
    deploy = layout.tuned_settings_file(tuned["run"], "cpu-pytorch", MODEL)
    again = tmp_path / "again"
    assert main([*COMMAND[2:], "--params", str(deploy), "--out", str(again)]) == 0
    recorded = json.loads((again / "cpu-pytorch" / "environment.json").read_text(encoding="utf-8"))["parameters"]
    chosen = yaml.safe_load(deploy.read_text(encoding="utf-8"))
    assert (recorded["streams"], recorded["max_batch"], recorded["scenario"]) == (chosen["streams"], chosen["max_batch"], ["server"])
    assert read_results(again / "cpu-pytorch").iloc[0]["batch_size"] == chosen["max_batch"]


@pytest.mark.e2e
def test_a_confirmed_gain_counts_in_the_decision_with_the_settings_file_to_deploy(tuned: dict, tmp_path: Path) -> None:
    """The tuned run priced at summary time by its machine's name (its hostname): the confirmed best settings are a choice
    of their own, at the confirmation's rates, naming the file to deploy; an unconfirmed gain is no choice."""
    host = cost.run_machines([tuned["run"]])["machine"].iloc[0]
    prices = tmp_path / "prices.yaml"
    prices.write_text(f"- name: {host}\n  price_per_hour: 0.5\n", encoding="utf-8")
    costs = cost.cost_table(pd.DataFrame(), cost.run_machines([tuned["run"]], prices), [tuned["run"]])
    best = analysis.at_its_best([tuned["run"]]).iloc[0]
    if best["verdict"] != "faster":
        assert costs.empty
        return
    line = costs.iloc[0]
    assert line["environment"] == f"cpu-pytorch at {analysis.settings_text(best['best_settings'])}" and line["rounds"] == 2
    assert line["rate"] == pytest.approx(best["confirmed_best"]) and line["cost_per_million"] == pytest.approx(0.5 / (3600 * best["confirmed_best"]) * 1e6)
    assert line["settings_file"] == str(layout.tuned_settings_file(tuned["run"], "cpu-pytorch", MODEL))
    assert f"; deploy {line['settings_file']}." in cost.decision_sentences(costs)[0]


@pytest.mark.e2e
def test_the_summary_shows_at_its_best_on_a_tuned_run_and_says_so_on_one_without(tuned: dict, tmp_path: Path) -> None:
    page = render_summary([tuned["run"]]).read_text(encoding="utf-8")
    assert 'id="1.-At-its-best"' in page and "At its best, cpu-pytorch ran bert-base-cased with " in page
    assert (tuned["run"] / "tables" / "at_its_best.csv").is_file() and (tuned["run"] / "figures" / "tune_points.png").stat().st_size > 0
    findings = (tuned["run"] / "findings.md").read_text(encoding="utf-8")
    assert "each runtime at its best settings" not in findings


def test_the_automatic_space_divides_the_cores_among_streams_and_tries_the_backends_own_knobs() -> None:
    assert automatic_space("pytorch", "server", "forward", cores=4) == {
        "streams": [1, 2, 4], "max_batch": [1, 2, 4, 8, 16], "omp_wait_policy": ["active", "passive"]
    }  # fmt: skip
    assert automatic_space("onnxruntime", "single-stream", "forward", cores=2) == {"streams": [1, 2], "intra_op_spinning": [True, False]}
    assert automatic_space("openvino", "offline", "generate", cores=2) == {"max_batch": [1, 2, 4, 8, 16], "performance_hint": ["LATENCY", "THROUGHPUT"]}


BAD = {
    "unknown knob": ({"tune": {"objective": "server", "space": {"threads": [1, 2]}}}, "tune: space.threads: unknown knob; the kit's: streams, num_threads"),
    "backend value": (
        {"tune": {"objective": "server", "space": {"omp_wait_policy": ["sleepy"]}}},
        "tune: space.omp_wait_policy: 'sleepy': Input should be 'active' or 'passive'",
    ),
    "empty space": ({"tune": {"objective": "server", "space": {"streams": []}}}, "tune: space.streams: give a list of one value or more"),
    "kit value": ({"tune": {"objective": "server", "space": {"max_batch": [0, 4]}}}, "tune: space.max_batch: 0 is not a positive integer"),
    "objective": ({"tune": {"objective": "fastest"}}, "tune: objective must be one of server, offline, single-stream, not 'fastest'"),
    "budget": ({"tune_budget_s": 0}, "tune_budget_s: Input should be greater than 0"),
    "trials": ({"tune_trials": 0}, "tune_trials: Input should be greater than or equal to 1"),
    "confirm rounds": ({"confirm_rounds": 1}, "confirm_rounds: Input should be greater than or equal to 2"),
    "scenario": ({"scenario": ["offline"]}, "tune: a tune measures its objective's scenario alone (scenario: [server])"),
    "server without a bound": (
        {"workload": "generate", "models": ["distilgpt2"], "tune": {"objective": "server", "space": {"max_batch": [2, 4]}}},
        "ttft_bound_ms: the server scenario of workload generate is judged",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_tune_input_is_one_line_and_exit_2_before_any_kernel(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values, message = BAD[case]
    out = tmp_path / "run"
    assert main([*COMMAND[2:], "--params", str(write_params(tmp_path / "bad.yaml", **values)), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_a_tune_without_optuna_gives_the_pip_line_before_any_kernel(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "optuna" else find_spec(name, *args))
    out = tmp_path / "run"
    assert main([*COMMAND[2:], "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == "tune: optuna is not installed: pip install 'benchlib[tune]'" and not out.exists()

