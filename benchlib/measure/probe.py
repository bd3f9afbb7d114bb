"""The speed probe: a fixed reference workload, independent of both frameworks, timed through a run.

A float32 matrix multiply (numpy, 1024 × 1024, one BLAS thread) timed three times; the probe's
value is the median. It runs at the start and end of each environment and before each model, so
that a change of the machine's own speed (frequency, thermal limits, CPU steal on a cloud VM)
shows up beside the numbers it affected.
"""

from __future__ import annotations

import datetime
import statistics
import time
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

PROBE_SIZE = 1024
PROBE_REPEAT = 3
PROBE_WORKLOAD = f"numpy float32 matmul {PROBE_SIZE}x{PROBE_SIZE}, 1 thread, median of {PROBE_REPEAT}"


@dataclass(frozen=True)
class ProbeRecord:
    """One probe: when, where in the sweep (`label`), and how long the workload took."""

    label: str
    time: str
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@cache
def _matrix(size: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)


def time_workload(size: int = PROBE_SIZE, repeat: int = PROBE_REPEAT) -> float:
    """Median seconds of a `size` × `size` float32 matrix multiply on one thread (the median sets a cold first call aside)."""
    matrix = _matrix(size)
    times = []
    with threadpool_limits(limits=1):
        for _ in range(repeat):
            start = time.perf_counter()
            matrix @ matrix
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_probe(label: str) -> ProbeRecord:
    """Time the reference workload now."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
    return ProbeRecord(label=label, time=now, seconds=time_workload())


def variation(seconds: list[float]) -> float:
    """How much the probe varied: slowest over fastest, minus one (0 for fewer than two probes)."""
    return max(seconds) / min(seconds) - 1 if len(seconds) > 1 else 0.0
