"""OpenVINO: the PyTorch model's ONNX export (shared with ONNX Runtime) converted with
`openvino.convert_model` (once, into the build cache) and compiled for the CPU, with the inference precision set explicitly
(OpenVINO's CPU plugin runs in bfloat16 by default where the CPU has AMX, so float32 must ask for f32).

Converting from the PyTorch model directly (`convert_model(model, example_input=...)`) fails for
XLNet and XLM in openvino 2026.4 with transformers 4.57; their ONNX exports convert.

int8 is OpenVINO's int8 weight compression (nncf's `compress_weights`, INT8_ASYM: int8 weights per output channel, f32
inference), of the converted model for the forward pass. The CPU plugin's defaults apply otherwise: it may quantize the
activations of the compressed matrix products per group as it runs (DYNAMIC_QUANTIZATION_GROUP_SIZE, recorded in the settings).

To generate (`workload: generate`), optimum-intel exports the causal language model as a stateful OpenVINO model (its
key/value cache kept inside the infer request; for int8, its weights compressed on export), once per model's weights in
the build cache, and its `OVModelForCausalLM` compiles it with this backend's configuration, the key/value cache in the
inference precision (by default the CPU plugin keeps it in a lower one: f16 or u8).

On an Intel Xeon with AMX given one core, the CPU plugin in bfloat16 has died of SIGFPE (a division by zero in
libopenvino_intel_cpu_plugin.so) on a tiny Llama (head size 8, grouped key/value heads), forward and generate alike; two
cores ran the same cells. No setting that avoids it is known to the kit: the cell is `crashed`, its reason naming the
signal and OpenVINO's version (launch.kernel.crash_verdict), and the environment goes on in a new kernel.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator

from benchlib.backends import BackendInfo, lazy_import, register
from benchlib.backends._export import MODEL_FILE, Exported, ExportedBackend
from benchlib.backends._optimum import generation_export, quiet
from benchlib.backends.pytorch import bfloat16_unsupported, build_reference, use_torch
from benchlib.machine import package_version
from benchlib.store.cache import Artefact, artefact

if TYPE_CHECKING:  # the catalogue sits above the backends: they are handed its entries
    from benchlib.config.catalogue import ModelSpec

ov = lazy_import("openvino")
optimum_intel = lazy_import("optimum.intel")

INFERENCE_PRECISION = {"float32": "f32", "bfloat16": "bf16", "int8": "f32"}  # int8: the weights only
IR_FILE = "model.xml"  # beside it, model.bin holds the weights
GENERATE_FILE = "openvino_model.xml"  # optimum-intel's name
INT8_KIND = "openvino-int8"
GENERATE_KIND = "openvino-generate"
READ_BACK: tuple[str, ...] = ("INFERENCE_NUM_THREADS", "INFERENCE_PRECISION_HINT", "PERFORMANCE_HINT", "NUM_STREAMS")


def without_telemetry() -> None:
    """Keep OpenVINO's converter from sending usage events to Google Analytics, which it does unless a consent
    file in the user's home says no, forking the process for every event (connections off the machine, and
    other processes beside the timed calls). It is made to find no telemetry package, in this process only,
    and then uses its own stub: nothing is written in the user's home. Effective before openvino is imported."""
    sys.modules.setdefault("openvino_telemetry", None)  # type: ignore[arg-type]  # None: import raises ImportError


class OpenVinoOptions(BaseModel):
    """OpenVINO's own parameters (`options:` in an environment file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    performance_hint: Literal["LATENCY", "THROUGHPUT"] = "LATENCY"  # LATENCY: one stream, as every other backend runs
    # NUM_STREAMS: the CPU plugin's streams (infer requests run at once, the threads divided among them); null: as the
    # hint decides, AUTO: the plugin's own choice for throughput
    num_streams: int | str | None = None

    @field_validator("num_streams", mode="before")
    @classmethod
    def _streams(cls, value: Any) -> int | str | None:
        if value is None or value == "AUTO" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError(f"must be a positive integer, AUTO (the plugin's choice) or null (as the hint decides), not {value!r}")


def converted(onnx: Artefact, cache_dir: Path | None) -> Artefact:
    """The build cache's OpenVINO model (IR: model.xml and model.bin) converted from the export `onnx`, its weights
    kept in float32 (the inference precision is a compile-time setting), once per export and OpenVINO version."""
    key = {"onnx": onnx.digest, "openvino": ov.get_version(), "weights": "f32"}

    def make(folder: Path) -> None:
        ov.save_model(ov.convert_model(str(onnx.path / MODEL_FILE)), str(folder / IR_FILE), compress_to_fp16=False)

    return artefact("openvino", onnx.label, key, make, cache_dir)


def compressed(ir: Artefact, cache_dir: Path | None) -> Artefact:
    """The build cache's copy of the OpenVINO model `ir` with its weights compressed to int8 (nncf's `compress_weights`,
    INT8_ASYM: per output channel, asymmetric), once per model and nncf version."""
    key = {"openvino": ir.digest, "nncf": package_version("nncf"), "mode": "INT8_ASYM"}

    def make(folder: Path) -> None:
        import nncf

        with quiet():
            model = nncf.compress_weights(ov.Core().read_model(str(ir.path / IR_FILE)), mode=nncf.CompressWeightsMode.INT8_ASYM)
        ov.save_model(model, str(folder / IR_FILE), compress_to_fp16=False)

    return artefact(INT8_KIND, ir.label, key, make, cache_dir)


def stateful(spec: ModelSpec, scale: str, seed: int, int8: bool, cache_dir: Path | None) -> Artefact:
    """The build cache's OpenVINO model of causal language model `spec` for generation (optimum-intel's export, stateful),
    its weights in f32, or with `int8` compressed to int8 (INT8_ASYM, per output channel)."""

    def make(source: Path, folder: Path) -> None:
        compression = {"quantization_config": optimum_intel.OVWeightQuantizationConfig(bits=8)} if int8 else {"load_in_8bit": False}
        optimum_intel.OVModelForCausalLM.from_pretrained(
            source, export=True, compile=False, use_cache=True, stateful=True, trust_remote_code=spec.trust_remote_code, **compression
        ).save_pretrained(folder)

    if int8:
        import nncf  # noqa: F401  # its logger is made on import: before `quiet` turns the exporters' loggers down
    versions = {name: package_version(name) for name in ("optimum-intel", "openvino", *(("nncf",) if int8 else ()))}
    return generation_export(GENERATE_KIND, "openvino", spec, scale, seed, cache_dir, make, stateful=True, weights="int8_asym" if int8 else "f32", **versions)


@dataclass
class OpenVinoBackend(ExportedBackend):
    """Runs catalogue models with OpenVINO's CPU plugin."""

    options: OpenVinoOptions = OpenVinoOptions()
    framework: str = "openvino"

    def __post_init__(self) -> None:
        use_torch()  # one framework per kernel: the export's, before transformers is imported
        without_telemetry()
        self._core = ov.Core()
        self._config = {"INFERENCE_PRECISION_HINT": INFERENCE_PRECISION[self.precision], "PERFORMANCE_HINT": self.options.performance_hint}
        if self.num_threads:
            self._config["INFERENCE_NUM_THREADS"] = self.num_threads
        if self.options.num_streams is not None:
            self._config["NUM_STREAMS"] = str(self.options.num_streams)
        self._compiled: Any = None

    def unsupported(self) -> str | None:
        return bfloat16_unsupported() if self.precision == "bfloat16" else None

    def build(self, spec: ModelSpec, scale: str) -> Exported:
        if self.workload == "generate":
            return self.build_generation(spec, scale)
        reference, onnx = self.export(spec, scale)
        ir = converted(onnx, self.cache_dir)
        path = (compressed(ir, self.cache_dir) if self.precision == "int8" else ir).path / IR_FILE
        self._compiled = self._core.compile_model(self._core.read_model(str(path)), "CPU", self._config)
        return Exported(self._compiled, reference, path)

    def build_generation(self, spec: ModelSpec, scale: str) -> Exported:
        """optimum-intel's `OVModelForCausalLM` of the build cache's stateful export (`stateful`), compiled with this backend's
        configuration and the key/value cache in the inference precision, beside its eager float32 reference (loaded after
        the export, never beside the exporter's copy)."""
        exported = stateful(spec, scale, self.seed, self.precision == "int8", self.cache_dir)
        reference = build_reference(spec, scale, self.seed, cache_dir=self.cache_dir)
        config = {**self._config, "KV_CACHE_PRECISION": self._config["INFERENCE_PRECISION_HINT"]}
        causal_lm = optimum_intel.OVModelForCausalLM  # imported before `quiet`
        with quiet():
            model = causal_lm.from_pretrained(exported.path, ov_config=config, compile=True, device="CPU")
        self._compiled = model.request.get_compiled_model()
        return Exported(model, reference, exported.path / GENERATE_FILE)

    def prepare(self, built: Exported, inputs: np.ndarray) -> Callable[[], Any]:
        request = built.runner.create_infer_request()

        def call() -> Any:
            return request.infer({0: inputs})

        return call

    def server_call(self, built: Exported, examples: Sequence[np.ndarray]) -> Callable[[np.ndarray], Any]:
        """A call on any shape with an infer request of its own (one per stream), each shape of `examples` run once now."""
        request = built.runner.create_infer_request()

        def call(x: np.ndarray) -> Any:
            return request.infer({0: x})

        for example in examples:
            call(example)
        return call

    def settings(self) -> dict[str, Any]:
        asked = {"num_threads": self.num_threads, "inference_precision": self._config["INFERENCE_PRECISION_HINT"]}
        if self._compiled is None:  # before a model is compiled, what was asked for
            return {**asked, "performance_hint": self.options.performance_hint, "device": self.device}
        read = {key: str(self._compiled.get_property(key)) for key in self.read_back()}
        return {**asked, **{key.lower(): value for key, value in read.items()}, "device": self.device}

    def read_back(self) -> tuple[str, ...]:
        """The compiled model's properties that `settings` reports: the key/value cache's precision where it generates, and
        the group size of the activations' dynamic quantization where its weights are int8."""
        generate = ("KV_CACHE_PRECISION",) if self.workload == "generate" else ()
        return (*READ_BACK, *generate, *(("DYNAMIC_QUANTIZATION_GROUP_SIZE",) if self.precision == "int8" else ()))

    def versions(self) -> dict[str, str]:
        return {"openvino": ov.get_version(), **{name: str(package_version(name)) for name in ("optimum-intel", "nncf")}}


def knob_words(knob: str, value: Any) -> str:
    """A knob's setting in OpenVINO's own words (the CPU plugin's compile properties)."""
    words = {
        "num_threads": f"compile_model(model, 'CPU', {{'INFERENCE_NUM_THREADS': {value}}})",
        "performance_hint": f"compile_model(model, 'CPU', {{'PERFORMANCE_HINT': '{value}'}})",
        "num_streams": f"compile_model(model, 'CPU', {{'NUM_STREAMS': '{value}'}})",
    }
    return words.get(knob, f"{knob}: {value}")


INFO = register(
    BackendInfo(
        framework="openvino",
        description="OpenVINO: the ONNX export converted with openvino.convert_model and compiled for the CPU (int8: nncf's weight compression)",
        modes=("compiled",),
        precisions=("float32", "bfloat16", "int8"),
        devices=("cpu",),  # OpenVINO's GPU plugin is for Intel GPUs
        options=OpenVinoOptions,
        make=lambda settings: settings.make(OpenVinoBackend),
        model_class="pytorch",
        versions=("openvino", "onnx", "torch", "optimum", "optimum-intel", "nncf"),
        requires=("openvino", "onnx", "optimum-intel", "nncf"),  # the ONNX export is written with onnx; optimum-intel exports to generate; nncf compresses to int8
        extra="openvino",
        oom_messages=("bad_alloc", "Failed to allocate"),
        tune_knobs={"performance_hint": ("LATENCY", "THROUGHPUT")},
        knob_words=knob_words,
    )
)
