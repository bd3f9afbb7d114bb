"""The fixed set of statuses a cell of the grid ends with, and out-of-memory recognition."""

from __future__ import annotations

OK = "ok"
TOO_LONG = "too_long"
OOM = "oom"
UNSUPPORTED = "unsupported"
ERROR = "error"
CRASHED = "crashed"

STATUSES: tuple[str, ...] = (OK, TOO_LONG, OOM, UNSUPPORTED, ERROR, CRASHED)

# Exception class names (checked along the class hierarchy) that mean "out of memory",
# so that neither framework has to be imported to recognise the other's errors.
_OOM_CLASS_NAMES = {
    "OutOfMemoryError",  # torch.cuda.OutOfMemoryError (and torch.OutOfMemoryError)
    "ResourceExhaustedError",  # tf.errors.ResourceExhaustedError (CPU and GPU)
}
# Messages of plain RuntimeErrors raised by allocators.
_OOM_MESSAGES = (
    "can't allocate memory",  # PyTorch's CPU allocator (DefaultCPUAllocator)
    "CUDA out of memory",
    "out of memory",
    "OOM when allocating",
)


def is_out_of_memory(exc: BaseException) -> bool:
    """True when `exc` is an out-of-memory failure from PyTorch, TensorFlow or Python."""
    if isinstance(exc, MemoryError):
        return True
    if any(cls.__name__ in _OOM_CLASS_NAMES for cls in type(exc).__mro__):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _OOM_MESSAGES)


def describe(exc: BaseException) -> str:
    """A one-line description of an exception for the `reason` column."""
    message = " ".join(str(exc).split())
    if len(message) > 500:
        message = message[:497] + "..."
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
