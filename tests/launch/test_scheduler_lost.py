"""A scheduler that goes away mid-run: the client waits `--scheduler-wait`, stops with one line and exit 1, keeps every
row it received, and a rerun against a new scheduler measures only what is missing. Real Dask processes on 127.0.0.1,
plain text on loopback with --insecure (which environment.json records)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from benchlib import read_results
from benchlib.paths import PROJECT_ROOT
from benchlib.store.results import rows_written
from tests.clusters import DaskProcesses, stop

# Four cells, long enough that the scheduler can be stopped between the first row and the last.
LONGER = {"models": ["gpt2", "bert-base-cased"], "sequence_lengths": [8, 16], "repeat": 20, "remeasure": 0}
WAIT_S = 5


def run_command(address: str, params: Path, run_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "benchlib", "run", "--grid", "smoke", "--environments", "cpu-pytorch", "--params", str(params),
        "--out", str(run_dir), "--no-summary", "--no-limits", "--cluster", address, "--insecure", "--scheduler-wait", str(WAIT_S),
    ]  # fmt: skip


def started(processes: DaskProcesses, name: str) -> tuple[str, subprocess.Popen, subprocess.Popen]:
    """A plain scheduler on loopback and one benchmark worker, ready."""
    address = processes.scheduler(log=f"{name}-scheduler.log")
    worker = processes.worker(address, f"{name}-worker")
    processes.wait_for(address, 1)
    return address, processes.started[-2], worker


@pytest.mark.e2e
@pytest.mark.full  # make test loses the scheduler as rows arrive (below) and a cluster worker mid-environment (test_cluster.py)
def test_a_lost_scheduler_stops_the_run_with_one_line_and_a_rerun_finishes_it(tmp_path: Path) -> None:
    params = tmp_path / "longer.yaml"
    params.write_text(yaml.safe_dump(LONGER), encoding="utf-8")
    run_dir, env_dir = tmp_path / "run", tmp_path / "run" / "cpu-pytorch"
    processes = DaskProcesses(tmp_path, None)
    try:
        address, scheduler, worker = started(processes, "first")
        client = subprocess.Popen(run_command(address, params, run_dir), cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 300
            while rows_written(env_dir) < 1:
                assert time.monotonic() < deadline and client.poll() is None, "no row reached the client"
                time.sleep(0.05)
            stop(scheduler)
            lost_at = time.monotonic()
            out, err = client.communicate(timeout=120)
            took = time.monotonic() - lost_at
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        stop(worker)  # its kernel measures on for a scheduler that is gone: the machine is handed back
        assert client.returncode == 1, out + err
        assert err.count("\n") == 1 and err.startswith(f"--cluster: the scheduler at {address} was lost mid-run (it did not come back within {WAIT_S} s)"), err
        assert f"rows received are in {run_dir}; rerun with the same --out" in err
        assert WAIT_S - 1 < took < WAIT_S + 30
        before = (env_dir / "results.csv").read_bytes()
        kept = rows_written(env_dir)
        assert 1 <= kept < 4

        address, _, _ = started(processes, "second")
        rerun = subprocess.run(run_command(address, params, run_dir), cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    finally:
        processes.stop_all()
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"{kept} of 4 cells already have a row" in rerun.stdout
    assert (env_dir / "results.csv").read_bytes().startswith(before)
    rows = read_results(env_dir, every_attempt=True)
    keys = list(zip(rows["model"], rows["sequence_length"]))
    assert len(keys) == len(set(keys)) == 4 and set(rows["status"]) == {"ok"}
    info = json.loads((env_dir / "environment.json").read_text())
    assert info["cluster"] == {"address": address, "encryption": "none (--insecure)"}


@pytest.mark.e2e
def test_a_scheduler_lost_as_rows_arrive_stops_the_run_in_one_line_with_the_rows_kept(tmp_path: Path) -> None:
    """The race of the run above, made to happen: the scheduler stops between a worker's rows reaching the client and
    the client handing them on to the scheduler (its Variable). The rows are on disk; the run stops in one line."""
    from distributed import Client, Variable

    from benchlib.config.jobs import plan_run
    from benchlib.launch.cluster import ClusterRun, SchedulerLostError, _Task
    from benchlib.store.results import ReceivedRows, csv_record, make_row

    processes = DaskProcesses(tmp_path, None)
    address = processes.scheduler()
    scheduler = processes.started[-1]
    (job,) = plan_run(tmp_path / "run", "smoke", ["cpu-pytorch"])
    client = Client(address, timeout=2)
    try:
        run = ClusterRun(client, [job], report=lambda line: None, progress=False, max_restarts=0, scheduler_wait_s=2)
        task = _Task(job, 0, "[1/1]", 1, ReceivedRows(job.output_dir), Variable(f"rows-{job.name}", client=client))
        stop(scheduler)
        row = make_row({"environment": job.name, "model": "gpt2", "batch_size": 1, "sequence_length": 8, "round": 1, "attempt": 1}, "ok")
        with pytest.raises(SchedulerLostError) as lost:
            run._rows(task, [csv_record(row).decode("utf-8")])
        assert "\n" not in str(lost.value) and str(lost.value).startswith(f"--cluster: the scheduler at {address} was lost mid-run")
        assert rows_written(job.output_dir) == 1  # the row it was handing on is kept
    finally:
        client.close(timeout=2)
        processes.stop_all()
