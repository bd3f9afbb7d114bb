"""Each runtime's own serving knobs: declared in its options model (a wrong name or value refused with the allowed ones),
applied where the runtime reads them, and read back from the runtime; a knob read when a process starts is applied in a
kernel started with it, and refused in one that was not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchlib.backends import kernel_variables, load_backend
from benchlib.cli import main
from benchlib.config.catalogue import get_model
from benchlib.config.params import ParameterError, validate_params
from benchlib.workloads.inputs import random_ids
from tests.frameworks import run_python


def knob_params(tmp_path: Path, framework: str, mode: str, options: dict) -> dict:
    return dict(
        environment="knobs", framework=framework, mode=mode, options=options, models=["bert-base-cased"], model_scale="tiny",
        batch_sizes=[1], sequence_lengths=[8], output_dir=str(tmp_path / "knobs"),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("framework", "mode", "options", "message"),
    [
        ("onnxruntime", "session", {"execution_mode": "async"}, "options: for onnxruntime: execution_mode: Input should be 'sequential' or 'parallel'"),
        ("onnxruntime", "session", {"intra_op_spinning": "sometimes"}, "options: for onnxruntime: intra_op_spinning: Input should be a valid boolean"),
        ("openvino", "compiled", {"num_streams": 0}, "options: for openvino: num_streams: must be a positive integer, AUTO (the plugin's choice) or null"),
        ("openvino", "compiled", {"num_streams": "many"}, "options: for openvino: num_streams: must be a positive integer, AUTO (the plugin's choice) or null (as the hint decides), not 'many'"),
        ("pytorch", "eager", {"omp_wait_policy": "sleepy"}, "options: for pytorch: omp_wait_policy: Input should be 'active' or 'passive'"),
        ("pytorch", "eager", {"kmp_blocktime": 0}, "options: for pytorch: kmp_blocktime: Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_a_wrong_knob_or_value_is_refused_with_what_is_allowed(tmp_path: Path, framework: str, mode: str, options: dict, message: str) -> None:
    with pytest.raises(ParameterError) as caught:
        validate_params(knob_params(tmp_path, framework, mode, options))
    assert message in str(caught.value) and len(str(caught.value).splitlines()) == 1


@pytest.mark.e2e
def test_onnxruntimes_execution_mode_and_spinning_reach_its_session() -> None:
    backend = load_backend("onnxruntime", "session", num_threads=1, num_interop_threads=2, options={"execution_mode": "parallel", "intra_op_spinning": False})
    built = backend.build(get_model("bert-base-cased"), "tiny")
    backend.prepare(built, backend.as_inputs(random_ids(1000, 1, 8, 0)))()
    session = built.runner.get_session_options()  # the session's own reading
    assert session.execution_mode.name == "ORT_PARALLEL" and session.inter_op_num_threads == 2
    assert session.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert {key: backend.settings()[key] for key in ("execution_mode", "intra_op_spinning")} == {"execution_mode": "parallel", "intra_op_spinning": False}
    default = load_backend("onnxruntime", "session").settings()
    assert (default["execution_mode"], default["intra_op_spinning"]) == ("sequential", True)


STREAMS = """
    import json, os
    os.sched_setaffinity(0, range(os.cpu_count()))  # a test worker is pinned to its share; the plugin gives no more streams than CPUs
    from benchlib.backends import load_backend
    from benchlib.config.catalogue import get_model
    read = {{}}
    for streams in (2, 1):
        backend = load_backend("openvino", "compiled", num_threads=2, options={{"performance_hint": "THROUGHPUT", "num_streams": streams}})
        backend.build(get_model("bert-base-cased"), "tiny")
        read[streams] = backend.settings()
    print(json.dumps(read))
"""


@pytest.mark.e2e
def test_openvinos_streams_are_the_compiled_models() -> None:
    read = run_python(STREAMS.format())  # a process of its own: the plugin reads the CPUs it may use once
    assert read["2"]["num_streams"] == "2" and read["2"]["performance_hint"] == "THROUGHPUT"  # read back from the compiled model
    assert read["1"]["num_streams"] == "1"


def test_a_knob_read_when_the_runtime_loads_is_refused_in_a_process_not_started_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kernel_variables("pytorch", {"omp_wait_policy": "passive"}) == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_DISPLAY_ENV": "TRUE"}
    assert kernel_variables("pytorch", {}) == {} and kernel_variables("onnxruntime", {"intra_op_spinning": False}) == {}
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    with pytest.raises(ValueError, match=r"only in a kernel started with OMP_WAIT_POLICY=PASSIVE OMP_DISPLAY_ENV=TRUE \(its runtime reads them once"):
        load_backend("pytorch", "eager", options={"omp_wait_policy": "passive"})


@pytest.mark.e2e
def test_the_runner_starts_the_kernel_with_a_process_start_knob_and_the_runtime_reads_it(tmp_path: Path) -> None:
    """OMP_WAIT_POLICY=PASSIVE: in the kernel's own environment (environment.json records what the process started with)
    and in the OpenMP runtime's reading (OMP_DISPLAY_ENV makes it print its settings to the kernel's log)."""
    env = tmp_path / "cpu-pytorch-passive.yaml"
    env.write_text(yaml.safe_dump({"framework": "pytorch", "mode": "eager", "options": {"omp_wait_policy": "passive"}}), encoding="utf-8")
    run = tmp_path / "run"
    assert main(["run", "--grid", "smoke", "--models", "bert-base-cased", "--environments", str(env), "--out", str(run), "--no-summary", "--no-limits", "--quiet"]) == 0
    recorded = json.loads((run / "cpu-pytorch-passive" / "environment.json").read_text(encoding="utf-8"))
    assert recorded["threads"]["omp_wait_policy"] == "PASSIVE"
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in (run / "cpu-pytorch-passive" / "kernel.log").read_text(encoding="utf-8", errors="replace")
