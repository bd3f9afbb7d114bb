"""How a generate cell is timed: the first token, the later tokens and the whole call from one sample, with a step clock
inside the call or with two calls where the loop cannot be seen into; what a row reports."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchlib.backends._generate import Generator, StepClock
from benchlib.measure.generation import EACH_STEP, TWO_CALLS, GenerationMeasurement, measure_generation, one_sample
from benchlib.measure.timing import TimingSpec


class FakeClock:
    """A clock that moves only when a fake generation loop spends time."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def stepping_generator(clock: FakeClock, prefill: float, step: float, made: int | None = None) -> Generator:
    """A generator whose loop ticks its step clock: the first token after `prefill` seconds, each next one after `step`;
    it makes `made` tokens whatever is asked, when given."""
    steps = StepClock(clock)

    def generate(new_tokens: int) -> np.ndarray:
        for token in range(new_tokens if made is None else made):
            clock.now += prefill if token == 0 else step
            steps.tick()
        return np.zeros((1, new_tokens), dtype=np.int64)

    return Generator(generate, lambda output: output, steps)


def test_a_step_clock_gives_the_first_token_and_each_later_one() -> None:
    clock = FakeClock()
    whole, first, steps = one_sample(stepping_generator(clock, prefill=0.5, step=0.1), 4, clock=clock)
    assert first == pytest.approx(0.5) and steps == pytest.approx((0.1, 0.1, 0.1)) and whole == pytest.approx(0.8)


def test_a_call_that_makes_fewer_tokens_than_asked_is_an_error() -> None:
    clock = FakeClock()
    with pytest.raises(RuntimeError, match="generate made 3 tokens where 4 were asked"):
        one_sample(stepping_generator(clock, 0.5, 0.1, made=3), 4, clock=clock)


def test_without_a_step_clock_the_first_token_comes_from_a_one_token_call() -> None:
    clock = FakeClock()

    def generate(new_tokens: int) -> None:
        clock.now += 0.5 + 0.1 * (new_tokens - 1)

    whole, first, steps = one_sample(Generator(generate, lambda output: output), 5, clock=clock)
    assert (whole, first) == pytest.approx((0.9, 0.5)) and steps == pytest.approx((0.1,))


def test_measure_generation_reports_every_figure_from_its_samples() -> None:
    clock = FakeClock()
    measured = measure_generation(stepping_generator(clock, 0.4, 0.1), 4, 2, TimingSpec(warmup=1, repeat=5, number=3), clock=clock)
    assert len(measured.calls_s) == 5 and measured.token_clock == EACH_STEP and measured.warmup_calls >= 1
    row = measured.row_fields()
    assert row["generate_s"] == pytest.approx(0.7) and row["ttft_s"] == pytest.approx(0.4) and row["ttft_s"] < row["generate_s"]
    assert row["tpot_s"] == pytest.approx(0.1) and row["tpot_p90_s"] == pytest.approx(0.1)
    assert row["tokens_per_s"] == pytest.approx(2 * 4 / 0.7)  # batch x new tokens over the whole call
    assert row["number"] == 1 and row["repeat"] == 5 and json.loads(row["samples_s"]) == pytest.approx([0.7] * 5)
    assert json.loads(row["ttft_samples_s"]) == pytest.approx([0.4] * 5) and json.loads(row["tpot_samples_s"]) == pytest.approx([0.1] * 5)
    assert (row["token_agreement"], row["first_divergence"]) == ("", "")


def test_the_median_and_90th_percentile_of_the_steps_are_over_every_step_of_every_sample() -> None:
    measured = GenerationMeasurement(
        calls_s=(1.0, 1.2), ttft_s=(0.1, 0.2), steps_s=((0.1, 0.1, 0.5), (0.2, 0.2, 0.3)), batch_size=1, new_tokens=4,
        token_clock=TWO_CALLS, token_agreement=0.5, first_divergence=3,
    )  # fmt: skip
    row = measured.row_fields()
    assert row["tpot_s"] == pytest.approx(0.2) and row["tpot_p90_s"] == pytest.approx(np.percentile([0.1, 0.1, 0.5, 0.2, 0.2, 0.3], 90))
    assert row["generate_s"] == pytest.approx(1.1) and (row["token_agreement"], row["first_divergence"], row["token_clock"]) == (0.5, 3, TWO_CALLS)


def test_later_tokens_that_would_take_no_time_are_left_empty() -> None:
    # "Two calls" beside other work: in most samples the one-token call outlasted the whole call.
    measured = GenerationMeasurement(
        calls_s=(0.005, 0.0047, 0.0092), ttft_s=(0.0081, 0.0079, 0.0070), steps_s=((-0.001,), (-0.0011,), (0.0007,)), batch_size=1,
        new_tokens=4, token_clock=TWO_CALLS,
    )  # fmt: skip
    row = measured.row_fields()
    assert (row["tpot_s"], row["tpot_p90_s"]) == ("", "") and row["ttft_s"] == pytest.approx(0.0079)
    assert row["generate_s"] == pytest.approx(0.005) and json.loads(row["tpot_samples_s"]) == pytest.approx([-0.001, -0.0011, 0.0007])
