"""ONNX Runtime and OpenVINO generate through optimum's models (ORTModelForCausalLM with its key/value cache as inputs,
OVModelForCausalLM stateful), exported once into the build cache; OpenVINO's int8 weight compression, in-process on tiny models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from benchlib import status
from benchlib.backends import load_backend
from benchlib.backends import pytorch as pytorch_backend
from benchlib.backends._export import MODEL_FILE, Exported
from benchlib.config.catalogue import ModelSpec
from benchlib.config.models import ModelRequest, resolve_model
from benchlib.measure.sweep import within_tolerance
from benchlib.store.cache import recording
from benchlib.workloads.agreement import agreement
from benchlib.workloads.generate import token_agreement
from benchlib.workloads.inputs import random_ids

pytestmark = [pytest.mark.e2e, pytest.mark.full]  # exporters and OpenVINO compilations; the generate run covers each backend once

MODELS = ["distilgpt2", "smollm2-135m"]
NEW_TOKENS = 4
FLOAT32 = [pytest.param("onnxruntime", "session", id="onnxruntime"), pytest.param("openvino", "compiled", id="openvino")]


def causal_lm(name: str) -> ModelSpec:
    return resolve_model(name, ModelRequest(task="causal-lm"))


def prompt(name: str) -> np.ndarray:
    return random_ids(causal_lm(name).vocab_size("tiny"), 1, 8, 0)


def generate(framework: str, mode: str, name: str, precision: str = "float32", **values: object) -> tuple[Exported, np.ndarray, np.ndarray]:
    """(the built model, its `NEW_TOKENS` greedy ids after `prompt(name)`, eager PyTorch float32's)."""
    backend = load_backend(framework, mode, precision=precision, workload="generate", seed=0, **values)
    built = backend.build(causal_lm(name), "tiny")
    inputs = backend.as_inputs(prompt(name))
    generator = backend.generator(built, inputs)
    generator.clock.start()
    ids = generator.new_ids(generator.generate(NEW_TOKENS))
    assert len(generator.clock.times) == NEW_TOKENS  # the loop is seen into: a tick per token
    return built, ids, backend.reference_tokens(built, inputs, NEW_TOKENS)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize(("framework", "mode"), FLOAT32)
def test_float32_generates_eager_pytorchs_tokens(framework: str, mode: str, name: str) -> None:
    built, ids, reference = generate(framework, mode, name)
    assert ids.shape == (1, NEW_TOKENS) and token_agreement(ids, reference) == (1.0, None)
    ids_tensor = torch.from_numpy(prompt(name))  # the logits of the prompt too: random weights make near-constant tokens
    logits = built.runner(input_ids=ids_tensor, attention_mask=torch.ones_like(ids_tensor)).logits
    compared = agreement("causal-lm", pytorch_backend.as_array(logits), pytorch_backend.reference_output(built.reference, ids_tensor))
    assert within_tolerance(compared, "float32") == (status.OK, "") and compared.value == 1.0


@pytest.mark.parametrize("name", MODELS)
def test_openvino_int8_weight_compression_generates(name: str) -> None:
    built, ids, reference = generate("openvino", "compiled", name, precision="int8")
    assert ids.shape == reference.shape == (1, NEW_TOKENS) and 0.0 <= token_agreement(ids, reference)[0] <= 1.0
    weights = [node.get_output_element_type(0).get_type_name() for node in built.runner.model.get_ops() if node.get_type_name() == "Constant"]
    assert "u8" in weights  # INT8_ASYM: unsigned int8 weights with zero points
    assert built.runner.request.get_compiled_model().get_property("INFERENCE_PRECISION_HINT").get_type_name() == "f32"


def test_onnxruntime_exports_the_decoder_with_its_key_value_cache() -> None:
    """The export takes past keys and values as inputs, and runs in a session with the backend's options."""
    built, _, _ = generate("onnxruntime", "session", "distilgpt2", num_interop_threads=1)
    inputs = [graph_input.name for graph_input in onnx.load(str(built.path), load_external_data=False).graph.input]
    assert "input_ids" in inputs and {"past_key_values.0.key", "past_key_values.0.value"} <= set(inputs)
    assert built.path.name == MODEL_FILE and built.runner.can_use_cache
    assert built.runner.session.get_session_options().inter_op_num_threads == 1


@pytest.mark.parametrize(("framework", "mode", "kind"), [("onnxruntime", "session", "onnx-generate"), ("openvino", "compiled", "openvino-generate")])
def test_a_generation_model_is_exported_once(framework: str, mode: str, kind: str, tmp_path: Path) -> None:
    with recording() as made:
        generate(framework, mode, "distilgpt2", cache_dir=tmp_path)
    assert [found.cached for found in made if found.path.parent.name == kind] == [False]
    with recording() as again:
        generate(framework, mode, "distilgpt2", cache_dir=tmp_path)
    assert {found.path.parent.name for found in again} == {kind, "weights"} and all(found.cached for found in again)


def test_onnxruntime_int8_does_not_generate() -> None:
    backend = load_backend("onnxruntime", "session", precision="int8", workload="generate")
    assert "use cpu-openvino-int8" in backend.unsupported()
    with pytest.raises(status.Unsupported, match="ONNX Runtime int8 generation is not measured"):
        backend.build(causal_lm("distilgpt2"), "tiny")


def test_openvino_int8_forward_pass_agrees_within_the_int8_tolerance() -> None:
    """cpu-openvino-int8's forward pass: the converted model's weights compressed by nncf, f32 inference."""
    backend = load_backend("openvino", "compiled", precision="int8")
    assert backend.unsupported() is None
    spec = causal_lm("smollm2-135m")
    built = backend.build(spec, "tiny")
    inputs = backend.as_inputs(random_ids(spec.vocab_size("tiny"), 2, 12, 3))
    compared = agreement("causal-lm", pytorch_backend.as_array(backend.prepare(built, inputs)()), backend.reference_output(built, inputs))
    assert within_tolerance(compared, "int8") == (status.OK, "") and compared.max_abs_diff > 0  # int8 weights really ran
    assert built.path.parent.parent.name == "openvino-int8"
    assert backend.settings()["inference_precision_hint"] == "<Type: 'float32'>"


@pytest.mark.parametrize(("framework", "mode"), FLOAT32)
def test_an_architecture_optimum_cannot_export_does_not_generate(framework: str, mode: str) -> None:
    backend = load_backend(framework, mode, workload="generate")
    with pytest.raises(status.Unsupported, match="has no text-generation-with-past export of openai-gpt models"):
        backend.build(causal_lm("openai-gpt"), "tiny")
