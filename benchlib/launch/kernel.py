"""A kernel seen from outside: its process's memory while a cell is in flight, and what its end means
for that cell (`crashed`, or `oom` at the job's memory limit)."""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from benchlib import status
from benchlib.launch.polling import Poller
from benchlib.measure.memory_limit import GIB, NEAR_LIMIT, process_memory
from benchlib.store.recovery import in_flight_path


@dataclass(frozen=True)
class KernelEnd:
    """How a kernel stopped while a cell was in flight, as seen from outside it."""

    error: str  # what papermill reported
    signal: str | None = None  # the signal that ended the kernel's process ("SIGSEGV"), if one did
    peak_memory: tuple[int, int] | None = None  # the highest (data, resident) bytes sampled during the cell


def crash_verdict(end: KernelEnd, memory_limit_gb: float | None, runtime: str | None = None) -> tuple[str, str]:
    """The status and reason of the cell in flight when its kernel stopped.

    `oom` when memory_limit_gb is set and either the kernel's data memory (VmData, which the limit
    bounds) reached NEAR_LIMIT of the limit during the cell, or papermill's error names MemoryError:
    a failed allocation that the framework did not survive or could not report. Otherwise `crashed`:
    a kernel ended by a signal says which (`kernel died (SIGFPE: Floating point exception)`) and the
    runtime that was measuring (`runtime`, "openvino 2026.4.0"); without a signal, papermill's error.
    """
    data, resident = end.peak_memory or (0, 0)
    if memory_limit_gb is None or not (data >= NEAR_LIMIT * memory_limit_gb * GIB or "MemoryError" in end.error):
        if end.signal is None:
            return status.CRASHED, end.error
        return status.CRASHED, f"kernel died ({describe_signal(end.signal)})" + (f" while measuring with {runtime}" if runtime else "")
    how = f"kernel died ({end.signal})" if end.signal else end.error
    if end.peak_memory is None:
        return status.OOM, f"{how} while measuring; memory_limit_gb {memory_limit_gb:g} GiB"
    return status.OOM, f"{how} while measuring; data memory reached {data / GIB:.2f} GiB of memory_limit_gb {memory_limit_gb:g} GiB (resident {resident / GIB:.2f} GiB)"


def describe_signal(name: str) -> str:
    """"SIGFPE: Floating point exception": a signal's name and what the C library calls it (the name alone if unknown)."""
    try:
        meaning = signal.strsignal(signal.Signals[name])
    except KeyError:
        return name
    return f"{name}: {meaning}" if meaning else name


class KernelWatch:
    """The kernel process of one notebook execution, watched from outside: how it ended, and its memory.

    A thread reads the process's data and resident memory (/proc/<pid>/status) a few times a
    second and keeps the highest of each since the cell now in flight (`in_flight.json`) began;
    nothing runs inside the kernel. Where /proc is missing, no memory is seen.
    """

    def __init__(self, output_dir: Path, interval_s: float = 0.2) -> None:
        self.process: subprocess.Popen[bytes] | None = None  # set by the kernel manager once it starts
        self.peak_memory: tuple[int, int] | None = None
        self._marker = in_flight_path(output_dir)
        self._cell: tuple[int, int] | None = None
        self._poller = Poller(self._sample, interval_s, final=False)

    def _sample(self) -> None:
        try:
            marker = self._marker.stat()
            cell = (marker.st_ino, marker.st_mtime_ns)
        except OSError:
            cell = None
        if cell != self._cell:  # another cell, or none, is in flight: its peak starts afresh
            self._cell, self.peak_memory = cell, None
        process = self.process
        if cell is None or process is None or process.returncode is not None:
            return
        if memory := process_memory(process.pid):
            peak = self.peak_memory or (0, 0)
            self.peak_memory = (max(peak[0], memory[0]), max(peak[1], memory[1]))

    def end(self, error: str) -> KernelEnd:
        """How the kernel stopped: papermill's `error`, the signal that ended its process (if one did), its peak memory."""
        code = self.process.poll() if self.process else None
        if code is None or code >= 0:
            return KernelEnd(error, None, self.peak_memory)
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return KernelEnd(error, name, self.peak_memory)

    def __enter__(self) -> KernelWatch:
        self._poller.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._poller.__exit__(*exc)
