"""What the backends that run an exported PyTorch model (ONNX Runtime, OpenVINO) share: the ONNX
export, made once per model's weights in the build cache, and the cell's plumbing (inputs, comparison
with eager PyTorch float32, no device to wait for).
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchlib.backends import lazy_import
from benchlib.backends.pytorch import build_reference, difference, reference_output, traceable_masks, use_torch, weights
from benchlib.machine import package_version
from benchlib.store.cache import Artefact, artefact

if TYPE_CHECKING:  # the catalogue sits above the backends: they are handed its entries
    from benchlib.config.catalogue import ModelSpec

torch = lazy_import("torch")

ONNX_OPSET = 17
MODEL_FILE = "model.onnx"


def onnx_export(reference: Any, made_from: Artefact, label: str, cache_dir: Path | None) -> Artefact:
    """The build cache's ONNX export of `reference` (eager float32, loaded from the weights entry `made_from`),
    with dynamic batch and sequence axes: `torch.onnx.export(..., dynamo=False)` under `traceable_masks`,
    once per weights, opset and exporter versions. A model over 2 GB keeps its weights in files beside it."""
    key = {"weights": made_from.digest, "opset": ONNX_OPSET, "torch": torch.__version__, "onnx": package_version("onnx")}

    def make(folder: Path) -> None:
        ids = torch.zeros((1, 8), dtype=torch.long)
        with torch.no_grad(), traceable_masks(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer and deprecation warnings: the graph is checked by the output's difference
            torch.onnx.export(
                reference, (ids,), str(folder / MODEL_FILE), input_names=["input_ids"], output_names=["last_hidden_state"],
                dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}}, opset_version=ONNX_OPSET, dynamo=False,
            )  # fmt: skip

    return artefact("onnx", label, key, make, cache_dir)


@dataclass
class Exported:
    """A built model: what the backend runs, and the eager float32 PyTorch model it is compared with."""

    runner: Any  # an onnxruntime.InferenceSession or an openvino.CompiledModel
    reference: Any
    path: Path  # the file it was loaded from

    @property
    def config(self) -> Any:
        return self.reference.config


@dataclass
class ExportedBackend:
    """The settings and the parts of a backend that runs an exported model on the CPU."""

    mode: str
    device: str = "cpu"
    precision: str = "float32"
    num_threads: int | None = None
    num_interop_threads: int | None = None
    seed: int = 0
    cache_dir: Path | None = None

    def export(self, spec: ModelSpec, scale: str) -> tuple[Any, Artefact]:
        """(eager float32 reference, the build cache's entry of its ONNX export)."""
        use_torch()
        made_from = weights(spec, scale, self.seed, self.cache_dir)
        reference = build_reference(spec, scale, self.seed, cache_dir=self.cache_dir)
        return reference, onnx_export(reference, made_from, f"{spec.name}-{scale}", self.cache_dir)

    def make_inputs(self, vocab_size: int, batch_size: int, sequence_length: int, seed: int) -> np.ndarray:
        # The same ids as the PyTorch backend draws for this cell.
        generator = torch.Generator().manual_seed(seed)
        return torch.randint(0, vocab_size, (batch_size, sequence_length), generator=generator).numpy()

    def max_abs_diff(self, built: Exported, inputs: np.ndarray, output: Any) -> float:
        return difference(output, reference_output(built.reference, inputs))

    def attn_implementation(self, built: Exported) -> str:
        return str(getattr(built.config, "_attn_implementation", None) or "eager")

    def inference_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def sync(self, output: Any) -> None:
        """Calls return when their work is done."""

    def free(self) -> None:
        gc.collect()

    def reset_peak_memory(self) -> None:
        """CPU only: the sweep reads the process's resident memory instead."""

    def peak_memory_bytes(self) -> int:
        return 0
