"""Out of memory under `memory_limit_gb`, for real: caught in the kernel, or the kernel dying at the limit."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from benchlib import read_results
from benchlib.config.params import validate_params
from benchlib.launch.kernel import KernelEnd, crash_verdict
from benchlib.machine import package_version
from benchlib.measure.memory_limit import GIB, at_memory_limit, process_memory
from benchlib.measure.sweep import failure
from benchlib.paths import PROJECT_ROOT
from benchlib.store.recovery import read_in_flight


def grid_file(tmp_path: Path, **values: object) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({"warmup": 1, "repeat": 3, "number": 1, **values}))
    return path


def run_args(tmp_path: Path, grid: Path, environments: str) -> list[str]:
    return ["run", "--grid", str(grid), "--environments", environments, "--out", str(tmp_path / "run"), "--no-summary", "--quiet", "--no-limits"]


def cells(rows) -> list[tuple[str, int, int]]:
    return list(zip(rows.model, rows.batch_size, rows.sequence_length))


@pytest.mark.e2e
@pytest.mark.full
def test_out_of_memory_reported_in_the_kernel_ends_one_cell(run_cli, tmp_path):
    # The attention scores of 4096 x 256 tokens (4096 x 2 heads x 256 x 256 floats: 2 GiB) do not
    # fit under 2 GiB: the allocation fails in the kernel, which reports it and goes on.
    grid = grid_file(tmp_path, models=["ctrl"], model_scale="tiny", batch_sizes=[4096, 1], sequence_lengths=[256], memory_limit_gb=2)
    completed = run_cli(*run_args(tmp_path, grid, "cpu-pytorch,cpu-tensorflow"))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "restarting" not in completed.stdout  # no kernel died
    pytorch, tensorflow = (read_results(tmp_path / "run" / env) for env in ("cpu-pytorch", "cpu-tensorflow"))
    for rows in (pytorch, tensorflow):
        assert cells(rows) == [("ctrl", 4096, 256), ("ctrl", 1, 256)]
        assert rows.status.tolist() == ["oom", "ok"], rows.reason.tolist()
    assert "can't allocate memory" in pytorch.reason[0]
    assert tensorflow.reason[0].startswith("ResourceExhaustedError") and "OOM when allocating tensor with shape[4096,2,256,256]" in tensorflow.reason[0]


# The kernel killed mid-cell: TensorFlow, a tiny BERT, a first cell of several seconds (64 x 128
# tokens, 300 calls) and a quick second one. No cell is measured again for being disturbed: each
# kernel runs exactly the cells the test says, so that their memory can be measured and compared.
KILL_GRID = dict(models=["bert-base-cased"], model_scale="tiny", batch_sizes=[64, 1], sequence_lengths=[128], repeat=300, remeasure=0)


def kill_the_first_cell(tmp_path: Path, memory_limit_gb: float, sig: signal.Signals, at_data_memory: int = 0) -> tuple[str, int, int]:
    """Run KILL_GRID; once its first cell has been in flight for 1.5 s and the kernel's data memory
    is `at_data_memory` or more, send `sig` to the kernel. Returns the run's output, the highest data
    memory seen before, and the highest data memory of the new kernel that measured the second cell
    (sampled from its cell's start until it ended)."""
    grid = grid_file(tmp_path, **KILL_GRID, memory_limit_gb=memory_limit_gb)
    env_dir = tmp_path / "run" / "cpu-tensorflow"
    command = [sys.executable, "-m", "benchlib", *run_args(tmp_path, grid, "cpu-tensorflow")]
    runner = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    highest, since, killed, second, second_pid = 0, None, None, 0, None
    try:
        deadline = time.monotonic() + 120
        while killed is None:
            assert time.monotonic() < deadline and runner.poll() is None, f"never killed; data memory reached {highest} bytes, not {at_data_memory}"
            marker = read_in_flight(env_dir)
            memory = process_memory(marker["pid"]) if marker and marker["batch_size"] == 64 else None
            if memory:
                highest = max(highest, memory[0])
                since = since or time.monotonic()
                if time.monotonic() - since > 1.5 and memory[0] >= at_data_memory:
                    time.sleep(0.5)  # the runner samples the kernel's memory five times a second
                    killed = marker["pid"]
                    os.kill(killed, sig)
            time.sleep(0.02)
        deadline = time.monotonic() + 300
        while runner.poll() is None:  # the second cell, in a new kernel: what it needs on this machine
            assert time.monotonic() < deadline, "the run did not end after the kill"
            marker = read_in_flight(env_dir)
            if second_pid is None and marker and marker["batch_size"] == 1 and marker["pid"] != killed:
                second_pid = marker["pid"]
            if second_pid and (memory := process_memory(second_pid)):
                second = max(second, memory[0])
            time.sleep(0.02)
        output, _ = runner.communicate(timeout=300)
    finally:
        runner.kill()
    assert runner.returncode == 0, output
    rows = read_results(env_dir)
    assert cells(rows) == [("bert-base-cased", 64, 128), ("bert-base-cased", 1, 128)]  # every cell, once
    assert rows.status[1] == "ok", (rows.reason.tolist(), f"memory_limit_gb {memory_limit_gb}")  # the sweep went on in a new kernel
    assert second > 0, "the second cell's kernel was never seen"
    return output, highest, second


@pytest.fixture(scope="module")
def killed_at_low_memory(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    """A run whose kernel was killed (SIGKILL) measuring its first cell, far below its memory_limit_gb
    of 16 GiB: the run folder, the kernel's highest data memory seen measuring that cell, and the highest
    data memory of the new kernel that measured the second cell, on this machine."""
    tmp_path = tmp_path_factory.mktemp("sigkill")
    _, first, second = kill_the_first_cell(tmp_path, 16, signal.SIGKILL)
    return tmp_path / "run" / "cpu-tensorflow", first, second


@pytest.mark.e2e
@pytest.mark.full  # make test: the verdicts from a kernel's end and memory (test_crash_verdict), out of memory under memory_limit_gb in a sweep's process (tests/measure/test_sweep.py), a killed kernel (test_crash_recovery.py)
def test_kernel_killed_at_low_memory_stays_crashed(killed_at_low_memory):
    env_dir, _, _ = killed_at_low_memory
    rows = read_results(env_dir)
    assert rows.status.tolist() == ["crashed", "ok"], rows.reason.tolist()
    tensorflow = f"tensorflow {package_version('tensorflow')}"
    assert rows.reason[0].startswith(f"kernel died (SIGKILL: Killed) while measuring with {tensorflow} (measuring since "), rows.reason[0]


@pytest.mark.e2e
@pytest.mark.full  # as the test above
def test_kernel_dying_at_the_memory_limit_is_oom(killed_at_low_memory, tmp_path):
    # The same cell under a limit just above the data memory it needs: a segmentation fault
    # at the limit, as TensorFlow's when an allocation it does not check fails. The limit is sized from
    # what this machine needed, in the first run, for the first cell (until its kill) and for the whole
    # kernel that measured the second cell, which must pass again under it: the one needing more sets it.
    _, first, second = killed_at_low_memory
    limit = math.ceil(max(first, second) / 0.92 / GIB * 100) / 100
    output, _, _ = kill_the_first_cell(tmp_path, limit, signal.SIGSEGV, at_data_memory=int(0.9 * limit * GIB))
    rows = read_results(tmp_path / "run" / "cpu-tensorflow")
    assert rows.status[0] == "oom", rows.reason.tolist()
    expected = rf"kernel died \(SIGSEGV\) while measuring; data memory reached \d+\.\d\d GiB of memory_limit_gb {limit:g} GiB \(resident \d+\.\d\d GiB\) \(measuring since "
    assert re.match(expected, rows.reason[0]), rows.reason[0]
    assert "bert-base-cased 64x128 (kernel died (SIGSEGV)" in output and "marked oom, restarting (1 of 3)" in output


@pytest.mark.parametrize(
    ("end", "limit", "expected"),
    [
        (KernelEnd("DeadKernelError: Kernel died", "SIGSEGV", (int(7.6 * GIB), 7 * GIB)), 8,
         ("oom", "kernel died (SIGSEGV) while measuring; data memory reached 7.60 GiB of memory_limit_gb 8 GiB (resident 7.00 GiB)")),
        (KernelEnd("CellExecutionError", None, (8 * GIB, 7 * GIB)), 8,
         ("oom", "CellExecutionError while measuring; data memory reached 8.00 GiB of memory_limit_gb 8 GiB (resident 7.00 GiB)")),
        (KernelEnd("MemoryError"), 8, ("oom", "MemoryError while measuring; memory_limit_gb 8 GiB")),  # no /proc
        (KernelEnd("DeadKernelError: Kernel died", "SIGSEGV", (int(7.1 * GIB), 7 * GIB)), 8,
         ("crashed", "kernel died (SIGSEGV: Segmentation fault) while measuring with openvino 2026.4.0")),
        (KernelEnd("DeadKernelError: Kernel died", "SIGFPE", (8 * GIB, 7 * GIB)), None,
         ("crashed", "kernel died (SIGFPE: Floating point exception) while measuring with openvino 2026.4.0")),
        (KernelEnd("DeadKernelError: Kernel died", "signal 99"), None, ("crashed", "kernel died (signal 99) while measuring with openvino 2026.4.0")),
        (KernelEnd("DeadKernelError: Kernel died"), None, ("crashed", "DeadKernelError: Kernel died")),  # no signal seen: papermill's words
        (KernelEnd("MemoryError"), None, ("crashed", "MemoryError")),
    ],
)  # fmt: skip
def test_crash_verdict(end, limit, expected):
    assert crash_verdict(end, limit, "openvino 2026.4.0") == expected


def test_a_crash_names_the_runtime_of_its_environment():
    from benchlib.backends import backend_info

    assert backend_info("openvino").runtime() == f"openvino {package_version('openvino')}"
    assert backend_info("pytorch").runtime() == f"torch {package_version('torch')}"
    assert backend_info("tensorflow").runtime() == f"tensorflow {package_version('tensorflow')}"


def test_a_failure_under_another_name_at_the_memory_limit_is_oom(tmp_path):
    """TensorFlow reports some failed allocations under the limit as other errors (AbortedError, ...)."""
    data = process_memory(os.getpid())[0]
    error = RuntimeError("could not create a primitive")
    at_limit = validate_params(dict(
        environment="e", framework="pytorch", mode="eager", models=["gpt2"], batch_sizes=[1], sequence_lengths=[8],
        output_dir=str(tmp_path), memory_limit_gb=data / GIB,
    ))  # fmt: skip
    state, _, reason = failure(error, at_limit)
    assert state == "oom" and reason.startswith("RuntimeError: could not create a primitive (at the memory limit: data memory")
    assert at_memory_limit(10 * data / GIB) is None and at_memory_limit(None) is None
    assert at_memory_limit(10 * data / GIB, peak_resident=10 * data) is not None  # the cell's own peak counts too
    roomy = at_limit.model_copy(update={"memory_limit_gb": 10 * data / GIB})
    assert failure(error, roomy)[0] == "error" and failure(MemoryError(), roomy)[0] == "oom"
