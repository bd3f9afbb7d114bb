"""PyTorch: eager (`model.eval()` under `torch.inference_mode()`) and TorchScript (`torch.jit.trace` per shape)."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

# One framework per kernel: transformers must not import TensorFlow beside PyTorch.
os.environ.update(USE_TF="0", USE_TORCH="1")

import torch  # noqa: E402
from transformers import masking_utils  # noqa: E402

from benchlib.catalogue import ModelSpec


def _broadcast_for_bhqkv(mask_function: Callable, bh_indices: bool = True) -> Callable:
    """Drop-in for transformers' `_vmap_for_bhqkv` that broadcasts instead of using `torch.vmap`."""

    def mask(batch_idx: Any, head_idx: Any, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        q, kv = q_idx[:, None], kv_idx[None, :]
        if not bh_indices:
            return mask_function(batch_idx, head_idx, q, kv).expand(len(q_idx), len(kv_idx))
        shape = (len(batch_idx), len(head_idx), len(q_idx), len(kv_idx))
        result = mask_function(batch_idx[:, None, None, None], head_idx[None, :, None, None], q[None, None], kv[None, None])
        return result.expand(shape)

    return mask


@contextlib.contextmanager
def traceable_masks() -> Iterator[None]:
    """Compatibility shim for tracing: transformers 4.57 builds causal masks (GPT-2, CTRL, ...)
    with `torch.vmap` and an indexing mode, which `torch.jit.trace` cannot record
    ("unordered_map::at"). While tracing, the same mask functions are evaluated by plain
    broadcasting and indexing, which gives the same mask.
    """
    with (
        mock.patch.object(masking_utils, "_vmap_for_bhqkv", _broadcast_for_bhqkv),
        mock.patch.object(masking_utils, "TransformGetItemToIndex", contextlib.nullcontext),
    ):
        yield


@dataclass
class PyTorchBackend:
    """Runs catalogue models with PyTorch."""

    mode: str
    device: str = "cpu"
    num_threads: int | None = None
    num_interop_threads: int | None = None
    framework: str = "pytorch"

    def __post_init__(self) -> None:
        self._device = torch.device(self.device)
        if self.on_gpu and (self._device.index or 0) >= torch.cuda.device_count():
            raise RuntimeError(f"device {self.device}: PyTorch sees {torch.cuda.device_count()} GPU(s) on this machine")
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

    def build(self, spec: ModelSpec, scale: str) -> torch.nn.Module:
        # torchscript=True only makes the model return tuples, which the tracer needs.
        overrides = {**spec.inference_config, **({"torchscript": True} if self.mode == "torchscript" else {})}
        config = spec.build_config(scale, **overrides)
        model = spec.model_class("pytorch")(config)
        return model.to(self._device).eval()

    def make_inputs(self, vocab_size: int, batch_size: int, sequence_length: int, seed: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, vocab_size, (batch_size, sequence_length), generator=generator)
        return ids.to(self._device)

    def prepare(self, model: torch.nn.Module, inputs: torch.Tensor) -> Callable[[], Any]:
        if self.mode == "torchscript":
            # The tracer warns about every Python branch it fixes for this shape: tracing per shape is the point.
            with torch.inference_mode(), traceable_masks(), warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                traced = torch.jit.trace(model, inputs, check_trace=False)
            target = traced
        else:
            target = model

        def call() -> Any:
            return target(inputs)

        return call

    def attn_implementation(self, model: torch.nn.Module) -> str:
        return str(getattr(model.config, "_attn_implementation", None) or "eager")

    def inference_context(self) -> contextlib.AbstractContextManager[Any]:
        """Inference mode, entered once around a cell rather than in every timed call."""
        return torch.inference_mode()

    def sync(self, output: Any) -> None:
        if self.on_gpu:
            torch.cuda.synchronize(self._device)

    def free(self) -> None:
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


def thread_settings() -> dict[str, Any]:
    """Thread counts in effect: PyTorch's own, and OpenMP's and MKL's as PyTorch reports them."""
    info = torch.__config__.parallel_info()
    settings: dict[str, Any] = {
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
    }
    for key, name in (("openmp_threads", "omp_get_max_threads"), ("mkl_threads", "mkl_get_max_threads")):
        match = re.search(rf"{name}\(\) : (\d+)", info)
        settings[key] = int(match.group(1)) if match else None
    return settings


def make_backend(mode: str, device: str = "cpu", num_threads: int | None = None, num_interop_threads: int | None = None) -> PyTorchBackend:
    """The PyTorch backend for `mode` on `device`."""
    return PyTorchBackend(mode=mode, device=device, num_threads=num_threads, num_interop_threads=num_interop_threads)
