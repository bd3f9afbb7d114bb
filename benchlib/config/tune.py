"""A tune: the search for an environment's best serving settings under one objective, and the space it searches.

`tune: {objective, space}` in the parameters names the objective (`server`: the largest rate VALID under the bound;
`offline`: samples per second; `single-stream`: the lowest latency at its percentile) and the space: each knob a list of
values, the kit's (`KIT_KNOBS`) or a backend's own options (its options model says which and what values; in a space
shared by several environments, each backend's knobs apply to its own). A key of an option that is a table is a knob of
its own, `option.key` (a serving engine's `engine_args.max-num-seqs`: the value None leaves the key out). Without a
space, an automatic one: on a CPU, streams dividing the cores (the threads divided among them), `max_batch` in powers of two up to 16 where requests are
batched, and the knobs the backend declares worth trying (`BackendInfo.tune_knobs`); on a GPU, streams as CUDA streams
(1, 2 and 4), `max_batch` up to 64, the server's batch timeout, and the backend's GPU knobs (`BackendInfo.gpu_tune_knobs`:
PyTorch's compile mode and attention kernel). Values the environment's own options refuse beside them are left out. The
environment's own setting of every knob is always one of its values, so the best point tried is never worse than the
default by construction.
"""

from __future__ import annotations

from typing import Any, Literal, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from benchlib.backends import backend_info, frameworks
from benchlib.machine import usable_cores

OBJECTIVES: tuple[str, ...] = ("server", "offline", "single-stream")
# The kit's own knobs: threads (divided among the streams), streams, and how requests are batched.
KIT_KNOBS: tuple[str, ...] = ("streams", "num_threads", "num_interop_threads", "max_batch", "batch_timeout_ms")
AUTOMATIC_MAX_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16)
# On a GPU: the streams (each a CUDA stream of its own), larger batches, and how long a server's batch waits for more
GPU_STREAMS: tuple[int, ...] = (1, 2, 4)
GPU_MAX_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
GPU_BATCH_TIMEOUTS_MS: tuple[float, ...] = (0.0, 1.0, 2.0, 5.0)
Point = dict[str, Any]


class TuneSpec(BaseModel):
    """The `tune` block: the objective and the space (empty: the automatic space)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    objective: Literal[OBJECTIVES]  # type: ignore[valid-type]
    space: dict[str, list[Any]] = Field(default_factory=dict)


def _kit_value_problem(knob: str, value: Any) -> str | None:
    """Why `value` is no value of the kit's knob `knob` (None when it is one)."""
    integer = isinstance(value, int) and not isinstance(value, bool)
    if knob in ("streams", "max_batch", "num_interop_threads"):
        return None if integer and value >= 1 else "a positive integer"
    if knob == "num_threads":
        return None if (integer and value >= 1) or value == "cores" else "a positive integer or cores"
    return None if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else "a number of milliseconds, 0 or more"


def table_options(framework: str) -> tuple[str, ...]:
    """The options of backend `framework` that are tables, each key of which is a knob (`engine_args`)."""
    return tuple(name for name, field in backend_info(framework).options.model_fields.items() if get_origin(field.annotation) is dict)


def is_backend_knob(framework: str, knob: str) -> bool:
    """Whether `knob` is one of backend `framework`'s: an option, or a key of an option that is a table (`option.key`)."""
    table, dot, key = knob.partition(".")
    return knob in backend_info(framework).options.model_fields or bool(dot and key and table in table_options(framework))


def with_knobs(options: dict[str, Any], point: Point) -> dict[str, Any]:
    """`options` (a backend's, its defaults filled in) with the backend knobs of `point` set: a table's key in its table
    (None: left out), any other its option."""
    changed = dict(options)
    for knob, value in point.items():
        table, dot, key = knob.partition(".")
        if knob in KIT_KNOBS:
            continue
        if dot and isinstance(changed.get(table), dict):
            rest = {name: setting for name, setting in changed[table].items() if name != key}
            changed[table] = rest if value is None else {**rest, key: value}
        else:
            changed[knob] = value
    return changed


def space_problems(spec: TuneSpec, framework: str, options: dict[str, Any], workload: str) -> list[str]:
    """One line per problem of `spec`'s space for a backend `framework` run with `options`: an unknown knob (with the
    knobs allowed), an empty list, a value the kit or the backend's options refuse (with what they allow)."""
    info = backend_info(framework)
    backend_knobs = tuple(info.options.model_fields)
    problems = []
    for knob, values in spec.space.items():
        where = f"tune.space.{knob}"
        own_knob = is_backend_knob(framework, knob)
        if knob not in KIT_KNOBS and not own_knob and knob.partition(".")[0] not in other_backends_knobs(framework):
            own = f"; {framework}'s options: {', '.join(backend_knobs)}" if backend_knobs else f"; {framework} has no options of its own"
            tables = f"; a key of {', '.join(table_options(framework))} as OPTION.KEY" if table_options(framework) else ""
            problems.append(f"{where}: unknown knob; the kit's: {', '.join(KIT_KNOBS)}{own}{tables}")
        elif knob not in KIT_KNOBS and not own_knob:
            continue  # another backend's knob: it applies to that backend's environments
        elif not values:
            problems.append(f"{where}: give a list of one value or more")
        elif knob in KIT_KNOBS:
            bad = [value for value in values if _kit_value_problem(knob, value)]
            if bad:
                problems.append(f"{where}: {bad[0]!r} is not {_kit_value_problem(knob, bad[0])}")
            elif knob == "streams" and workload == "generate" and values != [1]:
                problems.append(f"{where}: a load scenario that generates is served by one stream")
        else:
            refused = [(value, problem) for value in values if (problem := _option_problem(info.options, options, knob, value))]
            if refused:
                problems.append(f"{where}: {refused[0][0]!r}: {refused[0][1]}")
    return problems


def other_backends_knobs(framework: str) -> set[str]:
    """The options of every registered backend but `framework`: in a space shared by several environments, each
    backend's knobs apply to its own."""
    return {knob for other in frameworks() if other != framework for knob in backend_info(other).options.model_fields}


def default_point(values: dict[str, Any], knobs: list[str]) -> Point:
    """The environment's own setting of each of `knobs`: its parameter, or its backend option, or its table's key (None
    where the table has none) (`values`: the parameters, `options` with the backend's defaults filled in)."""
    options = values["options"]

    def own(knob: str) -> Any:
        table, dot, key = knob.partition(".")
        return options[table].get(key) if dot and isinstance(options.get(table), dict) else options[knob]

    return {knob: values[knob] if knob in KIT_KNOBS else own(knob) for knob in knobs}


def automatic_space(
    framework: str, scenario: str, workload: str, cores: int | None = None, device: str = "cpu", mode: str = "", precision: str = "float32",
    options: dict[str, Any] | None = None,
) -> dict[str, list[Any]]:  # fmt: skip
    """The space searched where none is given (the module's docstring), for an environment of `framework` in `mode` and
    `precision` on `device` whose own backend options are `options`."""
    info, on_gpu = backend_info(framework), device.startswith("cuda")
    space: dict[str, list[Any]] = {}
    if workload != "generate":
        cores = cores or usable_cores()
        space["streams"] = list(GPU_STREAMS) if on_gpu else [n for n in range(1, cores + 1) if cores % n == 0]
    if scenario != "single-stream":  # one request at a time: nothing to batch
        space["max_batch"] = list(GPU_MAX_BATCHES if on_gpu else AUTOMATIC_MAX_BATCHES)
    if on_gpu and scenario == "server":
        space["batch_timeout_ms"] = list(GPU_BATCH_TIMEOUTS_MS)
    knobs = info.gpu_tune_knobs(mode, precision) if on_gpu else info.tune_knobs
    for knob, values in knobs.items():
        allowed = [value for value in values if _option_problem(info.options, options or {}, knob, value) is None]
        if allowed:
            space[knob] = allowed
    return space


def _option_problem(options_model: Any, options: dict[str, Any], knob: str, value: Any) -> str | None:
    """Why the backend's options model refuses `value` for `knob` beside the environment's other `options` (None where it
    takes it)."""
    try:
        options_model(**with_knobs(options, {knob: value}))
    except ValidationError as error:
        return str(error.errors()[0]["msg"]).removeprefix("Value error, ")
    return None


def full_space(space: dict[str, list[Any]], default: Point) -> dict[str, list[Any]]:
    """`space` with the environment's own value of each knob among its values (first where it was not there)."""
    return {knob: values if default[knob] in values else [default[knob], *values] for knob, values in space.items()}


def space_size(space: dict[str, list[Any]]) -> int:
    """The number of points in `space` (the product of its lists' lengths)."""
    size = 1
    for values in space.values():
        size *= len(values)
    return size


def tune_space(params: Any) -> dict[str, list[Any]]:
    """The space a tune of `params` (BenchmarkParams with a `tune`) searches: its own or the automatic one, the
    environment's own setting of each knob among the values."""
    given = {knob: values for knob, values in params.tune.space.items() if knob in KIT_KNOBS or is_backend_knob(params.framework, knob)}
    given = given or automatic_space(
        params.framework, params.tune.objective, params.workload, device=params.device, mode=params.mode, precision=params.precision,
        options=params.options,
    )  # fmt: skip
    return full_space(given, default_point(params.model_dump(), list(given)))
