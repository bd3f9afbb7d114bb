"""The backends' registry and today's backends (torch.compile, bfloat16, ONNX Runtime, OpenVINO), in-process on tiny models."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import tomllib
from typing import Literal

import pytest
import torch
from packaging.requirements import Requirement
from pydantic import BaseModel, ConfigDict

from benchlib import backends, machine, status
from benchlib.backends import TOLERANCE, BackendInfo, BackendSettings, frameworks, is_out_of_memory, load_backend, model_class, modes, unsupported_reason
from benchlib.backends import pytorch as pytorch_backend
from benchlib.cli import CLUSTER_DISTRIBUTIONS
from benchlib.config.catalogue import get_model, load_catalogue
from benchlib.config.params import ParameterError, validate_params
from benchlib.measure.sweep import run_environment, within_tolerance
from benchlib.paths import PROJECT_ROOT
from benchlib.scenarios.loadgen import LOADGEN_DISTRIBUTION
from benchlib.store.layout import ENVIRONMENT_FILE
from benchlib.workloads.agreement import Agreement, agreement
from benchlib.workloads.inputs import random_ids


def tiny_params(tmp_path, **values):
    """Parameters of a one-model, one-shape environment at tiny scale."""
    return {
        "environment": "test", "models": ["bert-base-cased"], "model_scale": "tiny", "batch_sizes": [1],
        "sequence_lengths": [8], "repeat": 3, "number": 1, "remeasure": 0, "warmup_max_seconds": 0.2, "output_dir": str(tmp_path / "run" / "env"), **values,
    }  # fmt: skip


class ChannelOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    layout: Literal["rows", "columns"] = "rows"


def make_test_backend(settings: BackendSettings) -> pytorch_backend.PyTorchBackend:
    return pytorch_backend.PyTorchBackend(mode="eager", num_threads=settings.num_threads, framework="test-backend")


@pytest.fixture
def test_backend(monkeypatch):
    """A backend registered by this test module, and nowhere else."""
    info = BackendInfo(
        framework="test-backend", modes=("plain",), make=make_test_backend, options=ChannelOptions,
        versions=("torch", "numpy"), oom_messages=("test allocator exhausted",),
    )  # fmt: skip
    monkeypatch.setitem(backends.REGISTRY, info.framework, info)
    return info


def test_a_backend_registered_elsewhere_appears_in_validation_modes_oom_and_environment_json(test_backend, tmp_path):
    assert "test-backend" in frameworks() and modes("test-backend") == ("plain",)
    assert is_out_of_memory(RuntimeError("test allocator exhausted at 2 GiB"))
    params = validate_params(tiny_params(tmp_path, framework="test-backend", mode="plain", options={"layout": "columns"}))
    assert params.options == {"layout": "columns"}
    with pytest.raises(ParameterError, match=r"options: for test-backend: layout: Input should be 'rows' or 'columns'"):
        validate_params(tiny_params(tmp_path, framework="test-backend", mode="plain", options={"layout": "diagonal"}))
    with pytest.raises(ParameterError, match=r"mode for test-backend must be one of plain, not 'eager'"):
        validate_params(tiny_params(tmp_path, framework="test-backend", mode="eager"))

    rows = run_environment(params, progress=False)
    assert rows["status"].tolist() == [status.OK] and rows["framework"].tolist() == ["test-backend"]
    assert rows["options"].tolist() == ['{"layout": "columns"}']
    environment = json.loads((tmp_path / "run" / "env" / ENVIRONMENT_FILE).read_text())
    assert environment["software"]["torch"] == importlib.metadata.version("torch")
    assert environment["software"]["numpy"] and environment["parameters"]["options"] == {"layout": "columns"}


def never_made(settings: BackendSettings) -> None:
    """What a backend whose framework is missing would do if it were made: fail to import it."""
    importlib.import_module("benchlib_test_no_such_framework")


def test_a_backend_whose_package_is_missing_reports_every_cell_unsupported_with_the_pip_line(monkeypatch, tmp_path):
    info = BackendInfo(
        framework="missing-backend", modes=("plain",), make=never_made, versions=("benchlib-test-no-such-framework",),
        requires=("benchlib-test-no-such-framework", "torch"), extra="missing-backend",
    )  # fmt: skip
    monkeypatch.setitem(backends.REGISTRY, info.framework, info)
    pip_line = "benchlib-test-no-such-framework is not installed: pip install 'benchlib[missing-backend]'"
    assert backends.not_installed("missing-backend") == pip_line and backends.not_installed("pytorch") is None
    stand_in = load_backend("missing-backend", "plain")
    assert stand_in.unsupported() == pip_line and stand_in.settings() == {} and stand_in.versions() == {}
    with pytest.raises(status.Unsupported, match=r"pip install 'benchlib\[missing-backend\]'"):
        stand_in.build(get_model("bert-base-cased"), "tiny")

    # The catalogue says transfo-xl-wt103 does not run from PyTorch, and 300 is past ctrl's 256 positions: the pip line
    # comes before the catalogue's reason, and a cell too long stays too long.
    assert unsupported_reason(get_model("transfo-xl-wt103"), "missing-backend", "plain") is not None
    params = tiny_params(tmp_path, framework="missing-backend", mode="plain", models=["transfo-xl-wt103", "ctrl"], sequence_lengths=[8, 300])
    rows = run_environment(params, progress=False)
    statuses = {(row.model, row.sequence_length): (row.status, row.reason) for row in rows.itertuples()}
    assert statuses == {
        ("transfo-xl-wt103", 8): (status.UNSUPPORTED, pip_line), ("transfo-xl-wt103", 300): (status.UNSUPPORTED, pip_line),
        ("ctrl", 8): (status.UNSUPPORTED, pip_line), ("ctrl", 300): (status.TOO_LONG, "longer than the model's maximum of 256 positions"),
    }  # fmt: skip
    environment = json.loads((tmp_path / "run" / "env" / ENVIRONMENT_FILE).read_text())
    assert environment["parameters"]["framework"] == "missing-backend" and environment["software"]["benchlib_test_no_such_framework"] is None
    assert [probe["label"] for probe in environment["probes"]][0] == "start"


def test_each_backends_extra_installs_what_it_requires():
    """pyproject.toml's extras hold each backend's required distributions; `all` installs every extra, and none is a core dependency."""
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    extras = {extra: {Requirement(line).name for line in lines} for extra, lines in project["optional-dependencies"].items()}
    core = {Requirement(line).name for line in project["dependencies"]}
    declared = {info.framework: info for info in backends.registry().values()}
    assert {framework: (info.extra, info.requires) for framework, info in declared.items() if info.requires} == {
        "tensorflow": ("tensorflow", ("tensorflow", "tf-keras")),
        "onnxruntime": ("onnxruntime", ("onnxruntime", "onnx", "optimum-onnx")),
        "openvino": ("openvino", ("openvino", "onnx", "optimum-intel", "nncf")),
    }
    for info in declared.values():
        assert set(info.requires) <= extras.get(info.extra, set()) if info.requires else info.extra is None, info.framework
        assert not set(info.requires) & core, info.framework
    assert extras["cluster"] == set(CLUSTER_DISTRIBUTIONS) and not extras["cluster"] & core  # Dask, and cryptography for `cluster certs`
    assert extras["loadgen"] == {LOADGEN_DISTRIBUTION} and not extras["loadgen"] & core  # the load scenarios' (scenarios/loadgen.py)
    assert [Requirement(line) for line in project["optional-dependencies"]["all"]] == [Requirement("benchlib[cluster,loadgen,onnxruntime,openvino,serving,tensorflow,tune]")]
    assert extras["serving"] == {"transformers"}  # with its serving extra: the engine of cpu-transformers-serve, in its own process
    assert "torch==2.13.0" in project["dependencies"]  # any other torch specifier downloads a multi-GB CUDA build


def test_unregistered_errors_are_not_out_of_memory():
    assert not is_out_of_memory(RuntimeError("test allocator exhausted"))  # the test backend is not registered here
    assert is_out_of_memory(RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Failed to allocate memory for requested buffer"))


def test_validation_derives_frameworks_precisions_devices_and_options_from_the_registry(tmp_path):
    assert {"pytorch", "tensorflow", "onnxruntime", "openvino"} <= set(frameworks())
    assert modes("pytorch") == ("eager", "torchscript", "compile")
    problems = {
        "framework": (dict(framework="onnx", mode="session"), "framework: must be one of onnxruntime, openai, openvino, pytorch, tensorflow, not "),
        "precision": (dict(framework="onnxruntime", mode="session", precision="bfloat16"), "precision for onnxruntime must be one of float32, int8"),
        "device": (dict(framework="openvino", mode="compiled", device="cuda"), "openvino runs on cpu here, not 'cuda'"),
        "options": (dict(framework="pytorch", mode="eager", options={"attn_implementation": "flash"}), "attn_implementation: Input should be 'eager' or 'sdpa'"),
    }
    for field, (values, message) in problems.items():
        with pytest.raises(ParameterError) as caught:
            validate_params(tiny_params(tmp_path, **values))
        assert f"parameters: {field}: " in str(caught.value) and message in str(caught.value), str(caught.value)
    defaults = {"graph_optimization": "all", "execution_mode": "sequential", "intra_op_spinning": True, "gpu_provider": "cuda"}
    assert validate_params(tiny_params(tmp_path, framework="onnxruntime", mode="session")).options == defaults


def test_catalogue_lookup_and_unsupported_entries_follow_the_backend():
    bert = get_model("bert-base-cased")
    assert model_class(bert, "onnxruntime").__name__ == model_class(bert, "openvino").__name__ == "BertModel"
    assert model_class(bert, "tensorflow").__name__ == "TFBertModel"
    transfo_xl = get_model("transfo-xl-wt103")
    for framework, mode in (("onnxruntime", "session"), ("openvino", "compiled"), ("pytorch", "compile")):
        assert "type_as" in unsupported_reason(transfo_xl, framework, mode)  # the export starts from the PyTorch model
    ctrl = get_model("ctrl")
    assert "scaled_dot_product_attention" in unsupported_reason(ctrl, "pytorch", "compile")
    assert unsupported_reason(ctrl, "pytorch", "eager") is None and unsupported_reason(ctrl, "onnxruntime", "session") is None


@pytest.mark.e2e
def test_ctrl_does_not_compile_because_upstream_fails():
    backend = load_backend("pytorch", "compile")
    built = backend.build(get_model("ctrl"), "tiny")
    # If this stops failing, torch or transformers fixed it: drop ctrl's `pytorch/compile` entry.
    with pytest.raises(Exception, match="scale"), backend.inference_context():
        backend.prepare(built, backend.as_inputs(random_ids(1000, 1, 8, 0)))


def test_ctrl_cast_to_bfloat16_fails_because_upstream_keeps_a_float32_encoding():
    assert "positional encoding" in unsupported_reason(get_model("ctrl"), "pytorch", "eager", "bfloat16")
    assert unsupported_reason(get_model("ctrl"), "openvino", "compiled", "bfloat16") is None  # a precision hint, not a cast
    backend = load_backend("pytorch", "eager", precision="bfloat16")
    built = backend.build(get_model("ctrl"), "tiny")
    # If this stops failing, transformers fixed it: drop ctrl's `pytorch/bfloat16` and `pytorch/float16` entries.
    with pytest.raises(RuntimeError, match="mixed dtype"), backend.inference_context():
        backend.prepare(built, backend.as_inputs(random_ids(1000, 1, 8, 0)))()


@pytest.mark.e2e
def test_openvino_converts_xlnet_only_through_its_onnx_export():
    """Why OpenVINO converts the ONNX export: converting XLNet's PyTorch model directly fails upstream.
    If this stops failing, the direct conversion could be used."""
    import openvino

    model = pytorch_backend.build_reference(get_model("xlnet-base-cased"), "tiny", seed=0)
    with pytest.raises(Exception), pytorch_backend.traceable_masks():
        openvino.convert_model(model, example_input=torch.zeros((1, 8), dtype=torch.long))


ENVIRONMENTS = [
    pytest.param(dict(framework="pytorch", mode="compile"), id="torch-compile"),
    pytest.param(dict(framework="pytorch", mode="eager", precision="bfloat16"), id="pytorch-bf16"),
    pytest.param(dict(framework="onnxruntime", mode="session"), id="onnxruntime"),
    pytest.param(dict(framework="onnxruntime", mode="session", precision="int8"), id="onnxruntime-int8"),
    pytest.param(dict(framework="openvino", mode="compiled"), id="openvino"),
    pytest.param(dict(framework="openvino", mode="compiled", precision="bfloat16"), id="openvino-bf16"),
    pytest.param(dict(framework="openvino", mode="compiled", precision="int8"), id="openvino-int8"),
]


@pytest.mark.e2e
@pytest.mark.parametrize("values", ENVIRONMENTS)
def test_each_backend_measures_gpt2_and_agrees_with_eager_pytorch(values, tmp_path):
    """On this CPU as it is: bfloat16 is measured where its flags say it runs natively (AMD EPYC with AVX512-BF16,
    Intel Xeon with AMX); elsewhere (AVX2 only) its cell is `unsupported`, with the kit's reason."""
    rows = run_environment(tiny_params(tmp_path, models=["gpt2"], **values), progress=False)
    precision = values.get("precision", "float32")
    assert rows["precision"].tolist() == [precision]
    if precision == "bfloat16" and (reason := pytorch_backend.bfloat16_unsupported()):
        assert rows["status"].tolist() == [status.UNSUPPORTED] and rows["reason"].tolist() == [reason]
        assert rows["max_abs_diff"].isna().all()  # nothing was measured
    else:
        assert rows["status"].tolist() == [status.OK], rows["reason"].tolist()
        assert ((rows["max_abs_diff"] >= 0) & (rows["max_abs_diff"] <= TOLERANCE[precision])).all(), rows["max_abs_diff"].tolist()
        if precision != "float32":
            assert (rows["max_abs_diff"] > 0).all()  # the reduced precision really ran


def test_eager_pytorch_float32_is_the_reference_and_has_no_difference(tmp_path):
    rows = run_environment(tiny_params(tmp_path, framework="pytorch", mode="eager"), progress=False)
    assert rows["status"].tolist() == [status.OK] and rows["max_abs_diff"].isna().all()


@pytest.mark.e2e
def test_a_backend_whose_output_disagrees_is_an_error_not_a_number(tmp_path, monkeypatch):
    monkeypatch.setitem(TOLERANCE, "int8", -1.0)  # no output can be that close
    rows = run_environment(tiny_params(tmp_path, framework="onnxruntime", mode="session", precision="int8"), progress=False)
    assert rows["status"].tolist() == [status.ERROR]
    assert rows["reason"].iloc[0].startswith("output differs from eager PyTorch float32 by ") and "int8 tolerance of -1" in rows["reason"].iloc[0]
    assert within_tolerance(Agreement(1e-4, 1.0, "top1_agreement", 1.0), "float32") == (status.OK, "")
    assert within_tolerance(Agreement(2e-3, 1.0, "top1_agreement", 1.0), "float32")[0] == status.ERROR
    assert within_tolerance(Agreement(2e-3, 30.0, "top1_agreement", 1.0), "float32") == (status.OK, "")  # logits of order 30


@pytest.mark.e2e
def test_machines_without_a_compiler_or_bfloat16_get_unsupported_cells(tmp_path, monkeypatch):
    """Fakes for what this machine has: a C++ compiler and bfloat16 instructions."""

    def no_compiler():
        raise RuntimeError("no C++ compiler found: c++, g++")

    monkeypatch.setattr("torch._inductor.cpp_builder.get_cpp_compiler", no_compiler)
    monkeypatch.setattr("benchlib.machine.cpu_flags", lambda cpuinfo=None: {"avx2", "fma"})  # an AVX2-only CPU: bfloat16 is not run at all
    compiled = run_environment(tiny_params(tmp_path, framework="pytorch", mode="compile", environment="c"), progress=False)
    assert compiled["status"].tolist() == [status.UNSUPPORTED]
    assert compiled["reason"].iloc[0].startswith("torch.compile's inductor needs a C++ compiler") and "no C++ compiler found" in compiled["reason"].iloc[0]
    for framework, mode in (("pytorch", "eager"), ("openvino", "compiled")):
        params = tiny_params(tmp_path, framework=framework, mode=mode, precision="bfloat16", environment=framework, output_dir=str(tmp_path / framework))
        rows = run_environment(params, progress=False)
        assert rows["status"].tolist() == [status.UNSUPPORTED] and rows["reason"].iloc[0] == pytorch_backend.bfloat16_unsupported({"avx2", "fma"})
        assert rows["reason"].iloc[0].startswith("this CPU has no bfloat16 instructions (avx512_bf16 or amx_bf16, or avx_ne_convert)")
    avx512 = {"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}
    assert pytorch_backend.bfloat16_unsupported(avx512 | {"avx512_bf16"}) is None  # AMD EPYC with AVX512-BF16
    assert pytorch_backend.bfloat16_unsupported(avx512 | {"avx512_bf16", "amx_bf16", "amx_tile"}) is None  # Intel Xeon with AMX
    assert "not avx512f, avx512bw, avx512vl, avx512dq, avx512_vnni" in pytorch_backend.bfloat16_unsupported({"avx2", "avx512_bf16"})


def test_a_cap_on_onednns_instruction_sets_keeps_bfloat16_unsupported_as_on_a_cpu_without_them():
    """ONEDNN_MAX_CPU_ISA (how the suite rehearses an AVX2-only machine on a faster one) below the native bfloat16
    path makes bfloat16 unsupported with the cap named, as it would be on the CPU it imitates; a cap at or above it,
    or a value oneDNN does not know, changes nothing."""
    avx512_bf16 = {"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16"}
    reason = machine.onednn_isa_cap_reason(avx512_bf16, {"ONEDNN_MAX_CPU_ISA": "avx2"})
    assert reason is not None and reason.startswith("ONEDNN_MAX_CPU_ISA=AVX2 keeps oneDNN below AVX512_CORE_BF16")
    assert machine.onednn_isa_cap_reason(avx512_bf16, {"DNNL_MAX_CPU_ISA": "AVX512_CORE"}).startswith("DNNL_MAX_CPU_ISA=AVX512_CORE")
    for cap in ("AVX512_CORE_BF16", "AVX512_CORE_AMX", "ALL", "no-such-isa"):
        assert machine.onednn_isa_cap_reason(avx512_bf16, {"ONEDNN_MAX_CPU_ISA": cap}) is None, cap
    assert machine.onednn_isa_cap_reason(avx512_bf16, {}) is None


def test_attention_implementation_is_a_parameter_and_a_model_without_it_is_unsupported(tmp_path):
    params = tiny_params(tmp_path, framework="pytorch", mode="eager", models=["bert-base-cased", "xlnet-base-cased"], options={"attn_implementation": "sdpa"})
    by_model = run_environment(params, progress=False).set_index("model")
    assert by_model.loc["bert-base-cased", "status"] == status.OK and by_model.loc["bert-base-cased", "attn_implementation"] == "sdpa"
    assert by_model.loc["xlnet-base-cased", "status"] == status.UNSUPPORTED
    assert "XLNetModel does not support an attention implementation through torch.nn.functional.scaled_dot_product_attention" in by_model.loc["xlnet-base-cased", "reason"]
    assert set(by_model["options"]) == {'{"attn_implementation": "sdpa"}'}  # set apart from the backend's default
    eager = run_environment({**params, "options": {"attn_implementation": "eager"}, "output_dir": str(tmp_path / "eager")}, progress=False)
    assert set(eager["attn_implementation"]) == {"eager"} and set(eager["status"]) == {status.OK}


@pytest.mark.e2e
def test_every_catalogue_model_that_pytorch_runs_exports_to_onnx():
    """ONNX Runtime and OpenVINO run every model that eager PyTorch runs (the masks shim makes GPT-2's export dynamic)."""
    backend = load_backend("onnxruntime", "session")
    for name, spec in load_catalogue().items():
        if unsupported_reason(spec, "onnxruntime", "session"):
            continue
        built = backend.build(spec, "tiny")
        inputs = backend.as_inputs(random_ids(spec.vocab_size("tiny"), 2, 12, 3))  # another shape than the export's
        compared = agreement("feature-extraction", pytorch_backend.as_array(backend.prepare(built, inputs)()), backend.reference_output(built, inputs))
        assert compared.max_abs_diff < TOLERANCE["float32"] and compared.value > 0.9999, name
