"""A cell's token ids: seeded random ids (`inputs: random`, the study's), or real text tokenized by the model's own
tokenizer (`inputs: text`), the same ids in every environment. Ids are drawn with numpy, so that every framework,
TensorFlow included, gets exactly the ids eager PyTorch float32 is run on."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchlib.config.models import has_tokenizer

if TYPE_CHECKING:
    from benchlib.config.catalogue import ModelSpec

NO_TOKENIZER = "random (no tokenizer)"  # the row's `inputs` where text was asked for and the model has no tokenizer


@dataclass(frozen=True)
class CellInputs:
    """A cell's token ids (batch, sequence) and what they are: `random`, `text` or NO_TOKENIZER."""

    ids: np.ndarray
    kind: str


def random_ids(vocab_size: int, batch_size: int, sequence_length: int, seed: int) -> np.ndarray:
    """Seeded random token ids of shape (batch_size, sequence_length), below `vocab_size`."""
    return np.random.default_rng(seed).integers(0, vocab_size, (batch_size, sequence_length), dtype=np.int64)


def sample_text() -> str:
    """The short English text shipped with the kit (benchlib/data/sample.txt), written for it."""
    return resources.files("benchlib").joinpath("data/sample.txt").read_text(encoding="utf-8")


@cache
def text_of(text_file: str | None) -> str:
    """The text of `inputs: text`: `text_file`'s, or the kit's sample; read once per process, not per cell."""
    return Path(text_file).read_text(encoding="utf-8") if text_file else sample_text()


@cache
def load_tokenizer(folder: str, trust_remote_code: bool = False) -> Any:
    """The tokenizer saved in checkpoint folder `folder` (imports transformers)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)


def text_ids(tokenizer: Any, text: str, batch_size: int, sequence_length: int) -> np.ndarray:
    """`text` tokenized, as (batch_size, sequence_length) ids: each row continues the text where the row before stopped
    (from the start again at its end) and has the tokenizer's special tokens where they fit, so that every position
    is a real token and no padding or attention mask is needed."""
    tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not tokens:
        raise ValueError("the text has no tokens")
    special = tokenizer.num_special_tokens_to_add()
    special = special if sequence_length > special else 0  # too short for them: text only
    width = sequence_length - special
    rows = []
    for row in range(batch_size):
        chunk = [tokens[(row * width + i) % len(tokens)] for i in range(width)]
        rows.append(tokenizer.build_inputs_with_special_tokens(chunk) if special else chunk)
    return np.asarray(rows, dtype=np.int64)


def cell_inputs(spec: ModelSpec, scale: str, inputs: str, text_file: str | None, batch_size: int, sequence_length: int, seed: int) -> CellInputs:
    """The ids of one cell of `spec`: text (from `text_file`, or the kit's sample) where `inputs` is text and the model has
    a tokenizer, else seeded random ids below its vocabulary."""
    if inputs == "text" and has_tokenizer(spec.source):
        tokenizer = load_tokenizer(str(spec.source), spec.trust_remote_code)
        return CellInputs(text_ids(tokenizer, text_of(text_file), batch_size, sequence_length), "text")
    kind = NO_TOKENIZER if inputs == "text" else "random"
    return CellInputs(random_ids(spec.vocab_size(scale), batch_size, sequence_length, seed), kind)
