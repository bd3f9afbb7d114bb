"""What the device did while a cell was sampled, from the machine's own counters: a GPU's SM clock, power, temperature,
memory and NVML's clock-event (throttle) reasons, and the energy a counter saw (NVML's total energy on a GPU; on a CPU,
the RAPL package counters under /sys/class/powercap, where they exist and can be read). Never an estimate from a rated
power: without a counter the energy is blank, with the reason (`energy_counter`).

A `DeviceMonitor` is begun after the warm-up, read between samples (never inside a timed interval) and ended after the
last sample; a load test is read by a thread every `POLL_S` while LoadGen runs. A cell whose SM clock fell below the
clock its warm-up settled at, or that NVML says was held back by heat or the hardware, is `slowed`: the sweep flags it as
disturbed and measures it again, like interference (a software power cap, a busy datacenter GPU's normal state, is not).
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

POWERCAP = Path("/sys/class/powercap")
# NVML's clocks-event reasons (nvmlClocksEventReason*) recorded in `gpu_throttle`; idle, application clocks, sync boost
# and display clocks are not recorded.
THROTTLE_REASONS: dict[int, str] = {
    0x4: "power cap (software)", 0x8: "hardware slowdown", 0x20: "thermal (software)", 0x40: "thermal (hardware)",
    0x80: "power brake (hardware)",
}  # fmt: skip
# Those that make a cell `slowed`: heat and the hardware's own slowdowns. The software power cap is the normal state of a
# busy datacenter GPU (its clock then is the one the warm-up settled at), recorded but no disturbance.
SLOWING_REASONS = frozenset(name for bit, name in THROTTLE_REASONS.items() if bit != 0x4)
CLOCK_TOLERANCE = 0.03  # a clock more than this share below the cell's steady clock is down-clocked
POLL_S = 0.1  # a load test's reads, from a thread
# A GPU cell's energy is read over calls of its own after the samples, at least this long and with no read inside: NVML's
# power sensor on an A100 or H100 moves in steps that make a window of a few samples read 0 or far off.
ENERGY_WINDOW_S = 1.0
NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 1, 0
NO_COUNTER = "no energy counter on this machine"
ENERGY_SOURCES: dict[str, str] = {  # a counter's source (DeviceMonitor.source), in words
    "nvml": (
        "NVML's total energy counter of the GPU (nvmlDeviceGetTotalEnergyConsumption), read around a window of the cell's "
        "calls of its own after the samples, at least 1 s long, with no read inside"
    ),
    "nvml-whole-card": (
        "NVML's total energy counter of the whole GPU this MIG instance is part of (nvmlDeviceGetTotalEnergyConsumption of its "
        "parent), read around a window of the cell's calls of its own after the samples, at least 1 s long: the other "
        "instances' work included, as are its power, clock and temperature"
    ),
    "rapl": "the CPU packages' RAPL counters (/sys/class/powercap), read around the samples: the whole package, other processes' work included",
}  # fmt: skip


@dataclass(frozen=True)
class DeviceState:
    """The device over one window: the SM clock (median and lowest read), the steady clock the cell's warm-up settled at
    (`sustained_mhz`), mean power, highest temperature and memory used, the clock-event reasons seen, and the energy
    (joules) over the window."""

    clock_mhz: float | None = None
    clock_min_mhz: float | None = None
    sustained_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    memory_used_bytes: int | None = None
    throttle: tuple[str, ...] = ()
    energy_j: float | None = None
    energy_source: str = ""
    energy_calls: int | None = None  # where the energy has a window of its own: the calls in it

    def slowed(self) -> str:
        """Why the device could not hold its steady clock in this window ("" when it could): the samples' median clock
        more than CLOCK_TOLERANCE below the clock the warm-up settled at, or held back by heat or the hardware (a
        software power cap alone is not)."""
        reasons = []
        if self.clock_mhz is not None and self.sustained_mhz and self.clock_mhz < (1 - CLOCK_TOLERANCE) * self.sustained_mhz:
            reasons.append(f"SM clock down to {self.clock_mhz:.0f} MHz, below the steady {self.sustained_mhz:.0f} MHz of its warm-up")
        if held := [name for name in self.throttle if name in SLOWING_REASONS]:
            reasons.append("throttled: " + ", ".join(held))
        return "; ".join(reasons)

    def row_fields(self, units: float, unit: str, units_per_call: float = 1.0) -> dict[str, Any]:
        """The row's device columns; `energy_j` per `unit` of work (`units` of them in the window: calls, generated tokens
        or served samples; `units_per_call` of them in each call of an energy window of its own)."""
        blank = lambda value: "" if value is None else value  # noqa: E731
        if self.energy_calls:
            units = self.energy_calls * units_per_call
        return {
            "gpu_clock_mhz": blank(self.clock_mhz), "gpu_clock_min_mhz": blank(self.clock_min_mhz), "gpu_sustained_mhz": blank(self.sustained_mhz),
            "gpu_power_w": blank(self.power_w), "gpu_temperature_c": blank(self.temperature_c), "gpu_memory_bytes": blank(self.memory_used_bytes),
            "gpu_throttle": "; ".join(self.throttle), "slowed": self.slowed(),
            "energy_j": "" if self.energy_j is None or units <= 0 else self.energy_j / units, "energy_source": self.energy_source,
            "energy_unit": unit if self.energy_j is not None else "",
        }  # fmt: skip


@dataclass
class _Reads:
    clocks: list[float] = field(default_factory=list)
    powers: list[float] = field(default_factory=list)
    temperatures: list[float] = field(default_factory=list)
    memory: list[int] = field(default_factory=list)
    reasons: int = 0


class DeviceMonitor:
    """Reads a device's counters over a window: `begin()`, `read()` between samples, `end()` -> DeviceState. The base
    reads nothing: a machine without counters, and `reason` says why."""

    source = ""

    def __init__(self, reason: str = NO_COUNTER) -> None:
        self.reason = reason

    def begin(self) -> None:
        """Start a window (and forget an earlier one)."""

    def read(self) -> None:
        """One read of the clocks, power, temperature, memory and throttle reasons (nothing without them)."""

    def end(self) -> DeviceState:
        """The window since `begin()`."""
        return DeviceState()

    def steady(self) -> bool:
        """Whether the device's clock has settled (True without a clock to read: only the call's time then decides when
        the warm-up is over)."""
        return True

    def describe(self) -> dict[str, Any]:
        """What environment.json records of the device and its counters."""
        return {"energy": {"source": None, "reason": self.reason}}

    def polling(self) -> Polling:
        """A context that reads this monitor every POLL_S from a thread (a load test's window)."""
        return Polling(self)

    def energy_over(self, call: Callable[[], Any], sync: Callable[[Any], None], per_call_s: float) -> tuple[float, int] | None:
        """The energy of calls of `call` in a window of their own (joules, calls), where this counter needs one: None here
        (the samples' window is the energy's)."""
        return None


class Polling:
    """`with monitor.polling():` begins the window, reads it every POLL_S from a thread, and stops reading on exit; the
    state is `monitor.end()` afterwards."""

    def __init__(self, monitor: DeviceMonitor) -> None:
        self.monitor, self._stop = monitor, threading.Event()
        self._thread = threading.Thread(target=self._run, name="device-monitor", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self.monitor.read()

    def __enter__(self) -> Polling:
        self.monitor.begin()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.monitor.read()


class RaplMonitor(DeviceMonitor):
    """A CPU's energy from the RAPL package counters (`<root>/intel-rapl:N/energy_uj`, microjoules, wrapping at
    `max_energy_range_uj`; AMD's Zen packages appear there too). Energy only: the CPU's clocks are not read."""

    source = "rapl"

    def __init__(self, zones: list[Path]) -> None:
        super().__init__("")
        self.zones = zones
        self._start: list[int] = []

    def _counters(self) -> list[int]:
        return [int((zone / "energy_uj").read_text(encoding="ascii")) for zone in self.zones]

    def begin(self) -> None:
        self._start = self._counters()

    def end(self) -> DeviceState:
        joules = 0.0
        for zone, before, after in zip(self.zones, self._start, self._counters()):
            span = after - before
            if span < 0:  # the counter wrapped
                span += int((zone / "max_energy_range_uj").read_text(encoding="ascii"))
            joules += span / 1e6
        return DeviceState(energy_j=joules, energy_source=self.source)

    def describe(self) -> dict[str, Any]:
        names = [(zone / "name").read_text(encoding="ascii").strip() for zone in self.zones]
        return {"energy": {"source": self.source, "zones": names, "method": ENERGY_SOURCES[self.source]}}


def rapl_zones(root: Path = POWERCAP) -> list[Path]:
    """The RAPL package zones under `root` whose counter this process can read (none where there are none, or reading
    them needs more rights than it has)."""
    zones = []
    for zone in sorted(root.glob("intel-rapl:*")):
        if zone.name.count(":") != 1:  # a subzone (core, uncore, dram) is inside its package's count
            continue
        try:
            if (zone / "name").read_text(encoding="ascii").startswith("package"):
                int((zone / "energy_uj").read_text(encoding="ascii"))
                zones.append(zone)
        except (OSError, ValueError):
            continue
    return zones


def energy_counter_reason(root: Path = POWERCAP) -> str:
    """Why a CPU run has no energy figure: no RAPL zone, or none this process may read."""
    if not any(root.glob("intel-rapl:*")):
        return f"{NO_COUNTER}: no RAPL counter under {root}, and no GPU"
    return f"{NO_COUNTER}: the RAPL counters under {root} cannot be read by this user (energy_uj is root's since Linux 5.10)"


class NvmlMonitor(DeviceMonitor):
    """A GPU's state from NVML (`pynvml`, of nvidia-ml-py): the SM clock, power, temperature, memory used and the
    clock-event reasons at each read, and the total energy counter (millijoules) at the window's ends. A field NVML does
    not answer on this card (a VM, a MIG instance, an older GPU) is found at the start, never read again, blank in every
    row, and its reason is in `describe()` once."""

    source = "nvml"

    def __init__(self, nvml: Any, handle: Any, card: Any | None = None) -> None:
        super().__init__("")
        self.nvml, self.handle = nvml, handle
        self.card = card  # a MIG instance's whole card: its clock, power, heat and energy are the card's
        if card is not None:
            self.source = "nvml-whole-card"
        self.max_mhz = _sustained_clock(nvml, card or handle)
        self.missing: dict[str, str] = {}
        self._readers = {name: read for name, read in _readers(nvml, handle, card).items() if self._answers(name, read)}
        self._reads, self._energy_mj = _Reads(), None
        self._checked_mhz: float | None = None  # the clock at the warm-up's last check
        self._steady_mhz: float | None = None  # the clock the window is held against

    def _answers(self, name: str, read: Callable[[], Any]) -> bool:
        try:
            read()
        except Exception as exc:  # NVMLError_NotSupported, NoPermission and kin  # noqa: BLE001
            self.missing[name] = f"{type(exc).__name__}: {exc}".rstrip(": ")
            return False
        return True

    def _read(self, name: str) -> Any:
        """NVML's answer for field `name`, or None where it has none (a field that stops answering is left out after)."""
        read = self._readers.get(name)
        if read is None:
            return None
        try:
            return read()
        except Exception as exc:  # noqa: BLE001
            self.missing[name] = f"{type(exc).__name__}: {exc}".rstrip(": ")
            del self._readers[name]
            return None

    def begin(self) -> None:
        self._reads = _Reads()
        self._steady_mhz, self._checked_mhz = self._checked_mhz, None
        self._energy_mj = self._read("energy")

    def read(self) -> None:
        reads = self._reads
        for name, values in (("clock", reads.clocks), ("power", reads.powers), ("temperature", reads.temperatures), ("memory", reads.memory)):
            if (value := self._read(name)) is not None:
                values.append(value)
        reads.reasons |= self._read("clock_events") or 0
        if self._steady_mhz is None and reads.clocks:  # no warm-up check: the window's first clock
            self._steady_mhz = reads.clocks[0]

    def end(self) -> DeviceState:
        reads, energy = self._reads, self._read("energy")
        joules = (energy - self._energy_mj) / 1000 if energy is not None and self._energy_mj is not None else None
        return DeviceState(
            clock_mhz=statistics.median(reads.clocks) if reads.clocks else None, clock_min_mhz=min(reads.clocks, default=None),
            sustained_mhz=self._steady_mhz, power_w=statistics.fmean(reads.powers) if reads.powers else None,
            temperature_c=max(reads.temperatures, default=None), memory_used_bytes=max(reads.memory, default=None),
            throttle=tuple(name for bit, name in THROTTLE_REASONS.items() if reads.reasons & bit), energy_j=joules,
            energy_source=self.source if joules is not None else "",
        )  # fmt: skip

    def energy_over(self, call: Callable[[], Any], sync: Callable[[Any], None], per_call_s: float) -> tuple[float, int] | None:
        """The energy of back-to-back calls of `call` lasting at least ENERGY_WINDOW_S (as many calls as that takes at
        `per_call_s`), the counter read at the window's ends only: (joules, calls); None without a counter."""
        calls = max(1, math.ceil(ENERGY_WINDOW_S / per_call_s)) if per_call_s > 0 else 1
        sync(None)
        before = self._read("energy")
        if before is None:
            return None
        for _ in range(calls):
            output = call()
        sync(output)
        after = self._read("energy")
        return ((after - before) / 1000, calls) if after is not None else None

    def steady(self) -> bool:
        """Whether the SM clock has stopped climbing: within CLOCK_TOLERANCE of the clock at the last check, or at the
        card's highest clock. Under its power cap a busy datacenter GPU holds a clock below its highest: that clock,
        reached, is the cell's steady clock (True without a clock to read)."""
        clock = self._read("clock")
        if clock is None:
            return True
        previous, self._checked_mhz = self._checked_mhz, clock
        at_top = self.max_mhz is not None and clock >= (1 - CLOCK_TOLERANCE) * self.max_mhz
        return at_top or (previous is not None and abs(clock - previous) <= CLOCK_TOLERANCE * previous)

    def describe(self) -> dict[str, Any]:
        nvml, handle = self.nvml, self.handle

        def text(value: Any) -> str | None:
            return value.decode() if isinstance(value, bytes) else None if value is None else str(value)

        whole = self.card or handle
        limit, memory = _maybe(nvml.nvmlDeviceGetEnforcedPowerLimit, whole), _maybe(nvml.nvmlDeviceGetMemoryInfo, handle)
        gpu = {
            "name": text(_maybe(nvml.nvmlDeviceGetName, handle)), "driver": text(_maybe(nvml.nvmlSystemGetDriverVersion)),
            "uuid": text(_maybe(nvml.nvmlDeviceGetUUID, handle)),
            "sustained_sm_clock_mhz": self.max_mhz, "max_sm_clock_mhz": _maybe(nvml.nvmlDeviceGetMaxClockInfo, whole, NVML_CLOCK_SM),
            "power_limit_w": limit / 1000 if limit is not None else None, "memory_total_bytes": int(memory.total) if memory is not None else None,
        }  # fmt: skip
        if self.card is not None:
            gpu["mig_of"] = text(_maybe(nvml.nvmlDeviceGetName, self.card))  # clock, power, heat and energy are this card's
        if self.missing:
            gpu["not_read"] = {NVML_FIELDS[name]: why for name, why in self.missing.items()}
        energy = {"source": self.source, "method": ENERGY_SOURCES[self.source]} if "energy" in self._readers else {
            "source": None, "reason": f"{NO_COUNTER}: this GPU has no NVML energy counter ({self.missing.get('energy', 'not read')})"
        }  # fmt: skip
        return {"gpu": gpu, "energy": energy}


# What each NVML field fills (a row's column), in environment.json's words where NVML does not answer it.
NVML_FIELDS: dict[str, str] = {
    "clock": "gpu_clock_mhz (nvmlDeviceGetClockInfo)", "power": "gpu_power_w (nvmlDeviceGetPowerUsage)",
    "temperature": "gpu_temperature_c (nvmlDeviceGetTemperature)", "memory": "gpu_memory_bytes (nvmlDeviceGetMemoryInfo)",
    "clock_events": "gpu_throttle (nvmlDeviceGetCurrentClocksEventReasons)", "energy": "energy_j (nvmlDeviceGetTotalEnergyConsumption)",
}  # fmt: skip


def _readers(nvml: Any, handle: Any, card: Any | None = None) -> dict[str, Callable[[], Any]]:
    """One read of each field NVML is asked for, in the row's units: the memory of `handle`, the rest of its whole
    `card` where it is a MIG instance."""
    whole = card or handle

    def clock_events() -> int:
        read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(read(whole))

    return {
        "clock": lambda: float(nvml.nvmlDeviceGetClockInfo(whole, NVML_CLOCK_SM)),
        "power": lambda: nvml.nvmlDeviceGetPowerUsage(whole) / 1000,
        "temperature": lambda: float(nvml.nvmlDeviceGetTemperature(whole, NVML_TEMPERATURE_GPU)),
        "memory": lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).used),
        "clock_events": clock_events,
        "energy": lambda: int(nvml.nvmlDeviceGetTotalEnergyConsumption(whole)),
    }


def _maybe(read: Any, *args: Any) -> Any:
    """NVML's answer, or None where the GPU does not support the query."""
    try:
        return read(*args)
    except Exception:  # NVMLError_NotSupported and kin  # noqa: BLE001
        return None


def _sustained_clock(nvml: Any, handle: Any) -> float | None:
    """The SM clock the GPU holds under load: its applications clock, else its highest SM clock."""
    for read in (nvml.nvmlDeviceGetApplicationsClock, nvml.nvmlDeviceGetMaxClockInfo):
        if (value := _maybe(read, handle, NVML_CLOCK_SM)) is not None:
            return float(value)
    return None


def cuda_uuid(device: str) -> str | None:
    """The UUID of the GPU CUDA calls `device` (`cuda`, `cuda:N`), as NVML names it (`GPU-...`, `MIG-...`): the N-th of
    CUDA_VISIBLE_DEVICES where that names cards by UUID, else PyTorch's, where PyTorch is already in this process (never
    imported here: a TensorFlow kernel keeps to TensorFlow), else None."""
    index = int(device.partition(":")[2] or 0)
    visible = [part.strip() for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if part.strip()]
    if index < len(visible) and visible[index].startswith(("GPU-", "MIG-")):
        return visible[index]
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and index < torch.cuda.device_count():
            return str(torch.cuda.get_device_properties(index).uuid)
    except Exception:  # a CUDA that cannot say: the index then  # noqa: BLE001
        return None
    return None


def nvml_handles(nvml: Any, device: str) -> tuple[Any, Any | None]:
    """NVML's handle of the GPU CUDA calls `device`, found by its UUID (CUDA orders cards fastest first, NVML by PCI
    bus: an index may name another card), else by index (`nvml_index`); and on a MIG instance, its whole card's handle
    (an instance has no clock, power or energy counter of its own), else None."""
    uuid = cuda_uuid(device)
    if uuid is None:
        handle = nvml.nvmlDeviceGetHandleByIndex(nvml_index(device))
    else:
        candidates = [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}"]  # PyTorch's has no prefix
        handle = next((found for name in candidates if (found := _maybe(nvml.nvmlDeviceGetHandleByUUID, name)) is not None), None)
        if handle is None:
            raise RuntimeError(f"NVML finds no GPU with the UUID {uuid} that CUDA gives {device}")
    if _maybe(nvml.nvmlDeviceIsMigDeviceHandle, handle):
        return handle, nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
    return handle, None


def nvml_index(device: str) -> int:
    """NVML's index of the GPU PyTorch calls `device` (`cuda`, `cuda:N`): the N-th of CUDA_VISIBLE_DEVICES where that lists
    indices, else N."""
    index = int(device.partition(":")[2] or 0)
    visible = [part.strip() for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if part.strip()]
    return int(visible[index]) if index < len(visible) and visible[index].isdigit() else index


def make_monitor(device: str, powercap: Path = POWERCAP) -> DeviceMonitor:
    """The monitor of `device`: NVML's on a GPU (the base, reading nothing, where NVML cannot be had), RAPL's on a CPU
    where its counters can be read, else the base."""
    if device.startswith("cuda"):
        try:
            import pynvml

            pynvml.nvmlInit()
            return NvmlMonitor(pynvml, *nvml_handles(pynvml, device))
        except Exception as exc:  # no binding, no driver, no such GPU: nothing to read  # noqa: BLE001
            return DeviceMonitor(f"{NO_COUNTER}: NVML cannot be read ({type(exc).__name__}: {exc}); the GPU's clocks are not known either")
    zones = rapl_zones(powercap)
    return RaplMonitor(zones) if zones else DeviceMonitor(energy_counter_reason(powercap))
