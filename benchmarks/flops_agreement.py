"""Do the analytic FLOPs agree with FlopCounterMode? A rerunnable check at the published sizes.

For each of the nine catalogue models PyTorch runs, at full scale and the quick grid's shapes
(1x8, 1x64) plus 8x512 where the model takes 512 tokens, prints the FLOPs of flops.yaml's
formulas, the FLOPs FlopCounterMode counts in one forward call, their ratio and where the
count ran (meta device or CPU). Target: every ratio within 5% of 1. Exit status 1 otherwise.

    .venv/bin/python benchmarks/flops_agreement.py [--shapes 1x8,1x64,8x512] [--tolerance 0.05]

Most models count on the meta device in seconds; XLM's forward reads a value (`.item()`), so it
runs on the CPU: its 8x512 cell is 5 TFLOP of real arithmetic (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
import time

import benchlib.backends.pytorch  # noqa: F401  (before transformers: keeps TensorFlow out of this process)
from benchlib.backends import unsupported_reason
from benchlib.config.catalogue import load_catalogue
from benchlib.measure.flops import analytic_flops, count_flops


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1x8,1x64,8x512", help="comma-separated BxS (default: %(default)s)")
    parser.add_argument("--scale", default="full", choices=["full", "tiny"])
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()
    shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(",")]

    print(f"{'model':<24} {'BxS':>6} {'analytic':>18} {'counted':>18} {'ratio':>7}  {'counted on':<20} {'s':>6}")
    worst = 0.0
    for name, spec in load_catalogue().items():
        reason = unsupported_reason(spec, "pytorch", "eager")
        for batch_size, sequence_length in shapes:
            label = f"{batch_size}x{sequence_length}"
            if not spec.fits(sequence_length):
                continue
            analytic = analytic_flops(spec, args.scale, batch_size, sequence_length)
            if reason:
                print(f"{name:<24} {label:>6} {analytic:>18,} {'-':>18} {'-':>7}  {'not counted: PyTorch cannot run it'}")
                continue
            start = time.perf_counter()
            count = count_flops(spec, args.scale, batch_size, sequence_length)
            ratio = analytic / count.flops
            worst = max(worst, abs(ratio - 1))
            print(f"{name:<24} {label:>6} {analytic:>18,} {count.flops:>18,} {ratio:>7.4f}  {count.device:<20} {time.perf_counter() - start:>6.1f}", flush=True)
    verdict = "within" if worst <= args.tolerance else "NOT within"
    print(f"largest difference {100 * worst:.2f}%: {verdict} {100 * args.tolerance:.0f}%")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
