"""Is a server's tail the model's? The kit's server scenario against a plain server of the same model, on one device.

The plain server is what a user would write without the kit: requests arriving at random (Poisson, seeded) put on a
queue, one thread taking every request waiting (at most `--max-batch`) and calling the model on them, each request's
latency from its arrival to the end of its batch's call. Its largest rate whose `--percentile` latency stays under
`--bound-ms` is found by the same doubling-then-halving search as the kit's (`scenarios.search.search_max_qps`), each
rate run for `--seconds`. Then the kit's server scenario (LoadGen, the serving loop, the same model and batch size)
finds its own. Printed: both rates, their ratio, and the kit's serving columns at its best rate (mean batch, queue
wait and call time at the 99th percentile, the device's lowest SM clock) so that a tail above the model's calls shows
where it comes from. Offline's samples per second is printed beside them: the target is a server rate of at least half.

    .venv/bin/python benchmarks/plain_server.py [--model bert-base-cased] [--precision float16] [--length 128]
                                                [--max-batch 16] [--bound-ms 20] [--percentile 99] [--device cuda]

Needs `benchlib[loadgen]`; `--device cpu --scale tiny` rehearses it here. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import queue
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

from benchlib.backends import load_backend
from benchlib.config.params import validate_params
from benchlib.measure.device_state import make_monitor
from benchlib.measure.interference import make_meter
from benchlib.measure.load import ScenarioRun, measure_scenario
from benchlib.scenarios.search import search_max_qps


def plain_latencies(call, ids: np.ndarray, rate: float, seconds: float, max_batch: int, seed: int = 0) -> np.ndarray:
    """Each request's latency (s) at Poisson arrivals of `rate` per second for `seconds`, served by one thread that runs
    every waiting request (at most `max_batch`) as one batch of `ids`' rows."""
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1 / rate, size=max(1, int(rate * seconds))))
    waiting: queue.Queue[float | None] = queue.Queue()
    latencies: list[float] = []

    def serve() -> None:
        while (first := waiting.get()) is not None:
            batch = [first]
            while len(batch) < max_batch:
                try:
                    nxt = waiting.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    waiting.put(None)
                    break
                batch.append(nxt)
            call(ids[: len(batch)])
            done = time.perf_counter()
            latencies.extend(done - arrived for arrived in batch)

    worker = threading.Thread(target=serve)
    worker.start()
    start = time.perf_counter()
    for at in arrivals:
        delay = start + at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        waiting.put(time.perf_counter())
    waiting.put(None)
    worker.join()
    return np.asarray(latencies)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert-base-cased")
    parser.add_argument("--precision", default="float16")
    parser.add_argument("--scale", default="full", choices=("full", "tiny"))
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--bound-ms", type=float, default=20.0)
    parser.add_argument("--percentile", type=int, default=99)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--max-trials", type=int, default=10)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="plain-server-"))
    params = validate_params(dict(
        environment=f"{args.device}-pytorch", framework="pytorch", mode="eager", device=args.device, precision=args.precision,
        models=[args.model], model_scale=args.scale, scenario=["server", "offline"], request_lengths=[args.length],
        max_batch=args.max_batch, min_duration_s=args.seconds, min_query_count=1, latency_bound_ms=args.bound_ms,
        latency_percentile=args.percentile, max_trials=args.max_trials, remeasure=0, output_dir=str(folder),
    ))  # fmt: skip
    backend = load_backend("pytorch", "eager", device=args.device, precision=args.precision)
    spec = params.model_spec(args.model)
    with backend.inference_context():
        model = backend.build(spec, args.scale)
        run = ScenarioRun(backend, model, spec, params, folder, make_meter(), monitor=make_monitor(args.device))
        full = np.stack([run.samples[0]] * args.max_batch)
        module = model.model

        def served(ids: np.ndarray) -> object:  # the model itself, as a user calls it: no stream, thread or call of the kit's
            with torch.inference_mode():
                output = module(torch.from_numpy(ids).to(args.device))
            backend.sync(output)
            return output

        def under_bound(rate: float) -> bool:
            latencies = plain_latencies(served, full, rate, args.seconds, args.max_batch)
            tail = float(np.percentile(latencies, args.percentile))
            print(f"plain server at {rate:.4g}/s: {args.percentile}th percentile {tail * 1e3:.2f} ms over {len(latencies)} requests")
            return tail <= args.bound_ms / 1000

        plain = search_max_qps(under_bound, max(run.throughput_guess / 2, 1e-3), args.max_trials).max_qps
        state, reason, columns, _ = measure_scenario(run, "server", 1, lambda row: None)
        _, _, offline, _ = measure_scenario(run, "offline", 1, lambda row: None)
    kit = columns.get("max_qps") or None
    print(f"{args.model} ({args.scale}, {args.precision}) on {args.device}, requests of {args.length} tokens, max_batch {args.max_batch}, "
          f"{args.bound_ms:g} ms at the {args.percentile}th percentile")  # fmt: skip
    print(f"plain server: {plain if plain is not None else 'no rate'}/s; the kit's server: {kit if kit else 'no rate'}/s {reason}")
    print(f"offline: {offline.get('samples_per_s')} samples/s; the kit's server over half of it: "
          f"{(kit / (offline['samples_per_s'] / 2)) if kit and offline.get('samples_per_s') else 'n/a'}")  # fmt: skip
    detail = {name: columns.get(name) for name in ("served_batch_mean", "served_queue_wait_p99_s", "served_call_p99_s", "gpu_clock_min_mhz", "slowed")}
    print(f"the kit's server at its best rate: {detail}")
    if plain and kit:
        print(f"kit / plain: {kit / plain:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
