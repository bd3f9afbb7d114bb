"""What the backends that run an exported PyTorch model (ONNX Runtime, OpenVINO) share: the ONNX
export, cached once per model in the run folder, and the cell's plumbing (inputs, comparison with
eager PyTorch float32, no device to wait for).
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchlib.backends import lazy_import
from benchlib.backends.pytorch import build_reference, difference, reference_output, traceable_masks, use_torch

if TYPE_CHECKING:  # the catalogue sits above the backends: they are handed its entries
    from benchlib.config.catalogue import ModelSpec

torch = lazy_import("torch")

ONNX_OPSET = 17
MODEL_FILE = "model.onnx"


def export_dir(cache_dir: Path | None) -> Path:
    """Where exports are kept: the run folder's exports/, or a temporary folder without one."""
    if cache_dir is None:
        cache_dir = Path(tempfile.gettempdir()) / "benchlib-exports"
    cache_dir.mkdir(parents=True, exist_ok=True)
    return cache_dir


def export_path(spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None) -> Path:
    """Where the ONNX export of `spec` at `scale` with weights from `seed` is kept (whether or not it exists yet)."""
    return export_dir(cache_dir) / f"{spec.name}-{scale}-seed{seed}-opset{ONNX_OPSET}" / MODEL_FILE


def export_onnx(reference: Any, spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None) -> Path:
    """The ONNX file of `reference` (eager float32, weights from `seed`), with dynamic batch and sequence axes.

    Exported once per model, scale and seed with `torch.onnx.export(..., dynamo=False)` under
    `traceable_masks`, into a folder of its own (a model over 2 GB keeps its weights in files beside
    it); a later environment of the same run finds it there. The folder appears whole or not at all.
    """
    folder = export_path(spec, scale, seed, cache_dir).parent
    if (folder / MODEL_FILE).exists():
        return folder / MODEL_FILE
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        ids = torch.zeros((1, 8), dtype=torch.long)
        with torch.no_grad(), traceable_masks(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer and deprecation warnings: the graph is checked by the output's difference
            torch.onnx.export(
                reference, (ids,), str(partial / MODEL_FILE), input_names=["input_ids"], output_names=["last_hidden_state"],
                dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}}, opset_version=ONNX_OPSET, dynamo=False,
            )  # fmt: skip
        try:
            os.rename(partial, folder)
        except OSError:  # another environment exported it meanwhile: keep theirs
            shutil.rmtree(partial, ignore_errors=True)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return folder / MODEL_FILE


@dataclass
class Exported:
    """A built model: what the backend runs, and the eager float32 PyTorch model it is compared with."""

    runner: Any  # an onnxruntime.InferenceSession or an openvino.CompiledModel
    reference: Any
    path: Path

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

    def export(self, spec: ModelSpec, scale: str) -> tuple[Any, Path]:
        """(eager float32 reference, path of its ONNX export)."""
        use_torch()
        reference = build_reference(spec, scale, self.seed)
        return reference, export_onnx(reference, spec, scale, self.seed, self.cache_dir)

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
