"""Real Dask processes for the cluster tests: `dask scheduler` and `dask worker` on 127.0.0.1 only, on free ports, with
the certificates of `benchlib cluster certs` (or none, for plain text on loopback), each stopped by the test that started it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib.launch.certificates import client_security

DASK = Path(sys.executable).with_name("dask")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop(process: subprocess.Popen) -> None:
    """Kill a process started in its own session, and every process of that session."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


def tls_options(certs: Path, role: str) -> list[str]:
    """The options that start `dask scheduler` or `dask worker` with a role's files from `cluster certs`."""
    return ["--tls-ca-file", str(certs / "ca.pem"), "--tls-cert", str(certs / f"{role}.pem"), "--tls-key", str(certs / f"{role}.key")]


class DaskProcesses:
    """`dask scheduler` and `dask worker` processes on 127.0.0.1, each in a session of its own, logged to `logs`."""

    def __init__(self, logs: Path, certs: Path | None) -> None:
        self.logs, self.certs, self.started = logs, certs, []

    def start(self, *args: str, log: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        with open(self.logs / log, "wb") as output:
            process = subprocess.Popen([str(DASK), *args], stdout=output, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self.started.append(process)
        return process

    def scheduler(self, log: str = "scheduler.log") -> str:
        """Start a scheduler (TLS with the certificates, else plain tcp) on a port it binds itself (a port probed free
        beforehand can be taken by another test's process before the scheduler binds it); its address, once it listens."""
        found = self.logs / f"{Path(log).stem}.json"
        found.unlink(missing_ok=True)
        process = self.start(
            "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(found),
            *(tls_options(self.certs, "scheduler") if self.certs else []), log=log,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while not found.is_file() or not found.read_text(encoding="utf-8").strip():  # written once it listens
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dask scheduler did not start: {(self.logs / log).read_text(encoding='utf-8')[-2000:]}")
            time.sleep(0.1)
        return str(json.loads(found.read_text(encoding="utf-8"))["address"])

    def worker(self, address: str, name: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start one benchmark worker of the scheduler at `address`, its local directory `<logs>/<name>`."""
        return self.start(
            "worker", address, "--nworkers", "1", "--nthreads", "1", "--resources", "benchmark=1", "--host", "127.0.0.1", "--no-dashboard",
            "--local-directory", str(self.logs / name), *(tls_options(self.certs, "worker") if self.certs else []), log=f"{name}.log", env=env,
        )  # fmt: skip

    def wait_for(self, address: str, workers: int) -> None:
        from distributed import Client

        """Wait until the scheduler at `address` answers and has `workers` workers."""
        with Client(address, timeout=60, security=client_security(self.certs) if self.certs else None) as client:
            if workers:
                client.wait_for_workers(workers, timeout=120)

    def stop_all(self) -> None:
        for process in self.started:
            stop(process)


@dataclass
class Cluster:
    """A TLS scheduler on 127.0.0.1, its certificates and its benchmark workers (two at the start)."""

    address: str
    certs: Path
    workers: list[subprocess.Popen]
    processes: DaskProcesses

    def top_up(self) -> None:
        """Start workers until two are running (a test may have killed one)."""
        self.workers = [worker for worker in self.workers if worker.poll() is None]
        while len(self.workers) < 2:
            self.workers.append(self.processes.worker(self.address, f"worker{len(self.processes.started)}"))
        self.processes.wait_for(self.address, 2)
