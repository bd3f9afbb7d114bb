"""The kit's side of a load scenario: requests queued as they arrive, batched dynamically and run by `streams` workers.

A worker takes the oldest request waiting and, up to `max_batch`, the requests of the same length that are waiting or
arrive within `batch_timeout_s` (as Triton's dynamic batcher does with fixed shapes): requests of one length batch
without padding, so a request's output does not depend on its batch. The batch is run at the smallest batch size of
`batch_buckets(max_batch)` that holds it, the spare rows copies of its first request (rows are independent), so that a
backend that traces or compiles per shape sees a few shapes only. Each worker has its own call (a session's run, an
infer request, a model call: `Backend.server_call`; a generator's call when generating), called as `call(ids, first_token)`:
a call that generates calls `first_token()` when the batch's first token is made, which the loop hands to
`first_token(batch)` where one is given. The worker calls `complete(batch, output)` when its batch is done.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Request:
    """One sample to serve: LoadGen's response id and its token ids (one row)."""

    id: int
    ids: np.ndarray
    order: int = field(default=0, compare=False)  # arrival order, set by the loop
    arrived: float = field(default=0.0, compare=False)  # when the loop queued it (perf_counter), set by the loop


@dataclass(frozen=True)
class ServingStats:
    """What a serving loop did over a test: the batches run and samples served, the batch sizes, how long a batch's
    oldest request waited in the queue before its batch started, and how long the calls took (seconds): what a server's
    latency tail is made of, the queue's part apart from the model's."""

    batches: int = 0
    samples: int = 0
    batch_mean: float | None = None
    queue_wait_p50_s: float | None = None
    queue_wait_p99_s: float | None = None
    call_p50_s: float | None = None
    call_p99_s: float | None = None

    @classmethod
    def of(cls, sizes: Sequence[int], waits: Sequence[float], calls: Sequence[float]) -> ServingStats:
        """The statistics of the batches' `sizes`, oldest requests' `waits` and `calls` (one of each per batch)."""
        if not sizes:
            return cls()
        percentile = lambda values, q: float(np.percentile(values, q))  # noqa: E731
        return cls(
            len(sizes), int(sum(sizes)), float(np.mean(sizes)), percentile(waits, 50), percentile(waits, 99), percentile(calls, 50),
            percentile(calls, 99),
        )  # fmt: skip

    def row_fields(self) -> dict[str, float | str]:
        """The row's serving columns (blank where no batch was run)."""
        names = ("batch_mean", "queue_wait_p50_s", "queue_wait_p99_s", "call_p50_s", "call_p99_s")
        return {f"served_{name}": "" if (value := getattr(self, name)) is None else value for name in names}


def batch_buckets(max_batch: int) -> tuple[int, ...]:
    """The batch sizes a batch is run at: the powers of two below `max_batch`, and `max_batch`."""
    return (*(1 << k for k in range(max_batch.bit_length()) if 1 << k < max_batch), max_batch)


def bucket_of(size: int, max_batch: int) -> int:
    """The smallest of `batch_buckets(max_batch)` that holds `size` requests."""
    return next(bucket for bucket in batch_buckets(max_batch) if bucket >= size)


def batch_ids(batch: Sequence[Request], max_batch: int) -> np.ndarray:
    """The (bucket, length) ids of `batch`: its requests' rows, then copies of the first up to its bucket."""
    rows = [request.ids for request in batch]
    rows += [rows[0]] * (bucket_of(len(rows), max_batch) - len(rows))
    return np.stack(rows)


# A stream's call: a batch's ids (bucket, length) and what to call when its first token is made; returns the output.
StreamCall = Callable[[np.ndarray, Callable[[], None]], Any]


def _no_first_token(batch: list[Request]) -> None:
    """A forward pass makes no tokens."""


class ServingLoop:
    """A queue of requests served by one worker thread per call in `calls` (see the module's docstring)."""

    def __init__(
        self, calls: Sequence[StreamCall], max_batch: int, batch_timeout_s: float, complete: Callable[[list[Request], Any], None],
        first_token: Callable[[list[Request]], None] = _no_first_token,
    ) -> None:  # fmt: skip
        if max_batch < 1 or batch_timeout_s < 0 or not calls:
            raise ValueError("a serving loop needs a call, max_batch of 1 or more and a batch timeout of 0 or more")
        self.max_batch, self.batch_timeout_s, self._complete, self._first_token = max_batch, batch_timeout_s, complete, first_token
        self._waiting: dict[int, deque[Request]] = {}  # by length, each in arrival order
        self._arrivals = count()
        self._changed = threading.Condition()
        self._closed = False
        self._served: list[tuple[int, float, float]] = []  # per batch run: its size, its oldest request's wait, its call's time
        self.failure: BaseException | None = None  # the first exception a worker met; later batches are not run
        self._workers = [threading.Thread(target=self._serve, args=(call,), name=f"stream-{i}", daemon=True) for i, call in enumerate(calls)]
        for worker in self._workers:
            worker.start()

    def submit(self, requests: Iterable[Request]) -> None:
        """Queue `requests`; they are served in arrival order, batched by length."""
        with self._changed:
            now = time.perf_counter()
            for request in requests:
                queued = Request(request.id, request.ids, next(self._arrivals), now)
                self._waiting.setdefault(len(queued.ids), deque()).append(queued)
            self._changed.notify_all()

    def close(self) -> None:
        """Stop the workers once the queue is empty; raise what a worker failed with, if one did."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        for worker in self._workers:
            worker.join()
        if self.failure is not None:
            raise self.failure

    def __enter__(self) -> ServingLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self) -> list[Request] | None:
        """The next batch (None once closed and empty): the oldest request and those of its length, as described above."""
        with self._changed:
            while not any(self._waiting.values()):
                if self._closed:
                    return None
                self._changed.wait()
            length = min((queue[0].order, length) for length, queue in self._waiting.items() if queue)[1]
            queue = self._waiting[length]
            batch = [queue.popleft()]
            deadline = time.perf_counter() + self.batch_timeout_s
            while len(batch) < self.max_batch:
                if queue:
                    batch.append(queue.popleft())
                    continue
                left = deadline - time.perf_counter()
                if left <= 0 or self._closed:
                    break
                self._changed.wait(left)
            return batch

    def _serve(self, call: StreamCall) -> None:
        """Run batches until closed. After a failure, batches are completed without being run (output None), so that
        whoever waits for every request (LoadGen) is not left waiting; `close` raises the failure."""
        while (batch := self._take()) is not None:
            output = None
            if self.failure is None:
                try:
                    start = time.perf_counter()
                    output = call(batch_ids(batch, self.max_batch), lambda batch=batch: self._first_token(batch))
                    self._served.append((len(batch), start - batch[0].arrived, time.perf_counter() - start))  # list.append: atomic
                except BaseException as exc:  # noqa: BLE001  # raised by `close`, in the caller's thread
                    self.failure = self.failure or exc
            self._complete(batch, output)

    def stats(self) -> ServingStats:
        """What the loop served so far (`ServingStats`)."""
        served = list(self._served)
        return ServingStats.of([size for size, _, _ in served], [wait for _, wait, _ in served], [took for _, _, took in served])
