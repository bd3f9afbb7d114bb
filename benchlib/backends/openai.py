"""A serving engine that speaks the OpenAI HTTP API (vLLM, `transformers serve`, or any server at a URL) as a backend: its
call is a streamed request, made by the kit's asynchronous client (`_stream`), and its model the engine's.

`url:` reaches a running server (an API key read from the environment variable `api_key_env` names, never written to the
outputs; TLS verified); `serve:` is the command line that starts the engine (`_engine`): in a process group of its own
on a free loopback port, with the model's folder (`{model}`), the port (`{port}`), the precision (`{dtype}`) and the
Python of its own environment where it has one (`{python}`, `venv:`), the engine's own settings appended as flags
(`engine_args`) and its environment variables set (`engine_env`), stopped when its model is done. The kit's prompts
are sent as token ids where the engine takes them (`prompt: token_ids`) or as their text, and through `/v1/completions`
or `/v1/chat/completions` (`api: chat`, with a chat template that renders the prompt as it is: the kit serves the
folder with one). Each request asks for exactly `new_tokens` tokens (`exact_tokens`: vLLM's `ignore_eos` and
`min_tokens`, or a generation configuration with `min_new_tokens` for `transformers serve`); the tokens counted in the
stream are checked against the usage the engine reports (`stream_usage`), and the generated tokens are compared with
eager PyTorch float32's on the same folder, in the kit's process.

The engine generates only (`workload: generate`); the forward workload is `unsupported`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator, model_validator

from benchlib.backends import THREAD_VARIABLES, BackendInfo, BackendSettings, register
from benchlib.backends._ceiling import client_ceiling
from benchlib.backends._engine import EngineProcess, Venv, answers, engine_flags, flag_name, start_engine, template_flags
from benchlib.backends._generate import Generator, StepClock
from benchlib.backends._stream import Completion, StreamClient, gathered
from benchlib.backends.pytorch import build_reference, reference_tokens, use_torch, weights, weights_key
from benchlib.machine import gpus
from benchlib.status import Unsupported
from benchlib.store.cache import ENTRY_FILE, artefact, cache_root
from benchlib.store.layout import engine_log

if TYPE_CHECKING:
    from benchlib.config.catalogue import ModelSpec

FORWARD = "a serving engine generates: run it with workload: generate"
VERBATIM_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"  # a chat prompt is its text
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "tokenizer.model", "vocab.json")
SERVED_KIND = "served-model"
DYING_S = 2.0  # how long a failed request waits for the engine to be seen ended (its connection drops first)
NEITHER = "options: an openai environment needs url (a running server) or serve (the command that starts the engine)"
# what every engine the kit starts runs with: offline, as the kit is (the model is a local folder), and no TensorFlow
ENGINE_ENVIRONMENT = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "USE_TF": "0", "USE_TORCH": "1"}
FLAG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SETTING_TYPES = (str, int, float, bool, type(None))  # an engine setting's value (None: the engine's default)


class OpenAIOptions(BaseModel):
    """A serving engine's parameters (`options:` in an environment file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = None  # a running server (http://host:port); or else `serve`
    serve: str | None = None  # the command that starts the engine: {model}, {port}, {dtype} and {python} substituted
    api_key_env: str | None = None  # the environment variable that holds the server's API key (sent as a bearer token)
    venv: tuple[str, ...] = ()  # the engine's own Python environment: what pip installs into it (`benchlib engines install`)
    venv_python: str = "python3.11"  # the Python it is made with
    venv_remove: tuple[str, ...] = ()  # distributions uninstalled from it after (those that break its imports)
    api: Literal["completions", "chat"] = "completions"  # /v1/completions, or /v1/chat/completions
    prompt: Literal["token_ids", "text"] = "token_ids"  # the prompt as the kit's token ids, or as their text
    # how every request is made to generate exactly `new_tokens`: vLLM's `ignore_eos` and `min_tokens`; a `generation_config`
    # with `min_new_tokens` (transformers serve); or nothing (the row says if a request stopped early)
    exact_tokens: Literal["ignore_eos", "generation_config", "none"] = "ignore_eos"
    stream_usage: bool = True  # ask for the token counts at the stream's end (`stream_options.include_usage`)
    extra_body: dict[str, Any] = {}  # more fields for every request, in the engine's own words
    model_name: str | None = None  # the model to ask for; default: the folder served, or the first of a URL's /v1/models
    ready_timeout_s: float = 600.0  # how long a started engine has to answer
    request_timeout_s: float = 600.0
    # the engine's own settings, flags after `serve` ({max-num-seqs: 4} is --max-num-seqs 4: `_engine.engine_flags`), and
    # the environment variables it starts with (VLLM_CPU_KVCACHE_SPACE); each key a tune's knob (`engine_args.max-num-seqs`)
    engine_args: dict[str, Any] = {}
    engine_env: dict[str, Any] = {}

    @field_validator("engine_args")
    @classmethod
    def _flags(cls, engine_args: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        serve = info.data.get("serve")
        given = template_flags(serve) if serve else set()
        for name, value in engine_args.items():
            if not FLAG_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a flag's name: give it without its dashes (max-num-seqs)")
            if flag_name(name) in given:
                raise ValueError(f"{name}: the serve command gives --{name} already: set it in one place")
            if not isinstance(value, SETTING_TYPES):
                raise ValueError(f"{name}: {value!r} is not one value (a number, a word, true or false)")
        return engine_args

    @field_validator("engine_env")
    @classmethod
    def _variables(cls, engine_env: dict[str, Any]) -> dict[str, Any]:
        for name, value in engine_env.items():
            if not VARIABLE_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable's name")
            if isinstance(value, bool) or not isinstance(value, SETTING_TYPES):
                raise ValueError(f"{name}: {value!r} is not one value (a number or a word)")
        return engine_env

    @model_validator(mode="after")
    def _one_source(self) -> OpenAIOptions:
        if self.url is not None and self.serve is not None:
            raise ValueError(f"give either url (a running server) or serve (the command that starts the engine), not both: {NEITHER}")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, not {self.url!r}")
        for name, given in (("venv", self.venv), ("engine_args", self.engine_args), ("engine_env", self.engine_env)):
            if given and self.serve is None:
                raise ValueError(f"{name} is for an engine the kit starts: it needs serve")
        return self

    def variables(self) -> dict[str, str]:
        """The environment the engine starts with: the kit's (`ENGINE_ENVIRONMENT`), then `engine_env`'s (None: left out)."""
        return {**ENGINE_ENVIRONMENT, **{name: str(value) for name, value in self.engine_env.items() if value is not None}}

    @property
    def own_venv(self) -> Venv | None:
        """The engine's own Python environment, where it has one."""
        return Venv(tuple(self.venv), self.venv_python, tuple(self.venv_remove)) if self.venv else None


@dataclass
class Served:
    """A model as an engine serves it: the engine (None for a URL's), the client, the model's name on the server, the
    tokenizer, and the eager PyTorch float32 model its tokens are compared with."""

    client: StreamClient
    model_name: str
    tokenizer: Any
    reference: Any
    engine: EngineProcess | None = None

    def __post_init__(self) -> None:
        # when the sweep lets go of the model (or at exit): the callback holds the client and engine, not this object
        self.close = weakref.finalize(self, close_served, self.client, self.engine)


def close_served(client: StreamClient, engine: EngineProcess | None) -> None:
    """Close the client and stop the engine."""
    client.close()
    if engine is not None:
        engine.stop()


def has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def with_template(folder: Path, cache_dir: Path | None, key: str) -> Path:
    """The build cache's copy of model folder `folder` whose tokenizer renders a chat as its text (`VERBATIM_TEMPLATE`) and
    makes ids and a mask only: its files linked, its tokenizer_config.json rewritten."""

    def make(made: Path) -> None:
        for item in folder.iterdir():
            if item.name not in ("tokenizer_config.json", ENTRY_FILE):  # a cache entry's record is its own
                (made / item.name).symlink_to(item.resolve())
        config_file = folder / "tokenizer_config.json"
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
        # the model's inputs are its ids and mask only: a tokenizer that also makes token type ids would hand them to generate
        served = {**config, "chat_template": VERBATIM_TEMPLATE, "model_input_names": ["input_ids", "attention_mask"]}
        (made / "tokenizer_config.json").write_text(json.dumps(served, indent=2))
        (made / "chat_template.jinja").unlink(missing_ok=True)

    return artefact(SERVED_KIND, folder.name, {"weights": key, "template": VERBATIM_TEMPLATE}, make, cache_dir).path


@dataclass
class OpenAIBackend:
    """Generates through an OpenAI-compatible server."""

    mode: str
    device: str = "cpu"
    precision: str = "float32"
    options: OpenAIOptions = OpenAIOptions()
    seed: int = 0
    cache_dir: Path | None = None
    output_dir: Path | None = None  # where the engine's log is kept (the environment's folder)
    environment: str = ""
    workload: str = "generate"
    framework: str = "openai"

    serves_concurrently: bool = True  # under load, `streams` requests in flight, batched by the engine
    # each request's (TTFT, TPOT) in seconds as the client saw them, since a load test cleared it: its goodput
    requests: list[tuple[float, float | None]] = field(default_factory=list)
    ceiling: dict[str, Any] | None = None  # the client's own ceiling (`settings`)

    def __post_init__(self) -> None:
        use_torch()  # one framework per kernel: the reference's, before transformers is imported
        self._served: weakref.ref[Served] | None = None  # the model served last, until the sweep lets go of it

    def unsupported(self) -> str | None:
        if self.workload != "generate":
            return FORWARD
        if self.device.startswith("cuda") and not gpus():  # before its environment: a GPU build is never made without a GPU
            return f"device {self.device}: nvidia-smi finds no GPU on this machine, and this engine runs on one"
        venv = self.options.own_venv
        return venv.missing(self.environment or "ENVIRONMENT") if venv is not None else None

    def headers(self) -> dict[str, str]:
        """The API key's header, read from `api_key_env` (an error naming the variable where it is unset)."""
        name = self.options.api_key_env
        if name is None:
            return {}
        key = os.environ.get(name)
        if not key:
            raise Unsupported(f"api_key_env: the environment variable {name} that holds the server's API key is not set")
        return {"Authorization": f"Bearer {key}"}

    def build(self, spec: ModelSpec, scale: str) -> Served:
        """Start the engine on the model's folder (or reach the URL), with the eager float32 model beside it."""
        self.free_served()
        headers = self.headers()  # a key that is not set: before anything starts
        made = weights(spec, scale, self.seed, self.cache_dir)
        folder = made.path
        if self.options.serve is not None and not has_tokenizer(folder):
            raise Unsupported("an engine loads a model folder with its tokenizer: give the model as a checkpoint folder (source:)")
        tokenizer = _tokenizer(folder, spec.trust_remote_code) if has_tokenizer(folder) else None
        if tokenizer is None and self.options.prompt == "text":
            raise Unsupported("prompt: text needs the model's tokenizer: give the model as a checkpoint folder (source:)")
        if self.options.api == "chat":
            folder = with_template(folder, self.cache_dir, weights_key(made))
        reference = build_reference(spec, scale, self.seed, cache_dir=self.cache_dir)
        engine = None
        if self.options.serve is not None:
            venv = self.options.own_venv
            log = engine_log(self.output_dir or cache_root() / "engines", spec.name)
            python = str(venv.interpreter) if venv is not None else sys.executable
            # the kernel's thread counts are its own (divided among its streams): the engine's threads are the engine's
            engine = start_engine(
                self.options.serve, str(folder), self.precision, log, self.options.ready_timeout_s, python, self.options.variables(), THREAD_VARIABLES,
                self.options.engine_args,
            )  # fmt: skip
            base_url = engine.base_url
        else:
            assert self.options.url is not None
            base_url = self.options.url.rstrip("/")
        if engine is None and not answers(base_url):
            raise RuntimeError(f"nothing answers at {base_url}/v1/models or /health")
        client = StreamClient(base_url, headers, self.options.request_timeout_s)
        name = self.options.model_name or (str(folder) if engine is not None else _first_model(client))
        served = Served(client, name, tokenizer, reference, engine)
        self._served = weakref.ref(served)
        return served

    def free_served(self) -> None:
        """Stop the engine of the model served last, if one still runs (one model at a time)."""
        served = self._served() if self._served is not None else None
        if served is not None:
            served.close()
        self._served = None

    def as_inputs(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray(ids)

    def prepare(self, served: Served, inputs: Any) -> Callable[[], Any]:
        raise Unsupported(FORWARD)

    def reference_output(self, served: Served, inputs: Any) -> np.ndarray | None:
        return None

    def server_call(self, served: Served, examples: Sequence[Any]) -> Callable[[Any], Any]:
        raise Unsupported(FORWARD)

    def body(self, served: Served, row: np.ndarray, new_tokens: int) -> dict[str, Any]:
        """One request's body for the prompt `row` (its ids)."""
        prompt: Any = [int(token) for token in row] if self.options.prompt == "token_ids" else self.text_of(served, row)
        body: dict[str, Any] = {"model": served.model_name, "max_tokens": new_tokens, "temperature": 0.0}
        if self.options.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if self.options.exact_tokens == "ignore_eos":
            body.update(ignore_eos=True, min_tokens=new_tokens)
        elif self.options.exact_tokens == "generation_config":
            exact = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False, "num_beams": 1}
            body["generation_config"] = json.dumps(exact)
        if self.options.stream_usage:
            body["stream_options"] = {"include_usage": True}
        return {**body, **self.options.extra_body}

    def text_of(self, served: Served, row: np.ndarray) -> str:
        """The prompt `row` as text, which the engine's tokenizer must make into the same ids (`Unsupported` where not)."""
        text = served.tokenizer.decode(row)
        if list(served.tokenizer(text, add_special_tokens=False)["input_ids"]) != [int(token) for token in row]:
            raise Unsupported("prompt: text: the prompt's ids, decoded and tokenized again, are other ids: the engine would see another prompt")
        return text

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.options.api == "chat" else "/v1/completions"

    def completions(self, served: Served, ids: np.ndarray, new_tokens: int, clock: StepClock | None = None) -> list[Completion]:
        """One streamed request per row of `ids`, all at once; `clock` ticked at each token every row has (as a batch's
        step). A failure of an engine that has ended is `Crashed`, with its log's last lines."""
        counted = [0] * len(ids)
        ticked = [0]

        def chunk_of(row: int) -> Callable[[Completion], None]:
            def arrived(so_far: Completion) -> None:
                counted[row] = len(self.new_ids_of(served, so_far))
                while clock is not None and min(counted) > ticked[0]:
                    ticked[0] += 1
                    clock.tick()

            return arrived

        try:
            # a chunk's tokens are counted as it arrives only for a step clock: the client spends no time per chunk otherwise
            calls = [served.client.stream(self.path, self.body(served, row, new_tokens), chunk_of(i) if clock is not None else None) for i, row in enumerate(ids)]
            done = served.client.run(gathered(calls))
        except Exception as exc:
            if served.engine is not None and served.engine.exited_within(DYING_S) is not None:
                raise served.engine.died("serving a request") from exc
            raise
        for completion, row in zip(done, ids, strict=True):
            self.check(served, completion, row, new_tokens)
        tpot = lambda c: (c.times[-1] - c.times[0]) / (new_tokens - 1) if new_tokens > 1 else None  # noqa: E731  # MLPerf's TPOT
        self.requests.extend((completion.ttft_s, tpot(completion)) for completion in done)  # list.extend: atomic
        return done

    def check(self, served: Served, completion: Completion, row: np.ndarray, new_tokens: int) -> None:
        """A completion's token counts against what was asked and what the engine says (its usage)."""
        made = len(self.new_ids_of(served, completion))
        if made != new_tokens:
            why = " (exact_tokens: none: the engine may stop at the end of sequence)" if self.options.exact_tokens == "none" else ""
            if completion.token_ids is None:
                why += " (its stream is text only: a special token it generated is not in the text)"
            raise RuntimeError(f"the engine made {made} tokens where {new_tokens} were asked (finish reason {completion.finish_reason}){why}")
        usage = completion.usage or {}
        prompt_tokens, completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if completion_tokens is not None and completion_tokens != new_tokens:
            raise RuntimeError(f"the engine's usage says {completion_tokens} completion tokens where {new_tokens} were streamed")
        if prompt_tokens is not None and self.options.api == "completions" and prompt_tokens != len(row):
            raise RuntimeError(f"the engine's usage says {prompt_tokens} prompt tokens where the prompt has {len(row)}")

    def new_ids_of(self, served: Served, completion: Completion) -> list[int]:
        """A completion's token ids: the engine's where it gave them, else its text tokenized (a text-only stream's chunks
        need not be one token each: `transformers serve` sends a word once the next has begun)."""
        if completion.token_ids is not None:
            return completion.token_ids
        if served.tokenizer is None:
            raise Unsupported("the engine streams text only and the model has no tokenizer to count its tokens with")
        return list(served.tokenizer(completion.text, add_special_tokens=False)["input_ids"])

    def generator(self, served: Served, inputs: Any) -> Generator:
        """Each call sends one streamed request per row of the prompt, at once, and ticks the clock at each token."""
        ids = np.asarray(inputs)
        clock = StepClock()

        def generate(new_tokens: int) -> list[Completion]:
            return self.completions(served, ids, new_tokens, clock)

        def new_ids(done: list[Completion]) -> np.ndarray:
            return np.asarray([self.new_ids_of(served, completion) for completion in done])

        return Generator(generate, new_ids, clock)

    def reference_tokens(self, served: Served, inputs: Any, new_tokens: int) -> np.ndarray | None:
        return reference_tokens(served.reference, np.asarray(inputs), new_tokens)

    def attn_implementation(self, served: Served) -> str:
        return "the engine's"

    def inference_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def sync(self, output: Any) -> None:
        """A request returns once its stream has ended."""

    def device_busy_s(self, call: Callable[[], Any]) -> float | None:
        return None

    def free(self) -> None:
        """Nothing is cached in the kit's process; the engine runs until the sweep lets go of its model."""

    def reset_peak_memory(self) -> None:
        """The engine's memory is its own."""

    def peak_memory_bytes(self) -> int:
        return 0

    def settings(self) -> dict[str, Any]:
        """The engine and how it is asked, and the client's own ceiling (`_ceiling`: measured once, in environment.json)."""
        if self.ceiling is None and self.workload == "generate":
            self.ceiling = client_ceiling()
        engine = self.options.url or self.options.serve
        return {"engine": engine, "api": self.options.api, "prompt": self.options.prompt, "client_ceiling": self.ceiling}

    def versions(self) -> dict[str, str]:
        import httpx

        return {"httpx": httpx.__version__}


def _tokenizer(folder: Path, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)


def _first_model(client: StreamClient) -> str:
    """The first model a server lists at /v1/models."""

    async def listed() -> str:
        response = await client.client.get("/v1/models")
        response.raise_for_status()
        data = response.json().get("data") or []
        if not data:
            raise RuntimeError("the server lists no model at /v1/models: give model_name")
        return str(data[0]["id"])

    return client.run(listed())


def knob_words(knob: str, value: Any) -> str:
    """A tune's knob as the engine is given it: a flag (`engine_args.max-num-seqs`) or an environment variable."""
    table, _, key = knob.partition(".")
    if value is None:
        return f"{key or knob}: the engine's default (not given)"
    if table == "engine_args":
        return " ".join(engine_flags({key: value}))
    return f"{key}={value}" if table == "engine_env" else f"{knob}: {value}"


def make(settings: BackendSettings) -> OpenAIBackend:
    """The backend of an environment that names its engine (a ValueError where it names none)."""
    options = settings.options
    assert isinstance(options, OpenAIOptions)
    if options.url is None and options.serve is None:
        raise ValueError(NEITHER)
    return settings.make(OpenAIBackend)


INFO = register(
    BackendInfo(
        framework="openai",
        description="a serving engine behind the OpenAI HTTP API (vLLM, transformers serve, or any URL): streamed requests",
        modes=("stream",),
        precisions=("float32", "bfloat16", "float16"),
        options=OpenAIOptions,
        make=make,
        model_class="pytorch",
        versions=("httpx",),  # the client's (a core dependency); the engine's own are its process's
        knob_words=knob_words,
    )
)
