"""One module per framework, each with the same small interface (`Backend`).

Adding a framework means adding a module here and a line to `BACKENDS`. Nothing in this
file imports a framework: a kernel imports only the one it measures.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from benchlib.catalogue import ModelSpec

# framework -> (module, modes it offers)
BACKENDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "pytorch": ("benchlib.backends.pytorch", ("eager", "torchscript")),
    "tensorflow": ("benchlib.backends.tensorflow", ("function", "xla")),
}


def modes(framework: str) -> tuple[str, ...]:
    """The modes `framework` offers."""
    return BACKENDS[framework][1]


class Backend(Protocol):
    """What the sweep needs from a framework."""

    framework: str
    mode: str
    device: str

    def build(self, spec: ModelSpec, scale: str) -> Any:
        """Build the model with random weights, ready for inference."""

    def make_inputs(self, vocab_size: int, batch_size: int, sequence_length: int, seed: int) -> Any:
        """Seeded random token ids of shape (batch, sequence) on the device."""

    def prepare(self, model: Any, inputs: Any) -> Callable[[], Any]:
        """A no-argument call that runs one inference (traced/compiled for this shape if the mode says so).

        Calls are made inside `inference_context()`, so that the timed call carries no set-up.
        """

    def attn_implementation(self, model: Any) -> str:
        """The attention implementation the built model uses (`eager`, `sdpa`, ...)."""

    def inference_context(self) -> AbstractContextManager[Any]:
        """The context a cell runs in (PyTorch: inference mode; TensorFlow: the device scope)."""

    def sync(self, output: Any) -> None:
        """Wait for the device to finish the work that produced `output`."""

    def free(self) -> None:
        """Release cached memory (after an out-of-memory error or a finished model)."""

    def reset_peak_memory(self) -> None:
        """On a GPU: reset the framework's peak memory counter of the device."""

    def peak_memory_bytes(self) -> int:
        """On a GPU: the framework's peak memory counter of the device since the last reset."""

    def settings(self) -> dict[str, Any]:
        """Thread and device settings in effect, read back from the framework."""

    def versions(self) -> dict[str, str]:
        """Versions of the framework and of the libraries it runs on."""


THREAD_VARIABLES: tuple[str, ...] = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")


def resolve_threads(num_threads: int | str | None) -> int | None:
    """A thread count: "cores" is every CPU this process may run on; None leaves the framework's default."""
    if num_threads == "cores":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return num_threads if isinstance(num_threads, int) else None


def apply_thread_environment(num_threads: int | None) -> None:
    """Set OpenMP/MKL/TensorFlow thread counts; effective only before the framework is imported."""
    if num_threads:
        for name in THREAD_VARIABLES:
            os.environ[name] = str(num_threads)


def load_backend(
    framework: str, mode: str, device: str = "cpu", num_threads: int | str | None = None, num_interop_threads: int | None = None
) -> Backend:
    """Import the framework's module and return its backend for `mode` on `device`.

    `num_threads` sizes the intra-op pools (an integer, "cores" or None for the framework's default),
    `num_interop_threads` the inter-op pools (None: the framework's default).
    """
    if framework not in BACKENDS:
        raise ValueError(f"framework must be one of {', '.join(BACKENDS)}, not {framework!r}")
    if mode not in modes(framework):
        raise ValueError(f"mode for {framework} must be one of {', '.join(modes(framework))}, not {mode!r}")
    threads = resolve_threads(num_threads)
    apply_thread_environment(threads)
    module = importlib.import_module(BACKENDS[framework][0])
    return module.make_backend(mode=mode, device=device, num_threads=threads, num_interop_threads=num_interop_threads)
