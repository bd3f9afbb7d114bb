"""Stopping `benchlib run` on request: Ctrl-C, SIGTERM and SIGHUP (a closed terminal or SSH session) end it
with a message and exit status 128 + the signal's number.

papermill (nbclient) answers a KeyboardInterrupt in the runner by shutting its kernel down as
jupyter_client does: an interrupt, a shutdown request, SIGTERM after 2.5 s and SIGKILL after 5 s.
SIGTERM and SIGHUP raise `Stopped`, a KeyboardInterrupt, so that they take the same path: asyncio
lets only KeyboardInterrupt and SystemExit out of its event loop at once (another exception could
wait inside a task until the cell in flight ends). Finished rows stay; the cell in flight is measured
again by the next run (`store.recovery.resolve_in_flight`). The cell's task, left pending in nbclient's
event loop by the interrupt, ends later with the kernel's death; asyncio's report of it ("Task exception
was never retrieved", with a traceback) is dropped, since the stop message says what happened.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import ParamSpec

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
P = ParamSpec("P")


class Stopped(KeyboardInterrupt):
    """The run was asked to stop by signal `signum`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    """The handler of SIGTERM and SIGHUP inside `stop_signals_raise`."""
    raise Stopped(signum)


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside, SIGTERM and SIGHUP raise `Stopped` in the main thread; outside, their handlers are as before.

    A signal that is ignored (SIGHUP under `nohup`) stays ignored, and one with a handler of its own
    keeps it; off the main thread (where Python cannot set handlers) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum, handler in previous.items():
        if handler is signal.SIG_DFL:
            signal.signal(signum, _raise_stopped)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _StoppedKernelTasks(logging.Filter):
    """Drops asyncio's report of a task that ended with a dead kernel (nbclient's `DeadKernelError`) never retrieved."""

    def filter(self, record: logging.LogRecord) -> bool:
        from nbclient.exceptions import DeadKernelError

        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, DeadKernelError) and record.getMessage().startswith("Task exception was never retrieved"))


STOPPED_KERNEL_TASKS = _StoppedKernelTasks()


def quiet_stopped_kernel_tasks() -> None:
    """From now on, asyncio does not report the cell tasks of a kernel shut down by a stop (see the module's docstring)."""
    logging.getLogger("asyncio").addFilter(STOPPED_KERNEL_TASKS)  # once: addFilter skips a filter it holds


def stopping_signal(stop: KeyboardInterrupt) -> signal.Signals:
    """The signal that stopped the run: `Stopped`'s, or Ctrl-C's SIGINT for a plain KeyboardInterrupt."""
    return signal.Signals(stop.signum) if isinstance(stop, Stopped) else signal.SIGINT


def stoppable(command: Callable[P, int]) -> Callable[P, int]:
    """`command` (which returns an exit status), stopped by Ctrl-C, SIGTERM or SIGHUP with a message and status 128 + the signal."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            with stop_signals_raise():
                return command(*args, **kwargs)
        except KeyboardInterrupt as stop:  # a local run's kernel was shut down by papermill on the way here
            signum = stopping_signal(stop)
            quiet_stopped_kernel_tasks()
            with contextlib.suppress(OSError):  # the terminal of a closed session is gone
                print(
                    f"stopped by {signum.name}: finished rows are kept; run the same command again (same --out) "
                    "to go on, and the cell that was being measured is measured again",
                    file=sys.stderr, flush=True,
                )  # fmt: skip
            return 128 + signum

    return run
