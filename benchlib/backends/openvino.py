"""OpenVINO: the PyTorch model's ONNX export (shared with ONNX Runtime) converted with
`openvino.convert_model` (once, into the build cache) and compiled for the CPU, with the inference precision set explicitly
(OpenVINO's CPU plugin runs in bfloat16 by default where the CPU has AMX, so float32 must ask for f32).

Converting from the PyTorch model directly (`convert_model(model, example_input=...)`) fails for
XLNet and XLM in openvino 2026.4 with transformers 4.57; their ONNX exports convert.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from benchlib.backends import BackendInfo, lazy_import, register
from benchlib.backends._export import MODEL_FILE, Exported, ExportedBackend
from benchlib.backends.pytorch import bfloat16_unsupported
from benchlib.store.cache import Artefact, artefact

if TYPE_CHECKING:  # the catalogue sits above the backends: they are handed its entries
    from benchlib.config.catalogue import ModelSpec

ov = lazy_import("openvino")

INFERENCE_PRECISION = {"float32": "f32", "bfloat16": "bf16"}
IR_FILE = "model.xml"  # beside it, model.bin holds the weights


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


def converted(onnx: Artefact, cache_dir: Path | None) -> Artefact:
    """The build cache's OpenVINO model (IR: model.xml and model.bin) converted from the export `onnx`, its weights
    kept in float32 (the inference precision is a compile-time setting), once per export and OpenVINO version."""
    key = {"onnx": onnx.digest, "openvino": ov.get_version(), "weights": "f32"}

    def make(folder: Path) -> None:
        ov.save_model(ov.convert_model(str(onnx.path / MODEL_FILE)), str(folder / IR_FILE), compress_to_fp16=False)

    return artefact("openvino", onnx.label, key, make, cache_dir)


@dataclass
class OpenVinoBackend(ExportedBackend):
    """Runs catalogue models with OpenVINO's CPU plugin."""

    options: OpenVinoOptions = OpenVinoOptions()
    framework: str = "openvino"

    def __post_init__(self) -> None:
        without_telemetry()
        self._core = ov.Core()
        self._config = {"INFERENCE_PRECISION_HINT": INFERENCE_PRECISION[self.precision], "PERFORMANCE_HINT": self.options.performance_hint}
        if self.num_threads:
            self._config["INFERENCE_NUM_THREADS"] = self.num_threads
        self._compiled: Any = None

    def unsupported(self) -> str | None:
        return bfloat16_unsupported() if self.precision == "bfloat16" else None

    def build(self, spec: ModelSpec, scale: str) -> Exported:
        reference, onnx = self.export(spec, scale)
        path = converted(onnx, self.cache_dir).path / IR_FILE
        self._compiled = self._core.compile_model(self._core.read_model(str(path)), "CPU", self._config)
        return Exported(self._compiled, reference, path)

    def prepare(self, built: Exported, inputs: np.ndarray) -> Callable[[], Any]:
        request = built.runner.create_infer_request()

        def call() -> Any:
            return request.infer({0: inputs})

        return call

    def settings(self) -> dict[str, Any]:
        asked = {"num_threads": self.num_threads, "inference_precision": self._config["INFERENCE_PRECISION_HINT"]}
        if self._compiled is None:  # before a model is compiled, what was asked for
            return {**asked, "performance_hint": self.options.performance_hint, "device": self.device}
        read = {key: str(self._compiled.get_property(key)) for key in ("INFERENCE_NUM_THREADS", "INFERENCE_PRECISION_HINT", "PERFORMANCE_HINT", "NUM_STREAMS")}
        return {**asked, **{key.lower(): value for key, value in read.items()}, "device": self.device}

    def versions(self) -> dict[str, str]:
        return {"openvino": ov.get_version()}


INFO = register(
    BackendInfo(
        framework="openvino",
        description="OpenVINO: the ONNX export converted with openvino.convert_model and compiled for the CPU",
        modes=("compiled",),
        precisions=("float32", "bfloat16"),
        devices=("cpu",),  # OpenVINO's GPU plugin is for Intel GPUs
        options=OpenVinoOptions,
        make=lambda settings: settings.make(OpenVinoBackend),
        model_class="pytorch",
        versions=("openvino", "onnx", "torch"),
        requires=("openvino", "onnx"),  # it converts the ONNX export, which torch.onnx.export writes with onnx
        extra="openvino",
        oom_messages=("bad_alloc", "Failed to allocate"),
    )
)
