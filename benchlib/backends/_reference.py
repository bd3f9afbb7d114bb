"""Eager PyTorch float32 for a TensorFlow kernel, in a worker process: the weights TensorFlow loads (made once, in the
build cache), and the reference outputs and generated tokens that its own are compared with, while the kernel itself
never imports PyTorch (one framework per kernel). The worker (`python -m benchlib.backends._reference`) starts at the
first request that the build cache cannot answer, takes pickled requests on its standard input and answers on its
standard output, and waits idle while cells are timed. Its answers are kept in the build cache (`references`, keyed by
the weights, the model, the input ids and the versions of torch and transformers): a later kernel asking the same,
another TensorFlow mode, round or run, starts no worker."""

from __future__ import annotations

import pickle
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from benchlib.machine import package_version
from benchlib.store.cache import Artefact, artefact, digest, record

if TYPE_CHECKING:
    from benchlib.config.catalogue import ModelSpec


def weights_of(spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None) -> Artefact:
    """In the worker: `pytorch.weights` (made now, or found in the build cache)."""
    from benchlib.backends.pytorch import use_torch, weights

    use_torch()
    return weights(spec, scale, seed, cache_dir)


ANSWER_FILE = "answer.npy"  # a cached answer's array, in its build cache entry
_REFERENCE: dict[tuple[Any, ...], Any] = {}  # in the worker: the reference model asked for last


def reference_of(spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None) -> Any:
    """In the worker: the eager PyTorch float32 model (`pytorch.build_reference`), kept for the next request of the same model."""
    from benchlib.backends.pytorch import build_reference, use_torch

    use_torch()
    key = (spec.name, spec.task, spec.weights, scale, seed, cache_dir)
    if key not in _REFERENCE:
        _REFERENCE.clear()  # one model at a time, as in the other backends' kernels
        _REFERENCE[key] = build_reference(spec, scale, seed, cache_dir=cache_dir)
    return _REFERENCE[key]


def output_of(spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None, ids: np.ndarray) -> np.ndarray:
    """In the worker: eager PyTorch float32's output on `ids`."""
    from benchlib.backends.pytorch import reference_output

    return reference_output(reference_of(spec, scale, seed, cache_dir), ids)


def tokens_of(spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None, ids: np.ndarray, new_tokens: int) -> np.ndarray:
    """In the worker: eager PyTorch float32's greedy `new_tokens` ids after the prompt `ids` (`pytorch.reference_tokens`)."""
    from benchlib.backends.pytorch import reference_tokens

    return reference_tokens(reference_of(spec, scale, seed, cache_dir), ids, new_tokens)


REQUESTS = {"weights": weights_of, "output": output_of, "tokens": tokens_of}


class PyTorchWorker:
    """The worker process, seen from the kernel: started at the first request, ended with the kernel."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    def _call(self, request: str, *args: Any) -> Any:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._process.stdin is not None and self._process.stdout is not None
        pickle.dump((request, args), self._process.stdin)
        self._process.stdin.flush()
        try:
            ok, value = pickle.load(self._process.stdout)
        except EOFError:
            raise RuntimeError(f"the PyTorch worker ended with status {self._process.wait()} while answering {request!r}") from None
        if not ok:
            raise RuntimeError(f"in the PyTorch worker: {value}")
        return value

    def weights(self, spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None) -> Artefact:
        """The folder of the weights every kernel loads `spec` from (`pytorch.weights`), recorded as the build's: the
        worker makes them only where the build cache has none."""
        from benchlib.backends.pytorch import weights_found

        return weights_found(spec, scale, seed, cache_dir) or record(self._call("weights", spec, scale, seed, cache_dir))

    def output(self, spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None, ids: np.ndarray) -> np.ndarray:
        """Eager PyTorch float32's output of `spec` on `ids`."""
        return self._answer("output", spec, scale, seed, cache_dir, np.asarray(ids))

    def tokens(self, spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None, ids: np.ndarray, new_tokens: int) -> np.ndarray:
        """Eager PyTorch float32's greedy `new_tokens` ids (batch, new_tokens) of `spec` after the prompt `ids`."""
        return self._answer("tokens", spec, scale, seed, cache_dir, np.asarray(ids), new_tokens)

    def _answer(self, request: str, spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None, ids: np.ndarray, *more: Any) -> np.ndarray:
        """The worker's answer to `request`, from the build cache where an earlier kernel asked it."""
        from benchlib.backends.pytorch import weights_identity

        key = {
            "request": request, "weights": weights_identity(spec, scale, seed), "model": asdict(spec), "scale": scale, "seed": seed,
            "ids": digest({"shape": ids.shape, "dtype": str(ids.dtype), "values": ids.tobytes().hex()}), "more": more,
            "torch": package_version("torch"), "transformers": package_version("transformers"),
        }  # fmt: skip

        def make(folder: Path) -> None:
            np.save(folder / ANSWER_FILE, self._call(request, spec, scale, seed, cache_dir, ids, *more))

        return np.load(artefact("references", spec.cache_label(scale), key, make, cache_dir).path / ANSWER_FILE)


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """Answer pickled (request, args) from `requests` on `answers` with (True, value) or (False, the error) until the end."""
    while True:
        try:
            request, args = pickle.load(requests)
        except EOFError:
            return
        try:
            answer = (True, REQUESTS[request](*args))
        except Exception as exc:  # the kernel reports it in the cell
            answer = (False, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
        pickle.dump(answer, answers)
        answers.flush()


if __name__ == "__main__":
    answers = sys.stdout.buffer
    sys.stdout = sys.stderr  # what the libraries print goes to the kernel's log, not into the answers
    try:
        serve(sys.stdin.buffer, answers)
    except KeyboardInterrupt:  # jupyter_client interrupts the kernel's process group as it shuts the kernel down
        sys.exit(130)  # no traceback in the kernel's log; a kernel still waiting sees the status (`PyTorchWorker._call`)
