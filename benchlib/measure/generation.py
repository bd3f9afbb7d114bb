"""How a generate cell is timed (`workloads/generate.py` says what it computes). Each sample gives the whole call
(`generate_s`), the time to the first token (`ttft_s`: the prefill over the prompt and the first token) and the time of
every later token (`tpot_s`: a decode step over the key/value cache).

Where the generation loop runs in Python (transformers' `generate`: PyTorch, and optimum's ONNX Runtime and OpenVINO
models), its `StepClock` is read at each token inside the call (`token_clock` "each step"). Where it is one compiled
graph (TensorFlow's `generate` in `tf.function`), nothing inside can be seen: the first token is timed by a call that
generates one token, and a later token's time is the rest of the whole call over the tokens after the first ("two calls").
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchlib.backends._generate import Generator
from benchlib.measure.device_state import DeviceMonitor, DeviceState
from benchlib.measure.interference import Interference, InterferenceMeter
from benchlib.measure.memory import CellPeakMemory
from benchlib.measure.timing import Clock, Measurement, Sync, TimingSpec, no_sync, sampled

EACH_STEP = "each step"  # the clock read at each token inside the call
TWO_CALLS = "two calls"  # the first token from a one-token call; the later ones from the rest of the whole call


def _blank(value: float | int | None) -> float | int | str:
    return "" if value is None else value


@dataclass(frozen=True)
class GenerationMeasurement:
    """The samples of one generate cell: per sample, the whole call, the first token and the later tokens' times."""

    calls_s: tuple[float, ...]
    ttft_s: tuple[float, ...]
    steps_s: tuple[tuple[float, ...], ...]  # per sample, each token after the first (TWO_CALLS: their mean, once)
    batch_size: int
    new_tokens: int
    token_clock: str
    first_call_s: float | None = None
    prepare_s: float | None = None
    stop_reason: str = ""
    warmup_calls: int = 0
    interference: Interference | None = None
    warmup_s: float | None = None
    warmup_stop: str = ""
    device: DeviceState | None = None  # the device over the samples: energy per token in the row
    peak_memory_bytes: int | None = None
    token_agreement: float | None = None
    first_divergence: int | None = None
    timing: Measurement = field(init=False)

    def __post_init__(self) -> None:
        whole = Measurement(
            samples_s=self.calls_s, number=1, first_call_s=self.first_call_s, stop_reason=self.stop_reason,
            peak_memory_bytes=self.peak_memory_bytes, prepare_s=self.prepare_s, warmup_calls=self.warmup_calls,
            interference=self.interference, warmup_s=self.warmup_s, warmup_stop=self.warmup_stop,
        )  # fmt: skip
        object.__setattr__(self, "timing", whole)

    @property
    def tokens_generated(self) -> int:
        """The tokens the samples generated (with "two calls", each sample's one-token call too)."""
        per_sample = self.new_tokens + (1 if self.token_clock == TWO_CALLS else 0)
        return len(self.calls_s) * self.batch_size * per_sample

    def row_fields(self) -> dict[str, Any]:
        """The columns of a results row: the whole call's timing columns (as a forward cell's), and generation's own."""
        steps = [step for sample in self.steps_s for step in sample]  # every token after the first, of every sample
        if steps and np.median(steps) <= 0:  # "two calls" beside other work: the one-token call outlasted the whole call
            steps = []
        generate_s = self.timing.median_s
        return {
            **self.timing.row_fields(), "generate_s": generate_s, "ttft_s": float(np.median(self.ttft_s)),
            "ttft_samples_s": json.dumps(list(self.ttft_s)), "tpot_s": _blank(float(np.median(steps)) if steps else None),
            "tpot_p90_s": _blank(float(np.percentile(steps, 90)) if steps else None),
            "tpot_samples_s": json.dumps([float(np.median(sample)) for sample in self.steps_s if sample]),
            "tokens_per_s": self.batch_size * self.new_tokens / generate_s, "token_clock": self.token_clock,
            "token_agreement": _blank(self.token_agreement), "first_divergence": _blank(self.first_divergence),
            **(self.device.row_fields(self.tokens_generated, "token", self.tokens_generated / max(len(self.calls_s), 1)) if self.device is not None else {}),
        }  # fmt: skip


@dataclass
class _Samples:
    """What `measure_generation` collects besides the whole calls."""

    ttft_s: list[float] = field(default_factory=list)
    steps_s: list[tuple[float, ...]] = field(default_factory=list)


def one_sample(generator: Generator, new_tokens: int, sync: Sync = no_sync, clock: Clock = time.perf_counter) -> tuple[float, float, tuple[float, ...]]:
    """Time one sample: (the whole call, the first token, each later token). With a step clock, one call of `new_tokens`;
    without, a call of one token (the first token) and then the whole call."""
    if generator.clock is None:
        start = clock()
        sync(generator.generate(1))
        middle = clock()
        sync(generator.generate(new_tokens))
        end = clock()
        whole, first = end - middle, middle - start
        return whole, first, ((whole - first) / (new_tokens - 1),)
    generator.clock.start()
    start = clock()
    sync(generator.generate(new_tokens))
    end = clock()
    ticks = generator.clock.times
    if len(ticks) != new_tokens:
        raise RuntimeError(f"generate made {len(ticks)} tokens where {new_tokens} were asked")
    return end - start, ticks[0] - start, tuple(np.diff(ticks).tolist())


def measure_generation(
    generator: Generator, new_tokens: int, batch_size: int, spec: TimingSpec, sync: Sync = no_sync, clock: Clock = time.perf_counter,
    meter: InterferenceMeter | None = None, first_call_s: float | None = None, prepare_s: float | None = None,
    monitor: DeviceMonitor | None = None, memory: CellPeakMemory | None = None,
) -> GenerationMeasurement:  # fmt: skip
    """Time generation as the forward workload times its call (`timing.sampled`): warm-up until the whole call is stable,
    then `spec.repeat` samples (or until the mean of the whole call is known well enough), one sample per call
    (`spec.number` is not used: a call of generate is long enough to time on its own), garbage collection off."""
    collected = _Samples()

    def warm_call() -> None:
        one_sample(generator, new_tokens, sync, clock)

    def take() -> float:
        whole, first, steps = one_sample(generator, new_tokens, sync, clock)
        collected.ttft_s.append(first)
        collected.steps_s.append(steps)
        return whole

    taken = sampled(take, warm_call, spec, sync, clock, meter, monitor, memory)
    return GenerationMeasurement(
        calls_s=tuple(taken.samples), ttft_s=tuple(collected.ttft_s), steps_s=tuple(collected.steps_s), batch_size=batch_size,
        new_tokens=new_tokens, token_clock=EACH_STEP if generator.clock is not None else TWO_CALLS, first_call_s=first_call_s,
        prepare_s=prepare_s, stop_reason=taken.reason, warmup_calls=taken.warmup_calls, interference=taken.interference,
        warmup_s=taken.warmup_s, warmup_stop=taken.warmup_stop, device=taken.device,
    )  # fmt: skip
