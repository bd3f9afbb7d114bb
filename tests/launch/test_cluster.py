"""`benchlib run --cluster`: environments as tasks on a Dask cluster, every finished row back on the client, none lost with a worker.

The e2e tests start a real scheduler and two real workers (`dask scheduler`, `dask worker`) on
127.0.0.1 only, on free ports, and stop them when the module's tests are done.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from benchlib import read_results
from benchlib.cli import main
from benchlib.config.jobs import plan_run
from benchlib.launch import cluster as cluster_module
from benchlib.launch.cluster import ClusterError, ClusterRun, parse_cluster_address
from benchlib.machine import package_version
from benchlib.paths import PROJECT_ROOT
from benchlib.store.environment import merge_environment
from benchlib.store.layout import ENVIRONMENT_FILE
from benchlib.store.limits import read_limits
from benchlib.store.results import COLUMNS, ReceivedRows, ResultsWriter, make_row, rows_written, split_records
from tests.kernels import kill_mid_cell, running

DASK = Path(sys.executable).with_name("dask")
# Three cells per environment: two tiny models measured, Transformer-XL `unsupported` in PyTorch.
TINY = {"models": ["gpt2", "bert-base-cased", "transfo-xl-wt103"], "sequence_lengths": [8], "repeat": 3, "remeasure": 0}
# Eight cells, long enough that a worker can be killed between the first row and the last.
LONGER = {"models": ["gpt2", "bert-base-cased", "distilgpt2", "openai-gpt"], "sequence_lengths": [8, 16], "repeat": 20, "remeasure": 0}


def write_yaml(path: Path, values: dict) -> Path:
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------- without a cluster


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("local:0", "--cluster: local:N takes a number of workers of 1 or more, not 'local:0'"),
        ("local:two", "--cluster: local:N takes a number of workers of 1 or more, not 'local:two'"),
        ("scheduler", "--cluster: 'scheduler' is not a scheduler address (tcp://HOST:PORT) or local:N"),
        ("tcp://10.0.0.5", "--cluster: 'tcp://10.0.0.5' is not a scheduler address (tcp://HOST:PORT) or local:N"),
        ("http://10.0.0.5:8786", "--cluster: 'http://10.0.0.5:8786' is not a scheduler address (tcp://HOST:PORT) or local:N"),
    ],
)
def test_a_bad_cluster_address_is_one_line_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str], address: str, problem: str) -> None:
    with pytest.raises(ClusterError, match="^--cluster: "):
        parse_cluster_address(address)
    assert main(["run", "--grid", "smoke", "--out", str(tmp_path / "run"), "--cluster", address]) == 2
    assert capsys.readouterr().err == problem + "\n"
    assert not (tmp_path / "run").exists()


def test_cluster_addresses() -> None:
    assert parse_cluster_address("tcp://10.0.0.5:8786") == "tcp://10.0.0.5:8786"
    assert parse_cluster_address("10.0.0.5:8786") == "10.0.0.5:8786"
    assert parse_cluster_address("local:3") == 3


@pytest.mark.e2e
def test_no_scheduler_at_the_address_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_module, "CONNECT_TIMEOUT_S", 1)  # the shipped 10 s, waited for nothing
    address = f"tcp://127.0.0.1:{free_port()}"
    assert main(["run", "--grid", "smoke", "--out", str(tmp_path / "run"), "--cluster", address, "--no-summary"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"--cluster: no Dask scheduler answered at {address} within 1 s (") and err.count("\n") == 1


def record(model: str, round_number: int = 1, attempt: int = 1, reason: str = "") -> str:
    """One results.csv record as ResultsWriter writes it."""
    cell = {"environment": "cpu-pytorch", "model": model, "batch_size": 1, "sequence_length": 8, "round": round_number, "attempt": attempt}
    text = io.StringIO()
    csv.DictWriter(text, fieldnames=COLUMNS).writerow(make_row(cell, "error", reason=reason))
    return text.getvalue()


def test_records_are_split_at_line_ends_outside_quotes() -> None:
    first, second = record("gpt2", reason="two\nlines, and a comma"), record("bert-base-cased")
    assert split_records(first + second + second[:10]) == ([first, second], second[:10])
    assert split_records(first[:-1]) == ([], first[:-1])  # a record is complete only with its line end


def test_received_rows_are_appended_once_exactly_as_written(tmp_path: Path) -> None:
    with ResultsWriter(tmp_path) as writer:
        writer.append(make_row({"model": "gpt2", "batch_size": 1, "sequence_length": 8, "round": 1, "attempt": 1}, "ok"))
    with open(tmp_path / "results.csv", "a", encoding="utf-8") as file:
        file.write("cpu-pytorch,pytorch,eager,cpu,bert")  # cut off by a killed process
    rows = ReceivedRows(tmp_path)
    header = ",".join(COLUMNS) + "\r\n"
    kept = rows.text()
    assert kept.startswith(header) and kept.count("\r\n") == 2 and (tmp_path / "results.cutoff.txt").exists()
    again, new, retry = record("gpt2"), record("bert-base-cased", reason="a\nb"), record("bert-base-cased", attempt=2)
    added = rows.add([header, again, new, new, retry, record("distilgpt2", round_number=2)])
    assert [(row["model"], row["round"], row["attempt"]) for row in added] == [("bert-base-cased", "1", "1"), ("bert-base-cased", "1", "2"), ("distilgpt2", "2", "1")]
    assert rows.text() == kept + new + retry + record("distilgpt2", round_number=2)
    assert (rows.cells(1), rows.cells(2)) == (2, 1)
    assert ReceivedRows(tmp_path).add([again, new]) == []  # the keys come back from the file
    assert len(read_results(tmp_path, every_attempt=True)) == 4


def test_environment_files_merge_their_probes_tagged_with_the_host(tmp_path: Path) -> None:
    path = tmp_path / ENVIRONMENT_FILE

    def info(host: str, *probes: tuple[int, str, str]) -> bytes:
        return json.dumps({"machine": {"hostname": host}, "probes": [{"round": r, "label": label, "time": t, "seconds": 0.1} for r, label, t in probes]}).encode()

    path.write_bytes(info("a", (1, "start", "2026-01-01T10:00"), (1, "end", "2026-01-01T10:05")))
    merge_environment(tmp_path, info("b", (2, "start", "2026-01-01T10:03"), (1, "end", "2026-01-01T10:05")))
    merged = json.loads(path.read_text())
    assert merged["machine"] == {"hostname": "b"}
    assert [(p["round"], p["label"], p["hostname"]) for p in merged["probes"]] == [(1, "start", "a"), (2, "start", "b"), (1, "end", "a")]


class Finished:
    """A finished task's future, as the client sees it."""

    status = "finished"

    def __init__(self, value: object) -> None:
        self.value = value

    def result(self) -> object:
        return self.value


def test_each_machine_keeps_its_limits_the_first_where_a_local_run_puts_them(tmp_path: Path) -> None:
    jobs = plan_run(tmp_path / "run", "smoke", ["cpu-pytorch"])
    run_dir = jobs[0].output_dir.parent
    run_dir.mkdir()
    run = ClusterRun(None, jobs, print, progress=False, max_restarts=0)

    def measured(peak: float) -> Finished:
        limits = {"cpu": {"device": "cpu", "float32_flops_per_s": peak}}
        return Finished({"machine_limits.json": json.dumps(limits).encode(), "machine_limits.cpu.ipynb": str(peak).encode(), "kernel.log": b"limits\n"})

    run._limits_finished(measured(1e11), "tcp://10.0.0.5:40001")
    run._limits_finished(measured(2e11), "tcp://10.0.0.6:40001")
    assert read_limits(run_dir) == {"cpu": {"device": "cpu", "float32_flops_per_s": 1e11}}
    assert (run_dir / "machine_limits.cpu.ipynb").read_bytes() == b"100000000000.0"
    assert json.loads((run_dir / "machine_limits.10.0.0.6.json").read_text()) == {"cpu": {"device": "cpu", "float32_flops_per_s": 2e11}}
    assert (run_dir / "machine_limits.cpu.10.0.0.6.ipynb").read_bytes() == b"200000000000.0"
    assert (run_dir / "kernel.log").read_bytes() == b"limits\nlimits\n"


# ---------------------------------------------------------------- a real scheduler and two workers


def stop(process: subprocess.Popen) -> None:
    """Kill a process started in its own session, and every process of that session."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[subprocess.Popen]]]:
    """The address of a scheduler on 127.0.0.1 and its two workers (one benchmark each), stopped afterwards."""
    from distributed import Client

    port, logs = free_port(), tmp_path_factory.mktemp("cluster-logs")
    address = f"tcp://127.0.0.1:{port}"
    started: list[subprocess.Popen] = []

    def start(*args: str, log: str) -> subprocess.Popen:
        with open(logs / log, "wb") as output:
            started.append(subprocess.Popen([str(DASK), *args], stdout=output, stderr=subprocess.STDOUT, start_new_session=True))
        return started[-1]

    try:
        start("scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard", log="scheduler.log")
        workers = [
            start(
                "worker", address, "--nworkers", "1", "--nthreads", "1", "--resources", "benchmark=1", "--host", "127.0.0.1", "--no-dashboard",
                "--local-directory", str(logs / f"worker{i}"), log=f"worker{i}.log",
            )
            for i in (1, 2)
        ]  # fmt: skip
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield address, workers
    finally:
        for process in started:
            stop(process)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchlib", "run", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)


def layout(run_dir: Path) -> set[str]:
    return {str(path.relative_to(run_dir)) for path in run_dir.rglob("*") if path.is_file()}


def cells(env_dir: Path) -> list[tuple]:
    rows = read_results(env_dir, every_attempt=True)
    return sorted(zip(rows["model"], rows["batch_size"], rows["sequence_length"], rows["round"], rows["status"]))


@pytest.mark.e2e
@pytest.mark.full
def test_a_run_on_the_cluster_matches_a_local_run(tmp_path: Path, cluster: tuple[str, list[subprocess.Popen]]) -> None:
    address, _ = cluster
    tiny = write_yaml(tmp_path / "tiny.yaml", TINY)
    common = ["--grid", "smoke", "--environments", "cpu-pytorch,cpu-torchscript", "--params", str(tiny), "--no-summary", "--quiet"]
    local = run_cli(*common, "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stdout + local.stderr
    remote = run_cli(*common, "--out", str(tmp_path / "cluster"), "--cluster", address)
    assert remote.returncode == 0, remote.stdout + remote.stderr

    assert layout(tmp_path / "cluster") == layout(tmp_path / "local") >= {"machine_limits.json", "machine_limits.cpu.ipynb", "cpu-pytorch/benchmark.ipynb"}
    for environment in ("cpu-pytorch", "cpu-torchscript"):
        assert cells(tmp_path / "cluster" / environment) == cells(tmp_path / "local" / environment)
        assert len(cells(tmp_path / "cluster" / environment)) == 3
        info = json.loads((tmp_path / "cluster" / environment / "environment.json").read_text())
        assert info["machine"]["cpu"] and {probe["hostname"] for probe in info["probes"]} == {info["machine"]["hostname"]}
    assert "machine limits (cpu): float32 peak" in remote.stdout  # measured once: both workers are on this host
    assert remote.stdout.count("machine limits (cpu)") == 1
    assert remote.stdout.count(": started on tcp://127.0.0.1:") == 2 and "2 of 2 environments succeeded" in remote.stdout


def processes_of(worker: subprocess.Popen) -> list[psutil.Process]:
    """The `dask worker` process, the worker process its nanny started, and that worker's kernel, if any."""
    parent = psutil.Process(worker.pid)
    return [parent, *parent.children(recursive=True)]


def has_kernel(worker: subprocess.Popen) -> bool:
    return any("ipykernel_launcher" in " ".join(p.cmdline()) for p in processes_of(worker) if p.is_running())


def longer_run_on(address: str, tmp_path: Path, run_dir: Path) -> list[str]:
    """`benchlib run` of the LONGER cells in cpu-pytorch on the cluster at `address`, into `run_dir`."""
    longer = write_yaml(tmp_path / "longer.yaml", LONGER)
    return [
        sys.executable, "-m", "benchlib", "run", "--grid", "smoke", "--environments", "cpu-pytorch", "--params", str(longer),
        "--out", str(run_dir), "--no-summary", "--no-limits", "--cluster", address,
    ]  # fmt: skip


@pytest.mark.e2e
def test_a_worker_killed_mid_environment_loses_no_row(tmp_path: Path, cluster: tuple[str, list[subprocess.Popen]]) -> None:
    """SIGKILL to a worker (and its kernel) after its first row: the environment goes on on the other worker; every cell once."""
    from distributed import Client

    address, workers = cluster
    run_dir = tmp_path / "run"
    command = longer_run_on(address, tmp_path, run_dir)
    client = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while rows_written(run_dir / "cpu-pytorch") < 1:  # a row is on the client, others are still to come
            assert time.monotonic() < deadline and client.poll() is None, "no row reached the client"
            time.sleep(0.05)
        [victim] = [worker for worker in workers if has_kernel(worker)]
        with Client(address, timeout=30) as observer:
            pids = {pid: addr for addr, pid in observer.run(os.getpid).items()}
        [lost] = [pids[p.pid] for p in processes_of(victim) if p.pid in pids]
        for process in processes_of(victim):  # the machine is gone: its worker, nanny and kernel at once
            process.send_signal(signal.SIGKILL)
        before = (run_dir / "cpu-pytorch" / "results.csv").read_bytes()
        output, _ = client.communicate(timeout=300)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert client.returncode == 0, output
    assert "started again on tcp://127.0.0.1:" in output and f"{lost} was lost" in output
    after = (run_dir / "cpu-pytorch" / "results.csv").read_bytes()
    assert after.startswith(before) and before.count(b"\r\n") >= 2  # the header and a row: kept as they came
    rows = read_results(run_dir / "cpu-pytorch", every_attempt=True)
    keys = list(zip(rows["model"], rows["sequence_length"]))
    assert len(keys) == len(set(keys)) == 8 and set(rows["status"]) == {"ok"}
    assert {"benchmark.ipynb", "environment.json", "kernel.log"} <= set(os.listdir(run_dir / "cpu-pytorch"))


def scratch_folders(workers: list[subprocess.Popen], environment: str) -> list[Path]:
    """The environment folders in which the workers (started with --local-directory) run `environment` now: `<environment>`
    in a scratch folder of its own (`launch.cluster.environment_task`)."""
    directories = [Path(worker.args[worker.args.index("--local-directory") + 1]) for worker in workers]
    return [folder for directory in directories for folder in directory.rglob(f"benchlib-{environment}-*/{environment}") if folder.is_dir()]


@pytest.mark.e2e
def test_a_kernel_killed_by_a_signal_on_a_worker_gets_a_row_that_names_it(tmp_path: Path, cluster: tuple[str, list[subprocess.Popen]]) -> None:
    """SIGBUS to a worker's kernel (not the worker) mid-cell: the cell is `crashed` with the signal and the runtime named, as in
    a local run, the kernel starts again on the same worker, and every cell reaches the client once."""
    address, workers = cluster
    run_dir = tmp_path / "run"
    command = longer_run_on(address, tmp_path, run_dir)
    earlier = set(scratch_folders(workers, "cpu-pytorch"))  # a worker killed by another test leaves its folder behind
    with running(command) as client:
        deadline = time.monotonic() + 300
        while not (scratch := [folder for folder in scratch_folders(workers, "cpu-pytorch") if folder not in earlier]):
            assert time.monotonic() < deadline and client.poll() is None, "no worker started the environment"
            time.sleep(0.05)
        killed = kill_mid_cell(scratch[0], client, min_rows=1, signum=signal.SIGBUS)
        output, _ = client.communicate(timeout=300)
    assert client.returncode == 0, output
    assert "marked crashed, restarting (1 of 3)" in output and "was lost" not in output
    rows = read_results(run_dir / "cpu-pytorch", every_attempt=True)
    keys = list(zip(rows["model"], rows["sequence_length"]))
    assert len(keys) == len(set(keys)) == 8 and set(rows["status"]) == {"ok", "crashed"}
    [crashed] = rows[rows["status"] == "crashed"].itertuples()
    assert (crashed.model, crashed.batch_size, crashed.sequence_length) == (killed["model"], killed["batch_size"], killed["sequence_length"])
    assert crashed.reason.startswith(f"kernel died (SIGBUS: Bus error) while measuring with torch {package_version('torch')} (measuring since ")
