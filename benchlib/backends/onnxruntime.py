"""ONNX Runtime: the PyTorch model exported to ONNX (once per model, dynamic batch and sequence axes),
run by `onnxruntime.InferenceSession` on the CPU with the graph optimisations asked for; int8 is the
same export after `onnxruntime.quantization.quantize_dynamic` (weights int8, activations quantized per call).
"""

from __future__ import annotations

import gc
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from benchlib.backends import BackendInfo, lazy_import, register
from benchlib.backends._export import Exported, ExportedBackend, export_path

if TYPE_CHECKING:  # the catalogue sits above the backends: they are handed its entries
    from benchlib.config.catalogue import ModelSpec

ort = lazy_import("onnxruntime")

GRAPH_OPTIMIZATION = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
PROTOBUF_LIMIT = 2**31  # an ONNX file over 2 GiB keeps its weights in external files


class OnnxRuntimeOptions(BaseModel):
    """ONNX Runtime's own parameters (`options:` in an environment file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    graph_optimization: Literal["disabled", "basic", "extended", "all"] = "all"


def folder_size(folder: Path) -> int:
    """Bytes of the files in `folder` (an export and its external weights)."""
    return sum(path.stat().st_size for path in folder.iterdir() if path.is_file())


def int8_path(path: Path) -> Path:
    """Where the int8 copy of the export at `path` is kept."""
    return path.with_name("model.int8.onnx")


def quantized(path: Path) -> Path:
    """`path` after dynamic int8 quantization (int8 weights, activations quantized per call), cached beside it."""
    target = int8_path(path)
    if target.exists():
        return target
    from onnxruntime.quantization import QuantType, quantize_dynamic

    partial = Path(tempfile.mkdtemp(prefix=".int8-", dir=path.parent)) / target.name
    quantize_dynamic(path, partial, weight_type=QuantType.QInt8, use_external_data_format=folder_size(path.parent) > PROTOBUF_LIMIT // 2)
    for produced in partial.parent.iterdir():  # the model, and its external weights when it has any
        os.replace(produced, path.parent / produced.name)
    partial.parent.rmdir()
    return target


@dataclass
class OnnxRuntimeBackend(ExportedBackend):
    """Runs catalogue models exported to ONNX with ONNX Runtime's CPU execution provider."""

    options: OnnxRuntimeOptions = OnnxRuntimeOptions()
    framework: str = "onnxruntime"

    def __post_init__(self) -> None:
        self._session_options = ort.SessionOptions()
        self._session_options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, GRAPH_OPTIMIZATION[self.options.graph_optimization])
        self._session_options.intra_op_num_threads = self.num_threads or 0  # 0: ONNX Runtime's default
        self._session_options.inter_op_num_threads = self.num_interop_threads or 0
        self._session_options.log_severity_level = 3  # errors only

    def unsupported(self) -> str | None:
        return None

    def build(self, spec: ModelSpec, scale: str) -> Exported:
        exported = export_path(spec, scale, self.seed, self.cache_dir)
        if self.precision == "int8" and not int8_path(exported).exists():
            # Quantizing holds the model twice: never beside the PyTorch reference as well (CTRL: 3 x 6.5 GB).
            if not exported.exists():
                self.export(spec, scale)
                gc.collect()
            quantized(exported)
        reference, path = self.export(spec, scale)
        if self.precision == "int8":
            path = int8_path(path)
        session = ort.InferenceSession(str(path), self._session_options, providers=["CPUExecutionProvider"])
        return Exported(session, reference, path)

    def prepare(self, built: Exported, inputs: np.ndarray) -> Callable[[], Any]:
        session, feed = built.runner, {built.runner.get_inputs()[0].name: inputs}

        def call() -> Any:
            return session.run(None, feed)

        return call

    def settings(self) -> dict[str, Any]:
        options = self._session_options
        return {
            "num_threads": options.intra_op_num_threads or None,
            "num_interop_threads": options.inter_op_num_threads or None,
            "graph_optimization": self.options.graph_optimization,
            "execution_provider": "CPUExecutionProvider",
            "device": self.device,
        }

    def versions(self) -> dict[str, str]:
        return {"onnxruntime": ort.__version__}


INFO = register(
    BackendInfo(
        framework="onnxruntime",
        description="ONNX Runtime: the PyTorch model exported to ONNX, run by an InferenceSession (CPU execution provider)",
        modes=("session",),
        precisions=("float32", "int8"),
        devices=("cpu",),  # the onnxruntime package runs on the CPU; CUDA needs onnxruntime-gpu
        options=OnnxRuntimeOptions,
        make=lambda settings: settings.make(OnnxRuntimeBackend),
        model_class="pytorch",
        versions=("onnxruntime", "onnx", "onnxscript", "torch"),
        requires=("onnxruntime", "onnx"),  # torch.onnx.export(dynamo=False) writes the file with onnx
        extra="onnxruntime",
        oom_messages=("Failed to allocate memory", "bad_alloc"),
    )
)
