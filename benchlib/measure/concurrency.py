"""A serving engine's concurrency sweep (scenario `concurrency`): 1, 2, 4, ... requests in flight (up to `streams`), each
level a closed loop (every request sent as one ends) for `min_duration_s`, with tokens per second against the time to
first token and per output token, as vLLM's and GuideLLM's sweeps give them. The sweep stops where tokens per second
stop rising (less than KNEE_GAIN over the level before) or a bound breaks at `latency_percentile`; the knee is the last
level that still gained and met the bounds. Each level is a trial row; the scenario's row holds the knee's figures."""

from __future__ import annotations

import itertools
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from benchlib import status
from benchlib.measure.load import goodput

if TYPE_CHECKING:
    from benchlib.measure.load import Columns, EmitTrial, ScenarioRun

KNEE_GAIN = 0.1  # a level that adds less than this share of tokens per second to the level before is past the knee


def levels(most: int) -> list[int]:
    """The requests in flight tried: powers of two up to `most`, and `most`."""
    return sorted({*(1 << k for k in range(most.bit_length()) if 1 << k <= most), most})


def run_level(run: ScenarioRun, in_flight: int) -> tuple[float, list[tuple[float, float | None]]]:
    """`in_flight` closed loops over the run's samples for `min_duration_s`: (tokens per second, each request's (TTFT, TPOT))."""
    requests = run.backend.requests  # type: ignore[attr-defined]  # a serving engine's client keeps each request's times
    requests.clear()
    samples = itertools.cycle(run.samples)
    lock = threading.Lock()
    call = run.calls[0]
    failures: list[BaseException] = []
    end = time.perf_counter() + run.params.min_duration_s

    def loop() -> None:
        try:
            while time.perf_counter() < end:
                with lock:
                    ids = next(samples)
                call(ids[None, :])
        except BaseException as exc:  # noqa: BLE001  # raised below, in the caller's thread
            failures.append(exc)

    start = time.perf_counter()
    threads = [threading.Thread(target=loop, name=f"in-flight-{i}") for i in range(in_flight)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    elapsed = time.perf_counter() - start
    return len(requests) * run.params.new_tokens / elapsed, list(requests)


def level_columns(run: ScenarioRun, in_flight: int, tokens_per_s: float, requests: list[tuple[float, float | None]]) -> Columns:
    """A level's row: tokens per second, TTFT and TPOT percentiles, goodput, whether the bounds held at the percentile, and
    the rate's share of the client's own ceiling."""
    p = run.params
    ttft = np.array([ttft for ttft, _ in requests])
    tpot = np.array([tpot for _, tpot in requests if tpot is not None])
    judged = p.latency_percentile or 90
    met = (p.ttft_bound_ms is None or np.percentile(ttft, judged) <= p.ttft_bound_ms / 1000) and (
        p.tpot_bound_ms is None or not tpot.size or np.percentile(tpot, judged) <= p.tpot_bound_ms / 1000
    )
    tpot_at = lambda q: float(np.percentile(tpot, q)) if tpot.size else ""  # noqa: E731
    return {
        "concurrency": in_flight, "tokens_per_s": tokens_per_s, "samples_per_s": tokens_per_s / p.new_tokens, "valid": bool(met),
        "ttft_s": float(np.median(ttft)), "ttft_p99_s": float(np.percentile(ttft, 99)), "tpot_s": tpot_at(50), "tpot_p90_s": tpot_at(90),
        "tpot_p99_s": tpot_at(99), "goodput": goodput(requests, p.ttft_bound_ms, p.tpot_bound_ms), "latency_percentile": judged,
        "client_share": tokens_per_s / p.new_tokens / ceiling if (ceiling := (getattr(run.backend, "ceiling", None) or {}).get("requests_per_s")) else "",
    }  # fmt: skip


def measure_concurrency(run: ScenarioRun, attempt: int, emit_trial: EmitTrial, first_trial: int = 1) -> tuple[str, str, Columns, None]:
    """The sweep (see the module's docstring): each level emitted as a trial row; (status, reason, the knee's columns, None)."""
    if not hasattr(run.backend, "requests"):
        raise status.Unsupported("the concurrency sweep sends requests to a serving engine (framework openai)")
    numbers = itertools.count(first_trial)
    knee: Columns | None = None
    why = f"every level up to {run.params.streams} requests in flight still gained: the knee may lie beyond (streams)"
    for in_flight in levels(run.params.streams):
        columns = level_columns(run, in_flight, *run_level(run, in_flight))
        emit_trial({**columns, "trial": next(numbers), "target_qps": "", "attempt": attempt, "reason": ""})
        if not columns["valid"]:
            why = f"at {in_flight} requests in flight a bound broke at the {columns['latency_percentile']}th percentile"
            break
        if knee is not None and columns["tokens_per_s"] < (1 + KNEE_GAIN) * knee["tokens_per_s"]:
            why = f"at {in_flight} requests in flight tokens per second rose less than {KNEE_GAIN:.0%}"
            break
        knee = columns
    if knee is None:
        return status.OK, f"{why}: no level met the bounds", {"valid": False, "knee": "", "inputs": run.inputs_kind, **run.agreement}, None
    return status.OK, why, {**knee, "knee": knee["concurrency"], "trial": "", "target_qps": "", "inputs": run.inputs_kind, **run.agreement}, None
