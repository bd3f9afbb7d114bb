"""What the backends that run an exported PyTorch model (ONNX Runtime, OpenVINO) share: the ONNX
export, made once per model's weights in the build cache, and the cell's plumbing (inputs, comparison
with eager PyTorch float32, no device to wait for, generation through transformers' `generate` of optimum's models).
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchlib.backends import lazy_import
from benchlib.backends._generate import Generator, transformers_generator
from benchlib.backends.pytorch import build_reference, first_output, reference_output, reference_tokens, traceable_masks, use_torch, weights, weights_key
from benchlib.machine import package_version
from benchlib.store.cache import Artefact, artefact

if TYPE_CHECKING:  # the catalogue sits above the backends: they are handed its entries
    from benchlib.config.catalogue import ModelSpec

torch = lazy_import("torch")

ONNX_OPSET = 17
MODEL_FILE = "model.onnx"


def onnx_export(reference: Any, made_from: Artefact, label: str, cache_dir: Path | None, output: str = "last_hidden_state") -> Artefact:
    """The build cache's ONNX export of `reference` (eager float32 with its head, loaded from the weights `made_from`),
    with dynamic batch and sequence axes: `torch.onnx.export(..., dynamo=False)` under `traceable_masks`,
    once per weights, class, opset and exporter versions; `output` names its output. A model over 2 GB keeps its
    weights in files beside it."""
    key = {
        "weights": weights_key(made_from), "class": type(reference).__name__, "graph": "input_ids -> first output", "opset": ONNX_OPSET,
        "torch": torch.__version__, "onnx": package_version("onnx"),
    }  # fmt: skip

    def make(folder: Path) -> None:
        ids = torch.zeros((1, 8), dtype=torch.long)
        with torch.no_grad(), traceable_masks(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer and deprecation warnings: the graph is checked by the output's difference
            torch.onnx.export(
                ids_only(reference), (ids,), str(folder / MODEL_FILE), input_names=["input_ids"], output_names=[output],
                dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}}, opset_version=ONNX_OPSET, dynamo=False,
            )  # fmt: skip

    return artefact("onnx", label, key, make, cache_dir)


def ids_only(model: Any) -> Any:
    """`model` as a module called with its token ids alone, by keyword, that returns its first output: the exported graph
    has one input and one output, and none of the forward's other arguments (a decoder's `logits_to_keep`) is recorded
    as an input. (A class made here: defining it at import would import PyTorch into every kernel.)"""

    class IdsOnly(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any) -> Any:
            return first_output(self.model(input_ids=input_ids))

    return IdsOnly().eval()  # export restores the mode it found: train mode would be left on the model (dropout)


def output_name(task: str) -> str:
    """The name of the exported graph's output for `task`: the bare model's last hidden state, or a head's logits."""
    return "last_hidden_state" if task == "feature-extraction" else "logits"


@dataclass
class Exported:
    """A built model: what the backend runs, and the eager float32 PyTorch model it is compared with."""

    runner: Any  # an onnxruntime.InferenceSession or an openvino.CompiledModel; to generate, optimum's ORTModelForCausalLM or OVModelForCausalLM
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
    workload: str = "forward"  # "generate": `build` makes optimum's generation model instead of the forward export

    def export(self, spec: ModelSpec, scale: str) -> tuple[Any, Artefact]:
        """(eager float32 reference, the build cache's entry of its ONNX export)."""
        use_torch()
        made_from = weights(spec, scale, self.seed, self.cache_dir)
        reference = build_reference(spec, scale, self.seed, cache_dir=self.cache_dir)
        return reference, onnx_export(reference, made_from, spec.cache_label(scale), self.cache_dir, output_name(spec.task))

    def as_inputs(self, ids: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(ids, dtype=np.int64)

    def reference_output(self, built: Exported, inputs: np.ndarray) -> np.ndarray:
        return reference_output(built.reference, inputs)

    def score_call(self, built: Exported, examples: Sequence[np.ndarray]) -> Callable[[np.ndarray], Any]:
        """A forward pass on any shape for scoring: the serving call, or when built to generate, optimum's model called
        without a cache (its logits), each shape of `examples` run once now."""
        if self.workload != "generate":
            return self.server_call(built, examples)  # type: ignore[attr-defined]  # each backend's own

        def call(x: np.ndarray) -> Any:
            ids = torch.from_numpy(np.ascontiguousarray(x, dtype=np.int64))
            with torch.no_grad():
                return built.runner(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits

        for example in examples:
            call(example)
        return call

    def generator(self, built: Exported, inputs: np.ndarray) -> Generator:
        return transformers_generator(built.runner, torch.from_numpy(inputs))

    def reference_tokens(self, built: Exported, inputs: np.ndarray, new_tokens: int) -> np.ndarray:
        return reference_tokens(built.reference, inputs, new_tokens)

    def attn_implementation(self, built: Exported) -> str:
        return str(getattr(built.config, "_attn_implementation", None) or "eager")

    def inference_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def sync(self, output: Any) -> None:
        """Calls return when their work is done."""

    def device_busy_s(self, call: Callable[[], Any]) -> float | None:
        return None  # not profiled: its runtime's kernels are not timed here

    def free(self) -> None:
        gc.collect()

    def reset_peak_memory(self) -> None:
        """CPU only: the sweep reads the process's resident memory instead."""

    def peak_memory_bytes(self) -> int | None:
        """None: ONNX Runtime and OpenVINO keep no peak counter of a GPU's memory (blank, never 0)."""
        return None
