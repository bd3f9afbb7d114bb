"""ONNX Runtime: the PyTorch model exported to ONNX (once per model's weights, in the build cache; dynamic batch and sequence axes),
run by `onnxruntime.InferenceSession` with the graph optimisations asked for: on the CPU execution provider, or on a
GPU the CUDA execution provider (TensorRT's with `gpu_provider: tensorrt`), which the `onnxruntime-gpu` package has and
`onnxruntime` has not; int8 is the same export after `onnxruntime.quantization.quantize_dynamic` (weights int8,
activations quantized per call), on the CPU.

To generate (`workload: generate`), optimum-onnx exports the causal language model with its key/value cache as inputs and
outputs (once per model's weights, in the build cache), and its `ORTModelForCausalLM` runs it in a session with the same
options; int8 does not generate.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from benchlib.backends import BackendInfo, lazy_import, register
from benchlib.backends._export import MODEL_FILE, Exported, ExportedBackend
from benchlib.backends._optimum import TASK, generation_export, quiet
from benchlib.backends.pytorch import build_reference, use_torch
from benchlib.machine import package_version
from benchlib.status import Unsupported
from benchlib.store.cache import Artefact, artefact, find, folder_bytes

if TYPE_CHECKING:  # the catalogue sits above the backends: they are handed its entries
    from benchlib.config.catalogue import ModelSpec

ort = lazy_import("onnxruntime")
optimum_onnxruntime = lazy_import("optimum.onnxruntime")

GRAPH_OPTIMIZATION = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
PROTOBUF_LIMIT = 2**31  # an ONNX file over 2 GiB keeps its weights in external files
INT8_FILE = "model.int8.onnx"
INT8_KIND = "onnx-int8"
GENERATE_KIND = "onnx-generate"
INT8_GENERATION = "ONNX Runtime int8 generation is not measured: use cpu-openvino-int8, OpenVINO's int8 weight compression"


EXECUTION_MODE = {"sequential": "ORT_SEQUENTIAL", "parallel": "ORT_PARALLEL"}
SPINNING = "session.intra_op.allow_spinning"  # a session's config entry: "1" (spin, the default) or "0"


class OnnxRuntimeOptions(BaseModel):
    """ONNX Runtime's own parameters (`options:` in an environment file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    graph_optimization: Literal["disabled", "basic", "extended", "all"] = "all"
    # sequential: one operator at a time on the intra-op threads; parallel: independent branches of the graph at once on
    # the inter-op threads (num_interop_threads)
    execution_mode: Literal["sequential", "parallel"] = "sequential"
    # whether the intra-op threads spin while they wait for work (ONNX Runtime's default): false gives the cores back
    # between calls, at the cost of waking up (session.intra_op.allow_spinning)
    intra_op_spinning: bool = True
    # on a GPU: the CUDA execution provider, or TensorRT's (its engines built at the first call of each shape), each
    # falling back to the next for what it cannot run
    gpu_provider: Literal["cuda", "tensorrt"] = "cuda"


PROVIDERS = {"cuda": ("CUDAExecutionProvider",), "tensorrt": ("TensorrtExecutionProvider", "CUDAExecutionProvider")}
# float32 on CUDA's provider is float32, as eager PyTorch's baseline: its default runs float32 matrix multiplies on TF32
# units (Ampere and later). TensorRT's engines may use TF32 by default: its cells are set against the TF32 peak.
PROVIDER_OPTIONS: dict[str, dict[str, Any]] = {"CUDAExecutionProvider": {"use_tf32": 0}}
GPU_INSTALL = "pip uninstall -y onnxruntime && pip install -e '.[onnxruntime-gpu]' (onnxruntime-gpu, in place of onnxruntime)"


def int8_key(onnx: Artefact) -> dict[str, str]:
    """What the int8 copy of the export `onnx` is keyed by: the export, ONNX Runtime's version, the method."""
    return {"onnx": onnx.digest, "onnxruntime": ort.__version__, "weights": "QInt8", "method": "quantize_dynamic"}


def quantized(onnx: Artefact, cache_dir: Path | None) -> Artefact:
    """The build cache's int8 copy of the export `onnx`: dynamic quantization (int8 weights, activations
    quantized per call), once per export and ONNX Runtime version."""

    def make(folder: Path) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        large = folder_bytes(onnx.path) > PROTOBUF_LIMIT // 2
        quantize_dynamic(onnx.path / MODEL_FILE, folder / INT8_FILE, weight_type=QuantType.QInt8, use_external_data_format=large)

    return artefact(INT8_KIND, onnx.label, int8_key(onnx), make, cache_dir)


def with_past(spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None) -> Artefact:
    """The build cache's ONNX export of causal language model `spec` for generation (optimum-onnx's `main_export`, task
    text-generation-with-past: the key/value cache as inputs and outputs), its opset optimum's default for the model."""

    def make(source: Path, folder: Path) -> None:
        from optimum.exporters.onnx import main_export

        main_export(str(source), folder, task=TASK, do_validation=False, trust_remote_code=spec.trust_remote_code)

    versions = {name: package_version(name) for name in ("optimum-onnx", "onnx")}
    return generation_export(GENERATE_KIND, "onnx", spec, scale, seed, cache_dir, make, **versions)


@dataclass
class OnnxRuntimeBackend(ExportedBackend):
    """Runs catalogue models exported to ONNX with ONNX Runtime's CPU execution provider."""

    options: OnnxRuntimeOptions = OnnxRuntimeOptions()
    framework: str = "onnxruntime"

    def __post_init__(self) -> None:
        use_torch()  # one framework per kernel: the export's, before transformers is imported
        self._session_options = ort.SessionOptions()
        self._session_options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, GRAPH_OPTIMIZATION[self.options.graph_optimization])
        self._session_options.intra_op_num_threads = self.num_threads or 0  # 0: ONNX Runtime's default
        self._session_options.inter_op_num_threads = self.num_interop_threads or 0
        self._session_options.execution_mode = getattr(ort.ExecutionMode, EXECUTION_MODE[self.options.execution_mode])
        self._session_options.add_session_config_entry(SPINNING, "1" if self.options.intra_op_spinning else "0")
        self._session_options.log_severity_level = 3  # errors only

    @property
    def providers(self) -> list[Any]:
        """The session's execution providers, first choice first (on a GPU, each with the GPU's index)."""
        if not self.device.startswith("cuda"):
            return ["CPUExecutionProvider"]
        index = {"device_id": int(self.device.partition(":")[2] or 0)}
        return [*((name, {**index, **PROVIDER_OPTIONS.get(name, {})}) for name in PROVIDERS[self.options.gpu_provider]), "CPUExecutionProvider"]

    def unsupported(self) -> str | None:
        if self.workload == "generate" and self.precision == "int8":
            return INT8_GENERATION
        if not self.device.startswith("cuda"):
            return None
        if self.precision == "int8":
            return "ONNX Runtime's dynamic int8 (MatMulInteger) runs on the CPU execution provider: use cpu-onnxruntime-int8"
        available = ort.get_available_providers()
        missing = [name for name in PROVIDERS[self.options.gpu_provider] if name not in available]
        if not missing:
            return None
        if missing == ["TensorrtExecutionProvider"]:
            return f"ONNX Runtime {ort.__version__} here has no TensorRT execution provider (it has {', '.join(available)}): install TensorRT's libraries for onnxruntime-gpu"
        return f"ONNX Runtime {ort.__version__} here has no CUDA execution provider (it has {', '.join(available)}): {GPU_INSTALL}"

    def build(self, spec: ModelSpec, scale: str) -> Exported:
        if self.workload == "generate":
            return self.build_generation(spec, scale)
        reference, onnx = self.export(spec, scale)
        path = onnx.path / MODEL_FILE
        if self.precision == "int8":
            int8 = find(INT8_KIND, onnx.label, int8_key(onnx), self.cache_dir)
            if int8 is None:
                del reference  # quantizing holds the model twice: never beside the PyTorch reference as well (CTRL: 3 x 6.5 GB)
                gc.collect()
                int8 = quantized(onnx, self.cache_dir)
                reference = build_reference(spec, scale, self.seed, cache_dir=self.cache_dir)
            path = int8.path / INT8_FILE
        session = ort.InferenceSession(str(path), self._session_options, providers=self.providers)
        self.check_provider(session.get_providers())
        return Exported(session, reference, path)

    def build_generation(self, spec: ModelSpec, scale: str) -> Exported:
        """optimum-onnx's `ORTModelForCausalLM` of the build cache's export with past (`with_past`), in a session with this
        backend's options, beside its eager float32 reference (loaded after the export, never beside the exporter's copy)."""
        if self.precision == "int8":
            raise Unsupported(INT8_GENERATION)
        onnx = with_past(spec, scale, self.seed, self.cache_dir)
        reference = build_reference(spec, scale, self.seed, cache_dir=self.cache_dir)
        causal_lm = optimum_onnxruntime.ORTModelForCausalLM  # imported before `quiet`
        with quiet():
            model = causal_lm.from_pretrained(onnx.path, session_options=self._session_options, provider=self.asked_provider)
        self.check_provider(model.providers)
        return Exported(model, reference, onnx.path / MODEL_FILE)

    @property
    def asked_provider(self) -> str:
        """The execution provider the session is asked to run on first."""
        first = self.providers[0]
        return first if isinstance(first, str) else first[0]

    def check_provider(self, running: Sequence[str]) -> None:
        """Refuse a session whose first execution provider is not the one asked for: `get_available_providers()` lists
        the providers the wheel was built with, not those whose libraries load, and a session whose provider fails to
        load runs on the next one with a warning only (CPU timings labelled GPU)."""
        if running and running[0] != self.asked_provider:
            raise Unsupported(
                f"ONNX Runtime's session runs on {running[0]}, not on {self.asked_provider} as asked: {self.asked_provider} did not load "
                f"here (its CUDA, cuDNN or TensorRT libraries); ONNX Runtime fell back to {running[0]}"
            )

    def prepare(self, built: Exported, inputs: np.ndarray) -> Callable[[], Any]:
        session, feed = built.runner, {built.runner.get_inputs()[0].name: inputs}

        def call() -> Any:
            return session.run(None, feed)

        return call

    def server_call(self, built: Exported, examples: Sequence[np.ndarray]) -> Callable[[np.ndarray], Any]:
        """A call on any shape: the one session's run (thread-safe), each shape of `examples` run once now."""
        session, name = built.runner, built.runner.get_inputs()[0].name

        def call(x: np.ndarray) -> Any:
            return session.run(None, {name: x})

        for example in examples:
            call(example)
        return call

    def settings(self) -> dict[str, Any]:
        options = self._session_options
        return {
            "num_threads": options.intra_op_num_threads or None,
            "num_interop_threads": options.inter_op_num_threads or None,
            "graph_optimization": self.options.graph_optimization,
            "execution_mode": next(name for name, mode in EXECUTION_MODE.items() if options.execution_mode.name == mode),
            "intra_op_spinning": options.get_session_config_entry(SPINNING) == "1",
            "execution_provider": self.asked_provider,
            "device": self.device,
        }

    def versions(self) -> dict[str, str]:
        return {"onnxruntime": ort.__version__, "optimum-onnx": str(package_version("optimum-onnx"))}


def knob_words(knob: str, value: Any) -> str:
    """A knob's setting in ONNX Runtime's own words (its SessionOptions)."""
    words = {
        "num_threads": f"SessionOptions.intra_op_num_threads = {value}",
        "num_interop_threads": f"SessionOptions.inter_op_num_threads = {value}",
        "execution_mode": f"SessionOptions.execution_mode = ExecutionMode.{EXECUTION_MODE.get(value, value)}",
        "intra_op_spinning": f"SessionOptions.add_session_config_entry('{SPINNING}', '{1 if value else 0}')",
        "graph_optimization": f"SessionOptions.graph_optimization_level = GraphOptimizationLevel.{GRAPH_OPTIMIZATION.get(value, value)}",
    }
    return words.get(knob, f"{knob}: {value}")


INFO = register(
    BackendInfo(
        framework="onnxruntime",
        description="ONNX Runtime: the PyTorch model exported to ONNX, run by an InferenceSession (the CPU execution provider; CUDA's or TensorRT's on a GPU)",
        modes=("session",),
        precisions=("float32", "int8"),
        devices=("cpu", "cuda"),  # the onnxruntime package runs on the CPU; CUDA needs onnxruntime-gpu (`unsupported` says so)
        options=OnnxRuntimeOptions,
        make=lambda settings: settings.make(OnnxRuntimeBackend),
        model_class="pytorch",
        versions=("onnxruntime", "onnx", "onnxscript", "torch", "optimum", "optimum-onnx"),
        requires=("onnxruntime", "onnx", "optimum-onnx"),  # torch.onnx.export(dynamo=False) writes the file with onnx; optimum-onnx exports to generate
        extra="onnxruntime",
        gpu_build="onnxruntime-gpu",  # from the onnxruntime-gpu extra, in place of onnxruntime
        oom_messages=("Failed to allocate memory", "bad_alloc"),
        tune_knobs={"intra_op_spinning": (True, False)},
        knob_words=knob_words,
    )
)
