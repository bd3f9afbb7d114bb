"""One LoadGen test (`mlperf_loadgen`, PerformanceOnly) of a load scenario against the kit's serving loop, and LoadGen's
own summary read back: the figures of a scenario's row are the ones LoadGen reports in `mlperf_log_summary.txt`, never
recomputed, so that a reader can check the row against that file (kept, with `mlperf_log_detail.txt`, in the folder
given; the trace is off, and LoadGen's other files are not kept).

LoadGen's settings that the kit sets (every other one is LoadGen's default): the scenario, PerformanceOnly, the minimum
duration and query count, the server's target rate and latency bound, the percentile latency is judged at where one is
given (`latency_percentile`; else LoadGen's, MLPerf's: 90 in SingleStream, 99 in MultiStream and Server), the queries'
samples in MultiStream, and the expected rate or latency that LoadGen sizes its queries by. A result is VALID when
LoadGen says so: the minimum duration and query count are met, early stopping is satisfied (at the 99th percentile that
takes several hundred queries, at the 90th a few dozen) and, for the server, the latency bound holds.

When generating (`LoadSettings.new_tokens`), LoadGen measures token latencies (`use_token_latencies`): each batch's first
token is reported with `FirstTokenComplete` from inside the generation loop and its completion with the number of tokens
made, and LoadGen prints percentiles of the time to first token and of the time per output token (the rest of a
request's latency over its tokens after the first). A server result is then judged by both at the server's percentile
(`ttft_bound_s`, `tpot_bound_s`) and not by the whole request's latency, and the server and Offline are judged by tokens
per second.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchlib.scenarios.serving import Request, ServingLoop, ServingStats, StreamCall
from benchlib.store.layout import LOADGEN_ACCURACY as ACCURACY_FILE
from benchlib.store.layout import LOADGEN_DETAIL as DETAIL_FILE
from benchlib.store.layout import LOADGEN_SUMMARY as SUMMARY_FILE
from benchlib.store.results import MLPERF_PERCENTILE

LOADGEN_DISTRIBUTION = "mlcommons-loadgen"
LOADGEN_SCENARIOS: dict[str, str] = {"single-stream": "SingleStream", "multi-stream": "MultiStream", "server": "Server", "offline": "Offline"}
KEPT_FILES: tuple[str, ...] = (SUMMARY_FILE, DETAIL_FILE)
# The figure the rate scenarios are judged by, as LoadGen's summary names it (the latency scenarios: `result_figure`).
RESULT_FIGURE: dict[str, str] = {"server": "Completed samples per second", "offline": "Samples per second"}
# When generating: the server and Offline are judged by tokens per second (the others as above).
TOKEN_RESULT_FIGURE: dict[str, str] = {"server": "Completed tokens per second", "offline": "Tokens per second"}
PERCENTILES: dict[str, str] = {"p50": "50.00 percentile latency (ns)", "p90": "90.00 percentile latency (ns)", "p99": "99.00 percentile latency (ns)"}
TTFT_PERCENTILES: dict[str, str] = {p: f"{p[1:]}.00 percentile first token latency (ns)" for p in ("p50", "p90", "p99")}
TPOT_PERCENTILES: dict[str, str] = {p: f"{p[1:]}.00 percentile time to output token (ns)" for p in ("p50", "p90", "p99")}
NS = 1e-9


@dataclass(frozen=True)
class LoadSettings:
    """What one LoadGen test is asked for (seconds and samples per second; LoadGen takes nanoseconds and milliseconds)."""

    scenario: str
    min_duration_s: float
    min_query_count: int
    expected_qps: float  # LoadGen sizes Offline's one query and the schedule hints by it
    samples_per_query: int = 1  # MultiStream's samples per query
    target_qps: float | None = None  # Server: the Poisson arrival rate
    latency_bound_s: float | None = None  # Server: the bound at the percentile
    new_tokens: int | None = None  # generating: the tokens each request makes (LoadGen's token latencies on); None: forward
    ttft_bound_s: float | None = None  # Server, generating: the bound on the time to first token at the percentile
    tpot_bound_s: float | None = None  # Server, generating: the bound on the time per output token at the percentile
    latency_percentile: int | None = None  # the percentile latency is judged at; None: MLPERF_PERCENTILE

    @property
    def percentile(self) -> int | None:
        """The percentile this test's latency is judged at (None in Offline)."""
        default = MLPERF_PERCENTILE.get(self.scenario)
        return default if default is None or self.latency_percentile is None else self.latency_percentile


@dataclass(frozen=True)
class LoadReport:
    """LoadGen's summary of one test: its verdict, every `key : value` line it printed, and where its logs are kept."""

    scenario: str
    valid: bool
    figures: dict[str, str]
    folder: Path
    tokens: bool = False  # generating: LoadGen measured token latencies
    percentile: int | None = None  # the percentile latency was judged at (None in Offline)
    advice: tuple[str, ...] = ()  # LoadGen's recommendations, as it prints them
    served: int = 0  # the samples the serving loop completed in the test
    serving: ServingStats | None = None  # what the serving loop did: batch sizes, queue waits, call times
    # a serving engine's: the share of requests that met both token bounds, by the client's own clock (None elsewhere)
    goodput: float | None = None
    client_share: float | None = None  # a serving engine's: the rate served over the kit's client's own ceiling

    @property
    def unmet(self) -> list[str]:
        """The conditions LoadGen marked NO ("Min duration satisfied")."""
        return [key for key, value in self.figures.items() if key.endswith("satisfied") and value == "NO"]

    def figure(self, name: str) -> float | None:
        """The summary's number `name` ("Samples per second"), or None where it does not print it."""
        value = self.figures.get(name)
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None

    @property
    def result_figure(self) -> str:
        """The name of the figure this scenario is judged by: the judged percentile of latency (single-stream, multi-stream),
        RESULT_FIGURE (a rate), TOKEN_RESULT_FIGURE when generating."""
        if self.scenario in ("single-stream", "multi-stream"):
            return f"{self.percentile:.1f}th percentile latency (ns)"
        return (TOKEN_RESULT_FIGURE if self.tokens else {}).get(self.scenario, RESULT_FIGURE[self.scenario])

    def latency_s(self, percentile: str, of: dict[str, str] = PERCENTILES) -> float | None:
        """A percentile ("p99") of `of` in seconds: the latency (per query in MultiStream, per sample otherwise), or the
        time to first token (TTFT_PERCENTILES) or per output token (TPOT_PERCENTILES); None where LoadGen does not print it."""
        value = self.figure(of[percentile])
        return value * NS if value is not None else None


def recommendations(text: str) -> list[str]:
    """The ` * ` lines LoadGen's summary prints right under "Recommendations:" (each without its ` * `)."""
    lines = [line.strip() for line in text.splitlines()]
    if "Recommendations:" not in lines:
        return []
    following = itertools.takewhile(lambda line: line.startswith("*"), lines[lines.index("Recommendations:") + 1 :])
    return [line[1:].strip() for line in following]


def parse_summary(text: str) -> dict[str, str]:
    """The `key : value` lines of a LoadGen summary, the first of each key (early stopping's `*` lines left out)."""
    figures: dict[str, str] = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        key = key.strip()
        if colon and key and not key.startswith("*") and key not in figures:
            figures[key] = value.strip()
    return figures


def test_settings(settings: LoadSettings) -> object:
    """`mlperf_loadgen.TestSettings` for `settings`."""
    import mlperf_loadgen as lg

    test = lg.TestSettings()
    test.scenario = getattr(lg.TestScenario, LOADGEN_SCENARIOS[settings.scenario])
    test.mode = lg.TestMode.PerformanceOnly
    test.min_duration_ms = max(1, round(settings.min_duration_s * 1000))
    test.min_query_count = settings.min_query_count
    expected_latency_ns = max(1, round(1e9 / settings.expected_qps))
    if settings.latency_percentile is not None:
        fraction = settings.latency_percentile / 100
        test.single_stream_target_latency_percentile = test.multi_stream_target_latency_percentile = fraction
        test.server_target_latency_percentile = fraction
    if settings.scenario == "single-stream":
        test.single_stream_expected_latency_ns = expected_latency_ns
    elif settings.scenario == "multi-stream":
        test.multi_stream_samples_per_query = settings.samples_per_query
        test.multi_stream_expected_latency_ns = expected_latency_ns * settings.samples_per_query
    elif settings.scenario == "server":
        if settings.target_qps is None or settings.latency_bound_s is None:
            raise ValueError("a server test needs a target rate and a latency bound")
        test.server_target_qps = settings.target_qps
        test.server_target_latency_ns = max(1, round(settings.latency_bound_s * 1e9))
        if settings.new_tokens is not None:
            if settings.ttft_bound_s is None or settings.tpot_bound_s is None:
                raise ValueError("a server test that generates needs bounds on the time to first token and per output token")
            test.ttft_latency = max(1, round(settings.ttft_bound_s * 1e9))
            test.tpot_latency = max(1, round(settings.tpot_bound_s * 1e9))
    else:
        test.offline_expected_qps = settings.expected_qps
    test.use_token_latencies = settings.new_tokens is not None
    return test


@contextlib.contextmanager
def _constructed(construct: Callable[..., object], destroy: Callable[[object], None], *args: object) -> Iterator[object]:
    handle = construct(*args)
    try:
        yield handle
    finally:
        destroy(handle)


def _start_test(test: object, samples: Sequence[np.ndarray], loop: ServingLoop, folder: Path, kept: Sequence[str]) -> None:
    """Run LoadGen's `test` against `loop` (closed when LoadGen has finished, raising a worker's failure), its queries rows
    of `samples`, its logs written in `folder` (created), of which only the files `kept` stay. A kernel killed meanwhile
    leaves LoadGen's files in that trial's folder of the run, nowhere else."""
    import mlperf_loadgen as lg

    folder.mkdir(parents=True, exist_ok=True)
    output = lg.LogOutputSettings()
    output.outdir, output.copy_summary_to_stdout = str(folder), False
    log = lg.LogSettings()
    log.log_output, log.enable_trace = output, False
    with loop:

        def issue(query_samples: Sequence[object]) -> None:
            loop.submit(Request(sample.id, samples[sample.index]) for sample in query_samples)

        with _constructed(lg.ConstructSUT, lg.DestroySUT, issue, lambda: None) as sut, \
             _constructed(lg.ConstructQSL, lg.DestroyQSL, len(samples), len(samples), lambda _: None, lambda _: None) as qsl:  # fmt: skip
            lg.StartTestWithLogSettings(sut, qsl, test, log)
    for path in folder.glob("mlperf_log_*"):
        if path.name not in kept:
            path.unlink()


def run_loadgen(
    settings: LoadSettings, samples: Sequence[np.ndarray], calls: Sequence[StreamCall], max_batch: int, batch_timeout_s: float,
    folder: Path,
) -> LoadReport:  # fmt: skip
    """One LoadGen test of `settings` against a serving loop of `calls` (one per stream): LoadGen's queries are rows of
    `samples` (its query sample library), batched by the loop; each finished batch is reported back to LoadGen (when
    generating, its first token too, and the tokens each request made). LoadGen's summary and detail logs are kept in
    `folder` (created). A worker's failure is raised once LoadGen has finished."""
    import mlperf_loadgen as lg

    tokens = () if settings.new_tokens is None else (settings.new_tokens,)  # the responses' token count, when generating

    def complete(batch: list[Request], output: object) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(request.id, 0, 0, *tokens) for request in batch])

    def first_token(batch: list[Request]) -> None:
        if tokens:
            lg.FirstTokenComplete([lg.QuerySampleResponse(request.id, 0, 0) for request in batch])

    loop = ServingLoop(calls, max_batch, batch_timeout_s, complete, first_token)
    _start_test(test_settings(settings), samples, loop, folder, KEPT_FILES)
    text = (folder / SUMMARY_FILE).read_text(encoding="utf-8")
    figures = parse_summary(text)
    stats = loop.stats()
    return LoadReport(
        settings.scenario, figures.get("Result is") == "VALID", figures, folder, tokens=bool(tokens), percentile=settings.percentile,
        advice=tuple(recommendations(text)), served=stats.samples, serving=stats,
    )  # fmt: skip


Respond = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (one request's output row, its ids) -> its response


def run_accuracy(
    samples: Sequence[np.ndarray], calls: Sequence[StreamCall], max_batch: int, folder: Path, respond: Respond, as_array: Callable[[object], np.ndarray]
) -> list[np.ndarray]:  # fmt: skip
    """LoadGen's accuracy mode (AccuracyOnly, Offline: every sample issued once, at once) against a serving loop of
    `calls`: each request's response (`respond(its row of the batch's output, its ids)`, float32) is handed to LoadGen,
    which logs its bytes in `mlperf_log_accuracy.json`, kept in `folder` with its summary and detail. Returns the
    responses read back from that log, by sample."""
    import mlperf_loadgen as lg

    kept: list[np.ndarray] = []  # each response's buffer, alive until LoadGen has copied it

    def complete(batch: list[Request], output: object) -> None:
        if output is None:  # a worker failed: `close` raises it
            lg.QuerySamplesComplete([lg.QuerySampleResponse(request.id, 0, 0) for request in batch])
            return
        rows = as_array(output)
        answers = []
        for row, request in zip(rows, batch):
            response = np.ascontiguousarray(respond(row, request.ids), dtype=np.float32)
            kept.append(response)
            answers.append(lg.QuerySampleResponse(request.id, response.ctypes.data, response.nbytes))
        lg.QuerySamplesComplete(answers)

    test = lg.TestSettings()
    test.scenario, test.mode = lg.TestScenario.Offline, lg.TestMode.AccuracyOnly
    test.offline_expected_qps = max(1.0, float(len(samples)))
    _start_test(test, samples, ServingLoop(calls, max_batch, 0.0, complete), folder, (*KEPT_FILES, ACCURACY_FILE))
    return read_accuracy_log(folder / ACCURACY_FILE, len(samples))


def read_accuracy_log(path: Path, samples: int) -> list[np.ndarray]:
    """The float32 responses LoadGen logged in `path` (mlperf_log_accuracy.json), by sample index; a ValueError where
    a sample has none (or two)."""
    entries = json.loads(path.read_text(encoding="utf-8"))
    found: dict[int, np.ndarray] = {}
    for entry in entries:
        index = int(entry["qsl_idx"])
        if index in found:
            raise ValueError(f"{path}: sample {index} was answered twice")
        found[index] = np.frombuffer(bytes.fromhex(entry["data"]), dtype=np.float32)
    missing = [index for index in range(samples) if index not in found]
    if missing:
        raise ValueError(f"{path}: {len(missing)} of {samples} samples have no response (the first: {missing[0]})")
    return [found[index] for index in range(samples)]


# The fewest queries LoadGen's early stopping accepts at each percentile, none of them over the bound: the server counts
# the queries over its latency bound (the percentile holds with 99% confidence once percentile^n <= 1%), the stream
# scenarios estimate the percentile's latency itself and need more. LoadGen's own counts, which
# tests/scenarios/test_early_stopping.py checks against it.
EARLY_STOPPING_MINIMUM: dict[tuple[str, int], int] = {
    ("server", 90): 44, ("server", 99): 459,
    ("single-stream", 90): 64, ("single-stream", 99): 662, ("multi-stream", 90): 64, ("multi-stream", 99): 662,
}  # fmt: skip


def early_stopping_minimum(scenario: str, percentile: int) -> int:
    """The fewest queries a test of `scenario` judged at `percentile` needs for LoadGen's early stopping: a test with
    fewer is INVALID whatever its latencies, and one near its bound needs several times more."""
    return EARLY_STOPPING_MINIMUM[scenario, percentile]


def early_stopping_queries(report: LoadReport) -> int | None:
    """The queries LoadGen says a test would have needed for early stopping (its count so far plus the more it asks
    for), or None where early stopping was satisfied or the summary does not say."""
    if report.figures.get("Early stopping satisfied", "Yes") == "Yes":
        return None
    text = (report.folder / SUMMARY_FILE).read_text(encoding="utf-8")
    done = re.search(r"Processed (\d+) queries", text) or re.search(r"processed (\d+) queries", text)
    more = re.search(r"at least (\d+) more queries", text)
    total = re.search(r"at least (\d+) queries", text)
    if more and done:
        return int(done.group(1)) + int(more.group(1))
    return int(total.group(1)) if total else None
