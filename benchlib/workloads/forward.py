"""The study's workload: one forward pass of the model over a batch of seeded random token ids, its output
compared with eager PyTorch float32's on the same ids."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchlib.backends import Backend
    from benchlib.config.catalogue import ModelSpec


def make_inputs(backend: Backend, spec: ModelSpec, scale: str, batch_size: int, sequence_length: int, seed: int) -> Any:
    """Seeded random token ids of shape (batch_size, sequence_length), below the model's vocabulary, on the backend's device."""
    return backend.make_inputs(spec.vocab_size(scale), batch_size, sequence_length, seed)


def prepare_call(backend: Backend, model: Any, inputs: Any) -> Callable[[], Any]:
    """The timed call: one forward pass on `inputs` (traced or compiled for this shape where the mode says so)."""
    return backend.prepare(model, inputs)


def output_difference(backend: Backend, model: Any, inputs: Any, output: Any) -> float | None:
    """The largest absolute difference of one call's `output` from eager PyTorch float32's on `inputs` (None where not compared)."""
    return backend.max_abs_diff(model, inputs, output)
