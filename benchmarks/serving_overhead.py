"""Does the serving loop cost anything you can see? A rerunnable check of the load scenarios against plain calls.

In one process, on one model and backend, alternating blocks so that drift falls on both alike:
- Offline: LoadGen's samples per second (every request at once, the serving loop batching `--max-batch` of them)
  against a plain loop of the same backend call on full batches for as long (samples per second);
- SingleStream: LoadGen's median latency (one request at a time) against the kit's own cell median for the same model
  and length (`measure.timing.measure` of one call, as a cell is timed).
Targets: each ratio within 5% (`--tolerance`); exit status 1 otherwise. Each ratio is taken within a block, then the median
over blocks.

    .venv/bin/python benchmarks/serving_overhead.py [--framework pytorch --mode eager] [--model distilbert-base-uncased]
                                                    [--length 64] [--max-batch 8] [--blocks 5] [--seconds 5]

Run it on an otherwise quiet machine; it needs `benchlib[loadgen]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchlib.backends import load_backend
from benchlib.config.params import validate_params
from benchlib.measure.load import ScenarioRun
from benchlib.measure.timing import TimingSpec, measure


def ignore(*retried: object) -> None:
    """A test LoadGen's advice ran again: only the last try counts here."""


def plain_samples_per_s(call, ids: np.ndarray, seconds: float) -> float:
    """Samples per second of back-to-back calls on the batch `ids` for `seconds`."""
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call(ids)
        calls += 1
    return calls * len(ids) / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="pytorch")
    parser.add_argument("--mode", default="eager")
    parser.add_argument("--model", default="distilbert-base-uncased")
    parser.add_argument("--scale", default="full", choices=("full", "tiny"))
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0, help="each LoadGen test's minimum duration (default: %(default)s)")
    parser.add_argument("--threads", default="cores", help="intra-op threads: a number or cores (default: %(default)s)")
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()
    threads = args.threads if args.threads == "cores" else int(args.threads)

    folder = Path(tempfile.mkdtemp(prefix="serving-overhead-"))
    params = validate_params(dict(
        environment=f"{args.framework}-{args.mode}", framework=args.framework, mode=args.mode, models=[args.model], model_scale=args.scale,
        scenario=["offline", "single-stream"], request_lengths=[args.length], max_batch=args.max_batch, min_duration_s=args.seconds,
        min_query_count=1, num_threads=threads, num_interop_threads=1, output_dir=str(folder),
    ))  # fmt: skip
    backend = load_backend(args.framework, args.mode, num_threads=threads, num_interop_threads=1)
    spec = params.model_spec(args.model)
    blocks = []  # per block: LoadGen offline / plain samples per second, LoadGen single-stream p50 / the cell's median
    with backend.inference_context():
        model = backend.build(spec, args.scale)
        run = ScenarioRun(backend, model, spec, params, folder, None)
        full = np.stack([run.samples[0]] * args.max_batch)
        one = backend.as_inputs(run.samples[0][None, :])
        cell_call = backend.prepare(model, one)
        for block in range(args.blocks):
            offline, _, _ = run.test(run.settings("offline"), lambda: folder / f"offline.{block}", ignore)
            plain = plain_samples_per_s(run.calls[0], full, args.seconds)
            single, _, _ = run.test(run.settings("single-stream"), lambda: folder / f"single.{block}", ignore)
            cell = measure(cell_call, TimingSpec(warmup=1, repeat=30, number=1), backend.sync)
            blocks.append((offline.figure("Samples per second"), plain, single.latency_s("p50"), cell.median_s))
            print(f"block {block + 1}: offline {blocks[-1][0]:.1f}/s, plain {plain:.1f}/s; single-stream p50 {blocks[-1][2] * 1e3:.2f} ms, cell median {cell.median_s * 1e3:.2f} ms")
    print(f"{args.model} ({args.scale}), {args.framework} {args.mode}, {args.threads} threads, requests of {args.length} tokens, max_batch {args.max_batch}, {args.blocks} blocks")
    checks = {
        "offline samples/s / plain loop of full batches": statistics.median(o / p for o, p, _, _ in blocks),
        "single-stream p50 / the kit's cell median": statistics.median(s / c for _, _, s, c in blocks),
    }
    failed = False
    for name, ratio in checks.items():
        within = abs(ratio - 1) <= args.tolerance
        failed |= not within
        print(f"{name}: {ratio:.4f} {'within' if within else 'beyond'} {args.tolerance:.0%}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
