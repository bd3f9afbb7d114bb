"""`benchlib run --cluster`: environments as tasks on a Dask cluster over TLS, every finished row back on the client, none
lost with a worker.

The e2e tests start a real TLS scheduler and two real workers (`dask scheduler`, `dask worker`, with certificates made by
`benchlib cluster certs`) on 127.0.0.1 only, on free ports, and stop them when the module's tests are done. The faults
(a worker preempted, a lost scheduler) and the wrong addresses are in test_cluster_faults.py and test_cluster_security.py.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import yaml

import benchlib
from benchlib import read_results
from benchlib.cli import main
from benchlib.config.jobs import plan_run
from benchlib.launch.certificates import client_security
from benchlib.launch import connection
from benchlib.launch.cluster import ClusterRun, connect
from benchlib.launch.connection import ClusterError, ClusterTarget, plan_target
from benchlib.launch.kernel_process import MODULE as KERNEL_MODULE
from benchlib.launch.worker_check import differences, kit_fingerprint
from benchlib.machine import package_version
from benchlib.paths import PROJECT_ROOT
from benchlib.store.environment import merge_environment
from benchlib.store.layout import ENVIRONMENT_FILE
from benchlib.store.limits import read_limits
from benchlib.store.results import COLUMNS, ReceivedRows, ResultsWriter, make_row, rows_written, split_records
from tests.clusters import Cluster, DaskProcesses, free_port, stop
from tests.kernels import kill_mid_cell, running

# Three cells per environment: two tiny models measured, Transformer-XL `unsupported` in PyTorch.
TINY = {"models": ["gpt2", "bert-base-cased", "transfo-xl-wt103"], "sequence_lengths": [8], "repeat": 3, "remeasure": 0}
# Eight cells, long enough that a worker can be killed between the first row and the last.
LONGER = {"models": ["gpt2", "bert-base-cased", "distilgpt2", "openai-gpt"], "sequence_lengths": [8, 16], "repeat": 20, "remeasure": 0}


def write_yaml(path: Path, values: dict) -> Path:
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


# ---------------------------------------------------------------- without a cluster


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cluster's CA, certificates and keys, made by `benchlib cluster certs`."""
    folder = tmp_path_factory.mktemp("certs")
    assert main(["cluster", "certs", str(folder)]) == 0
    return folder


def test_cluster_certs_writes_each_roles_files_keys_for_their_owner_only(certs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cryptography import x509

    assert sorted(path.name for path in certs.iterdir()) == ["ca.pem", "client.key", "client.pem", "scheduler.key", "scheduler.pem", "worker.key", "worker.pem"]
    assert {path.name: path.stat().st_mode & 0o777 for path in certs.glob("*.key")} == dict.fromkeys(["client.key", "scheduler.key", "worker.key"], 0o600)
    ca = x509.load_pem_x509_certificate((certs / "ca.pem").read_bytes())
    for role in ("scheduler", "worker", "client"):
        x509.load_pem_x509_certificate((certs / f"{role}.pem").read_bytes()).verify_directly_issued_by(ca)
    assert main(["cluster", "certs", str(tmp_path / "new")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0:2] for line in out[-3:]] == [["dask", "scheduler"], ["dask", "worker"], ["python", "-m"]]
    assert f"--tls-cert {tmp_path / 'new' / 'worker.pem'}" in out[-2] and out[-1].endswith(f"--tls {tmp_path / 'new'}")
    (tmp_path / "file").touch()
    assert main(["cluster", "certs", str(tmp_path / "file" / "certs")]) == 2
    assert capsys.readouterr().err.startswith(f"cluster certs: cannot make {tmp_path / 'file' / 'certs'}: ")


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--cluster", "local:0"], "--cluster: local:N takes a number of workers of 1 or more, not 'local:0'"),
        (["--cluster", "local:two"], "--cluster: local:N takes a number of workers of 1 or more, not 'local:two'"),
        (["--cluster", "scheduler"], "--cluster: 'scheduler' is not a scheduler address (tls://HOST:PORT, tcp://HOST:PORT) or local:N"),
        (["--cluster", "tcp://10.0.0.5"], "--cluster: 'tcp://10.0.0.5' is not a scheduler address (tls://HOST:PORT, tcp://HOST:PORT) or local:N"),
        (["--cluster", "http://10.0.0.5:8786"], "--cluster: 'http://10.0.0.5:8786' is not a scheduler address (tls://HOST:PORT, tcp://HOST:PORT) or local:N"),
        (
            ["--cluster", "tcp://10.0.0.5:8786"],
            "--cluster: tcp://10.0.0.5:8786 is plain text across a network: anyone who reaches its port can run code on every worker; "
            "make certificates with `python -m benchlib cluster certs DIR`, start the scheduler and workers with them and run with "
            "--cluster tls://10.0.0.5:8786 --tls DIR (--insecure runs without encryption)",
        ),
        (["--cluster", "tls://10.0.0.5:8786"], "--cluster: tls://10.0.0.5:8786 is a TLS scheduler: give the folder of its certificates with --tls DIR (make certificates with `python -m benchlib cluster certs DIR`)"),
        (["--cluster", "tls://10.0.0.5:8786", "--tls", "{certs}", "--insecure"], "--insecure: tls://10.0.0.5:8786 is a TLS address; --insecure allows plain tcp:// only"),
        (["--cluster", "tcp://127.0.0.1:8786", "--tls", "{certs}"], "--tls: tcp://127.0.0.1:8786 is plain text; with --tls the address is tls://127.0.0.1:8786"),
        (["--cluster", "tls://10.0.0.5:8786", "--tls", "{missing}"], "--tls: no such folder: {missing} (make one with `python -m benchlib cluster certs {missing}`)"),
        (["--cluster", "tls://10.0.0.5:8786", "--tls", "{empty}"], "--tls: {empty} has no ca.pem (made by `python -m benchlib cluster certs {empty}`)"),
        (["--tls", "{certs}"], "--tls: goes with --cluster"),
        (["--insecure"], "--insecure: goes with --cluster"),
        (["--allow-mismatch"], "--allow-mismatch: goes with --cluster"),
        (["--cluster", "local:1", "--scheduler-wait", "0"], "--scheduler-wait: must be more than 0 seconds, not 0"),
    ],
)
def test_a_bad_cluster_address_is_one_line_before_anything_runs(
    tmp_path: Path, certs: Path, capsys: pytest.CaptureFixture[str], args: list[str], problem: str
) -> None:
    (tmp_path / "empty").mkdir()
    folders = {"certs": certs, "missing": tmp_path / "missing", "empty": tmp_path / "empty"}
    args = [arg.format(**folders) for arg in args]
    assert main(["run", "--grid", "smoke", "--out", str(tmp_path / "run"), *args]) == 2
    assert capsys.readouterr().err == problem.format(**folders) + "\n"
    assert not (tmp_path / "run").exists()


def test_plain_text_stays_on_this_machine_unless_insecure(certs: Path) -> None:
    assert plan_target("tcp://127.0.0.1:8786").record() == {"address": "tcp://127.0.0.1:8786", "encryption": "none (loopback)"}
    assert plan_target("localhost:8786").address == "tcp://localhost:8786"
    assert plan_target("[::1]:8786").record()["encryption"] == "none (loopback)"
    assert plan_target("10.0.0.5:8786", insecure=True).record() == {"address": "tcp://10.0.0.5:8786", "encryption": "none (--insecure)"}
    assert plan_target("10.0.0.5:8786", tls=certs).record() == {"address": "tls://10.0.0.5:8786", "encryption": "TLS"}
    assert plan_target("local:3") == ClusterTarget("local:3", local=3)
    assert plan_target("local:3").encrypted and not plan_target("local:3", insecure=True).encrypted
    with pytest.raises(ClusterError, match="plain text across a network"):
        plan_target("tcp://example.invalid:8786")  # a name that resolves nowhere is not this machine


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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[Cluster]:
    """A TLS scheduler on 127.0.0.1 and two workers (one benchmark each), with `cluster certs`' files; stopped afterwards."""
    processes = DaskProcesses(tmp_path_factory.mktemp("cluster-logs"), certs)
    try:
        address = processes.scheduler()
        running_cluster = Cluster(address, certs, [], processes)
        running_cluster.top_up()
        yield running_cluster
    finally:
        processes.stop_all()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchlib", "run", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)


def layout(run_dir: Path) -> set[str]:
    return {str(path.relative_to(run_dir)) for path in run_dir.rglob("*") if path.is_file()}


def cells(env_dir: Path) -> list[tuple]:
    rows = read_results(env_dir, every_attempt=True)
    return sorted(zip(rows["model"], rows["batch_size"], rows["sequence_length"], rows["round"], rows["status"]))


@pytest.mark.e2e
@pytest.mark.full
def test_a_run_on_the_cluster_matches_a_local_run(tmp_path: Path, cluster: Cluster) -> None:
    cluster.top_up()
    tiny = write_yaml(tmp_path / "tiny.yaml", TINY)
    common = ["--grid", "smoke", "--environments", "cpu-pytorch,cpu-torchscript", "--params", str(tiny), "--no-summary", "--quiet"]
    local = run_cli(*common, "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stdout + local.stderr
    remote = run_cli(*common, "--out", str(tmp_path / "cluster"), "--cluster", cluster.address, "--tls", str(cluster.certs))
    assert remote.returncode == 0, remote.stdout + remote.stderr

    assert layout(tmp_path / "cluster") == layout(tmp_path / "local") >= {"machine_limits.json", "machine_limits.cpu.ipynb", "cpu-pytorch/benchmark.ipynb"}
    for environment in ("cpu-pytorch", "cpu-torchscript"):
        assert cells(tmp_path / "cluster" / environment) == cells(tmp_path / "local" / environment)
        assert len(cells(tmp_path / "cluster" / environment)) == 3
        info = json.loads((tmp_path / "cluster" / environment / "environment.json").read_text())
        assert info["machine"]["cpu"] and {probe["hostname"] for probe in info["probes"]} == {info["machine"]["hostname"]}
        assert info["cluster"] == {"address": cluster.address, "encryption": "TLS"}
    assert "machine limits (cpu): float32 peak" in remote.stdout  # measured once: both workers are on this host
    assert remote.stdout.count("machine limits (cpu)") == 1
    assert remote.stdout.count(": started on tls://127.0.0.1:") == 2 and "2 of 2 environments succeeded" in remote.stdout


def processes_of(worker: subprocess.Popen) -> list[psutil.Process]:
    """The `dask worker` process, the worker process its nanny started, and that worker's kernel, if any."""
    parent = psutil.Process(worker.pid)
    return [parent, *parent.children(recursive=True)]


def has_kernel(worker: subprocess.Popen) -> bool:
    return any(KERNEL_MODULE in p.cmdline() for p in processes_of(worker) if p.is_running())


def longer_run_on(address: str, tmp_path: Path, run_dir: Path, *cluster_options: str) -> list[str]:
    """`benchlib run` of the LONGER cells in cpu-pytorch on the cluster at `address`, into `run_dir`."""
    longer = write_yaml(tmp_path / "longer.yaml", LONGER)
    return [
        sys.executable, "-m", "benchlib", "run", "--grid", "smoke", "--environments", "cpu-pytorch", "--params", str(longer),
        "--out", str(run_dir), "--no-summary", "--no-limits", "--cluster", address, *cluster_options,
    ]  # fmt: skip


@pytest.mark.e2e
@pytest.mark.parametrize("preempted", [pytest.param(False, marks=pytest.mark.full, id="killed"), pytest.param(True, id="preempted")])
def test_a_worker_lost_mid_environment_loses_no_row(tmp_path: Path, cluster: Cluster, preempted: bool) -> None:
    """After its first row, SIGKILL to a worker, its nanny and its kernel at once (the machine is gone), or SIGTERM to
    its `dask worker` process only (what a cloud's preemption notice sends): the environment goes on on the other worker,
    every cell once, and nothing of the lost worker is left measuring. Run again, the finished environment gets no task."""
    from distributed import Client

    cluster.top_up()
    address, workers = cluster.address, cluster.workers
    run_dir = tmp_path / "run"
    command = longer_run_on(address, tmp_path, run_dir, "--tls", str(cluster.certs))
    client = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while rows_written(run_dir / "cpu-pytorch") < 1:  # a row is on the client, others are still to come
            assert time.monotonic() < deadline and client.poll() is None, "no row reached the client"
            time.sleep(0.05)
        [victim] = [worker for worker in workers if has_kernel(worker)]
        with Client(address, timeout=30, security=client_security(cluster.certs)) as observer:
            pids = {pid: addr for addr, pid in observer.run(os.getpid).items()}
        victims = processes_of(victim)
        [lost] = [pids[p.pid] for p in victims if p.pid in pids]
        if preempted:
            victim.send_signal(signal.SIGTERM)
        else:
            for process in victims:  # the machine is gone: its worker, nanny and kernel at once
                process.send_signal(signal.SIGKILL)
        before = (run_dir / "cpu-pytorch" / "results.csv").read_bytes()
        output, _ = client.communicate(timeout=300)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert client.returncode == 0, output
    assert "started again on tls://127.0.0.1:" in output and f"{lost} was lost" in output
    assert psutil.wait_procs(victims, timeout=30)[1] == []  # its kernel too: no process of the lost worker goes on measuring
    after = (run_dir / "cpu-pytorch" / "results.csv").read_bytes()
    assert after.startswith(before) and before.count(b"\r\n") >= 2  # the header and a row: kept as they came
    rows = read_results(run_dir / "cpu-pytorch", every_attempt=True)
    keys = list(zip(rows["model"], rows["sequence_length"]))
    assert len(keys) == len(set(keys)) == 8 and set(rows["status"]) == {"ok"}
    assert {"benchmark.ipynb", "environment.json", "kernel.log"} <= set(os.listdir(run_dir / "cpu-pytorch"))

    record = (run_dir / "cpu-pytorch" / "benchmark.ipynb").stat().st_mtime_ns
    again = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)  # the other worker is still there
    assert again.returncode == 0, again.stdout + again.stderr
    assert "cpu-pytorch: every cell of round 1 has its row: nothing to measure, no task" in again.stdout
    assert (run_dir / "cpu-pytorch" / "results.csv").read_bytes() == after  # nothing measured twice
    assert (run_dir / "cpu-pytorch" / "benchmark.ipynb").stat().st_mtime_ns == record  # no worker ran it again


def scratch_folders(workers: list[subprocess.Popen], environment: str) -> list[Path]:
    """The environment folders in which the workers (started with --local-directory) run `environment` now: `<environment>`
    in a scratch folder of its own (`launch.cluster.environment_task`)."""
    directories = [Path(worker.args[worker.args.index("--local-directory") + 1]) for worker in workers]
    return [folder for directory in directories for folder in directory.rglob(f"benchlib-{environment}-*/{environment}") if folder.is_dir()]


@pytest.mark.e2e
@pytest.mark.full  # make test checks the crash on one machine (test_crash_recovery.py) and a worker lost on the cluster
def test_a_kernel_killed_by_a_signal_on_a_worker_gets_a_row_that_names_it(tmp_path: Path, cluster: Cluster) -> None:
    """SIGBUS to a worker's kernel (not the worker) mid-cell: the cell is `crashed` with the signal and the runtime named, as in
    a local run, the kernel starts again on the same worker, and every cell reaches the client once."""
    cluster.top_up()
    address, workers = cluster.address, cluster.workers
    run_dir = tmp_path / "run"
    command = longer_run_on(address, tmp_path, run_dir, "--tls", str(cluster.certs))
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


# ---------------------------------------------------------------- who may connect


class Listener:
    """A server on 127.0.0.1, in a thread: an HTTP server (what a mistyped port, such as a dashboard's, reaches), or,
    with `banner`, another service that greets every connection first (as SSH does)."""

    def __init__(self, banner: bytes | None = None) -> None:
        self.banner = banner

    def __enter__(self) -> str:
        import http.server
        import socketserver
        import threading

        banner = self.banner

        class Http(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # not on the test's stderr, where the kit's one line is read
                pass

        class Greeter(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.sendall(banner)

        server_class = http.server.ThreadingHTTPServer if banner is None else socketserver.ThreadingTCPServer
        self.server = server_class(("127.0.0.1", 0), Http if banner is None else Greeter)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.e2e
def test_a_wrong_address_or_certificate_is_one_line_within_the_connect_timeout(
    tmp_path: Path, cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each of these is refused with its one line (exit 2), well within the connect timeout, and no cell runs: another
    service; an HTTP server; the TLS scheduler reached over tcp:// (no certificate); its certificate checked against another CA's; this
    run's certificate made by another CA; a plain scheduler reached with --tls; nothing listening."""
    from distributed import Client

    plain = DaskProcesses(tmp_path, None)
    other = tmp_path / "other"
    assert main(["cluster", "certs", str(other)]) == 0
    mixed = tmp_path / "mixed"  # this cluster's CA, another CA's client certificate
    mixed.mkdir()
    shutil.copy(cluster.certs / "ca.pem", mixed)
    for name in ("client.pem", "client.key"):
        shutil.copy2(other / name, mixed)
    tls_host = cluster.address.removeprefix("tls://")
    try:
        plain_address = plain.scheduler()
        plain.wait_for(plain_address, 0)
        with Listener() as http_host, Listener(b"SSH-2.0-OpenSSH_9.2p1\r\n") as ssh_host:
            cases = [
                (["--cluster", f"tcp://{ssh_host}"], f"--cluster: something answers at tcp://{ssh_host} but not as a Dask scheduler (it sent b'SSH-2.0-OpenSSH_9.2p1\\r\\n')"),
                (["--cluster", f"tcp://{http_host}"], f"--cluster: an HTTP server answers at tcp://{http_host}, not a Dask scheduler: a dashboard or web port?"),
                (["--cluster", f"tls://{http_host}", "--tls", str(cluster.certs)], f"--cluster: an HTTP server answers at tls://{http_host}, not a Dask scheduler"),
                (["--cluster", f"tcp://{tls_host}"], f"--cluster: the scheduler at tcp://{tls_host} asks for TLS and this run has none: run with --cluster tls://{tls_host} --tls DIR"),
                (["--cluster", cluster.address, "--tls", str(other)], f"--cluster: the scheduler at {cluster.address} shows a certificate that {other / 'ca.pem'} did not sign"),
                (["--cluster", cluster.address, "--tls", str(mixed)], f"--cluster: the scheduler at {cluster.address} refused this run's certificate ({mixed / 'client.pem'}): it trusts another CA"),
                (
                    ["--cluster", "tls://" + plain_address.removeprefix("tcp://"), "--tls", str(cluster.certs)],
                    f"--cluster: the scheduler at tls://{plain_address.removeprefix('tcp://')} has no TLS (it speaks plain {plain_address})",
                ),
                (["--cluster", f"tcp://127.0.0.1:{free_port()}"], "--cluster: nothing listens at tcp://127.0.0.1:"),
            ]
            for args, problem in cases:
                start = time.monotonic()
                assert main(["run", "--grid", "smoke", "--out", str(tmp_path / "run"), "--no-summary", "--no-limits", *args]) == 2, args
                took, err = time.monotonic() - start, capsys.readouterr().err
                assert err.startswith(problem) and err.count("\n") == 1, (args, err)
                assert took < connection.CONNECT_TIMEOUT_S, (args, took)
        # Dask's own client gets no further: the scheduler itself refuses a connection without this cluster's certificates.
        for address, security in ((f"tcp://{tls_host}", None), (cluster.address, client_security(other)), (cluster.address, client_security(mixed))):
            with pytest.raises((OSError, TimeoutError)):
                Client(address, timeout=3, security=security)
    finally:
        plain.stop_all()
    assert not list(tmp_path.rglob("results.csv"))


@pytest.mark.e2e
def test_local_workers_talk_tls_unless_insecure() -> None:
    for insecure, scheme in ((False, "tls://"), (True, "tcp://")):
        with connect(plan_target("local:1", insecure=insecure)) as client:
            assert client.scheduler.address.startswith(scheme)
            assert list(client.run(platform.python_version).values()) == [platform.python_version()]


# ---------------------------------------------------------------- the same kit on every worker


def test_each_way_a_workers_kit_differs_is_one_line() -> None:
    mine = {"benchlib": "0.9.0", "commit": "a" * 40, "changes": "", "python": "3.11.7", "torch": "2.13.0", "openvino": "2026.4.0"}
    theirs = {**mine, "commit": "b" * 40, "changes": "0123456789ab", "torch": "2.14.1", "openvino": None}
    assert differences(mine, mine) == []
    assert differences(mine, theirs) == [
        f"commit {'b' * 12}, here {'a' * 12}", "kit uncommitted changes 0123456789ab, here no uncommitted changes",
        "torch 2.14.1, here 2.13.0", "openvino not installed, here 2026.4.0",
    ]  # fmt: skip
    assert kit_fingerprint()["benchlib"] == benchlib.__version__ and kit_fingerprint()["python"] == platform.python_version()


def kit_at_another_commit(folder: Path) -> Path:
    """This kit's package in a git repository of its own: the same code at another commit."""
    shutil.copytree(PROJECT_ROOT / "benchlib", folder / "benchlib", ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-C", str(folder), "-c", "user.name=kit", "-c", "user.email=kit@localhost"]
    for command in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "another commit"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    return folder


@pytest.mark.e2e
@pytest.mark.full  # make test: each way a worker's kit differs is one line (above), and a run on the cluster (a worker lost)
def test_a_worker_with_another_kit_commit_gets_no_task_and_is_named(tmp_path: Path, cluster: Cluster) -> None:
    from distributed import Client

    cluster.top_up()
    kit = kit_at_another_commit(tmp_path / "kit")
    odd = cluster.processes.worker(cluster.address, "odd-worker", env={**os.environ, "PYTHONPATH": str(kit)})
    try:
        cluster.processes.wait_for(cluster.address, 3)
        with Client(cluster.address, timeout=30, security=client_security(cluster.certs)) as observer:
            pids = {pid: address for address, pid in observer.run(os.getpid).items()}
            [odd_address] = [pids[p.pid] for p in processes_of(odd) if p.pid in pids]
            odd_commit = observer.run(kit_fingerprint, workers=[odd_address])[odd_address]["commit"]
            jobs = plan_run(tmp_path / "direct", "smoke", ["cpu-pytorch"], [str(write_yaml(tmp_path / "tiny.yaml", TINY))])
            lines: list[str] = []
            with pytest.raises(ClusterError, match="^--cluster: the kit of every benchmark worker differs from this machine's \\(1 workers, above\\)"):
                ClusterRun(observer, jobs, lines.append, progress=False, max_restarts=0)._check_workers({odd_address: "127.0.0.1"})
            allowing = ClusterRun(observer, jobs, lines.append, progress=False, max_restarts=0, allow_mismatch=True)
            assert odd_address in allowing._check_workers({odd_address: "127.0.0.1"})
            recorded = allowing._cluster_record()["worker_differences"]
            assert list(recorded) == [odd_address] and recorded[odd_address][0] == f"commit {odd_commit[:12]}, here {kit_fingerprint()['commit'][:12]}"
        common = ["--grid", "smoke", "--environments", "cpu-pytorch", "--params", str(tmp_path / "tiny.yaml"), "--no-summary", "--no-limits"]
        remote = run_cli(*common, "--out", str(tmp_path / "run"), "--cluster", cluster.address, "--tls", str(cluster.certs))
    finally:
        stop(odd)
    assert remote.returncode == 0, remote.stdout + remote.stderr
    assert f"worker {odd_address} (127.0.0.1) differs from this machine: commit {odd_commit[:12]}, here " in remote.stdout
    assert "; it gets no task" in remote.stdout
    assert remote.stdout.count(": started on tls://") == 1 and f"started on {odd_address}" not in remote.stdout
    assert len(cells(tmp_path / "run" / "cpu-pytorch")) == 3
