"""A cell's token ids: seeded random ids, or real text tokenized by the model's own tokenizer, the same in every framework."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchlib.config.models import ModelRequest, resolve_model
from benchlib.workloads.inputs import NO_TOKENIZER, cell_inputs, load_tokenizer, random_ids, sample_text, text_ids
from tests.checkpoints import save_bert, save_llama


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {"bert": save_bert(root / "bert"), "llama": save_llama(root / "llama"), "bare": save_bert(root / "bare", tokenizer=False)}


def test_random_ids_are_seeded_and_below_the_vocabulary() -> None:
    ids = random_ids(1000, 2, 8, seed=0)
    assert ids.shape == (2, 8) and ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < 1000
    assert np.array_equal(ids, random_ids(1000, 2, 8, seed=0)) and not np.array_equal(ids, random_ids(1000, 2, 8, seed=1))


def test_text_is_tokenized_with_the_models_tokenizer_and_its_special_tokens(folders: dict[str, Path]) -> None:
    tokenizer = load_tokenizer(str(folders["bert"]))
    ids = text_ids(tokenizer, sample_text(), 3, 16)
    assert ids.shape == (3, 16)
    assert (ids[:, 0] == tokenizer.cls_token_id).all() and (ids[:, -1] == tokenizer.sep_token_id).all()  # [CLS] ... [SEP]
    words = tokenizer.decode(ids[0, 1:-1]).split()
    assert words[:3] == sample_text().lower().split()[:3]  # the text itself, from its start
    assert tokenizer.unk_token_id not in ids  # every word of the sample is in the tokenizer's vocabulary
    # Each row continues where the one before stopped, so that no two rows are the same.
    second = tokenizer.decode(ids[1, 1:-1]).split()
    assert second != words and tokenizer.convert_tokens_to_ids(tokenizer.tokenize(" ".join(second)))[:2] == ids[1, 1:3].tolist()


def test_a_text_shorter_than_the_cell_wraps_around(folders: dict[str, Path]) -> None:
    tokenizer = load_tokenizer(str(folders["llama"]))  # no special tokens added: every position is text
    ids = text_ids(tokenizer, "the harbour town", 2, 7)
    assert ids.tolist() == [[*tokenizer("the harbour town the harbour town the")["input_ids"]], [*tokenizer("harbour town the harbour town the harbour")["input_ids"]]]


def test_cell_inputs_say_what_they_are(folders: dict[str, Path], tmp_path: Path) -> None:
    bert = resolve_model(str(folders["bert"]))
    text = cell_inputs(bert, "full", "text", None, 2, 12, seed=0)
    assert text.kind == "text" and text.ids.shape == (2, 12)
    own = tmp_path / "mine.txt"
    own.write_text("mara keeps the small bookshop next to the ferry office .")
    assert load_tokenizer(str(folders["bert"])).decode(cell_inputs(bert, "full", "text", str(own), 1, 6, 0).ids[0, 1:-1]) == "mara keeps the small"
    bare = cell_inputs(resolve_model(str(folders["bare"])), "full", "text", None, 2, 12, seed=0)
    assert bare.kind == NO_TOKENIZER and np.array_equal(bare.ids, random_ids(bert.vocab_size(), 2, 12, 0))
    catalogue = cell_inputs(resolve_model("gpt2", ModelRequest()), "tiny", "text", None, 1, 8, seed=3)
    assert catalogue.kind == NO_TOKENIZER and np.array_equal(catalogue.ids, random_ids(1000, 1, 8, 3))
    assert cell_inputs(bert, "full", "random", None, 2, 12, seed=0).kind == "random"
