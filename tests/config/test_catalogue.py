"""The model catalogue: the study's ten checkpoints and four of today's, their sizes and limits, built in every framework."""

from __future__ import annotations

import pytest
import torch
import yaml

from benchlib.backends import load_backend, model_class, unsupported_reason
from benchlib.backends import pytorch as pytorch_backend
from benchlib.config.catalogue import get_model, load_catalogue
from benchlib.paths import PARAMETERS_DIR
from benchlib.workloads.inputs import random_ids
from tests.conftest import SMOKE_MODELS_DEFAULT
from tests.frameworks import run_python

STUDY_MODELS = [
    "gpt2", "bert-base-cased", "xlnet-base-cased", "xlm-mlm-en-2048", "transfo-xl-wt103",
    "openai-gpt", "distilbert-base-uncased", "distilgpt2", "roberta-base", "ctrl",
]  # fmt: skip
STUDY_MAX_LENGTH = {
    "bert-base-cased": 512, "openai-gpt": 512, "distilbert-base-uncased": 512, "roberta-base": 512,
    "xlm-mlm-en-2048": 512, "gpt2": 1024, "distilgpt2": 1024, "ctrl": 256,
    "xlnet-base-cased": None, "transfo-xl-wt103": None,
}  # fmt: skip
TODAY_MODELS = ["modernbert-base", "all-MiniLM-L6-v2", "smollm2-135m", "qwen2.5-0.5b"]
# Today's models: their max_position_embeddings (MiniLM is a BERT: 512 positions).
TODAY_MAX_LENGTH = {"modernbert-base": 8192, "all-MiniLM-L6-v2": 512, "smollm2-135m": 8192, "qwen2.5-0.5b": 32768}
PUBLISHED_MILLIONS = {
    "bert-base-cased": 108, "gpt2": 124, "distilbert-base-uncased": 66, "roberta-base": 125, "ctrl": 1630,
    "modernbert-base": 149, "all-MiniLM-L6-v2": 22.7, "smollm2-135m": 135, "qwen2.5-0.5b": 490,
}  # fmt: skip
NO_TENSORFLOW = ["modernbert-base", "smollm2-135m", "qwen2.5-0.5b"]  # transformers 4.57 has PyTorch classes only


def full_size_parameters(name: str) -> int:
    """Parameters of the full-size PyTorch base model, built on the meta device (no memory)."""
    spec = get_model(name)
    with torch.device("meta"):
        model = model_class(spec, "pytorch")(spec.build_config("full"))
    return sum(p.numel() for p in model.parameters())


def test_catalogue_holds_the_study_models_then_todays_with_their_limits():
    catalogue = load_catalogue()
    assert list(catalogue) == STUDY_MODELS + TODAY_MODELS
    assert {name: spec.max_sequence_length for name, spec in catalogue.items()} == {**STUDY_MAX_LENGTH, **TODAY_MAX_LENGTH}
    assert catalogue["bert-base-cased"].fits(512) and not catalogue["bert-base-cased"].fits(513)
    assert catalogue["xlnet-base-cased"].fits(100_000)


def test_published_configuration_values():
    bert = get_model("bert-base-cased").build_config("full")
    assert (bert.num_hidden_layers, bert.hidden_size, bert.num_attention_heads) == (12, 768, 12)
    assert (bert.intermediate_size, bert.vocab_size, bert.max_position_embeddings) == (3072, 28996, 512)
    ctrl = get_model("ctrl").build_config("full")
    assert (ctrl.n_layer, ctrl.n_embd, ctrl.n_head, ctrl.dff, ctrl.vocab_size) == (48, 1280, 16, 8192, 246534)
    modernbert = get_model("modernbert-base").build_config("full")
    assert (modernbert.num_hidden_layers, modernbert.hidden_size, modernbert.num_attention_heads, modernbert.intermediate_size) == (22, 768, 12, 1152)
    assert (modernbert.vocab_size, modernbert.global_attn_every_n_layers, modernbert.local_attention) == (50368, 3, 128)
    minilm = get_model("all-MiniLM-L6-v2").build_config("full")
    assert (minilm.num_hidden_layers, minilm.hidden_size, minilm.num_attention_heads, minilm.intermediate_size, minilm.vocab_size) == (6, 384, 12, 1536, 30522)
    smollm2 = get_model("smollm2-135m").build_config("full")
    assert (smollm2.num_hidden_layers, smollm2.hidden_size, smollm2.num_attention_heads, smollm2.num_key_value_heads) == (30, 576, 9, 3)
    assert (smollm2.intermediate_size, smollm2.vocab_size, smollm2.rope_theta, smollm2.tie_word_embeddings) == (1536, 49152, 100000, True)
    qwen = get_model("qwen2.5-0.5b").build_config("full")
    assert (qwen.num_hidden_layers, qwen.hidden_size, qwen.num_attention_heads, qwen.num_key_value_heads) == (24, 896, 14, 2)
    assert (qwen.intermediate_size, qwen.vocab_size, qwen.rope_theta, qwen.tie_word_embeddings) == (4864, 151936, 1_000_000, True)


@pytest.mark.parametrize("name", list(PUBLISHED_MILLIONS))
def test_full_size_matches_published_size(name):
    assert full_size_parameters(name) == pytest.approx(PUBLISHED_MILLIONS[name] * 1e6, rel=0.02)


@pytest.mark.parametrize("name", [n for n in STUDY_MODELS + TODAY_MODELS if get_model(n).published_parameters])
def test_catalogue_published_sizes_hold(name):
    assert full_size_parameters(name) == pytest.approx(get_model(name).published_parameters, rel=0.02)


def test_tiny_scale_keeps_the_architecture_and_is_small():
    for name in STUDY_MODELS + TODAY_MODELS:
        spec = get_model(name)
        tiny, full = spec.build_config("tiny"), spec.build_config("full")
        assert type(tiny) is type(full)
        assert spec.vocab_size("tiny") <= 1000 < spec.vocab_size("full")
    for name in ("smollm2-135m", "qwen2.5-0.5b"):  # grouped-query attention at both scales
        for config in (get_model(name).build_config("tiny"), get_model(name).build_config("full")):
            assert config.num_attention_heads % config.num_key_value_heads == 0 and config.num_key_value_heads > 1
    modernbert = get_model("modernbert-base").build_config("tiny")  # a global and a local layer
    assert modernbert.num_hidden_layers >= 2 and modernbert.global_attn_every_n_layers > 1 and modernbert.pad_token_id < modernbert.vocab_size


def test_unknown_model_lists_the_catalogue():
    with pytest.raises(KeyError, match="the catalogue has: gpt2, bert-base-cased"):
        get_model("bert-large")
    with pytest.raises(ValueError, match="model_scale must be one of full, tiny"):
        get_model("gpt2").config_values("huge")


@pytest.mark.parametrize("name", [n for n, spec in load_catalogue().items() if unsupported_reason(spec, "pytorch", "torchscript") is None])
def test_tiny_models_run_in_pytorch_eager_and_torchscript(name):
    spec = get_model(name)
    eager, script = load_backend("pytorch", "eager"), load_backend("pytorch", "torchscript")
    model = eager.build(spec, "tiny")
    traced_model = script.build(spec, "tiny")
    # Both draw their random weights from the same seed.
    torch.testing.assert_close(traced_model.model.state_dict(), model.model.state_dict())
    inputs = script.as_inputs(random_ids(spec.vocab_size("tiny"), 2, 8, 0))
    call = script.prepare(traced_model, inputs)
    # The trace is reused for every call of this shape: it must not have frozen the traced values.
    inputs.copy_(script.as_inputs(random_ids(spec.vocab_size("tiny"), 2, 8, 1)))
    with torch.inference_mode():
        expected = model.model(inputs)[0]
    with script.inference_context():  # where the sweep makes every call
        torch.testing.assert_close(pytorch_backend.first_output(call()), expected, atol=1e-4, rtol=1e-4)
    with eager.inference_context():
        assert pytorch_backend.first_output(eager.prepare(model, inputs)()).shape[:2] == (2, 8)


def test_transformer_xl_pytorch_is_unsupported_because_upstream_fails():
    spec = get_model("transfo-xl-wt103")
    assert "type_as" in unsupported_reason(spec, "pytorch", "eager")
    assert unsupported_reason(spec, "pytorch", "torchscript") == unsupported_reason(spec, "pytorch", "eager")
    assert unsupported_reason(spec, "tensorflow", "xla") is None
    backend = load_backend("pytorch", "eager")
    model = backend.build(spec, "tiny")
    # If this stops failing, transformers fixed it: drop the `unsupported` entry.
    with pytest.raises(TypeError, match="type_as"), backend.inference_context():
        backend.prepare(model, backend.as_inputs(random_ids(spec.vocab_size("tiny"), 1, 8, 0)))()


@pytest.mark.parametrize("name", ["smollm2-135m", "qwen2.5-0.5b"])
def test_llama_style_decoders_trace_although_upstream_returns_a_dict(name):
    """transformers 4.57's Llama and Qwen2 return a dict even with torchscript=True; the kit traces with strict=False."""
    spec = get_model(name)
    eager, script = load_backend("pytorch", "eager"), load_backend("pytorch", "torchscript")
    inputs = script.as_inputs(random_ids(spec.vocab_size("tiny"), 1, 8, 0))
    with script.inference_context():
        traced = script.prepare(script.build(spec, "tiny"), inputs)()
        expected = eager.prepare(eager.build(spec, "tiny"), inputs)()
    assert isinstance(traced, dict)  # if this fails, transformers returns tuples again: strict=False can go
    torch.testing.assert_close(pytorch_backend.first_output(traced), pytorch_backend.first_output(expected), atol=1e-4, rtol=1e-4)


def test_todays_models_without_a_tensorflow_class_are_unsupported_there():
    for name in TODAY_MODELS:
        spec = get_model(name)
        reasons = {unsupported_reason(spec, "tensorflow", mode) for mode in ("function", "xla")}
        if name in NO_TENSORFLOW:
            assert spec.tensorflow_class is None and all(reason and "has no TensorFlow" in reason for reason in reasons), name
        else:
            assert spec.tensorflow_class == "TFBertModel" and reasons == {None}


OUTPUT_FIELDS = ("use_cache", "output_attentions", "output_hidden_states", "use_mems_eval")


@pytest.mark.e2e
def test_every_mode_computes_the_same_thing():
    """The same configuration overrides in eager, TorchScript, tf.function and XLA (e.g. no key/value cache)."""
    fields = f"{OUTPUT_FIELDS!r}"
    tensorflow = run_python(f"""
        import json
        from benchlib.backends import load_backend, unsupported_reason
        from benchlib.config.catalogue import load_catalogue
        out = {{}}
        for mode in ("function", "xla"):
            backend = load_backend("tensorflow", mode)
            for name, spec in load_catalogue().items():
                if unsupported_reason(spec, "tensorflow", mode):  # no TensorFlow class
                    continue
                config = backend.build(spec, "tiny").config
                out[f"{{mode}}/{{name}}"] = {{key: getattr(config, key, None) for key in {fields}}}
        print(json.dumps(out))
    """)
    for name, spec in load_catalogue().items():
        seen = {}
        for mode in ("eager", "torchscript"):
            config = load_backend("pytorch", mode).build(spec, "tiny").config
            seen[mode] = {key: getattr(config, key, None) for key in OUTPUT_FIELDS}
        seen.update({mode: tensorflow[f"{mode}/{name}"] for mode in ("function", "xla") if f"{mode}/{name}" in tensorflow})
        assert all(values == seen["eager"] for values in seen.values()), (name, seen)
        assert all(seen["eager"][key] == value for key, value in spec.inference_config.items())
        assert not seen["eager"]["output_attentions"] and not seen["eager"]["output_hidden_states"]
    assert {name for name, spec in load_catalogue().items() if spec.inference_config.get("use_cache") is False} == {"gpt2", "distilgpt2", "ctrl", "smollm2-135m", "qwen2.5-0.5b"}


def test_eager_gpt2_returns_no_key_value_cache_and_records_its_attention():
    backend = load_backend("pytorch", "eager")
    model = backend.build(get_model("gpt2"), "tiny")
    with backend.inference_context():
        output = backend.prepare(model, backend.as_inputs(random_ids(1000, 1, 8, 0)))()
    assert output.past_key_values is None
    assert backend.attn_implementation(model) in ("eager", "sdpa")


def test_the_smoke_grid_holds_every_catalogue_model_and_make_tests_smoke_run_some_of_them() -> None:
    smoke = yaml.safe_load((PARAMETERS_DIR / "grids" / "smoke.yaml").read_text(encoding="utf-8"))["models"]
    assert sorted(smoke) == sorted(load_catalogue())  # `make test-full` runs each catalogue model in every environment
    assert set(SMOKE_MODELS_DEFAULT) < set(smoke)
    assert any(get_model(name).unsupported_for(("pytorch",)) for name in SMOKE_MODELS_DEFAULT)  # one that only TensorFlow builds
