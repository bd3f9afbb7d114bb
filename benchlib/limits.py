"""A host memory limit for the measuring process."""

from __future__ import annotations

import resource

GIB = 2**30


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
