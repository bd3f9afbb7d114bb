"""`eval_data`: the user's own examples, a JSONL or CSV file whose columns say the task it scores, read and checked
before any kernel starts (each problem one line naming the file, the line and the field).

- `text` and `label` (a label name from the model's `id2label`, or an index): classification, scored by accuracy.
- `text`, `text_pair` and `score`: similarity of two texts, scored by Spearman's correlation of the cosine of their
  mean-pooled embeddings with `score`.
- `text` alone, with a causal language model: perplexity over the texts.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib.config.catalogue import ModelSpec
from benchlib.config.models import has_tokenizer

CLASSIFICATION, SIMILARITY, PERPLEXITY = "classification", "similarity", "perplexity"
# Each kind of set: the columns that name it, the task its model must have, and the metric it is scored by.
KIND_COLUMNS: dict[str, frozenset[str]] = {
    CLASSIFICATION: frozenset({"text", "label"}), SIMILARITY: frozenset({"text", "text_pair", "score"}), PERPLEXITY: frozenset({"text"}),
}  # fmt: skip
KIND_TASK: dict[str, str] = {CLASSIFICATION: "text-classification", SIMILARITY: "feature-extraction", PERPLEXITY: "causal-lm"}
KIND_METRIC: dict[str, str] = {CLASSIFICATION: "accuracy", SIMILARITY: "spearman", PERPLEXITY: "perplexity"}
SUFFIXES: tuple[str, ...] = (".jsonl", ".csv")


class EvalDataError(ValueError):
    """An `eval_data` file that cannot be scored; the message is one line naming the file, the line and the field."""


@dataclass(frozen=True)
class EvalSet:
    """The examples of one file: its kind, the texts, and per kind the pairs, labels (as written) or scores, with the line
    each example was read from."""

    path: str
    kind: str
    texts: tuple[str, ...]
    lines: tuple[int, ...]
    text_pairs: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    scores: tuple[float, ...] = ()

    @property
    def metric(self) -> str:
        return KIND_METRIC[self.kind]

    def __len__(self) -> int:
        return len(self.texts)


def _records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of each example of a JSONL or CSV file; a line that does not parse is an EvalDataError."""
    records = []
    with path.open(encoding="utf-8", newline="") as file:
        if path.suffix == ".csv":
            reader = csv.DictReader(file)
            for record in reader:
                if None in record or None in record.values():
                    raise EvalDataError(f"{path} line {reader.line_num}: has {len(record)} fields where the header names {len(reader.fieldnames or [])}")
                records.append((reader.line_num, record))
            return records
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise EvalDataError(f"{path} line {number}: not JSON ({error.msg})") from None
            if not isinstance(record, dict):
                raise EvalDataError(f"{path} line {number}: each line must be a JSON object with the set's fields, not {type(record).__name__}")
            records.append((number, record))
    return records


def kind_of(columns: frozenset[str], path: Path, line: int) -> str:
    """The kind of set its columns name; an EvalDataError lists the column sets allowed."""
    for kind, names in KIND_COLUMNS.items():
        if columns == names:
            return kind
    allowed = "; ".join(f"{', '.join(sorted(names))} ({kind})" for kind, names in KIND_COLUMNS.items())
    raise EvalDataError(f"{path} line {line}: fields {', '.join(sorted(columns)) or '(none)'} name no task; allowed: {allowed}")


def read_eval_data(file: str) -> EvalSet:
    """The examples of `file` (JSONL or CSV), every example with the same fields, every text a non-empty string and
    every score a number; an EvalDataError otherwise."""
    path = Path(file)
    if path.suffix not in SUFFIXES:
        raise EvalDataError(f"{path}: must be a {' or '.join(SUFFIXES)} file")
    if not path.is_file():
        raise EvalDataError(f"{path}: no such file")
    records = _records(path)
    if not records:
        raise EvalDataError(f"{path}: holds no examples")
    kind = kind_of(frozenset(records[0][1]), path, records[0][0])
    for number, record in records:
        if frozenset(record) != KIND_COLUMNS[kind]:
            raise EvalDataError(f"{path} line {number}: fields {', '.join(sorted(record))} where the first example has {', '.join(sorted(KIND_COLUMNS[kind]))}")
        for field in ("text", "text_pair"):
            if field in record and not (isinstance(record[field], str) and record[field].strip()):
                raise EvalDataError(f"{path} line {number}: {field}: must be a non-empty text, not {record[field]!r}")
        if kind == SIMILARITY:
            record["score"] = _number(record["score"], path, number)
        if kind == CLASSIFICATION:
            label = record["label"]
            if isinstance(label, bool) or not isinstance(label, (str, int)) or str(label).strip() == "":
                raise EvalDataError(f"{path} line {number}: label: must be a label name or an index, not {label!r}")
    lines = tuple(number for number, _ in records)
    texts = tuple(record["text"] for _, record in records)
    if kind == CLASSIFICATION:
        return EvalSet(str(path), kind, texts, lines, labels=tuple(str(record["label"]).strip() for _, record in records))
    if kind == SIMILARITY:
        pairs, scores = tuple(record["text_pair"] for _, record in records), tuple(record["score"] for _, record in records)
        return EvalSet(str(path), kind, texts, lines, text_pairs=pairs, scores=scores)
    return EvalSet(str(path), kind, texts, lines)


def _number(value: Any, path: Path, line: int) -> float:
    """`value` as a finite number (a CSV's text too); an EvalDataError naming the score otherwise."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise EvalDataError(f"{path} line {line}: score: must be a number, not {value!r}")
    return number


def label_index(label: str, id2label: dict[Any, str]) -> int | None:
    """The class of `label` (a name of `id2label`, or an index below its size), or None where it is neither."""
    names = {str(name): int(index) for index, name in id2label.items()}
    if label in names:
        return names[label]
    return int(label) if label.isdigit() and int(label) < len(names) else None


def problems_for_model(examples: EvalSet, spec: ModelSpec, scale: str) -> list[str]:
    """What keeps `spec` from scoring `examples` (one line each): no tokenizer, a head that does not fit the set's task,
    a label its `id2label` does not know."""
    where = f"{examples.path}: model {spec.name}"
    if not has_tokenizer(spec.source):
        return [f"{where} has no tokenizer to read the texts with (a catalogue model has none: give a checkpoint folder)"]
    task = KIND_TASK[examples.kind]
    if spec.task != task:
        heads = {"text-classification": "a classification head", "feature-extraction": "a bare encoder (its hidden states)", "causal-lm": "a causal language model"}
        return [f"{where}: a {examples.kind} set needs {heads[task]} (task: {task}), and this model is run as {spec.task}"]
    if examples.kind != CLASSIFICATION:
        return []
    id2label = spec.build_config(scale).id2label
    known = ", ".join(str(name) for name in id2label.values())
    for label, line in zip(examples.labels, examples.lines):
        if label_index(label, id2label) is None:
            return [f"{examples.path} line {line}: label: {label!r} is not one of model {spec.name}'s labels ({known}) nor an index below {len(id2label)}"]
    return []
