"""Checkpoint folders as a user brings them, made offline with `save_pretrained`: tiny models of real architectures
(a Llama-architecture causal LM, a BERT) with seeded weights and a tokenizer made from the kit's sample text."""

from __future__ import annotations

import re
from pathlib import Path

from benchlib.workloads.inputs import sample_text

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def words() -> list[str]:
    """The sample text's distinct lower-case words and punctuation, in order of first appearance."""
    return list(dict.fromkeys(re.findall(r"\w+|[^\w\s]", sample_text().lower())))


def save_bert(folder: Path, task: str = "feature-extraction", tokenizer: bool = True, seed: int = 0) -> Path:
    """A tiny BERT checkpoint (safetensors) in `folder`, its head for `task`, with a WordPiece tokenizer."""
    import torch
    import transformers

    vocab = [*SPECIALS, *words()]
    config = transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, max_position_embeddings=512,
    )  # fmt: skip
    model_class = {"feature-extraction": transformers.BertModel, "fill-mask": transformers.BertForMaskedLM, "text-classification": transformers.BertForSequenceClassification}[task]
    torch.manual_seed(seed)
    model_class(config).save_pretrained(folder)
    if tokenizer:
        (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
        transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    return folder


def save_llama(folder: Path, tokenizer: bool = True, seed: int = 0, **overrides: int) -> Path:
    """A tiny Llama-architecture causal LM (grouped-query attention, SwiGLU, RMSNorm, rotary) in `folder`, with a
    word-level tokenizer over the sample text; `overrides`: configuration values (vLLM's CPU kernels need a head of 64)."""
    import tokenizers
    import torch
    import transformers

    vocab = {token: index for index, token in enumerate(["<unk>", "<s>", "</s>", *words()])}
    values = {
        "vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 512, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True,
    }  # fmt: skip
    config = transformers.LlamaConfig(**{**values, **overrides})
    torch.manual_seed(seed)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    if tokenizer:
        model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
        model.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
        model.normalizer = tokenizers.normalizers.Lowercase()
        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=model, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
        fast.save_pretrained(folder)
    return folder
