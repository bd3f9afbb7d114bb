"""TensorFlow's forward pass traced without AutoGraph: the graph AutoGraph would have made, and AutoGraph where only it can trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.frameworks import run_python

pytestmark = pytest.mark.e2e  # TensorFlow runs in a subprocess of its own


# AutoGraph rewrites a function from its source file: the branching function is a module's, not the subprocess's `-c` code.
BRANCHES = """
import tensorflow as tf


def branches(x):
    if tf.reduce_sum(x) > 0:
        return x + 1
    return x - 1
"""


def test_a_graph_traced_without_autograph_has_the_operations_of_one_traced_with_it_and_a_branch_on_a_tensor_gets_autograph(tmp_path: Path):
    """Tiny GPT-2 (a decoder) and BERT (an encoder): `traced`'s graph holds the operations, each as many times, of plain
    `tf.function`'s (which runs AutoGraph). A function whose Python `if` reads a tensor is traced too, with AutoGraph: its
    branch is a graph operation that picks by the input's value."""
    (tmp_path / "branching.py").write_text(BRANCHES, encoding="utf-8")
    seen = run_python(f"""
        import collections, json, sys
        import numpy as np
        import tensorflow as tf
        from benchlib.backends import load_backend
        from benchlib.backends.tensorflow import traced
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
        from branching import branches

        function = traced(branches, False, ids)
        out["branch"] = [int(function(tf.constant([[1]]))[0, 0]), int(function(tf.constant([[-1]]))[0, 0])]
        print(json.dumps(out))
    """)
    for name in ("gpt2", "bert-base-cased"):
        assert seen[name]["without"] == seen[name]["with"], name
        assert seen[name]["without"].get("MatMul", 0) + seen[name]["without"].get("BatchMatMulV2", 0) > 0, name
    assert seen["branch"] == [2, -2]
