"""notebooks/benchmark.ipynb executed by papermill: with smoke.yaml and each CPU environment file, and with its own defaults."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import nbformat
import pandas as pd
import papermill
import pytest
import yaml

from benchlib import read_results
from benchlib.backends import TOLERANCE
from benchlib.backends.pytorch import bfloat16_unsupported
from benchlib.config.catalogue import load_catalogue
from benchlib.config.params import BenchmarkParams
from benchlib.paths import BENCHMARK_NOTEBOOK, PARAMETERS_DIR
from benchlib.status import OK, STATUSES, TOO_LONG, UNSUPPORTED
from tests.conftest import CPU_ENVIRONMENTS, SMOKE_FULL_ONLY
from tests.known_crashes import accepted_crash

SMOKE = yaml.safe_load((PARAMETERS_DIR / "grids" / "smoke.yaml").read_text())


def check_rows(output_dir: Path, grid: dict, environment: dict) -> None:
    """One row per cell of `grid`, each with a valid status; ok cells with positive times, others with a reason."""
    rows = read_results(output_dir)
    cells = {(m, b, s) for m in grid["models"] for b in grid["batch_sizes"] for s in grid["sequence_lengths"]}
    found = list(zip(rows["model"], rows["batch_size"], rows["sequence_length"]))
    assert len(found) == len(set(found)) == len(cells) and set(found) == cells
    assert set(rows["status"]) <= set(STATUSES)
    for key in ("environment", "framework", "mode", "device"):
        assert set(rows[key]) == {environment[key]}
    precision = environment.get("precision", "float32")
    assert set(rows["precision"]) == {precision}
    ok = rows[rows["status"] == OK]
    assert len(ok) > 0
    for _, row in ok.iterrows():
        assert row["mean_s"] > 0 and row["min_s"] > 0 and row["median_s"] > 0
        assert len(row["samples_s"]) == row["repeat"] and all(sample > 0 for sample in row["samples_s"])
    # Every backend but eager PyTorch float32 (the reference) agrees with eager PyTorch on the same weights; TensorFlow
    # draws its own only for a model that PyTorch cannot build.
    reference = environment["framework"] == "pytorch" and environment["mode"] == "eager" and precision == "float32"
    own_weights = ok["model"].isin([name for name, spec in load_catalogue().items() if spec.unsupported_for(("pytorch",))])
    compared = ok[~own_weights] if not reference else ok.iloc[:0]
    assert compared["max_abs_diff"].between(0, TOLERANCE[precision]).all() and compared["agreement"].between(0, 1 + 1e-6).all()
    assert precision != "float32" or (compared["agreement"] >= 0.99).all()  # reduced precision may move the top-1 of near-ties
    assert ok.drop(compared.index)["max_abs_diff"].isna().all()
    others = rows[rows["status"] != OK]
    assert all(reason.strip() for reason in others["reason"])
    assert all(math.isnan(value) for value in others["mean_s"])


@pytest.mark.e2e
@pytest.mark.parametrize("environment", [pytest.param(name, marks=pytest.mark.full) if name in SMOKE_FULL_ONLY else name for name in CPU_ENVIRONMENTS])
def test_smoke_grid_in_each_cpu_environment(smoke_run: Path, smoke_models: list[str], user_models: dict[str, Path], environment: str) -> None:
    env = yaml.safe_load((PARAMETERS_DIR / "environments" / f"{environment}.yaml").read_text())
    output_dir = smoke_run / environment
    if env.get("precision") == "bfloat16" and (why := bfloat16_unsupported()):  # a CPU without bfloat16 instructions
        assert set(read_results(output_dir)["status"]) <= {UNSUPPORTED, TOO_LONG} and why in set(read_results(output_dir)["reason"])
        return
    check_rows(output_dir, {**SMOKE, "models": smoke_models}, env)

    rows = read_results(output_dir)
    assert set(rows["workload"]) == {"forward"} and rows[["new_tokens", "ttft_s", "tpot_s", "token_agreement"]].isna().all().all()
    assert set(rows["model_scale"]) == {"tiny"}
    # The smoke grid runs everything it can: only the catalogue's known limits are not ok (and OpenVINO's known crash).
    assert set(rows.loc[~accepted_crash(rows, str(user_models["llama"])), "status"]) <= {OK, TOO_LONG, "unsupported"}
    ctrl = rows[(rows["model"] == "ctrl") & (rows["sequence_length"] == 300)]
    assert list(ctrl["status"]) == [TOO_LONG]

    recorded = json.loads((output_dir / "environment.json").read_text())["parameters"]
    assert {key: recorded[key] for key in env if key != "options"} == {key: value for key, value in env.items() if key != "options"}
    assert env.get("options", {}).items() <= recorded["options"].items()  # with the backend's defaults filled in
    assert recorded["output_dir"] == str(output_dir)

    executed = nbformat.read(output_dir / "benchmark.ipynb", as_version=4)
    injected = [cell for cell in executed.cells if "injected-parameters" in cell.metadata.get("tags", [])]
    assert len(injected) == 1 and f"environment = {environment!r}" in injected[0].source.replace('"', "'")
    assert executed.metadata["papermill"]["exception"] is None
    table = [output for cell in executed.cells for output in cell.get("outputs", []) if output.get("output_type") == "execute_result"]
    assert table and "gpt2" in table[0]["data"]["text/html"]


@pytest.mark.e2e
def test_user_models_run_in_every_cpu_environment(smoke_run: Path, smoke_environments: list[str], user_models: dict[str, Path]) -> None:
    """A Llama-architecture folder and a BERT folder, each with its weights and tokenizer, given with --models: every cell
    ok or unsupported with a reason; ONNX Runtime, OpenVINO and torch.compile (where the smoke run gives it them: `make
    test-full`) agree with eager float32 on the text, and TensorFlow runs the BERT from the PyTorch weights."""
    llama, bert = str(user_models["llama"]), str(user_models["bert"])
    rows = pd.concat([read_results(smoke_run / environment) for environment in smoke_environments], ignore_index=True)
    mine = rows[rows["model"].isin([llama, bert])].set_index(["environment", "model", "sequence_length"])
    assert len(mine) == len(smoke_environments) * 2 * len(SMOKE["sequence_lengths"])
    crashed = accepted_crash(mine.reset_index(), llama).to_numpy()
    assert set(mine.loc[~crashed, "status"]) <= {OK, UNSUPPORTED} and mine.loc[mine["status"] != OK, "reason"].str.len().gt(0).all()
    assert set(mine.loc[mine["status"] == OK, "inputs"]) == {"text"}
    assert set(mine.xs(llama, level="model")["task"]) == {"causal-lm"} and set(mine.xs(bert, level="model")["task"]) == {"fill-mask"}
    assert set(mine["weights"]) == {"pretrained"}
    for environment in {"cpu-onnxruntime", "cpu-openvino", "cpu-torch-compile"} & set(smoke_environments):
        cells = mine.loc[environment].loc[llama]
        assert (cells["status"] == OK).all() and (cells["agreement"] >= 0.99).all() and set(cells["agreement_metric"]) == {"top1_agreement"}, environment
    for environment in ("cpu-tensorflow", "cpu-tensorflow-xla"):
        assert (mine.loc[environment].loc[llama]["status"] == UNSUPPORTED).all()
        assert mine.loc[environment].loc[llama]["reason"].str.contains("no TensorFlow Llama").all()
        cells = mine.loc[environment].loc[bert]
        assert (cells["status"] == OK).all() and (cells["max_abs_diff"] <= 1e-3).all() and (cells["agreement"] >= 0.99).all()


def test_parameters_cell_declares_the_parameters() -> None:
    """Every parameter of BenchmarkParams, in its order (tests/config/test_defaults.py checks the values)."""
    notebook = nbformat.read(BENCHMARK_NOTEBOOK, as_version=4)
    first_code = next(cell for cell in notebook.cells if cell.cell_type == "code")
    assert "parameters" in first_code.metadata.get("tags", [])
    assert list(papermill.inspect_notebook(str(BENCHMARK_NOTEBOOK))) == list(BenchmarkParams.model_fields)


@pytest.mark.e2e
def test_notebook_runs_with_its_defaults(tmp_path: Path) -> None:
    """As a user in JupyterLab would run it: its own defaults (BenchmarkParams's, and two small models at full scale
    at one shape), only the output folder moved."""
    defaults = {name: ast.literal_eval(p["default"]) for name, p in papermill.inspect_notebook(str(BENCHMARK_NOTEBOOK)).items()}
    assert (defaults["device"], defaults["model_scale"], defaults["repeat"], defaults["number"]) == ("cpu", "full", 30, 3)
    output_dir = tmp_path / "defaults"
    papermill.execute_notebook(
        str(BENCHMARK_NOTEBOOK), str(tmp_path / "executed.ipynb"), parameters={"output_dir": str(output_dir)},
        cwd=str(BENCHMARK_NOTEBOOK.parent), progress_bar=False,
    )  # fmt: skip
    check_rows(output_dir, defaults, defaults)
    rows = read_results(output_dir)
    assert rows[["model", "status", "model_scale", "repeat", "number"]].values.tolist() == [
        [model, OK, "full", 30, 3] for model in defaults["models"] for _ in defaults["batch_sizes"] for _ in defaults["sequence_lengths"]
    ]
