"""Peak memory per cell: the process's peak resident set on the CPU, the framework's counters on a GPU (faked here)."""

from __future__ import annotations

import gc
import time

import pytest
import torch

from benchlib.backends.pytorch import PyTorchBackend
from benchlib.measure.memory import CellPeakMemory, PeakRSS, clear_refs_available, collector_paused
from benchlib.measure.timing import TimingSpec, measure
from tests.frameworks import run_python

MIB = 2**20


def grid(tmp_path, name, **overrides):
    values = dict(
        environment=name, framework="pytorch", mode="eager", models=["bert-base-cased"], model_scale="tiny",
        batch_sizes=[1], sequence_lengths=[8, 512], repeat=2, number=1, num_threads=1,
        output_dir=str(tmp_path / name),
    )  # fmt: skip
    return {**values, **overrides}


# The larger cell first is the harder order (the peak must be reset between cells): make test runs it; `--full` both.
@pytest.mark.parametrize("batch_sizes", [pytest.param([1, 32], marks=pytest.mark.full), [32, 1]], ids=["small-first", "large-first"])
def test_bigger_input_bigger_peak_on_a_real_pytorch_cell(tmp_path, batch_sizes):
    """In a fresh process, as a kernel is: a long-lived one (a test worker after hundreds of tests) can hold enough
    freed memory for the larger cell to fit in without its resident set growing. Eager attention, which writes its
    attention maps out (scaled_dot_product_attention's fused CPU kernel holds none: the cells' peaks then differ by
    about the 16 MiB asked, either side of it)."""
    values = grid(tmp_path, "cpu-pytorch", batch_sizes=batch_sizes, options={"attn_implementation": "eager"})
    rows = run_python(f"""
        import json
        from benchlib import run_environment
        rows = run_environment({values!r}, progress=False)
        print(json.dumps(rows[["batch_size", "sequence_length", "status", "peak_memory_bytes"]].values.tolist()))
    """)
    peak = {(b, s): p for b, s, _, p in rows}
    assert [state for *_, state, _ in rows] == ["ok"] * 4 and all(p > 100 * MIB for p in peak.values())
    # 32 x 512 holds two 32 x 2 x 512 x 512 float attention maps (64 MiB each) at least briefly.
    assert peak[(32, 512)] > peak[(1, 512)] + 16 * MIB
    assert peak[(32, 512)] > peak[(32, 8)] + 16 * MIB
    assert peak[(1, 8)] < peak[(32, 512)] and peak[(1, 512)] < peak[(32, 512)]


@pytest.mark.e2e
@pytest.mark.full
def test_bigger_input_bigger_peak_on_a_real_tensorflow_cell(tmp_path):
    rows = run_python(f"""
        import json
        from benchlib import run_environment
        rows = run_environment(dict(
            environment="cpu-tensorflow", framework="tensorflow", mode="function", models=["bert-base-cased"],
            model_scale="tiny", batch_sizes=[1, 32], sequence_lengths=[8, 512], repeat=2, number=1, num_threads=1,
            output_dir={str(tmp_path / "tf")!r}), progress=False)
        print(json.dumps(rows[["batch_size", "sequence_length", "status", "peak_memory_bytes"]].values.tolist()))
    """)
    peak = {(b, s): p for b, s, state, p in rows if state == "ok"}
    assert len(peak) == 4
    # The kernel's first cell (1x8) also holds TensorFlow's one-time allocations (its first trace: up to about 90 MB more
    # in some runs), so the largest input is compared with the later cells.
    assert peak[(32, 512)] > max(peak[(1, 512)], peak[(32, 8)]) + 16 * MIB


@pytest.mark.parametrize("method", ["clear_refs", "sampling"])
def test_peak_rss_sees_a_short_allocation_and_resets(method):
    if method == "clear_refs":
        assert clear_refs_available()  # Linux: the kit's default there
    with PeakRSS(method, interval_s=0.001) as big:
        block = bytearray(300 * MIB)
        block[:: 4096] = b"x" * len(block[:: 4096])  # touch every page
        if method == "sampling":
            time.sleep(0.05)
        del block
    with PeakRSS(method, interval_s=0.001) as small:
        pass
    assert big.method == small.method == method
    assert big.bytes > small.bytes + 250 * MIB


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_inside_and_as_it_was_after_even_on_an_error(enabled):
    (gc.enable if enabled else gc.disable)()
    try:
        with pytest.raises(ValueError), collector_paused():
            assert not gc.isenabled()
            raise ValueError("inside")
        assert gc.isenabled() is enabled
    finally:
        gc.enable()


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="method must be one of clear_refs, sampling, not 'guess'"):
        PeakRSS("guess")


def test_cuda_peak_uses_pytorch_counters_reset_before_the_cell(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append(("reset", str(device))))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: calls.append(("peak", str(device))) or 7 * MIB)
    backend = PyTorchBackend(mode="eager", device="cuda:1")
    with CellPeakMemory(backend) as peak:
        assert calls == [("reset", "cuda:1")]
    assert calls == [("reset", "cuda:1"), ("peak", "cuda:1")] and peak.bytes == 7 * MIB


def test_a_gpu_cells_peak_is_its_timed_calls_alone(monkeypatch):
    """PyTorch's counters of a GPU (faked: what this machine lacks): preparation's transient memory (autotuning's
    workspaces) and a float32 reference on the same GPU after the samples are not the cell's peak."""
    memory = {"current": 100 * MIB, "peak": 100 * MIB}

    def allocate(nbytes: int) -> None:  # freed again at once: a transient on top of what is held
        memory["peak"] = max(memory["peak"], memory["current"] + nbytes)

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: memory.update(peak=memory["current"]))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: memory["peak"])
    with CellPeakMemory(PyTorchBackend(mode="eager", device="cuda")) as peak:
        allocate(900 * MIB)  # preparing
        measurement = measure(lambda: allocate(10 * MIB), TimingSpec(warmup=0, repeat=3, number=2), memory=peak)
        allocate(500 * MIB)  # the reference
    assert peak.bytes == 110 * MIB and measurement.calls == 6


def test_a_backend_without_a_gpu_counter_leaves_the_peak_blank_never_zero():
    pytest.importorskip("onnxruntime", reason="ONNX Runtime is the onnxruntime extra")
    from benchlib.backends import load_backend

    with CellPeakMemory(load_backend("onnxruntime", "session", device="cuda")) as peak:
        pass
    assert peak.bytes is None


@pytest.mark.e2e
def test_gpu_peak_uses_tensorflow_counters_reset_before_the_cell():
    result = run_python("""
        import json
        import tensorflow as tf
        from benchlib.backends import load_backend
        from benchlib.measure.memory import CellPeakMemory
        calls = []
        tf.config.experimental.reset_memory_stats = lambda device: calls.append(["reset", device])
        tf.config.experimental.get_memory_info = lambda device: calls.append(["info", device]) or {"current": 1, "peak": 5 << 20}
        tf.config.list_physical_devices = lambda kind=None: ["fake GPU:0"] if kind == "GPU" else []
        tf.config.experimental.set_memory_growth = lambda device, enable: None
        backend = load_backend("tensorflow", "function", "cuda:0")
        with CellPeakMemory(backend) as peak:
            during = list(calls)
        print(json.dumps({"during": during, "after": calls, "bytes": peak.bytes}))
    """)
    assert result["during"] == [["reset", "GPU:0"]]
    assert result["after"] == [["reset", "GPU:0"], ["info", "GPU:0"]] and result["bytes"] == 5 * MIB


@pytest.mark.e2e
def test_gpu_sync_waits_for_the_device_without_copying_the_output():
    result = run_python("""
        import json
        import tensorflow as tf
        from benchlib.backends import load_backend
        calls = []
        tf.config.list_physical_devices = lambda kind=None: ["fake GPU:0"] if kind == "GPU" else []
        tf.config.experimental.set_memory_growth = lambda device, enable: None
        tf.test.experimental.sync_devices = lambda: calls.append("sync_devices")

        class Output:
            def __getitem__(self, index):
                calls.append("copied to the host")
                raise AssertionError("the output was read")

        load_backend("tensorflow", "function", "cuda:0").sync(Output())
        load_backend("tensorflow", "function", "cpu").sync(Output())  # the CPU has nothing to wait for
        print(json.dumps(calls))
    """)
    assert result == ["sync_devices"]


def test_cuda_sync_waits_for_pytorch_s_device(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(str(device)))
    PyTorchBackend(mode="eager", device="cuda").sync(object())
    PyTorchBackend(mode="eager", device="cpu").sync(object())
    assert calls == ["cuda"]
