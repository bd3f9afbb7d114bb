"""Interference: a real busy process beside real measured calls, the remeasure loop and the speed probe."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import torch

from benchlib import read_results, run_environment
from benchlib.measure import sweep as sweep_module
from benchlib.measure.interference import Interference, InterferenceMeter, available
from benchlib.measure.probe import PROBE_WORKLOAD

pytestmark = pytest.mark.skipif(not available(), reason="interference is measured from Linux /proc")


class Spinners:
    """CPU-bound processes beside this one, one core's worth each."""

    def __init__(self, count: int) -> None:
        self.processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


@contextlib.contextmanager
def busy_process(count: int = 1) -> Iterator[Spinners]:
    """`count` CPU-bound processes beside this one, stopped on exit."""
    spinners = Spinners(count)
    time.sleep(0.3)  # let them start spinning
    try:
        yield spinners
    finally:
        spinners.stop()


def every_cpu() -> int:
    """How many spinning processes take every CPU this process may use: the disturbance is then most of the capacity
    whatever the machine's (or the pytest worker's) number of CPUs, never 1/N of it."""
    return len(os.sched_getaffinity(0))


def busy_for(seconds: float) -> None:
    """Work in this process (its PyTorch threads), which is not interference."""
    a = torch.randn(256, 256)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a @ a


def metered(work) -> Interference:
    meter = InterferenceMeter()
    meter.start()
    work()
    return meter.stop()


@pytest.mark.e2e
def test_a_busy_process_beside_the_measured_calls_is_interference():
    with busy_process():
        result = metered(lambda: busy_for(1.0))
    # One spinning process beside this one's k threads gets a fair share of the N CPUs this process may use: a CPU of
    # its own where N > k, else N/(k + 1) of them; as a fraction of the capacity, min(1/N, 1/(k + 1)) (more if others run too).
    cpus, threads = len(os.sched_getaffinity(0)), torch.get_num_threads()
    assert 0.6 * min(1 / cpus, 1 / (threads + 1)) < result.fraction <= 1
    assert result.disturbed(0.05) and result.window_s >= 1.0


def test_this_process_s_own_threads_are_not_interference():
    result = metered(lambda: busy_for(1.0))
    # Counted, this process's two threads would be about all of a 2-CPU machine; what is left is background.
    assert result.fraction < 0.2


def test_a_short_window_is_judged_within_the_meter_s_resolution():
    coarse = Interference(fraction=0.1, resolution=0.1, window_s=0.05)  # one tick over 50 ms on two CPUs
    assert not coarse.disturbed(0.05)
    assert Interference(fraction=0.5, resolution=0.1, window_s=0.05).disturbed(0.05)
    assert not Interference(fraction=0.0, resolution=0.0, window_s=1).disturbed(0.0)


def proc_stat(ticks: dict[str, int]) -> str:
    """A /proc/stat whose line for each CPU this process may use holds `ticks` (user ... steal) and the rest 0."""
    fields = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice"]
    line = " ".join(str(ticks.get(name, 0)) for name in fields)
    return "cpu  0 0 0 0 0 0 0 0 0 0\n" + "".join(f"cpu{cpu} {line}\n" for cpu in sorted(os.sched_getaffinity(0))) + "intr 0\n"


def test_the_hypervisor_s_steal_is_interference_and_is_kept_apart(tmp_path, monkeypatch):
    # A machine can not be made to steal on demand: /proc/stat stands in for a host that took 10 ticks of each CPU
    # and, in the second window, a process here that used 5 more; this process sleeps and uses (nearly) none.
    stat = tmp_path / "stat"
    monkeypatch.setattr("benchlib.measure.interference.PROC_STAT", stat)
    for other, steal in [(0, 10), (5, 10), (5, 0)]:
        stat.write_text(proc_stat({"user": 1000, "idle": 5000, "steal": 200}))
        meter = InterferenceMeter()
        meter.start()
        time.sleep(0.5)
        stat.write_text(proc_stat({"user": 1000 + other, "idle": 5000, "steal": 200 + steal}))
        result = meter.stop()
        per_cpu_capacity = result.window_s * os.sysconf("SC_CLK_TCK")
        assert result.steal == pytest.approx(min(steal / per_cpu_capacity, result.fraction), abs=1e-9)
        # This process's own tick or two over the window comes off the fraction, never off the steal.
        assert (other + steal) / per_cpu_capacity - 2 * result.resolution <= result.fraction <= (other + steal) / per_cpu_capacity


def params(tmp_path, **overrides):
    # Tiny BERT: warm-up and samples of 100 calls last a few tenths of a second per cell.
    values = dict(
        environment="cpu-pytorch", framework="pytorch", mode="eager", models=["bert-base-cased", "distilbert-base-uncased"],
        model_scale="tiny", batch_sizes=[1], sequence_lengths=[8, 16], warmup=1, repeat=4, number=100,
        output_dir=str(tmp_path / "cpu-pytorch"),
    )  # fmt: skip
    return {**values, **overrides}


# The disturbed threshold of the tests that need a quiet phase. A quiet phase is quiet of this test's processes only:
# under `pytest -n 2` the other worker's file writes make the system write back on this worker's CPU too (4% of it
# measured beside a writer pinned to the other CPU, more while it exports models), where the busy process takes half.
QUIET_ENOUGH = 0.15


@pytest.mark.e2e
def test_cells_measured_beside_a_busy_process_are_disturbed_and_quiet_ones_are_not(tmp_path):
    once = dict(remeasure=0, max_interference=QUIET_ENOUGH)
    with busy_process(every_cpu()):
        loud = run_environment(params(tmp_path, **once, output_dir=str(tmp_path / "loud")), progress=False)
    quiet = run_environment(params(tmp_path, **once, output_dir=str(tmp_path / "quiet")), progress=False)
    assert loud.status.eq("ok").all() and quiet.status.eq("ok").all()
    assert loud.disturbed.tolist() == [True] * 4 and (loud.interference > 0.2).all()
    # Quiet: no other process of this test; a background blip (the other worker's, under `pytest -n 2`) may still touch
    # one cell, by any amount (0.29 once); the others stay under QUIET_ENOUGH.
    assert quiet.disturbed.sum() <= 1
    assert set(loud.attempts) == set(quiet.attempts) == {1}
    for rows in (loud, quiet):  # the steal is recorded, as the part of the interference that was the host's
        assert ((rows.steal >= 0) & (rows.steal <= rows.interference)).all()


@pytest.mark.e2e
def test_disturbed_cells_are_measured_again_and_the_least_disturbed_row_is_kept(tmp_path, monkeypatch):
    real_probe = sweep_module.run_probe
    with busy_process(every_cpu()) as spinners:

        def probe(label):
            if "attempt 2" in label:  # the machine goes quiet once the first pass is over
                spinners.stop()
            return real_probe(label)

        monkeypatch.setattr(sweep_module, "run_probe", probe)
        kept = run_environment(params(tmp_path, max_interference=QUIET_ENOUGH), progress=False)
    every = read_results(tmp_path / "cpu-pytorch", every_attempt=True)
    first = every[every.attempt == 1]
    assert len(first) == 4 and first.disturbed.all() and set(every.attempt) >= {1, 2}
    assert len(kept) == 4 and (kept.attempt >= 2).all() and (kept.attempts >= 2).all()
    assert (kept.interference < 0.2).all() and not kept.disturbed.any()
    assert list(zip(kept.model, kept.sequence_length)) == list(zip(every.model[:4], every.sequence_length[:4]))


@pytest.mark.e2e
def test_a_cell_still_disturbed_after_remeasure_attempts_keeps_disturbed(tmp_path):
    with busy_process(every_cpu()):
        kept = run_environment(params(tmp_path, models=["bert-base-cased"], sequence_lengths=[8], remeasure=2), progress=False)
    every = read_results(tmp_path / "cpu-pytorch", every_attempt=True)
    assert every.attempt.tolist() == [1, 2, 3] and every.disturbed.all()
    assert len(kept) == 1 and kept.attempts[0] == 3 and bool(kept.disturbed[0])
    assert kept.interference[0] == every.interference.min()
    # A rerun, now quiet, measures nothing again: the cell's attempts are spent.
    run_environment(params(tmp_path, models=["bert-base-cased"], sequence_lengths=[8]), progress=False)
    assert len(read_results(tmp_path / "cpu-pytorch", every_attempt=True)) == 3


def test_without_proc_stat_the_columns_are_empty_and_environment_json_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_module, "make_meter", lambda: None)  # a system without /proc/stat
    rows = run_environment(params(tmp_path, repeat=2, number=1, sequence_lengths=[8]), progress=False)
    assert rows.status.eq("ok").all() and rows.interference.isna().all() and rows.disturbed.isna().all()
    assert rows.attempts.tolist() == [1, 1]  # nothing to measure again
    info = json.loads((tmp_path / "cpu-pytorch" / "environment.json").read_text())
    assert info["interference"]["measured"] is False


def test_the_speed_probe_runs_at_the_start_before_each_model_and_at_the_end(tmp_path):
    rows = run_environment(params(tmp_path, repeat=2, number=1, remeasure=0), progress=False)
    info = json.loads((tmp_path / "cpu-pytorch" / "environment.json").read_text())
    labels = [probe["label"] for probe in info["probes"]]
    assert labels == ["start", "before bert-base-cased", "before distilbert-base-uncased", "end"]
    assert all(0 < probe["seconds"] < 5 for probe in info["probes"]) and info["probe_workload"] == PROBE_WORKLOAD
    by_label = {probe["label"]: probe["seconds"] for probe in info["probes"]}
    assert rows.probe_s.tolist() == [by_label["before bert-base-cased"]] * 2 + [by_label["before distilbert-base-uncased"]] * 2
    assert info["interference"]["measured"] is True and info["interference"]["max_interference"] == 0.05
    # A resumed run keeps the earlier probes and adds its own.
    run_environment(params(tmp_path, repeat=2, number=1, remeasure=0, sequence_lengths=[8, 16, 32]), progress=False)
    again = json.loads((tmp_path / "cpu-pytorch" / "environment.json").read_text())
    assert [p["label"] for p in again["probes"]] == [*labels, "start", "before bert-base-cased", "before distilbert-base-uncased", "end"]
