"""The fixed set of statuses a cell of the grid ends with, and out-of-memory recognition."""

from __future__ import annotations

from collections.abc import Iterable

OK = "ok"
TOO_LONG = "too_long"
OOM = "oom"
UNSUPPORTED = "unsupported"
ERROR = "error"
CRASHED = "crashed"

STATUSES: tuple[str, ...] = (OK, TOO_LONG, OOM, UNSUPPORTED, ERROR, CRASHED)


class Unsupported(Exception):
    """Raised by a backend for a model or setting it cannot run: the cell is `unsupported`, with this reason."""


def is_out_of_memory(exc: BaseException, class_names: Iterable[str] = (), messages: Iterable[str] = ()) -> bool:
    """True when `exc` is a MemoryError, an exception whose class (along its hierarchy) is named in
    `class_names`, or a RuntimeError whose message contains one of `messages` or "out of memory".

    The names and messages come from the backends' registry (`backends.out_of_memory`), so that
    no framework has to be imported to recognise its errors.
    """
    if isinstance(exc, MemoryError):
        return True
    names = set(class_names)
    if any(cls.__name__ in names for cls in type(exc).__mro__):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in (*messages, "out of memory"))


def describe(exc: BaseException) -> str:
    """A one-line description of an exception for the `reason` column."""
    message = " ".join(str(exc).split())
    if len(message) > 500:
        message = message[:497] + "..."
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
