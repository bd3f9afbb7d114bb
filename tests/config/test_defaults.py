"""One source of defaults: `BenchmarkParams`. The benchmark notebook's parameters cell agrees with it, the runner
passes papermill every parameter resolved, and a grid that leaves out `model_scale`, `repeat` and `number` is
measured with `BenchmarkParams`'s values (full, 30, 3), whatever the notebook's cell says."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import nbformat
import papermill
import pytest
import yaml

from benchlib import plan_run, read_results, run_jobs
from benchlib.config.params import BenchmarkParams
from benchlib.paths import BENCHMARK_NOTEBOOK
from benchlib.status import OK
from benchlib.store.environment import read_environment
from benchlib.store.layout import executed_notebook

FIELDS = BenchmarkParams.model_fields


def parameters_cell(notebook: Path = BENCHMARK_NOTEBOOK) -> dict[str, Any]:
    """The names and values of the notebook's `parameters` cell, in order: one literal assignment per name."""
    cells = [cell for cell in nbformat.read(notebook, as_version=4).cells if "parameters" in cell.metadata.get("tags", [])]
    assert len(cells) == 1, f"{notebook.name}: {len(cells)} cells tagged parameters"
    values: dict[str, Any] = {}
    for statement in ast.parse(cells[0].source).body:
        assert isinstance(statement, ast.Assign) and [type(t) for t in statement.targets] == [ast.Name], ast.unparse(statement)
        name = statement.targets[0].id
        assert name not in values, f"{name} is assigned twice"
        values[name] = ast.literal_eval(statement.value)
    return values


def default_of(name: str) -> Any:
    return FIELDS[name].get_default(call_default_factory=True)


def disagreements(cell: dict[str, Any]) -> list[str]:
    """What is wrong with a parameters cell, one line each: a name that is not a parameter, a parameter it lacks,
    a value other than `BenchmarkParams`'s default (the same type too: 60 is not 60.0, True is not 1)."""
    problems = [f"{name}: not a parameter of BenchmarkParams" for name in cell if name not in FIELDS]
    problems += [f"{name}: missing (BenchmarkParams has it)" for name in FIELDS if name not in cell]
    for name, value in cell.items():
        if name in FIELDS and not FIELDS[name].is_required():
            default = default_of(name)
            if (type(value), value) != (type(default), default):
                problems.append(f"{name}: {value!r} in the notebook, {default!r} in BenchmarkParams")
    return problems


def test_the_notebooks_parameters_cell_agrees_with_benchmark_params() -> None:
    cell = parameters_cell()
    assert disagreements(cell) == []
    assert list(papermill.inspect_notebook(str(BENCHMARK_NOTEBOOK))) == list(cell)  # what papermill sees and overrides
    params = BenchmarkParams(**cell)  # the required values make a valid environment of their own
    assert (params.device, params.model_scale, params.repeat, params.number) == ("cpu", "full", 30, 3)


def test_a_cell_with_the_old_defaults_is_refused() -> None:
    """The defect this guards against: the cell said tiny, 3 samples of 1 call, where BenchmarkParams says full, 30 of 3."""
    cell = {**parameters_cell(), "model_scale": "tiny", "repeat": 3, "number": 1, "max_cell_seconds": 60, "batch_size": [1]}
    del cell["seed"]
    assert disagreements(cell) == [
        "batch_size: not a parameter of BenchmarkParams",
        "seed: missing (BenchmarkParams has it)",
        "model_scale: 'tiny' in the notebook, 'full' in BenchmarkParams",
        "repeat: 3 in the notebook, 30 in BenchmarkParams",
        "number: 1 in the notebook, 3 in BenchmarkParams",
        "max_cell_seconds: 60 in the notebook, 60.0 in BenchmarkParams",
    ]


def write_grid(tmp_path: Path) -> Path:
    """A grid that leaves out model_scale, repeat and number: the smallest catalogue model at full scale, one cell."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"models": ["distilbert-base-uncased"], "batch_sizes": [1], "sequence_lengths": [8], "remeasure": 0}))
    return grid


def test_the_runner_passes_every_parameter_resolved(tmp_path: Path) -> None:
    (job,) = plan_run(tmp_path / "run", write_grid(tmp_path), ["cpu-pytorch"])
    injected = job.notebook_parameters()
    assert list(injected) == list(FIELDS)  # the notebook's own values never stand in for one the grid left out
    assert (injected["model_scale"], injected["repeat"], injected["number"]) == ("full", 30, 3)
    assert injected["options"] == {  # the backend's defaults filled in
        "attn_implementation": None, "compile_mode": "default", "omp_wait_policy": None, "tf32": False, "sdpa_kernel": None,
    }  # fmt: skip
    assert yaml.safe_load(yaml.safe_dump(injected)) == injected  # plain values, as papermill writes them into the notebook


@pytest.mark.e2e
@pytest.mark.full  # `make test`: the runner's parameters above, and the notebook measuring at its defaults (30 x 3, full)
def test_a_grid_without_scale_repeat_or_number_is_measured_at_full_30_and_3(tmp_path: Path) -> None:
    jobs = plan_run(tmp_path / "run", write_grid(tmp_path), ["cpu-pytorch"])
    lines: list[str] = []
    outcomes = run_jobs(jobs, progress=False, report=lines.append)
    assert [outcome.succeeded for outcome in outcomes] == [True], lines
    output_dir = jobs[0].output_dir

    recorded = read_environment(output_dir)["parameters"]
    assert (recorded["model_scale"], recorded["repeat"], recorded["number"]) == ("full", 30, 3)
    rows = read_results(output_dir)
    assert rows[["model", "model_scale", "status", "repeat", "number"]].values.tolist() == [["distilbert-base-uncased", "full", OK, 30, 3]]
    assert len(rows["samples_s"].iloc[0]) == 30 and all(sample > 0 for sample in rows["samples_s"].iloc[0])

    executed = nbformat.read(executed_notebook(output_dir), as_version=4)
    (injected,) = [cell for cell in executed.cells if "injected-parameters" in cell.metadata.get("tags", [])]
    assert {'model_scale = "full"', "repeat = 30", "number = 3"} <= set(injected.source.splitlines())
