"""A host memory limit for the measuring process, and its memory as seen from another process."""

from __future__ import annotations

import os
import re
import resource
from pathlib import Path

GIB = 2**30
NEAR_LIMIT = 0.9  # memory this close to memory_limit_gb, when a cell fails or its kernel dies, means it ran out


def apply_memory_limit(limit_gb: float | None) -> int | None:
    """Bound this process's data memory (RLIMIT_DATA) to `limit_gb` GiB; return the limit in bytes.

    Allocations past the limit fail inside the process (PyTorch's "can't allocate memory",
    TensorFlow's ResourceExhaustedError), so an oversized cell ends as `oom` instead of
    taking the machine down, and a CPU run can reproduce a smaller device's boundary.
    The limit stays for the rest of the process (a kernel): restart it to lift the limit.
    """
    if limit_gb is None:
        return None
    limit = int(limit_gb * GIB)
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    return limit


def at_memory_limit(limit_gb: float | None, peak_resident: int | None = None) -> str | None:
    """Why this process counts as out of memory under `limit_gb`, or None: its data memory (VmData) now,
    or the failed cell's peak resident memory, has reached NEAR_LIMIT of the limit."""
    if limit_gb is None:
        return None
    data = (process_memory(os.getpid()) or (0, 0))[0]
    if max(data, peak_resident or 0) < NEAR_LIMIT * limit_gb * GIB:
        return None
    return f"at the memory limit: data memory {data / GIB:.2f} GiB, the cell's peak resident {(peak_resident or 0) / GIB:.2f} GiB, memory_limit_gb {limit_gb:g} GiB"


def process_memory(pid: int) -> tuple[int, int] | None:
    """(data, resident) memory of process `pid` in bytes: VmData, which RLIMIT_DATA bounds, and VmRSS.

    Read from /proc/<pid>/status; None where that cannot be read (not Linux, the process has ended).
    """
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = dict(re.findall(r"^(VmData|VmRSS):\s+(\d+) kB", text, re.MULTILINE))
    if len(found) < 2:  # a process that has ended but is not yet reaped has no memory lines
        return None
    return int(found["VmData"]) * 1024, int(found["VmRSS"]) * 1024
