"""Framework-neutral timing: preparation and a first call, warm-up until stable (on a GPU, until its clock is at its
steady value too), then samples of `number` calls each, with the device's state read between them.

Modelled on `torch.utils.benchmark`: a frozen `TimingSpec` says what is timed, a
`Measurement` keeps the raw per-call sample times and derives statistics from them.
Samples are either a fixed `repeat` (the 2019 study: 30 samples of 3 calls) or, with
`repeat="auto"`, taken until the mean is known well enough or the cell's time is spent.
Garbage collection is off while samples are taken (as in `timeit` and `torch.utils.benchmark`).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchlib.measure import stats
from benchlib.measure.device_state import DeviceMonitor, DeviceState
from benchlib.measure.interference import Interference, InterferenceMeter
from benchlib.measure.memory import CellPeakMemory

Clock = Callable[[], float]
Sync = Callable[[Any], None]

AUTO = "auto"
# Why sampling stopped (the `stop_reason` column).
FIXED = "fixed"  # the fixed `repeat` was taken
CONVERGED = "converged"  # auto: the 95% CI half-width came within `target_rel_ci` of the mean
TIME_BUDGET = "time_budget"  # auto: `max_cell_seconds` of sampling spent first
MAX_SAMPLES = "max_samples"  # auto: `max_samples` taken first
STOP_REASONS: tuple[str, ...] = (FIXED, CONVERGED, TIME_BUDGET, MAX_SAMPLES)
# Warm-up is stable when two successive batches of calls agree within this fraction.
WARMUP_TOLERANCE = 0.05
# A warm-up batch holds enough calls to last at least this long (one call when a call is longer).
WARMUP_BATCH_SECONDS = 0.05
# Why the warm-up stopped (the `warmup_stop` column).
WARMUP_STABLE = "stable"  # the call's time (and a GPU's clock) settled
WARMUP_TIME_LIMIT = "time limit"  # warmup_max_seconds spent first: the samples may include a settling device
WARMUP_CALLS = "calls"  # warmup_max_seconds is 0: the `warmup` calls only
WARMUP_NONE = "none"  # warmup is 0


def no_sync(output: Any) -> None:
    """Synchronisation for a device whose calls return when their work is done (the CPU)."""


@dataclass(frozen=True)
class TimingSpec:
    """How one cell is timed. The 2019 study used repeat=30, number=3.

    Warm-up: at least `warmup` calls, then batches of calls until two successive batches agree
    within `WARMUP_TOLERANCE` per call, or `warmup_max_seconds` of warm-up are spent.
    With `repeat="auto"`, samples are taken until the 95% confidence interval of the mean is
    within `target_rel_ci` of it, or `max_cell_seconds` of sampling are spent, or `max_samples`
    are taken; never fewer than `min_samples`.
    """

    warmup: int = 1
    warmup_max_seconds: float = 5.0
    repeat: int | str = 30
    number: int = 3
    target_rel_ci: float = 0.02
    max_cell_seconds: float = 60.0
    min_samples: int = 5
    max_samples: int = 1000

    def __post_init__(self) -> None:
        repeat_ok = self.repeat == AUTO or (isinstance(self.repeat, int) and self.repeat >= 1)
        if self.warmup < 0 or not repeat_ok or self.number < 1:
            raise ValueError(f"need warmup >= 0, repeat >= 1 or 'auto', number >= 1; got {self}")
        if not (self.target_rel_ci > 0 and self.max_cell_seconds > 0 and 2 <= self.min_samples <= self.max_samples):
            raise ValueError(f"need target_rel_ci > 0, max_cell_seconds > 0, 2 <= min_samples <= max_samples; got {self}")
        if self.warmup_max_seconds < 0:
            raise ValueError(f"need warmup_max_seconds >= 0; got {self}")

    @property
    def adaptive(self) -> bool:
        return self.repeat == AUTO


def _number_or_blank(value: float | None) -> float | str:
    """`value`, or "" where there is none (a one-sample interval, an unmeasured peak)."""
    return "" if value is None or math.isnan(value) else value


@dataclass(frozen=True)
class Measurement:
    """Raw per-call sample times of one cell (each sample is the mean over `number` calls)."""

    samples_s: tuple[float, ...]
    number: int
    first_call_s: float | None = None
    stop_reason: str = FIXED
    peak_memory_bytes: int | None = None
    prepare_s: float | None = None
    warmup_calls: int = 0
    interference: Interference | None = None
    max_abs_diff: float | None = None  # largest absolute difference from eager PyTorch float32's output
    warmup_s: float | None = None
    warmup_stop: str = ""
    device: DeviceState | None = None  # the device over the samples (`measure.device_state`)

    def row_fields(self) -> dict[str, Any]:
        """The columns of a results row that this measurement fills (the device's energy per call)."""
        return {
            **(self.device.row_fields(self.calls, "call") if self.device is not None else {}),
            "warmup_s": _number_or_blank(self.warmup_s), "warmup_stop": self.warmup_stop,
            "mean_s": self.mean_s, "median_s": self.median_s, "min_s": self.min_s, "std_s": self.std_s,
            "repeat": len(self.samples_s), "number": self.number, "first_call_s": self.first_call_s,
            "samples_s": json.dumps(list(self.samples_s)), "iqr_s": self.iqr_s,
            "ci95_low_s": _number_or_blank(self.ci95_s[0]), "ci95_high_s": _number_or_blank(self.ci95_s[1]),
            "noisy": self.noisy, "stop_reason": self.stop_reason, "peak_memory_bytes": _number_or_blank(self.peak_memory_bytes),
            "prepare_s": _number_or_blank(self.prepare_s), "warmup_calls": self.warmup_calls,
            "interference": "" if self.interference is None else round(self.interference.fraction, 4),
            "steal": "" if self.interference is None else round(self.interference.steal, 4),
            "max_abs_diff": _number_or_blank(self.max_abs_diff),
        }  # fmt: skip

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.samples_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    @property
    def std_s(self) -> float:
        """Sample standard deviation (0 for a single sample)."""
        return statistics.stdev(self.samples_s) if len(self.samples_s) > 1 else 0.0

    @property
    def iqr_s(self) -> float:
        return stats.iqr(self.samples_s)

    @property
    def ci95_s(self) -> tuple[float, float]:
        """95% confidence interval of the mean per call (t distribution); NaN for one sample."""
        return stats.ci95(self.samples_s)

    @property
    def noisy(self) -> bool:
        """The interquartile range exceeds 10% of the median."""
        return stats.is_noisy(self.samples_s)

    @property
    def calls(self) -> int:
        """Timed calls behind the samples."""
        return len(self.samples_s) * self.number


def prepare_and_call_once(
    make_call: Callable[[], Callable[[], Any]], sync: Sync = no_sync, clock: Clock = time.perf_counter
) -> tuple[Callable[[], Any], float, float]:
    """Prepare a call (trace, compile, export) and run it once: (the call, preparation seconds, first call seconds)."""
    start = clock()
    call = make_call()
    prepared = clock()
    sync(call())
    return call, prepared - start, clock() - prepared


def _sample(call: Callable[[], Any], number: int, sync: Sync, clock: Clock) -> tuple[float, float]:
    """Time `number` back-to-back calls: (seconds per call, clock at the end)."""
    start = clock()
    for _ in range(number):
        output = call()
    sync(output)
    end = clock()
    return (end - start) / number, end


def warm_up(
    call: Callable[[], Any], spec: TimingSpec, sync: Sync = no_sync, clock: Clock = time.perf_counter, steady: Callable[[], bool] | None = None
) -> tuple[int, float, str]:  # fmt: skip
    """Untimed calls until the per-call time is stable: (how many calls were made, their seconds, why it stopped).

    First `spec.warmup` calls (none at all when it is 0). Then batches, each of enough calls to
    last `WARMUP_BATCH_SECONDS` at the latest per-call time, until the median call of one batch is
    within `WARMUP_TOLERANCE` of the median call of the batch before it (the first batch is compared
    with the last of the `warmup` calls) and `steady()` says the device's clock has settled (a GPU idles at a
    fraction of it and takes calls to climb), or `spec.warmup_max_seconds` have been spent since the
    warm-up began. This lets TorchScript's profiling executor, XLA and autotuning settle before
    samples are taken. Each call is timed on its own, so that the median ignores a stray slow call.
    """
    if spec.warmup == 0:
        return 0, 0.0, WARMUP_NONE
    began = clock()
    latest = 0.0
    for _ in range(spec.warmup):
        latest = _sample(call, 1, sync, clock)[0]
    calls, why = spec.warmup, WARMUP_CALLS if spec.warmup_max_seconds == 0 else WARMUP_TIME_LIMIT
    while clock() - began < spec.warmup_max_seconds:
        batch = max(1, math.ceil(WARMUP_BATCH_SECONDS / latest)) if latest > 0 else 1
        median = statistics.median(_sample(call, 1, sync, clock)[0] for _ in range(batch))
        calls += batch
        if abs(median - latest) <= WARMUP_TOLERANCE * latest and (steady is None or steady()):
            why = WARMUP_STABLE
            break
        latest = median
    return calls, clock() - began, why


def stop_reason(running: stats.RunningMean, spec: TimingSpec, elapsed_s: float) -> str | None:
    """Why adaptive sampling stops after these samples, or None to take another."""
    if running.count < spec.min_samples:
        return None
    if running.relative_ci95_half_width() <= spec.target_rel_ci:
        return CONVERGED
    if elapsed_s >= spec.max_cell_seconds:
        return TIME_BUDGET
    if running.count >= spec.max_samples:
        return MAX_SAMPLES
    return None


def take_samples(take: Callable[[], float], spec: TimingSpec, clock: Clock = time.perf_counter) -> tuple[list[float], str]:
    """Samples from `take` (one sample's seconds per call): a fixed `spec.repeat`, or with `repeat="auto"` until
    `stop_reason` says; and why sampling stopped."""
    samples: list[float] = []
    if not spec.adaptive:
        for _ in range(spec.repeat):
            samples.append(take())
        return samples, FIXED
    running = stats.RunningMean()
    began = clock()
    while True:
        per_call = take()
        samples.append(per_call)
        running.add(per_call)
        reason = stop_reason(running, spec, clock() - began)
        if reason:
            return samples, reason


@dataclass(frozen=True)
class Sampled:
    """What `sampled` took: the samples and why sampling stopped, the warm-up (calls, seconds, why it stopped), the
    interference over warm-up and samples, and the device over the samples."""

    samples: list[float]
    reason: str
    warmup_calls: int
    warmup_s: float
    warmup_stop: str
    interference: Interference | None
    device: DeviceState | None


def sampled(
    take: Callable[[], float], warm_call: Callable[[], Any], spec: TimingSpec, sync: Sync = no_sync, clock: Clock = time.perf_counter,
    meter: InterferenceMeter | None = None, monitor: DeviceMonitor | None = None, memory: CellPeakMemory | None = None,
) -> Sampled:  # fmt: skip
    """The protocol every workload's cell is timed with: `meter` started, `warm_call` warmed up until stable (`warm_up`,
    and until `monitor`'s device's clock has settled), `monitor` begun, samples from `take` with garbage collection
    off (`take_samples`) and the device read after each, `monitor` ended, the energy of a window of `warm_call`s of its
    own where the monitor's counter needs one (`DeviceMonitor.energy_over`), `meter` read. `memory`'s window is the
    samples' (a GPU's peak memory over the timed calls alone)."""
    if meter is not None:
        meter.start()
    warmup_calls, warmup_s, warmup_stop = warm_up(warm_call, spec, sync, clock, monitor.steady if monitor is not None else None)
    collecting = gc.isenabled()
    gc.disable()
    try:
        if monitor is not None:
            monitor.begin()

            def take_and_read() -> float:
                per_call = take()
                monitor.read()  # after the sample's clock read: outside every timed interval
                return per_call

        if memory is not None:
            memory.begin()
        samples, reason = take_samples(take_and_read if monitor is not None else take, spec, clock)
        if memory is not None:
            memory.end()
        device = monitor.end() if monitor is not None else None
        if monitor is not None and device is not None and samples and (energy := monitor.energy_over(warm_call, sync, statistics.median(samples))):
            device = dataclasses.replace(device, energy_j=energy[0], energy_calls=energy[1], energy_source=monitor.source)
        interference = meter.stop() if meter is not None else None
        if interference is not None and device is not None:  # a slowed device disturbs the cell as other work does
            interference = dataclasses.replace(interference, device=device)
    finally:
        if collecting:
            gc.enable()
    return Sampled(samples, reason, warmup_calls, warmup_s, warmup_stop, interference, device)


def measure(
    call: Callable[[], Any],
    spec: TimingSpec,
    sync: Sync = no_sync,
    clock: Clock = time.perf_counter,
    first_call_s: float | None = None,
    prepare_s: float | None = None,
    meter: InterferenceMeter | None = None,
    monitor: DeviceMonitor | None = None,
    memory: CellPeakMemory | None = None,
) -> Measurement:
    """Time `call`: warm-up until stable (`warm_up`), then samples of `spec.number` back-to-back calls.

    `sync(output)` runs before every clock read, so that work queued on a device is inside
    the interval it belongs to. Between two clock reads there are only the `number` calls
    and one sync; the stopping rule of `repeat="auto"` runs between samples. Garbage
    collection is off while samples are taken. `meter` (if any) reads the machine's counters
    before the warm-up and after the last sample: the cell's calls in steady state, a window
    long enough for the counters' clock ticks even when the samples alone are a few milliseconds. `monitor` (if any)
    reads the device over the samples alone (`sampled`), and `memory` (if any) a GPU's peak memory.
    """
    taken = sampled(lambda: _sample(call, spec.number, sync, clock)[0], call, spec, sync, clock, meter, monitor, memory)
    return Measurement(
        samples_s=tuple(taken.samples), number=spec.number, first_call_s=first_call_s, stop_reason=taken.reason,
        prepare_s=prepare_s, warmup_calls=taken.warmup_calls, interference=taken.interference, warmup_s=taken.warmup_s,
        warmup_stop=taken.warmup_stop, device=taken.device,
    )  # fmt: skip
