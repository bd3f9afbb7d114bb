"""TensorFlow: the model called inside `tf.function` (mode `function`) or `tf.function(jit_compile=True)` (mode `xla`),
traced without AutoGraph where the model allows (`traced`).

The model loads the same weights as every PyTorch-derived environment (`pytorch.weights`: its safetensors are read
without PyTorch), so that its output is compared with eager PyTorch float32's, which a worker process computes
(`_reference.PyTorchWorker`). A model that PyTorch cannot build gets TensorFlow's own random weights, uncompared.
`TF_USE_LEGACY_KERAS=1` (set by `benchlib` on import) makes transformers' TF models run on tf-keras.

For `workload: generate`, transformers' `generate` of the language model head runs inside `tf.function`, with
`jit_compile=True` in mode `xla`, as in Hugging Face's 2022 post "Faster Text Generation with TensorFlow and XLA": greedy,
the key/value cache on, exactly n new tokens (`min_length` keeps the end of sequence away: TensorFlow's `generate` ignores
`min_new_tokens`). The post pads prompts to a few fixed sizes so that XLA compiles few shapes; here every cell has one
fixed prompt length, the fixed-size input the post pads to, so each cell is one shape, traced (and compiled) once per
number of new tokens: the cell's, and 1, which the workload times the first token with. In a graph, transformers'
`generate` cannot make a single token, so one token is `generate`'s first step (`first_token`) in a `tf.function` of its own.
`generate` branches on tensors (has every sequence ended?): it is traced with AutoGraph, which leaves the model's forward
pass to plain tracing where it can (`GenerateGraphs`).
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchlib.backends import BackendInfo, lazy_import, register
from benchlib.backends._generate import Generator, pad_token_id
from benchlib.backends._reference import PyTorchWorker
from benchlib.machine import package_version, usable_cores
from benchlib.status import Unsupported
from benchlib.store.cache import compiler_cache, record

if TYPE_CHECKING:  # the catalogue sits above the backends: they are handed its entries
    from benchlib.config.catalogue import ModelSpec

tf = lazy_import("tensorflow")


def tf_device_name(device: str) -> str:
    """TensorFlow's name for a kit device: "cpu" -> "/CPU:0", "cuda" -> "/GPU:0", "cuda:N" -> "/GPU:N"."""
    match = re.fullmatch(r"(cpu|cuda)(?::(\d+))?", device)
    if not match:
        raise ValueError(f"device must be cpu, cuda or cuda:N, not {device!r}")
    kind, index = match.group(1), match.group(2) or "0"
    return f"/CPU:{index}" if kind == "cpu" else f"/GPU:{index}"


def use_xla_cache(cache_dir: Path | None = None) -> None:
    """XLA's persistent compilation cache in the build cache (one folder per TensorFlow version), unless
    TF_XLA_FLAGS already names one: a later kernel loads what an earlier one compiled for the same graph
    (a third off XLA's first call). Effective before TensorFlow is imported."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if "tf_xla_persistent_cache_directory" not in flags:
        folder = compiler_cache("xla", cache_dir) / (package_version("tensorflow") or "unknown")
        os.environ["TF_XLA_FLAGS"] = f"{flags} --tf_xla_persistent_cache_directory={folder}".strip()


@dataclass
class Built:
    """A built TensorFlow model, and what its reference output is computed from: (spec, scale) when it has the shared
    weights, None when it has TensorFlow's own."""

    model: Any
    reference: tuple[ModelSpec, str] | None

    @property
    def config(self) -> Any:
        return self.model.config


@dataclass
class TensorFlowBackend:
    """Runs catalogue models with TensorFlow."""

    mode: str
    device: str = "cpu"
    num_threads: int | None = None
    num_interop_threads: int | None = None
    seed: int = 0
    cache_dir: Path | None = None  # the build cache (None: BENCHLIB_CACHE or the user's cache directory)
    workload: str = "forward"  # "generate": models built for `generator` (the key/value cache on)
    framework: str = "tensorflow"

    def __post_init__(self) -> None:
        self._worker = PyTorchWorker()
        # One framework per kernel: transformers must not import PyTorch beside TensorFlow.
        os.environ.update(USE_TORCH="0", USE_TF="1")
        if self.mode == "xla":
            use_xla_cache(self.cache_dir)
        self._device = tf_device_name(self.device)
        if self.num_threads:
            set_thread_pool("intra", self.num_threads)
        if self.num_interop_threads:
            set_thread_pool("inter", self.num_interop_threads)
        gpus = tf.config.list_physical_devices("GPU")
        if self.on_gpu and int(self._device.rsplit(":", 1)[1]) >= len(gpus):
            # TensorFlow would otherwise place the work on the CPU without a word.
            raise RuntimeError(f"device {self.device}: TensorFlow sees {len(gpus)} GPU(s) on this machine")
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        # float32 is float32, as eager PyTorch's baseline: TensorFlow's default runs it on TF32 units (Ampere and later)
        tf.config.experimental.enable_tensor_float_32_execution(False)

    @property
    def on_gpu(self) -> bool:
        return self._device.startswith("/GPU")

    def unsupported(self) -> str | None:
        return None

    def build(self, spec: ModelSpec, scale: str) -> Built:
        generating = {"use_cache": True} if self.workload == "generate" else {}  # over the catalogue's `use_cache: false`
        config = spec.build_config(scale, **{**spec.inference_config, **generating})
        try:
            spec.transformers_class("tensorflow")
        except AttributeError as exc:
            raise Unsupported(str(exc)) from None
        shared = spec.unsupported_for(("pytorch",)) is None
        try:
            with tf.device(self._device):
                model = spec.instantiate("tensorflow", config)
                model(model.dummy_inputs, training=False)  # creates the weights
                if shared:
                    load_pytorch_weights(model, self._worker.weights(spec, scale, self.seed, self.cache_dir).path)
        except ValueError as exc:
            if "Unrecognized configuration class" in str(exc):  # the Auto class has no TensorFlow model for this architecture
                raise Unsupported(f"transformers has no TensorFlow {type(config).__name__.removesuffix('Config')} model for {spec.task}") from None
            raise
        return Built(model, (spec, scale) if shared else None)

    def as_inputs(self, ids: np.ndarray) -> tf.Tensor:
        with tf.device(self._device):
            return tf.constant(ids, dtype=tf.int32)

    def prepare(self, built: Built, inputs: tf.Tensor) -> Callable[[], Any]:
        model = built.model
        function = traced(lambda ids: model(ids, training=False), self.mode == "xla", inputs)  # XLA compiles at the first call

        def call() -> Any:
            return function(inputs)

        return call

    def server_call(self, built: Built, examples: Sequence[tf.Tensor]) -> Callable[[tf.Tensor], Any]:
        """A call on any of the shapes of `examples`: one `tf.function` (XLA with mode xla), traced for each shape now, that
        returns once the device is done (TensorFlow chooses its GPU streams itself)."""
        model = built.model
        with tf.device(self._device):
            function = traced(lambda ids: model(ids, training=False), self.mode == "xla", examples[0])

        def call(x: tf.Tensor) -> Any:
            with tf.device(self._device):
                output = function(x)
            self.sync(output)
            return output

        for example in examples:
            call(example)
        return call

    def reference_output(self, built: Built, inputs: tf.Tensor) -> np.ndarray | None:
        if built.reference is None:
            return None  # TensorFlow's own random weights: not comparable with PyTorch's
        spec, scale = built.reference
        return self._worker.output(spec, scale, self.seed, self.cache_dir, inputs.numpy())

    def generator(self, built: Built, inputs: tf.Tensor) -> Generator:
        model = built.model
        with tf.device(self._device):
            mask = attention_mask(model, inputs)
        if reason := cannot_generate(model, inputs, mask):
            raise Unsupported(reason)
        prompt_length = int(inputs.shape[1])
        config = model.generation_config
        graphs = GenerateGraphs(model, self.mode == "xla", config.eos_token_id)

        def generate(new_tokens: int) -> tf.Tensor:
            if new_tokens == 1:
                return graphs.call("first", inputs, mask)
            return graphs.call("whole", inputs, **generate_options(config, prompt_length, new_tokens), **mask)

        return Generator(generate, lambda output: output[:, prompt_length:].numpy())

    def reference_tokens(self, built: Built, inputs: tf.Tensor, new_tokens: int) -> np.ndarray | None:
        if built.reference is None:
            return None  # TensorFlow's own random weights: not comparable with PyTorch's
        spec, scale = built.reference
        return self._worker.tokens(spec, scale, self.seed, self.cache_dir, inputs.numpy(), new_tokens)

    def inference_context(self) -> contextlib.AbstractContextManager[Any]:
        """The device scope, entered once around a cell rather than in every timed call."""
        return tf.device(self._device)

    def attn_implementation(self, built: Built) -> str:
        return "eager"  # transformers' TensorFlow models write attention out as matrix multiplies

    def sync(self, output: Any) -> None:
        if self.on_gpu:
            tf.test.experimental.sync_devices()  # waits for the GPU without copying the output to the host

    def device_busy_s(self, call: Callable[[], Any]) -> float | None:
        return None  # not profiled: its runtime's kernels are not timed here

    def free(self) -> None:
        tf.keras.backend.clear_session()
        gc.collect()

    def reset_peak_memory(self) -> None:
        tf.config.experimental.reset_memory_stats(self._device.lstrip("/"))

    def peak_memory_bytes(self) -> int:
        return int(tf.config.experimental.get_memory_info(self._device.lstrip("/"))["peak"])

    def settings(self) -> dict[str, Any]:
        configured = tf.config.threading.get_intra_op_parallelism_threads()
        return {
            "num_threads": configured or default_intra_op_threads(),
            "intra_op_threads_configured": configured,
            "num_interop_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "device": self._device,
            "gpus": [gpu.name for gpu in tf.config.list_physical_devices("GPU")],
            "tensor_float_32": tf.config.experimental.tensor_float_32_execution_enabled(),
        }

    def versions(self) -> dict[str, str]:
        build = tf.sysconfig.get_build_info()
        return {
            "tensorflow": tf.__version__,
            "cuda": str(build.get("cuda_version")),
            "cudnn": str(build.get("cudnn_version")),
        }


def traced(forward: Callable[[tf.Tensor], Any], jit: bool, example: tf.Tensor) -> Any:
    """`forward` in a `tf.function` (XLA's with `jit`), its graph traced on `example` now. Without AutoGraph, whose rewrite
    of the model's Python source was most of the tracing (a tiny model's first trace on one core: 1.3 to 2.6 s with it,
    0.1 to 0.3 s without) and changes nothing in these graphs: a transformers model's forward pass branches on shapes and
    settings, not on tensors (the same operations either way: tests/backends/test_tensorflow_graph.py). A model whose
    Python does branch on a tensor, which only AutoGraph turns into graph operations, is traced with it."""
    try:
        function = tf.function(forward, jit_compile=jit, autograph=False)
        function.get_concrete_function(example)
    except tf.errors.OperatorNotAllowedInGraphError:
        function = tf.function(forward, jit_compile=jit)
        function.get_concrete_function(example)
    return function


def generate_options(config: Any, prompt_length: int, new_tokens: int) -> dict[str, Any]:
    """The keyword arguments of a `generate` call after a prompt of `prompt_length` (but the attention mask): greedy, the
    key/value cache on, exactly `new_tokens` (`min_length` keeps the end of sequence away)."""
    return {
        "max_new_tokens": new_tokens, "min_length": prompt_length + new_tokens, "do_sample": False, "num_beams": 1, "use_cache": True,
        "pad_token_id": pad_token_id(config),
    }  # fmt: skip


class GenerateGraphs:
    """transformers' `generate` of `model` (`whole`, traced once per number of new tokens, a Python int) and its first
    step (`first`, `first_token`) in `tf.function`s, XLA's with `jit`, each traced (and compiled) at its first call.

    AutoGraph traces them, for `generate`'s loop branches on tensors (has every sequence ended?), but not into the model's
    forward pass: its `call` is marked `do_not_convert`, which also keeps AutoGraph out of its layers. Rewriting the
    forward's source was a quarter of the first call's time or more (tiny GPT-2 on one core: 10.3 s with it, 7.3 s
    without; XLA's, 11.8 and 8.7 s: docs/measurements.md#tensorflow-generate) and changes nothing in the graph
    (tests/backends/test_tensorflow_graph.py). A forward pass whose Python branches on a tensor, which only AutoGraph
    traces, is traced again with AutoGraph throughout."""

    def __init__(self, model: Any, jit: bool, eos_token_id: int | None) -> None:
        self._model, self._jit, self._eos_token_id = model, jit, eos_token_id
        if "call" not in vars(model):  # not marked yet (by another cell's graphs)
            model.call = tf.autograph.experimental.do_not_convert(model.call)
        self._make()

    def _make(self) -> None:
        model = self._model
        self.whole = tf.function(model.generate, jit_compile=self._jit)
        self.first = tf.function(lambda ids, mask: first_token(model, ids, mask, self._eos_token_id), jit_compile=self._jit)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tf.Tensor:
        """`whole` or `first` (`name`) called on the arguments."""
        try:
            return getattr(self, name)(*args, **kwargs)
        except tf.errors.OperatorNotAllowedInGraphError:
            if "call" not in vars(self._model):  # AutoGraph rewrote the forward pass already
                raise
            del self._model.call  # the class's own again, for AutoGraph to rewrite
            self._make()
            return getattr(self, name)(*args, **kwargs)


def attention_mask(model: Any, ids: tf.Tensor) -> dict[str, tf.Tensor]:
    """The attention mask of ones for `ids` as a keyword argument, where `model` takes one."""
    return {"attention_mask": tf.ones_like(ids)} if "attention_mask" in inspect.signature(model.call).parameters else {}


def cannot_generate(model: Any, ids: tf.Tensor, mask: dict[str, tf.Tensor]) -> str | None:
    """Why transformers' `generate` of TensorFlow `model` cannot run inside `tf.function`, or None when it can."""
    name = type(model).__name__
    if not model.can_generate():
        return f"{name} has no language model head to generate with (the causal-lm task has one)"
    if not model.supports_xla_generation:
        return f"transformers' {name} cannot generate inside tf.function"
    if not model.prepare_inputs_for_generation(ids, use_cache=True, **mask):
        return f"transformers' {name} cannot generate: its prepare_inputs_for_generation gives the model no inputs"
    return None


def first_token(model: Any, ids: tf.Tensor, mask: dict[str, tf.Tensor], eos_token_id: int | None) -> tf.Tensor:
    """The step that `generate` starts with, which makes the first token: a forward pass over the prompt with the key/value
    cache on, the end of sequence kept away, the greedy token; returned after the prompt, as `generate` returns its ids.
    (In a graph, transformers' TensorFlow `generate` cannot make a single token: it pads the key/value cache for
    max_length - prompt_length - 1 more tokens, which is then -1.)"""
    from transformers import TFMinLengthLogitsProcessor

    logits = model(**model.prepare_inputs_for_generation(ids, use_cache=True, **mask), return_dict=True).logits[:, -1]
    prompt_length = int(ids.shape[1])
    if eos_token_id is not None:
        logits = TFMinLengthLogitsProcessor(prompt_length + 1, eos_token_id)(ids, logits, prompt_length)
    return tf.concat([ids, tf.argmax(logits, axis=-1, output_type=ids.dtype)[:, None]], axis=1)


def load_pytorch_weights(model: Any, folder: Path) -> None:
    """Set a built TensorFlow model's weights to the PyTorch weights in `folder`'s safetensors files, read with numpy (no
    PyTorch) and converted by transformers' own loader. (Its `from_pretrained` iterates over the safetensors archive,
    which safetensors 0.8 no longer allows.)"""
    from safetensors.numpy import load_file
    from transformers.modeling_tf_pytorch_utils import load_pytorch_state_dict_in_tf2_model

    try:
        state = {name: array for file in sorted(folder.glob("*.safetensors")) for name, array in load_file(file).items()}
    except (TypeError, ValueError) as exc:  # e.g. bfloat16 weights, which numpy has no type for
        raise Unsupported(f"TensorFlow reads PyTorch weights through numpy, which cannot read these: {' '.join(str(exc).split())}") from None
    if not state:
        raise Unsupported(f"TensorFlow reads PyTorch weights from safetensors files, and {folder} has none")
    load_pytorch_state_dict_in_tf2_model(model, state, tf_inputs=False, allow_missing_keys=True)


def default_intra_op_threads() -> int:
    """TensorFlow's intra-op pool size when none is configured: TF_NUM_INTRAOP_THREADS, else the schedulable CPUs."""
    from_environment = int(os.environ.get("TF_NUM_INTRAOP_THREADS") or 0)
    if from_environment > 0:
        return from_environment
    return usable_cores()


def set_thread_pool(pool: str, num_threads: int) -> None:
    """Size TensorFlow's "intra" or "inter" op thread pool; possible only before TensorFlow's runtime starts."""
    get = getattr(tf.config.threading, f"get_{pool}_op_parallelism_threads")
    if get() == num_threads:
        return
    try:
        getattr(tf.config.threading, f"set_{pool}_op_parallelism_threads")(num_threads)
    except RuntimeError as exc:
        parameter = "num_threads" if pool == "intra" else "num_interop_threads"
        raise RuntimeError(f"{parameter}: TensorFlow's runtime has already started in this process; set {parameter} in a fresh kernel ({exc})") from None


def knob_words(knob: str, value: Any) -> str:
    """A knob's setting in TensorFlow's own words."""
    words = {
        "num_threads": f"tf.config.threading.set_intra_op_parallelism_threads({value}) before TensorFlow runs anything",
        "num_interop_threads": f"tf.config.threading.set_inter_op_parallelism_threads({value}) before TensorFlow runs anything",
    }
    return words.get(knob, f"{knob}: {value}")


INFO = register(
    BackendInfo(
        framework="tensorflow",
        description="TensorFlow: the model inside tf.function, or tf.function(jit_compile=True) (XLA)",
        modes=("function", "xla"),
        make=lambda settings: settings.make(TensorFlowBackend),
        model_class="tensorflow",
        versions=("tensorflow", "tf-keras"),
        requires=("tensorflow", "tf-keras"),
        extra="tensorflow",
        oom_classes=("ResourceExhaustedError",),  # tf.errors.ResourceExhaustedError, on the CPU and GPUs
        oom_messages=("OOM when allocating",),
        knob_words=knob_words,
    )
)
