"""FLOPs per cell, counted two ways: the formulas of flops.yaml against torch's FlopCounterMode."""

from __future__ import annotations

import textwrap

import pytest

from benchlib.backends import unsupported_reason
from benchlib.config.catalogue import ModelSpec, get_model, load_catalogue
from benchlib.measure.flops import (
    Expression,
    FormulaError,
    UncountableModelError,
    activation_bytes,
    analytic_flops,
    arithmetic_intensity,
    cell_bytes,
    count_flops,
    counted_flops,
    load_families,
    parameter_bytes,
    parameter_count,
    parse_families,
)

PYTORCH_MODELS = [name for name, spec in load_catalogue().items() if unsupported_reason(spec, "pytorch", "eager") is None]
TOLERANCE = 0.05
# Where FlopCounterMode counts each model (see benchlib.measure.flops.count_flops). The rotary embeddings
# of ModernBERT, Llama and Qwen2 open torch.autocast(device_type="meta"), which torch refuses
# ("unsupported scalarType"): those forwards run on the CPU.
COUNTED_ON = {
    "gpt2": "meta", "bert-base-cased": "meta", "xlnet-base-cased": "meta", "xlm-mlm-en-2048": "cpu",
    "openai-gpt": "meta", "distilbert-base-uncased": "meta", "distilgpt2": "meta", "roberta-base": "meta", "ctrl": "meta",
    "modernbert-base": "cpu", "all-MiniLM-L6-v2": "meta", "smollm2-135m": "cpu", "qwen2.5-0.5b": "cpu",
}  # fmt: skip


def test_all_models_but_transformer_xl_run_in_pytorch_and_every_model_has_a_family():
    assert len(PYTORCH_MODELS) == 13 and "transfo-xl-wt103" not in PYTORCH_MODELS
    families = load_families()
    assert all(spec.family in families for spec in load_catalogue().values())


@pytest.mark.parametrize("shape", [(1, 8), (2, 32)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", PYTORCH_MODELS)
def test_analytic_flops_agree_with_flop_counter_at_tiny_scale(name, shape):
    spec = get_model(name)
    analytic = analytic_flops(spec, "tiny", *shape)
    count = count_flops(spec, "tiny", *shape)
    ratio = analytic / count.flops
    print(f"{name} tiny {shape[0]}x{shape[1]}: analytic {analytic:,} counted {count.flops:,} ratio {ratio:.4f} on {count.device}")
    assert ratio == pytest.approx(1, abs=TOLERANCE)
    assert count.device == COUNTED_ON[name], count.note


def test_bert_tiny_by_hand():
    values = get_model("bert-base-cased").config_values("tiny")
    layers, d, f = values["num_hidden_layers"], values["hidden_size"], values["intermediate_size"]
    b, s = 1, 8
    per_layer = (
        3 * 2 * b * s * d * d  # Q, K, V
        + 2 * b * s * s * d  # QK^T
        + 2 * b * s * s * d  # attention x V
        + 2 * b * s * d * d  # output projection
        + 2 * 2 * b * s * d * f  # feed-forward up and down
    )
    pooler = 2 * b * d * d
    assert (layers, d, f) == (2, 32, 64)
    assert layers * per_layer + pooler == 280_576
    assert analytic_flops(get_model("bert-base-cased"), "tiny", b, s) == 280_576


@pytest.mark.e2e
@pytest.mark.full
@pytest.mark.parametrize("name", ["bert-base-cased", "gpt2", "ctrl", "modernbert-base", "all-MiniLM-L6-v2", "smollm2-135m", "qwen2.5-0.5b"])
def test_full_scale_agreement(name):
    spec = get_model(name)
    count = count_flops(spec, "full", 2, 128)
    ratio = analytic_flops(spec, "full", 2, 128) / count.flops
    print(f"{name} full 2x128: counted {count.flops:,} on {count.device}, ratio {ratio:.4f}")
    assert count.device == COUNTED_ON[name], count.note
    assert ratio == pytest.approx(1, abs=TOLERANCE)


def test_gpt2_full_scale_by_the_rule_of_thumb():
    """2 x (non-embedding parameters) per token plus attention (PaLM appendix B): 124M GPT-2 at 1x1024."""
    spec = get_model("gpt2")
    layers, d, s = 12, 768, 1024
    non_embedding = layers * 12 * d * d  # Kaplan et al.: N = 12 * n_layer * d_model^2
    assert analytic_flops(spec, "full", 1, s) == 2 * non_embedding * s + layers * 4 * s * s * d


def test_grouped_query_attention_by_the_rule_of_thumb():
    """SmolLM2-135M at 1x1024: 2 x (non-embedding parameters) per token plus attention over the H query heads
    (PaLM appendix B), and the rotary frequencies once. K and V are KV / H as wide as Q (3 of 9 heads);
    the SwiGLU feed-forward has three D x F matrices."""
    spec = get_model("smollm2-135m")
    layers, d, heads, kv_heads, f, vocab, s = 30, 576, 9, 3, 1536, 49152, 1024
    head = d // heads
    per_layer = d * d + 2 * d * kv_heads * head + d * d + 3 * d * f  # q, k and v, o; gate, up and down
    assert layers * per_layer == pytest.approx(parameter_count(spec, "full") - vocab * d, rel=1e-3)  # the norms aside
    assert analytic_flops(spec, "full", 1, s) == 2 * layers * per_layer * s + layers * 4 * s * s * d + 2 * s * (head // 2)
    grouped = analytic_flops(spec, "full", 1, s)
    every_head = ModelSpec(**{**spec.__dict__, "name": "smollm2-mha", "config": {**spec.config, "num_key_value_heads": heads}})
    assert analytic_flops(every_head, "full", 1, s) - grouped == layers * 2 * 2 * s * d * (heads - kv_heads) * head


def test_modernbert_local_layers_score_every_pair_on_the_cpu():
    """A local layer's eager attention computes all S x S scores and masks those outside the window: past the
    window (128 tokens), the model counts the same FLOPs as one whose layers are all global."""
    spec = get_model("modernbert-base")
    all_global = ModelSpec(**{**spec.__dict__, "name": "modernbert-global", "tiny": {**spec.tiny, "global_attn_every_n_layers": 1}})
    assert spec.config_values("tiny")["global_attn_every_n_layers"] == 3 and spec.config_values("tiny")["local_attention"] < 300
    analytic = analytic_flops(spec, "tiny", 1, 300)
    assert counted_flops(spec, "tiny", 1, 300) == counted_flops(all_global, "tiny", 1, 300) == analytic
    assert analytic_flops(all_global, "tiny", 1, 300) == analytic


def test_transformer_xl_is_counted_analytically_only():
    spec = get_model("transfo-xl-wt103")
    flops = analytic_flops(spec, "full", 1, 128)
    # 18 layers; the 1600 memory steps lengthen the keys: far more than 2 x parameters x tokens.
    assert flops > 2 * 18 * 12 * 1024 * 1024 * 128
    assert analytic_flops(spec, "tiny", 1, 8) < analytic_flops(spec, "tiny", 1, 16)
    with pytest.raises(UncountableModelError, match="transfo-xl-wt103: PyTorch cannot run.*type_as"):
        counted_flops(spec, "tiny", 1, 8)


def test_gpt2_inner_width_defaults_to_four_times_the_width():
    spec = get_model("gpt2")
    explicit = ModelSpec(**{**spec.__dict__, "name": "gpt2-explicit", "config": {**spec.config, "n_inner": 4 * 768}})
    assert analytic_flops(explicit, "full", 1, 64) == analytic_flops(spec, "full", 1, 64)
    wider = ModelSpec(**{**spec.__dict__, "name": "gpt2-wide", "config": {**spec.config, "n_inner": 8 * 768}})
    assert analytic_flops(wider, "full", 1, 64) > analytic_flops(spec, "full", 1, 64)


def test_formulas_hold_only_for_what_they_assume():
    spec = get_model("xlnet-base-cased")
    uni = ModelSpec(**{**spec.__dict__, "config": {**spec.config, "attn_type": "uni"}})
    with pytest.raises(ValueError, match="family 'xlnet'.*attn_type='bi'"):
        analytic_flops(uni, "tiny", 1, 8)


def family_yaml(term: str, variables: str = "{L: n_layer, D: n_embd}") -> str:
    return textwrap.dedent(f"""
        families:
          toy:
            variables: {variables}
            layers: L
            layer:
              bad: {term}
    """)


@pytest.mark.parametrize(
    "term, problem",
    [
        ("\"__import__('os')\"", "Call is not allowed"),
        ("\"__import__('os').system('true')\"", "not allowed"),
        ("2 * B * X", "name 'X' is not declared"),
        ("\"B.__class__\"", "Attribute is not allowed"),
        ("\"[B, S]\"", "List is not allowed"),
        ("\"'text'\"", "only numbers are allowed"),
        ("\"B if S else D\"", "IfExp is not allowed"),
        ("\"B % 2\"", "operator Mod is not allowed"),
        ("\"B << 2\"", "operator LShift is not allowed"),
        ("\"lambda: 0\"", "Lambda is not allowed"),
    ],
)
def test_the_evaluator_refuses_anything_but_arithmetic(term, problem):
    with pytest.raises(FormulaError, match=f"family 'toy', layer term 'bad'.*{problem}"):
        parse_families(family_yaml(term))


def test_the_evaluator_refuses_undeclared_names_in_defaults_and_huge_powers():
    with pytest.raises(FormulaError, match="family 'toy', variable 'F'.*name 'S' is not declared"):
        parse_families(family_yaml("B * F", "{L: n_layer, F: {key: n_inner, default: 4 * S}}"))
    expression = Expression.parse("2 ** (B * S)", {"B", "S"}, "family 'toy', term 'big'")
    with pytest.raises(FormulaError, match="exponent 100 is too large"):
        expression.evaluate({"B": 10, "S": 10})
    assert Expression.parse("(B + 1) * S // 2 - -1 + 2 ** 3 / 4", {"B", "S"}, "t").evaluate({"B": 1, "S": 3}) == 6


def test_the_shipped_formulas_all_parse():
    assert set(load_families()) == {"bert", "gpt2", "openai-gpt", "distilbert", "xlm", "ctrl", "xlnet", "transfo-xl", "llama", "modernbert"}


@pytest.mark.parametrize(
    "name", ["gpt2", "bert-base-cased", "xlnet-base-cased", "transfo-xl-wt103", "ctrl", "modernbert-base", "all-MiniLM-L6-v2", "smollm2-135m", "qwen2.5-0.5b"]
)
def test_bytes_and_intensity_are_positive_and_grow_with_the_batch(name):
    spec = get_model(name)
    if spec.published_parameters:
        assert parameter_count(spec, "full") == pytest.approx(spec.published_parameters, rel=0.02)
    assert parameter_bytes(spec, "full") == 4 * parameter_count(spec, "full")
    assert parameter_bytes(spec, "full", bytes_per_element=2) == 2 * parameter_count(spec, "full")
    sizes = [cell_bytes(spec, "full", b, 64) for b in (1, 2, 4, 8)]
    intensities = [arithmetic_intensity(spec, "full", b, 64) for b in (1, 2, 4, 8)]
    assert all(size > parameter_bytes(spec, "full") for size in sizes)
    assert sizes == sorted(sizes) and len(set(sizes)) == 4
    assert all(i > 0 for i in intensities) and intensities == sorted(intensities) and len(set(intensities)) == 4
    # Activations grow with the batch (Transformer-XL's position projection is shared by the batch).
    assert activation_bytes(spec, "full", 1, 64) < activation_bytes(spec, "full", 2, 64) <= 2 * activation_bytes(spec, "full", 1, 64)
    print(f"{name}: intensity at 1..8x64: {', '.join(f'{i:.1f}' for i in intensities)} FLOP/byte")


def test_a_parameter_count_is_kept_in_the_build_cache_and_a_later_process_reads_it_without_torch(tmp_path, monkeypatch):
    """A summary's kernel sets a cell against the bytes of its weights: the first process to ask counts them (on the
    meta device) and keeps the count; the next finds it without importing torch or transformers."""
    from tests.frameworks import run_python

    monkeypatch.setenv("BENCHLIB_CACHE", str(tmp_path / "cache"))
    ask = """
        import json, sys
        from benchlib.config.catalogue import get_model
        from benchlib.measure.flops import parameter_count
        count = parameter_count(get_model("gpt2"), "tiny")
        print(json.dumps({"count": count, "imported": sorted({"torch", "transformers"} & set(sys.modules))}))
    """
    first, second = run_python(ask), run_python(ask)
    assert first["imported"] == ["torch", "transformers"] and second["imported"] == []
    spec = get_model("gpt2")
    assert first["count"] == second["count"] == sum(p.numel() for p in _meta_model(spec).parameters())
    assert [path.parent.name.split("-")[0] for path in (tmp_path / "cache" / "parameters").glob("*/parameters.json")] == ["gpt2"]


def _meta_model(spec: ModelSpec):
    import torch

    from benchlib.measure.flops import _build_model

    with torch.device("meta"):
        return _build_model(spec, "tiny")
