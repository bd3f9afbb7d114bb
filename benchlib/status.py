"""The fixed set of statuses a cell of the grid ends with, and how a failure is described in a row."""

from __future__ import annotations

OK = "ok"
TOO_LONG = "too_long"
OOM = "oom"
UNSUPPORTED = "unsupported"
ERROR = "error"
CRASHED = "crashed"

STATUSES: tuple[str, ...] = (OK, TOO_LONG, OOM, UNSUPPORTED, ERROR, CRASHED)


class Unsupported(Exception):
    """Raised by a backend for a model or setting it cannot run: the cell is `unsupported`, with this reason."""


def describe(exc: BaseException) -> str:
    """A one-line description of an exception for the `reason` column."""
    message = " ".join(str(exc).split())
    if len(message) > 500:
        message = message[:497] + "..."
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
