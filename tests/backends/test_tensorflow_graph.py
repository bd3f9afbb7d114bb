"""TensorFlow's forward pass traced without AutoGraph, alone and inside `generate`'s graph: the graph AutoGraph would have
made, and AutoGraph where only it can trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.frameworks import run_python

pytestmark = pytest.mark.e2e  # TensorFlow runs in a subprocess of its own


# AutoGraph rewrites a function from its source file: the branching function and model are a module's, not the
# subprocess's `-c` code. The model's forward pass branches as `branches` does; its `generate` calls it in a loop.
BRANCHES = """
import tensorflow as tf


def branches(x):
    if tf.reduce_sum(x) > 0:
        return x + 1
    return x - 1


class Branching(tf.keras.Model):
    def call(self, x):
        return branches(x)

    def generate(self, x, max_new_tokens):
        for _ in tf.range(max_new_tokens):
            x = self(x)
        return x
"""


def test_a_graph_traced_without_autograph_has_the_operations_of_one_traced_with_it_and_a_branch_on_a_tensor_gets_autograph(tmp_path: Path) -> None:
    """Tiny GPT-2 (a decoder) and BERT (an encoder): `traced`'s graph holds the operations, each as many times, of plain
    `tf.function`'s (which runs AutoGraph). A function whose Python `if` reads a tensor is traced too, with AutoGraph: its
    branch is a graph operation that picks by the input's value; so is a model's that does so in its forward pass, called
    by its `generate` (`GenerateGraphs`: AutoGraph rewrites the forward pass only where it must)."""
    (tmp_path / "branching.py").write_text(BRANCHES, encoding="utf-8")
    seen = run_python(f"""
        import collections, json, sys
        import numpy as np
        import tensorflow as tf
        from benchlib.backends import load_backend
        from benchlib.backends.tensorflow import GenerateGraphs, traced
        from benchlib.config.catalogue import get_model

        backend = load_backend("tensorflow", "function")
        ids = backend.as_inputs(np.random.default_rng(0).integers(0, 100, (1, 8)))

        def operations(function):
            return collections.Counter(op.type for op in function.get_concrete_function(ids).graph.get_operations())

        out = {{}}
        for name in ("gpt2", "bert-base-cased"):
            spec = get_model(name)
            model = spec.instantiate("tensorflow", spec.build_config("tiny", **spec.inference_config))  # TensorFlow's weights: no PyTorch worker
            forward = lambda x: model(x, training=False)
            out[name] = {{"without": operations(traced(forward, False, ids)), "with": operations(tf.function(forward))}}

        sys.path.insert(0, {str(tmp_path)!r})
        from branching import Branching, branches

        function = traced(branches, False, ids)
        out["branch"] = [int(function(tf.constant([[1]]))[0, 0]), int(function(tf.constant([[-1]]))[0, 0])]
        graphs = GenerateGraphs(Branching(), False, None)  # its forward pass, unconverted, cannot trace: converted after all
        out["generate"] = [int(graphs.call("whole", tf.constant([[x]]), max_new_tokens=3)[0, 0]) for x in (1, -1)]
        print(json.dumps(out))
    """)
    for name in ("gpt2", "bert-base-cased"):
        assert seen[name]["without"] == seen[name]["with"], name
        assert seen[name]["without"].get("MatMul", 0) + seen[name]["without"].get("BatchMatMulV2", 0) > 0, name
    assert seen["branch"] == [2, -2] and seen["generate"] == [4, -4]


@pytest.mark.full  # the generate run's TensorFlow tokens are eager PyTorch's (test_generate_run.py); this is the graph's every operation
def test_the_generate_graph_with_the_forward_pass_unconverted_has_the_operations_of_one_autograph_rewrote_throughout() -> None:
    """Tiny GPT-2 with its language model head: `GenerateGraphs`' `generate` graph, the forward pass left to plain tracing,
    holds the operations of plain `tf.function`'s (AutoGraph throughout), each as many times, its loop's body included,
    and makes the same tokens."""
    seen = run_python("""
        import collections, json
        import numpy as np
        import tensorflow as tf
        from benchlib.backends.tensorflow import GenerateGraphs, generate_options
        from benchlib.config.models import ModelRequest, resolve_model

        spec = resolve_model("distilgpt2", ModelRequest(task="causal-lm"))
        model = spec.instantiate("tensorflow", spec.build_config("tiny", **{**spec.inference_config, "use_cache": True}))
        model(model.dummy_inputs, training=False)  # TensorFlow's own weights: no PyTorch worker
        ids = tf.constant(np.random.default_rng(0).integers(0, 100, (1, 8)), dtype=tf.int32)
        config = model.generation_config
        options = generate_options(config, 8, 4)

        def operations(concrete):
            graph = concrete.graph.as_graph_def()
            return collections.Counter([node.op for node in graph.node] + [node.op for f in graph.library.function for node in f.node_def])

        graphs = GenerateGraphs(model, False, config.eos_token_id)
        marked = operations(graphs.whole.get_concrete_function(ids, **options))
        marked_tokens = graphs.call("whole", ids, **options).numpy().tolist()
        del model.call  # the forward pass AutoGraph's to rewrite again
        plain = tf.function(model.generate)
        print(json.dumps({"marked": marked, "plain": operations(plain.get_concrete_function(ids, **options)),
                          "tokens": [marked_tokens, plain(ids, **options).numpy().tolist()]}))
    """)
    assert seen["marked"] == seen["plain"] and seen["marked"].get("While", 0) + seen["marked"].get("StatelessWhile", 0) > 0
    assert seen["tokens"][0] == seen["tokens"][1]
