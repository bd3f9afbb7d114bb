"""The timer's fidelity, in PyTorch: the kit against `torch.utils.benchmark`, its own overhead, `auto` against 30 × 3.

Used by notebooks/timer_fidelity.ipynb. Everything runs in the calling process (one PyTorch kernel).
"""

from __future__ import annotations

import itertools
import os
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from benchlib.backends import load_backend, unsupported_reason
from benchlib.config.catalogue import get_model
from benchlib.config.jobs import load_parameter_file
from benchlib.measure.timing import AUTO, Measurement, TimingSpec, measure, prepare_and_call_once
from benchlib.workloads.inputs import random_ids

STUDY_SPEC = TimingSpec(warmup=1, repeat=30, number=3)
TARGETS = {"median_diff_percent": 3.0, "overhead_us": 5.0, "call_reduction": 2.0, "mean_diff_percent": 3.0}


def prepared_calls(cells: list[dict[str, Any]], num_threads: int | None = None, seed: int = 0) -> Iterator[tuple[dict[str, Any], Any, Callable[[], Any]]]:
    """(cell, backend, call) for each cell in eager PyTorch on the CPU, the call run once.

    The caller times the call while it holds it (inside the backend's inference context); a
    model is built once for its consecutive cells. `cells`: dicts with model, scale, batch_size,
    sequence_length.
    """
    backend = load_backend("pytorch", "eager", "cpu", num_threads)
    for (model, scale), group in itertools.groupby(cells, key=lambda cell: (cell["model"], cell["scale"])):
        spec = get_model(model)
        built = backend.build(spec, scale)
        for cell in group:
            inputs = backend.as_inputs(random_ids(spec.vocab_size(scale), cell["batch_size"], cell["sequence_length"], seed))
            with backend.inference_context():
                call, _, _ = prepare_and_call_once(lambda: backend.prepare(built, inputs), backend.sync)
                yield cell, backend, call
        del built
        backend.free()


def compare_with_torch_timer(
    cells: list[dict[str, Any]], rounds: int = 5, kit_spec: TimingSpec = TimingSpec(warmup=1, repeat=10, number=3),
    timer_min_run_time: float = 0.5, num_threads: int | None = None,
) -> pd.DataFrame:  # fmt: skip
    """Per cell, the kit's median per call against `torch.utils.benchmark.Timer.blocked_autorange`'s.

    Both run in this process on the same call, interleaved over `rounds` (alternating which goes
    first); each side's median is over all its samples pooled across rounds.
    `cells`: dicts with model, scale, batch_size, sequence_length.
    """
    records = []
    for cell, backend, call in prepared_calls(cells, num_threads):
        import torch  # after the backend has applied num_threads
        from torch.utils.benchmark import Timer

        timer = Timer(stmt="call()", globals={"call": call}, num_threads=torch.get_num_threads())
        kit_samples: list[float] = []
        timer_samples: list[float] = []
        for round_index in range(rounds):
            for side in ("kit", "timer") if round_index % 2 == 0 else ("timer", "kit"):
                if side == "kit":
                    kit_samples += measure(call, kit_spec, backend.sync).samples_s
                else:
                    timer_samples += timer.blocked_autorange(min_run_time=timer_min_run_time).times
        kit_median, timer_median = statistics.median(kit_samples), statistics.median(timer_samples)
        records.append({
            **cell, "kit_median_s": kit_median, "timer_median_s": timer_median,
            "median_diff_percent": 100 * (kit_median / timer_median - 1),
            "kit_samples": len(kit_samples), "timer_blocks": len(timer_samples),
        })  # fmt: skip
    return pd.DataFrame(records)


def kit_overhead(numbers: tuple[int, ...] = (1, 3), repeat: int = 2000, rounds: int = 5) -> pd.DataFrame:
    """The kit's own time per timed call, measured on a no-op through the PyTorch backend's CPU sync.

    Per `number`: the median per-call time of a no-op (the lowest of `rounds` medians), in microseconds.
    It includes calling the no-op itself, the loop, the sync and the clock reads shared by `number` calls.
    """
    backend = load_backend("pytorch", "eager", "cpu")

    def no_op() -> None:
        return None

    records = []
    for number in numbers:
        spec = TimingSpec(warmup=10, repeat=repeat, number=number)
        medians = [measure(no_op, spec, backend.sync).median_s for _ in range(rounds)]
        records.append({"number": number, "overhead_us": 1e6 * min(medians), "samples": repeat * rounds})
    return pd.DataFrame(records)


def load_grid(grid_file: str | os.PathLike[str], fallback: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A grid file's values and its path, or `fallback` and "fallback" when the file does not exist."""
    path = Path(grid_file)
    if path.exists():
        return load_parameter_file(path), str(path)
    return fallback, "fallback"


def grid_cells(grid: dict[str, Any], models: list[str] | None = None) -> list[dict[str, Any]]:
    """The cells (model, scale, batch_size, sequence_length) of a grid that eager PyTorch can run.

    `models`, if given, keeps only those models.
    """
    scale = grid.get("model_scale", "full")
    cells = []
    for model in grid["models"]:
        spec = get_model(model)
        if (models and model not in models) or unsupported_reason(spec, "pytorch", "eager"):
            continue
        for batch_size in grid["batch_sizes"]:
            for sequence_length in grid["sequence_lengths"]:
                if spec.fits(sequence_length):
                    cells.append({"model": model, "scale": scale, "batch_size": batch_size, "sequence_length": sequence_length})
    return cells


def auto_against_fixed(cells: list[dict[str, Any]], auto_spec: TimingSpec, fixed_spec: TimingSpec = STUDY_SPEC, num_threads: int | None = None) -> pd.DataFrame:
    """Per cell, `repeat: auto` against a fixed repeat × number: calls used and agreement of the means.

    The two run back to back on the same call, alternating which goes first from cell to cell.
    Beside the means: each one's 95% confidence half-width (% of its mean), whether the two
    intervals overlap (when they do not, the machine's speed changed between the two runs more
    than either run's own spread), and the difference of the medians.
    """
    if not auto_spec.adaptive or fixed_spec.adaptive:
        raise ValueError(f"auto_spec needs repeat={AUTO!r} and fixed_spec a fixed repeat")
    records = []
    for index, (cell, backend, call) in enumerate(prepared_calls(cells, num_threads)):
        order = (auto_spec, fixed_spec) if index % 2 == 0 else (fixed_spec, auto_spec)
        measured = {spec.adaptive: measure(call, spec, backend.sync) for spec in order}
        auto, fixed = measured[True], measured[False]
        records.append({
            **cell, "auto_calls": auto.calls, "fixed_calls": fixed.calls, "auto_samples": len(auto.samples_s),
            "stop_reason": auto.stop_reason, "auto_mean_s": auto.mean_s, "fixed_mean_s": fixed.mean_s,
            "mean_diff_percent": 100 * (auto.mean_s / fixed.mean_s - 1),
            "auto_ci_percent": _half_width_percent(auto), "fixed_ci_percent": _half_width_percent(fixed),
            "intervals_overlap": auto.ci95_s[0] <= fixed.ci95_s[1] and fixed.ci95_s[0] <= auto.ci95_s[1],
            "median_diff_percent": 100 * (auto.median_s / fixed.median_s - 1),
        })  # fmt: skip
    return pd.DataFrame(records)


def _half_width_percent(measurement: Measurement) -> float:
    """Half-width of the mean's 95% confidence interval, in percent of the mean."""
    low, high = measurement.ci95_s
    return 100 * (high - low) / 2 / measurement.mean_s


def summary(timer: pd.DataFrame, overhead: pd.DataFrame, auto: pd.DataFrame) -> pd.DataFrame:
    """The figures against their targets: one row each with the value, the target and whether it is met."""
    worst_median = timer["median_diff_percent"].abs().max()
    worst_overhead = overhead["overhead_us"].max()
    reduction = auto["fixed_calls"].sum() / auto["auto_calls"].sum()
    worst_mean = auto["mean_diff_percent"].abs().max()
    rows = [
        ("largest |kit median / torch.utils.benchmark median - 1| (%)", worst_median, TARGETS["median_diff_percent"], worst_median <= TARGETS["median_diff_percent"]),
        ("kit overhead per timed call on a no-op (µs)", worst_overhead, TARGETS["overhead_us"], worst_overhead < TARGETS["overhead_us"]),
        ("calls of 30 × 3 / calls of auto (×)", reduction, TARGETS["call_reduction"], reduction >= TARGETS["call_reduction"]),
        ("largest |auto mean / 30 × 3 mean - 1| (%)", worst_mean, TARGETS["mean_diff_percent"], worst_mean <= TARGETS["mean_diff_percent"]),
    ]
    return pd.DataFrame(rows, columns=["figure", "value", "target", "met"])
