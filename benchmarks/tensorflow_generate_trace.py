"""How long TensorFlow's first `generate` call takes (AutoGraph's rewrite, the trace, XLA's compile in mode xla, the
call) with AutoGraph rewriting the model's forward pass too (plain `tf.function(model.generate)`) and with the forward
pass left to plain tracing (`benchlib.backends.tensorflow.GenerateGraphs`, as the kit's TensorFlow environments
generate): a rerunnable check.

For each mode, starts `--processes` fresh Python processes of each kind in turn; each builds tiny GPT-2 with its language
model head (TensorFlow's own weights, seeded), makes a prompt of 8 tokens and times its first call generating 4, XLA's
persistent cache off. Prints, per mode, the median of each kind and their ratio, and whether every process made the same
tokens.

Run it on a quiet machine, on one core to see the slowest type's side of it:

    taskset -c 0 .venv/bin/python benchmarks/tensorflow_generate_trace.py --processes 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

FIRST_CALL = """
import json, sys, time
import numpy as np
from benchlib.backends.tensorflow import GenerateGraphs, generate_options
import tensorflow as tf
from benchlib.config.models import ModelRequest, resolve_model

jit, kind = sys.argv[1] == "xla", sys.argv[2]
spec = resolve_model("distilgpt2", ModelRequest(task="causal-lm"))
tf.keras.utils.set_random_seed(0)  # the same weights in every process
model = spec.instantiate("tensorflow", spec.build_config("tiny", **{**spec.inference_config, "use_cache": True}))
model(model.dummy_inputs, training=False)
ids = tf.constant(np.random.default_rng(0).integers(0, 100, (1, 8)), dtype=tf.int32)
config = model.generation_config
options = generate_options(config, 8, 4)
if kind == "forward-unconverted":
    graphs = GenerateGraphs(model, jit, config.eos_token_id)
    call = lambda: graphs.call("whole", ids, **options)
else:
    whole = tf.function(model.generate, jit_compile=jit)
    call = lambda: whole(ids, **options)
start = time.perf_counter()
tokens = call().numpy()
print(json.dumps({"seconds": time.perf_counter() - start, "tokens": tokens.tolist()}))
"""
KINDS = ("autograph-throughout", "forward-unconverted")


def first_call(mode: str, kind: str) -> dict:
    """A fresh process's first `generate` call in `mode` (function or xla), the forward pass rewritten or not (`kind`)."""
    env = {name: value for name, value in os.environ.items() if name != "TF_XLA_FLAGS"}  # no persistent XLA cache
    completed = subprocess.run([sys.executable, "-c", FIRST_CALL, mode, kind], capture_output=True, text=True, check=True, env=env)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5, help="processes per mode and kind")
    parser.add_argument("--modes", default="function,xla")
    args = parser.parse_args()
    print(f"{'mode':<9} {'AutoGraph throughout (s)':>25} {'forward unconverted (s)':>24} {'ratio':>6}  same tokens")
    for mode in args.modes.split(","):
        seen: dict[str, list[dict]] = {kind: [] for kind in KINDS}
        for _ in range(args.processes):
            for kind in KINDS:
                seen[kind].append(first_call(mode, kind))
        before, after = (statistics.median(call["seconds"] for call in seen[kind]) for kind in KINDS)
        same = len({json.dumps(call["tokens"]) for calls in seen.values() for call in calls}) == 1
        print(f"{mode:<9} {before:>25.2f} {after:>24.2f} {after / before:>6.2f}  {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
