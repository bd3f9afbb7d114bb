"""A runner that dies takes its kernel with it; one stopped by SIGTERM or SIGHUP shuts it down; the rerun measures the cell in flight again."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from benchlib import read_results
from benchlib.launch.kernel_process import MODULE as KERNEL_MODULE
from benchlib.launch.signals import STOP_SIGNALS, STOPPED_KERNEL_TASKS, Stopped, stop_signals_raise, stoppable, stopping_signal
from benchlib.paths import PROJECT_ROOT
from benchlib.store.locking import check_free
from benchlib.store.recovery import read_in_flight
from benchlib.store.results import rows_written
from tests.test_suite_workers import marked_processes

Launch = Callable[[Path, Path], list[str]]
MODELS = ["gpt2", "bert-base-cased", "distilgpt2"]  # on the smoke grid: batch size 1, sequence lengths 8 and 300
CELLS = len(MODELS) * 2


@pytest.fixture
def default_stop_handlers() -> Iterator[None]:
    """SIGTERM and SIGHUP at their default action while the test runs, as in a fresh `python -m benchlib`."""
    previous = {signum: signal.signal(signum, signal.SIG_DFL) for signum in STOP_SIGNALS}
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def test_sigterm_and_sighup_raise_stopped_inside_only(default_stop_handlers: None) -> None:
    with stop_signals_raise():
        for signum in STOP_SIGNALS:
            with pytest.raises(Stopped) as stop:
                os.kill(os.getpid(), signum)
                time.sleep(5)  # the handler runs before this ends
            assert stopping_signal(stop.value) == signum and isinstance(stop.value, KeyboardInterrupt)
    assert all(signal.getsignal(signum) is signal.SIG_DFL for signum in STOP_SIGNALS)


def test_an_ignored_sighup_stays_ignored(default_stop_handlers: None) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    with stop_signals_raise():
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL


def test_a_stopped_command_says_so_and_exits_with_128_plus_the_signal(default_stop_handlers: None, capsys: pytest.CaptureFixture[str]) -> None:
    @stoppable
    def hung_up() -> int:
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(5)
        return 0

    @stoppable
    def interrupted() -> int:
        raise KeyboardInterrupt  # Ctrl-C

    assert hung_up() == 128 + signal.SIGHUP and "stopped by SIGHUP: finished rows are kept" in capsys.readouterr().err
    assert interrupted() == 128 + signal.SIGINT and "stopped by SIGINT" in capsys.readouterr().err


def unretrieved_task_reports(error: Exception, caplog: pytest.LogCaptureFixture) -> list[str]:
    """What asyncio logs for a task that ended with `error`, nobody having asked for its result."""

    async def cell() -> None:
        raise error

    caplog.clear()
    loop = asyncio.new_event_loop()
    task = loop.create_task(cell())
    loop.run_until_complete(asyncio.sleep(0.01))
    loop.close()
    del task
    gc.collect()
    return [record.getMessage() for record in caplog.records if record.name == "asyncio"]


def test_a_stop_quiets_the_dead_kernels_cell_task_and_nothing_else(caplog: pytest.LogCaptureFixture) -> None:
    from nbclient.exceptions import DeadKernelError

    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.removeFilter(STOPPED_KERNEL_TASKS)  # as in a fresh process: another test's stop may have added it
    assert any("never retrieved" in m for m in unretrieved_task_reports(DeadKernelError("Kernel died"), caplog))  # what a stop printed
    try:
        stoppable(lambda: (_ for _ in ()).throw(KeyboardInterrupt))()
        assert STOPPED_KERNEL_TASKS in asyncio_log.filters
        assert unretrieved_task_reports(DeadKernelError("Kernel died"), caplog) == []
        assert any("never retrieved" in m for m in unretrieved_task_reports(ValueError("a bug"), caplog))
    finally:
        asyncio_log.removeFilter(STOPPED_KERNEL_TASKS)


def cli_command(run_dir: Path, params: Path) -> list[str]:
    return [
        sys.executable, "-m", "benchlib", "run", "--grid", "smoke", "--environments", "cpu-pytorch", "--params", str(params),
        "--out", str(run_dir), "--no-summary", "--no-limits", "--quiet",
    ]  # fmt: skip


def worker_thread_command(run_dir: Path, params: Path) -> list[str]:
    """A process that runs the environment as a Dask worker does: `run_job` in a thread that is not the main one."""
    script = f"""
        import threading
        from pathlib import Path
        from benchlib.config.jobs import plan_run
        from benchlib.launch.execution import run_job
        [job] = plan_run(Path({str(run_dir)!r}), "smoke", ["cpu-pytorch"], [{str(params)!r}])
        worker = threading.Thread(target=run_job, args=(job,), kwargs={{"progress": False}})
        worker.start()
        worker.join()
    """
    return [sys.executable, "-c", textwrap.dedent(script)]


def small_grid(tmp_path: Path) -> Path:
    """MODELS, each cell measured once (no second attempt for a disturbed one), so that each has one row."""
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({"models": MODELS, "remeasure": 0}))
    return path


def start_mid_sweep(command: list[str], env_dir: Path) -> tuple[subprocess.Popen[str], psutil.Process]:
    """Start `command`; return it and its kernel once a row is written and another cell is in flight."""
    runner = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    try:
        while not (rows_written(env_dir) >= 1 and read_in_flight(env_dir)):
            assert runner.poll() is None and time.monotonic() < deadline, "no row was written"
            time.sleep(0.05)
        [kernel] = [p for p in psutil.Process(runner.pid).children(recursive=True) if KERNEL_MODULE in p.cmdline()]
    except BaseException:
        runner.kill()
        runner.wait()
        raise
    return runner, kernel


def freeze_mid_cell(kernel: psutil.Process, env_dir: Path) -> None:
    """Stop `kernel` (SIGSTOP) at a moment when a cell is in flight."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        kernel.suspend()
        if read_in_flight(env_dir):
            return
        kernel.resume()
        time.sleep(0.05)
    raise AssertionError("no cell was in flight")


def running(process: psutil.Process, within_s: float) -> bool:
    """Whether `process` still runs after `within_s` seconds (a zombie, waiting only to be reaped, does not)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.1)


def end(runner: subprocess.Popen[str], kernel: psutil.Process) -> None:
    """Kill what a failed test left running."""
    runner.kill()
    runner.wait()
    try:
        kernel.kill()
    except psutil.Error:
        pass


def assert_rerun_completes(command: list[str], env_dir: Path) -> None:
    """An immediate rerun of `command` succeeds, and every cell then has one row, `ok`."""
    again = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    rows = read_results(env_dir, every_attempt=True)
    cells = list(zip(rows.model, rows.batch_size, rows.sequence_length))
    assert len(cells) == len(set(cells)) == CELLS, cells
    assert set(rows.status) == {"ok"}, rows.reason.tolist()
    assert read_in_flight(env_dir) is None


@pytest.mark.e2e
@pytest.mark.parametrize("launch", [cli_command, pytest.param(worker_thread_command, marks=pytest.mark.full)], ids=["cli", "worker-thread"])
def test_a_killed_runner_takes_its_kernel_along_and_the_rerun_measures_its_cell_again(tmp_path: Path, launch: Launch) -> None:
    env_dir = tmp_path / "run" / "cpu-pytorch"
    runner, kernel = start_mid_sweep(launch(tmp_path / "run", small_grid(tmp_path)), env_dir)
    try:
        freeze_mid_cell(kernel, env_dir)  # the runner dies while a cell is certainly in flight
        runner.kill()
        runner.wait(timeout=30)
        time.sleep(1.5)  # past ipykernel's poll of its parent, so that the kernel ends at once when it resumes
        kernel.resume()
        assert not running(kernel, within_s=5), "the kernel outlived its runner"
    finally:
        end(runner, kernel)
    check_free(env_dir)  # the kernel's lock went with it
    left = read_in_flight(env_dir)
    assert left is not None and left["runner_pid"] == runner.pid
    assert_rerun_completes(cli_command(tmp_path / "run", small_grid(tmp_path)), env_dir)


@pytest.mark.e2e
@pytest.mark.full  # make test: SIGTERM's handling in the runner (above) and a killed runner's kernel and rerun (above)
def test_sigterm_shuts_the_kernel_down_and_the_rerun_goes_on(tmp_path: Path) -> None:
    env_dir = tmp_path / "run" / "cpu-pytorch"
    command = cli_command(tmp_path / "run", small_grid(tmp_path))
    runner, kernel = start_mid_sweep(command, env_dir)
    try:
        runner.send_signal(signal.SIGTERM)
        output, _ = runner.communicate(timeout=60)
        kernel_ran_on = running(kernel, within_s=0)
    finally:
        end(runner, kernel)
    assert runner.returncode == 128 + signal.SIGTERM, output
    assert "stopped by SIGTERM: finished rows are kept" in output and "Traceback" not in output, output
    assert not kernel_ran_on, "the runner exited before its kernel"
    check_free(env_dir)
    left = read_in_flight(env_dir)  # cleared by the kernel when the interrupt reached the sweep, else left for the rerun
    assert left is None or left["runner_pid"] == runner.pid
    assert_rerun_completes(command, env_dir)


# Ctrl-C (a real SIGINT to the runner itself) once the kernel's process exists and before it answers: nbclient's
# clean-up is not armed yet at that point.
INTERRUPTED_WHILE_STARTING = """
import os, signal, sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from benchlib.launch.notebook import execute_notebook

start_client = NotebookClient.start_new_kernel_client
def interrupted_start(client):
    os.kill(os.getpid(), signal.SIGINT)
    return start_client(client)
NotebookClient.start_new_kernel_client = interrupted_start

folder = Path(sys.argv[1])
nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}), folder / "one.ipynb")
execute_notebook(folder / "one.ipynb", folder / "out.ipynb", {}, folder / "kernel.log")
"""


@pytest.mark.e2e
def test_an_interrupt_while_the_kernel_starts_leaves_no_kernel(tmp_path: Path) -> None:
    mark = f"starting-{uuid.uuid4().hex}"  # inherited by the kernel's process
    script = tmp_path / "interrupted.py"
    script.write_text(textwrap.dedent(INTERRUPTED_WHILE_STARTING), encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "BENCHLIB_TEST_MARK": mark})  # fmt: skip
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr, done.stderr
    assert (tmp_path / "kernel.log").exists()  # a kernel was started
    assert marked_processes(mark) == [], "the kernel outlived the interrupted execution"
