"""Today's ways to run a model on a GPU, as far as this machine (no GPU) can check them: the environment files validate,
their options are refused with the values allowed, a GPU environment is refused before any kernel where nvidia-smi
finds no GPU, ONNX Runtime without its GPU build is `unsupported` with the pip line, the default job picks the GPU set
where a GPU is found (a fake nvidia-smi: what this machine lacks), and the attention kernel option runs for real on the
CPU's own kernels. `make test-gpu` checks the rest on a GPU (tests/gpu/)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from benchlib import run_environment
from benchlib import backends as backends_module
from benchlib.backends import installed, load_backend
from benchlib.config import jobs
from benchlib.config.jobs import available, load_parameter_file, resolve_parameter_file
from benchlib.config.params import ParameterError, validate_params

NEW = [
    "gpu-pytorch-bf16", "gpu-pytorch-tf32", "gpu-pytorch-flash-attention", "gpu-torch-compile-cudagraphs", "gpu-torch-compile-max-autotune",
    "gpu-onnxruntime", "gpu-onnxruntime-tensorrt",
]  # fmt: skip


def grid(**values: object) -> dict:
    return {"models": ["bert-base-cased"], "batch_sizes": [1], "sequence_lengths": [8], "output_dir": "/tmp/unused", **values}


@pytest.mark.parametrize("name", NEW)
def test_each_new_gpu_environment_validates(name: str) -> None:
    values = load_parameter_file(resolve_parameter_file(name, "environments"))
    params = validate_params({**values, **grid()})
    assert params.device == "cuda" and params.environment == name


@pytest.mark.parametrize(
    ("framework", "option", "value", "allowed"),
    [
        ("pytorch", "sdpa_kernel", "fast", "'flash', 'efficient', 'cudnn' or 'math'"),
        ("pytorch", "compile_mode", "cudagraphs", "'default', 'reduce-overhead', 'max-autotune' or 'max-autotune-no-cudagraphs'"),
        ("pytorch", "tf32", "sometimes", "a valid boolean"),
        ("onnxruntime", "gpu_provider", "rocm", "'cuda' or 'tensorrt'"),
    ],
)  # fmt: skip
def test_a_wrong_option_is_refused_with_the_values_allowed(framework: str, option: str, value: object, allowed: str) -> None:
    mode = {"pytorch": "eager", "onnxruntime": "session"}[framework]
    with pytest.raises(ParameterError) as raised:
        validate_params(grid(environment="x", framework=framework, mode=mode, device="cuda", options={option: value}))
    line = str(raised.value)
    assert "\n" not in line and f"options: for {framework}: {option}: " in line and allowed in line


def test_an_attention_kernel_needs_sdpa() -> None:
    with pytest.raises(ParameterError, match="sdpa_kernel chooses a kernel of scaled_dot_product_attention, which attn_implementation eager does not call"):
        validate_params(grid(environment="x", framework="pytorch", mode="eager", options={"attn_implementation": "eager", "sdpa_kernel": "flash"}))


def test_a_gpu_environment_without_a_gpu_is_refused_before_any_kernel(run_cli, tmp_path: Path) -> None:
    done = run_cli("run", "--grid", "smoke", "--environments", "cpu-pytorch,gpu-pytorch,gpu-pytorch-bf16", "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and not (tmp_path / "run").exists() and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "--environments: gpu-pytorch, gpu-pytorch-bf16 run on a CUDA GPU, and nvidia-smi finds none on this machine: choose cpu-* "
        "environments, or run where a GPU is"
    )


def test_onnx_runtime_without_its_gpu_build_is_unsupported_with_the_pip_line() -> None:
    pytest.importorskip("onnxruntime", reason="ONNX Runtime is the onnxruntime extra")
    reason = load_backend("onnxruntime", "session", device="cuda").unsupported()
    assert reason is not None and reason.startswith("ONNX Runtime ") and "has no CUDA execution provider (it has " in reason
    assert reason.endswith("pip uninstall -y onnxruntime && pip install -e '.[onnxruntime-gpu]' (onnxruntime-gpu, in place of onnxruntime)")
    assert load_backend("onnxruntime", "session", device="cuda", precision="int8").unsupported().endswith("use cpu-onnxruntime-int8")
    assert load_backend("onnxruntime", "session").unsupported() is None  # on the CPU, as before


def test_an_onnx_runtime_session_that_fell_back_to_another_provider_is_unsupported_naming_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX Runtime's GPU build lists CUDA's provider whether or not CUDA's libraries load (faked: this machine has the
    CPU build); the session, real, asked for CUDA first, runs on the CPU provider, as one whose CUDA failed to load."""
    ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime is the onnxruntime extra")
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    rows = run_environment(dict(
        environment="gpu-onnxruntime", framework="onnxruntime", mode="session", device="cuda", models=["bert-base-cased"], model_scale="tiny",
        batch_sizes=[1], sequence_lengths=[8], repeat=3, number=1, output_dir=str(tmp_path / "fell-back"),
    ), progress=False)  # fmt: skip
    assert rows["status"].tolist() == ["unsupported"]
    assert rows["reason"].iloc[0] == (
        "building the model: ONNX Runtime's session runs on CPUExecutionProvider, not on CUDAExecutionProvider as asked: CUDAExecutionProvider did not load "
        "here (its CUDA, cuDNN or TensorRT libraries); ONNX Runtime fell back to CPUExecutionProvider"
    )


def test_float32_on_onnx_runtimes_cuda_provider_is_float32_never_tf32() -> None:
    pytest.importorskip("onnxruntime", reason="ONNX Runtime is the onnxruntime extra")
    assert load_backend("onnxruntime", "session", device="cuda:1").providers == [
        ("CUDAExecutionProvider", {"device_id": 1, "use_tf32": 0}), "CPUExecutionProvider",
    ]  # fmt: skip
    tensorrt = load_backend("onnxruntime", "session", device="cuda", options={"gpu_provider": "tensorrt"}).providers
    assert tensorrt[:2] == [("TensorrtExecutionProvider", {"device_id": 0}), ("CUDAExecutionProvider", {"device_id": 0, "use_tf32": 0})]


@pytest.mark.e2e
def test_float32_on_tensorflow_is_float32_never_tf32() -> None:
    """TensorFlow runs float32 on TF32 units by default (Ampere and later): the backend turns that off, and says so."""
    pytest.importorskip("tensorflow", reason="TensorFlow is the tensorflow extra")
    from tests.frameworks import run_python

    settings = run_python("""
        import json
        import tensorflow as tf
        default = tf.config.experimental.tensor_float_32_execution_enabled()
        from benchlib.backends import load_backend
        print(json.dumps({"default": default, **load_backend("tensorflow", "function").settings()}))
    """)  # fmt: skip
    assert settings["default"] is True and settings["tensor_float_32"] is False


def test_the_gpu_set_holds_the_gpu_environments_whose_packages_are_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = jobs.environment_sets()["gpu"]
    assert {"gpu-pytorch", "gpu-pytorch-bf16", "gpu-torch-compile-cudagraphs"} <= set(gpu) and all(name.startswith("gpu-") for name in gpu)
    assert "gpu-onnxruntime" not in gpu  # onnxruntime here, not onnxruntime-gpu
    without_tensorflow = lambda distribution: distribution != "tensorflow" and (distribution == "onnxruntime-gpu" or installed(distribution))  # noqa: E731
    monkeypatch.setattr(backends_module, "installed", without_tensorflow)
    monkeypatch.setattr(jobs, "installed", without_tensorflow)
    assert not {"gpu-tensorflow", "gpu-tensorflow-xla"} & set(jobs.environment_sets()["gpu"]) and "gpu-onnxruntime" in jobs.environment_sets()["gpu"]


def fake_nvidia_smi(folder: Path) -> dict[str, str]:
    """A PATH on which `nvidia-smi` answers as on a machine with one H200 (what this machine lacks)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\necho 'NVIDIA H200, 143771 MiB, 580.159.04'\n", encoding="ascii")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def test_the_default_job_is_the_gpu_set_where_nvidia_smi_finds_a_gpu(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = run_cli("run", "--grid", "no-such-grid", "--out", str(tmp_path / "run"), env=fake_nvidia_smi(tmp_path / "bin"))
    first = done.stdout.splitlines()[0]
    assert first == "nvidia-smi finds NVIDIA H200: the default job is the GPU default set (gpu-default)" and done.returncode == 2
    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path / "bin")["PATH"])
    chosen, _ = jobs.default_environments()
    planned = jobs.plan_run(tmp_path / "planned", "quick", list(chosen))
    assert [job.name for job in planned] == jobs.environment_sets()["gpu-default"] and all(job.params.device == "cuda" for job in planned)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi at all: the CPU's default
    assert jobs.default_environments() == (jobs.DEFAULT_ENVIRONMENTS, None)


def test_make_test_gpu_stops_in_one_line_where_nvidia_smi_finds_a_gpu_that_pytorch_cannot_use(tmp_path: Path) -> None:
    """This machine's PyTorch is a CPU build; nvidia-smi is faked (an H200). Where nvidia-smi finds none, the GPU tests
    are skipped with the reason and nothing stops."""
    import subprocess
    import sys

    import torch

    from benchlib.paths import PROJECT_ROOT

    preflight = [sys.executable, str(PROJECT_ROOT / "tests" / "gpu" / "preflight.py")]
    done = subprocess.run(preflight, env=fake_nvidia_smi(tmp_path / "bin"), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"make test-gpu: nvidia-smi finds NVIDIA H200 (driver 580.159.04) and PyTorch {torch.__version__}, a CPU build, cannot use it: "
        "install PyTorch's CUDA build that matches the driver (https://pytorch.org/get-started/locally/)"
    )
    no_gpu = {**os.environ, "PATH": str(tmp_path / "empty")}
    assert subprocess.run(preflight, env=no_gpu, capture_output=True, text=True, timeout=300, check=False).returncode == 0


@pytest.mark.parametrize(("kernel", "expected"), [("math", "ok"), ("efficient", "unsupported")])
def test_an_attention_kernel_that_cannot_run_a_cell_makes_it_unsupported_with_pytorchs_reason(kernel: str, expected: str, tmp_path: Path) -> None:
    """On this CPU for real: PyTorch's CPU has the math and flash kernels of scaled_dot_product_attention, not the
    memory-efficient one."""
    rows = run_environment(dict(
        environment=f"cpu-sdpa-{kernel}", framework="pytorch", mode="eager", models=["bert-base-cased"], model_scale="tiny", batch_sizes=[1],
        sequence_lengths=[8], repeat=3, number=1, options={"sdpa_kernel": kernel}, output_dir=str(tmp_path / kernel),
    ), progress=False)  # fmt: skip
    assert rows["status"].tolist() == [expected]
    if expected == "unsupported":
        assert rows["reason"].iloc[0].startswith(f"sdpa_kernel {kernel} cannot run this cell: No viable backend for scaled_dot_product_attention")


def test_the_attention_kernel_holds_the_models_calls_only_never_the_reference_nor_the_process() -> None:
    """On this CPU for real: `efficient` has no CPU kernel. The model's calls are held to it while a cell lasts; the
    float32 reference (on the CPU beside a half-precision model on a GPU) runs with PyTorch's own choice, and neither
    building the backend nor a cell leaves the process restricted for the environments after it."""
    import torch

    from benchlib.backends.pytorch import Built
    from benchlib.config.catalogue import get_model

    backend = load_backend("pytorch", "eager", options={"sdpa_kernel": "efficient"})
    assert torch.backends.cuda.math_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()  # building it restricts nothing
    model = backend.build(get_model("bert-base-cased"), "tiny").model
    inputs = torch.ones(1, 8, dtype=torch.long)
    with backend.inference_context():
        assert not torch.backends.cuda.math_sdp_enabled()
        with pytest.raises(RuntimeError, match="No viable backend"):
            model(inputs)
        assert backend.reference_output(Built(model, reference=model), inputs).shape == (1, 8, 32)
    assert torch.backends.cuda.math_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()


def test_tf32_on_a_cpu_is_unsupported_with_the_reason() -> None:
    assert load_backend("pytorch", "eager", options={"tf32": True}).unsupported() == "tf32 is a mode of a CUDA GPU's matrix units (Ampere and later): a CPU has none"


def test_bfloat16_and_tf32_are_unsupported_on_a_gpu_before_compute_capability_8(monkeypatch: pytest.MonkeyPatch) -> None:
    """A T4 (7.5), as CUDA would describe it (faked: this machine has none); torch.cuda.is_bf16_supported() counts emulation."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    why = ": torch would emulate it or ignore it, and its number would not be the card's"
    assert load_backend("pytorch", "eager", device="cuda", precision="bfloat16").unsupported() == (
        f"cuda has no bfloat16 units (compute capability 7.5; they came with 8.0, Ampere){why}"
    )
    assert load_backend("pytorch", "eager", device="cuda", options={"tf32": True}).unsupported() == (
        f"cuda has no tf32 units (compute capability 7.5; they came with 8.0, Ampere){why}"
    )
    assert load_backend("pytorch", "eager", device="cuda", precision="float16").unsupported() is None
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))  # an H100
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert load_backend("pytorch", "eager", device="cuda", precision="bfloat16", options={"tf32": True}).unsupported() is None


def test_the_gpu_environments_are_in_the_sets_and_every_one_has_its_file() -> None:
    assert set(jobs.environment_sets()["gpu-default"]) <= set(available("environments"))
    generating = jobs.environment_sets()["gpu-generate"]
    assert "gpu-torch-compile-cudagraphs" in generating and set(generating) <= set(available("environments"))
    prompts = load_parameter_file(resolve_parameter_file("generate-quick", "grids"))
    for name in generating:  # each generates on the GPU with the generation grid
        params = validate_params({**load_parameter_file(resolve_parameter_file(name, "environments")), **prompts, "output_dir": "/tmp/unused"})
        assert params.workload == "generate" and params.device == "cuda"


def test_onnx_runtimes_gpu_build_is_an_extra_of_its_own_never_in_all() -> None:
    import tomllib

    from packaging.requirements import Requirement

    from benchlib.paths import PROJECT_ROOT

    extras = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {extra: {Requirement(line).name for line in lines} for extra, lines in extras.items()}
    assert "onnxruntime-gpu" in names["onnxruntime-gpu"] and "onnxruntime" not in names["onnxruntime-gpu"]
    assert names["onnxruntime-gpu"] - {"onnxruntime-gpu"} == names["onnxruntime"] - {"onnxruntime"}  # the rest as the CPU build's
    assert "onnxruntime-gpu" not in extras["all"][0]
