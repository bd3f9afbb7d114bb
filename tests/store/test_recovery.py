"""Recovery pieces: the cell in flight, a cut-off last row, results set aside, the folder lock."""

from __future__ import annotations

import multiprocessing

import pytest

from benchlib import status
from benchlib.store.layout import CUTOFF_FILE
from benchlib.store.locking import FolderInUseError, check_free, environment_lock
from benchlib.store.recovery import RUNNER_PID_ENV, mark_in_flight, read_in_flight, record_crash, resolve_in_flight, set_aside_results
from benchlib.store.results import ResultsWriter, make_row, read_results, repair_results

CELL = dict(environment="cpu-pytorch", framework="pytorch", mode="eager", device="cpu", model_scale="tiny")


def write_rows(folder, count):
    with ResultsWriter(folder) as writer:
        for batch in range(1, count + 1):
            writer.append(make_row({**CELL, "model": "gpt2", "batch_size": batch, "sequence_length": 8}, "too_long"))


def test_cut_off_last_row_is_set_aside(tmp_path):
    write_rows(tmp_path, 2)
    path = tmp_path / "results.csv"
    whole = path.read_bytes()
    path.write_bytes(whole + b"cpu-pytorch,pytorch,eager,cpu,gpt2,tiny,3,8,o")  # killed mid-write
    assert repair_results(path) == "cpu-pytorch,pytorch,eager,cpu,gpt2,tiny,3,8,o"
    assert path.read_bytes() == whole
    assert "gpt2,tiny,3,8,o" in (tmp_path / CUTOFF_FILE).read_text()
    assert len(read_results(tmp_path)) == 2
    assert repair_results(path) is None  # a whole file is left alone


def test_crash_of_the_cell_in_flight_becomes_a_crashed_row(tmp_path):
    write_rows(tmp_path, 1)
    assert record_crash(tmp_path, "kernel died") is None  # nothing in flight: nothing to record
    mark_in_flight(tmp_path, {**CELL, "model": "ctrl", "batch_size": 8, "sequence_length": 256})
    assert read_in_flight(tmp_path)["model"] == "ctrl"
    assert record_crash(tmp_path, "DeadKernelError: Kernel died")["batch_size"] == 8
    rows = read_results(tmp_path)
    assert rows.status.tolist() == ["too_long", "crashed"]
    assert rows.reason[1].startswith("DeadKernelError: Kernel died (measuring since ")
    assert read_in_flight(tmp_path) is None


def test_a_cell_left_by_a_runner_is_measured_again_one_left_by_another_kernel_is_crashed(tmp_path, monkeypatch):
    write_rows(tmp_path, 1)
    monkeypatch.setenv(RUNNER_PID_ENV, "4242")  # a kernel started by `benchlib run`, whose runner was stopped
    mark_in_flight(tmp_path, {**CELL, "model": "ctrl", "batch_size": 8, "sequence_length": 256})
    assert read_in_flight(tmp_path)["runner_pid"] == 4242
    resolve_in_flight(tmp_path)
    assert read_in_flight(tmp_path) is None and read_results(tmp_path).status.tolist() == ["too_long"]  # no row: measured again
    monkeypatch.delenv(RUNNER_PID_ENV)  # papermill alone, or JupyterLab
    mark_in_flight(tmp_path, {**CELL, "model": "ctrl", "batch_size": 8, "sequence_length": 256})
    assert "runner_pid" not in read_in_flight(tmp_path)
    resolve_in_flight(tmp_path)
    rows = read_results(tmp_path)
    assert rows.status.tolist() == ["too_long", "crashed"] and "stopped before writing its row" in rows.reason[1]
    assert read_in_flight(tmp_path) is None


def test_force_sets_results_aside_without_losing_them(tmp_path):
    write_rows(tmp_path, 3)
    aside = set_aside_results(tmp_path)
    assert aside.name.startswith("results.") and len(read_results(aside)) == 3
    assert not (tmp_path / "results.csv").exists()
    assert set_aside_results(tmp_path) is None


def _hold_lock(folder, ready, release):
    with environment_lock(folder):
        ready.set()
        release.wait(30)


def test_a_second_writer_is_refused(tmp_path):
    context = multiprocessing.get_context("spawn")
    ready, release = context.Event(), context.Event()
    holder = context.Process(target=_hold_lock, args=(tmp_path, ready, release))
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(FolderInUseError, match=f"{tmp_path} is in use by pid {holder.pid}"):
            check_free(tmp_path)
        with pytest.raises(FolderInUseError):
            with environment_lock(tmp_path):
                pass
    finally:
        release.set()
        holder.join(30)
    check_free(tmp_path)  # released with its process
    with environment_lock(tmp_path):
        pass


def test_a_cell_whose_row_was_written_before_its_process_died_gets_no_crashed_row(tmp_path):
    """Killed between appending the row and clearing the marker: the row stands, alone."""
    cell = {"environment": "e", "framework": "pytorch", "mode": "eager", "device": "cpu", "model": "gpt2", "batch_size": 1,
            "sequence_length": 8, "round": 1, "attempt": 1}  # fmt: skip
    with ResultsWriter(tmp_path) as writer:
        writer.append(make_row(cell, status.OK))
    mark_in_flight(tmp_path, cell)
    assert record_crash(tmp_path, "the process measuring this cell stopped") is None
    assert read_in_flight(tmp_path) is None
    rows = read_results(tmp_path, every_attempt=True)
    assert rows["status"].tolist() == [status.OK]
    mark_in_flight(tmp_path, {**cell, "attempt": 2})  # a second attempt in flight has no row yet: it is recorded
    assert record_crash(tmp_path, "stopped")["attempt"] == 2
    assert read_results(tmp_path, every_attempt=True)["status"].tolist() == [status.OK, status.CRASHED]
