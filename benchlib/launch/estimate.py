"""What a load run costs, known before any kernel starts: each environment's LoadGen tests (how many, their minimum
duration and the queries early stopping needs at the percentile they are judged at) and the time they take at the
rates this machine is expected to serve, plus each kernel's start and each model's preparation; then, as the run goes,
what is left.

The rates come from a simple model of one call, in pure Python (no framework is imported): each layer costs a fixed
overhead (the framework's, `LAYER_OVERHEAD_S`) and its matrix multiplies run at `EFFICIENCY` of the machine's float32
peak, or read the weights at its memory bandwidth when generating a token; the peak and bandwidth are the run's own
(`machine_limits.json`) where a rerun finds them, else a figure from the CPU's vector width and cores. It is an
estimate, checked against real runs on the documentation's measurements page; what the run itself measures corrects
it as it goes (`Remaining`).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.config.jobs import EnvironmentJob, round_schedule
from benchlib.config.params import CELL, LOAD_SCENARIOS, BenchmarkParams
from benchlib.measure.concurrency import levels
from benchlib.machine import cpu_flags, usable_cores
from benchlib.config.tune import space_size, tune_space
from benchlib.scenarios.loadgen import early_stopping_minimum
from benchlib.scenarios.serving import batch_buckets
from benchlib.store.limits import read_limits
from benchlib.store.results import MLPERF_PERCENTILE

EARLY_STOPPING_SCENARIOS = ("single-stream", "multi-stream", "server")
TUNE, CONFIRMATION = "tune", "confirmation"  # a tune's kernels: its points, then the best and the default again
EFFICIENCY = 0.45  # the share of the float32 peak a model's matrix multiplies reach (BERT-sized layers, 2 cores)
# A layer's fixed cost per call in each framework (operator dispatch, small kernels), whatever its size.
LAYER_OVERHEAD_S: dict[str, float] = {"pytorch": 2.0e-3, "tensorflow": 3.0e-3, "onnxruntime": 0.6e-3, "openvino": 0.4e-3}
# A fresh kernel, its framework imported, and one model built or loaded from the build cache, in seconds.
KERNEL_START_S: dict[str, float] = {"pytorch": 9.0, "tensorflow": 16.0, "onnxruntime": 11.0, "openvino": 11.0}
MODEL_SETUP_S = 4.0
SERVER_RATE_SHARE = 0.85  # the server search's rates, on average, as a share of the rate full batches would serve
# A server trial near its bound has queries over it, and early stopping then asks for more (the test run again).
SERVER_QUERY_MARGIN = 2.0


@dataclass(frozen=True)
class MachineSpeed:
    """The machine's float32 peak and memory bandwidth the estimate assumes, and where they come from."""

    flops_per_s: float
    bytes_per_s: float
    source: str


def machine_speed(run_dir: Path, device: str = "cpu") -> MachineSpeed:
    """The run's own machine limits where a rerun finds them, else figures from the CPU's vector width and cores."""
    limits = read_limits(run_dir, device) or {}
    if limits.get("float32_flops_per_s") and limits.get("bandwidth_bytes_per_s"):
        return MachineSpeed(limits["float32_flops_per_s"], limits["bandwidth_bytes_per_s"], "this run's machine limits")
    if device != "cpu":
        return MachineSpeed(20e12, 1e12, "a GPU's figures of the order of today's (its limits not measured yet)")
    wide = "avx512f" in (cpu_flags() or set())
    cores = usable_cores()
    return MachineSpeed(cores * (200e9 if wide else 100e9), 12e9 * cores, f"{cores} cores with {'AVX-512' if wide else 'AVX2'}")


@dataclass(frozen=True)
class Shape:
    """What the call model needs of a model: layers, width, feed-forward width, vocabulary."""

    layers: int
    width: int
    ffn: int
    vocab: int

    @classmethod
    def of(cls, config: dict[str, Any]) -> Shape:
        """From a configuration's values, whatever the architecture names them."""

        def first(*keys: str, default: int = 0) -> int:
            return int(next((config[key] for key in keys if isinstance(config.get(key), int)), default))

        width = first("hidden_size", "n_embd", "d_model", "dim", "emb_dim", default=768)
        gated = 3 if config.get("hidden_act") == "silu" or config.get("model_type") in ("llama", "mistral", "qwen2") else 2
        ffn = first("intermediate_size", "n_inner", "ffn_dim", "hidden_dim", "d_inner", "d_ff", default=4 * width) * gated // 2
        return cls(first("num_hidden_layers", "n_layer", "num_layers", "n_layers", default=12), width, ffn, first("vocab_size", default=30000))

    def flops(self, batch: int, tokens: int, context: int) -> float:
        """A forward pass over `tokens` new positions each attending to `context`: 2 FLOPs a multiply-add."""
        return 2.0 * batch * tokens * self.layers * (4 * self.width**2 + 2 * self.width * self.ffn + 2 * context * self.width)

    @property
    def weight_bytes(self) -> float:
        return 4.0 * (self.layers * (4 * self.width**2 + 2 * self.width * self.ffn) + self.vocab * self.width)


@dataclass(frozen=True)
class CallModel:
    """Seconds a call takes in one environment, for one model."""

    shape: Shape
    params: BenchmarkParams
    speed: MachineSpeed

    @property
    def _overhead_s(self) -> float:
        return self.shape.layers * LAYER_OVERHEAD_S.get(self.params.framework, 2.0e-3)

    def forward_s(self, batch: int, length: int) -> float:
        return self._overhead_s + self.shape.flops(batch, length, length) / (EFFICIENCY * self.speed.flops_per_s)

    def call_s(self, batch: int, length: int) -> float:
        """One call on a batch of requests of `length` tokens: a forward pass, or a prompt and `new_tokens` tokens."""
        if self.params.workload != "generate":
            return self.forward_s(batch, length)
        tokens = self.params.new_tokens
        step = self._overhead_s + max(
            self.shape.flops(batch, 1, length + tokens // 2) / (EFFICIENCY * self.speed.flops_per_s), self.shape.weight_bytes / self.speed.bytes_per_s
        )  # fmt: skip
        return self.forward_s(batch, length) + (tokens - 1) * step


@dataclass(frozen=True)
class TestCost:
    """One scenario of one model in one environment: its LoadGen tests, the queries each runs, and their time."""

    model: str
    scenario: str
    tests: int
    queries: int
    seconds: float
    bound_by: str  # what sets a test's length: "min_duration_s", or the queries at the rate expected
    rate: float  # the queries per second expected (the server's: the search's typical rate)


@dataclass(frozen=True)
class JobCost:
    """One environment's kernel: its start and models' preparation, and its LoadGen tests."""

    name: str
    setup_s: float
    tests: tuple[TestCost, ...]
    kernels: int = 1  # a tune: one a point and one a confirmation round

    @property
    def seconds(self) -> float:
        return self.setup_s + sum(test.seconds for test in self.tests)

    def done_s(self, rows: Sequence[Mapping[str, str]]) -> float:
        """The estimate of what `rows` (this kernel's round, trials included) have done: a scenario with its row
        whole, a server search by its trials so far, and the start once any row is written."""
        finished = {(row["model"], row["scenario"]) for row in rows if not row["trial"]}
        trials = Counter((row["model"], row["scenario"]) for row in rows if row["trial"])
        done = sum(t.seconds if (t.model, t.scenario) in finished else t.seconds * min(trials[t.model, t.scenario] / t.tests, 1.0) for t in self.tests)
        return done + (self.setup_s if rows else 0.0)


def _percentile(params: BenchmarkParams, scenario: str) -> int:
    return params.latency_percentile or MLPERF_PERCENTILE.get(scenario, 99)


def scenario_cost(model: str, scenario: str, calls: CallModel) -> TestCost:
    """The LoadGen tests of `scenario`: each runs at least `min_duration_s` and `min_query_count` queries (more where
    early stopping needs them), at the rate the call model expects."""
    p = calls.params
    lengths = p.request_lengths or p.sequence_lengths
    mean_length = round(sum(lengths) / len(lengths))
    full_s = calls.call_s(p.max_batch, mean_length)
    if scenario == "offline":
        rate = p.max_batch * p.streams / full_s
        queries, tests = p.min_query_count, 1
        seconds = max(p.min_duration_s, queries / rate)
    elif scenario == "concurrency":  # at most one level of min_duration_s per power of two up to `streams`
        tests = len(levels(p.streams))
        rate, seconds = p.streams / full_s, tests * p.min_duration_s
        queries = math.ceil(rate * seconds)
    else:
        queries = max(p.min_query_count, early_stopping_minimum(scenario, _percentile(p, scenario)))
        if scenario == "single-stream":
            rate, tests = 1 / calls.call_s(1, mean_length), 1
        elif scenario == "multi-stream":
            batches = math.ceil(p.samples_per_query / p.max_batch)
            rate, tests = 1 / (batches * calls.call_s(min(p.samples_per_query, p.max_batch), mean_length)), 1
        else:
            rate, tests = SERVER_RATE_SHARE * p.max_batch * p.streams / full_s, p.max_trials
            queries = math.ceil(SERVER_QUERY_MARGIN * queries)
        seconds = tests * (max(p.min_duration_s, queries / rate) + 1 / rate)
    bound_by = "min_duration_s" if seconds <= tests * p.min_duration_s * 1.05 else f"{queries} queries at {rate:.3g}/s"
    return TestCost(model, scenario, tests, queries, seconds, bound_by, rate)


def job_cost(job: EnvironmentJob, speed: MachineSpeed) -> JobCost | None:
    """The cost of one environment's kernel, or None for a grid of cells (no LoadGen test)."""
    p = job.params
    if p.scenario == [CELL]:
        return None
    start = KERNEL_START_S.get(p.framework, 15.0)
    calls = {model: CallModel(Shape.of(p.model_spec(model).config_values(p.model_scale)), p, speed) for model in p.models}
    tests = [scenario_cost(model, scenario, calls[model]) for model in p.models for scenario in p.scenario if scenario in LOAD_SCENARIOS]
    if p.tune is None:
        return JobCost(job.name, start + sum(model_setup_s(call) for call in calls.values()), tuple(tests))
    # a tune: each point, and each confirmation round of the best point and the default, is a kernel of one model
    points = min(p.tune_trials, space_size(tune_space(p)))
    tuned = []
    for test in tests:
        kernel = start + model_setup_s(calls[test.model]) + test.seconds
        tuned += [
            TestCost(test.model, TUNE, points, test.queries, min(points * kernel, p.tune_budget_s + kernel), test.bound_by, test.rate),
            TestCost(test.model, CONFIRMATION, 2 * p.confirm_rounds, test.queries, 2 * p.confirm_rounds * kernel, test.bound_by, test.rate),
        ]  # fmt: skip
    return JobCost(job.name, 0.0, tuple(tuned), kernels=sum(test.tests for test in tuned))


def model_setup_s(calls: CallModel) -> float:
    """A model's preparation: built or loaded, every shape the serving loop runs once, the agreement batch (and eager
    PyTorch's), and the rate's first guess."""
    p = calls.params
    lengths = p.request_lengths or p.sequence_lengths
    shapes = sum(calls.call_s(size, length) for length in lengths for size in batch_buckets(p.max_batch))
    return MODEL_SETUP_S + shapes + 3 * calls.call_s(p.max_batch, max(lengths)) + 3 * calls.call_s(1, max(lengths))


@dataclass(frozen=True)
class RunCost:
    """A run's estimate: each environment's kernel (every round's), in the order they run."""

    jobs: tuple[JobCost, ...]
    speed: MachineSpeed

    @property
    def seconds(self) -> float:
        return sum(job.seconds for job in self.jobs)

    def lines(self) -> list[str]:
        """The estimate in words: the total, then each environment's tests."""
        if not self.jobs:
            return []
        tests = [test for job in self.jobs for test in job.tests]
        loadgen = f" and {sum(t.tests for t in tests)} LoadGen tests" if all(t.scenario in LOAD_SCENARIOS for t in tests) else ""
        kernels = sum(job.kernels for job in self.jobs)
        confirmation = sum(t.seconds for t in tests if t.scenario == CONFIRMATION)
        unconfirmed = f", {minutes_text(self.seconds - confirmation)} where every tune's default stays best" if confirmation else ""
        out = [
            f"estimate: about {minutes_text(self.seconds)} for {kernels} kernel{'' if kernels == 1 else 's'}{loadgen}{unconfirmed} "
            f"(the machine's speed from {self.speed.source}; corrected as the run goes)"
        ]
        for job in self.jobs:
            models = dict.fromkeys(test.model for test in job.tests)
            parts = [f"{model}: " + ", ".join(test_text(t) for t in job.tests if t.model == model) for model in models]
            start = f"start and preparation {job.setup_s:.0f} s; " if job.setup_s else ""
            out.append(f"  {job.name} ({minutes_text(job.seconds)}): {start}" + "; ".join(parts))
        return out

    def over(self, max_minutes: float) -> str | None:
        """Why the run is over `max_minutes`, and which settings to lower, or None when it is within them."""
        if self.seconds <= max_minutes * 60:
            return None
        tests = [test for job in self.jobs for test in job.tests]
        share: dict[str, float] = {}
        for test in tests:
            share[test.scenario] = share.get(test.scenario, 0.0) + test.seconds
        scenario, seconds = max(share.items(), key=lambda item: item[1])
        worst = max((t for t in tests if t.scenario == scenario), key=lambda t: t.seconds)
        judged = worst.scenario if worst.scenario in EARLY_STOPPING_SCENARIOS else None
        fewest = {percentile: early_stopping_minimum(judged, percentile) for percentile in (90, 99)} if judged else {}
        lower = ["min_duration_s"] if worst.bound_by == "min_duration_s" else ["min_query_count"]
        if fewest and worst.bound_by != "min_duration_s":
            lower.append(f"latency_percentile (90 needs {fewest[90]} queries a test, 99 needs {fewest[99]})")
        if scenario == "server":
            lower.insert(0, "max_trials")
        return (
            f"estimated {minutes_text(self.seconds)}, more than max_run_minutes ({max_minutes:g}); the {scenario} tests take "
            f"{seconds / self.seconds:.0%} of it ({worst.model}: {test_text(worst)}): lower {', '.join(lower)}, "
            "or the models and environments; or run with --yes"
        )


def test_text(test: TestCost) -> str:
    """'server 5 x 12 s (88 queries at 6.2/s)': a scenario's tests, each's length and, where queries set it, why."""
    why = "" if test.bound_by == "min_duration_s" else f" ({test.bound_by})"
    return f"{test.scenario} {test.tests} x {test.seconds / test.tests:.0f} s{why}"


def estimate_run(jobs: Sequence[EnvironmentJob], speed: MachineSpeed | None = None) -> RunCost:
    """The estimate of a run of `jobs` (every round), its grids of cells left out."""
    schedule = round_schedule(jobs)
    if speed is None:
        speed = machine_speed(schedule[0].output_dir.parent, schedule[0].params.device) if schedule else MachineSpeed(1, 1, "")
    costs = (job_cost(job, speed) for job in schedule)
    return RunCost(tuple(cost for cost in costs if cost is not None), speed)


def max_run_minutes(jobs: Sequence[EnvironmentJob]) -> float:
    """The bound a run's estimate is held to: the smallest `max_run_minutes` of its environments."""
    return min(job.params.max_run_minutes for job in jobs)


def minutes_text(seconds: float) -> str:
    """'40 s', '12 min', '2 h 05 min'."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


@dataclass
class Remaining:
    """What is left of a run as it goes: the estimate of what has not run yet, scaled by how long what has run took
    against its own estimate (once a minute or more of it has run)."""

    cost: RunCost
    started: float = field(default_factory=time.perf_counter)

    def left_s(self, index: int, rows: Sequence[Mapping[str, str]] = ()) -> float:
        """Seconds left, kernel `index` (in run order) having written `rows` (its round's, trials included)."""
        done = sum(job.seconds for job in self.cost.jobs[:index]) + (self.cost.jobs[index].done_s(rows) if index < len(self.cost.jobs) else 0.0)
        elapsed = time.perf_counter() - self.started
        scale = min(max(elapsed / done, 0.5), 3.0) if done >= 60 else 1.0
        return max(self.cost.seconds - done, 0.0) * scale

    def text(self, index: int, rows: Sequence[Mapping[str, str]] = ()) -> str:
        """'about 12 min left' (see `left_s`)."""
        return f"about {minutes_text(self.left_s(index, rows))} left"
