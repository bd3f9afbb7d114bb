"""Is a GPU cell's figure the model's? A rerunnable check of the kit's timing against a plain CUDA-event loop, interleaved.

In one process, so that the card's state (its clock, its temperature) is shared: for each model, precision and shape,
`--blocks` alternations of the kit's own measurements of the cell (`measure.timing.measure`: its warm-up until the time
and the SM clock are steady, `repeat` samples, a synchronisation before every clock read, the card read between samples,
the energy over a window of calls of its own), once with one call per sample and once with the kit's default timing
(`number` calls per sample, back to back: `BenchmarkParams`' default), and a plain loop (10 calls to warm up, then 50
calls, each between two CUDA events, under `torch.inference_mode`; NVML's energy counter read around a second of calls
after them; the garbage collector off, as in the kit's samples and timeit's). Prints the card's name, then per cell the
kit's median over the plain loop's median for each timing, the kit's joules per call over the plain loop's, and whether
each is within the target (5% for time, 10% for energy: `--tolerance`, `--energy-tolerance`); exit status 1 if any is
not. The card's lowest SM clock over the kit's samples is printed beside it.

    .venv/bin/python benchmarks/gpu_fidelity.py [--models bert-base-cased,gpt2,qwen2.5-0.5b] [--precisions float32,float16]
                                                [--batches 1,8] [--lengths 128,512] [--blocks 3] [--device cuda]

Needs a CUDA GPU (`--device cpu --scale tiny` rehearses it here, timing the plain loop with the host clock and with no
energy counter); run it alone on the machine.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import time

import numpy as np

from benchlib.backends import load_backend
from benchlib.config.catalogue import get_model
from benchlib.config.params import BenchmarkParams
from benchlib.measure.device_state import ENERGY_WINDOW_S, DeviceMonitor, make_monitor
from benchlib.measure.timing import TimingSpec, measure
from benchlib.workloads import forward
from benchlib.workloads.inputs import cell_inputs

PLAIN_WARMUP, PLAIN_CALLS = 10, 50


def plain_loop(call, device: str, monitor: DeviceMonitor) -> tuple[float, float | None]:
    """The plain loop's median seconds per call (CUDA events on a GPU, the host clock on a CPU) and its joules per call
    from the device's energy counter around the timed calls (None without one)."""
    import torch

    for _ in range(PLAIN_WARMUP):
        call()
    gc.disable()  # as timeit does: a collection in the middle of a call is not the model's time
    on_gpu = device.startswith("cuda")
    if on_gpu:
        torch.cuda.synchronize(device)
    monitor.begin()
    times = []
    for _ in range(PLAIN_CALLS):
        if on_gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        else:
            began = time.perf_counter()
            call()
            times.append(time.perf_counter() - began)
    monitor.end()
    median = statistics.median(times)
    calls = max(1, math.ceil(ENERGY_WINDOW_S / median))  # the energy over a second of calls at least: NVML's sensor moves in steps
    monitor.begin()  # reads the energy counter only
    for _ in range(calls):
        call()
    if on_gpu:
        torch.cuda.synchronize(device)
    state = monitor.end()
    gc.enable()
    return median, None if state.energy_j is None else state.energy_j / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert-base-cased,gpt2,qwen2.5-0.5b")
    parser.add_argument("--precisions", default="float32,float16")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--lengths", default="128,512")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--scale", default="full", choices=("full", "tiny"))
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--energy-tolerance", type=float, default=0.10)
    args = parser.parse_args()
    import torch

    default_number = BenchmarkParams.model_fields["number"].default
    timings = {"number 1": TimingSpec(warmup=10, warmup_max_seconds=5.0, repeat=30, number=1)}
    timings[f"number {default_number}"] = TimingSpec(warmup=10, warmup_max_seconds=5.0, repeat=30, number=default_number)
    monitor = make_monitor(args.device)
    card = monitor.describe().get("gpu", {}).get("name") or "no GPU read by NVML"
    print(f"device {args.device} ({card}): {type(monitor).__name__}{' (' + monitor.reason + ')' if monitor.reason else ''}")
    failed = False
    for precision in args.precisions.split(","):
        backend = load_backend("pytorch", "eager", device=args.device, precision=precision)
        for name in args.models.split(","):
            spec = get_model(name)
            built = backend.build(spec, args.scale)
            with backend.inference_context():
                for batch in map(int, args.batches.split(",")):
                    for length in map(int, args.lengths.split(",")):
                        ids = cell_inputs(spec, args.scale, "random", None, batch, length, 0)
                        call = forward.prepare_call(backend, built, backend.as_inputs(ids.ids))
                        ratios: dict[str, list[float]] = {timing: [] for timing in timings}
                        energies, lowest = [], []
                        for _ in range(args.blocks):  # kit then plain, alternately: drift falls on both
                            kits = {timing: measure(call, spec, backend.sync, monitor=monitor) for timing, spec in timings.items()}
                            plain_s, plain_j = plain_loop(call, args.device, monitor)
                            for timing, kit in kits.items():
                                ratios[timing].append(kit.median_s / plain_s)
                                if kit.device is not None and kit.device.clock_min_mhz is not None:
                                    lowest.append(kit.device.clock_min_mhz)
                            per_call_j = kits["number 1"].row_fields().get("energy_j", "")
                            if per_call_j != "" and plain_j:
                                energies.append(per_call_j / plain_j)
                        ratio = {timing: statistics.median(values) for timing, values in ratios.items()}
                        energy = statistics.median(energies) if energies else None
                        bad = any(abs(value - 1) > args.tolerance for value in ratio.values())
                        bad |= energy is not None and abs(energy - 1) > args.energy_tolerance
                        failed |= bad
                        clock = f", lowest SM clock {min(lowest):.0f} MHz" if lowest else ""
                        energy_text = f", energy {energy:.3f}" if energy is not None else ", energy: no counter"
                        times = ", ".join(f"kit ({timing})/plain time {value:.3f}" for timing, value in ratio.items())
                        print(f"{name} {precision} {batch}x{length}: {times}{energy_text}{clock}{'  BEYOND' if bad else ''}")
            del built
            backend.free()
    if args.device.startswith("cuda"):
        torch.cuda.synchronize(args.device)
    print("every cell within the targets" if not failed else "some cells beyond the targets")
    return 1 if failed else 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
