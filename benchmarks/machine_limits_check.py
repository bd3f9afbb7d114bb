"""Is the measured peak right, and cheap? A rerunnable check of benchlib.measure.peak.

1. Runs `measure_limits` (default sizes, the environments' thread count) and prints its figures and
   how long it took: target, well under the 1 minute the limits and FLOP counting may add to the
   default job (aim: under 15 s).
2. Times the same float32 matrix multiplies (each GEMM path: `torch.mm(a, b, out=c)` and oneDNN's
   `mkldnn_linear`; same size, same threads) with `torch.utils.benchmark.Timer(...).blocked_autorange()`
   and prints both rates and their ratio: target, the kit's peak (the faster path) within 15% of
   torch.utils.benchmark's rate for the same path.

The two alternate over `--rounds` (the first goes first in odd rounds), and every round must pass.

    .venv/bin/python benchmarks/machine_limits_check.py [--num-threads cores] [--rounds 2]

Run it on a quiet machine: load average well under the number of CPUs.
"""

from __future__ import annotations

import argparse
import os
import time

from benchlib.backends import resolve_threads
from benchlib.measure import peak as machine_limits

PEAK_TOLERANCE = 0.15
TIME_TARGET_S = 15.0


STATEMENTS = {machine_limits.BLAS: "torch.mm(a, b, out=c)", machine_limits.ONEDNN: "torch._C._nn.mkldnn_linear(a, b, None)"}


def torch_timer_rate(n: int, threads: int, min_run_time: float, path: str = machine_limits.BLAS) -> tuple[float, int]:
    """FLOP/s of a GEMM path on two n × n float32 matrices by `blocked_autorange`'s median, and its number of blocks."""
    import torch
    from torch.utils.benchmark import Timer

    generator = torch.Generator().manual_seed(1)
    a, b = (torch.randn(n, n, generator=generator) for _ in range(2))
    if path == machine_limits.ONEDNN:
        a, b = a.to_mkldnn(), b.to_mkldnn()
    c = torch.empty(n, n)
    timer = Timer(stmt=STATEMENTS[path], globals={"torch": torch, "a": a, "b": b, "c": c}, num_threads=threads)
    measurement = timer.blocked_autorange(min_run_time=min_run_time)
    return 2 * n**3 / measurement.median, len(measurement.times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-threads", default="cores", help='a number, "cores" or "none" (default: cores, as the CPU environments)')
    parser.add_argument("--gemm-size", type=int, default=None, help="matrix size (default: the module's for the CPU)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--min-run-time", type=float, default=2.0, help="seconds of blocked_autorange per round")
    args = parser.parse_args()
    num_threads = None if args.num_threads == "none" else ("cores" if args.num_threads == "cores" else int(args.num_threads))

    import torch

    threads = resolve_threads(num_threads) or torch.get_num_threads()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; torch {torch.__version__}; {threads} threads")
    ratios, durations = [], []
    for index in range(args.rounds):
        order = ("limits", "timer") if index % 2 == 0 else ("timer", "limits")
        for side in order:
            if side == "limits":
                start = time.perf_counter()
                limits = machine_limits.measure_limits("cpu", num_threads, gemm_size=args.gemm_size)
                durations.append(time.perf_counter() - start)
            else:
                n = args.gemm_size or machine_limits.GEMM_SIZE["cpu"]
                timer = {path: torch_timer_rate(n, threads, args.min_run_time, path) for path in machine_limits.gemm_paths("cpu")}
        paths = limits["gemm_paths"]["float32"]
        best = max(paths, key=paths.get)
        timer_rate, blocks = timer[best]
        ratio = limits["float32_flops_per_s"] / timer_rate
        ratios.append(ratio)
        print(f"\nround {index + 1} ({' then '.join(order)}):")
        for sentence in machine_limits.describe_limits(limits):
            print(f"  {sentence}")
        print(f"  measure_limits: {durations[-1]:.2f} s (its own count: {limits['seconds']:.2f} s); interference {limits['interference']}")
        print(f"  float32 peak, kit (median of {len(limits['samples_s']['float32_gemm'])} calls): {limits['float32_flops_per_s'] / 1e9:.2f} GFLOP/s")
        print(f"  float32 rate, torch.utils.benchmark blocked_autorange (median of {blocks} blocks): {timer_rate / 1e9:.2f} GFLOP/s")
        print(f"  ratio kit / torch.utils.benchmark ({best}): {ratio:.3f}")
        for path, rate in paths.items():
            print(f"  {path}: kit {rate / 1e9:.1f} GFLOP/s, torch.utils.benchmark {timer[path][0] / 1e9:.1f} GFLOP/s ({rate / timer[path][0]:.3f})")
    worst = max(abs(ratio - 1) for ratio in ratios)
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"largest |kit / torch.utils.benchmark - 1|: {100 * worst:.1f}% (target {100 * PEAK_TOLERANCE:.0f}%) {'met' if worst <= PEAK_TOLERANCE else 'MISSED'}")
    print(f"slowest measure_limits: {max(durations):.1f} s (target {TIME_TARGET_S:.0f} s) {'met' if max(durations) <= TIME_TARGET_S else 'MISSED'}")


if __name__ == "__main__":
    main()
