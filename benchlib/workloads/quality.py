"""Quality on the user's data: an `EvalSet` tokenized for one model (`prepare_examples`), each row's response taken from a
backend's output (`responses`: the class's logits, the mean-pooled embedding, the next tokens' log-likelihoods), and the
set's metric computed from the responses (`Scored`), with a bootstrap interval over examples for the metric and for its
ratio to eager float32's, both computed on the same resampled examples.

A response is what MLPerf's accuracy mode logs for a sample: the direct scoring and LoadGen's accuracy log are scored by
the same functions, so that the two can only differ by what the serving did to the answers.

A verdict against a target follows the interval, not the point estimate (`verdict`): `keeps` when the whole interval is
at or above the target, `below` when it is wholly under it, `undecided` otherwise, with the examples that would likely
decide (`examples_to_decide`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special

from benchlib.config.eval_data import CLASSIFICATION, PERPLEXITY, SIMILARITY, EvalSet, label_index

PERPLEXITY_WINDOW = 256  # the longest window of a text scored at once (the model's context where that is shorter)...
BOOTSTRAP_RESAMPLES = 1000
CONFIDENCE = 0.95
KEEPS, BELOW, UNDECIDED = "keeps", "below", "undecided"
VERDICTS: tuple[str, ...] = (KEEPS, BELOW, UNDECIDED)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def verdict(value: float | None, low: float | None, high: float | None, target: float) -> str:
    """`keeps` when the interval's lower end is at or above `target`, `below` when its upper end is under it,
    `undecided` when it holds the target; without an interval (a figure of one batch), the point estimate decides
    (`keeps` or `below`); "" without a value."""
    if not _finite(value):
        return ""
    if not (_finite(low) and _finite(high)):
        return KEEPS if value >= target else BELOW
    if low >= target:
        return KEEPS
    return BELOW if high < target else UNDECIDED


def examples_to_decide(value: float, low: float, high: float, target: float, examples: int) -> int | None:
    """About how many examples would likely decide an undecided verdict: where the half of the interval that faces the
    target, shrinking as one over the square root of the examples, would reach from the estimate just to the target.
    None where that cannot be said (no interval, or the estimate on the target itself)."""
    if not all(_finite(x) for x in (value, low, high)) or examples < 1:
        return None
    distance, reach = abs(value - target), (value - low) if value >= target else (high - value)
    if distance == 0 or reach <= 0:
        return None
    return max(examples + 1, math.ceil(examples * (reach / distance) ** 2))


@dataclass(frozen=True)
class Prepared:
    """An `EvalSet` as one model reads it: `rows` (token ids run by the model, one response each) and what scores them.

    Classification: one row per example, `gold` the classes. Similarity: the texts' rows then the pairs', `gold` the
    scores. Perplexity: the windows of each text, `windows[i]` = (its example, how many of its last targets it scores)."""

    kind: str
    rows: list[np.ndarray]
    gold: np.ndarray
    examples: int
    truncated: int = 0  # texts cut to the model's context
    windows: list[tuple[int, int]] = field(default_factory=list)


def _ids(tokenizer: Any, text: str, max_length: int) -> tuple[np.ndarray, bool]:
    """`text`'s ids with the tokenizer's special tokens, cut to `max_length` (and whether it was)."""
    full = tokenizer(text)["input_ids"]
    cut = tokenizer(text, truncation=True, max_length=max_length)["input_ids"] if len(full) > max_length else full
    return np.asarray(cut, dtype=np.int64), len(full) > max_length


def perplexity_windows(ids: np.ndarray, window: int) -> list[tuple[np.ndarray, int]]:
    """Windows of `ids` of at most `window` tokens moved by half a window, each with how many of its last targets it
    scores, so that every token after the first is scored once with as much context as its window gives (the
    strided evaluation of transformers' perplexity guide)."""
    stride, windows, scored_to = max(1, window // 2), [], 1  # the first token has no prediction
    for begin in range(0, max(len(ids) - 1, 1), stride):
        end = min(begin + window, len(ids))
        if end - scored_to > 0:
            windows.append((ids[begin:end], end - scored_to))
            scored_to = end
        if end == len(ids):
            break
    return windows


def prepare_examples(examples: EvalSet, tokenizer: Any, context: int, id2label: dict[Any, str] | None = None) -> Prepared:
    """`examples` tokenized by the model's `tokenizer`, texts cut to `context` tokens (a perplexity text is read in
    windows instead, none cut)."""
    if examples.kind == PERPLEXITY:
        rows, windows, counts = [], [], []
        for index, text in enumerate(examples.texts):
            ids = np.asarray(tokenizer(text)["input_ids"], dtype=np.int64)
            parts = perplexity_windows(ids, min(context, PERPLEXITY_WINDOW)) if len(ids) > 1 else []
            rows += [part for part, _ in parts]
            windows += [(index, scored) for _, scored in parts]
            counts.append(sum(scored for _, scored in parts))
        return Prepared(PERPLEXITY, rows, np.asarray(counts, dtype=np.int64), len(examples), windows=windows)
    texts = [*examples.texts, *examples.text_pairs]
    tokenized = [_ids(tokenizer, text, context) for text in texts]
    rows, truncated = [ids for ids, _ in tokenized], sum(cut for _, cut in tokenized)
    if examples.kind == CLASSIFICATION:
        assert id2label is not None, "a classification set needs the model's id2label"
        gold = np.asarray([label_index(label, id2label) for label in examples.labels], dtype=np.int64)
    else:
        gold = np.asarray(examples.scores, dtype=np.float64)
    return Prepared(examples.kind, rows, gold, len(examples), truncated)


def responses(kind: str, output: np.ndarray, ids: np.ndarray) -> list[np.ndarray]:
    """Each row's response from a backend's output (float32) on `ids` (batch, sequence): a classifier's logits, the
    mean-pooled last hidden state, or the log-likelihood of each next token (sequence - 1 of them)."""
    output = np.asarray(output, dtype=np.float32)
    if kind == CLASSIFICATION:
        return list(output.reshape(output.shape[0], -1))
    if kind == SIMILARITY:
        return list(output.mean(axis=1))
    logits = output[:, :-1].astype(np.float64)
    chosen = np.take_along_axis(logits, ids[:, 1:, None], axis=-1)[..., 0]
    return list((chosen - special.logsumexp(logits, axis=-1)).astype(np.float32))


def per_example(prepared: Prepared, answers: Sequence[np.ndarray]) -> np.ndarray:
    """What each example contributes to the metric, from the responses of `prepared.rows`: the predicted class, the
    cosine of its two texts, or its negative log-likelihood (the scored tokens' count is `prepared.gold`)."""
    n = prepared.examples
    if prepared.kind == CLASSIFICATION:
        return np.asarray([int(np.argmax(answer)) for answer in answers], dtype=np.int64)
    if prepared.kind == SIMILARITY:
        a, b = np.stack(answers[:n]).astype(np.float64), np.stack(answers[n:]).astype(np.float64)
        norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), np.finfo(np.float64).tiny)
        return (a * b).sum(axis=1) / norms
    nll = np.zeros(n)
    for (example, scored), answer in zip(prepared.windows, answers):
        nll[example] -= float(np.asarray(answer, dtype=np.float64)[-scored:].sum())
    return nll


def metric(prepared: Prepared, values: np.ndarray, index: np.ndarray | None = None) -> float:
    """The set's metric over the examples `index` (all by default): accuracy, Spearman's correlation, or perplexity."""
    index = np.arange(prepared.examples) if index is None else index
    gold, values = prepared.gold[index], values[index]
    if prepared.kind == CLASSIFICATION:
        return float(np.mean(values == gold))
    if prepared.kind == SIMILARITY:
        from scipy import stats  # here: scipy.stats costs every kernel half a second to import, and only scoring needs it

        return float(stats.spearmanr(values, gold).statistic)
    tokens = gold.sum()
    return float(np.exp(values.sum() / tokens)) if tokens else float("nan")


def macro_f1(prepared: Prepared, values: np.ndarray) -> float:
    """A classification set's F1 averaged over the classes its labels or the predictions hold."""
    scores = []
    for label in np.union1d(prepared.gold, values):
        true_positive = np.sum((values == label) & (prepared.gold == label))
        predicted, actual = np.sum(values == label), np.sum(prepared.gold == label)
        scores.append(2 * true_positive / (predicted + actual) if predicted + actual else 0.0)
    return float(np.mean(scores))


def ratio(prepared: Prepared, value: float, reference: float) -> float:
    """`value` against eager float32's `reference`, higher is better: a perplexity's is the reference's over it."""
    low, high = (value, reference) if prepared.kind == PERPLEXITY else (reference, value)
    return high / low if low > 0 else float("nan")  # no ratio to a score of 0 or less


@dataclass(frozen=True)
class Scored:
    """A set's metric in one environment: its value and interval, and where eager float32's responses are known,
    `reference` (its value) and the ratio with its interval."""

    metric: str
    value: float
    low: float
    high: float
    examples: int
    truncated: int
    f1: float | None = None
    reference: float | None = None
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None


def _interval(statistic: Callable[[np.ndarray], Any], n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The percentile bootstrap interval (scipy) of `statistic` of resampled example indices."""
    if n < 2:
        value = np.atleast_1d(statistic(np.arange(n)))
        return value, value
    from scipy import stats  # as in `metric`

    with warnings.catch_warnings():  # a resample of constant values has no correlation: left out of the percentiles
        warnings.simplefilter("ignore")
        result = stats.bootstrap(
            (np.arange(n),), statistic, vectorized=False, n_resamples=BOOTSTRAP_RESAMPLES, confidence_level=CONFIDENCE,
            method="percentile", random_state=np.random.default_rng(seed),
        )  # fmt: skip
        distribution = np.atleast_2d(result.bootstrap_distribution)
        tail = 100 * (1 - CONFIDENCE) / 2
        return np.nanpercentile(distribution, tail, axis=-1), np.nanpercentile(distribution, 100 - tail, axis=-1)


def score(prepared: Prepared, metric_name: str, answers: Sequence[np.ndarray], reference: Sequence[np.ndarray] | None, seed: int = 0) -> Scored:
    """The set's metric from this environment's `answers` and, where given, eager float32's (`reference`), with their
    intervals (the ratio's from the same resampled examples)."""
    values = per_example(prepared, answers)
    value, n = metric(prepared, values), prepared.examples
    f1 = macro_f1(prepared, values) if prepared.kind == CLASSIFICATION else None
    if reference is None:
        low, high = _interval(lambda index: metric(prepared, values, index), n, seed)
        return Scored(metric_name, value, float(low[0]), float(high[0]), n, prepared.truncated, f1)
    reference_values = per_example(prepared, reference)
    reference_value = metric(prepared, reference_values)

    def both(index: np.ndarray) -> np.ndarray:
        own, theirs = metric(prepared, values, index), metric(prepared, reference_values, index)
        return np.asarray([own, ratio(prepared, own, theirs)])

    low, high = _interval(both, n, seed)
    return Scored(
        metric_name, value, float(low[0]), float(high[0]), n, prepared.truncated, f1, reference_value,
        ratio(prepared, value, reference_value), float(low[1]), float(high[1]),
    )  # fmt: skip


def as_reference(scored: Scored) -> Scored:
    """Eager float32's own score: its ratio to itself is 1."""
    return Scored(**{**scored.__dict__, "reference": scored.value, "ratio": 1.0, "ratio_low": 1.0, "ratio_high": 1.0})
