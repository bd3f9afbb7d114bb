"""`python -m benchlib`: arguments, parameter files merged as papermill's -f, failures confined to their environment."""

from __future__ import annotations

import datetime
import signal
import sys
from pathlib import Path

import pytest
import yaml

from benchlib import read_results
from benchlib.cli import main
from benchlib.config.jobs import DEFAULT_ENVIRONMENTS, default_run_dir, environment_sets, expand_environments, plan_run
from benchlib.config.params import ParameterError, notebook_parameters
from benchlib.machine import package_version
from benchlib.paths import PARAMETERS_DIR, PROJECT_ROOT
from tests.kernels import kill_mid_cell, running


def write_yaml(path: Path, values: dict) -> Path:
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def test_shipped_parameter_files_all_validate(tmp_path: Path) -> None:
    environments = sorted(path.stem for path in PARAMETERS_DIR.glob("environments/*.yaml"))
    study = [f"{device}-{name}" for device in ("cpu", "gpu") for name in ("pytorch", "torchscript", "tensorflow", "tensorflow-xla")]
    today = ["cpu-torch-compile", "cpu-pytorch-bf16", "cpu-pytorch-eager-attention", "cpu-onnxruntime", "cpu-onnxruntime-int8",
             "cpu-openvino", "cpu-openvino-bf16", "cpu-openvino-int8", "gpu-torch-compile", "gpu-pytorch-fp16", "gpu-pytorch-bf16",
             "gpu-pytorch-tf32", "gpu-pytorch-flash-attention", "gpu-torch-compile-cudagraphs", "gpu-torch-compile-max-autotune",
             "gpu-onnxruntime", "gpu-onnxruntime-tensorrt"]  # fmt: skip
    engines = ["cpu-transformers-serve", "cpu-vllm", "gpu-vllm"]  # serving engines, started by the kit
    assert environments == sorted(study + today + engines)
    for grid, models in (("quick", 4), ("quick-all", 10), ("article", 10), ("today", 4), ("smoke", 14)):
        jobs = plan_run(tmp_path, grid, environments)
        assert [job.name for job in jobs] == environments
        assert {job.params.device for job in jobs if job.name.startswith("gpu-")} == {"cuda"}
        assert all(len(job.params.models) == models for job in jobs)
    article = plan_run(tmp_path, "article", ["cpu-pytorch"])[0].params
    assert (article.batch_sizes, article.sequence_lengths) == ([1, 2, 4, 8], [8, 64, 128, 256, 512, 1024])
    assert (article.repeat, article.number, article.model_scale) == (30, 3, "full")
    generating = environment_sets()["generate"]
    for grid, models, prompts in (("generate-quick", 2, [32, 128]), ("generate-article", 6, [32, 128, 512]), ("generate-smoke", 2, [8])):
        jobs = plan_run(tmp_path, grid, generating)
        assert [job.name for job in jobs] == generating and all(len(job.params.models) == models for job in jobs)
        assert {(job.params.workload, job.params.task, tuple(job.params.prompt_lengths)) for job in jobs} == {("generate", "causal-lm", tuple(prompts))}


def test_defaults_are_the_study_environments_with_torch_compile_and_onnxruntime_on_the_quick_grid(tmp_path: Path) -> None:
    jobs = plan_run(tmp_path / "run")
    names = ["cpu-pytorch", "cpu-torchscript", "cpu-tensorflow", "cpu-tensorflow-xla", "cpu-onnxruntime", "cpu-torch-compile"]
    assert [job.name for job in jobs] == expand_environments(DEFAULT_ENVIRONMENTS) == names
    assert [(job.params.framework, job.params.mode, job.params.device) for job in jobs] == [
        ("pytorch", "eager", "cpu"), ("pytorch", "torchscript", "cpu"), ("tensorflow", "function", "cpu"), ("tensorflow", "xla", "cpu"),
        ("onnxruntime", "session", "cpu"), ("pytorch", "compile", "cpu"),
    ]  # fmt: skip
    quick = yaml.safe_load((PARAMETERS_DIR / "grids" / "quick.yaml").read_text())
    assert all(job.params.models == quick["models"] and job.params.model_scale == "full" for job in jobs)
    assert all(job.params.rounds == 2 for job in jobs)  # the default job repeats: its intervals are over processes
    assert [job.output_dir for job in jobs] == [tmp_path / "run" / name for name in names]
    stamp = default_run_dir(datetime.datetime(2025, 1, 2, 3, 4, 5))
    assert stamp == PROJECT_ROOT / "outputs" / "2025-01-02_030405"


def test_environment_sets_expand_and_all_is_every_environment_of_this_machine(tmp_path: Path) -> None:
    cpu = sorted(path.stem for path in (PARAMETERS_DIR / "environments").glob("cpu-*.yaml"))
    assert [job.name for job in plan_run(tmp_path, "smoke", ["all"])] == cpu  # no GPU on this machine
    assert expand_environments(["study", "cpu-pytorch", "cpu-onnxruntime"]) == [
        "cpu-pytorch", "cpu-torchscript", "cpu-tensorflow", "cpu-tensorflow-xla", "cpu-onnxruntime",
    ]  # fmt: skip
    with pytest.raises(ParameterError, match=r"environment 'fastest' not found; available: .*; sets: study, default, today, gpu-study, gpu-default, generate, gpu-generate, all, gpu"):
        plan_run(tmp_path, "smoke", ["fastest"])


def test_parameter_files_merge_in_order_grid_environment_then_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grid = write_yaml(tmp_path / "grid.yaml", {"models": ["gpt2"], "batch_sizes": [1], "sequence_lengths": [8], "repeat": 2, "number": 1})
    env = write_yaml(tmp_path / "env.yaml", {"framework": "tensorflow", "mode": "xla", "repeat": 3, "number": 4})
    first = write_yaml(tmp_path / "first.yaml", {"repeat": 5, "models": ["bert-base-cased"], "output_dir": "ignored"})
    second = write_yaml(tmp_path / "second.yaml", {"repeat": 7})
    monkeypatch.chdir(tmp_path)
    [job] = plan_run(Path("relative-run"), grid, [env], [first, second])
    assert job.name == "env"  # named after its file when it does not say
    assert (job.params.repeat, job.params.number, job.params.models, job.params.framework) == (7, 4, ["bert-base-cased"], "tensorflow")
    assert job.output_dir == tmp_path / "relative-run" / "env"  # absolute: the kernel works in notebooks/
    assert job.sources == (grid, env, first, second)


def test_bad_parameters_are_reported_one_line_each_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bogus = write_yaml(tmp_path / "bogus.yaml", {"environment": "cpu-bogus", "framework": "jax", "mode": "eager"})
    typo = write_yaml(tmp_path / "typo.yaml", {"repaet": 3})
    with pytest.raises(ParameterError) as error:
        plan_run(tmp_path, "smoke", ["cpu-pytorch", bogus, "cpu-nope"])
    lines = str(error.value).splitlines()
    assert any("'cpu-nope' not found" in line and "cpu-tensorflow-xla" in line for line in lines)
    assert any(line.startswith("cpu-bogus: framework: must be one of onnxruntime, openai, openvino, pytorch, tensorflow") and str(bogus) in line for line in lines)

    run_dir = tmp_path / "run"
    assert main(["run", "--grid", "smoke", "--environments", f"cpu-pytorch,{bogus}", "--out", str(run_dir), "--no-summary"]) == 2
    assert "cpu-bogus: framework: must be one of onnxruntime, openai, openvino, pytorch, tensorflow" in capsys.readouterr().err
    assert main(["run", "--grid", "smoke", "--params", str(typo), "--out", str(run_dir), "--no-summary"]) == 2
    assert "repaet: unknown parameter" in capsys.readouterr().err
    assert main(["run", "--grid", "nope", "--out", str(run_dir)]) == 2
    grids = ", ".join(sorted(path.stem for path in (PARAMETERS_DIR / "grids").glob("*.yaml")))  # every grid the kit ships
    assert f"grid 'nope' not found; available: {grids} (or a path to a .yaml file)" in capsys.readouterr().err and "load-quick" in grids
    assert main(["run", "--params", str(tmp_path / "missing.yaml"), "--out", str(run_dir)]) == 2
    assert "missing.yaml: no such parameter file" in capsys.readouterr().err
    assert not run_dir.exists()  # nothing started


def test_duplicate_and_unsafe_environment_names_are_refused(tmp_path: Path) -> None:
    assert [job.name for job in plan_run(tmp_path, "smoke", ["cpu-pytorch", "study"])] == expand_environments(["study"])  # named once
    twin = write_yaml(tmp_path / "twin.yaml", {"environment": "cpu-pytorch", "framework": "pytorch", "mode": "eager"})
    with pytest.raises(ParameterError, match="'cpu-pytorch' appears more than once"):
        plan_run(tmp_path, "smoke", ["cpu-pytorch", twin])
    escape = write_yaml(tmp_path / "escape.yaml", {"environment": "../up", "framework": "pytorch", "mode": "eager"})
    with pytest.raises(ParameterError, match="environment: '../up' must start with a letter or digit"):
        plan_run(tmp_path, "smoke", [escape])


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([])
    assert exit_.value.code == 2
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--bogus"])
    assert exit_.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err
    assert main(["run", "--environments", " , ", "--out", str(tmp_path)]) == 2
    assert main(["summary", str(tmp_path / "no-run")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_notebook_parameters_takes_only_benchmark_parameters() -> None:
    namespace = {"environment": "e", "repeat": 3, "seed": 1, "rows": object(), "__name__": "__main__"}
    assert notebook_parameters(namespace) == {"environment": "e", "repeat": 3, "seed": 1}


@pytest.mark.e2e
@pytest.mark.full  # make test: a killed kernel costs its cell alone (tests/launch/test_crash_recovery.py); an engine that dies, its environment alone (tests/backends/test_serving_engines.py)
def test_an_environment_whose_kernel_dies_does_not_stop_the_others(tmp_path: Path) -> None:
    """The first environment's kernel is killed mid-sweep (no restart allowed); the second still runs; the exit status says one failed.

    The kill comes once a row is written and the next cell is in flight (`kill_mid_cell`), so that on any machine,
    however fast or slow, the cell in flight is the one that ends `crashed`. The signal is SIGFPE, as a runtime's
    division by zero sends it: the row says so, and which runtime was measuring."""
    victim = write_yaml(tmp_path / "victim.yaml", {"environment": "cpu-victim", "framework": "pytorch", "mode": "eager", "num_threads": 1, "repeat": 200})
    models = write_yaml(tmp_path / "models.yaml", {"models": ["gpt2", "bert-base-cased", "distilgpt2"]})
    run_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "benchlib", "run", "--grid", "smoke", "--environments", f"{victim},cpu-pytorch",
        "--params", str(models), "--out", str(run_dir), "--no-summary", "--no-limits", "--quiet", "--max-restarts", "0",
    ]  # fmt: skip
    with running(command) as process:
        killed = kill_mid_cell(run_dir / "cpu-victim", process, min_rows=1, signum=signal.SIGFPE)  # a cell is done, the next one in flight
        output, _ = process.communicate(timeout=300)

    assert process.returncode == 1, output
    assert "[1/2] cpu-victim: FAILED" in output and "Kernel died" in output
    assert "1 of 2 environments succeeded" in output and "failed: cpu-victim" in output
    assert output.count("energy (cpu): ") == 1  # the energy counter, or that there is none and why: once per device
    victim_rows = read_results(run_dir / "cpu-victim")
    assert 2 <= len(victim_rows) < 6 and set(victim_rows["status"]) == {"ok", "crashed"}
    assert victim_rows["status"].iloc[-1] == "crashed"  # the cell in flight when the kernel died
    torch = f"torch {package_version('torch')}"
    assert victim_rows["reason"].iloc[-1].startswith(f"kernel died (SIGFPE: Floating point exception) while measuring with {torch} (measuring since ")
    assert tuple(victim_rows[["model", "batch_size", "sequence_length"]].iloc[-1]) == (killed["model"], killed["batch_size"], killed["sequence_length"])
    assert (run_dir / "cpu-victim" / "benchmark.ipynb").exists() and (run_dir / "cpu-victim" / "kernel.log").exists()
    rows = read_results(run_dir / "cpu-pytorch")  # the next environment ran in full, with the --params models
    assert sorted(set(rows["model"])) == ["bert-base-cased", "distilgpt2", "gpt2"]
    assert len(rows) == 6 and set(rows["status"]) == {"ok"}
