"""The parameters of one environment's run, validated before anything is built."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, ValidationInfo, field_validator, model_validator

from benchlib.backends import PRECISIONS, backend_info, frameworks, modes
from benchlib.config.catalogue import MODEL_SCALES, ModelSpec
from benchlib.config.eval_data import EvalDataError, problems_for_model, read_eval_data
from benchlib.config.models import INPUTS, TASKS, WEIGHTS, ModelError, ModelRequest, resolve_model
from benchlib.config.tune import OBJECTIVES, TuneSpec, space_problems

DEVICE_PATTERN = r"cpu|cuda(:\d+)?"
WORKLOADS: tuple[str, ...] = ("forward", "generate")  # one forward pass (the study's); greedy generation of `new_tokens`
GENERATE_TASK = "causal-lm"
# How calls arrive: one at a time as the study timed them (`cell`), or under load as MLPerf defines it, driven by LoadGen.
CELL = "cell"
# `concurrency` is a serving engine's sweep of requests in flight (measure/concurrency.py), beside LoadGen's scenarios.
CONCURRENCY = "concurrency"
LOAD_SCENARIOS: tuple[str, ...] = ("single-stream", "multi-stream", "server", "offline", CONCURRENCY)
# The percentiles a load scenario's latency may be judged at (LoadGen prints both; the results have a column for each).
LATENCY_PERCENTILES: tuple[int, ...] = (90, 99)
SCENARIOS: tuple[str, ...] = (CELL, *LOAD_SCENARIOS)
DEFAULT_REQUEST_LENGTHS: tuple[int, ...] = (32, 64, 128)
CURRENCY_PATTERN = r"[A-Z]{3}"  # ISO 4217's codes


class BenchmarkParams(BaseModel):
    """Environment (framework, mode, precision, device, threads, the backend's options) and grid
    (models, sizes, timing) of one run. Frameworks, their modes, precisions, devices and options
    come from the backends' registry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    environment: str = Field(min_length=1, description="A name for this environment: it labels the rows and names the run's folder.")
    framework: str = Field(description="The backend that runs the model (the registry's frameworks).")
    mode: str = Field(description="How the backend runs it (each framework's modes: Backends and environments).")
    precision: str = Field(default="float32", description="The numbers the model computes in (each framework's precisions).")
    device: str = Field(default="cpu", description="Where the model runs: cpu, cuda or cuda:N.")
    options: dict[str, Any] = Field(
        default_factory=dict, validate_default=True,
        description="The backend's own parameters, checked by its options model (e.g. pytorch: attn_implementation, compile_mode).",
    )  # fmt: skip
    num_threads: int | Literal["cores"] | None = Field(
        default=None, description="Intra-op threads: a number, cores (every CPU this process may use) or null (the framework's default)."
    )
    num_interop_threads: StrictInt | None = Field(default=None, ge=1, description="Inter-op threads: a number or null (the framework's default).")
    workload: Literal[WORKLOADS] = Field(  # type: ignore[valid-type]
        default="forward", description="What one call is: forward (one forward pass, the study's) or generate (greedy generation of new_tokens)."
    )
    # How the models are found and loaded (config/models.py), set before `models` so that its validator sees them.
    weights: Literal[WEIGHTS] | None = Field(  # type: ignore[valid-type]
        default=None, description="pretrained or random; null: a folder's or Hub id's own weights, the catalogue's seeded random ones."
    )
    task: Literal[TASKS] | None = Field(  # type: ignore[valid-type]
        default=None, description="The head measured and compared; null: the catalogue's bare model, a checkpoint's own head."
    )
    trust_remote_code: bool = Field(default=False, description="Run a checkpoint's own Python code where its architecture needs it.")
    allow_pickle: bool = Field(default=False, description="Load pickled weights (pytorch_model.bin); unpickling can run code.")
    offline: bool = Field(default=True, description="false: fetch a Hub id missing from the local Hugging Face cache before the kernels start.")
    models: list[str] = Field(min_length=1, description="Catalogue names, checkpoint folders or Hugging Face Hub ids.")
    inputs: Literal[INPUTS] = Field(  # type: ignore[valid-type]
        default="random", description="random: seeded token ids; text: text_file tokenized by the model's own tokenizer (the default under load)."
    )
    text_file: str | None = Field(default=None, description="inputs text: the text to tokenize (null: the English sample shipped with the kit).")
    eval_data: str | None = Field(
        default=None,
        description="The user's examples, scored in every environment (JSONL or CSV): text and label, text, text_pair and score, or text (perplexity).",
    )  # fmt: skip
    quality_target: float = Field(
        default=0.99, gt=0, le=1, description="The share of eager float32's score an environment must keep (MLPerf's 0.99; 0.999 its high-accuracy variant); under load, of its agreement too, where stricter."
    )
    model_scale: Literal["full", "tiny"] = Field(default="full", description="full: the published sizes; tiny: the same architectures, seconds to build.")
    batch_sizes: list[StrictInt] = Field(min_length=1, description="The batch sizes of the grid (a load scenario: max_batch).")
    sequence_lengths: list[StrictInt] = Field(min_length=1, description="The sequence lengths of the grid (generate: prompt_lengths; load: request_lengths).")
    prompt_lengths: list[StrictInt] | None = Field(default=None, description="workload generate: the prompts' lengths, instead of sequence_lengths.")
    new_tokens: StrictInt = Field(default=32, ge=2, description="workload generate: tokens generated per call (end of sequence ignored; a first and a next at least).")
    # A load scenario's cell is one model under LoadGen's load, its requests of `request_lengths` served by `streams`
    # workers that batch up to `max_batch` requests of one length, waiting at most `batch_timeout_ms` for more.
    scenario: list[Literal[SCENARIOS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: [CELL], min_length=1,
        description=(
            "How calls arrive: cell (one at a time, as the study timed them), or any of MLPerf's single-stream, multi-stream, server, "
            "offline; a serving engine's concurrency (1, 2, 4, ... requests in flight up to streams)."
        ),
    )  # fmt: skip
    request_lengths: list[StrictInt] | None = Field(
        default=None, description=f"A load scenario: its requests' lengths in tokens (null: {', '.join(map(str, DEFAULT_REQUEST_LENGTHS))})."
    )
    max_batch: StrictInt = Field(default=8, ge=1, description="A load scenario: requests of one length batched together, at most.")
    batch_timeout_ms: float = Field(default=2.0, ge=0, description="Server: how long a batch waits for more requests of its length.")
    streams: StrictInt = Field(default=1, ge=1, description="A load scenario: workers serving the queue, the threads divided among them (a serving engine: requests in flight).")
    latency_bound_ms: float = Field(default=100.0, gt=0, description="Server: the bound on latency at latency_percentile.")
    # At 90, early stopping needs about a tenth of the queries it needs at 99.
    latency_percentile: Literal[LATENCY_PERCENTILES] | None = Field(  # type: ignore[valid-type]
        default=None,
        description="The percentile LoadGen judges latency at (single-stream, multi-stream, server; the token bounds too); null: MLPerf's, 90 one request at a time, 99 otherwise.",
    )  # fmt: skip
    ttft_bound_ms: float | None = Field(default=None, gt=0, description="Server, generating: the bound on the time to first token.")
    tpot_bound_ms: float | None = Field(default=None, gt=0, description="Server, generating: the bound on the time per output token.")
    samples_per_query: StrictInt = Field(default=8, ge=1, description="Multi-stream: requests per query.")
    min_duration_s: float = Field(default=10.0, gt=0, description="A load scenario: each LoadGen test runs at least this long...")
    min_query_count: StrictInt = Field(default=100, ge=1, description="... and issues at least this many queries.")
    max_trials: StrictInt = Field(default=8, ge=1, description="Server: LoadGen tests the search for the largest rate under the bound may run.")
    max_run_minutes: float = Field(
        default=60.0, gt=0, description="A load run: the most its estimate (printed before any kernel starts) may be before the run asks for --yes."
    )
    tune: TuneSpec | None = Field(
        default=None,
        description="A search for the best serving settings: {objective: server, offline or single-stream, space: {knob: [values]}} (no space: an automatic one).",
    )  # fmt: skip
    tune_trials: StrictInt = Field(default=12, ge=1, description="tune: points measured at most (the default settings' among them)...")
    tune_budget_s: float = Field(default=600.0, gt=0, description="... or until this much time is spent (the confirmation aside).")
    confirm_rounds: StrictInt = Field(default=3, ge=2, description="tune: fresh kernels in which the best point and the default are each measured again, alternately.")
    warmup: StrictInt = Field(default=1, ge=0, description="Untimed calls at least before the samples, then more until the time per call is stable...")
    warmup_max_seconds: float = Field(default=5.0, ge=0, description="... or until this much warm-up time is spent.")
    repeat: int | Literal["auto"] = Field(default=30, description="Samples per cell, or auto: until the mean is known to target_rel_ci.")
    number: StrictInt = Field(default=3, ge=1, description="Calls per sample, back to back between two clock reads.")
    target_rel_ci: float = Field(default=0.02, gt=0, lt=1, description="repeat auto: stop when the 95% interval of the mean is within this fraction of it...")
    max_cell_seconds: float = Field(default=60.0, gt=0, description="... or when this much sampling time is spent...")
    min_samples: StrictInt = Field(default=5, ge=2, description="... but not before this many samples.")
    seed: int = Field(default=0, description="Seeds the random weights and the inputs.")
    max_interference: float = Field(default=0.05, ge=0, le=1, description="The share of the machine other work may use while a cell is timed before it is disturbed.")
    remeasure: StrictInt = Field(default=2, ge=0, description="Times a disturbed cell (a server trial) is measured again.")
    rounds: StrictInt = Field(default=1, ge=1, description="Times every environment is run, each in a fresh kernel, the order rotated.")
    current_round: StrictInt = Field(default=1, ge=1, description="The round this kernel runs (set by the runner).")
    memory_limit_gb: float | None = Field(default=None, gt=0, description="Bounds the kernel's memory: an allocation past it fails, and the cell is oom.")
    machine_name: str | None = Field(
        default=None, min_length=1, description="A name for the machine, for the decision across machines (null: its hostname)."
    )
    price_per_hour: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="What the machine costs an hour, in currency (null: no price, so no cost is shown)."
    )
    currency: str = Field(default="USD", description="The price's currency: an ISO 4217 code (USD, EUR, ...).")
    output_dir: str = Field(min_length=1, description="The environment's folder: its rows, its machine and software record and its executed notebook go there.")

    @model_validator(mode="before")
    @classmethod
    def _workload(cls, values: Any) -> Any:
        """A generate grid gives `prompt_lengths` (the cells' sequence lengths) and measures causal language models;
        a load scenario's grid gives `request_lengths` (see `load_scenario`)."""
        values = load_scenario(values)
        if not isinstance(values, dict) or values.get("workload", "forward") != "generate":
            if isinstance(values, dict) and values.get("prompt_lengths") is not None:
                raise ValueError("prompt_lengths: only workload generate has prompts; a forward grid gives sequence_lengths")
            return values
        values = dict(values)
        prompts, lengths = values.get("prompt_lengths"), values.get("sequence_lengths")
        if prompts is None:
            raise ValueError("workload: generate needs prompt_lengths, e.g. [32, 128]")
        if lengths is not None and lengths != prompts:
            raise ValueError("workload: generate takes prompt_lengths, not sequence_lengths (which this grid gives)")
        if values.get("task") not in (None, GENERATE_TASK):
            raise ValueError(f"task: workload generate needs task {GENERATE_TASK}, not {values['task']!r}")
        return {**values, "sequence_lengths": prompts, "task": GENERATE_TASK}

    @field_validator("num_threads", mode="before")
    @classmethod
    def _threads(cls, num_threads: Any) -> int | str | None:
        if num_threads in (None, "cores") or (isinstance(num_threads, int) and not isinstance(num_threads, bool) and num_threads >= 1):
            return num_threads
        raise ValueError(f"must be a positive integer, 'cores' (every CPU this process may use) or null (the framework's default), not {num_threads!r}")

    @field_validator("models")
    @classmethod
    def _known_models(cls, models: list[str], info: ValidationInfo) -> list[str]:
        """Every model resolves (a catalogue entry, a folder, a Hub id in the local cache) and may be loaded as asked."""
        request = ModelRequest(**{key: info.data[key] for key in MODEL_REQUEST_FIELDS if key in info.data})
        problems = []
        for name in dict.fromkeys(models):
            try:
                resolve_model(name, request)
            except ModelError as error:
                problems.append(str(error))
        if problems:
            raise ValueError("; ".join(problems))
        return models

    @field_validator("text_file")
    @classmethod
    def _readable(cls, text_file: str | None) -> str | None:
        if text_file is not None and not Path(text_file).is_file():
            raise ValueError(f"no such file: {text_file}")
        return text_file

    @model_validator(mode="after")
    def _eval_data(self) -> BenchmarkParams:
        """`eval_data` reads (`read_eval_data`) and every model can score it (`problems_for_model`)."""
        if self.eval_data is None:
            return self
        try:
            examples = read_eval_data(self.eval_data)
        except EvalDataError as error:
            raise ValueError(f"eval_data: {error}") from None
        problems = [line for name in dict.fromkeys(self.models) for line in problems_for_model(examples, self.model_spec(name), self.model_scale)]
        if problems:
            raise ValueError("eval_data: " + "; ".join(problems))
        return self

    @field_validator("repeat", mode="before")
    @classmethod
    def _repeat(cls, repeat: Any) -> int | str:
        if repeat == "auto" or (isinstance(repeat, int) and not isinstance(repeat, bool) and repeat >= 1):
            return repeat
        raise ValueError(f"must be a positive integer or 'auto', not {repeat!r}")

    @field_validator("batch_sizes", "sequence_lengths", "prompt_lengths", "request_lengths")
    @classmethod
    def _positive(cls, sizes: list[int] | None) -> list[int] | None:
        if sizes is not None and any(size < 1 for size in sizes):
            raise ValueError("sizes must be positive integers")
        return sizes

    @field_validator("device")
    @classmethod
    def _device(cls, device: str, info: ValidationInfo) -> str:
        if not re.fullmatch(DEVICE_PATTERN, device):
            raise ValueError(f"must be cpu, cuda or cuda:N, not {device!r}")
        framework = info.data.get("framework")
        if framework and device.split(":")[0] not in backend_info(framework).devices:
            raise ValueError(f"{framework} runs on {' or '.join(backend_info(framework).devices)} here, not {device!r}")
        return device

    @field_validator("framework")
    @classmethod
    def _registered(cls, framework: str) -> str:
        if framework not in frameworks():
            raise ValueError(f"must be one of {', '.join(frameworks())}, not {framework!r}")
        return framework

    @field_validator("mode")
    @classmethod
    def _mode_of_framework(cls, mode: str, info: ValidationInfo) -> str:
        framework = info.data.get("framework")  # absent when the framework itself is invalid
        if framework and mode not in modes(framework):
            raise ValueError(f"mode for {framework} must be one of {', '.join(modes(framework))}, not {mode!r}")
        return mode

    @field_validator("precision")
    @classmethod
    def _precision_of_framework(cls, precision: str, info: ValidationInfo) -> str:
        framework = info.data.get("framework")
        allowed = backend_info(framework).precisions if framework else PRECISIONS
        if precision not in allowed:
            raise ValueError(f"precision for {framework or 'any framework'} must be one of {', '.join(allowed)}, not {precision!r}")
        return precision

    @field_validator("options")
    @classmethod
    def _options_of_framework(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """The backend's options model checks them; they are kept with its defaults filled in."""
        framework = info.data.get("framework")
        if not framework:
            return options
        try:
            return backend_info(framework).options(**options).model_dump()
        except ValidationError as error:
            problems = "; ".join(option_problem(problem) for problem in error.errors())
            raise ValueError(f"for {framework}: {problems}") from None

    @field_validator("tune")
    @classmethod
    def _tune_space(cls, tune: TuneSpec | None, info: ValidationInfo) -> TuneSpec | None:
        """Every knob of the space is the kit's or the backend's, every value one they take."""
        framework, options = info.data.get("framework"), info.data.get("options")
        if tune is None or not framework or options is None:
            return tune
        problems = space_problems(tune, framework, options, info.data.get("workload", "forward"))
        if problems:
            raise ValueError("; ".join(problem.removeprefix("tune.") for problem in problems))
        return tune

    @field_validator("currency")
    @classmethod
    def _currency(cls, currency: str) -> str:
        if not re.fullmatch(CURRENCY_PATTERN, currency):
            raise ValueError(f"must be an ISO 4217 code such as USD or EUR, not {currency!r}")
        return currency

    @field_validator("current_round")
    @classmethod
    def _round_of_rounds(cls, current_round: int, info: ValidationInfo) -> int:
        rounds = info.data.get("rounds")
        if rounds is not None and current_round > rounds:
            raise ValueError(f"must be between 1 and rounds ({rounds}), not {current_round}")
        return current_round

    def model_request(self) -> ModelRequest:
        """How this run asks for its models."""
        return ModelRequest(**{key: getattr(self, key) for key in MODEL_REQUEST_FIELDS})

    def model_spec(self, name: str) -> ModelSpec:
        """The `ModelSpec` of `name`, one of `models`."""
        return resolve_model(name, self.model_request())

    def positions(self, sequence_length: int) -> int:
        """The positions a cell of `sequence_length` uses: the prompt and the generated tokens, or the sequence."""
        return sequence_length + self.new_tokens if self.workload == "generate" else sequence_length


MODEL_REQUEST_FIELDS: tuple[str, ...] = ("weights", "task", "trust_remote_code", "allow_pickle", "offline")


def load_scenario(values: Any) -> Any:
    """`scenario` as a list (a name alone is a list of one); for load scenarios, `request_lengths` (by default
    DEFAULT_REQUEST_LENGTHS; when generating, the prompts' lengths) become the cells' sequence lengths and `max_batch`
    their batch size, the requests are text unless `inputs` says otherwise (lengths vary as real traffic's do), and the
    parameters that only a cell or only generation has are refused, each with one line, as is a generating server without
    its token bounds. A `tune` measures its objective's scenario alone."""
    if not isinstance(values, dict):
        return values
    objective = values["tune"].get("objective") if isinstance(values.get("tune"), dict) else None
    if isinstance(values.get("tune"), dict) and objective not in OBJECTIVES:
        raise ValueError(f"tune: objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
    if objective in OBJECTIVES:  # a tune measures its objective's scenario
        given = values.get("scenario", [objective])
        if (given if isinstance(given, list) else [given]) != [objective]:
            raise ValueError(f"tune: a tune measures its objective's scenario alone (scenario: [{objective}]), not {given!r}")
        values = {**values, "scenario": [objective]}
    scenario = values.get("scenario", [CELL])
    scenario = [scenario] if isinstance(scenario, str) else scenario
    values = {**values, "scenario": scenario}
    if not (isinstance(scenario, list) and all(isinstance(name, str) and name in SCENARIOS for name in scenario)):
        return {"batch_sizes": [1], "sequence_lengths": [1], **values}  # the field's own validation says what is wrong, in one line
    load = any(name in LOAD_SCENARIOS for name in scenario)
    generate = values.get("workload", "forward") == "generate"
    for bound in ("ttft_bound_ms", "tpot_bound_ms"):
        if values.get(bound) is not None and not generate:
            raise ValueError(f"{bound}: a token bound needs workload: generate (a forward pass has no tokens)")
    if not load:
        if values.get("request_lengths") is not None:
            raise ValueError("request_lengths: only a load scenario (single-stream, multi-stream, server, offline) has requests; a cell gives sequence_lengths")
        if values.get("latency_percentile") is not None:
            raise ValueError("latency_percentile: only a load scenario (single-stream, multi-stream, server) is judged at a percentile of latency")
        return values
    if CELL in scenario:
        raise ValueError("scenario: cell and the load scenarios are measured in grids of their own, not together")
    if CONCURRENCY in scenario and (values.get("framework") != "openai" or not generate):
        raise ValueError("scenario: concurrency sweeps the requests in flight to a serving engine (framework openai, workload generate)")
    if generate:
        if values.get("streams", 1) not in (1, None) and values.get("framework") != "openai":
            raise ValueError(
                "streams: a load scenario that generates is served by one stream (one model's generate at a time); only a serving "
                "engine (framework openai) takes several requests in flight"
            )
        missing = [bound for bound in ("ttft_bound_ms", "tpot_bound_ms") if values.get(bound) is None]
        if "server" in scenario and missing:
            raise ValueError(
                f"{missing[0]}: the server scenario of workload generate is judged by the time to first token and per output token "
                "at latency_percentile; give ttft_bound_ms and tpot_bound_ms"
            )
    lengths = values.get("request_lengths")
    lengths = list(DEFAULT_REQUEST_LENGTHS) if lengths is None else lengths
    positive = [n for n in (lengths if isinstance(lengths, list) else []) if isinstance(n, int) and not isinstance(n, bool) and n >= 1]
    if not positive or len(positive) != len(lengths):  # the field's own validation says what is wrong, in one line
        return {**values, "request_lengths": lengths, "sequence_lengths": [1], "batch_sizes": [1]}
    max_batch = values.get("max_batch", BenchmarkParams.model_fields["max_batch"].default)
    max_batch = max_batch if isinstance(max_batch, int) and not isinstance(max_batch, bool) and max_batch >= 1 else 1  # else its own line
    # The scenario's cell is recorded at its longest request and largest batch (the runner hands both back resolved).
    if values.get("sequence_lengths") is not None and values["sequence_lengths"] != [max(lengths)]:
        raise ValueError("sequence_lengths: a load scenario takes request_lengths (the lengths of its requests), not sequence_lengths")
    if generate and values.get("prompt_lengths") is not None and values["prompt_lengths"] != [max(lengths)]:
        raise ValueError("prompt_lengths: a load scenario takes request_lengths (the lengths of its requests' prompts), not prompt_lengths")
    if values.get("batch_sizes") is not None and values["batch_sizes"] != [max_batch]:
        raise ValueError("batch_sizes: a load scenario batches its requests itself, up to max_batch; give max_batch")
    prompts = {"prompt_lengths": [max(lengths)]} if generate else {}  # generation's own validation reads its prompts there
    return {"inputs": "text", **values, "request_lengths": lengths, "sequence_lengths": [max(lengths)], "batch_sizes": [max_batch], **prompts}


def option_problem(problem: Mapping[str, Any]) -> str:
    """A problem of a backend's options: the option it is about, then what is wrong (a check across options names the
    option in its message)."""
    where, message = ".".join(map(str, problem["loc"])), problem["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


class ParameterError(ValueError):
    """Parameters that do not validate; the message is one line per problem."""


def problem_field(problem: Mapping[str, Any]) -> str:
    """The parameter a pydantic problem is about: its location, or for a check across fields the name its message starts with."""
    if problem["loc"]:
        return str(problem["loc"][0])
    named = problem["msg"].removeprefix("Value error, ").partition(": ")[0]
    return named if named in BenchmarkParams.model_fields else ""


def format_validation_error(error: ValidationError, source: str = "parameters") -> str:
    """One line per problem: source, field and what is allowed."""
    lines = []
    for problem in error.errors():
        field = ".".join(str(part) for part in problem["loc"]) or "(parameters)"
        message = problem["msg"].removeprefix("Value error, ")
        if not problem["loc"] and (named := problem_field(problem)):  # a check across fields names the one it is about
            field, message = named, message.removeprefix(f"{named}: ")
        if problem["type"] == "extra_forbidden":
            message = f"unknown parameter; allowed: {', '.join(BenchmarkParams.model_fields)}"
        elif problem["type"] == "literal_error" and field == "model_scale":
            message = f"must be one of {', '.join(MODEL_SCALES)}"
        lines.append(f"{source}: {field}: {message}")
    return "\n".join(lines)


def validate_params(values: dict[str, Any] | BenchmarkParams, source: str = "parameters") -> BenchmarkParams:
    """`values` as `BenchmarkParams`; raises ParameterError with one line per problem."""
    if isinstance(values, BenchmarkParams):
        return values
    try:
        return BenchmarkParams(**values)
    except ValidationError as error:
        raise ParameterError(format_validation_error(error, source)) from None


def notebook_parameters(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The benchmark parameters defined in a notebook's namespace (its parameters cell and any injected by papermill)."""
    return {name: namespace[name] for name in BenchmarkParams.model_fields if name in namespace}
