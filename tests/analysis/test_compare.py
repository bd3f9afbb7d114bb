"""`benchlib compare RUN_A RUN_B`: cell and environment verdicts, what differs between runs, the report and the exit status."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import mannwhitneyu

from benchlib import run_environment
from benchlib.analysis import compare
from benchlib.cli import main
from benchlib.config.models import checkpoint_digest
from benchlib.measure.timing import Measurement
from benchlib.paths import PROJECT_ROOT
from benchlib.report.compare_report import write_report
from benchlib.store.environment import write_json
from benchlib.store.results import ResultsWriter, make_row, read_results
from tests.checkpoints import save_bert
from tests.report.test_summary_notebook import OLD_COLUMNS

CELLS = [("bert-base-cased", 1, 8), ("bert-base-cased", 1, 64), ("gpt2", 1, 8)]
ENVIRONMENT = {"framework": "pytorch", "mode": "eager", "device": "cpu", "model_scale": "full"}


def tight(median: float, n: int = 10, seed: int = 0) -> list[float]:
    """`n` samples within ±0.5% of `median`."""
    return list(median * (1 + np.random.default_rng(seed).uniform(-0.005, 0.005, n)))


def info(environment: str, torch: str = "2.13.0", output_dir: str = "/a", hostname: str = "vm", date: str = "2026-01-01") -> dict:
    """An environment.json of a CPU machine."""
    return {
        "parameters": {"environment": environment, "repeat": 10, "output_dir": output_dir, "current_round": 1},
        "date": date,
        "machine": {"hostname": hostname, "cpu": "AMD EPYC", "logical_cores": 2, "memory_bytes": 25 * 2**30, "gpus": []},
        "software": {"python": "3.11.7", "torch": torch},
        "threads": {"num_threads": 2},
    }  # fmt: skip


def write_run(run, cells, environment="cpu-pytorch", environment_json=None, rounds=1):
    """A run folder `<run>/<environment>/` with results.csv (`cells`: cell → samples, or a status) and environment.json."""
    folder = run / environment
    with ResultsWriter(folder) as writer:
        for round_number in range(1, rounds + 1):
            for (model, batch_size, sequence_length), samples in cells.items():
                cell = {**ENVIRONMENT, "environment": environment, "model": model, "batch_size": batch_size, "sequence_length": sequence_length, "round": round_number}
                if isinstance(samples, str):
                    writer.append(make_row(cell, samples, reason="out of memory" if samples == "oom" else ""))
                else:
                    writer.append(make_row(cell, "ok", Measurement(tuple(samples[round_number - 1] if rounds > 1 else samples), number=1)))
    write_json(folder / "environment.json", environment_json or info(environment, output_dir=str(folder)))
    return run


def runs(tmp_path, factor, **b_json):
    """Runs A and B of the same cells, B's samples `factor` times A's (other seeds)."""
    a = write_run(tmp_path / "a", {cell: tight(0.1 * (i + 1), seed=i) for i, cell in enumerate(CELLS)})
    b_cells = {cell: tight(0.1 * (i + 1) * factor, seed=10 + i) for i, cell in enumerate(CELLS)}
    b = write_run(tmp_path / "b", b_cells, environment_json=info("cpu-pytorch", output_dir=str(tmp_path / "b"), **b_json))
    return a, b


def test_clear_slowdown_is_slower_and_exits_1(tmp_path, capsys):
    a, b = runs(tmp_path, 1.3)
    assert main(["compare", str(a), str(b)]) == 1
    out = tmp_path / "b" / "compare-a"
    cells = pd.read_csv(out / "cells.csv")
    assert cells.verdict.tolist() == ["slower"] * 3 and (cells.p_value < 0.001).all()
    assert cells.change.tolist() == pytest.approx([0.3] * 3, abs=0.01) and cells.n_samples_a.tolist() == [10] * 3
    environments = pd.read_csv(out / "environments.csv")
    env = environments.iloc[0]
    assert (env.environment, env.verdict, env.cells_compared, env.slower_cells) == ("cpu-pytorch", "slower", 3, 3)
    assert env.ci95_low < env.geomean_change == pytest.approx(0.3, abs=0.01) and env.ci95_high > env.geomean_change
    html = (out / "compare.html").read_text()
    assert ">geomean_change</th>" in html and re.search(r"<td[^>]*>\+(29|30)\.\d%</td>", html) and 'src="compare.png"' in html and (out / "compare.png").stat().st_size > 0
    assert "<th></th>" not in html  # no pandas index
    printed = capsys.readouterr().out
    assert re.search(r"^slower: cpu-pytorch \+(29|30)\.\d% \(95% interval", printed, re.M) and f"report: {out / 'compare.html'}" in printed


def test_clear_speedup_is_faster_and_exits_0(tmp_path, capsys):
    a, b = runs(tmp_path, 0.7)
    report = tmp_path / "report"
    assert main(["compare", str(a), str(b), "--out", str(report)]) == 0
    assert pd.read_csv(report / "cells.csv").verdict.tolist() == ["faster"] * 3
    assert pd.read_csv(report / "environments.csv").verdict.tolist() == ["faster"]
    assert re.search(r"^faster: cpu-pytorch -(29|30)\.\d%", capsys.readouterr().out, re.M)


def test_the_report_names_runs_without_a_path_of_this_machine(tmp_path):
    a, b = runs(tmp_path, 1.0)
    html = write_report(compare.compare_runs(a, b), tmp_path / "report").read_text()
    assert "A: <code>a</code>, B: <code>b</code>" in html and str(tmp_path) not in html  # outside the kit: each run by its name


def test_noise_only_is_no_change(tmp_path):
    rng = np.random.default_rng(1)
    noisy = {cell: list(rng.normal(0.1, 0.01, 15)) for cell in CELLS}
    a = write_run(tmp_path / "a", noisy)
    b = write_run(tmp_path / "b", {cell: list(rng.normal(0.1, 0.01, 15)) for cell in CELLS})
    comparison = compare.compare_runs(a, b)
    assert comparison.cells.verdict.tolist() == ["no change"] * 3 and (comparison.cells.p_value > 0.05).all()
    assert comparison.environments.verdict.tolist() == ["no clear difference"]


def test_significant_change_below_the_threshold_is_no_change(tmp_path):
    a, b = runs(tmp_path, 1.03)
    comparison = compare.compare_runs(a, b, threshold=0.05)
    assert (comparison.cells.p_value < 0.001).all() and comparison.cells.change.tolist() == pytest.approx([0.03] * 3, abs=0.005)
    assert comparison.cells.verdict.tolist() == ["no change"] * 3
    environment = comparison.environments.iloc[0]
    assert environment.ci95_low > 0 and environment.verdict == "no clear difference"
    assert compare.compare_runs(a, b, threshold=0.02).environments.verdict.tolist() == ["slower"]


def test_cell_verdict_needs_significance_and_size():
    assert compare.cell_verdict(0.3, 0.01) == "slower" and compare.cell_verdict(-0.3, 0.01) == "faster"
    assert compare.cell_verdict(0.3, 0.2) == "no change" and compare.cell_verdict(0.01, 0.001) == "no change"
    assert compare.cell_verdict(0.3, float("nan")) == "no change" and compare.cell_verdict(0.3, 0.01, alpha=0.005) == "no change"


def test_environment_differences_are_reported_and_run_specific_values_ignored(tmp_path, capsys):
    a, b = runs(tmp_path, 1.0, torch="2.12.0", hostname="other", date="2026-02-02")
    differences = compare.compare_runs(a, b).differences
    assert differences[["environment", "section", "key", "a", "b"]].values.tolist() == [["cpu-pytorch", "software", "torch", "2.13.0", "2.12.0"]]
    assert main(["compare", str(a), str(b)]) == 0
    assert "differs: software.torch: 2.13.0 -> 2.12.0 (cpu-pytorch)" in capsys.readouterr().out
    assert re.search(r"<td[^>]*>2.12.0</td>", (b / "compare-a" / "compare.html").read_text())


def test_cells_and_environments_not_in_both_runs_are_listed_with_why(tmp_path, capsys):
    a = write_run(tmp_path / "a", {CELLS[0]: tight(0.1), CELLS[1]: tight(0.2), CELLS[2]: tight(0.3)})
    write_run(a, {CELLS[0]: tight(0.1)}, environment="cpu-torchscript")
    b = write_run(tmp_path / "b", {CELLS[0]: tight(0.1, seed=1), CELLS[1]: "oom"})
    write_run(b, {CELLS[0]: tight(0.1)}, environment="cpu-tensorflow")
    comparison = compare.compare_runs(a, b)
    cells = comparison.cells.set_index(["model", "sequence_length"])
    assert cells.verdict.tolist() == ["no change", "not compared", "not compared"]
    assert cells.loc[("bert-base-cased", 64), "why"] == "B: oom (out of memory)"
    assert cells.loc[("gpt2", 8), "why"] == "B: not measured" and pd.isna(cells.loc[("gpt2", 8), "change"])
    environments = comparison.environments.set_index("environment")
    assert environments.verdict.to_dict() == {"cpu-pytorch": "no clear difference", "cpu-torchscript": "not compared", "cpu-tensorflow": "not compared"}
    assert environments.why.to_dict() == {"cpu-pytorch": "", "cpu-torchscript": "only in run A", "cpu-tensorflow": "only in run B"}
    assert environments.loc["cpu-pytorch", "cells_compared"] == 1 and environments.loc["cpu-pytorch", "cells_not_compared"] == 2
    assert main(["compare", str(a), str(b)]) == 0
    printed = capsys.readouterr().out
    assert "not compared: cpu-torchscript (only in run A), cpu-tensorflow (only in run B)" in printed
    assert "2 cells not compared" in printed


def test_rounds_pool_samples_and_the_interval_spans_rounds(tmp_path):
    a = write_run(tmp_path / "a", {CELLS[0]: [tight(0.10, 5, seed) for seed in range(3)]}, rounds=3)
    b = write_run(tmp_path / "b", {CELLS[0]: [tight(0.13, 5, seed) for seed in range(3, 6)]}, rounds=3)
    comparison = compare.compare_runs(a, b)
    cell = comparison.cells.iloc[0]
    pooled_a = sum((tight(0.10, 5, seed) for seed in range(3)), [])
    pooled_b = sum((tight(0.13, 5, seed) for seed in range(3, 6)), [])
    assert (cell.n_samples_a, cell.n_samples_b) == (15, 15)
    assert cell.p_value == pytest.approx(mannwhitneyu(pooled_a, pooled_b, alternative="two-sided").pvalue)
    assert cell.verdict == "slower" and comparison.environments.interval_over.tolist() == ["rounds"]


def test_disturbed_cells_make_the_environment_inconclusive(tmp_path):
    a, b = runs(tmp_path, 1.3)
    results = b / "cpu-pytorch" / "results.csv"
    frame = pd.read_csv(results, keep_default_na=False, dtype=str)
    frame.loc[0, "disturbed"] = "True"
    frame.to_csv(results, index=False)
    comparison = compare.compare_runs(a, b)
    assert comparison.cells.disturbed.tolist() == ["B", "", ""]
    environment = comparison.environments.iloc[0]
    assert environment.verdict == "inconclusive" and environment.disturbed_cells == "bert-base-cased 1x8 (B)"
    assert main(["compare", str(a), str(b)]) == 0


@pytest.mark.parametrize(
    "case, message",
    [
        ("not a run", "is not a run"),
        ("no environment in common", "no environment in common"),
        ("threshold 0", "--threshold must be between 0 and 1"),
        ("threshold 1.5", "--threshold must be between 0 and 1"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, case, message):
    a, b = runs(tmp_path, 1.0)
    (tmp_path / "empty").mkdir()
    write_run(tmp_path / "other", {CELLS[0]: tight(0.1)}, environment="cpu-tensorflow")
    args = {
        "not a run": [str(tmp_path / "empty"), str(b)],
        "no environment in common": [str(a), str(tmp_path / "other")],
        "threshold 0": [str(a), str(b), "--threshold", "0"],
        "threshold 1.5": [str(a), str(b), "--threshold", "1.5"],
    }[case]  # fmt: skip
    assert main(["compare", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and len(captured.err.strip().splitlines()) == 1 and captured.out == ""
    assert not (b / "compare-a").exists()


@pytest.mark.e2e
def test_two_real_smoke_runs(tmp_path, capsys):
    for run in ("first", "second"):
        run_environment(
            {
                "environment": "cpu-pytorch", "framework": "pytorch", "mode": "eager", "models": ["bert-base-cased"],
                "model_scale": "tiny", "batch_sizes": [1], "sequence_lengths": [8], "repeat": 5, "number": 1,
                "output_dir": str(tmp_path / run / "cpu-pytorch"),
            },
            progress=False,
        )  # fmt: skip
    assert main(["compare", str(tmp_path / "first"), str(tmp_path / "second")]) in (0, 1)
    out = tmp_path / "second" / "compare-first"
    cells = pd.read_csv(out / "cells.csv")
    assert cells[["environment", "model", "batch_size", "sequence_length"]].values.tolist() == [["cpu-pytorch", "bert-base-cased", 1, 8]]
    assert set(cells.verdict) <= {"faster", "slower", "no change"} and cells.n_samples_a.tolist() == [5] and 0 < cells.p_value[0] <= 1
    assert pd.read_csv(out / "environments.csv").verdict.isin(["faster", "slower", "no clear difference", "inconclusive"]).all()
    assert (out / "compare.html").is_file() and "report:" in capsys.readouterr().out


def test_runs_from_before_the_build_cache_and_rounds_still_compare(tmp_path) -> None:
    """results.csv files with the columns of an early version (no rounds, attempts, build times): compared as before."""
    for name in ("a", "b"):
        source, target = PROJECT_ROOT / "outputs" / "reference" / "cpu-pytorch", tmp_path / name / "cpu-pytorch"
        target.mkdir(parents=True)
        with open(source / "results.csv", newline="") as old, open(target / "results.csv", "w", newline="") as new:
            writer = csv.DictWriter(new, fieldnames=OLD_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(csv.DictReader(old))
        (target / "environment.json").write_text(json.dumps(json.loads((source / "environment.json").read_text())))
    comparison = compare.compare_runs(tmp_path / "a", tmp_path / "b")
    env = comparison.environments.iloc[0]
    assert env.verdict == "no clear difference" and env.geomean_change == 0 and env.threshold == compare.DEFAULT_THRESHOLD


def test_a_generate_cell_is_never_compared_with_a_forward_cell_of_the_same_shape(tmp_path):
    """Runs A (forward) and B (generation) of the same environment and shapes: no cell is in both, none is compared."""
    a = write_run(tmp_path / "a", {cell: tight(0.1, seed=i) for i, cell in enumerate(CELLS)})
    b = write_run(tmp_path / "b", {cell: tight(0.5, seed=i) for i, cell in enumerate(CELLS)}, environment="cpu-pytorch")
    results = b / "cpu-pytorch" / "results.csv"
    frame = pd.read_csv(results, keep_default_na=False)
    frame["workload"] = "generate"
    frame.to_csv(results, index=False)
    cells = compare.compare_runs(a, b).cells
    assert sorted(cells["workload"]) == ["forward"] * len(CELLS) + ["generate"] * len(CELLS)
    assert set(cells["verdict"]) == {compare.NOT_COMPARED}


@pytest.fixture(scope="module")
def checkpoint_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real runs of a tiny saved BERT, each from a folder of its own (1 cell, eager PyTorch): `a` and `b` one checkpoint
    copied to two folders named `model`, `c` another checkpoint (other weights) whose folder ends as `a`'s (`a/model`)."""
    root = tmp_path_factory.mktemp("checkpoint-runs")
    source = save_bert(root / "saved", tokenizer=False)
    folders = {"a": shutil.copytree(source, root / "a" / "model"), "b": shutil.copytree(source, root / "b" / "model")}
    folders["c"] = save_bert(root / "c" / "a" / "model", tokenizer=False, seed=1)
    for run, folder in folders.items():
        run_environment(
            {
                "environment": "cpu-pytorch", "framework": "pytorch", "mode": "eager", "models": [str(folder)], "batch_sizes": [1],
                "sequence_lengths": [8], "repeat": 5, "number": 1, "warmup": 0, "remeasure": 0, "output_dir": str(root / f"run_{run}" / "cpu-pytorch"),
            },
            progress=False,
        )  # fmt: skip
    return {**{f"run_{run}": root / f"run_{run}" for run in folders}, **folders}


def test_one_checkpoint_copied_to_two_folders_compares_by_its_digest(checkpoint_runs, capsys):
    runs_, digest = checkpoint_runs, checkpoint_digest(checkpoint_runs["a"])
    assert read_results(runs_["run_b"] / "cpu-pytorch")["model_digest"].tolist() == [digest]
    assert main(["compare", str(runs_["run_a"]), str(runs_["run_b"])]) in (0, 1)
    out = runs_["run_b"] / "compare-run_a"
    cells = pd.read_csv(out / "cells.csv")
    assert cells[["model", "status_a", "status_b"]].values.tolist() == [["a/model", "ok", "ok"]] and cells.verdict[0] != compare.NOT_COMPARED
    assert pd.read_csv(out / "differences.csv").query("key == 'models'").empty  # the folders differ, the checkpoint does not
    printed = capsys.readouterr().out
    assert f"note: one checkpoint under two names: a/model in A, b/model in B (sha256 {digest[:12]})" in printed and "no cell is ok" not in printed
    assert "one checkpoint under two names" in (out / "compare.html").read_text()


def test_different_checkpoints_under_one_name_are_flagged(checkpoint_runs):
    comparison = compare.compare_runs(checkpoint_runs["run_a"], checkpoint_runs["run_c"])
    a, c = (checkpoint_digest(checkpoint_runs[run])[:12] for run in "ac")
    assert comparison.notes == (f"different checkpoints under one name: a/model is sha256 {a} in A, {c} in B",)
    assert comparison.cells[["model", "status_a", "status_b"]].values.tolist() == [["a/model", "ok", "ok"]]  # one architecture's time, compared
    assert comparison.differences[["key", "a", "b"]].values.tolist() == [["models", f'["sha256 {a}"]', f'["sha256 {c}"]']]
    assert "note: different checkpoints under one name: a/model" in "\n".join(compare.summary_lines(comparison))


def test_a_load_scenarios_cells_match_by_digest_too(tmp_path):
    """Load-only runs of one checkpoint from two folders (rows written by hand): their offline cells are compared."""
    for run, name, rate in (("a", "tiny-bert", 100.0), ("b", "bert-copy", 101.0)):
        folder = tmp_path / run / "cpu-pytorch"
        with ResultsWriter(folder) as writer:
            for round_number in (1, 2):
                cell = {**ENVIRONMENT, "environment": "cpu-pytorch", "model": f"/{run}/{name}", "batch_size": 8, "sequence_length": 64, "workload": "forward"}
                writer.append(make_row({**cell, "scenario": "offline", "round": round_number, "samples_per_s": rate, "valid": True, "model_digest": "d" * 64}, "ok"))
        write_json(folder / "environment.json", info("cpu-pytorch", output_dir=str(folder)))
    comparison = compare.compare_runs(tmp_path / "a", tmp_path / "b")
    assert comparison.cells[["model", "scenario", "status_a", "status_b"]].values.tolist() == [["tiny-bert", "offline", "ok", "ok"]]
    assert comparison.notes == (f"one checkpoint under two names: tiny-bert in A, bert-copy in B (sha256 {'d' * 12}); compared as tiny-bert",)


def write_quality_run(run: Path, ratios: dict[str, tuple[float, float, float]]) -> Path:
    """A run whose environments scored similarity.jsonl (40 pairs) with these (ratio, low, high) to float32's, each
    verdict written as the kernel writes it, at the 99% target."""
    from benchlib.workloads.quality import verdict

    for environment, (ratio, low, high) in ratios.items():
        framework, mode, precision = ("pytorch", "eager", "float32") if environment == "cpu-pytorch" else ("onnxruntime", "session", "int8")
        quality = {
            "quality_data": "similarity.jsonl", "quality_metric": "spearman", "quality_value": 0.87 * ratio, "quality_low": 0.8 * ratio,
            "quality_high": 0.93 * ratio, "quality_reference": 0.87, "quality_ratio": ratio, "quality_ratio_low": low, "quality_ratio_high": high,
            "quality_target": 0.99, "quality_verdict": verdict(ratio, low, high, 0.99), "quality_n": 40,
        }  # fmt: skip
        folder = run / environment
        with ResultsWriter(folder) as writer:
            cell = {**ENVIRONMENT, "environment": environment, "framework": framework, "mode": mode, "precision": precision,
                    "model": "all-MiniLM-L6-v2", "batch_size": 1, "sequence_length": 8, **quality}  # fmt: skip
            writer.append(make_row(cell, "ok", Measurement(tuple(tight(0.01)), number=1)))
        write_json(folder / "environment.json", info(environment, output_dir=str(folder)))
    return run


def test_a_quality_verdict_that_moved_is_reported_with_both_intervals_and_one_undecided_in_both_runs_is_said(tmp_path, capsys):
    reference = (1.0, 1.0, 1.0)
    a = write_quality_run(tmp_path / "a", {"cpu-pytorch": reference, "cpu-onnxruntime-int8": (0.95, 0.92, 0.98)})
    b = write_quality_run(tmp_path / "b", {"cpu-pytorch": reference, "cpu-onnxruntime-int8": (0.997, 0.993, 1.001)})
    main(["compare", str(a), str(b)])
    printed = capsys.readouterr().out
    assert (
        "quality changed: cpu-onnxruntime-int8 all-MiniLM-L6-v2 spearman 0.8265 -> 0.86739 (A's 95% interval 0.76 to 0.8835; verdict below -> keeps; "
        "ratio to float32's 0.95 (0.92 to 0.98) in A, 0.997 (0.993 to 1.001) in B)"
    ) in printed
    c = write_quality_run(tmp_path / "c", {"cpu-pytorch": reference, "cpu-onnxruntime-int8": (1.0005, 0.964, 1.044)})
    d = write_quality_run(tmp_path / "d", {"cpu-pytorch": reference, "cpu-onnxruntime-int8": (0.987, 0.936, 1.029)})
    main(["compare", str(c), str(d)])
    printed = capsys.readouterr().out
    assert (
        "quality undecided in both runs: cpu-onnxruntime-int8 all-MiniLM-L6-v2 spearman, ratio to float32's 1 (0.964 to 1.044) in A, "
        "0.987 (0.936 to 1.029) in B: neither run's examples decide whether it keeps the target; about "
    ) in printed
    assert "quality changed" not in printed and "cpu-pytorch all-MiniLM" not in printed
