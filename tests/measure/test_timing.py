"""Timing: the tight loop between clock reads, and the stopping rules of `repeat: auto` on a fake clock."""

from __future__ import annotations

import gc
import itertools
import random

import numpy as np
import pytest
from scipy import stats as scipy_stats

from benchlib import read_results, run_environment
from benchlib.config.params import ParameterError, validate_params
from benchlib.measure.device_state import DeviceMonitor, DeviceState
from benchlib.measure.timing import (
    CONVERGED, FIXED, MAX_SAMPLES, TIME_BUDGET, WARMUP_CALLS, WARMUP_NONE, WARMUP_STABLE, WARMUP_TIME_LIMIT, TimingSpec, measure,
    prepare_and_call_once, warm_up,
)  # fmt: skip


class FakeClock:
    """A clock that moves only when a fake call runs; it logs every read, call and sync."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = iter(durations)
        self.log = []

    def __call__(self):
        self.log.append("clock")
        return self.now

    def call(self):
        self.log.append("call")
        self.now += next(self.durations)
        return "output"

    def sync(self, output):
        self.log.append("sync")


def timed(durations, number=1, **spec):
    clock = FakeClock(durations)
    measurement = measure(clock.call, TimingSpec(warmup=0, number=number, **spec), clock.sync, clock)
    return measurement, clock


def intervals(log):
    """What happened between consecutive clock reads."""
    reads = [i for i, event in enumerate(log) if event == "clock"]
    return [log[a + 1 : b] for a, b in zip(reads, reads[1:])]


def test_fixed_repeat_is_a_tight_loop_between_clock_reads():
    measurement, clock = timed(itertools.repeat(0.5), number=3, repeat=4)
    assert measurement.samples_s == (0.5,) * 4 and measurement.stop_reason == FIXED and measurement.calls == 12
    assert measurement.warmup_calls == 0 and clock.log[0] == "clock"  # warmup=0: no call before the samples
    assert [interval for interval in intervals(clock.log) if interval] == [["call"] * 3 + ["sync"]] * 4


def warmed(durations, **spec):
    clock = FakeClock(durations)
    return warm_up(clock.call, TimingSpec(**spec), clock.sync, clock), clock


def test_warm_up_stops_when_two_successive_batches_agree():
    # A traced model speeding up over its first calls. Each batch holds 50 ms at the latest median:
    # after 100 ms, 1 call (40 ms); then 2 (20 ms); then 3 (12.5 ms); then 4, whose median agrees.
    durations = [0.1, 0.04, 0.02, 0.02, *[0.0125] * 3, 0.0126, 0.0124, 0.0125, 0.0127, 99.0]
    (calls, seconds, why), clock = warmed(durations, warmup=1, warmup_max_seconds=60)
    assert calls == 1 + 1 + 2 + 3 + 4 == clock.log.count("call") and why == WARMUP_STABLE
    assert seconds == pytest.approx(sum(durations[:11]))  # how long the warm-up took, in the row
    assert clock.log.count("sync") == calls  # every warm-up call is timed on its own


def test_warm_up_ignores_a_stray_slow_call_by_taking_batch_medians():
    durations = [0.01] * 5 + [0.01, 0.01, 0.5, 0.01, 0.01]  # one 0.5 s call in the second batch
    (calls, _, why), _ = warmed(durations, warmup=5, warmup_max_seconds=60)
    assert calls == 10 and why == WARMUP_STABLE


def test_warm_up_stops_at_its_time_limit_when_calls_never_settle():
    durations = itertools.cycle([0.1, 0.2])  # every batch of one call differs from the last by 50% or more
    (calls, seconds, why), clock = warmed(durations, warmup=1, warmup_max_seconds=3)
    assert 3 <= clock.now < 3 + 0.2 + 1e-9 and calls == clock.log.count("call") > 10
    assert why == WARMUP_TIME_LIMIT and seconds == pytest.approx(clock.now)


def test_warm_up_takes_at_least_warmup_calls_and_none_when_zero():
    (calls, _, why), _ = warmed(itertools.repeat(0.01), warmup=7, warmup_max_seconds=60)
    assert calls == 7 + 5 and why == WARMUP_STABLE  # then one batch of 50 ms, equal to the last call
    assert warmed(itertools.repeat(0.01), warmup=0)[0] == (0, 0.0, WARMUP_NONE)
    assert warmed(itertools.repeat(0.01), warmup=3, warmup_max_seconds=0)[0][::2] == (3, WARMUP_CALLS)


class ClimbingClock(DeviceMonitor):
    """A fake of a GPU's SM clock (what this machine lacks): idle at 345 MHz, one step of 400 MHz up per read, to 1980."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.mhz, self.log, self.reads, self.checks = 345.0, log, [], 0

    def steady(self) -> bool:
        self.checks += 1
        self.mhz = min(self.mhz + 400, 1980.0)
        return self.mhz >= 0.97 * 1980

    def begin(self) -> None:
        self.log.append("begin")
        self.reads = []

    def read(self) -> None:
        self.log.append("read")
        self.reads.append(self.mhz)

    def end(self) -> DeviceState:
        self.log.append("end")
        return DeviceState(clock_mhz=float(np.median(self.reads)), clock_min_mhz=min(self.reads), sustained_mhz=1980.0, energy_j=3.0, energy_source="fake")


def test_on_a_gpu_the_warm_up_lasts_until_the_clock_is_sustained_and_the_device_is_read_between_samples_only():
    clock = FakeClock(itertools.repeat(0.01))
    monitor = ClimbingClock(clock.log)
    measurement = measure(clock.call, TimingSpec(warmup=1, warmup_max_seconds=60, repeat=4, number=2), clock.sync, clock, monitor=monitor)
    # The call's time is stable from the first batch, the clock only after four reads: 345 -> 745 -> 1145 -> 1545 -> 1945.
    before = clock.log[: clock.log.index("begin")]
    assert measurement.warmup_stop == WARMUP_STABLE and monitor.checks == 4 and measurement.warmup_calls == before.count("call") > 4
    assert all("read" not in interval for interval in intervals(clock.log) if "call" in interval)  # never inside a timed interval
    assert clock.log.count("read") == 4 and clock.log[-1] == "end" and measurement.device.clock_min_mhz == 1945.0
    row = measurement.row_fields()
    assert row["energy_j"] == pytest.approx(3.0 / 8) and row["energy_unit"] == "call" and row["slowed"] == ""  # 4 samples of 2 calls
    assert row["warmup_stop"] == WARMUP_STABLE and row["warmup_s"] == pytest.approx(0.01 * measurement.warmup_calls)


def test_garbage_collection_is_off_while_samples_are_taken_and_restored_after():
    seen = []

    def call():
        seen.append(gc.isenabled())

    assert gc.isenabled()
    measurement = measure(call, TimingSpec(warmup=2, warmup_max_seconds=0, repeat=4, number=2))
    assert seen[:2] == [True, True] and seen[2:] == [False] * 8  # warm-up on, samples off
    assert gc.isenabled() and measurement.warmup_calls == 2
    gc.disable()
    try:
        measure(call, TimingSpec(warmup=0, repeat=1, number=1))
        assert not gc.isenabled()  # a caller's choice is left as it was
    finally:
        gc.enable()


def test_preparation_and_first_call_are_timed_apart():
    clock = FakeClock([0.5])

    def make_call():
        clock.now += 2.0  # tracing or compiling
        return clock.call

    call, prepare_s, first_call_s = prepare_and_call_once(make_call, clock.sync, clock)
    assert (prepare_s, first_call_s) == (2.0, 0.5) and call == clock.call


def test_auto_keeps_the_loop_tight_and_checks_between_samples():
    durations = itertools.cycle([0.25, 0.75])
    measurement, clock = timed(durations, number=2, repeat="auto", max_cell_seconds=10)
    timed_intervals = [interval for interval in intervals(clock.log[1:]) if interval]
    assert timed_intervals == [["call", "call", "sync"]] * len(measurement.samples_s)


def test_auto_stops_at_min_samples_when_every_sample_is_equal():
    measurement, _ = timed(itertools.repeat(0.01), repeat="auto", min_samples=5)
    assert len(measurement.samples_s) == 5 and measurement.stop_reason == CONVERGED


def test_auto_stops_where_the_confidence_interval_first_meets_the_target():
    generator = random.Random(3)
    durations = [generator.gauss(0.1, 0.01) for _ in range(500)]
    measurement, _ = timed(durations, repeat="auto", target_rel_ci=0.02, min_samples=5, max_cell_seconds=1e9)
    expected = next(
        n for n in range(5, 500)
        if scipy_stats.t.ppf(0.975, n - 1) * np.std(durations[:n], ddof=1) / np.sqrt(n) / np.mean(durations[:n]) <= 0.02
    )  # fmt: skip
    assert measurement.stop_reason == CONVERGED
    assert measurement.samples_s == pytest.approx(durations[:expected], rel=1e-9)
    assert expected > 5  # the interval, not the minimum, decided


def test_auto_stops_when_the_time_budget_is_spent():
    # Samples alternate 0.25 s and 0.75 s: far too noisy for 2%; 25 s of sampling is 50 samples.
    clock = FakeClock(itertools.chain([100.0, 100.0], itertools.cycle([0.25, 0.75])))
    spec = TimingSpec(warmup=2, repeat="auto", number=1, max_cell_seconds=25, min_samples=5)
    measurement = measure(clock.call, spec, clock.sync, clock)
    assert measurement.stop_reason == TIME_BUDGET
    assert len(measurement.samples_s) == 50  # the 200 s of warm-up are not part of the budget


def test_auto_takes_min_samples_even_past_the_budget():
    measurement, _ = timed(itertools.cycle([10.0, 30.0]), repeat="auto", max_cell_seconds=1, min_samples=7)
    assert len(measurement.samples_s) == 7 and measurement.stop_reason == TIME_BUDGET


def test_auto_stops_at_max_samples():
    measurement, _ = timed(itertools.cycle([0.25, 0.75]), repeat="auto", max_cell_seconds=1e9, max_samples=40)
    assert len(measurement.samples_s) == 40 and measurement.stop_reason == MAX_SAMPLES


def test_auto_counts_samples_of_number_calls():
    measurement, clock = timed(itertools.repeat(0.02), number=4, repeat="auto", min_samples=6)
    assert measurement.samples_s == pytest.approx((0.02,) * 6) and measurement.calls == 24
    assert clock.log.count("call") == 24


@pytest.mark.parametrize(
    "spec",
    [dict(repeat=0), dict(repeat="sometimes"), dict(number=0), dict(min_samples=1), dict(target_rel_ci=0), dict(max_cell_seconds=0), dict(warmup_max_seconds=-1)],
)
def test_bad_specs_are_refused(spec):
    with pytest.raises(ValueError):
        TimingSpec(**spec)


def grid(tmp_path, **overrides):
    values = dict(
        environment="cpu-pytorch", framework="pytorch", mode="eager", models=["bert-base-cased"], model_scale="tiny",
        batch_sizes=[1], sequence_lengths=[8], output_dir=str(tmp_path / "env"),
    )  # fmt: skip
    return {**values, **overrides}


def test_repeat_parameter_takes_auto_and_positive_integers(tmp_path):
    assert validate_params(grid(tmp_path, repeat="auto")).repeat == "auto"
    defaults = validate_params(grid(tmp_path))
    assert (defaults.repeat, defaults.number, defaults.target_rel_ci, defaults.min_samples) == (30, 3, 0.02, 5)
    for bad in ("sometimes", 0, True):
        with pytest.raises(ParameterError, match=r"^parameters: repeat: must be a positive integer or 'auto', not"):
            validate_params(grid(tmp_path, repeat=bad))
    with pytest.raises(ParameterError, match=r"^parameters: min_samples: Input should be greater than or equal to 2$"):
        validate_params(grid(tmp_path, min_samples=1))


def test_a_real_cell_with_repeat_auto_records_samples_and_stop_reason(tmp_path):
    rows = run_environment(grid(tmp_path, repeat="auto", max_cell_seconds=5, min_samples=4), progress=False)
    row = read_results(tmp_path / "env").iloc[0]
    assert row.status == "ok" and row.stop_reason in (CONVERGED, TIME_BUDGET, MAX_SAMPLES)
    assert row["repeat"] == len(row.samples_s) >= 4 and row.number == 3
    assert row.ci95_low_s < row.mean_s < row.ci95_high_s and row.iqr_s >= 0
    # Which reason applies depends on the machine's noise (a fast cell on a busy core can take its
    # 1000 samples in under 5 s without converging); each must be consistent with the row.
    half_width = (row.ci95_high_s - row.ci95_low_s) / 2
    if row.stop_reason == CONVERGED:
        assert half_width <= 0.02 * row.mean_s * (1 + 1e-9)
    else:
        assert half_width > 0.02 * row.mean_s * (1 - 1e-9)
    assert row["repeat"] == TimingSpec().max_samples if row.stop_reason == MAX_SAMPLES else row["repeat"] <= TimingSpec().max_samples
    fixed = run_environment(grid(tmp_path, repeat=4, number=2, output_dir=str(tmp_path / "fixed")), progress=False)
    assert (fixed["repeat"][0], fixed.number[0], fixed.stop_reason[0]) == (4, 2, FIXED) and len(rows) == 1
