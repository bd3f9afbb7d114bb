"""How far an environment's output is from eager PyTorch float32's on the same ids: the largest absolute difference, and
a task-level agreement (cosine similarity of the mean-pooled hidden states for feature extraction; the share of equal
top-1 predictions for a head: the class, or the token at every position). 1.0 is full agreement."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

COSINE = "cosine_mean_pooled"
TOP1 = "top1_agreement"
METRICS: dict[str, str] = {"feature-extraction": COSINE, "text-classification": TOP1, "fill-mask": TOP1, "causal-lm": TOP1}
AGREEMENT_BAR = 0.99  # MLPerf's bar for a reduced-precision result: 99% of float32's quality


@dataclass(frozen=True)
class Agreement:
    """One output against the reference: `max_abs_diff`, its `scale` (the reference's largest absolute value, at least 1),
    and the task's `metric` and `value`."""

    max_abs_diff: float
    scale: float
    metric: str
    value: float


def cosine_mean_pooled(output: np.ndarray, reference: np.ndarray) -> float:
    """The mean over the batch of the cosine similarity of each row's mean-pooled hidden state (batch, sequence, width)."""
    a, b = output.reshape(output.shape[0], -1, output.shape[-1]).mean(axis=1), reference.reshape(reference.shape[0], -1, reference.shape[-1]).mean(axis=1)
    norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    return float(((a * b).sum(axis=-1) / np.maximum(norms, np.finfo(np.float32).tiny)).mean())


def top1_agreement(output: np.ndarray, reference: np.ndarray) -> float:
    """The share of positions (rows of a classifier; every token of a language model) whose highest logit is the same class."""
    return float((output.argmax(axis=-1) == reference.argmax(axis=-1)).mean())


def agreement(task: str, output: np.ndarray, reference: np.ndarray) -> Agreement:
    """`output` against `reference` (same shape) for `task`."""
    output, reference = np.asarray(output, dtype=np.float32), np.asarray(reference, dtype=np.float32)
    if output.shape != reference.shape:
        raise ValueError(f"output of shape {output.shape} where eager PyTorch float32 gives {reference.shape}")
    metric = METRICS[task]
    value = cosine_mean_pooled(output, reference) if metric == COSINE else top1_agreement(output, reference)
    max_abs_diff = float(np.max(np.abs(output - reference))) if output.size else 0.0
    scale = max(1.0, float(np.max(np.abs(reference)))) if reference.size else 1.0
    return Agreement(max_abs_diff, scale, metric, value)
