"""Peak memory of one cell: the framework's own counters over the timed calls on a GPU, the process's peak resident set
over the cell on the CPU.

CPU, on Linux: the kernel keeps the process's peak resident set size (VmHWM in /proc/self/status)
and resets it to the current size when "5" is written to /proc/self/clear_refs (Linux 4.0 and later).
The kit resets it before the cell and reads it after: exact, and nothing runs while calls are timed.
Before the reset, memory freed by earlier cells is handed back to the system (`gc.collect`, glibc's
`malloc_trim`), so that a cell's peak starts from what is still in use.
Elsewhere: a background thread samples the resident size (psutil) every 5 ms; it can miss a peak
shorter than that and briefly takes the interpreter lock while calls are timed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import psutil

CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")
METHODS: tuple[str, ...] = ("clear_refs", "sampling")


def _libc() -> Any:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


_LIBC = _libc()


def release_free_memory() -> None:
    """Collect garbage and return the allocator's free memory to the system (glibc)."""
    gc.collect()
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)


@contextmanager
def imports_frozen() -> Iterator[None]:
    """Inside, `gc.collect` leaves alone every object that exists on entry (`gc.freeze`): the frameworks'
    modules, millions of objects that a collection before each cell would otherwise walk again
    (0.2 s a collection with PyTorch and transformers imported). Garbage made inside is collected as before."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Inside, the cyclic garbage collector does not run (it runs again on exit, as it was on entry): importing PyTorch or
    TensorFlow and transformers makes millions of objects, hardly any of them garbage, and the collections that so many
    allocations set off are a sixth of the import's time (benchmarks/import_collector.py). Reference counting frees
    what it frees anyway."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def peak_rss_bytes() -> int:
    """The process's peak resident set size since start or the last reset (Linux VmHWM)."""
    match = re.search(r"^VmHWM:\s+(\d+) kB", STATUS.read_text(), re.MULTILINE)
    if not match:
        raise OSError("VmHWM not found in /proc/self/status")
    return int(match.group(1)) * 1024


@cache
def clear_refs_available() -> bool:
    """Whether this system can reset the process's peak resident set size (Linux)."""
    try:
        with open(CLEAR_REFS, "w") as handle:
            handle.write("5")
        peak_rss_bytes()
    except OSError:
        return False
    return True


class PeakRSS:
    """Context manager: the process's peak resident set size while inside (`.bytes` after exit)."""

    def __init__(self, method: str | None = None, interval_s: float = 0.005) -> None:
        if method is not None and method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
        self.method = method or ("clear_refs" if clear_refs_available() else "sampling")
        self.interval_s = interval_s
        self.bytes: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="benchlib-peak-rss", daemon=True)
        self._process = psutil.Process()

    def __enter__(self) -> PeakRSS:
        release_free_memory()
        if self.method == "clear_refs":
            CLEAR_REFS.write_text("5")
        else:
            self.bytes = self._process.memory_info().rss
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.bytes = max(self.bytes or 0, self._process.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        if self.method == "clear_refs":
            self.bytes = peak_rss_bytes()
        else:
            self._stop.set()
            self._thread.join()
            self.bytes = max(self.bytes or 0, self._process.memory_info().rss)


class CellPeakMemory:
    """Context manager: a cell's peak memory (`.bytes` after exit).

    On a GPU the backend's own counters over the timed calls alone: reset when the samples begin (`begin`) and read when
    they end (`end`), so that preparation, autotuning's workspaces and a float32 reference on the same GPU are left out
    (over the whole cell where it ended before its samples); blank where the backend has no counter (ONNX Runtime). On
    the CPU the process's peak resident set over the cell.
    """

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.on_cpu = backend.device == "cpu"
        self.bytes: int | None = None
        self._rss = PeakRSS() if self.on_cpu else None
        self._samples: int | None = None  # a GPU's peak over the samples

    def begin(self) -> None:
        """The samples begin: a GPU's counter restarts (nothing on the CPU)."""
        if self._rss is None:
            self.backend.reset_peak_memory()

    def end(self) -> None:
        """The samples have ended: a GPU's counter is read (nothing on the CPU)."""
        if self._rss is None:
            self._samples = self.backend.peak_memory_bytes()

    def __enter__(self) -> CellPeakMemory:
        if self._rss is not None:
            self._rss.__enter__()
        else:
            self.backend.reset_peak_memory()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._rss is not None:
            self._rss.__exit__(*exc)
            self.bytes = self._rss.bytes
        else:
            self.bytes = self._samples if self._samples is not None else self.backend.peak_memory_bytes()
