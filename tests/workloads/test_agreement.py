"""Agreement with eager PyTorch float32 on constructed outputs: identical, slightly perturbed, a wrong top-1."""

from __future__ import annotations

import numpy as np
import pytest

from benchlib.workloads.agreement import AGREEMENT_BAR, COSINE, TOP1, agreement

rng = np.random.default_rng(0)
HIDDEN = rng.normal(size=(2, 8, 32)).astype(np.float32)
LOGITS = rng.normal(size=(2, 8, 50)).astype(np.float32) * 5


@pytest.mark.parametrize("task", ["feature-extraction", "fill-mask", "causal-lm", "text-classification"])
def test_identical_outputs_agree_fully(task: str) -> None:
    output = LOGITS[:, 0] if task == "text-classification" else (HIDDEN if task == "feature-extraction" else LOGITS)
    compared = agreement(task, output.copy(), output)
    assert compared.value == pytest.approx(1.0) and compared.max_abs_diff == 0.0
    assert compared.metric == (COSINE if task == "feature-extraction" else TOP1)


def test_a_slightly_perturbed_output_still_agrees() -> None:
    noise = rng.normal(scale=1e-3, size=HIDDEN.shape).astype(np.float32)
    compared = agreement("feature-extraction", HIDDEN + noise, HIDDEN)
    assert AGREEMENT_BAR < compared.value < 1.0 and compared.max_abs_diff == pytest.approx(np.abs(noise).max(), rel=1e-4)
    assert compared.scale == pytest.approx(np.abs(HIDDEN).max())
    assert agreement("causal-lm", LOGITS + noise[..., :1], LOGITS).value == 1.0  # the same top-1 at every position


def test_a_wrong_top1_lowers_agreement_by_its_share() -> None:
    wrong = LOGITS.copy()
    row, position = 1, 3
    wrong[row, position, LOGITS[row, position].argmin()] = LOGITS.max() + 1  # another token wins at one of 16 positions
    assert agreement("fill-mask", wrong, LOGITS).value == pytest.approx(15 / 16)
    classes = LOGITS[:, 0]
    flipped = classes[:, ::-1].copy()  # the lowest class becomes the highest in both rows
    assert agreement("text-classification", flipped, classes).value == 0.0


def test_an_unrelated_output_has_low_cosine_and_shapes_must_match() -> None:
    assert agreement("feature-extraction", rng.normal(size=HIDDEN.shape), HIDDEN).value < 0.5
    with pytest.raises(ValueError, match="output of shape \\(2, 8\\) where eager PyTorch float32 gives \\(2, 8, 32\\)"):
        agreement("feature-extraction", HIDDEN[:, :, 0], HIDDEN)
