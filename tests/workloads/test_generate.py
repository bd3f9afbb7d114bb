"""Generated tokens against eager PyTorch float32's: the share of positions that agree before the first difference, and
the first token that differs."""

from __future__ import annotations

import numpy as np
import pytest

from benchlib.workloads.generate import token_agreement


def test_the_same_tokens_agree_fully() -> None:
    ids = np.array([[5, 6, 7, 8], [1, 2, 3, 4]])
    assert token_agreement(ids, ids.copy()) == (1.0, None)


def test_positions_after_a_rows_first_difference_do_not_count_even_where_equal() -> None:
    reference = np.array([[5, 6, 7, 8], [1, 2, 3, 4]])
    ids = np.array([[5, 6, 0, 8], [1, 2, 3, 4]])  # row 0 parts at its third token and meets again at its fourth
    share, first = token_agreement(ids, reference)
    assert share == pytest.approx((2 + 4) / 8) and first == 3


def test_the_first_divergence_is_the_earliest_over_the_rows() -> None:
    reference = np.array([[5, 6, 7, 8], [1, 2, 3, 4]])
    ids = np.array([[5, 6, 7, 0], [9, 2, 3, 4]])
    assert token_agreement(ids, reference) == (pytest.approx(3 / 8), 1)


def test_shapes_that_differ_are_an_error() -> None:
    with pytest.raises(ValueError, match="generated ids of shape"):
        token_agreement(np.zeros((1, 3)), np.zeros((1, 4)))
