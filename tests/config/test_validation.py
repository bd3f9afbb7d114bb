"""Every bad parameter is refused before anything starts: one line naming the file and field, exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchlib.cli import main
from benchlib.paths import PROJECT_ROOT

CASES = {
    "unknown model": ({"models": ["bert-large"]}, "models: unknown model bert-large: not in the catalogue, not a folder and not a Hub id (owner/name); the catalogue has: gpt2, bert-base-cased"),
    "unknown framework": ({"framework": "jax"}, "framework: must be one of onnxruntime, openai, openvino, pytorch, tensorflow, not 'jax'"),
    "unknown mode": ({"mode": "jit"}, "mode: mode for pytorch must be one of eager, torchscript, compile, not 'jit'"),
    "mode the framework lacks": ({"mode": "xla"}, "mode: mode for pytorch must be one of eager, torchscript, compile, not 'xla'"),
    "unknown device": ({"device": "tpu"}, "device: must be cpu, cuda or cuda:N, not 'tpu'"),
    "empty sizes": ({"batch_sizes": []}, "batch_sizes: List should have at least 1 item"),
    "negative size": ({"sequence_lengths": [8, -64]}, "sequence_lengths: sizes must be positive integers"),
    "non-integer size": ({"batch_sizes": [1.5]}, "batch_sizes.0: Input should be a valid integer"),
    "boolean size": ({"batch_sizes": [True]}, "batch_sizes.0: Input should be a valid integer"),
    "repeat below 1": ({"repeat": 0}, "repeat: must be a positive integer or 'auto', not 0"),
    "number below 1": ({"number": 0}, "number: Input should be greater than or equal to 1"),
    "threads neither a count nor cores": ({"num_threads": "many"}, "num_threads: must be a positive integer, 'cores' (every CPU this process may use) or null"),
    "no threads": ({"num_threads": 0}, "num_threads: must be a positive integer, 'cores'"),
    "no inter-op threads": ({"num_interop_threads": 0}, "num_interop_threads: Input should be greater than or equal to 1"),
    "interference above 1": ({"max_interference": 1.5}, "max_interference: Input should be less than or equal to 1"),
    "negative remeasure": ({"remeasure": -1}, "remeasure: Input should be greater than or equal to 0"),
    "negative warm-up time": ({"warmup_max_seconds": -1}, "warmup_max_seconds: Input should be greater than or equal to 0"),
    "unknown key": ({"batch_size": [1]}, "batch_size: unknown parameter; allowed: environment, framework, mode"),
    "unknown workload": ({"workload": "train"}, "workload: Input should be 'forward' or 'generate'"),
    "generate without prompts": ({"workload": "generate"}, "workload: generate needs prompt_lengths, e.g. [32, 128]"),
    "generate with sequence lengths": ({"workload": "generate", "prompt_lengths": [8]}, "workload: generate takes prompt_lengths, not sequence_lengths (which this grid gives)"),
    "generate with another task": ({"workload": "generate", "prompt_lengths": [8, 300], "task": "fill-mask"}, "task: workload generate needs task causal-lm, not 'fill-mask'"),
    "prompts in a forward grid": ({"prompt_lengths": [8]}, "prompt_lengths: only workload generate has prompts; a forward grid gives sequence_lengths"),
    "one new token": ({"new_tokens": 1}, "new_tokens: Input should be greater than or equal to 2"),
    "requests in a cell grid": ({"request_lengths": [32]}, "request_lengths: only a load scenario (single-stream, multi-stream, server, offline) has requests"),
    "a token bound on forward passes": ({"ttft_bound_ms": 200}, "ttft_bound_ms: a token bound needs workload: generate (a forward pass has no tokens)"),
    "a latency percentile in a cell grid": ({"latency_percentile": 90}, "latency_percentile: only a load scenario (single-stream, multi-stream, server) is judged at a percentile"),
}
# The same, on a load scenario's grid (load-smoke).
LOAD_CASES = {
    "unknown scenario": ({"scenario": "burst"}, "scenario.0: Input should be 'cell', 'single-stream', 'multi-stream', 'server', 'offline' or 'concurrency'"),
    "cell beside a load scenario": ({"scenario": ["cell", "offline"]}, "scenario: cell and the load scenarios are measured in grids of their own, not together"),
    "sequence lengths under load": ({"sequence_lengths": [8]}, "sequence_lengths: a load scenario takes request_lengths (the lengths of its requests), not sequence_lengths"),
    "batch sizes under load": ({"batch_sizes": [2]}, "batch_sizes: a load scenario batches its requests itself, up to max_batch; give max_batch"),
    "a request length of 0": ({"request_lengths": [8, 0]}, "request_lengths: sizes must be positive integers"),
    "max_batch below 1": ({"max_batch": 0}, "max_batch: Input should be greater than or equal to 1"),
    "a negative batch timeout": ({"batch_timeout_ms": -1}, "batch_timeout_ms: Input should be greater than or equal to 0"),
    "no stream": ({"streams": 0}, "streams: Input should be greater than or equal to 1"),
    "a latency bound of 0": ({"latency_bound_ms": 0}, "latency_bound_ms: Input should be greater than 0"),
    "a percentile LoadGen's summary has no column for": ({"latency_percentile": 95}, "latency_percentile: Input should be 90 or 99"),
    "a token bound under load on forward passes": ({"tpot_bound_ms": 50}, "tpot_bound_ms: a token bound needs workload: generate (a forward pass has no tokens)"),
    "no duration": ({"min_duration_s": 0}, "min_duration_s: Input should be greater than 0"),
    "no queries": ({"min_query_count": 0}, "min_query_count: Input should be greater than or equal to 1"),
    "no trials": ({"max_trials": 0}, "max_trials: Input should be greater than or equal to 1"),
    "no samples per query": ({"samples_per_query": 0}, "samples_per_query: Input should be greater than or equal to 1"),
    "prompt lengths under load": (
        {"workload": "generate", "models": ["distilgpt2"], "prompt_lengths": [8], "scenario": "offline"},
        "prompt_lengths: a load scenario takes request_lengths (the lengths of its requests' prompts), not prompt_lengths",
    ),
    "streams when generating under load": (
        {"workload": "generate", "models": ["distilgpt2"], "streams": 2, "scenario": "offline"},
        "streams: a load scenario that generates is served by one stream",
    ),
    "a token bound of 0": ({"workload": "generate", "models": ["distilgpt2"], "ttft_bound_ms": 0, "tpot_bound_ms": 5}, "ttft_bound_ms: Input should be greater than 0"),
}


@pytest.mark.parametrize(("grid", "case"), [("smoke", case) for case in CASES] + [("load-smoke", case) for case in LOAD_CASES])
def test_bad_value_in_a_params_file(grid: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values, message = (CASES if grid == "smoke" else LOAD_CASES)[case]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(values))
    out = tmp_path / "run"
    assert main(["run", "--grid", grid, "--environments", "cpu-pytorch", "--params", str(bad), "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("cpu-pytorch: ") and str(bad) in lines[0], lines
    assert not out.exists()  # nothing started


def test_a_generating_server_without_both_token_bounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bound that is missing is named (no file gave it), before anything starts."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"workload": "generate", "models": ["distilgpt2"], "ttft_bound_ms": 100}))
    out = tmp_path / "run"
    assert main(["run", "--grid", "load-smoke", "--environments", "cpu-pytorch", "--params", str(bad), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "cpu-pytorch: tpot_bound_ms: the server scenario of workload generate is judged by the time to first token and per output "
        "token at latency_percentile; give ttft_bound_ms and tpot_bound_ms"
    ]
    assert not out.exists()


def test_unreadable_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("models: [gpt2\nrepeat: 3\n")
    assert main(["run", "--params", str(bad), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"{bad}: unreadable YAML: line 2, column 7: expected ',' or ']', but got ':'"


def test_output_folder_that_cannot_be_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(["run", "--grid", "smoke", "--out", str(blocker / "run")]) == 2
    assert capsys.readouterr().err.strip() == f"--out: {blocker / 'run'}: cannot be created, {blocker} is not a folder"


@pytest.mark.e2e
@pytest.mark.parametrize("missing", ["dask", "distributed"])
def test_cluster_without_its_extra_says_which_pip_line_is_missing(missing: str, tmp_path: Path) -> None:
    """In a Python where `missing` cannot be imported (as when the cluster extra is not installed): one line, exit status 2."""
    out = tmp_path / "run"
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"  # importing it now fails as it does when it is not installed
        "from benchlib.cli import main\n"
        f"sys.exit(main(['run', '--cluster', 'tcp://127.0.0.1:8786', '--grid', 'smoke', '--out', {str(out)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr.strip().splitlines()) == (2, [f"--cluster: {missing} is not installed: pip install 'benchlib[cluster]'"])
    assert not out.exists()  # nothing started
