"""The fixed set of statuses a cell of the grid ends with, and how a failure is described in a row."""

from __future__ import annotations

OK = "ok"
TOO_LONG = "too_long"
OOM = "oom"
UNSUPPORTED = "unsupported"
ERROR = "error"
CRASHED = "crashed"

STATUSES: tuple[str, ...] = (OK, TOO_LONG, OOM, UNSUPPORTED, ERROR, CRASHED)
# What each status means, for the documentation's statuses page (generated from this mapping).
MEANINGS: dict[str, str] = {
    OK: "measured: the row has its times (a load scenario's: LoadGen's figures)",
    TOO_LONG: "the sequence (a prompt and its new tokens) is longer than the model's maximum positions, as in the study; not run",
    OOM: "the device, or the kernel's `memory_limit_gb`, ran out of memory building or running the model at this size; under "
    "`memory_limit_gb`, also a kernel that died with its data memory near the limit, or with a `MemoryError`",
    UNSUPPORTED: "this framework, mode or precision cannot run this model (or its package is not installed); `reason` says why",
    ERROR: "anything else went wrong, `reason` holds the message; also a measured cell whose output differs from eager PyTorch "
    "float32's beyond its precision's tolerance: its times are kept, but no table uses them",
    CRASHED: "the kernel died while measuring this cell, with no sign of running out of memory; `reason` names the signal and the "
    "runtime that was measuring, or what papermill reported where no signal did; also a serving engine that died while serving the "
    "cell, with the last lines of its log",
}


class Unsupported(Exception):
    """Raised by a backend for a model or setting it cannot run: the cell is `unsupported`, with this reason."""


def describe(exc: BaseException) -> str:
    """A one-line description of an exception for the `reason` column."""
    message = " ".join(str(exc).split())
    if len(message) > 500:
        message = message[:497] + "..."
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class Crashed(Exception):
    """Raised where a process the cell was measured through died while measuring it (a serving engine): the cell is
    `crashed`, with this reason."""
