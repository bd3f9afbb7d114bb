"""Serving and tuning on a GPU, as far as this machine (no GPU) can check them: each serving stream's call runs in a
thread and CUDA stream of its own (a fake of CUDA's streams: what this machine lacks), and a tune's automatic space on
a GPU holds the GPU's knobs. tests/gpu/ runs both on a GPU."""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest
import torch

from benchlib.backends import backend_info
from benchlib.backends.pytorch import on_own_stream
from benchlib.config.params import validate_params
from benchlib.config.tune import automatic_space, tune_space


class FakeStream:
    """A CUDA stream that writes down what is asked of it, and in which thread."""

    device = torch.device("cuda", 0)

    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log

    def wait_stream(self, other: object) -> None:
        self.log.append(("wait", other, threading.get_ident()))

    def synchronize(self) -> None:
        self.log.append(("sync", threading.get_ident()))


def test_each_serving_stream_runs_in_a_thread_and_cuda_stream_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[tuple[Any, ...]] = []
    monkeypatch.setattr(torch.cuda, "set_stream", lambda stream: log.append(("set", stream, threading.get_ident())))
    monkeypatch.setattr(torch.cuda, "default_stream", lambda device=None: "the default stream")

    def call(x: int) -> int:
        log.append(("call", x, threading.get_ident()))
        return 2 * x

    first, second = FakeStream(log), FakeStream(log)
    serve_first = on_own_stream(call, [1, 2], first)
    warmed = list(log)
    thread = warmed[0][2]
    assert thread != threading.get_ident()  # the shapes were run in the stream's own thread, its CUDA stream set first
    assert warmed == [
        ("set", first, thread),
        ("wait", "the default stream", thread), ("call", 1, thread), ("sync", thread),
        ("wait", "the default stream", thread), ("call", 2, thread), ("sync", thread),
    ]  # fmt: skip
    assert serve_first(5) == 10 and log[-2] == ("call", 5, thread)  # later calls too: its graphs are that thread's
    log.clear()
    serve_second = on_own_stream(call, [1], second)
    assert serve_second(3) == 6 and log[0][:2] == ("set", second) and {entry[-1] for entry in log} == {log[0][2]} != {thread}
    del serve_first
    gc.collect()
    ended = [t for t in threading.enumerate() if t.ident == thread]
    for worker in ended:
        worker.join(timeout=10)
    assert not any(worker.is_alive() for worker in ended)  # the thread ends with its call


def test_a_call_captured_in_cuda_graphs_is_recorded_before_timing_and_never_shared_by_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA's streams and a GPU faked (what this machine lacks); the backend's own serving call, not compiled here."""
    from benchlib.backends import load_backend
    from benchlib.backends import pytorch as pytorch_backend
    from benchlib.backends.pytorch import Built
    from benchlib.status import Unsupported

    streams: list[tuple[Any, ...]] = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: "a stream")
    def on_own_stream(call: Any, examples: list[Any], stream: Any, runs: int = 1) -> Any:
        streams.append((len(examples), runs))
        return lambda x: call(x)  # a call of the stream's own, as the real one (held while the stream serves)

    monkeypatch.setattr(pytorch_backend, "on_own_stream", on_own_stream)
    examples = [torch.ones(1, 8, dtype=torch.long), torch.ones(2, 16, dtype=torch.long)]
    built = Built(torch.nn.Identity(), None)
    graphs = load_backend("pytorch", "compile", device="cuda", options={"compile_mode": "reduce-overhead"})
    graphs.server_call(built, examples)  # a call scored and dropped (the user's examples' quality)
    first = graphs.server_call(built, examples)
    assert streams == [(2, 3), (2, 3)]  # every shape run three times in the stream's thread: recorded, then replayed once
    with pytest.raises(Unsupported, match=r"^compile_mode reduce-overhead captures CUDA graphs, which several streams would share: "):
        graphs.server_call(built, examples)  # a second stream beside the first
    del first
    eager = load_backend("pytorch", "eager", device="cuda")
    eager.server_call(built, examples)
    eager.server_call(built, examples)
    assert streams[2:] == [(2, 1), (2, 1)]  # eager streams share the model: nothing is captured


def test_a_stream_runs_each_shape_as_many_times_as_asked_before_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "set_stream", lambda stream: None)
    monkeypatch.setattr(torch.cuda, "default_stream", lambda device=None: "the default stream")
    on_own_stream(calls.append, [1, 2], FakeStream([]), runs=3)
    assert calls == [1, 2, 1, 2, 1, 2]


def gpu_tune(**values: object) -> Any:
    return validate_params({
        "environment": "gpu-x", "framework": "pytorch", "device": "cuda", "models": ["bert-base-cased"], "request_lengths": [8],
        "output_dir": "/tmp/unused", "tune": {"objective": "server"}, "scenario": "server", **values,
    })  # fmt: skip


def test_a_tune_on_a_gpu_tries_cuda_streams_larger_batches_the_batch_timeout_and_the_gpus_own_knobs() -> None:
    assert automatic_space("pytorch", "server", "forward", cores=2, device="cuda", mode="compile", precision="float16") == {
        "streams": [1, 2, 4], "max_batch": [1, 2, 4, 8, 16, 32, 64], "batch_timeout_ms": [0.0, 1.0, 2.0, 5.0],
        "compile_mode": ["default", "reduce-overhead", "max-autotune"], "sdpa_kernel": ["flash", "efficient", "cudnn", "math"],
    }  # fmt: skip
    # float32 has no FlashAttention or cuDNN kernel; eager has no compile mode; offline waits for no timeout
    assert automatic_space("pytorch", "offline", "forward", cores=2, device="cuda", mode="eager") == {
        "streams": [1, 2, 4], "max_batch": [1, 2, 4, 8, 16, 32, 64], "sdpa_kernel": ["efficient", "math"],
    }  # fmt: skip
    # the environment's own options refuse a kernel beside attn_implementation eager: the knob is left out
    assert "sdpa_kernel" not in automatic_space("pytorch", "offline", "forward", device="cuda", mode="eager", options={"attn_implementation": "eager"})
    # on the CPU, as before
    assert automatic_space("pytorch", "offline", "forward", cores=2) == {"streams": [1, 2], "max_batch": [1, 2, 4, 8, 16], "omp_wait_policy": ["active", "passive"]}
    space = tune_space(gpu_tune(mode="compile", precision="bfloat16"))
    assert space["sdpa_kernel"][0] is None and space["batch_timeout_ms"] == [0.0, 1.0, 2.0, 5.0]  # PyTorch's own choice first; 2 ms is there
    assert space["max_batch"] == [1, 2, 4, 8, 16, 32, 64] and space["streams"] == [1, 2, 4]  # its own max_batch 8, streams 1 among them
    # the settings to deploy say a GPU knob in PyTorch's words
    words = backend_info("pytorch").knob_words
    assert words("sdpa_kernel", "flash") == "with sdpa_kernel(SDPBackend.FLASH_ATTENTION): around the calls"
    assert words("sdpa_kernel", None) == "PyTorch's own choice of attention kernel" and words("num_threads", "cores") == "torch.set_num_threads(cores)"
