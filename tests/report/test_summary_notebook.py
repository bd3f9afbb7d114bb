"""The summary notebook executed through papermill (render_summary) on the session's smoke run and on an old run."""

from __future__ import annotations

import csv
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from benchlib import read_results
from benchlib.analysis.spreadsheet import COLUMNS_2019
from benchlib.analysis.tables import AVERAGES_COLUMNS
from benchlib.config.catalogue import load_catalogue
from benchlib.paths import PROJECT_ROOT
from benchlib.report.render import render_summary
from tests.known_crashes import accepted_crash

ENVIRONMENTS = ("cpu-pytorch", "cpu-torchscript", "cpu-tensorflow", "cpu-tensorflow-xla")  # the study's four
REFERENCE = PROJECT_ROOT / "outputs" / "reference"
# results.csv's columns before attempts, interference and the speed probe were recorded.
OLD_COLUMNS = (
    "environment", "framework", "mode", "device", "model", "model_scale", "batch_size", "sequence_length", "status",
    "mean_s", "median_s", "min_s", "std_s", "repeat", "number", "first_call_s", "samples_s", "reason",
    "iqr_s", "ci95_low_s", "ci95_high_s", "noisy", "stop_reason", "peak_memory_bytes",
)  # fmt: skip


def page_text(html: Path) -> str:
    return html.read_text(encoding="utf-8")


@dataclass(frozen=True)
class SmokeCells:
    """How many of the smoke run's cells (its models at two shapes) each kind of environment runs, by the catalogue's limits:
    ctrl at sequence 300 is too long everywhere, ctrl does not compile, Transformer-XL runs in TensorFlow only, and
    TensorFlow has no ModernBERT, SmolLM2, Qwen2.5 or Llama (the user's folder)."""

    models: int
    pytorch_ok: int  # eager PyTorch, and every backend but torch.compile
    tensorflow_ok: int
    in_the_study_four: int  # ok in eager PyTorch, TorchScript, TensorFlow and XLA: the cells the averages use


def smoke_cells(smoke_models: list[str], user_models: dict[str, Path]) -> SmokeCells:
    assert {"ctrl", "transfo-xl-wt103"} <= set(smoke_models)
    without_tensorflow = len({"modernbert-base", "smollm2-135m", "qwen2.5-0.5b", str(user_models["llama"])} & set(smoke_models))
    pytorch_ok = 2 * len(smoke_models) - 1 - 2
    return SmokeCells(len(smoke_models), pytorch_ok, 2 * len(smoke_models) - 1 - 2 * without_tensorflow, pytorch_ok - 2 * without_tensorflow)


@pytest.mark.e2e
def test_summary_renders_html_tables_and_figures(
    smoke_run: Path, smoke_models: list[str], smoke_environments: list[str], user_models: dict[str, Path], tmp_path: Path
) -> None:
    run = shutil.copytree(smoke_run, tmp_path / "run")
    expected = smoke_cells(smoke_models, user_models)
    html = render_summary([run])

    assert html == run / "summary.html"
    page = page_text(html)
    assert "runs.load_runs" not in page and "show_table(" not in page  # the code is hidden
    # The answer comes first: the findings open the page, before any table.
    assert page.index("Findings") < page.index("What was measured") < page.index("Speed-up over eager PyTorch float32")
    assert "the fastest environment overall is" in page or "is the fastest environment overall" in page
    assert "Cell by cell on cpu" in page and "The 2019 claims: " in page
    assert "Average inference time per environment" in page and "cells_excluded" in page
    assert page.count("data:image/png") >= 3
    assert "Speed probe" in page or "speed probe" in page
    assert "Interference was not measured" not in page  # every environment of a fresh run measured it
    # The smoke run has neither generation nor load: one line says so, and neither section is shown.
    assert "Not measured in these runs: generation (<code>workload: generate</code>); the load scenarios" in page
    assert '.-Under-load"' not in page and '.-Generation"' not in page
    assert page.index("Contents:") < page.index('id="1.-What-was-measured"')

    averages = pd.read_csv(run / "tables" / "framework_averages.csv")
    assert list(averages.columns) == list(AVERAGES_COLUMNS)
    assert sorted(averages["environment"]) == sorted(ENVIRONMENTS)
    # Of the smoke run's cells, those not ok in all four (see SmokeCells) are excluded from every average, and counted.
    # With --full (16 models, 32 cells): 21 used, 11 excluded.
    assert set(averages["cells_used"]) == {expected.in_the_study_four}
    assert set(averages["cells_excluded"]) == {2 * expected.models - expected.in_the_study_four}
    assert (averages["mean_s"] > 0).all()
    assert {p.name for p in (run / "figures").iterdir()} == {
        "framework_averages.png", "tf_over_pt_heatmap.png", "time_vs_sequence.png", "peak_memory.png", "speed_probe.png", "roofline.png",
        "fastest_heatmap.png",
    }  # fmt: skip
    # Every environment of the run against eager PyTorch float32 (the averages above are the study's four only).
    ok_cells = {env: int((read_results(run / env)["status"] == "ok").sum()) for env in smoke_environments}
    measured = {env for env, count in ok_cells.items() if count}
    speedups = pd.read_csv(run / "tables" / "speedups.csv").set_index("environment")
    assert set(ENVIRONMENTS) | {"cpu-onnxruntime", "cpu-openvino"} <= measured <= set(speedups.index)
    assert speedups.loc["cpu-pytorch", "verdict"] == "baseline" and speedups.loc["cpu-pytorch", "cells"] == expected.pytorch_ok
    # The cells ok in both: ctrl is unsupported by torch.compile (`make test-full` runs it here), Transformer-XL by every
    # PyTorch-based backend, and TensorFlow lacks architectures (with --full: 29, 28 and 21).
    if "cpu-torch-compile" in smoke_environments:
        assert speedups.loc["cpu-torch-compile", "cells"] == expected.pytorch_ok - 1
    assert speedups.loc["cpu-tensorflow", "cells"] == expected.in_the_study_four
    # OpenVINO's known crash (tests/known_crashes.py) takes its cells out of its environment's count.
    crashed = {env: int(accepted_crash(read_results(run / env), str(user_models["llama"])).sum()) for env in sorted(measured - {"cpu-tensorflow", "cpu-tensorflow-xla"})}
    assert all(expected.pytorch_ok - 1 - crashes <= speedups.loc[env, "cells"] <= expected.pytorch_ok - crashes for env, crashes in crashed.items()), crashed
    # Agreement beside the speed-up: every compared float32 environment agrees at least 99% (the user's folders on text).
    assert (speedups.loc[sorted({"cpu-onnxruntime", "cpu-openvino", "cpu-torch-compile", "cpu-tensorflow"} & measured), "agreement"] >= 0.99).all()
    assert set(speedups["weights"].dropna()) == {"pretrained, random"}  # every environment has the user's folders
    assert "The fastest environment whose agreement with eager PyTorch float32 is at least 99% in every cell is " in page
    assert "Agreement on random weights says how far an environment's numbers move" in page
    assert (speedups.loc[sorted(measured), "speedup"] > 0).all()
    fastest = pd.read_csv(run / "tables" / "fastest.csv")
    assert len(fastest) == 2 * expected.models and set(fastest["fastest"].dropna()) <= measured
    for name in ("speedups_per_model", "pytorch_vs_tensorflow", "torchscript_vs_eager", "xla_vs_function", "distilled_vs_teacher", "claims_2019", "excluded_cells", "threads",
                 "peak_memory_mib", "fraction_of_peak", "efficiency_cells", "time_to_first_result"):  # fmt: skip
        assert (run / "tables" / f"{name}.csv").is_file(), name
    first_result = pd.read_csv(run / "tables" / "time_to_first_result.csv").set_index("environment")
    assert set(first_result.index) == measured and (first_result["cold_median_s"] >= first_result["warm_median_s"]).all()
    spreadsheet = (run / "tables" / "spreadsheet_2019_cpu-tensorflow-xla.csv").read_text().splitlines()
    assert spreadsheet[0] == ",".join(COLUMNS_2019) and len(spreadsheet) == 1 + expected.models  # the header and a line per model

    # How close to the machine's limit: the runner measured the limits, the sweep counted each ok cell's FLOPs.
    assert "of the measured float32 peak" in page and "Peak float32 matrix multiply" in page
    cells = pd.read_csv(run / "tables" / "efficiency_cells.csv")
    # Every ok cell of a catalogue model (the user's folders have no FLOP formulas); with --full 29 ok in eager PyTorch
    # (25 of the catalogue), 23 in each TensorFlow one (Transformer-XL runs there; 21 of the catalogue), ...
    assert ok_cells["cpu-pytorch"] == expected.pytorch_ok
    assert ok_cells["cpu-tensorflow"] == ok_cells["cpu-tensorflow-xla"] == expected.tensorflow_ok
    every_ok = pd.concat([read_results(run / env) for env in smoke_environments]).query("status == 'ok'")
    assert len(cells) == every_ok["model"].isin(list(load_catalogue())).sum() and (cells["flops"] > 0).all()
    # Each share is against the cell's own precision's peak: int8 has none measured, so no share; none is above 1.
    int8 = cells["precision"] == "int8"
    shares = cells.loc[~int8, "fraction_of_peak"]
    assert cells.loc[int8, "fraction_of_peak"].isna().all() and shares.notna().any() and shares.dropna().between(0, 1, inclusive="right").all()
    assert cells["achieved_flops_per_s"].tolist() == pytest.approx((cells["flops"] / cells["time_s"]).tolist())
    assert set(pd.read_csv(run / "tables" / "fraction_of_peak.csv")["environment"]) == measured

    executed = nbformat.read(run / "summary.ipynb", as_version=4)
    assert executed.metadata.papermill.parameters == {"run_dirs": [str(run)], "output_dir": str(run), "prices": None}
    # What is shared names no path of this machine: the run lies outside the kit (under tmp_path), so it is named by its name.
    assert "Runs: <code>run</code>" in page and str(tmp_path) not in page
    assert [path.name for path in (run / "tables").glob("*.csv") if str(tmp_path) in path.read_text(encoding="utf-8")] == []


@pytest.mark.e2e
@pytest.mark.full
def test_partial_run_without_xla_renders_what_is_there(smoke_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "partial"
    for environment in ("cpu-pytorch", "cpu-tensorflow"):
        shutil.copytree(smoke_run / environment, run / environment)
    results = run / "cpu-tensorflow" / "results.csv"
    results.write_text("".join(results.read_text().splitlines(keepends=True)[:4]))  # header and 3 cells: still running

    html = render_summary([str(run)], output_dir=tmp_path / "summary")

    assert html == tmp_path / "summary" / "summary.html"
    page = page_text(html)
    assert "No tensorflow (xla) environment on cpu" in page and "No pytorch (torchscript) environment on cpu" in page
    assert "There is no cuda environment in these runs." in page
    assert "cpu-tensorflow has no row for 29 of the 32 cells measured on cpu" in page
    assert not (tmp_path / "summary" / "tables" / "xla_vs_function.csv").exists()
    averages = pd.read_csv(tmp_path / "summary" / "tables" / "framework_averages.csv").set_index("environment")
    assert averages["cells_used"].tolist() == [3, 3] and averages["cells_excluded"].tolist() == [29, 29]
    assert not (run / "summary.html").exists()


def test_render_summary_names_a_missing_run_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run_dirs: not a folder: .*nowhere"):
        render_summary([tmp_path / "nowhere"])


@pytest.mark.e2e
@pytest.mark.full  # make test renders the summary of today's runs (above and tests/report/test_sections.py)
def test_a_run_from_before_interference_and_probes_renders_and_says_so(tmp_path: Path) -> None:
    run = tmp_path / "old"
    for environment in ("cpu-pytorch", "cpu-tensorflow"):
        source, target = REFERENCE / environment, run / environment
        target.mkdir(parents=True)
        with open(source / "results.csv", newline="") as old, open(target / "results.csv", "w", newline="") as new:
            writer = csv.DictWriter(new, fieldnames=OLD_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(csv.DictReader(old))
        info = json.loads((source / "environment.json").read_text())
        info = {key: value for key, value in info.items() if key not in ("interference", "probe_workload", "probes")}
        (target / "environment.json").write_text(json.dumps(info))

    page = page_text(render_summary([run]))

    assert "Interference was not measured for cpu-pytorch and cpu-tensorflow" in page
    assert "No environment of these runs recorded a speed probe" in page
    assert "Average inference time per environment" in page and "Peak memory" in page
    assert "recorded no build times (they are from before the build cache)" in page
    assert not (run / "tables" / "disturbed_cells.csv").exists() and not (run / "figures" / "speed_probe.png").exists()
