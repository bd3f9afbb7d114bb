"""How to run a model: one module per backend, each registering a `BackendInfo`, and the `Backend` interface.

Adding a backend is one module in this folder (plus its environment files in
parameters/environments/): the module calls `register(BackendInfo(...))` with its framework
name, modes, precisions, devices, options (a pydantic model), out-of-memory errors, the
distributions whose versions `environment.json` records, and the distributions it needs beyond the
kit's core dependencies (`requires`) with the extra that installs them (`extra`: `pip install
'benchlib[openvino]'`). Parameter validation, the catalogue's class lookup, out-of-memory
recognition and `environment.json` all read this registry.

A backend whose required distributions are missing is still registered (its environments validate),
but `load_backend` makes an `UnavailableBackend` instead of importing its framework, so that every
cell of its environments ends `unsupported` with the pip line that installs it.

A backend module imports its framework only when its backend is made (`lazy_import`), so that
reading the registry in the runner does not import PyTorch, TensorFlow or ONNX Runtime, and a
kernel imports only the framework it measures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import pkgutil
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict

from benchlib.machine import package_version, usable_cores
from benchlib.status import Unsupported

if TYPE_CHECKING:  # the catalogue sits above the backends: they are handed its entries
    import numpy as np

    from benchlib.backends._generate import Generator
    from benchlib.config.catalogue import ModelSpec

PRECISIONS: tuple[str, ...] = ("float32", "bfloat16", "float16", "int8")
# The largest absolute difference from eager PyTorch float32's output that a backend's output may
# have, per precision, relative to the output's scale (its largest absolute value, at least 1); beyond
# it the cell is an `error`. Hidden states after a layer norm have values of order 1 and logits larger,
# so these are loose enough for rounding and tight enough for a wrong graph.
TOLERANCE: dict[str, float] = {"float32": 1e-3, "float16": 0.25, "bfloat16": 0.5, "int8": 1.0, "tf32": 0.05}  # tf32: float32 on TF32 matrix units


def tolerance_key(precision: str, options: dict[str, Any]) -> str:
    """Which TOLERANCE an environment's output is held to: its precision's, or TF32's where float32 runs on TF32 units."""
    return "tf32" if precision == "float32" and options.get("tf32") else precision


class NoOptions(BaseModel):
    """A backend without options of its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class BackendSettings:
    """What a backend is made with: the environment's parameters that concern it."""

    mode: str
    device: str = "cpu"
    precision: str = "float32"
    options: BaseModel = field(default_factory=NoOptions)
    num_threads: int | None = None
    num_interop_threads: int | None = None
    seed: int = 0
    cache_dir: Path | None = None  # the build cache (store/cache.py); None: BENCHLIB_CACHE or the user's cache directory
    workload: str = "forward"  # what the cells call: "forward" (one forward pass) or "generate" (`Backend.generator`)
    output_dir: Path | None = None  # the environment's folder in the run (where a serving engine's log is kept)
    environment: str = ""  # the environment's name

    def make(self, backend_class: type[Any]) -> Any:
        """An instance of the dataclass `backend_class`, given each of these settings it has a field for."""
        names = {field.name for field in dataclasses.fields(backend_class)}
        return backend_class(**{name: value for name, value in vars(self).items() if name in names})


def plain_knob_words(knob: str, value: Any) -> str:
    """A knob's setting where the backend has no words of its own for it."""
    return f"{knob}: {value}"


def no_kernel_environment(options: BaseModel) -> dict[str, str]:
    """A backend whose options all take effect in a running process."""
    return {}


def no_gpu_tune_knobs(mode: str, precision: str) -> dict[str, tuple[Any, ...]]:
    """A backend with no options worth trying on a GPU."""
    return {}


@dataclass(frozen=True)
class BackendInfo:
    """One backend as the registry knows it, without importing its framework."""

    framework: str
    modes: tuple[str, ...]
    make: Callable[[BackendSettings], Backend]
    description: str = ""
    precisions: tuple[str, ...] = ("float32",)
    devices: tuple[str, ...] = ("cpu", "cuda")
    options: type[BaseModel] = NoOptions
    model_class: str = "pytorch"  # which of the catalogue's classes it builds from ("pytorch" or "tensorflow")
    versions: tuple[str, ...] = ()  # distributions whose versions environment.json records
    requires: tuple[str, ...] = ()  # distributions it imports beyond the kit's core dependencies, checked before it is made
    extra: str | None = None  # the kit's extra that installs `requires`: pip install 'benchlib[<extra>]'
    # The distribution of its GPU build, which stands in for its first required one (onnxruntime-gpu for onnxruntime: the
    # same module); where there is one, the backend runs on a GPU only with it
    gpu_build: str | None = None
    oom_classes: tuple[str, ...] = ()  # exception class names that mean out of memory
    oom_messages: tuple[str, ...] = ()  # fragments of its allocators' error messages
    # The environment variables a kernel must start with for these options to take effect (a runtime reads them once, when
    # it loads): the runner starts each kernel with them (`kernel_variables`).
    kernel_environment: Callable[[Any], dict[str, str]] = no_kernel_environment
    # Its own options a tune's automatic space tries, each with the values worth trying (config/tune.py); on a GPU, those
    # of `gpu_tune_knobs(mode, precision)` instead.
    tune_knobs: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    gpu_tune_knobs: Callable[[str, str], dict[str, tuple[Any, ...]]] = no_gpu_tune_knobs
    # A knob's setting in the runtime's own words (its API or environment variable), for the settings to deploy.
    knob_words: Callable[[str, Any], str] = plain_knob_words

    def runtime(self) -> str:
        """The distribution that runs its models, with its installed version ("openvino 2026.4.0"): its first `versions`."""
        name = self.versions[0] if self.versions else self.framework
        return f"{name} {package_version(name) or '(not installed)'}"

    def unsupported_keys(self, mode: str, precision: str = "float32") -> tuple[str, ...]:
        """The catalogue's `unsupported` keys that apply, most specific first: `framework/mode`,
        `framework/precision`, `framework`, then the framework whose model it starts from."""
        keys = (f"{self.framework}/{mode}", f"{self.framework}/{precision}", self.framework)
        return keys if self.model_class == self.framework else (*keys, self.model_class)


REGISTRY: dict[str, BackendInfo] = {}


def register(info: BackendInfo) -> BackendInfo:
    """Add `info` to the registry (a module's backend, or one defined by a test); returns it."""
    unknown = [precision for precision in info.precisions if precision not in PRECISIONS]
    if unknown:
        raise ValueError(f"backend {info.framework}: precisions must be among {', '.join(PRECISIONS)}, not {', '.join(unknown)}")
    REGISTRY[info.framework] = info
    return info


@cache
def discover() -> None:
    """Import every backend module of this package once, so that each registers itself."""
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


def registry() -> dict[str, BackendInfo]:
    """Every registered backend by framework name."""
    discover()
    return REGISTRY


def frameworks() -> tuple[str, ...]:
    """The framework names a parameter file may give, in alphabetical order."""
    return tuple(sorted(registry()))


def backend_info(framework: str) -> BackendInfo:
    """The registered backend `framework`; a ValueError lists the registered ones."""
    if framework not in registry():
        raise ValueError(f"framework must be one of {', '.join(registry())}, not {framework!r}")
    return registry()[framework]


def modes(framework: str) -> tuple[str, ...]:
    """The modes `framework` offers."""
    return backend_info(framework).modes


def versions_of(framework: str) -> dict[str, str | None]:
    """Installed versions of the distributions `framework` declares (None where one is missing)."""
    return {name: package_version(name) for name in backend_info(framework).versions}


def installed(distribution: str) -> bool:
    """Whether distribution `distribution` is installed (its metadata is found); nothing is imported."""
    return package_version(distribution) is not None


def pip_line(extra: str | None, distributions: Sequence[str] = ()) -> str:
    """The command that installs what is missing: the kit with `extra`, or else the distributions themselves."""
    return f"pip install 'benchlib[{extra}]'" if extra else "pip install " + " ".join(f"'{name}'" for name in distributions)


def not_installed_message(missing: Sequence[str], extra: str | None) -> str:
    """One line: which distributions are missing and the pip line that installs them."""
    return f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: {pip_line(extra, missing)}"


def not_installed(framework: str) -> str | None:
    """Why backend `framework` cannot run in this Python for want of a distribution it requires (which ones, and
    the pip line), or None when they are all installed. Reads metadata only: nothing that could fail is imported."""
    info = backend_info(framework)
    standing_in = {info.requires[0]: info.gpu_build} if info.requires and info.gpu_build else {}
    missing = [name for name in info.requires if not (installed(name) or (name in standing_in and installed(standing_in[name])))]
    return not_installed_message(missing, info.extra) if missing else None


def unsupported_reason(spec: ModelSpec, framework: str, mode: str, precision: str = "float32") -> str | None:
    """Why catalogue entry `spec` cannot run in `framework`/`mode` at `precision`, or None when it can: its
    `unsupported` reasons under `framework/mode`, `framework/precision`, `framework`, then the framework
    whose model the backend starts from (an ONNX export of a PyTorch model fails where PyTorch does)."""
    return spec.unsupported_for(backend_info(framework).unsupported_keys(mode, precision))


def model_class(spec: ModelSpec, framework: str) -> Any:
    """The `transformers` class that backend `framework` builds `spec` from (its registry entry's `model_class`)."""
    return spec.transformers_class(backend_info(framework).model_class)


def without_scikit_learn_in_transformers() -> None:
    """Keep transformers from importing scikit-learn, about 1.3 s of every kernel's start (a fifth of eager
    PyTorch's) for what no benchmark calls: assisted decoding's confidence threshold and the GLUE metrics. It is
    told that scikit-learn is absent, in this process only, and only before its generation code is imported (a
    process that already has it is left as it is). Packages that import scikit-learn themselves (nncf, for
    OpenVINO's int8) still do."""
    if "transformers.generation.utils" in sys.modules:
        return
    importlib.import_module("transformers.utils.import_utils")._sklearn_available = False


def lazy_import(name: str) -> ModuleType:
    """A stand-in for module `name` that imports it at its first attribute access."""

    class LazyModule(ModuleType):
        def __getattr__(self, attribute: str) -> Any:
            return getattr(importlib.import_module(name), attribute)

    return LazyModule(name)


class Backend(Protocol):
    """What the sweep needs from a backend."""

    framework: str
    mode: str
    device: str

    def unsupported(self) -> str | None:
        """Why this backend cannot run on this machine (no C++ compiler, no bfloat16 instructions), or None."""

    def build(self, spec: ModelSpec, scale: str) -> Any:
        """Build the model with its weights (`pytorch.weights`), ready for inference (raise `status.Unsupported` where it cannot)."""

    def as_inputs(self, ids: np.ndarray) -> Any:
        """Token ids of shape (batch, sequence) as this backend takes them, on its device."""

    def prepare(self, model: Any, inputs: Any) -> Callable[[], Any]:
        """A no-argument call that runs one inference (traced or compiled for this shape if the mode says so).

        Calls are made inside `inference_context()`, so that the timed call carries no set-up.
        """

    def reference_output(self, model: Any, inputs: Any) -> np.ndarray | None:
        """Eager PyTorch float32's output on `inputs` (of the same weights and head), which this backend's output is
        compared with, or None where the backend is that reference or cannot be compared with it (other weights)."""

    def server_call(self, model: Any, examples: Sequence[Any]) -> Callable[[Any], Any]:
        """For a load scenario, one stream's call: one inference on any inputs of the shapes of `examples` (this backend's
        inputs), each prepared (traced, compiled) and run once now; a stream's own session or infer request where the
        backend needs one (on a GPU, a CUDA stream of its own). The call returns once its output is ready (on a GPU, its
        own stream's work done: never a wait for the other streams'). Called once per stream; the call may run in another
        thread."""

    def generator(self, model: Any, inputs: Any) -> Generator:
        """For `workload: generate`, a model built for it ready to generate from the prompt `inputs` (compiled for it where
        the mode says so); raise `status.Unsupported` where this backend or mode cannot generate."""

    def reference_tokens(self, model: Any, inputs: Any, new_tokens: int) -> np.ndarray | None:
        """Eager PyTorch float32's greedy `new_tokens` ids (batch, new_tokens) after the prompt `inputs`, which this
        backend's are compared with, or None where the backend is that reference or has other weights."""

    def attn_implementation(self, model: Any) -> str:
        """The attention implementation the built model uses (`eager`, `sdpa`, ...)."""

    def inference_context(self) -> AbstractContextManager[Any]:
        """The context a cell runs in (PyTorch: inference mode; TensorFlow: the device scope)."""

    def sync(self, output: Any) -> None:
        """Wait for the device to finish the work that produced `output`."""

    def device_busy_s(self, call: Callable[[], Any]) -> float | None:
        """On a GPU: the seconds the device ran kernels during one `call`, from the framework's profiler (None where this
        backend cannot profile its device, or it is the CPU)."""

    def free(self) -> None:
        """Release cached memory (after an out-of-memory error or a finished model)."""

    def reset_peak_memory(self) -> None:
        """On a GPU: reset the framework's peak memory counter of the device."""

    def peak_memory_bytes(self) -> int | None:
        """On a GPU: the framework's peak memory counter of the device since the last reset (None where it has none)."""

    def settings(self) -> dict[str, Any]:
        """Thread and device settings in effect, read back from the framework."""

    def versions(self) -> dict[str, str]:
        """Versions of the framework and of the libraries it runs on, read from the framework itself."""


@dataclass(frozen=True)
class UnavailableBackend:
    """Stands in for a backend whose required distributions are not installed (`not_installed`): every model is
    `unsupported` with `reason` (what is missing and the pip line), and nothing of its framework is imported."""

    framework: str
    mode: str
    device: str
    precision: str
    reason: str

    def unsupported(self) -> str:
        return self.reason

    def build(self, spec: ModelSpec, scale: str) -> Any:
        raise Unsupported(self.reason)

    def as_inputs(self, ids: np.ndarray) -> Any:
        raise Unsupported(self.reason)

    def prepare(self, model: Any, inputs: Any) -> Callable[[], Any]:
        raise Unsupported(self.reason)

    def reference_output(self, model: Any, inputs: Any) -> np.ndarray | None:
        return None

    def server_call(self, model: Any, examples: Sequence[Any]) -> Callable[[Any], Any]:
        raise Unsupported(self.reason)

    def generator(self, model: Any, inputs: Any) -> Generator:
        raise Unsupported(self.reason)

    def reference_tokens(self, model: Any, inputs: Any, new_tokens: int) -> np.ndarray | None:
        return None

    def attn_implementation(self, model: Any) -> str:
        return ""

    def inference_context(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def sync(self, output: Any) -> None:
        """Nothing runs."""

    def device_busy_s(self, call: Callable[[], Any]) -> float | None:
        return None

    def free(self) -> None:
        """Nothing is held."""

    def reset_peak_memory(self) -> None:
        """Nothing is measured."""

    def peak_memory_bytes(self) -> int | None:
        return None

    def settings(self) -> dict[str, Any]:
        return {}

    def versions(self) -> dict[str, str]:
        return {}


THREAD_VARIABLES: tuple[str, ...] = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")


def resolve_threads(num_threads: int | str | None) -> int | None:
    """A thread count: "cores" is every CPU this process may run on; None leaves the framework's default."""
    if num_threads == "cores":
        return usable_cores()
    return num_threads if isinstance(num_threads, int) else None


def apply_thread_environment(num_threads: int | None) -> None:
    """Set OpenMP/MKL/TensorFlow thread counts; effective only before the framework is imported."""
    if num_threads:
        for name in THREAD_VARIABLES:
            os.environ[name] = str(num_threads)


def load_backend(
    framework: str, mode: str, device: str = "cpu", num_threads: int | str | None = None, num_interop_threads: int | None = None,
    precision: str = "float32", options: dict[str, Any] | None = None, seed: int = 0, cache_dir: Path | None = None,
    workload: str = "forward", output_dir: Path | None = None, environment: str = "",
) -> Backend:  # fmt: skip
    """Make the backend `framework` for `mode` on `device` (this imports its framework), or an `UnavailableBackend`
    when a distribution it requires is not installed.

    `num_threads` sizes the intra-op pools (an integer, "cores" or None for the framework's default),
    `num_interop_threads` the inter-op pools (None: the framework's default); `options` are the
    backend's own parameters (validated by its options model); `workload` what its models are built for; `output_dir`
    and `environment` the environment's folder in the run and its name (a serving engine keeps its log there).
    """
    info = backend_info(framework)
    if mode not in info.modes:
        raise ValueError(f"mode for {framework} must be one of {', '.join(info.modes)}, not {mode!r}")
    if precision not in info.precisions:
        raise ValueError(f"precision for {framework} must be one of {', '.join(info.precisions)}, not {precision!r}")
    if reason := not_installed(framework):  # its framework would fail to import: nothing of it is made
        return UnavailableBackend(framework, mode, device, precision, reason)
    threads = resolve_threads(num_threads)
    apply_thread_environment(threads)
    settings = BackendSettings(
        mode=mode, device=device, precision=precision, options=info.options(**(options or {})), num_threads=threads,
        num_interop_threads=num_interop_threads, seed=seed, cache_dir=cache_dir, workload=workload, output_dir=output_dir,
        environment=environment,
    )  # fmt: skip
    missing = {name: value for name, value in info.kernel_environment(settings.options).items() if os.environ.get(name) != value}
    if missing:
        started = " ".join(f"{name}={value}" for name, value in missing.items())
        raise ValueError(
            f"options: for {framework}, these options take effect only in a kernel started with {started} (its runtime reads "
            "them once, when it loads): `python -m benchlib run` starts its kernels so; elsewhere, set them before the kernel starts"
        )
    return info.make(settings)


def kernel_variables(framework: str, options: dict[str, Any]) -> dict[str, str]:
    """The environment variables a kernel of `framework` with `options` must start with (none for most options)."""
    info = backend_info(framework)
    return info.kernel_environment(info.options(**options))


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` means out of memory, in the words of any registered backend: a MemoryError, an exception
    whose class (along its hierarchy) a backend names in `oom_classes`, or a RuntimeError whose message holds
    one of their `oom_messages` or "out of memory". No framework is imported to recognise its errors."""
    if isinstance(exc, MemoryError):
        return True
    infos = registry().values()
    names = {name for info in infos for name in info.oom_classes}
    if any(cls.__name__ in names for cls in type(exc).__mro__):
        return True
    messages = (*(m for info in infos for m in info.oom_messages), "out of memory")
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in messages)
