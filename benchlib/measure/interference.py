"""How much of the machine other processes used while a cell was warmed up and sampled.

The machine's busy CPU time (Linux `/proc/stat`, steal included, over the CPUs this process
may run on) minus this process's own CPU time (`/proc/self/stat`, all its threads), over the
same interval, as a fraction of the CPU capacity of that interval (CPUs × seconds). Both
counters are read once before the warm-up and once after the last sample: nothing runs while
calls are timed.

Steal is the time the hypervisor of a virtual machine ran something else on this machine's CPUs: the
host's other work, not a process here. It is part of the interference and also kept apart (`steal`),
so that a reader can tell other work on this machine (which they can stop) from the host's (which
only a quieter time or another machine avoids). A process whose threads sleep between operations
(TensorFlow's) is the most exposed to it: each wake-up of an idle virtual CPU waits for the host.

Both are kept by the kernel in clock ticks (usually 1/100 s), so a short interval has a coarse
resolution: one tick over a 50 ms window on two CPUs is 10% of its capacity. A cell is
`disturbed` when its interference exceeds the threshold by more than that resolution.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib.measure.device_state import DeviceState

METHOD = "other processes' CPU time (/proc/stat busy, steal included, minus this process's) over CPU capacity, during warm-up and samples"
PROC_STAT = Path("/proc/stat")
PROC_SELF_STAT = Path("/proc/self/stat")
# Fields of a `cpuN` line of /proc/stat (user nice system idle iowait irq softirq steal ...);
# guest time is already counted in user.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
_STEAL_FIELD = 7


@dataclass(frozen=True)
class Interference:
    """Other processes' share of the machine's CPU capacity over one interval, and where a `DeviceMonitor` read the device
    (a cell's samples, a LoadGen test), its state: a slowed device disturbs a figure as other work does."""

    fraction: float  # 0 to 1
    resolution: float  # one clock tick as a fraction of the interval's capacity
    window_s: float
    steal: float = 0.0  # the hypervisor's share (other work on the host), part of `fraction`
    device: DeviceState | None = None

    def disturbed(self, max_interference: float) -> bool:
        """Whether other processes used more than `max_interference` of the machine, beyond the meter's resolution, or
        the device could not hold its steady clock (`DeviceState.slowed`)."""
        return self.fraction > max_interference + self.resolution or bool(self.device is not None and self.device.slowed())


def _cpus() -> set[int] | None:
    """The CPUs this process may run on (None where the system does not say)."""
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def _busy_ticks(cpus: set[int] | None) -> tuple[int, int, int]:
    """Busy clock ticks summed over `cpus` (all CPUs when None), the steal ticks among them, and how many CPUs were counted."""
    busy, steal, counted = 0, 0, 0
    with open(PROC_STAT, encoding="ascii") as file:
        for line in file:
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            name, *values = line.split()
            if cpus is not None and int(name[3:]) not in cpus:
                continue
            busy += sum(int(values[i]) for i in _BUSY_FIELDS if i < len(values))
            steal += int(values[_STEAL_FIELD]) if _STEAL_FIELD < len(values) else 0
            counted += 1
    return busy, steal, counted


def _own_ticks() -> int:
    """This process's user and system clock ticks, all threads."""
    fields = PROC_SELF_STAT.read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def available() -> bool:
    """Whether interference can be measured here (Linux /proc)."""
    try:
        _busy_ticks(_cpus())
        _own_ticks()
    except (OSError, ValueError, IndexError):
        return False
    return True


class InterferenceMeter:
    """Reads the counters at `start()` and `stop()`; `stop()` returns the `Interference` between them."""

    def __init__(self) -> None:
        self._cpus = _cpus()
        self._hz = os.sysconf("SC_CLK_TCK")
        self._start: tuple[int, int, int, float] | None = None

    def start(self) -> None:
        busy, steal, _ = _busy_ticks(self._cpus)
        self._start = (busy, steal, _own_ticks(), time.perf_counter())

    def stop(self) -> Interference:
        end = time.perf_counter()
        busy, steal, cpus = _busy_ticks(self._cpus)
        own = _own_ticks()
        if self._start is None:
            raise RuntimeError("InterferenceMeter.stop() before start()")
        busy0, steal0, own0, began = self._start
        capacity_ticks = max(cpus * (end - began) * self._hz, 1.0)
        other_ticks = (busy - busy0) - (own - own0)
        fraction = min(max(other_ticks / capacity_ticks, 0.0), 1.0)  # tick rounding can step just outside
        stolen = min(max((steal - steal0) / capacity_ticks, 0.0), fraction)
        return Interference(fraction=fraction, resolution=1.0 / capacity_ticks, window_s=end - began, steal=stolen)


def make_meter() -> InterferenceMeter | None:
    """A meter where /proc is there to read, else None (interference is then not measured)."""
    return InterferenceMeter() if available() else None
