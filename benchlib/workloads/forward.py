"""The study's workload: one forward pass of the model over a batch of token ids (seeded random ids, or real text), its
output compared with eager PyTorch float32's on the same ids."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from benchlib.backends.pytorch import as_array
from benchlib.workloads.agreement import Agreement, agreement

if TYPE_CHECKING:
    from benchlib.backends import Backend


def prepare_call(backend: Backend, model: Any, inputs: Any) -> Callable[[], Any]:
    """The timed call: one forward pass on `inputs` (traced or compiled for this shape where the mode says so)."""
    return backend.prepare(model, inputs)


def compare(backend: Backend, model: Any, inputs: Any, output: Any, task: str) -> Agreement | None:
    """One call's `output` against eager PyTorch float32's on `inputs` (None where the backend is not compared)."""
    reference = backend.reference_output(model, inputs)
    return None if reference is None else agreement(task, as_array(output), reference)
