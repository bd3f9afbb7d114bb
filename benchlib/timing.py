"""Framework-neutral timing: warm-up calls, then `repeat` samples of `number` calls each.

Modelled on `torch.utils.benchmark`: a frozen `TimingSpec` says what is timed, a
`Measurement` keeps the raw per-call sample times and derives statistics from them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Clock = Callable[[], float]
Sync = Callable[[Any], None]


def no_sync(output: Any) -> None:
    """Synchronisation for a device whose calls return when their work is done (the CPU)."""


@dataclass(frozen=True)
class TimingSpec:
    """How one cell is timed. The 2019 study used repeat=30, number=3."""

    warmup: int = 1
    repeat: int = 30
    number: int = 3

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.repeat < 1 or self.number < 1:
            raise ValueError(f"need warmup >= 0, repeat >= 1, number >= 1; got {self}")


@dataclass(frozen=True)
class Measurement:
    """Raw per-call sample times of one cell (each sample is the mean over `number` calls)."""

    samples_s: tuple[float, ...]
    number: int
    first_call_s: float | None = None

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


def time_first_call(
    make_call: Callable[[], Callable[[], Any]], sync: Sync = no_sync, clock: Clock = time.perf_counter
) -> tuple[Callable[[], Any], float]:
    """Prepare a call (tracing, compiling) and run it once; return it and the time both took."""
    start = clock()
    call = make_call()
    sync(call())
    return call, clock() - start


def measure(
    call: Callable[[], Any],
    spec: TimingSpec,
    sync: Sync = no_sync,
    clock: Clock = time.perf_counter,
    first_call_s: float | None = None,
) -> Measurement:
    """Time `call`: `spec.warmup` untimed calls, then `spec.repeat` samples of `spec.number` calls.

    `sync(output)` runs before every clock read, so that work queued on a device is
    inside the interval it belongs to.
    """
    output = None
    for _ in range(spec.warmup):
        output = call()
    sync(output)
    number = spec.number
    samples = []
    for _ in range(spec.repeat):
        start = clock()
        for _ in range(number):
            output = call()
        sync(output)
        samples.append((clock() - start) / number)
    return Measurement(samples_s=tuple(samples), number=number, first_call_s=first_call_s)
