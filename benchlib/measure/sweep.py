"""The sweep: every cell of the grid in one environment, one row per cell, written as it finishes."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from benchlib import status
from benchlib.backends import (
    TOLERANCE, Backend, backend_info, installed, is_out_of_memory, load_backend, model_class, not_installed, not_installed_message, tolerance_key,
    resolve_threads, unsupported_reason, versions_of, without_scikit_learn_in_transformers,
)
from benchlib.config.catalogue import ModelSpec
from benchlib.config.models import checkpoint_digest, has_tokenizer
from benchlib.config.params import CELL, CONCURRENCY, BenchmarkParams, validate_params
from benchlib.machine import usable_cores
from benchlib.measure.concurrency import measure_concurrency
from benchlib.measure.flops import analytic_flops, has_formula
from benchlib.measure.device_state import DeviceMonitor, make_monitor
from benchlib.measure.generation import GenerationMeasurement, measure_generation
from benchlib.measure.interference import METHOD as INTERFERENCE_METHOD
from benchlib.measure.interference import InterferenceMeter, make_meter
from benchlib.measure.load import ScenarioRun, interference_columns, measure_scenario
from benchlib.measure.memory import CellPeakMemory, collector_paused, imports_frozen
from benchlib.measure.memory_limit import apply_memory_limit, at_memory_limit
from benchlib.measure.probe import PROBE_WORKLOAD, run_probe
from benchlib.measure.quality import quality_columns, served_quality
from benchlib.measure.timing import Measurement, TimingSpec, measure, prepare_and_call_once
from benchlib.scenarios.loadgen import LOADGEN_DISTRIBUTION
from benchlib.store.environment import describe_environment, earlier_probes, write_environment
from benchlib.store.cache import Artefact, recording
from benchlib.store.disk import is_disk_full, raise_if_disk_full
from benchlib.store.layout import results_path
from benchlib.store.locking import environment_lock
from benchlib.store.recovery import clear_in_flight, in_flight_path, mark_in_flight, resolve_in_flight, row_of_cell
from benchlib.store.results import ResultsWriter, finished_cells, is_true, make_row, read_results, repair_results
from benchlib.workloads import forward, generate
from benchlib.workloads.agreement import Agreement
from benchlib.workloads.inputs import cell_inputs, load_tokenizer
from benchlib.workloads.quality import Prepared

Cell = tuple[str, int, int, str]  # model, batch size, sequence length, scenario (a load scenario's: max_batch, its longest request)


def grid_cells(params: BenchmarkParams) -> list[Cell]:
    """Every cell of the grid, in the order it is measured: model, then scenario, batch size and sequence length."""
    return [(m, b, s, sc) for m in params.models for sc in params.scenario for b in params.batch_sizes for s in params.sequence_lengths]


def timing_spec(params: BenchmarkParams) -> TimingSpec:
    """How each cell of this run is timed."""
    return TimingSpec(
        warmup=params.warmup, warmup_max_seconds=params.warmup_max_seconds, repeat=params.repeat, number=params.number,
        target_rel_ci=params.target_rel_ci, max_cell_seconds=params.max_cell_seconds, min_samples=params.min_samples,
    )  # fmt: skip


def measure_cell(
    backend: Backend, model: Any, spec: ModelSpec, params: BenchmarkParams, batch_size: int, sequence_length: int,
    meter: InterferenceMeter | None = None, monitor: DeviceMonitor | None = None,
) -> tuple[str, Measurement | GenerationMeasurement | None, str, dict[str, Any]]:  # fmt: skip
    """Time one cell of the run's workload on a built model: (status, measurement or None, reason, the row's input and
    agreement columns). A forward cell whose output is beyond the precision's tolerance is an `error`; generated tokens
    that part from eager PyTorch float32's are reported in the row, not an error."""
    peak = CellPeakMemory(backend)
    timed = _forward_cell if params.workload == "forward" else _generate_cell
    try:
        with backend.inference_context(), peak:
            ids = cell_inputs(spec, params.model_scale, params.inputs, params.text_file, batch_size, sequence_length, params.seed)
            measurement, (state, reason), columns = timed(backend, model, spec, params, backend.as_inputs(ids.ids), meter, monitor, peak)
        measurement = dataclasses.replace(measurement, peak_memory_bytes=peak.bytes)
    except Exception as exc:  # any failure ends this cell only
        raise_if_interrupted(exc)
        return (*failure(exc, params, peak.bytes if backend.device == "cpu" else None), {})
    return state, measurement, reason, {"inputs": ids.kind, **columns}


def _forward_cell(
    backend: Backend, model: Any, spec: ModelSpec, params: BenchmarkParams, inputs: Any, meter: InterferenceMeter | None,
    monitor: DeviceMonitor | None = None, memory: CellPeakMemory | None = None,
) -> tuple[Measurement, tuple[str, str], dict[str, Any]]:  # fmt: skip
    """One forward pass timed, and its output compared: (measurement, (status, reason), agreement columns, and on a GPU
    the busy share of one profiled call after the samples: `launch_busy_columns`)."""
    call, prepare_s, first_call_s = prepare_and_call_once(lambda: forward.prepare_call(backend, model, inputs), backend.sync)
    measurement = measure(call, timing_spec(params), backend.sync, first_call_s=first_call_s, prepare_s=prepare_s, meter=meter, monitor=monitor, memory=memory)
    busy = launch_busy_columns(backend.device_busy_s(call), measurement.median_s)
    compared = forward.compare(backend, model, inputs, call(), spec.task)
    if compared is None:
        return measurement, (status.OK, ""), busy
    columns = {"agreement_metric": compared.metric, "agreement": compared.value, **busy}
    return dataclasses.replace(measurement, max_abs_diff=compared.max_abs_diff), within_tolerance(compared, tolerance_key(params.precision, params.options)), columns


LAUNCH_BOUND_BELOW = 0.5  # a GPU busy less than half of a call waits for the Python that launches its kernels


def launch_busy_columns(busy_s: float | None, call_s: float) -> dict[str, Any]:
    """The GPU's busy time in one call (the sum of its kernels' times, profiled), its share of the call's time
    (`gpu_busy`, at most 1) and whether the cell is launch-bound (busy less than LAUNCH_BOUND_BELOW of the call); none
    where the backend cannot profile its device (a CPU)."""
    if busy_s is None or call_s <= 0:
        return {}
    share = min(busy_s / call_s, 1.0)  # kernels on several streams can overlap past the wall time
    return {"gpu_busy_s": busy_s, "gpu_busy": share, "launch_bound": share < LAUNCH_BOUND_BELOW}


def _generate_cell(
    backend: Backend, model: Any, spec: ModelSpec, params: BenchmarkParams, inputs: Any, meter: InterferenceMeter | None,
    monitor: DeviceMonitor | None = None, memory: CellPeakMemory | None = None,
) -> tuple[GenerationMeasurement, tuple[str, str], dict[str, Any]]:  # fmt: skip
    """Generation from the prompt `inputs` timed, and its first call's tokens compared: (measurement, (status, reason), {})."""
    start = time.perf_counter()
    generator = generate.prepare_generator(backend, model, inputs)
    prepared = time.perf_counter()
    output = generator.generate(params.new_tokens)
    backend.sync(output)
    first_call_s = time.perf_counter() - prepared
    ids = generator.new_ids(output)
    if ids.shape[1] != params.new_tokens:
        raise RuntimeError(f"generate made {ids.shape[1]} tokens where {params.new_tokens} were asked")
    batch_size = int(ids.shape[0])
    measurement = measure_generation(
        generator, params.new_tokens, batch_size, timing_spec(params), backend.sync, meter=meter, first_call_s=first_call_s,
        prepare_s=prepared - start, monitor=monitor, memory=memory,
    )  # fmt: skip
    compared = generate.compare_tokens(backend, model, inputs, ids)
    if compared is not None:
        measurement = dataclasses.replace(measurement, token_agreement=compared[0], first_divergence=compared[1])
    return measurement, (status.OK, ""), {}


UnderLoad = Callable[[Cell, Any, ModelSpec, dict[str, Any]], tuple[str, None, str, dict[str, Any]]]
# (model name, how to score it) -> its quality columns and prepared set: scored once per model and kernel
ScoredQuality = Callable[[str, Callable[[], tuple[dict[str, Any], Prepared | None]]], tuple[dict[str, Any], Prepared | None]]


def measure_load_cell(
    backend: Backend, model: Any, spec: ModelSpec, params: BenchmarkParams, scenario: str, serving: dict[str, Any],
    env_dir: Path, meter: InterferenceMeter | None, attempt: int, emit_trial: Callable[[dict[str, Any]], None], first_trial: int = 1,
    monitor: DeviceMonitor | None = None,
) -> tuple[str, None, str, dict[str, Any]]:  # fmt: skip
    """One model under one load scenario (`measure.load`): (status, None, reason, the row's columns). The streams' calls
    are prepared at the model's first scenario and kept in `serving` for its others (a failure to prepare them too). A
    served output beyond the precision's tolerance makes the cell an `error`, as a cell's does."""
    try:
        if "run" not in serving and "failure" not in serving:
            start = time.perf_counter()
            accuracy_rows = serving["quality"].rows if serving.get("quality") is not None else ()
            with backend.inference_context():
                serving["run"] = ScenarioRun(backend, model, spec, params, env_dir, meter, accuracy_rows, monitor)
            serving["prepare_s"] = time.perf_counter() - start
        if "failure" in serving:
            return serving["failure"]
        run = serving["run"]
        if scenario == CONCURRENCY:
            state, reason, columns, interference = measure_concurrency(run, attempt, emit_trial, first_trial)
        else:
            state, reason, columns, interference = measure_scenario(run, scenario, attempt, emit_trial, first_trial)
        if serving.get("quality") is not None and not run.generating and "served" not in serving:
            serving["served"] = accuracy_under_load(run, serving["quality"], env_dir, spec, params)
        columns = {**columns, **serving.get("served", {})}
        if run.compared is not None and (judged := within_tolerance(run.compared, tolerance_key(params.precision, params.options)))[0] != status.OK:
            state, reason = judged  # served fast and wrong: not a result, as a cell's
    except Exception as exc:  # this cell fails, and the model's other scenarios if it failed preparing
        raise_if_interrupted(exc)
        ended = (*failure(exc, params), {})
        if "run" not in serving:
            serving["failure"] = ended
        return ended
    return state, None, reason, {**columns, **interference_columns(interference, params.max_interference), "prepare_s": serving["prepare_s"]}


def accuracy_under_load(run: ScenarioRun, prepared: Prepared, env_dir: Path, spec: ModelSpec, params: BenchmarkParams) -> dict[str, Any]:
    """The model's accuracy test under load (`measure.quality.served_quality`) through the scenario's own streams; a
    failure is the row's `quality_reason`, and its scenarios' figures stand."""
    try:
        with run.backend.inference_context():
            return served_quality(prepared, run.calls, params.max_batch, env_dir, spec.name, params.current_round, params.seed)
    except Exception as exc:  # noqa: BLE001
        raise_if_interrupted(exc)
        raise_if_disk_full(exc, env_dir)
        return {"served_quality_value": "", "accuracy_log": "", "quality_reason": f"accuracy test under load failed: {status.describe(exc)}"}


def next_trial(results: Path, cell: dict[str, Any]) -> int:
    """The number of a load cell's next server trial: after those that a stopped run left in `results` for the same cell,
    round and attempt, so that every trial row stays unique."""
    if not results.exists() or results.stat().st_size == 0:
        return 1
    trials = read_results(results, trials=True)
    numbers = pd.to_numeric(trials.loc[row_of_cell(trials, cell), "trial"], errors="coerce")
    return int(numbers.max()) + 1 if numbers.notna().any() else 1


def within_tolerance(compared: Agreement, precision: str) -> tuple[str, str]:
    """(status, reason) of a measured cell whose output differs from eager PyTorch float32's as `compared` says: an `error`
    beyond the precision's tolerance at the output's scale (a fast wrong answer is not a result), else `ok`."""
    limit = TOLERANCE[precision] * compared.scale
    if compared.max_abs_diff <= limit:
        return status.OK, ""
    return status.ERROR, (
        f"output differs from eager PyTorch float32 by {compared.max_abs_diff:.3g}, beyond the {precision} tolerance of "
        f"{TOLERANCE[precision]:g} times the output's scale ({compared.scale:.3g})"
    )


def raise_if_interrupted(exc: BaseException) -> None:
    """Raise KeyboardInterrupt when `exc` was raised while an interrupt (the user's Ctrl-C, or the runner's stop)
    unwound: a library's clean-up can fail on its half-done state and replace the interrupt (torch's vmap, seen
    asserting `!dynamicLayerStack.empty()` in a kernel interrupted during a GPT-2 cell). The cell was stopped, not
    failed: it must not be recorded as an `error`, which a rerun would keep, but measured again."""
    seen, chain = set(), [exc]
    while chain:
        link = chain.pop()
        if isinstance(link, KeyboardInterrupt):
            raise KeyboardInterrupt from exc
        if link is not None and id(link) not in seen:
            seen.add(id(link))
            chain += [link.__cause__, link.__context__]


def failure(exc: Exception, params: BenchmarkParams, peak_resident: int | None = None) -> tuple[str, None, str]:
    """(status, None, reason) of a failed cell: `unsupported` where the backend says it cannot run the model, `crashed`
    where a process it measured through died (a serving engine), `oom` for an allocator's error, or for any error raised while the process is at `memory_limit_gb`
    (TensorFlow reports some failed allocations under other names). A full disk is no cell's failure: it is raised
    as a DiskFullError, which stops the sweep (a row recorded for it would keep the cell from being measured again)."""
    raise_if_disk_full(exc, Path(params.output_dir))
    if isinstance(exc, status.Unsupported):
        return status.UNSUPPORTED, None, str(exc)
    if isinstance(exc, status.Crashed):
        return status.CRASHED, None, str(exc)
    if is_out_of_memory(exc):
        return status.OOM, None, status.describe(exc)
    why = at_memory_limit(params.memory_limit_gb, peak_resident)
    return (status.OOM, None, f"{status.describe(exc)} ({why})") if why else (status.ERROR, None, status.describe(exc))


def sweep_model(
    backend: Backend, spec: ModelSpec, params: BenchmarkParams, shapes: list[tuple[int, int, str]],
    emit: Callable[..., None], begin: Callable[[Cell], None], meter: InterferenceMeter | None = None, unsupported: str | None = None,
    under_load: UnderLoad | None = None, scored_quality: ScoredQuality = lambda model, score: score(), monitor: DeviceMonitor | None = None,
) -> None:  # fmt: skip
    """Measure `shapes` (batch size, sequence length, scenario) of one model, building it once and only if a shape needs
    it; with `unsupported` (`model_unsupported`'s reason) every cell that fits is `unsupported`. A load scenario's cell is
    measured by `under_load` (`measure_load_cell`), which prepares the model's serving once for all its scenarios.

    `begin(cell)` is called before a cell's model is built or measured, `emit(cell, status, ...)` when it ends. Once built,
    the model's quality on the user's data is scored (`measure.quality`), or taken from `scored_quality`'s record of an
    earlier sweep of this kernel; its columns go in every row of the model.
    """
    model, build_failure, attention, built, serving, quality = None, None, "", {}, {}, {}
    for batch_size, sequence_length, scenario in shapes:
        cell = (spec.name, batch_size, sequence_length, scenario)
        if not spec.fits(params.positions(sequence_length)):
            emit(cell, status.TOO_LONG, reason=too_long(spec, params, sequence_length))
        elif unsupported:
            emit(cell, status.UNSUPPORTED, reason=unsupported)
        else:
            begin(cell)
            if model is None and build_failure is None:
                try:
                    with recording() as artefacts:
                        start = time.perf_counter()
                        model = backend.build(spec, params.model_scale)
                        built = build_cost(time.perf_counter() - start, artefacts)
                    attention = backend.attn_implementation(model)
                    quality, serving["quality"] = scored_quality(spec.name, lambda: quality_columns(backend, model, spec, params))
                except Exception as exc:  # the model's cells fail, the sweep goes on
                    raise_if_interrupted(exc)
                    state, _, reason = failure(exc, params)
                    build_failure = (state, f"building the model: {reason}")
            if build_failure:
                backend.free()
                emit(cell, build_failure[0], reason=build_failure[1])
                continue
            if scenario == CELL:
                state, measurement, reason, columns = measure_cell(backend, model, spec, params, batch_size, sequence_length, meter, monitor)
            else:
                assert under_load is not None, "a load scenario's cell needs `under_load`"
                state, measurement, reason, columns = under_load(cell, model, spec, serving)
            if state != status.OK:
                backend.free()
            emit(cell, state, measurement, reason, attn_implementation=attention, **{**built, **quality, **columns})
    del model
    serving.clear()  # the streams' calls hold the model
    backend.free()


def too_long(spec: ModelSpec, params: BenchmarkParams, sequence_length: int) -> str:
    """The reason of a cell longer than the model's positions."""
    if params.workload == "generate":
        return (
            f"a prompt of {sequence_length} and {params.new_tokens} new tokens need {params.positions(sequence_length)} positions, "
            f"beyond the model's maximum of {spec.max_sequence_length}"
        )  # fmt: skip
    return f"longer than the model's maximum of {spec.max_sequence_length} positions"


def build_cost(seconds: float, artefacts: list[Artefact]) -> dict[str, Any]:
    """The cold-start columns of a model built in `seconds`, asking the build cache for `artefacts`:
    `export_s`, the seconds spent making artefacts now (weights, export, quantization, conversion; 0 when
    every one came from the cache, and then `cached` is true); `build_s`, the rest (loading, sessions,
    compiling); `cold_export_s`, what making them took when they were made (the cold start's share)."""
    distinct = list({artefact.path: artefact for artefact in reversed(artefacts)}.values())  # the first ask of each
    export_s = sum(artefact.made_s for artefact in distinct if not artefact.cached)
    return {
        "build_s": max(seconds - export_s, 0.0), "export_s": export_s, "cold_export_s": sum(artefact.made_s for artefact in distinct),
        "cached": all(artefact.cached for artefact in distinct) if distinct else "",
    }  # fmt: skip


def model_unsupported(backend: Backend, spec: ModelSpec, params: BenchmarkParams) -> str | None:
    """Why this environment cannot run `spec` on this machine (every cell of the model is `unsupported`), or None.
    A framework that is not installed comes first: its reason is the pip line that installs it; then LoadGen, for a load scenario."""
    return (
        not_installed(params.framework) or loadgen_missing(params)
        or unsupported_reason(spec, params.framework, params.mode, params.precision) or backend.unsupported()
    )  # fmt: skip


def loadgen_missing(params: BenchmarkParams) -> str | None:
    """Why a load scenario cannot run here (MLPerf's LoadGen is not installed, and the pip line), or None."""
    if params.scenario == [CELL] or installed(LOADGEN_DISTRIBUTION):
        return None
    return not_installed_message([LOADGEN_DISTRIBUTION], "loadgen")


def stream_threads(params: BenchmarkParams) -> int | str | None:
    """The backend's intra-op threads: `num_threads`, divided among a load scenario's `streams` (at least one each)."""
    if params.streams == 1:
        return params.num_threads
    threads = resolve_threads(params.num_threads)
    return max(1, (threads or usable_cores()) // params.streams)


def import_model_code(spec: ModelSpec, params: BenchmarkParams) -> None:
    """Import the `transformers` modules that build `spec` in this environment before the sweep freezes what
    is imported (`imports_frozen`). A failure is left for building the model to report in its cells."""
    try:
        spec.build_config(params.model_scale)
        model_class(spec, params.framework)
        if params.inputs == "text" and has_tokenizer(spec.source):
            load_tokenizer(str(spec.source), spec.trust_remote_code)
    except Exception as exc:  # reported by the build, cell by cell
        raise_if_interrupted(exc)


def prepare_environment(params: BenchmarkParams, output_dir: Path, models: list[str]) -> tuple[Backend, dict[str, str | None]]:
    """What a kernel does before its first cell: the environment's backend (its framework imported), why each of
    `models` cannot run here (None where it can), and the code of those that can imported (`import_model_code`)."""
    backend = load_backend(
        params.framework, params.mode, params.device, stream_threads(params), params.num_interop_threads,
        precision=params.precision, options=params.options, seed=params.seed, workload=params.workload, output_dir=output_dir,
        environment=params.environment,
    )  # fmt: skip
    unsupported = {name: model_unsupported(backend, params.model_spec(name), params) for name in models}
    without_scikit_learn_in_transformers()  # once the backend has told transformers which framework it may import
    for name in (name for name, reason in unsupported.items() if reason is None):
        import_model_code(params.model_spec(name), params)
    return backend, unsupported


def first_to_build(spec: ModelSpec, params: BenchmarkParams, shapes: list[tuple[int, int, str]]) -> Cell | None:
    """The first of `shapes` for which `sweep_model` builds the model (it fits the model), or None."""
    return next(((spec.name, b, s, sc) for b, s, sc in shapes if spec.fits(params.positions(s))), None)


def cells_to_remeasure(rows: pd.DataFrame, grid: list[Cell], attempt: int) -> list[Cell]:
    """Cells of `grid` whose kept row is `ok` but disturbed, measured fewer than `attempt` times so far."""
    if rows.empty:
        return []
    disturbed = rows[(rows["status"] == status.OK) & is_true(rows["disturbed"]) & (rows["attempts"] < attempt)]
    again = set(finished_cells(disturbed))  # rows of the current round only: see `_run_locked`
    return [cell for cell in grid if cell in again]


def nothing_to_measure(params: BenchmarkParams) -> bool:
    """Whether `run_environment` on `params` would measure nothing: every cell of the grid has its row of this round, none
    is due to be measured again (`cells_to_remeasure`'s first attempt, as `_run_locked` asks), no cell was left in flight
    and no row was cut off. A rerun's runner then starts no kernel for the environment (`launch.execution.run_job`)."""
    output_dir = Path(params.output_dir)
    results = results_path(output_dir)
    if in_flight_path(output_dir).exists() or not results.exists() or not results.read_bytes().endswith(b"\n"):
        return False
    rows = read_results(results)
    grid = grid_cells(params)
    if not finished_cells(rows, params.current_round).issuperset(grid):
        return False
    return params.remeasure < 1 or not cells_to_remeasure(rows[rows["round"] == params.current_round], grid, 2)


def changed_options(params: BenchmarkParams) -> str:
    """The backend options that differ from its defaults, as JSON ("" when none): the `options` column."""
    defaults = backend_info(params.framework).options().model_dump()
    changed = {key: value for key, value in params.options.items() if defaults.get(key) != value}
    return json.dumps(changed, sort_keys=True) if changed else ""


def run_environment(params: dict[str, Any] | BenchmarkParams, progress: bool = True) -> pd.DataFrame:
    """Measure every cell of one environment's grid; rows go to `<output_dir>/results.csv` as they finish.

    Cells that already have a row for this round (`current_round`) in that file are not measured
    again: a rerun resumes. A row cut off by a killed process is set aside, and a cell that was
    in flight when its process died gets a `crashed` row, or is measured again when its runner was stopped
    too (`resolve_in_flight`). After the sweep, cells disturbed by other processes are measured
    again, up to `remeasure` times (each attempt is a row; `read_results` keeps the least
    disturbed). The speed probe runs at the start, before each model and at the end. A full disk stops the sweep with
    a DiskFullError (`store.disk`): no row is torn, and the cell in flight is measured again by the rerun.
    Only one process at a time may write into `output_dir`. Returns the kept rows.
    """
    params = validate_params(params)
    output_dir = Path(params.output_dir)
    apply_memory_limit(params.memory_limit_gb)
    with environment_lock(output_dir):
        return _run_locked(params, output_dir, progress)


def _run_locked(params: BenchmarkParams, output_dir: Path, progress: bool) -> pd.DataFrame:
    """`run_environment` once the folder's lock is held."""
    results = results_path(output_dir)
    repair_results(results)
    resolve_in_flight(output_dir)
    resuming = results.exists() and results.stat().st_size > 0
    done = finished_cells(read_results(results), params.current_round) if resuming else set()
    grid = grid_cells(params)
    todo = [cell for cell in grid if cell not in done]

    with collector_paused():  # the framework's and the models' imports, a sixth faster
        backend, unsupported = prepare_environment(params, output_dir, list(dict.fromkeys(cell[0] for cell in grid)))
    meter, monitor = make_meter(), make_monitor(params.device)
    description = describe_environment(params.model_dump(), backend.settings(), backend.versions(), versions_of(params.framework))
    description["interference"] = {"measured": meter is not None, "max_interference": params.max_interference, "method": INTERFERENCE_METHOD}
    description["device_state"] = monitor.describe()
    description["probe_workload"] = PROBE_WORKLOAD
    probes = earlier_probes(output_dir) if resuming else []
    environment = {key: getattr(params, key) for key in ("environment", "framework", "mode", "precision", "device", "model_scale")}
    environment["options"] = changed_options(params)
    environment["round"] = params.current_round

    def probe(label: str) -> float | str:
        try:
            record = {**run_probe(label).as_dict(), "round": params.current_round}
        except MemoryError as exc:  # at memory_limit_gb after a cell that ran out: the sweep goes on
            record = {"label": label, "round": params.current_round, "seconds": None, "error": status.describe(exc)}
        probes.append(record)
        write_environment(output_dir, {**description, "probes": probes})
        return "" if record["seconds"] is None else record["seconds"]

    with imports_frozen(), ResultsWriter(output_dir) as writer, tqdm(total=len(todo), desc=params.environment, disable=not progress) as bar:
        now = {"attempt": 1, "probe_s": probe("start")}

        def row_of(cell: Cell) -> dict[str, Any]:
            model, batch_size, sequence_length, scenario = cell
            spec = params.model_spec(model)
            return {
                **environment, "model": model, "task": spec.task, "weights": spec.weights, "batch_size": batch_size,
                "sequence_length": sequence_length, "scenario": scenario, "workload": params.workload,
                "new_tokens": params.new_tokens if params.workload == "generate" else "", **now,
                "model_digest": checkpoint_digest(spec.source) if spec.source else "",
            }  # fmt: skip

        def label(cell: Cell) -> str:
            return f"{cell[0]} {cell[1]}x{cell[2]}" + (f" {cell[3]}" if cell[3] != CELL else "")

        def begin(cell: Cell, probing: bool = False) -> None:
            # `probing`: marked before the speed probe that precedes its model (whose time it does not have yet)
            mark_in_flight(output_dir, {**row_of(cell), "probe_s": ""} if probing else row_of(cell))
            bar.set_postfix_str(label(cell))

        def under_load(cell: Cell, model: Any, spec: ModelSpec, serving: dict[str, Any]) -> tuple[str, None, str, dict[str, Any]]:
            def emit_trial(columns: dict[str, Any]) -> None:  # a server trial, or a test run again: a row of its own, before the cell's
                writer.append(make_row({**row_of(cell), **columns}, status.OK, reason=columns.get("reason", "")))
                rate = f" at {columns['target_qps']:.4g}/s" if columns["target_qps"] != "" else ""
                bar.set_postfix_str(f"{label(cell)} trial {columns['trial']}{rate}: {'VALID' if columns['valid'] else 'INVALID'}")

            return measure_load_cell(
                backend, model, spec, params, cell[3], serving, output_dir, meter, now["attempt"], emit_trial, next_trial(results, row_of(cell)),
                monitor,
            )  # fmt: skip

        def emit(cell: Cell, state: str, measurement: Measurement | GenerationMeasurement | None = None, reason: str = "", **build: Any) -> None:
            interference = measurement.interference if measurement else None
            disturbed = interference.disturbed(params.max_interference) if interference else ""
            spec = params.model_spec(cell[0])
            forward_pass = measurement and params.workload == "forward" and has_formula(spec)  # generation's FLOPs are not counted
            flops = analytic_flops(spec, params.model_scale, cell[1], cell[2]) if forward_pass else ""
            row = {**row_of(cell), "disturbed": disturbed, "flops": flops, **build}
            writer.append(make_row(row, state, measurement, reason))
            clear_in_flight(output_dir)
            bar.set_postfix_str(f"{label(cell)} {state}{' disturbed' if row['disturbed'] is True else ''}")
            bar.update()

        scored: dict[str, tuple[dict[str, Any], Prepared | None]] = {}

        def scored_quality(model: str, score: Callable[[], tuple[dict[str, Any], Prepared | None]]) -> tuple[dict[str, Any], Prepared | None]:
            if model not in scored:  # a cell measured again is not scored again
                bar.set_postfix_str(f"{model}: scoring its quality")
                scored[model] = score()
            return scored[model]

        def sweep(cells: list[Cell], why: str) -> None:
            for name in dict.fromkeys(cell[0] for cell in cells):
                spec = params.model_spec(name)
                shapes = [(b, s, sc) for model, b, s, sc in cells if model == name]
                # A kernel that dies in the probe or while building the model leaves a record of the cell it was working towards.
                if not unsupported[name] and (first := first_to_build(spec, params, shapes)) is not None:
                    begin(first, probing=True)
                now["probe_s"] = probe(f"before {name}{why}")
                sweep_model(backend, spec, params, shapes, emit, begin, meter, unsupported[name], under_load, scored_quality, monitor)

        try:
            sweep(todo, "")
            for attempt in range(2, params.remeasure + 2):
                rows = read_results(results)
                this_round = rows[rows["round"] == params.current_round]
                again = cells_to_remeasure(this_round, grid, attempt)
                if not again:
                    break
                now["attempt"] = attempt
                bar.total += len(again)
                sweep(again, f" (attempt {attempt}: {len(again)} disturbed cells)")
            probe("end")
        except KeyboardInterrupt:  # stopped by the user, not a crash: the cell is measured again next time
            clear_in_flight(output_dir)
            raise
        except Exception as exc:  # a full disk, not the cell's fault either: the rerun measures it again
            if is_disk_full(exc):
                clear_in_flight(output_dir)
                raise_if_disk_full(exc, output_dir)
            raise
    return read_results(results)
