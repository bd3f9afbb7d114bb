"""A model's quality on the user's data in one environment: the whole `eval_data` set (or, for a causal language model
that generates, the text's perplexity) scored by the environment's own runtime and precision, batched as it measures,
with eager PyTorch float32's answers on the same ids as the reference, timed apart from every measurement; and under
load, LoadGen's accuracy mode through the same serving loop, scored from LoadGen's own log by the same scorer.

The columns it gives are the same in every row of the model (store.results.COLUMNS' `quality_*`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchlib.backends.pytorch import as_array
from benchlib.config.eval_data import CLASSIFICATION, KIND_METRIC, PERPLEXITY, EvalSet, read_eval_data
from benchlib.config.models import has_tokenizer
from benchlib.config.params import GENERATE_TASK
from benchlib.paths import display_path
from benchlib.scenarios.loadgen import run_accuracy
from benchlib.scenarios.serving import Request, StreamCall, batch_ids
from benchlib.status import describe
from benchlib.store.layout import ACCURACY_TEST, loadgen_folder
from benchlib.workloads.inputs import load_tokenizer, text_of
from benchlib.workloads.quality import Prepared, Scored, as_reference, prepare_examples, responses, score, verdict

if TYPE_CHECKING:
    from benchlib.backends import Backend
    from benchlib.config.catalogue import ModelSpec
    from benchlib.config.params import BenchmarkParams

Columns = dict[str, Any]
SAMPLE_TEXT = "the text (text_file, or the kit's sample)"  # `quality_data` where a causal model is scored on the text
# `quality_reason` of a causal model that generates without a tokenizer of its own: no text to read its perplexity on
NO_TOKENIZER_REASON = "not scored: no tokenizer to read the text with (a catalogue model has none: give a checkpoint folder)"


def eval_set(params: BenchmarkParams, spec: ModelSpec) -> EvalSet | None:
    """What `spec` is scored on in this environment: `eval_data`, or for a causal language model that generates, the
    text's paragraphs (perplexity); None where neither applies."""
    if params.eval_data is not None:
        return read_eval_data(params.eval_data)
    if params.workload == "generate" and spec.task == GENERATE_TASK:
        paragraphs = tuple(part.strip() for part in text_of(params.text_file).split("\n\n") if part.strip())
        return EvalSet(params.text_file or SAMPLE_TEXT, PERPLEXITY, paragraphs, tuple(range(1, len(paragraphs) + 1)))
    return None


def prepare_for(spec: ModelSpec, params: BenchmarkParams, examples: EvalSet) -> Prepared:
    """`examples` tokenized by `spec`'s tokenizer, cut to its context."""
    tokenizer = load_tokenizer(str(spec.source), spec.trust_remote_code)
    config = spec.build_config(params.model_scale)
    context = spec.max_sequence_length or getattr(tokenizer, "model_max_length", 512)
    return prepare_examples(examples, tokenizer, int(context), config.id2label if examples.kind == CLASSIFICATION else None)


def is_reference(params: BenchmarkParams) -> bool:
    """Whether this environment is eager PyTorch float32 (on full float32 units, not TF32's), the reference every other
    is scored against."""
    return (params.framework, params.mode, params.precision) == ("pytorch", "eager", "float32") and not params.options.get("tf32")


def batches(rows: Sequence[np.ndarray], batch: int) -> list[list[int]]:
    """The rows' indices in batches of at most `batch` rows of one length (longest first)."""
    by_length: dict[int, list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        by_length[len(row)].append(index)
    return [indices[i : i + batch] for _, indices in sorted(by_length.items(), reverse=True) for i in range(0, len(indices), batch)]


def scoring_call(backend: Backend, model: Any, shapes: Sequence[np.ndarray]) -> Callable[[Any], Any]:
    """The backend's call on any of `shapes` (its `score_call` where it has one, as a generating export does; else its
    serving call), each shape prepared now."""
    examples = [backend.as_inputs(ids) for ids in shapes]
    make = getattr(backend, "score_call", None) or backend.server_call
    return make(model, examples)


def run_lengths(prepared: Prepared) -> list[np.ndarray]:
    """The rows as the model reads them. A perplexity row is a causal model's: tokens added after its last change none of
    its logits, so each is lengthened (its last token repeated) to the next power of two, at most the longest row's
    length, and its response cut back (`direct_answers`). A backend that compiles per shape (torch.compile, XLA) then
    compiles for a few lengths, not for every text's. Other rows are read as they are."""
    if prepared.kind != PERPLEXITY or not prepared.rows:
        return prepared.rows
    longest = max(len(row) for row in prepared.rows)
    lengths = [min(1 << (len(row) - 1).bit_length(), longest) for row in prepared.rows]
    return [np.concatenate([row, np.full(length - len(row), row[-1], dtype=row.dtype)]) for row, length in zip(prepared.rows, lengths)]


def direct_answers(backend: Backend, model: Any, prepared: Prepared, batch: int) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Every row's response in this environment and eager float32's on the same ids (None where the backend has no
    reference to compare with), batched as the serving loop batches: rows of one length (`run_lengths`), padded to a
    bucket with copies of the first."""
    rows = run_lengths(prepared)
    groups = batches(rows, batch)
    padded = [batch_ids([Request(i, rows[i]) for i in group], batch) for group in groups]
    answers: list[np.ndarray | None] = [None] * len(prepared.rows)
    reference: list[np.ndarray | None] | None = [None] * len(prepared.rows)
    with backend.inference_context():
        call = scoring_call(backend, model, list({ids.shape: ids for ids in padded}.values()))
        for group, ids in zip(groups, padded):
            inputs = backend.as_inputs(ids)
            output = as_array(call(inputs))
            for i, answer in zip(group, responses(prepared.kind, output, ids)):
                answers[i] = own_part(answer, prepared, i)
            expected = backend.reference_output(model, inputs) if reference is not None else None
            if expected is None:
                reference = None
                continue
            for i, answer in zip(group, responses(prepared.kind, expected, ids)):
                reference[i] = own_part(answer, prepared, i)
    return answers, reference  # type: ignore[return-value]


def own_part(answer: np.ndarray, prepared: Prepared, row: int) -> np.ndarray:
    """A perplexity row's response (one log-likelihood per next token) without the tokens `run_lengths` added; another
    row's response as it is."""
    return answer[: len(prepared.rows[row]) - 1] if prepared.kind == PERPLEXITY else answer


def quality_columns(backend: Backend, model: Any, spec: ModelSpec, params: BenchmarkParams) -> tuple[Columns, Prepared | None]:
    """The model's quality columns in this environment (none where nothing applies to it), and the set as prepared (for
    the accuracy test under load). A failure to score, or a text it has no tokenizer to read, is the columns'
    `quality_reason`; the cells are measured still."""
    examples = eval_set(params, spec)
    if examples is None:
        return {}, None
    start = time.perf_counter()
    named = {"quality_data": examples.path if examples.path == SAMPLE_TEXT else display_path(examples.path), "quality_target": params.quality_target}
    if not has_tokenizer(spec.source):  # generating without eval_data (a set of the user's is checked before any kernel)
        return {**named, "quality_metric": examples.metric, "quality_reason": NO_TOKENIZER_REASON}, None
    try:
        prepared = prepare_for(spec, params, examples)
        answers, reference = direct_answers(backend, model, prepared, max(params.batch_sizes))
        scored = score(prepared, examples.metric, answers, reference, params.seed)
    except Exception as exc:  # the model's cells are measured still  # noqa: BLE001
        return {**named, "quality_metric": examples.metric, "quality_reason": f"scoring failed: {describe(exc)}"}, None
    if reference is None and is_reference(params):
        scored = as_reference(scored)
    reason = ""
    if scored.ratio is None:
        reason = "no reference: this backend's outputs are not compared with eager PyTorch float32's"
    elif not np.isfinite(scored.ratio):
        reason = f"no ratio: eager PyTorch float32's {scored.metric} is {scored.reference:.3g}, not above 0"
    return {**named, **scored_columns(scored, params.quality_target), "quality_s": time.perf_counter() - start, "quality_reason": reason}, prepared


def scored_columns(scored: Scored, target: float) -> Columns:
    """A `Scored` as the row's columns, with the ratio's verdict against `target` from its interval (`keeps`, `below` or
    `undecided`: `workloads.quality.verdict`; blank without a ratio)."""
    blank = lambda value: "" if value is None or not np.isfinite(value) else value  # noqa: E731
    has_ratio = scored.ratio is not None and np.isfinite(scored.ratio)
    return {
        "quality_metric": scored.metric, "quality_value": blank(scored.value), "quality_low": blank(scored.low), "quality_high": blank(scored.high),
        "quality_reference": blank(scored.reference), "quality_ratio": blank(scored.ratio), "quality_ratio_low": blank(scored.ratio_low) if has_ratio else "",
        "quality_ratio_high": blank(scored.ratio_high) if has_ratio else "", "quality_verdict": verdict(scored.ratio, scored.ratio_low, scored.ratio_high, target) if has_ratio else "", "quality_n": scored.examples,
        "quality_truncated": scored.truncated, "quality_f1": blank(scored.f1),
    }  # fmt: skip


def served_quality(
    prepared: Prepared, calls: Sequence[StreamCall], max_batch: int, env_dir: Path, model: str, round_number: int, seed: int
) -> Columns:  # fmt: skip
    """LoadGen's accuracy mode through the serving loop of `calls`: every row of `prepared` issued once, its response
    logged by LoadGen, and the set's metric scored from that log (`served_quality_value`; `accuracy_log` where it is)."""
    folder = loadgen_folder(env_dir, model, ACCURACY_TEST, round_number)
    kind = prepared.kind

    def respond(row: np.ndarray, ids: np.ndarray) -> np.ndarray:
        return responses(kind, row[None], ids[None])[0]

    served = run_accuracy(prepared.rows, calls, max_batch, folder, respond, as_array)
    scored = score(prepared, KIND_METRIC[kind], served, None, seed)
    return {"served_quality_value": scored.value, "accuracy_log": str(folder.relative_to(env_dir))}
