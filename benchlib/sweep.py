"""The sweep: every cell of the grid in one environment, one row per cell, written as it finishes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from benchlib import status
from benchlib.backends import Backend, load_backend
from benchlib.catalogue import ModelSpec, get_model
from benchlib.environment_info import describe_environment
from benchlib.limits import apply_memory_limit
from benchlib.locking import environment_lock
from benchlib.memory import CellPeakMemory
from benchlib.params import BenchmarkParams, validate_params
from benchlib.recovery import clear_in_flight, mark_in_flight, record_crash, repair_results
from benchlib.results import ENVIRONMENT_FILE, RESULTS_FILE, ResultsWriter, finished_cells, make_row, read_results, write_json
from benchlib.timing import TimingSpec, measure, time_first_call

Cell = tuple[str, int, int]  # model, batch size, sequence length


def grid_cells(params: BenchmarkParams) -> list[Cell]:
    """Every cell of the grid, in the order it is measured: model, then batch size, then sequence length."""
    return [(m, b, s) for m in params.models for b in params.batch_sizes for s in params.sequence_lengths]


def timing_spec(params: BenchmarkParams) -> TimingSpec:
    """How each cell of this run is timed."""
    return TimingSpec(
        warmup=params.warmup, repeat=params.repeat, number=params.number, target_rel_ci=params.target_rel_ci,
        max_cell_seconds=params.max_cell_seconds, min_samples=params.min_samples,
    )  # fmt: skip


def measure_cell(backend: Backend, model: Any, spec: ModelSpec, params: BenchmarkParams, batch_size: int, sequence_length: int) -> tuple[str, Any, str]:
    """Time one cell on a built model: (status, measurement or None, reason)."""
    try:
        with backend.inference_context(), CellPeakMemory(backend) as peak:
            inputs = backend.make_inputs(spec.vocab_size(params.model_scale), batch_size, sequence_length, params.seed)
            call, first_call_s = time_first_call(lambda: backend.prepare(model, inputs), backend.sync)
            measurement = measure(call, timing_spec(params), backend.sync, first_call_s=first_call_s)
        return status.OK, dataclasses.replace(measurement, peak_memory_bytes=peak.bytes), ""
    except Exception as exc:  # any failure ends this cell only
        return (status.OOM if status.is_out_of_memory(exc) else status.ERROR), None, status.describe(exc)


def sweep_model(
    backend: Backend, spec: ModelSpec, params: BenchmarkParams, shapes: list[tuple[int, int]],
    emit: Callable[..., None], begin: Callable[[Cell], None],
) -> None:  # fmt: skip
    """Measure `shapes` of one model, building it once and only if a shape needs it.

    `begin(cell)` is called before a cell's model is built or measured, `emit(cell, status, ...)` when it ends.
    """
    unsupported = spec.unsupported_reason(params.framework, params.mode)
    model, build_failure = None, None
    for batch_size, sequence_length in shapes:
        cell = (spec.name, batch_size, sequence_length)
        if not spec.fits(sequence_length):
            emit(cell, status.TOO_LONG, reason=f"longer than the model's maximum of {spec.max_sequence_length} positions")
        elif unsupported:
            emit(cell, status.UNSUPPORTED, reason=unsupported)
        else:
            begin(cell)
            if model is None and build_failure is None:
                try:
                    model = backend.build(spec, params.model_scale)
                except Exception as exc:  # the model's cells fail, the sweep goes on
                    build_failure = (status.OOM if status.is_out_of_memory(exc) else status.ERROR, f"building the model: {status.describe(exc)}")
            if build_failure:
                backend.free()
                emit(cell, build_failure[0], reason=build_failure[1])
                continue
            state, measurement, reason = measure_cell(backend, model, spec, params, batch_size, sequence_length)
            if state != status.OK:
                backend.free()
            emit(cell, state, measurement, reason)
    del model
    backend.free()


def run_environment(params: dict[str, Any] | BenchmarkParams, progress: bool = True) -> pd.DataFrame:
    """Measure every cell of one environment's grid; rows go to `<output_dir>/results.csv` as they finish.

    Cells that already have a row in that file are not measured again: a rerun resumes. A row
    cut off by a killed process is set aside, and a cell that was in flight when its process
    died gets a `crashed` row. Only one process at a time may write into `output_dir`.
    Returns all rows.
    """
    params = validate_params(params)
    output_dir = Path(params.output_dir)
    apply_memory_limit(params.memory_limit_gb)
    with environment_lock(output_dir):
        return _run_locked(params, output_dir, progress)


def _run_locked(params: BenchmarkParams, output_dir: Path, progress: bool) -> pd.DataFrame:
    """`run_environment` once the folder's lock is held."""
    results_path = output_dir / RESULTS_FILE
    repair_results(results_path)
    record_crash(output_dir, "the process measuring this cell stopped before writing its row")
    done = finished_cells(read_results(results_path)) if results_path.exists() and results_path.stat().st_size else set()
    todo = [cell for cell in grid_cells(params) if cell not in done]

    backend = load_backend(params.framework, params.mode, params.device, params.num_threads)
    write_json(output_dir / ENVIRONMENT_FILE, describe_environment(params.model_dump(), backend.settings(), backend.versions()))
    environment = {key: getattr(params, key) for key in ("environment", "framework", "mode", "device", "model_scale")}

    with ResultsWriter(output_dir) as writer, tqdm(total=len(todo), desc=params.environment, disable=not progress) as bar:

        def row_of(cell: Cell) -> dict[str, Any]:
            model, batch_size, sequence_length = cell
            return {**environment, "model": model, "batch_size": batch_size, "sequence_length": sequence_length}

        def begin(cell: Cell) -> None:
            mark_in_flight(output_dir, row_of(cell))
            bar.set_postfix_str(f"{cell[0]} {cell[1]}x{cell[2]}")

        def emit(cell: Cell, state: str, measurement: Any = None, reason: str = "") -> None:
            writer.append(make_row(row_of(cell), state, measurement, reason))
            clear_in_flight(output_dir)
            bar.set_postfix_str(f"{cell[0]} {cell[1]}x{cell[2]} {state}")
            bar.update()

        try:
            for name in dict.fromkeys(model for model, _, _ in todo):
                shapes = [(b, s) for model, b, s in todo if model == name]
                sweep_model(backend, get_model(name), params, shapes, emit, begin)
        except KeyboardInterrupt:  # stopped by the user, not a crash: the cell is measured again next time
            clear_in_flight(output_dir)
            raise
    return read_results(results_path)
