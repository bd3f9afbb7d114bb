"""The machine's limits, measured on the machine: the peak matrix-multiply rate and the memory bandwidth.

Measured once per run and device and kept as `<run_dir>/machine_limits.json`, with how each figure
was measured, so that a cell's achieved FLOP/s can be set against the machine's own roofs (a
roofline, Williams et al., 2009) rather than against a datasheet.

- Peak FLOP/s: `torch.mm` of two square matrices (float32, bfloat16 where the device has it, and float16 on a GPU,
  whose tensor cores run it far above float32; on a GPU of compute capability 8.0 or later also float32 on TF32 units,
  which `tf32` cells are set against), 2·n³ floating-point operations per call. float32's own is measured with TF32 off.
- Bandwidth: `torch.Tensor.copy_` between two large float32 tensors, STREAM's Copy: bytes moved =
  read + write.

Every figure is timed by the kit's own timer (`benchlib.measure.timing.measure`: warm-up until stable,
garbage collector off, a device synchronisation before every clock read on a GPU), in the
environments' thread count, and is the median of the timed calls; a measurement disturbed by other
processes is taken again, as the sweep does for cells. Nothing here imports torch until a measurement
is asked for: reading and describing the file needs no framework.
"""

from __future__ import annotations

import contextlib
import datetime
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any

import pandas as pd

from benchlib.backends import resolve_threads
from benchlib.machine import bfloat16_here_reason, cpu_model, gpu_precision_reason, package_version
from benchlib.measure.device_state import make_monitor
from benchlib.measure.interference import make_meter
from benchlib.measure.timing import Measurement, TimingSpec, measure

if TYPE_CHECKING:
    import torch

SYSFS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
MIB = 2**20
# Defaults per device type: a GEMM of about 0.08 s on a 2-core CPU (as fast per FLOP as 4096's 0.6 s), tensors far beyond any cache.
GEMM_SIZE = {"cpu": 2048, "cuda": 8192}
COPY_BYTES = {"cpu": 256 * MIB, "cuda": 1024 * MIB}
REPEAT = 5  # timed GEMMs per figure
# A copy lasts a tenth of a GEMM: more of them, so that its median spans a comparable window (~0.1-0.3 s on a CPU).
COPY_REPEAT_FACTOR = 4
WARMUP_MAX_SECONDS = 1.0  # bounds the warm-up of each figure, so that the whole measurement stays a few seconds
# On a GPU: each figure's calls run this long before any is timed, so that the card is at the clock and power it holds
# under load rather than its first seconds' burst clock; its warm-up then lasts until the clock has settled (NVML, where
# it can be read), and each sample holds enough calls to last GPU_SAMPLE_S.
GPU_HEAT_S = 3.0
GPU_WARMUP_MAX_S = 10.0
GPU_SAMPLE_S = 0.2
MAX_INTERFERENCE = 0.05  # the kit's default max_interference: a measurement over it is disturbed
REMEASURE = 2  # disturbed measurements taken again at most this many times, as the kit's default remeasure
STATISTIC = (
    "median of the timed calls: the statistic the kit reports for every cell and torch.utils.benchmark for its "
    "blocks, so a cell's share of the peak compares like with like; it sets aside a call slowed by other work, "
    "where the best call would credit the machine with a speed it showed once"
)


def bfloat16_reason(device: str = "cpu", cpuinfo: Path | None = None) -> str | None:
    """Why bfloat16 is not measured on `device`, or None when the device has it natively.

    CPU: only where oneDNN runs bfloat16 natively (`machine.bfloat16_here_reason`: elsewhere torch emulates
    bfloat16, or refuses, and its rate would be a slow number, not a limit). GPU: compute capability 8.0 (Ampere) or
    later, where bfloat16 has units of its own (`gpu_precision_reason`), never torch's emulation on an older card.
    """
    if device.startswith("cuda"):
        return gpu_precision_reason(device, "bfloat16")
    return bfloat16_here_reason(cpuinfo)


TF32_CPU = "TF32 is a mode of a CUDA GPU's matrix units (Ampere and later): a CPU has none"


def tf32_reason(device: str = "cpu") -> str | None:
    """Why TF32 is not measured on `device`: a CPU, or a GPU before compute capability 8.0 (Ampere); None where it has TF32 units."""
    return gpu_precision_reason(device, "tf32") if device.startswith("cuda") else TF32_CPU


@contextlib.contextmanager
def tf32_units(device: str, on: bool) -> Iterator[None]:
    """float32's matrix multiplies on TF32 units (`on`) or not, on a GPU, while the context lasts; nothing on a CPU."""
    import torch

    if not device.startswith("cuda"):
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def float16_reason(device: str = "cpu") -> str | None:
    """Why float16 is not measured on `device`: None on a GPU, a reason on the CPU (where the kit never runs float16)."""
    if device.startswith("cuda"):
        return None
    return "not measured on the CPU: the kit runs float16 on GPUs only (a CPU environment in float16 is unsupported; bfloat16 is the CPU's)"


def last_level_cache_bytes(caches: Path | None = None) -> int | None:
    """The size of CPU 0's largest cache (Linux sysfs, `SYSFS_CACHES`), or None where it is not known."""
    sizes = []
    for size_file in (SYSFS_CACHES if caches is None else caches).glob("index*/size"):
        text = size_file.read_text(encoding="ascii", errors="replace").strip().upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else None


def default_copy_bytes(device: str = "cpu") -> int:
    """Bytes per tensor of the copy: 256 MiB on the CPU (at least 4 × its last-level cache, STREAM's rule), 1 GiB on a GPU."""
    if device.startswith("cuda"):
        return COPY_BYTES["cuda"]
    return max(COPY_BYTES["cpu"], 4 * (last_level_cache_bytes() or 0))


def _placement(device: str) -> torch.device:
    """Where the tensors live (tests put a faked GPU's tensors on the CPU here)."""
    import torch

    return torch.device(device)


def _sync(device: str) -> Callable[..., None]:
    """The synchronisation run before every clock read: `torch.cuda.synchronize` on a GPU, nothing on the CPU."""
    import torch

    if device.startswith("cuda"):
        return lambda output=None: torch.cuda.synchronize(device)
    return lambda output=None: None


def _check_device(device: str) -> None:
    """Refuse a device that torch cannot use, rather than measure the CPU under a GPU's name."""
    import torch

    if device == "cpu":
        return
    if not device.startswith("cuda"):
        raise ValueError(f"device must be cpu, cuda or cuda:N, not {device!r}")
    index = torch.device(device).index or 0
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise RuntimeError(f"device {device}: PyTorch sees {count} GPU(s) on this machine")


def _timed(call: Callable[[], Any], device: str, repeat: int) -> Measurement:
    """The kit's measurement of `call` with the device's synchronisation: one call per sample on the CPU; on a GPU after
    GPU_HEAT_S of calls, a warm-up until its clock has settled, and samples of at least GPU_SAMPLE_S each."""
    sync = _sync(device)
    if not device.startswith("cuda"):
        return measure(call, TimingSpec(warmup=1, warmup_max_seconds=WARMUP_MAX_SECONDS, repeat=repeat, number=1), sync, clock=perf_counter)
    began = perf_counter()
    calls = 0
    while (elapsed := perf_counter() - began) < GPU_HEAT_S or calls == 0:
        call()
        calls += 1
        if calls in (1, 2, 4, 8, 16) or calls % 32 == 0:  # never more than 32 calls queued ahead of the clock
            sync()
    sync()
    per_call = (perf_counter() - began) / calls
    spec = TimingSpec(warmup=1, warmup_max_seconds=GPU_WARMUP_MAX_S, repeat=repeat, number=max(1, math.ceil(GPU_SAMPLE_S / per_call)))
    return measure(call, spec, sync, clock=perf_counter, monitor=make_monitor(device))


BLAS = "torch.mm"
ONEDNN = "oneDNN"


def gemm_rate(n: int, dtype: torch.dtype, device: str = "cpu", repeat: int = REPEAT, path: str = BLAS) -> tuple[float, list[float]]:
    """FLOP/s of a multiply of two seeded random n × n matrices of `dtype` (2·n³ / median time), and the samples.

    `path`: `torch.mm` (the BLAS torch was built with: MKL on x86 CPUs, cuBLAS on a GPU) or `oneDNN`
    (torch's mkldnn_linear, CPU only): libraries differ, and on some CPUs one runs at twice the other's rate.
    """
    import torch

    place = _placement(device)
    generator = torch.Generator(device=place).manual_seed(0)
    a, b = (torch.randn(n, n, generator=generator, device=place).to(dtype) for _ in range(2))
    if path == ONEDNN:
        a, b = a.to_mkldnn(), b.to_mkldnn()
        call = lambda: torch._C._nn.mkldnn_linear(a, b, None)  # noqa: E731  (a @ b.T: the same FLOPs)
    else:
        out = torch.empty(n, n, dtype=dtype, device=place)
        call = lambda: torch.mm(a, b, out=out)  # noqa: E731
    _sync(device)()
    measurement = _timed(call, device, repeat)
    return 2 * n**3 / measurement.median_s, list(measurement.samples_s)


def gemm_paths(device: str) -> tuple[str, ...]:
    """The GEMM paths measured on `device`: torch.mm, and oneDNN on a CPU where torch has it."""
    import torch

    return (BLAS, ONEDNN) if device == "cpu" and torch.backends.mkldnn.is_available() else (BLAS,)


def best_gemm_rate(n: int, dtype: torch.dtype, device: str = "cpu", repeat: int = REPEAT) -> tuple[float, list[float], dict[str, float]]:
    """The fastest path's FLOP/s and samples, and every path's FLOP/s: the peak is what the machine can do."""
    rates = {path: gemm_rate(n, dtype, device, repeat, path) for path in gemm_paths(device)}
    best = max(rates, key=lambda path: rates[path][0])
    return rates[best][0], rates[best][1], {path: rate for path, (rate, _) in rates.items()}


def copy_bandwidth(nbytes: int, device: str = "cpu", repeat: int = REPEAT) -> tuple[float, list[float]]:
    """Bytes/s of `copy_` between two float32 tensors of `nbytes` each (2·nbytes read + written / median time), and the samples."""
    import torch

    place = _placement(device)
    source = torch.ones(nbytes // 4, dtype=torch.float32, device=place)
    target = torch.empty_like(source)  # its pages are touched by the warm-up copy, before any timed one
    _sync(device)()
    measurement = _timed(lambda: target.copy_(source), device, repeat)
    return 2 * source.numel() * 4 / measurement.median_s, list(measurement.samples_s)


def _figures(n: int, nbytes: int, device: str, repeat: int, bfloat16: bool, float16: bool, tf32: bool = False) -> dict[str, Any]:
    """One measurement of the figures, with the share of the machine other processes used meanwhile."""
    import torch

    meter = make_meter()
    if meter is not None:
        meter.start()
    with tf32_units(device, False):
        float32, float32_samples, float32_paths = best_gemm_rate(n, torch.float32, device, repeat)
    bf16, bf16_samples, bf16_paths = best_gemm_rate(n, torch.bfloat16, device, repeat) if bfloat16 else (None, [], {})
    fp16, fp16_samples, fp16_paths = best_gemm_rate(n, torch.float16, device, repeat) if float16 else (None, [], {})
    with tf32_units(device, True):
        on_tf32, tf32_samples, tf32_paths = best_gemm_rate(n, torch.float32, device, repeat) if tf32 else (None, [], {})
    bandwidth, copy_samples = copy_bandwidth(nbytes, device, COPY_REPEAT_FACTOR * repeat)
    return {
        "float32_flops_per_s": float32, "bfloat16_flops_per_s": bf16, "float16_flops_per_s": fp16, "tf32_flops_per_s": on_tf32,
        "bandwidth_bytes_per_s": bandwidth,
        "samples_s": {
            "float32_gemm": float32_samples, "bfloat16_gemm": bf16_samples, "float16_gemm": fp16_samples, "tf32_gemm": tf32_samples,
            "copy": copy_samples,
        },
        "gemm_paths": {"float32": float32_paths, "bfloat16": bf16_paths, "float16": fp16_paths, "tf32": tf32_paths},
        "interference": meter.stop() if meter is not None else None,
    }  # fmt: skip


def measure_limits(
    device: str = "cpu", num_threads: int | str | None = None, gemm_size: int | None = None,
    copy_bytes: int | None = None, repeat: int = REPEAT, remeasure: int = REMEASURE,
) -> dict[str, Any]:  # fmt: skip
    """Measure the peak matrix-multiply rate (float32, bfloat16 where native, float16 and TF32 on a GPU) and the memory bandwidth of `device`.

    `num_threads`: as the environments' (an int, "cores" or None for torch's default); torch's thread
    count is set for the measurement and restored after. `gemm_size`, `copy_bytes`: None for the
    device's defaults (`GEMM_SIZE`, `default_copy_bytes`). A measurement disturbed by other processes
    (more than `MAX_INTERFERENCE` of the machine) is taken again, up to `remeasure` times, and the least
    disturbed is kept, as the sweep does for cells. Returns what `write_limits` stores.
    """
    import torch

    _check_device(device)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    n = gemm_size or GEMM_SIZE[kind]
    nbytes = copy_bytes or default_copy_bytes(device)
    reason, fp16_reason, no_tf32 = bfloat16_reason(device), float16_reason(device), tf32_reason(device)
    threads = resolve_threads(num_threads)
    previous = torch.get_num_threads()
    began = perf_counter()
    kept: dict[str, Any] | None = None
    try:
        if threads:
            torch.set_num_threads(threads)
        in_effect = torch.get_num_threads()
        for attempt in range(1, remeasure + 2):
            figures = _figures(n, nbytes, device, repeat, bfloat16=reason is None, float16=fp16_reason is None, tf32=no_tf32 is None)
            interference = figures["interference"]
            if kept is None or (interference is not None and interference.fraction < kept["interference"].fraction):
                kept = figures
            if interference is None or not interference.disturbed(MAX_INTERFERENCE):
                break
    finally:
        torch.set_num_threads(previous)
    interference = kept["interference"]
    where = f"on {device}, {in_effect} thread{'s' if in_effect != 1 else ''}"
    sync = (
        f"; torch.cuda.synchronize before every clock read; on the GPU, {GPU_HEAT_S:g} s of each figure's calls before its "
        f"warm-up (the card's sustained clock, not its burst), a warm-up until the SM clock has settled (NVML), samples of "
        f"at least {GPU_SAMPLE_S:g} s" if kind == "cuda" else ""
    )
    timing = (
        f"{repeat} timed GEMMs and {COPY_REPEAT_FACTOR * repeat} timed copies, each after a warm-up until stable "
        f"(benchlib.measure.timing.measure){sync}; FLOP/s or bytes/s over the "
        f"{STATISTIC}. Measured again when other processes used more than {MAX_INTERFERENCE:.0%} of the machine "
        f"(at most {remeasure} times), the least disturbed kept"
    )
    paths = " and ".join(gemm_paths(device))
    gemm = (
        f"the faster of {paths} (torch's mkldnn_linear) multiplying two seeded random {n} x {n} matrices {where}; "
        "FLOP = 2 n^3 per call; each path's rate is in gemm_paths" if len(gemm_paths(device)) > 1
        else f"torch.mm(a, b, out=c) of two seeded random {n} x {n} matrices {where}; FLOP = 2 n^3 per call"
    )
    return {
        "device": device,
        "threads": in_effect,
        "cpu": cpu_model(),
        "gpu": torch.cuda.get_device_name(device) if kind == "cuda" else None,
        "torch": package_version("torch") or torch.__version__,
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "float32_flops_per_s": kept["float32_flops_per_s"],
        "bfloat16_flops_per_s": kept["bfloat16_flops_per_s"],
        "bfloat16_reason": reason,
        "float16_flops_per_s": kept["float16_flops_per_s"],
        "float16_reason": fp16_reason,
        "tf32_flops_per_s": kept["tf32_flops_per_s"],
        "tf32_reason": no_tf32,
        "bandwidth_bytes_per_s": kept["bandwidth_bytes_per_s"],
        "gemm_paths": kept["gemm_paths"],
        "gemm_size": n,
        "copy_bytes": nbytes,
        "method": {
            "float32_flops_per_s": f"{gemm} (TF32 off: float32's own units)" if kind == "cuda" else gemm,
            "tf32_flops_per_s": f"{gemm} in float32 on TF32 units (torch.backends.cuda.matmul.allow_tf32 = True)" if no_tf32 is None else f"not measured: {no_tf32}",
            "bfloat16_flops_per_s": f"{gemm} in bfloat16" if reason is None else f"not measured: {reason}",
            "float16_flops_per_s": fp16_reason or (
                f"{gemm} in float16 (reduced-precision reductions allowed: {torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction})"
            ),
            "bandwidth_bytes_per_s": (
                f"target.copy_(source), two float32 tensors of {nbytes} bytes each {where}; bytes moved = read + write = "
                f"2 x {nbytes} per copy (STREAM's Copy; write-allocate traffic not counted). torch rather than numpy: "
                "numpy copies on one thread, torch on the environments' thread count"
            ),
            "timing": timing,
        },
        "samples_s": kept["samples_s"],
        "interference": None if interference is None else round(interference.fraction, 4),
        "disturbed": None if interference is None else interference.disturbed(MAX_INTERFERENCE),
        "attempts": attempt,
        "seconds": perf_counter() - began,
    }


def limits_table(limits: dict[str, Any]) -> pd.DataFrame:
    """One row per figure (value, unit, how it was measured), with the ridge point float32 FLOP per byte; a peak not
    measured is blank (float16 on a CPU, or in a file from before it was measured)."""
    float32, bfloat16, bandwidth = limits["float32_flops_per_s"], limits["bfloat16_flops_per_s"], limits["bandwidth_bytes_per_s"]
    float16, tf32, method = limits.get("float16_flops_per_s"), limits.get("tf32_flops_per_s"), limits["method"]
    rows = [
        ("peak float32 matrix multiply", float32 / 1e9, "GFLOP/s", method["float32_flops_per_s"]),
        ("peak bfloat16 matrix multiply", None if bfloat16 is None else bfloat16 / 1e9, "GFLOP/s", method["bfloat16_flops_per_s"]),
        ("peak float16 matrix multiply", None if float16 is None else float16 / 1e9, "GFLOP/s", method.get("float16_flops_per_s", "not measured")),
        ("peak TF32 matrix multiply", None if tf32 is None else tf32 / 1e9, "GFLOP/s", method.get("tf32_flops_per_s", "not measured")),
        ("memory bandwidth", bandwidth / 1e9, "GB/s", method["bandwidth_bytes_per_s"]),
        ("ridge point (float32 peak / bandwidth)", float32 / bandwidth, "FLOP/byte", "derived"),
    ]
    return pd.DataFrame(rows, columns=["figure", "value", "unit", "how"])


def describe_limits(limits: dict[str, Any]) -> list[str]:
    """A sentence per figure, for a reader deciding whether the machine is fit for a long run."""
    float32, bfloat16, bandwidth = limits["float32_flops_per_s"], limits["bfloat16_flops_per_s"], limits["bandwidth_bytes_per_s"]
    threads = limits["threads"]
    where = f"{limits['gpu'] or limits['cpu']} ({limits['device']}, {threads} thread{'s' if threads != 1 else ''})"
    n = limits["gemm_size"]
    paths = (limits.get("gemm_paths") or {}).get("float32") or {BLAS: float32}
    best = max(paths, key=paths.get)
    sentences = [f"Peak float32 matrix multiply on {where}: {float32 / 1e9:.1f} GFLOP/s ({best} of {n} x {n} matrices, median call)."]
    if len(paths) > 1 and max(paths.values()) > 1.2 * min(paths.values()):
        slow = min(paths, key=paths.get)
        sentences.append(
            f"The GEMM libraries differ here: {slow} reached {paths[slow] / 1e9:.1f} GFLOP/s, {best} {paths[best] / 1e9:.1f} GFLOP/s "
            f"({paths[best] / paths[slow]:.1f}x): a framework whose matrix multiplies go through {slow} (PyTorch's eager linear "
            f"layers call torch's BLAS) cannot pass about {paths[slow] / float32:.0%} of this peak."
        )
    if bfloat16 is None:
        sentences.append(f"bfloat16 matrix multiply: not measured ({limits['bfloat16_reason']}).")
    else:
        sentences.append(f"Peak bfloat16 matrix multiply: {bfloat16 / 1e9:.1f} GFLOP/s, {bfloat16 / float32:.2f} x float32.")
    if (float16 := limits.get("float16_flops_per_s")) is not None:
        sentences.append(f"Peak float16 matrix multiply: {float16 / 1e9:.1f} GFLOP/s, {float16 / float32:.2f} x float32.")
    if (tf32 := limits.get("tf32_flops_per_s")) is not None:
        sentences.append(f"Peak TF32 matrix multiply (float32 on TF32 units): {tf32 / 1e9:.1f} GFLOP/s, {tf32 / float32:.2f} x float32.")
    sentences.append(
        f"Memory bandwidth: {bandwidth / 1e9:.1f} GB/s (copy of {limits['copy_bytes'] / MIB:.0f} MiB, read + write counted)."
    )
    sentences.append(
        f"Ridge point: {float32 / bandwidth:.1f} float32 FLOP per byte moved; a cell doing fewer FLOP per byte is bound by memory, more by compute."
    )
    if limits.get("disturbed"):
        sentences.append(
            f"Disturbed: other processes used {limits['interference']:.0%} of the machine even in the quietest of "
            f"{limits['attempts']} attempts; the figures are likely low: measure again on a quieter machine."
        )
    return sentences
