"""The generation workload: greedy decoding of exactly `new_tokens` tokens after a prompt (end of sequence ignored), the
same prompt ids in every environment, and the generated tokens compared with eager PyTorch float32's
(`token_agreement`, `first_divergence`). How a generate cell is timed is `measure/generation.py`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from benchlib.status import Unsupported

if TYPE_CHECKING:
    from benchlib.backends import Backend
    from benchlib.backends._generate import Generator


def prepare_generator(backend: Backend, model: Any, inputs: Any) -> Generator:
    """The backend's `Generator` of `model` on the prompt `inputs` (compiled for it where the mode says so); `Unsupported`
    where the backend cannot generate."""
    make = getattr(backend, "generator", None)
    if make is None:
        raise Unsupported(f"{backend.framework} {backend.mode} does not generate")
    return make(model, inputs)


def compare_tokens(backend: Backend, model: Any, inputs: Any, ids: np.ndarray) -> tuple[float, int | None] | None:
    """Generated `ids` against eager PyTorch float32's for the same prompt (`token_agreement`), None where not compared."""
    reference = backend.reference_tokens(model, inputs, ids.shape[1])
    return None if reference is None else token_agreement(ids, reference)


def token_agreement(ids: np.ndarray, reference: np.ndarray) -> tuple[float, int | None]:
    """(the share of generated positions equal to `reference`'s before each row's first difference, the number of the
    first generated token that differs in any row, 1 being the first; None when every row agrees)."""
    ids, reference = np.asarray(ids), np.asarray(reference)
    if ids.shape != reference.shape:
        raise ValueError(f"generated ids of shape {ids.shape} where eager PyTorch float32 generates {reference.shape}")
    equal = ids == reference
    agreeing = np.where(equal.all(axis=1), equal.shape[1], np.argmin(equal, axis=1))  # per row: tokens before the first difference
    first = int(agreeing.min()) + 1 if (agreeing < equal.shape[1]).any() else None
    return float(agreeing.sum() / equal.size) if equal.size else 1.0, first
