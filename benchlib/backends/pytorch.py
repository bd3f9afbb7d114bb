"""PyTorch: eager (`model.eval()` under `torch.inference_mode()`), TorchScript (`torch.jit.trace` per shape)
and `torch.compile` (inductor, compiled per shape); float32, or the model cast to bfloat16 or float16.

A model's random weights are made once per machine (`weights`, in the build cache; a pretrained checkpoint is its own
folder) and loaded by every kernel. The other backends that start from a PyTorch model (ONNX Runtime, OpenVINO, and
TensorFlow for its weights) use `weights`, `build_reference`, `reference_output` and `traceable_masks` from here.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import importlib
import os
import re
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from unittest import mock

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from benchlib.backends import BackendInfo, lazy_import, register
from benchlib.backends._generate import Generator, transformers_generator
from benchlib.machine import bfloat16_cpu_reason, bfloat16_here_reason, gpu_precision_reason, package_version
from benchlib.store.cache import ENTRY_FILE, Artefact, artefact, compiler_cache, digest, find

if TYPE_CHECKING:  # the catalogue sits above the backends: they are handed its entries
    from benchlib.config.catalogue import ModelSpec
from benchlib.status import Unsupported

torch = lazy_import("torch")

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


class PyTorchOptions(BaseModel):
    """PyTorch's own parameters (`options:` in an environment file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attn_implementation: Literal["eager", "sdpa"] | None = None  # None: the model's own default
    # torch.compile's mode; reduce-overhead captures CUDA graphs on a GPU, which take the launching Python out of a call
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "default"
    # What OpenMP's threads do between two calls: active (spin, ready at once), passive (sleep, giving the cores back, and
    # pay a wake-up on the next call); null: the OpenMP runtime's default. Read by the runtime when it loads: the kernel
    # is started with OMP_WAIT_POLICY (`kernel_environment`).
    omp_wait_policy: Literal["active", "passive"] | None = None
    # float32 matrix multiplies and convolutions on a GPU's TF32 matrix units (Ampere and later): 10 bits of mantissa
    tf32: bool = False
    # The one kernel scaled_dot_product_attention may use (torch.nn.attention.sdpa_kernel); null: PyTorch chooses. A kernel
    # that cannot run a cell's shape or dtype makes that cell `unsupported`, with PyTorch's reason.
    sdpa_kernel: Literal["flash", "efficient", "cudnn", "math"] | None = None

    @model_validator(mode="after")
    def _sdpa_needs_sdpa(self) -> PyTorchOptions:
        if self.sdpa_kernel is not None and self.attn_implementation == "eager":
            raise ValueError("sdpa_kernel chooses a kernel of scaled_dot_product_attention, which attn_implementation eager does not call: set attn_implementation to sdpa or leave it unset")
        return self


SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
# scaled_dot_product_attention's errors where no kernel allowed can run the inputs (on a GPU; on a CPU)
NO_KERNEL = ("No available kernel", "No viable backend for scaled_dot_product_attention")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile's modes that capture CUDA graphs (cudagraph trees)
GRAPH_RECORDING_RUNS = 3  # a shape's calls until its CUDA graph has been recorded and replayed once


def kernel_environment(options: PyTorchOptions) -> dict[str, str]:
    """OMP_WAIT_POLICY where the options set it, with OMP_DISPLAY_ENV so that the OpenMP runtime prints what it read (to
    the kernel's log) when it loads."""
    if options.omp_wait_policy is None:
        return {}
    return {"OMP_WAIT_POLICY": options.omp_wait_policy.upper(), "OMP_DISPLAY_ENV": "TRUE"}


def use_torch() -> None:
    """One framework per kernel: transformers must not import TensorFlow beside PyTorch."""
    os.environ.update(USE_TF="0", USE_TORCH="1")


def _broadcast_for_bhqkv(mask_function: Callable, bh_indices: bool = True) -> Callable:
    """Drop-in for transformers' `_vmap_for_bhqkv` that broadcasts instead of using `torch.vmap`."""

    def mask(batch_idx: Any, head_idx: Any, q_idx: Any, kv_idx: Any) -> Any:
        q, kv = q_idx[:, None], kv_idx[None, :]
        if not bh_indices:
            return mask_function(batch_idx, head_idx, q, kv).expand(q_idx.size(0), kv_idx.size(0))
        # size() rather than len(): a tracer records sizes, so an exported graph keeps dynamic shapes.
        shape = (batch_idx.size(0), head_idx.size(0), q_idx.size(0), kv_idx.size(0))
        result = mask_function(batch_idx[:, None, None, None], head_idx[None, :, None, None], q[None, None], kv[None, None])
        return result.expand(shape)

    return mask


@contextlib.contextmanager
def traceable_masks() -> Iterator[None]:
    """Compatibility shim for tracing and exporting: transformers 4.57 builds causal masks (GPT-2,
    CTRL, ...) with `torch.vmap` and an indexing mode, which `torch.jit.trace`, the ONNX exporter
    and OpenVINO cannot record ("unordered_map::at"). While tracing, the same mask functions are
    evaluated by plain broadcasting and indexing, which gives the same mask. The check for packed
    sequences (`torch.diff` over the position ids, which the ONNX exporter cannot export) is
    skipped: a benchmark's input is one sequence per row, positions 0..n-1.
    """
    masking_utils = importlib.import_module("transformers.masking_utils")
    with (
        mock.patch.object(masking_utils, "_vmap_for_bhqkv", _broadcast_for_bhqkv),
        mock.patch.object(masking_utils, "TransformGetItemToIndex", contextlib.nullcontext),
        mock.patch.object(masking_utils, "find_packed_sequence_indices", lambda position_ids: None),
    ):
        yield


def weights(spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None = None) -> Artefact:
    """The weights every kernel loads `spec` from: a pretrained checkpoint's own folder, or else the build cache's entry of
    its seeded random weights at `scale` (a `save_pretrained` folder), made once, so that every kernel, round and run on
    this machine loads the same weights and an export made from them matches another kernel's reference. The random
    weights are keyed by the model's class and configuration, the seed and the versions of torch and transformers."""

    def make(folder: Path) -> None:
        use_torch()
        torch.manual_seed(seed)
        spec.instantiate("pytorch", spec.build_config(scale, **spec.inference_config)).save_pretrained(folder)

    return weights_found(spec, scale, seed, cache_dir) or artefact("weights", spec.cache_label(scale), _random_weights_key(spec, scale, seed), make, cache_dir)


def _random_weights_key(spec: ModelSpec, scale: str, seed: int) -> dict[str, Any]:
    return {
        "model": spec.name, "class": spec.pytorch_class, "config": spec.config_values(scale, **spec.inference_config), "seed": seed,
        "torch": package_version("torch"), "transformers": package_version("transformers"),
    }  # fmt: skip


def weights_found(spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None = None) -> Artefact | None:
    """`weights` where nothing is to be made (a checkpoint's own folder, or random weights already in the build cache),
    else None; PyTorch is not imported."""
    if spec.weights == "pretrained" and spec.source:
        return Artefact(Path(spec.source), cached=True, made_s=0.0)
    return find("weights", spec.cache_label(scale), _random_weights_key(spec, scale, seed), cache_dir)


def weights_identity(spec: ModelSpec, scale: str, seed: int) -> str:
    """What identifies the weights `weights` gives for `spec`, known without making them: `weights_key` of a checkpoint's
    own folder, or the digest of the random weights' key."""
    if spec.weights == "pretrained" and spec.source:
        return weights_key(Artefact(Path(spec.source), cached=True, made_s=0.0))
    return digest(_random_weights_key(spec, scale, seed))


def weights_key(made_from: Artefact) -> str:
    """What identifies the weights in `made_from` for an artefact made from them: the build cache entry's digest, or for a
    checkpoint's own folder a digest of its path and of the names, sizes and times of its files."""
    if made_from.path.parent.name == "weights" and (made_from.path / ENTRY_FILE).is_file():
        return made_from.digest
    files = sorted((item.name, item.stat().st_size, item.stat().st_mtime_ns) for item in made_from.path.iterdir() if item.is_file())
    return digest({"folder": str(made_from.path), "files": files})


def build_reference(spec: ModelSpec, scale: str, seed: int, attn_implementation: str | None = None, cache_dir: Path | None = None) -> Any:
    """The eager float32 PyTorch model on the CPU with `weights(spec, scale, seed)`: the same weights in every kernel."""
    use_torch()
    folder = weights(spec, scale, seed, cache_dir).path
    torch.manual_seed(seed)  # a weight the checkpoint lacked would be drawn the same in every kernel
    config = spec.build_config(scale, **spec.inference_config) if spec.source else None  # the overrides, over config.json's values
    try:
        model = spec.transformers_class("pytorch").from_pretrained(
            folder, dtype=torch.float32, trust_remote_code=spec.trust_remote_code, **({"config": config} if config is not None else {}),
            **({"attn_implementation": attn_implementation} if attn_implementation else {}),
        )  # fmt: skip
    except ValueError as exc:
        if attn_implementation and "attention" in str(exc).lower():
            raise Unsupported(f"attn_implementation {attn_implementation}: {' '.join(str(exc).split())}") from None
        raise
    return model.eval()


def first_output(output: Any) -> Any:
    """The first tensor of a model's output (the last hidden state, or a head's logits), whatever wraps it."""
    while isinstance(output, (tuple, list, dict)) or hasattr(output, "to_tuple"):
        if hasattr(output, "to_tuple"):
            output = output.to_tuple()[0]
        else:
            output = next(iter(output.values())) if isinstance(output, dict) else output[0]
    return output


def as_array(output: Any) -> np.ndarray:
    """A backend's first output as a float32 numpy array."""
    value = first_output(output)
    if hasattr(value, "detach"):
        value = value.detach().float().cpu().numpy()
    return np.asarray(value, dtype=np.float32)


def reference_output(reference: Any, input_ids: Any) -> np.ndarray:
    """Eager PyTorch float32's first output (the last hidden state, or the head's logits) for `input_ids` (a tensor or an array)."""
    device = next(reference.parameters()).device
    ids = torch.as_tensor(np.asarray(input_ids.cpu() if hasattr(input_ids, "cpu") else input_ids), dtype=torch.long, device=device)
    with torch.inference_mode():
        return as_array(reference(ids))


def reference_tokens(reference: Any, input_ids: Any, new_tokens: int) -> np.ndarray:
    """Eager PyTorch float32's greedy tokens after the prompt `input_ids` (a tensor or an array): (batch, new_tokens) ids,
    with transformers' dynamic key/value cache (`_generate.transformers_generator`)."""
    device = next(reference.parameters()).device
    ids = torch.as_tensor(np.asarray(input_ids.cpu() if hasattr(input_ids, "cpu") else input_ids), dtype=torch.long, device=device)
    with torch.inference_mode():
        generator = transformers_generator(reference, ids)
        return generator.new_ids(generator.generate(new_tokens))


def bfloat16_unsupported(flags: set[str] | None = None) -> str | None:
    """Why bfloat16 would give a misleading number on a CPU with `flags` (None: this machine's, as oneDNN may use
    them: `machine.bfloat16_here_reason`), or None when it has the instructions."""
    return bfloat16_here_reason() if flags is None else bfloat16_cpu_reason(flags)


def compiler_unsupported() -> str | None:
    """Why torch.compile's inductor cannot build CPU kernels here (no C++ compiler), or None."""
    try:
        importlib.import_module("torch._inductor.cpp_builder").get_cpp_compiler()
    except Exception as exc:  # inductor raises its own error type when no compiler is found
        return f"torch.compile's inductor needs a C++ compiler (g++ or clang++): {' '.join(str(exc).split()) or type(exc).__name__}"
    return None


def set_tf32(on: bool) -> None:
    """TF32's matrix units on or off for float32's matrix multiplies and convolutions."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on


@dataclass
class Built:
    """A built PyTorch model: what is run, and the eager float32 model its output is compared with."""

    model: Any
    reference: Any | None  # None when `model` is itself eager float32

    @property
    def config(self) -> Any:
        return self.model.config


@dataclass
class PyTorchBackend:
    """Runs catalogue models with PyTorch."""

    mode: str
    device: str = "cpu"
    num_threads: int | None = None
    num_interop_threads: int | None = None
    precision: str = "float32"
    options: PyTorchOptions = PyTorchOptions()
    seed: int = 0
    cache_dir: Path | None = None  # the build cache (None: BENCHLIB_CACHE or the user's cache directory)
    framework: str = "pytorch"

    def __post_init__(self) -> None:
        use_torch()
        if self.mode == "compile":  # inductor's own cache (compiled kernels) in the build cache, unless the user placed it
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(compiler_cache("inductor", self.cache_dir)))
        self._device = torch.device(self.device)
        # the model whose streams' call `server_call` made, that call, and the shapes it was prepared for
        self._served: tuple[Any, Callable[[Any], Any], list[tuple[int, ...]]] | None = None
        self._graph_streams: weakref.WeakSet[Callable[[Any], Any]] = weakref.WeakSet()  # the streams' calls of CUDA graphs still held
        if self.on_gpu and (self._device.index or 0) >= torch.cuda.device_count():
            raise RuntimeError(f"device {self.device}: PyTorch sees {torch.cuda.device_count()} GPU(s) on this machine")
        if self.on_gpu:
            set_tf32(self.options.tf32)
        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        if self.num_interop_threads and torch.get_num_interop_threads() != self.num_interop_threads:
            try:
                torch.set_num_interop_threads(self.num_interop_threads)
            except RuntimeError as exc:
                raise RuntimeError(f"num_interop_threads: PyTorch's inter-op pool has already started in this process; set it in a fresh kernel ({exc})") from None

    @property
    def on_gpu(self) -> bool:
        return self._device.type == "cuda"

    def unsupported(self) -> str | None:
        if self.options.tf32 and not self.on_gpu:
            return "tf32 is a mode of a CUDA GPU's matrix units (Ampere and later): a CPU has none"
        for precision, asked in (("bfloat16", self.precision == "bfloat16"), ("tf32", self.options.tf32)):
            if asked and self.on_gpu and (reason := gpu_precision_reason(self.device, precision)):
                return f"{reason}: torch would emulate it or ignore it, and its number would not be the card's"
        if self.precision == "bfloat16" and not self.on_gpu:
            return bfloat16_unsupported()
        if self.precision == "float16" and not self.on_gpu:
            return "float16 runs on GPUs; on a CPU use bfloat16"
        if self.mode == "compile" and not self.on_gpu:
            return compiler_unsupported()
        return None

    def build(self, spec: ModelSpec, scale: str) -> Built:
        reference = build_reference(spec, scale, self.seed, self.options.attn_implementation, self.cache_dir)
        if self.mode == "torchscript":
            reference.config.torchscript = True  # only makes the model return tuples, which the tracer needs
        if self.precision == "float32":  # traced or compiled graphs, or TF32 units, run the same module's weights
            model = reference.to(self._device)
            return Built(model, model if self.mode != "eager" or self.options.tf32 else None)
        model = copy.deepcopy(reference).to(device=self._device, dtype=getattr(torch, DTYPES[self.precision]))
        return Built(model, reference)

    def as_inputs(self, ids: np.ndarray) -> Any:
        return torch.from_numpy(ids).to(self._device)

    def explained(self, run: Callable[..., Any]) -> Callable[..., Any]:
        """`run`, where an attention kernel is chosen (`sdpa_kernel`) and cannot run its inputs, raising `Unsupported`
        with PyTorch's reason (the warnings it gives for each kernel it could not use, else its error)."""
        kernel = self.options.sdpa_kernel
        if kernel is None:
            return run

        def explaining(*args: Any) -> Any:
            try:
                return run(*args)
            except RuntimeError as exc:
                if not any(text in str(exc) for text in NO_KERNEL):
                    raise
                with warnings.catch_warnings(record=True) as seen, contextlib.suppress(RuntimeError):
                    warnings.simplefilter("always")
                    run(*args)
                why = "; ".join(dict.fromkeys(" ".join(str(w.message).split()) for w in seen)) or " ".join(str(exc).split())
                raise Unsupported(f"sdpa_kernel {kernel} cannot run this cell: {why}") from exc

        return explaining

    def prepare(self, built: Built, inputs: Any) -> Callable[[], Any]:
        return self.explained(self._prepare)(built, inputs)

    def _prepare(self, built: Built, inputs: Any) -> Callable[[], Any]:
        model = built.model
        if self.mode == "torchscript":
            # The tracer warns about every Python branch it fixes for this shape: tracing per shape is the point.
            with torch.inference_mode(), traceable_masks(), warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                # strict=False: transformers 4.57's Llama-style models return a dict even with torchscript=True (their
                # check_model_inputs reads return_dict), which the tracer refuses unless told that the dict's keys are fixed.
                target = torch.jit.trace(model, inputs, check_trace=False, strict=False)
        elif self.mode == "compile":
            torch._dynamo.reset()  # compiled per shape, from scratch: no earlier shape's graphs or recompile limits
            target = torch.compile(model, mode=self.options.compile_mode, dynamic=False)
            target(inputs)  # compiles now, so that compiling is part of preparing
        else:
            target = model

        def call() -> Any:
            return target(inputs)

        return self.explained(call)

    def server_call(self, built: Built, examples: Sequence[Any]) -> Callable[[Any], Any]:
        """A call on any of the shapes of `examples`: the model itself in eager mode, one trace per shape in TorchScript,
        one compiled model in torch.compile (dynamic=False, its recompile limit raised to the shapes), each shape run once
        now. Each call runs in inference mode, which is per thread. Every stream of a model shares the model's call:
        a module needs nothing of a stream's own, and compiling again would undo the other streams' graphs. On a GPU
        each stream runs it in a thread and CUDA stream of its own (`on_own_stream`); a call captured in CUDA graphs
        (`captures_graphs`) is never shared: a second stream asking for it is `Unsupported`, with the reason."""
        model, shapes = built.model, [tuple(x.shape) for x in examples]
        made = self._served is None or self._served[0] is not model or self._served[2] != shapes
        if not made and self.on_gpu and self.captures_graphs and len(self._graph_streams):  # another stream serves it now
            raise Unsupported(
                f"compile_mode {self.options.compile_mode} captures CUDA graphs, which several streams would share: one stream's "
                "replay may overwrite another's outputs. Serve it with streams: 1, or compile_mode default beside several streams"
            )
        if made:
            self._served = (model, self._model_call(model, examples), shapes)
        assert self._served is not None
        call = self._served[1]
        if self.on_gpu:
            if not self.captures_graphs:
                return on_own_stream(call, examples, torch.cuda.Stream(self._device))
            served = on_own_stream(call, examples, torch.cuda.Stream(self._device), GRAPH_RECORDING_RUNS)
            self._graph_streams.add(served)
            return served
        for example in examples if made else ():
            call(example)
        return call

    @property
    def captures_graphs(self) -> bool:
        """Whether torch.compile's mode captures the calls in CUDA graphs (cudagraph trees), on a GPU."""
        return self.mode == "compile" and self.options.compile_mode in CUDA_GRAPH_MODES

    def _model_call(self, model: Any, examples: Sequence[Any]) -> Callable[[Any], Any]:
        """The call every stream of `model` shares (see `server_call`), not run yet."""
        if self.mode == "torchscript":
            with torch.inference_mode(), traceable_masks(), warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                traced = {tuple(x.shape): torch.jit.trace(model, x, check_trace=False, strict=False) for x in examples}

            def target(x: Any) -> Any:
                return traced[tuple(x.shape)](x)

        elif self.mode == "compile":
            torch._dynamo.reset()
            config = torch._dynamo.config
            config.recompile_limit = max(config.recompile_limit, len(examples))
            config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * len(examples))
            target = torch.compile(model, mode=self.options.compile_mode, dynamic=False)
        else:
            target = model

        def serve(x: Any) -> Any:
            with torch.inference_mode():
                return target(x)

        return self.explained(serve)

    def reference_output(self, built: Built, inputs: Any) -> np.ndarray | None:
        if built.reference is None:
            return None
        with self.as_reference():
            return reference_output(built.reference, inputs)

    def attention_kernel(self) -> contextlib.AbstractContextManager[Any]:
        """The one attention kernel the model's calls may use (`sdpa_kernel`), while the context lasts; nothing without one."""
        if self.options.sdpa_kernel is None:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[self.options.sdpa_kernel]))

    @contextlib.contextmanager
    def as_reference(self) -> Iterator[None]:
        """The reference's own settings while it runs: float32, all 23 bits of it (TF32's matrix units off where `tf32`
        turned them on), and PyTorch's own choice of attention kernel (where `sdpa_kernel` held the model's calls to
        one: the reference, on the CPU beside a half-precision model, may have no such kernel)."""
        with contextlib.ExitStack() as stack:
            if self.options.sdpa_kernel is not None:
                from torch.nn.attention import SDPBackend, sdpa_kernel

                stack.enter_context(sdpa_kernel([getattr(SDPBackend, name) for name in SDPA_BACKENDS.values()]))
            if self.on_gpu and self.options.tf32:
                set_tf32(False)
                stack.callback(set_tf32, True)
            yield

    def generator(self, built: Built, inputs: Any) -> Generator:
        """transformers' `generate` with its dynamic key/value cache; with `compile`, a static cache and the forward
        compiled by `torch.compile` (transformers' way of compiling generation), compiled for this prompt from scratch."""
        if self.mode == "torchscript":
            raise Unsupported("TorchScript traces one forward pass of fixed shapes: transformers' generate cannot run a traced model")
        model = built.model
        if self.mode != "compile":
            return transformers_generator(model, inputs, self.sync)
        if not getattr(model, "_can_compile_fullgraph", False):
            raise Unsupported(f"transformers' {type(model).__name__} has no static key/value cache to compile generation with")
        torch._dynamo.reset()
        compiled = torch.compile(model.forward, mode=self.options.compile_mode, dynamic=False, fullgraph=True)
        eager = transformers_generator(model, inputs, self.sync, cache_implementation="static", disable_compile=True)
        compiled_for: set[int] = set()

        def generate(new_tokens: int) -> Any:
            # The first call for a number of new tokens sets the static cache up eagerly (a graph compiled for an empty
            # cache would serve that call alone), then compiles: both before the warm-up (inductor's compilers are other
            # processes, which the warm-up would measure as interference).
            if new_tokens not in compiled_for:
                eager.generate(new_tokens)
                compiled_for.add(new_tokens)
            model.forward = compiled  # only during the call: the same module stays eager for the reference's tokens
            try:
                return eager.generate(new_tokens)
            finally:
                del model.forward

        return Generator(generate, eager.new_ids, eager.clock, compiles_per_prompt=True)

    def reference_tokens(self, built: Built, inputs: Any, new_tokens: int) -> np.ndarray | None:
        if built.reference is None:
            return None
        with self.as_reference():
            return reference_tokens(built.reference, inputs, new_tokens)

    def attn_implementation(self, built: Built) -> str:
        return str(getattr(built.config, "_attn_implementation", None) or "eager")

    @contextlib.contextmanager
    def inference_context(self) -> Iterator[None]:
        """Inference mode and the attention kernel (`attention_kernel`), entered once around a cell rather than in every
        timed call, and left after it: never held for the process, nor for the reference (`as_reference`)."""
        with torch.inference_mode(), self.attention_kernel():
            yield

    def sync(self, output: Any) -> None:
        if self.on_gpu:
            torch.cuda.synchronize(self._device)

    def device_busy_s(self, call: Callable[[], Any]) -> float | None:
        """On a GPU, the kernels' time in one profiled `call` (`kernel_seconds`), garbage collection off as in the
        samples; None on the CPU."""
        if not self.on_gpu:
            return None
        from torch.profiler import ProfilerActivity, profile

        self.sync(None)
        collecting = gc.isenabled()
        gc.disable()
        try:
            with profile(activities=[ProfilerActivity.CUDA]) as profiled:
                self.sync(call())
        finally:
            if collecting:
                gc.enable()
        return kernel_seconds(profiled.events())

    def free(self) -> None:
        self._served = None
        gc.collect()
        if self.on_gpu:
            torch.cuda.empty_cache()

    def reset_peak_memory(self) -> None:
        torch.cuda.reset_peak_memory_stats(self._device)

    def peak_memory_bytes(self) -> int:
        return int(torch.cuda.max_memory_allocated(self._device))

    def settings(self) -> dict[str, Any]:
        return {**thread_settings(), "device": str(self._device)}

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__, "cuda": str(torch.version.cuda), "cudnn": str(torch.backends.cudnn.version())}


def on_own_stream(call: Callable[[Any], Any], examples: Sequence[Any], stream: Any, runs: int = 1) -> Callable[[Any], Any]:
    """`call` as one serving stream runs it on a GPU: in a thread of its own kept for the cell, whose current CUDA stream
    is `stream` (a `torch.cuda.Stream`), so that one stream's batch runs on the card while another's is launched, and
    each stream waits for its own work only. The thread is the stream's for good because torch.compile's CUDA graphs
    are recorded per thread (cudagraph trees): each of `examples` is run in it now, `runs` times (a graph is recorded at
    a shape's second call, and replayed from its third: GRAPH_RECORDING_RUNS), so that every graph is recorded before
    any request is timed. The inputs, copied to the GPU by the caller's stream, are waited for first."""
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cuda-stream", initializer=torch.cuda.set_stream, initargs=(stream,))
    default = torch.cuda.default_stream(stream.device)

    def run(x: Any) -> Any:
        stream.wait_stream(default)
        output = call(x)
        stream.synchronize()
        return output

    def on_stream(x: Any) -> Any:
        return worker.submit(run, x).result()

    weakref.finalize(on_stream, worker.shutdown, wait=False)  # the thread ends with the last reference to the call
    for _ in range(runs):
        for example in examples:
            on_stream(example)
    return on_stream


def kernel_seconds(events: Iterable[Any]) -> float:
    """The seconds a GPU ran kernels, from a profile's events (`torch.profiler.profile(...).events()`): the self device
    time of every event that ran on the GPU (kernels, memory copies and sets), in microseconds in the profile."""
    busy_us = sum(
        getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0)
        for event in events if str(getattr(event, "device_type", "")).endswith("CUDA")
    )  # fmt: skip
    return busy_us / 1e6


def thread_settings() -> dict[str, Any]:
    """Thread counts in effect: PyTorch's own, and OpenMP's and MKL's as PyTorch reports them."""
    info = torch.__config__.parallel_info()
    settings: dict[str, Any] = {
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "the OpenMP runtime's default"),  # as this process started
    }
    for key, name in (("openmp_threads", "omp_get_max_threads"), ("mkl_threads", "mkl_get_max_threads")):
        match = re.search(rf"{name}\(\) : (\d+)", info)
        settings[key] = int(match.group(1)) if match else None
    return settings


def gpu_tune_knobs(mode: str, precision: str) -> dict[str, tuple[Any, ...]]:
    """What a tune tries on a GPU: torch.compile's modes (CUDA graphs, autotuned kernels) where compiled, and the attention
    kernel (FlashAttention and cuDNN's run float16 and bfloat16 only)."""
    kernels = ("flash", "efficient", "cudnn", "math") if precision in ("float16", "bfloat16") else ("efficient", "math")
    modes = {"compile_mode": ("default", "reduce-overhead", "max-autotune")} if mode == "compile" else {}
    return {**modes, "sdpa_kernel": kernels}


def knob_words(knob: str, value: Any) -> str:
    """A knob's setting in PyTorch's own words."""
    words = {
        "num_threads": f"torch.set_num_threads({value})",
        "num_interop_threads": f"torch.set_num_interop_threads({value}) before any parallel work",
        "omp_wait_policy": f"OMP_WAIT_POLICY={str(value).upper()} in the environment before the process starts (OpenMP reads it once)",
        "attn_implementation": f"from_pretrained(..., attn_implementation={value!r})",
        "compile_mode": f"torch.compile(model, mode={value!r})",
        "tf32": f"torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = {value!r}",
    }
    if knob == "sdpa_kernel":
        return "PyTorch's own choice of attention kernel" if value is None else f"with sdpa_kernel(SDPBackend.{SDPA_BACKENDS[value]}): around the calls"
    return words.get(knob, f"{knob}: {value}")


INFO = register(
    BackendInfo(
        framework="pytorch",
        description="PyTorch: eager, TorchScript (torch.jit.trace) or torch.compile (inductor), per shape",
        modes=("eager", "torchscript", "compile"),
        precisions=("float32", "bfloat16", "float16"),
        options=PyTorchOptions,
        make=lambda settings: settings.make(PyTorchBackend),
        model_class="pytorch",
        versions=("torch",),
        kernel_environment=kernel_environment,
        oom_classes=("OutOfMemoryError",),  # torch.cuda.OutOfMemoryError and torch.OutOfMemoryError
        oom_messages=("can't allocate memory", "CUDA out of memory"),  # CPU allocator; CUDA caching allocator
        tune_knobs={"omp_wait_policy": ("active", "passive")},
        gpu_tune_knobs=gpu_tune_knobs,
        knob_words=knob_words,
    )
)
