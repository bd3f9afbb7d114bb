"""The machine's limits (benchlib.measure.peak): real small measurements on this CPU, the bfloat16 rule,
the file, the GPU path with fakes, and the notebook."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import nbformat
import papermill
import pytest
import torch

from benchlib import machine
from benchlib.measure import peak as machine_limits
from benchlib.measure.interference import Interference
from benchlib.measure.peak import MIB
from benchlib.paths import PROJECT_ROOT
from benchlib.store.layout import LIMITS_FILE
from benchlib.store.limits import read_limits, write_limits

NOTEBOOK = PROJECT_ROOT / "notebooks" / "machine_limits.ipynb"


@pytest.fixture(autouse=True)
def restore_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Fake CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    return path


# The bfloat16-related flags of the CPUs the kit meets (Linux /proc/cpuinfo names), and of CPUs it may meet.
AVX2_EPYC = "fpu sse sse2 avx fma avx2 bmi2"  # AMD EPYC (Zen 2/3): no AVX-512 at all
AVX512_BF16_EPYC = f"{AVX2_EPYC} avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512_bf16"  # AMD EPYC (Zen 4/5)
AMX_XEON = f"{AVX2_EPYC} avx_vnni avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8"  # Intel Xeon (Sapphire Rapids on)
AVX512_XEON = f"{AVX2_EPYC} avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni"  # Intel Xeon (Cascade Lake, Ice Lake): no bfloat16
AVX2_ONLY_REASON = machine.bfloat16_cpu_reason(set(AVX2_EPYC.split()))


def test_a_real_gemm_gives_a_positive_rate_and_large_matrices_are_not_slower_per_flop():
    torch.set_num_threads(1)
    tiny, tiny_samples = machine_limits.gemm_rate(64, torch.float32, repeat=5)
    large, large_samples = machine_limits.gemm_rate(512, torch.float32, repeat=5)
    assert len(tiny_samples) == len(large_samples) == 5 and all(s > 0 for s in tiny_samples + large_samples)
    assert tiny > 0 and large > 0
    # A 64 x 64 multiply is dominated by call overhead; 512 x 512 by arithmetic. Noise allows a factor of 2.
    assert large >= 0.5 * tiny


def test_real_limits_on_this_cpu_with_small_sizes_and_threads_restored(monkeypatch, tmp_path):
    monkeypatch.setattr(machine, "CPUINFO", cpuinfo(tmp_path, AVX2_EPYC))  # a CPU without bfloat16: only float32 is multiplied
    torch.set_num_threads(2)
    limits = machine_limits.measure_limits("cpu", num_threads=1, gemm_size=256, copy_bytes=16 * MIB, repeat=3)
    assert torch.get_num_threads() == 2  # restored
    assert limits["device"] == "cpu" and limits["threads"] == 1 and limits["gpu"] is None
    assert limits["float32_flops_per_s"] > 1e8 and limits["bandwidth_bytes_per_s"] > 1e8
    assert limits["bfloat16_flops_per_s"] is None and limits["bfloat16_reason"] == AVX2_ONLY_REASON
    assert AVX2_ONLY_REASON.startswith("this CPU has no bfloat16 instructions (avx512_bf16 or amx_bf16, or avx_ne_convert)")
    assert limits["gemm_size"] == 256 and limits["copy_bytes"] == 16 * MIB
    assert limits["cpu"] and limits["measured_at"] and 0 < limits["seconds"] < 30
    assert set(limits["method"]) == {"float32_flops_per_s", "bfloat16_flops_per_s", "float16_flops_per_s", "tf32_flops_per_s", "bandwidth_bytes_per_s", "timing"}
    assert limits["tf32_flops_per_s"] is None and limits["tf32_reason"] == "TF32 is a mode of a CUDA GPU's matrix units (Ampere and later): a CPU has none"
    assert "1 thread" in limits["method"]["float32_flops_per_s"] and "median" in limits["method"]["timing"]
    assert limits["method"]["bfloat16_flops_per_s"] == f"not measured: {AVX2_ONLY_REASON}"
    assert len(limits["samples_s"]["float32_gemm"]) == 3 and len(limits["samples_s"]["copy"]) == 12  # 4 copies per GEMM
    assert limits["samples_s"]["bfloat16_gemm"] == []
    # float16 is never multiplied on the CPU: no time added, the reason recorded.
    assert limits["float16_flops_per_s"] is None and limits["samples_s"]["float16_gemm"] == [] and limits["gemm_paths"]["float16"] == {}
    assert limits["float16_reason"] == limits["method"]["float16_flops_per_s"] and limits["float16_reason"].startswith("not measured on the CPU: ")
    assert not any(sentence.startswith("Peak float16") for sentence in machine_limits.describe_limits(limits))
    # FLOP/s and bytes/s are read from the median sample.
    median = sorted(limits["samples_s"]["float32_gemm"])[1]
    assert limits["float32_flops_per_s"] == pytest.approx(2 * 256**3 / median)
    assert limits["bandwidth_bytes_per_s"] == pytest.approx(2 * 16 * MIB / statistics.median(limits["samples_s"]["copy"]))


@pytest.mark.parametrize(("fractions", "kept", "attempts"), [([0.0], 0, 1), ([0.5, 0.02], 1, 2), ([0.5, 0.3, 0.4], 1, 3)])
def test_a_disturbed_measurement_is_taken_again_and_the_least_disturbed_kept(monkeypatch, fractions, kept, attempts):
    taken = iter(fractions)

    def figures(n, nbytes, device, repeat, bfloat16, float16, tf32):
        fraction = next(taken)
        return {
            "float32_flops_per_s": 1e11 * (1 - fraction), "bfloat16_flops_per_s": None, "float16_flops_per_s": None, "tf32_flops_per_s": None,
            "bandwidth_bytes_per_s": 1e10,
            "samples_s": {"float32_gemm": [fraction]}, "interference": Interference(fraction, resolution=0.001, window_s=1.0),
            "gemm_paths": {"float32": {"torch.mm": 1e11 * (1 - fraction)}, "bfloat16": {}},
        }  # fmt: skip

    monkeypatch.setattr(machine_limits, "_figures", figures)
    limits = machine_limits.measure_limits("cpu", 1)
    assert limits["attempts"] == attempts and limits["interference"] == fractions[kept]
    assert limits["float32_flops_per_s"] == pytest.approx(1e11 * (1 - fractions[kept]))
    assert limits["disturbed"] is (fractions[kept] > 0.05 + 0.001)
    assert ("Disturbed: other processes used 30%" in machine_limits.describe_limits(limits)[-1]) is limits["disturbed"]


def test_bfloat16_is_measured_where_this_cpu_has_it_and_the_reason_given_where_not():
    """This CPU's real flags, nothing faked: bfloat16 is multiplied for real only where the kit's rule says this
    CPU runs it natively; elsewhere nothing is multiplied in bfloat16 and the rule's reason is recorded."""
    reason = machine.bfloat16_here_reason()
    limits = machine_limits.measure_limits("cpu", num_threads="cores", gemm_size=128, copy_bytes=4 * MIB, repeat=2)
    assert limits["bfloat16_reason"] == reason
    if reason is None:  # AMD EPYC with AVX512-BF16, Intel Xeon with AMX
        assert limits["bfloat16_flops_per_s"] > 0 and len(limits["samples_s"]["bfloat16_gemm"]) == 2
        assert "in bfloat16" in limits["method"]["bfloat16_flops_per_s"] and set(limits["gemm_paths"]["bfloat16"]) == set(machine_limits.gemm_paths("cpu"))
    else:  # AMD EPYC with AVX2 only
        assert limits["bfloat16_flops_per_s"] is None and limits["samples_s"]["bfloat16_gemm"] == [] and limits["gemm_paths"]["bfloat16"] == {}
        assert limits["method"]["bfloat16_flops_per_s"] == f"not measured: {reason}"
        assert f"bfloat16 matrix multiply: not measured ({reason})." in machine_limits.describe_limits(limits)


def test_the_bfloat16_rule_never_says_native_where_onednn_refuses_bfloat16():
    """The rule against oneDNN itself on this CPU (nothing faked): where the rule says native, oneDNN multiplies in
    bfloat16 and agrees with float32; where oneDNN has no bfloat16 (an AVX2-only CPU), it refuses with the error
    that a faked flag would have met, and the rule says why."""
    torch.manual_seed(0)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    onednn = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    reason = machine.bfloat16_here_reason()
    if onednn:
        product = torch._C._nn.mkldnn_linear(a.bfloat16().to_mkldnn(), b.bfloat16().to_mkldnn(), None).to_dense().float()
        assert torch.allclose(product, a @ b.T, atol=0.5, rtol=0.05)
    else:
        assert reason is not None  # never "native" where oneDNN refuses
        with pytest.raises(RuntimeError, match="bf16 path needs the cpu support avx_ne_convert or avx512bw, avx512vl and avx512dq"):
            torch._C._nn.mkldnn_linear(a.bfloat16().to_mkldnn(), b.bfloat16().to_mkldnn(), None)


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (AMX_XEON, None),
        (AVX512_BF16_EPYC, None),
        ("avx2 avx_vnni avx_vnni_int8 avx_ne_convert", None),  # oneDNN's avx2_vnni_2, where the flags are known
        (AVX2_EPYC, "this CPU has no bfloat16 instructions (avx512_bf16 or amx_bf16, or avx_ne_convert): bfloat16 would be refused by oneDNN, or emulated slower than float32"),
        ("", "this CPU has no bfloat16 instructions (avx512_bf16 or amx_bf16, or avx_ne_convert): bfloat16 would be refused by oneDNN, or emulated slower than float32"),
        (AVX512_XEON, "this CPU has no bfloat16 instructions (avx512_bf16 or amx_bf16, or avx_ne_convert): bfloat16 would be emulated, slower than float32"),
        # bfloat16 instructions without what oneDNN's bfloat16 path is built on (as some virtual machines report them):
        # PyTorch's "mkldnn_linear: bf16 path needs the cpu support avx_ne_convert or avx512bw, avx512vl and avx512dq"
        ("fpu avx2 avx512f avx512_bf16", "this CPU has avx512_bf16 but not avx512bw, avx512vl, avx512dq, avx512_vnni, which oneDNN's native bfloat16 path needs beside it"),
        ("fpu avx512f amx_bf16 amx_tile", "this CPU has amx_bf16 but not avx512bw, avx512vl, avx512dq, avx512_vnni, avx512_bf16, which oneDNN's native bfloat16 path needs beside it"),
        ("avx2 avx_vnni avx_ne_convert", "this CPU has avx_ne_convert but not avx_vnni_int8, which oneDNN's native bfloat16 path needs beside it"),
    ],
)  # fmt: skip
def test_bfloat16_rule_on_cpu_flags(tmp_path, flags, reason):
    """The rule alone, on the flags of CPUs the kit meets or may meet: nothing is multiplied here."""
    assert machine_limits.bfloat16_reason("cpu", cpuinfo(tmp_path, flags)) == reason
    assert machine.bfloat16_cpu_reason(set(flags.split())) == reason


def test_a_gpus_peak_is_its_sustained_rate_not_its_burst(monkeypatch):
    """A faked GPU (its tensors on the CPU): each figure's calls run GPU_HEAT_S before any is timed, the warm-up waits
    for the device's clock (its monitor), and each sample holds enough calls to last GPU_SAMPLE_S."""
    fake_gpu(monkeypatch)
    monkeypatch.setattr(machine_limits, "GPU_HEAT_S", 0.3)
    monkeypatch.setattr(machine_limits, "GPU_SAMPLE_S", 0.05)
    seen = []
    real_measure = machine_limits.measure

    def logged_measure(call, spec, sync, **options):
        seen.append((spec, options.get("monitor")))
        return real_measure(call, spec, sync, **options)

    monkeypatch.setattr(machine_limits, "measure", logged_measure)
    began = time.perf_counter()
    machine_limits.gemm_rate(64, torch.float32, "cuda", repeat=3)
    spec, monitor = seen[0]
    assert time.perf_counter() - began >= 0.3 + 3 * 0.05  # heated, then three samples of 50 ms at least
    assert spec.number > 1 and spec.warmup_max_seconds == machine_limits.GPU_WARMUP_MAX_S and monitor is not None


def test_bfloat16_and_tf32_are_not_measured_before_compute_capability_8(monkeypatch):
    """A V100 (7.0): torch.cuda.is_bf16_supported() says True there (emulation counts); neither has units of its own."""
    fake_gpu(monkeypatch, capability=(7, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert machine_limits.bfloat16_reason("cuda") == "cuda has no bfloat16 units (compute capability 7.0; they came with 8.0, Ampere)"
    assert machine_limits.tf32_reason("cuda:0") == "cuda:0 has no tf32 units (compute capability 7.0; they came with 8.0, Ampere)"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert machine_limits.bfloat16_reason("cuda") is None and machine_limits.tf32_reason("cuda") is None


def test_bfloat16_rule_without_cpuinfo_and_on_a_gpu(tmp_path, monkeypatch):
    assert "no /proc/cpuinfo" in machine_limits.bfloat16_reason("cpu", tmp_path / "missing")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert machine_limits.bfloat16_reason("cuda") == "cuda has no bfloat16 units (compute capability 9.0; they came with 8.0, Ampere)"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert machine_limits.bfloat16_reason("cuda:1") is None


def test_copy_is_at_least_four_times_the_last_level_cache(tmp_path, monkeypatch):
    for index, size in enumerate(("48K", "1024K", "96M")):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    assert machine_limits.last_level_cache_bytes(tmp_path) == 96 * MIB
    assert machine_limits.last_level_cache_bytes(tmp_path / "none") is None
    monkeypatch.setattr(machine_limits, "SYSFS_CACHES", tmp_path)
    assert machine_limits.default_copy_bytes("cpu") == 384 * MIB
    monkeypatch.setattr(machine_limits, "SYSFS_CACHES", tmp_path / "none")
    assert machine_limits.default_copy_bytes("cpu") == 256 * MIB
    assert machine_limits.default_copy_bytes("cuda:0") == 1024 * MIB


def limits_for(device: str, flops: float) -> dict:
    return {
        "device": device, "threads": 2, "cpu": "Fake CPU", "gpu": None, "measured_at": "2026-11-30T05:00:00+00:00",
        "float32_flops_per_s": flops, "bfloat16_flops_per_s": None, "bfloat16_reason": AVX2_ONLY_REASON,
        "bandwidth_bytes_per_s": 1e10, "gemm_size": 2048, "copy_bytes": 256 * MIB,
        "method": {"float32_flops_per_s": "gemm", "bfloat16_flops_per_s": "not measured", "bandwidth_bytes_per_s": "copy", "timing": "median"},
    }  # fmt: skip


def test_write_and_read_round_trip_per_device(tmp_path):
    run_dir = tmp_path / "run"
    assert read_limits(run_dir) is None and read_limits(run_dir, "cpu") is None
    path = write_limits(run_dir, limits_for("cpu", 1e11))
    assert path == run_dir / LIMITS_FILE and json.loads(path.read_text())["cpu"]["float32_flops_per_s"] == 1e11
    write_limits(run_dir, limits_for("cuda", 5e13))
    write_limits(run_dir, limits_for("cpu", 2e11))  # measured again: replaces the CPU's entry only
    assert read_limits(run_dir, "cpu") == limits_for("cpu", 2e11)
    assert read_limits(run_dir, "cuda") == limits_for("cuda", 5e13)
    assert set(read_limits(run_dir)) == {"cpu", "cuda"}
    assert read_limits(run_dir, "cuda:1") is None


def test_table_and_sentences(tmp_path):
    limits = limits_for("cpu", 1e11)  # a file from before float16 was measured: no float16 keys
    table = machine_limits.limits_table(limits)
    assert table.value.tolist()[::4] == pytest.approx([100.0, 10.0]) and table.value.isna().tolist() == [False, True, True, True, False, False]
    assert table.value.iloc[5] == pytest.approx(10.0) and table.unit.tolist() == ["GFLOP/s", "GFLOP/s", "GFLOP/s", "GFLOP/s", "GB/s", "FLOP/byte"]
    assert table.set_index("figure").loc["peak TF32 matrix multiply", "how"] == "not measured"
    assert table.set_index("figure").loc["peak float16 matrix multiply", "how"] == "not measured"
    sentences = machine_limits.describe_limits(limits)
    assert sentences[0].startswith("Peak float32 matrix multiply on Fake CPU (cpu, 2 threads): 100.0 GFLOP/s")
    assert sentences[1] == f"bfloat16 matrix multiply: not measured ({AVX2_ONLY_REASON})."
    assert sentences[2].startswith("Memory bandwidth: 10.0 GB/s") and sentences[3].startswith("Ridge point: 10.0")
    busy = machine_limits.describe_limits({**limits, "bfloat16_flops_per_s": 2e11, "bfloat16_reason": None, "interference": 0.3, "disturbed": True, "attempts": 3})
    assert busy[1].startswith("Peak bfloat16 matrix multiply: 200.0 GFLOP/s, 2.00 x float32") and busy[-1].startswith("Disturbed: other processes used 30% of the machine even in the quietest of 3 attempts")


def test_a_gpu_that_torch_does_not_see_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="device cuda: PyTorch sees 0 GPU"):
        machine_limits.measure_limits("cuda")
    with pytest.raises(ValueError, match="device must be cpu, cuda or cuda:N, not 'tpu'"):
        machine_limits.measure_limits("tpu")


def fake_gpu(monkeypatch, synchronize=lambda device=None: None, capability: tuple[int, int] = (9, 0)) -> None:
    """A GPU that torch sees, with bfloat16 (an H100's compute capability unless told), whose tensors lie on the CPU."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(machine_limits, "GPU_HEAT_S", 0.01)  # a real card's seconds of heating are not this test's,
    monkeypatch.setattr(machine_limits, "GPU_SAMPLE_S", 0.005)  # nor its samples' length
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(machine_limits, "_placement", lambda device: torch.device("cpu"))


def test_cuda_path_synchronises_before_every_clock_read(monkeypatch):
    """A faked GPU (its tensors on the CPU): every clock read has the device's queued work finished before it."""
    log: list[str] = []
    synced_devices = set()
    fake_gpu(monkeypatch, lambda device=None: synced_devices.add(str(device)) or log.append("sync"))

    def clock() -> float:
        log.append("clock")
        return len(log) * 1e-3  # moves on with every event, so every interval is positive

    real_measure = machine_limits.measure

    def logged_measure(call, spec, sync, **options):
        return real_measure(lambda: log.append("call") or call(), spec, sync, **{**options, "clock": clock})

    monkeypatch.setattr(machine_limits, "measure", logged_measure)
    limits = machine_limits.measure_limits("cuda", num_threads=1, gemm_size=64, copy_bytes=MIB, repeat=3)

    assert synced_devices == {"cuda"} and limits["gpu"] == "Fake GPU" and limits["device"] == "cuda"
    assert limits["bfloat16_flops_per_s"] > 0 and limits["float32_flops_per_s"] > 0 and limits["bandwidth_bytes_per_s"] > 0
    assert "torch.cuda.synchronize before every clock read" in limits["method"]["timing"]
    assert log[0] == "sync"  # the tensors' creation is finished before the first clock read
    reads = [i for i, event in enumerate(log) if event == "clock"]
    assert reads and log.count("call") >= 3 + 3 + 3 + 12  # float32, bfloat16 and float16 GEMMs, then the copies
    for read in reads:
        before = log[:read]
        last_call = max((i for i, event in enumerate(before) if event == "call"), default=-1)
        assert "sync" in before[last_call + 1 :], f"clock read {read} follows a call with no synchronisation: {log[: read + 1]}"


def test_float16_is_multiplied_on_a_gpu_and_kept_beside_float32_and_bfloat16(monkeypatch):
    """A faked GPU (its tensors on the CPU): a third GEMM in float16, its rate from the median of its own samples."""
    fake_gpu(monkeypatch)
    dtypes = []
    real_best = machine_limits.best_gemm_rate

    def logged(n, dtype, *args):
        dtypes.append((dtype, torch.backends.cuda.matmul.allow_tf32))
        return real_best(n, dtype, *args)

    monkeypatch.setattr(machine_limits, "best_gemm_rate", logged)
    torch.backends.cuda.matmul.allow_tf32 = True  # as a process's setting may be: float32's own peak is measured without
    try:
        limits = machine_limits.measure_limits("cuda", num_threads=1, gemm_size=64, copy_bytes=MIB, repeat=3, remeasure=0)  # one attempt
        assert torch.backends.cuda.matmul.allow_tf32  # restored
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False

    assert dtypes == [(torch.float32, False), (torch.bfloat16, True), (torch.float16, True), (torch.float32, True)]  # the last: TF32's
    assert limits["tf32_flops_per_s"] > 0 and limits["tf32_reason"] is None and len(limits["samples_s"]["tf32_gemm"]) == 3
    assert "TF32 off" in limits["method"]["float32_flops_per_s"] and "on TF32 units" in limits["method"]["tf32_flops_per_s"]
    samples = limits["samples_s"]["float16_gemm"]
    assert len(samples) == 3 and limits["float16_reason"] is None
    assert limits["float16_flops_per_s"] == pytest.approx(2 * 64**3 / statistics.median(samples))
    assert limits["gemm_paths"]["float16"] == {"torch.mm": limits["float16_flops_per_s"]}
    assert limits["method"]["float16_flops_per_s"].startswith("torch.mm(a, b, out=c) of two seeded random 64 x 64 matrices on cuda")
    assert "in float16 (reduced-precision reductions allowed: " in limits["method"]["float16_flops_per_s"]
    table = machine_limits.limits_table(limits).set_index("figure")
    assert table.loc["peak float16 matrix multiply", "value"] == pytest.approx(limits["float16_flops_per_s"] / 1e9)
    ratio = limits["float16_flops_per_s"] / limits["float32_flops_per_s"]
    sentence = f"Peak float16 matrix multiply: {limits['float16_flops_per_s'] / 1e9:.1f} GFLOP/s, {ratio:.2f} x float32."
    assert machine_limits.describe_limits(limits)[2] == sentence  # after float32's and bfloat16's


@pytest.mark.e2e
def test_notebook_runs_with_papermill_with_small_sizes(tmp_path):
    output = tmp_path / "machine_limits.ipynb"
    papermill.execute_notebook(
        str(NOTEBOOK), str(output), cwd=str(NOTEBOOK.parent), progress_bar=False, kernel_name="python3",
        parameters={"num_threads": 1, "gemm_size": 128, "copy_bytes": 8 * MIB, "repeat": 2, "output_dir": str(tmp_path / "run")},
    )  # fmt: skip
    executed = nbformat.read(output, as_version=4)
    printed = "".join(o.get("text", "") for cell in executed.cells if cell.cell_type == "code" for o in cell.outputs)
    assert "Peak float32 matrix multiply on" in printed and "Memory bandwidth:" in printed and "Ridge point:" in printed
    assert "bfloat16 matrix multiply" in printed.lower() and f"wrote {tmp_path / 'run' / LIMITS_FILE}" in printed
    stored = read_limits(tmp_path / "run", "cpu")
    assert stored["gemm_size"] == 128 and stored["threads"] == 1 and stored["float32_flops_per_s"] > 0


def test_notebook_is_committed_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code[0].metadata.tags == ["parameters"]
    assert all(not cell.outputs and cell.execution_count is None for cell in code)


def test_the_peak_is_the_fastest_gemm_path_and_every_path_is_kept():
    limits = machine_limits.measure_limits("cpu", num_threads="cores", gemm_size=256, copy_bytes=4 * MIB, repeat=2)
    paths = limits["gemm_paths"]["float32"]
    assert set(paths) == set(machine_limits.gemm_paths("cpu")) and limits["float32_flops_per_s"] == max(paths.values())
    assert machine_limits.describe_limits(limits)[0].split("(")[-1].startswith(max(paths, key=paths.get))


def test_a_slower_gemm_library_is_named():
    limits = {
        "float32_flops_per_s": 4e11, "bfloat16_flops_per_s": None, "bfloat16_reason": "none here", "bandwidth_bytes_per_s": 4e10,
        "threads": 2, "gpu": None, "cpu": "CPU", "device": "cpu", "gemm_size": 2048, "copy_bytes": 256 * MIB,
        "gemm_paths": {"float32": {"torch.mm": 2e11, "oneDNN": 4e11}},
    }  # fmt: skip
    assert "torch.mm reached 200.0 GFLOP/s, oneDNN 400.0 GFLOP/s (2.0x)" in machine_limits.describe_limits(limits)[1]
