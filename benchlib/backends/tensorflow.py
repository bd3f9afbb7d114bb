"""TensorFlow: the model called inside `tf.function` (mode `function`) or `tf.function(jit_compile=True)` (mode `xla`).

`TF_USE_LEGACY_KERAS=1` (set by `benchlib` on import) makes transformers' TF models run on tf-keras.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from benchlib.catalogue import ModelSpec


def tf_device_name(device: str) -> str:
    """TensorFlow's name for a kit device: "cpu" -> "/CPU:0", "cuda" -> "/GPU:0", "cuda:N" -> "/GPU:N"."""
    match = re.fullmatch(r"(cpu|cuda)(?::(\d+))?", device)
    if not match:
        raise ValueError(f"device must be cpu, cuda or cuda:N, not {device!r}")
    kind, index = match.group(1), match.group(2) or "0"
    return f"/CPU:{index}" if kind == "cpu" else f"/GPU:{index}"


@dataclass
class TensorFlowBackend:
    """Runs catalogue models with TensorFlow."""

    mode: str
    device: str = "cpu"
    num_threads: int | None = None
    framework: str = "tensorflow"

    def __post_init__(self) -> None:
        self._device = tf_device_name(self.device)
        if self.num_threads:
            tf.config.threading.set_intra_op_parallelism_threads(self.num_threads)
        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)

    @property
    def on_gpu(self) -> bool:
        return self._device.startswith("/GPU")

    def build(self, spec: ModelSpec, scale: str) -> Any:
        config = spec.build_config(scale)
        with tf.device(self._device):
            model = spec.model_class("tensorflow")(config)
            model(model.dummy_inputs, training=False)  # creates the weights
        return model

    def make_inputs(self, vocab_size: int, batch_size: int, sequence_length: int, seed: int) -> tf.Tensor:
        generator = tf.random.Generator.from_seed(seed)
        with tf.device(self._device):
            return generator.uniform((batch_size, sequence_length), 0, vocab_size, dtype=tf.int32)

    def prepare(self, model: Any, inputs: tf.Tensor) -> Callable[[], Any]:
        function = tf.function(lambda ids: model(ids, training=False), jit_compile=self.mode == "xla")

        def call() -> Any:
            with tf.device(self._device):
                return function(inputs)

        return call

    def sync(self, output: Any) -> None:
        if self.on_gpu and output is not None:
            output[0].numpy()  # materialise the output: waits for the GPU

    def free(self) -> None:
        tf.keras.backend.clear_session()
        gc.collect()

    def settings(self) -> dict[str, Any]:
        return {
            "num_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "num_interop_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "device": self._device,
            "gpus": [gpu.name for gpu in tf.config.list_physical_devices("GPU")],
        }

    def versions(self) -> dict[str, str]:
        build = tf.sysconfig.get_build_info()
        return {
            "tensorflow": tf.__version__,
            "cuda": str(build.get("cuda_version")),
            "cudnn": str(build.get("cudnn_version")),
        }


def make_backend(mode: str, device: str = "cpu", num_threads: int | None = None) -> TensorFlowBackend:
    """The TensorFlow backend for `mode` on `device`."""
    return TensorFlowBackend(mode=mode, device=device, num_threads=num_threads)
