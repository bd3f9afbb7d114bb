"""TensorFlow's `generate` inside tf.function and XLA: the same greedy tokens as eager PyTorch float32 on the same weights."""

from __future__ import annotations

from typing import Any

import pytest

from tests.frameworks import run_python

pytestmark = [pytest.mark.e2e, pytest.mark.full]  # TensorFlow runs in a subprocess of its own; the generate run covers each backend once

NEW_TOKENS = 4
EOS = 16  # the first token tiny distilgpt2 picks for the first prompt: as its end of sequence, it must be passed over


@pytest.fixture(scope="module")
def generated() -> dict[str, Any]:
    """In one TensorFlow process, per mode: tiny distilgpt2's calls generate(4), generate(1), generate(4) from prompts of
    8 ids (batch 2) and eager PyTorch's tokens for them, the same with token 16 as its end of sequence, and what
    transfo-xl (TensorFlow's own weights) and smollm2-135m (Llama) give."""
    return run_python(f"""
        import dataclasses, json
        import numpy as np
        from benchlib.backends import load_backend
        from benchlib.config.models import ModelRequest, resolve_model
        from benchlib.status import Unsupported

        def spec(name):
            return resolve_model(name, ModelRequest(task="causal-lm"))

        def tokens(backend, spec):
            built = backend.build(spec, "tiny")
            with backend.inference_context():
                generator = backend.generator(built, inputs)
                calls = [generator.new_ids(generator.generate(n)).tolist() for n in ({NEW_TOKENS}, 1, {NEW_TOKENS})]
            reference = backend.reference_tokens(built, inputs, {NEW_TOKENS}).tolist()
            return {{"calls": calls, "reference": reference, "clock": generator.clock}}

        def unsupported(call):
            try:
                call()
            except Unsupported as exc:
                return str(exc)

        distilgpt2 = spec("distilgpt2")
        with_eos = dataclasses.replace(distilgpt2, name="distilgpt2-eos", config={{**distilgpt2.config, "eos_token_id": {EOS}}})
        out = {{}}
        for mode in ("function", "xla"):
            backend = load_backend("tensorflow", mode, workload="generate", seed=0)
            inputs = backend.as_inputs(np.random.default_rng(0).integers(0, 1000, (2, 8)))
            transfo_xl = backend.build(spec("transfo-xl-wt103"), "tiny")
            out[mode] = {{
                "distilgpt2": tokens(backend, distilgpt2), "with_eos": tokens(backend, with_eos),
                "transfo_xl_reference": backend.reference_tokens(transfo_xl, inputs, {NEW_TOKENS}),
                "transfo_xl_generator": unsupported(lambda: backend.generator(transfo_xl, inputs)),
                "llama": unsupported(lambda: backend.build(spec("smollm2-135m"), "tiny")),
            }}
        print(json.dumps(out))
    """)


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_generate_makes_eager_pytorchs_tokens_again_and_again(generated, mode):
    distilgpt2 = generated[mode]["distilgpt2"]
    (first, one, again), reference = distilgpt2["calls"], distilgpt2["reference"]
    assert len(reference) == 2 and all(len(row) == NEW_TOKENS for row in reference)
    assert first == reference and again == first  # token agreement 1.0, and the same ids at every call
    assert one == [row[:1] for row in reference]  # generate(1): the first token alone
    assert reference[0][0] == EOS  # what the next test makes the end of sequence
    assert distilgpt2["clock"] is None  # one compiled call: the workload times its first token with generate(1)


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_the_end_of_sequence_is_passed_over_as_eager_pytorch_does(generated, mode):
    (first, one, _), reference = generated[mode]["with_eos"]["calls"], generated[mode]["with_eos"]["reference"]
    assert first == reference and one == [row[:1] for row in reference]
    assert EOS not in {token for row in first for token in row}


@pytest.mark.parametrize("mode", ["function", "xla"])
def test_models_that_cannot_be_compared_or_generate_say_so(generated, mode):
    assert generated[mode]["transfo_xl_reference"] is None  # TensorFlow's own weights
    assert "TFTransfoXLLMHeadModel cannot generate" in generated[mode]["transfo_xl_generator"]
    assert generated[mode]["llama"] == "transformers has no TensorFlow Llama model for causal-lm"
