"""Does the kit's clock inside generation cost anything? A rerunnable check of `tpot_s` against a plain loop.

In one process, on one model (eager PyTorch float32, random weights at the published size), alternating
blocks so that drift falls on both alike:
- the kit: `measure_generation` (a stopping criterion reads the clock at each token), its `tpot_s` (the
  median step after the first) and its `generate_s` (the median whole call);
- a plain loop: `model.generate(...)` timed from outside, nothing inside (garbage collection off, as in the kit's
  samples); its median call over the token count
  (what a user's stopwatch gives: the first token's prefill is in it), and the same with the prefill taken
  out: (median call of n tokens - median call of 1 token) / (n - 1), which is what `tpot_s` measures.
Target: the kit's `tpot_s` within 5% of the plain loop's per-token time; the kit's whole call within 5% of
the plain call (the clock's own cost). Exit status 1 otherwise.

    .venv/bin/python benchmarks/generation_overhead.py [--model distilgpt2] [--prompt 128] [--new-tokens 32]

Run it on an otherwise quiet machine.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

import numpy as np

from benchlib.backends import load_backend
from benchlib.config.models import ModelRequest, resolve_model
from benchlib.measure.generation import measure_generation
from benchlib.measure.timing import TimingSpec


def plain_calls(model: object, ids: object, new_tokens: int, calls: int) -> list[float]:
    """`calls` timings of a plain `model.generate` of `new_tokens` greedy tokens, end of sequence ignored, with garbage
    collection off as the kit's samples (and `timeit`) have it: what differs is the clock inside the call."""
    import torch

    times = []
    gc.disable()
    try:
        for _ in range(calls):
            start = time.perf_counter()
            model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                use_cache=True, pad_token_id=0,
            )  # fmt: skip
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="distilgpt2")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--blocks", type=int, default=10, help="alternating blocks of each (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=6, help="calls per block (default: %(default)s)")
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()

    import torch

    backend = load_backend("pytorch", "eager", num_threads="cores", num_interop_threads=1, workload="generate")
    spec = resolve_model(args.model, ModelRequest(task="causal-lm"))
    built = backend.build(spec, "full")
    ids = backend.as_inputs(np.random.default_rng(0).integers(0, spec.vocab_size("full"), (1, args.prompt)))
    spec_kit = TimingSpec(warmup=1, repeat=args.samples, number=1)
    blocks = []  # per block: the kit's median step and whole call, the plain loop's median call of n and of 1 token
    with torch.inference_mode():
        generator = backend.generator(built, ids)
        plain_calls(built.model, ids, args.new_tokens, 2)  # warm-up of the plain loop
        for _ in range(args.blocks):
            measured = measure_generation(generator, args.new_tokens, 1, spec_kit)
            steps = [step for sample in measured.steps_s for step in sample]
            plain_n = plain_calls(built.model, ids, args.new_tokens, args.samples)
            plain_1 = plain_calls(built.model, ids, 1, args.samples)
            blocks.append((statistics.median(steps), statistics.median(measured.calls_s), statistics.median(plain_n), statistics.median(plain_1)))
    n = args.new_tokens
    tpot, whole, plain_whole, plain_first = (statistics.median(block[i] for block in blocks) for i in range(4))
    print(f"{args.model}, batch 1, prompt {args.prompt}, {n} new tokens, eager PyTorch float32, {args.blocks} x {args.samples} calls each")
    print(f"kit   tpot_s (median step after the first) {tpot * 1e3:8.3f} ms   generate_s {whole * 1e3:8.2f} ms")
    print(f"plain whole call / {n}                      {plain_whole / n * 1e3:8.3f} ms   generate   {plain_whole * 1e3:8.2f} ms")
    print(f"plain (call of {n} - call of 1) / {n - 1}         {(plain_whole - plain_first) / (n - 1) * 1e3:8.3f} ms   first token {plain_first * 1e3:7.2f} ms")
    # Each ratio is taken within a block (the kit's calls and the plain loop's, back to back), then the median over blocks:
    # the machine's drift between blocks cancels.
    checks = {
        "kit tpot_s / plain decode step": statistics.median(k / ((p - f) / (n - 1)) for k, _, p, f in blocks),
        "kit tpot_s / plain call over the token count": statistics.median(k / (p / n) for k, _, p, _ in blocks),
        "kit generate_s / plain call": statistics.median(w / p for _, w, p, _ in blocks),
    }
    failed = False
    for name, ratio in checks.items():
        within = abs(ratio - 1) <= args.tolerance
        failed |= not within and name != "kit tpot_s / plain call over the token count"
        note = "" if name != "kit tpot_s / plain call over the token count" else " (holds the prefill: shown, not a target)"
        print(f"{name}: {ratio:.4f} {'within' if within else 'beyond'} {args.tolerance:.0%}{note}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
