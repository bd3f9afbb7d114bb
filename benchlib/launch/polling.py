"""A background thread that calls a function every few tenths of a second while a notebook runs: the one
pattern behind the progress bar, the kernel's memory watch and a cluster worker's tail of its rows."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Poller:
    """Calls `tick()` every `interval_s` seconds in a daemon thread between `__enter__` and `__exit__`;
    `final` says whether `tick()` runs once more after the thread has stopped (to catch the last change)."""

    def __init__(self, tick: Callable[[], Any], interval_s: float, final: bool = True) -> None:
        self._tick, self._interval_s, self._final = tick, interval_s, final
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._tick()

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._final:
            self._tick()
