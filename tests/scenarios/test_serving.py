"""The serving loop's batching (`scenarios.serving`): requests of one length batched up to max_batch, in arrival order, run at
a few batch sizes; a worker's failure still completes every request, then is raised."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from benchlib.scenarios.serving import Request, ServingLoop, batch_buckets, batch_ids, bucket_of


def test_batches_run_at_powers_of_two_and_max_batch() -> None:
    assert batch_buckets(1) == (1,) and batch_buckets(8) == (1, 2, 4, 8) and batch_buckets(6) == (1, 2, 4, 6)
    assert [bucket_of(n, 6) for n in range(1, 7)] == [1, 2, 4, 4, 6, 6]
    batch = [Request(1, np.array([5, 6, 7])), Request(2, np.array([8, 9, 10])), Request(3, np.array([1, 2, 3]))]
    assert batch_ids(batch, 8).tolist() == [[5, 6, 7], [8, 9, 10], [1, 2, 3], [5, 6, 7]]  # the spare row: the first request again


def serve(requests: list[Request], max_batch: int, timeout_s: float, streams: int = 1, fail_on: int | None = None):
    """Run `requests` (submitted at once) through a loop of `streams` workers whose call records each batch's ids;
    returns the batches (request ids) completed and the shapes run."""
    done, shapes, lock = [], [], threading.Lock()

    def call(ids: np.ndarray, first_token: object) -> np.ndarray:
        with lock:
            shapes.append(ids.shape)
        if fail_on is not None and fail_on in ids:
            raise RuntimeError("the backend failed")
        return ids * 2

    def complete(batch: list[Request], output: np.ndarray | None) -> None:
        with lock:
            done.append(([request.id for request in batch], output))

    with ServingLoop([call] * streams, max_batch, timeout_s, complete) as loop:
        loop.submit(requests)
    return done, shapes


def test_requests_of_one_length_are_batched_in_arrival_order_and_lengths_never_mix() -> None:
    lengths = [8, 8, 16, 8, 16, 8, 8]
    requests = [Request(i, np.full(length, i)) for i, length in enumerate(lengths)]
    done, shapes = serve(requests, max_batch=4, timeout_s=0.0)
    assert [ids for ids, _ in done] == [[0, 1, 3, 5], [2, 4], [6]]  # the oldest first, then those of its length
    assert shapes == [(4, 8), (2, 16), (1, 8)]
    first, output = done[0]
    assert (output[: len(first)] == 2 * np.stack([np.full(8, i) for i in first])).all()  # row i is request i's output


def test_a_batch_waits_up_to_its_timeout_for_more_requests_of_its_length() -> None:
    done, lock = [], threading.Lock()

    def complete(batch: list[Request], output: object) -> None:
        with lock:
            done.append([request.id for request in batch])

    with ServingLoop([lambda ids, first_token: ids], 4, 2.0, complete) as loop:
        loop.submit([Request(0, np.zeros(8, dtype=np.int64))])
        loop.submit([Request(1, np.zeros(8, dtype=np.int64)), Request(2, np.zeros(8, dtype=np.int64)), Request(3, np.zeros(8, dtype=np.int64))])
    assert done == [[0, 1, 2, 3]]  # a full batch ends the wait before its timeout


def test_a_failure_completes_every_request_and_is_raised_afterwards() -> None:
    requests = [Request(i, np.full(8, i)) for i in range(10)]
    with pytest.raises(RuntimeError, match="the backend failed"):
        serve(requests, max_batch=2, timeout_s=0.0, streams=2, fail_on=4)


def test_every_request_is_completed_once_by_several_streams() -> None:
    requests = [Request(i, np.full(4 + i % 3, i)) for i in range(200)]
    done, _ = serve(requests, max_batch=8, timeout_s=0.001, streams=3)
    completed = [request for ids, _ in done for request in ids]
    assert sorted(completed) == list(range(200))


def test_a_calls_first_token_is_reported_for_its_whole_batch_before_the_batch_completes() -> None:
    """A call that generates reports its first token from inside the call: the loop hands it on with the batch."""
    events, lock = [], threading.Lock()

    def call(ids: np.ndarray, first_token) -> np.ndarray:
        first_token()
        return ids

    def record(what: str):
        def event(batch: list[Request], *output: object) -> None:
            with lock:
                events.append((what, [request.id for request in batch]))

        return event

    with ServingLoop([call], 2, 0.0, record("complete"), record("first token")) as loop:
        loop.submit([Request(i, np.full(8, i)) for i in range(4)])
    assert events == [("first token", [0, 1]), ("complete", [0, 1]), ("first token", [2, 3]), ("complete", [2, 3])]
