"""A run spread over a Dask distributed cluster: one task per environment and round, one benchmark per machine at a time.

The client (`run_on_cluster`) submits every environment of `round_schedule` as a task that asks
for the worker resource `benchmark=1`; workers are started one per machine with
`dask worker ADDRESS --nworkers 1 --nthreads 1 --resources benchmark=1`. A worker
(`environment_task`) executes the benchmark notebook with papermill in a fresh kernel, as a
local run does (`launch.local.run_job`), into a scratch folder of its own. A thread tails
that folder's results.csv and sends every finished row to the client as an event the moment it
is written; the client appends it, once, to `<run>/<env>/results.csv` and keeps the rows it has in
a Dask Variable per environment. When a worker is lost, the scheduler starts its task again on
another worker (up to `distributed.scheduler.allowed-failures` times, then KilledWorker), which
starts from those rows and measures only the cells that have none. The executed notebook,
environment.json and kernel.log come back as the task's result. The machine limits are measured
once on each worker machine, before its environments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import platform
import queue
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distributed import Client, Future, LocalCluster, Variable, get_worker
from distributed.comm.addressing import parse_address, parse_host_port
from distributed.comm.registry import backends

from benchlib import status
from benchlib.config.jobs import EnvironmentJob, round_schedule, rounds_of
from benchlib.launch.execution import DEFAULT_MAX_RESTARTS, EnvironmentOutcome, run_job
from benchlib.launch.local import format_duration, measure_machine_limits
from benchlib.launch.polling import Poller
from benchlib.store.environment import merge_environment, write_json
from benchlib.store.layout import ENVIRONMENT_FILE, KERNEL_LOG, LIMITS_FILE, host_file, limits_notebook_device, results_path
from benchlib.store.limits import parse_limits, read_limits, write_limits
from benchlib.store.locking import FolderInUseError, environment_lock
from benchlib.store.recovery import set_aside_results
from benchlib.store.results import ReceivedRows, read_exactly, records_after, split_records

RESOURCE = "benchmark"
WORKER_COMMAND = "dask worker {address} --nworkers 1 --nthreads 1 --resources benchmark=1"
CONNECT_TIMEOUT_S = 10
TAIL_INTERVAL_S = 0.2


class ClusterError(RuntimeError):
    """The cluster cannot be used: a bad address, no scheduler answering, no benchmark worker. One line."""


# ---------------------------------------------------------------- connecting


def parse_cluster_address(address: str) -> str | int:
    """The scheduler's address (`tcp://HOST:PORT`), or N for `local:N`; ClusterError naming the problem otherwise."""
    if address.startswith("local:"):
        count = address.removeprefix("local:")
        if not count.isdigit() or int(count) < 1:
            raise ClusterError(f"--cluster: local:N takes a number of workers of 1 or more, not {address!r}")
        return int(count)
    try:
        scheme, location = parse_address(address, strict=False)
        host, _ = parse_host_port(location)
    except ValueError:
        host, scheme = "", ""
    if not host or scheme not in backends:
        raise ClusterError(f"--cluster: {address!r} is not a scheduler address (tcp://HOST:PORT) or local:N")
    return address


@contextlib.contextmanager
def connect(address: str) -> Iterator[Client]:
    """A client of the scheduler at `address`, or of a LocalCluster of N single-benchmark worker processes on 127.0.0.1 for `local:N`."""
    target = parse_cluster_address(address)
    if isinstance(target, int):
        with (
            LocalCluster(n_workers=target, threads_per_worker=1, processes=True, resources={RESOURCE: 1}, host="127.0.0.1", dashboard_address=None) as cluster,
            Client(cluster) as client,
        ):  # fmt: skip
            yield client
        return
    try:
        client = Client(target, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(f"--cluster: no Dask scheduler answered at {target} within {CONNECT_TIMEOUT_S} s ({status.describe(exc)})") from None
    with client:
        yield client


def benchmark_workers(client: Client) -> dict[str, str]:
    """The address and host of every worker that offers the `benchmark` resource; ClusterError when there is none."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    found = {address: info["host"] for address, info in workers.items() if info.get("resources", {}).get(RESOURCE, 0) >= 1}
    if not found:
        address = client.scheduler.address
        raise ClusterError(f"--cluster: the scheduler at {address} has no worker with the resource {RESOURCE}=1; start one per machine: {WORKER_COMMAND.format(address=address)}")
    return found


# ---------------------------------------------------------------- on a worker


def relocated(job: EnvironmentJob, folder: Path) -> EnvironmentJob:
    """`job` writing into `<folder>/<environment>` instead of the client's run folder."""
    return dataclasses.replace(job, params=job.params.model_copy(update={"output_dir": str(folder / job.name)}))


class RowsTail:
    """Sends, as they are written, the complete records appended to a results.csv after `offset` bytes (polled in a thread)."""

    def __init__(self, path: Path, offset: int, send: Callable[[list[str]], None], interval_s: float = TAIL_INTERVAL_S) -> None:
        self._path, self._offset, self._send = path, offset, send
        self._poller = Poller(self._read, interval_s)

    def _read(self) -> None:
        records, self._offset = records_after(self._path, self._offset)
        if records:
            self._send(records)

    def __enter__(self) -> RowsTail:
        self._poller.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._poller.__exit__(*exc)


def _announcer(topic: str, **about: Any) -> Callable[..., None]:
    """A function that sends an event (`kind` and fields, with `about`, this worker and its host) to the client."""
    worker = get_worker()
    origin = {**about, "worker": worker.address, "host": platform.node()}
    return lambda kind, **fields: worker.log_event(topic, {**origin, "kind": kind, **fields})


@contextlib.contextmanager
def _scratch(prefix: str) -> Iterator[Path]:
    """A fresh folder in this worker's local directory, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=get_worker().local_directory))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _files(folder: Path, names: Sequence[str]) -> dict[str, bytes]:
    """The contents of those of `names` that exist in `folder`."""
    return {name: (folder / name).read_bytes() for name in names if (folder / name).is_file()}


def environment_task(job: EnvironmentJob, topic: str, rows_variable: str, max_restarts: int) -> dict[str, Any]:
    """On a worker: one environment and round, in a fresh kernel, in a scratch folder that starts from the client's rows
    (the Dask Variable `rows_variable`); every finished row is sent as it is written (events of `topic`).

    Returns how it ended, the folder's results.csv and its executed notebook, environment.json and kernel.log."""
    announce = _announcer(topic, environment=job.name, round=job.params.current_round)
    seed = Variable(rows_variable).get(timeout=60)
    with _scratch(f"benchlib-{job.name}-") as folder:
        local = relocated(job, folder)
        results = results_path(local.output_dir)
        local.output_dir.mkdir(parents=True)
        if seed:
            results.write_text(seed, encoding="utf-8", newline="")
        announce("start")
        with RowsTail(results, len(seed.encode("utf-8")), lambda records: announce("rows", records=records)):
            outcome = run_job(local, progress=False, max_restarts=max_restarts, report=lambda line: announce("report", line=line))
        return {
            "succeeded": outcome.succeeded, "error": outcome.error, "elapsed_s": outcome.elapsed_s,
            "results": read_exactly(results) if results.exists() else "",
            "files": _files(local.output_dir, [local.executed_notebook.name, ENVIRONMENT_FILE, KERNEL_LOG]),
        }  # fmt: skip


def measure_limits_task(jobs: Sequence[EnvironmentJob], topic: str) -> dict[str, bytes]:
    """On a worker: the machine limits of its machine for the devices of `jobs` (`launch.local.measure_machine_limits`);
    returns machine_limits.json, the executed notebooks and kernel.log."""
    announce = _announcer(topic, environment="machine limits", round=0)
    with _scratch("benchlib-limits-") as folder:
        measure_machine_limits([relocated(job, folder) for job in jobs], report=lambda line: announce("report", line=line))
        return _files(folder, sorted(path.name for path in folder.iterdir() if path.is_file()))


# ---------------------------------------------------------------- on the client


@dataclass
class _Task:
    """One environment and round on the cluster, as the client follows it."""

    job: EnvironmentJob
    index: int  # in `round_schedule`
    step: str  # "[2/8] round 1 of 2:"
    rounds: int
    rows: ReceivedRows
    variable: Variable
    future: Future | None = None
    worker: str = ""
    started: float | None = None

    @property
    def name(self) -> str:
        return _outcome_name(self.job, self.rounds)


def _outcome_name(job: EnvironmentJob, rounds: int) -> str:
    """An environment's name in the outcomes, with its round when the run has several."""
    return job.name if rounds == 1 else f"{job.name} (round {job.params.current_round})"


class ClusterRun:
    """The client's side of a run on a cluster: submits the tasks, writes what comes back, reports progress."""

    def __init__(self, client: Client, jobs: Sequence[EnvironmentJob], report: Callable[[str], None], progress: bool, max_restarts: int) -> None:
        self.client, self.jobs, self.report, self.progress, self.max_restarts = client, list(jobs), report, progress, max_restarts
        self.token = uuid.uuid4().hex[:10]
        self.topic = f"benchlib-{self.token}"
        self.events: queue.Queue[Any] = queue.Queue()
        self.run_dir = self.jobs[0].output_dir.parent
        self._watched, self._alone = time.monotonic(), False

    def run(self, force: bool, limits: bool) -> list[EnvironmentOutcome]:
        """Every environment and round of the jobs, each a task; the outcomes in `round_schedule` order."""
        workers = benchmark_workers(self.client)
        self.client.subscribe_topic(self.topic, self.events.put)
        with contextlib.ExitStack() as held:
            outcomes, tasks = self._prepare(held, force)
            try:
                limit_futures = self._submit_limits(workers, len(tasks) + 1) if limits else {}
                for priority, task in zip(range(len(tasks), 0, -1), tasks):  # in order: the first to come runs before those queued
                    task.future = self.client.submit(
                        environment_task, task.job, self.topic, task.variable.name, self.max_restarts,
                        key=f"benchlib-{task.job.name}-round{task.job.params.current_round}-{self.token}",
                        resources={RESOURCE: 1}, priority=priority, pure=False,
                    )  # fmt: skip
                    task.future.add_done_callback(self.events.put)
                outcomes.update(self._follow(tasks, limit_futures))
            finally:
                self.client.unsubscribe_topic(self.topic)
                self.client.cancel([task.future for task in tasks if task.future])
                for task in tasks:
                    task.variable.delete()
        return [outcomes[key] for key in sorted(outcomes)]

    def _prepare(self, held: contextlib.ExitStack, force: bool) -> tuple[dict[int, EnvironmentOutcome], list[_Task]]:
        """The tasks of every environment and round; an environment whose folder cannot be opened fails at once."""
        schedule, rounds = round_schedule(self.jobs), rounds_of(self.jobs)
        outcomes: dict[int, EnvironmentOutcome] = {}
        opened: dict[str, tuple[ReceivedRows, Variable] | str] = {}
        tasks = []
        for index, job in enumerate(schedule, start=1):
            p = job.params
            step = f"[{index}/{len(schedule)}]" + (f" round {p.current_round} of {rounds}:" if rounds > 1 else "")
            if job.name not in opened:
                try:
                    opened[job.name] = self._open(held, job, force)
                except (OSError, ValueError, FolderInUseError) as exc:
                    opened[job.name] = str(exc)
            if isinstance(problem := opened[job.name], str):
                self.report(f"{step} {job.name}: FAILED: {problem}")
                outcomes[index] = EnvironmentOutcome(_outcome_name(job, rounds), False, 0.0, problem)
                continue
            self.report(f"{step} {job.name}: {job.describe()}: queued")
            tasks.append(_Task(job, index, step, rounds, *problem))
        return outcomes, tasks

    def _open(self, held: contextlib.ExitStack, job: EnvironmentJob, force: bool) -> tuple[ReceivedRows, Variable]:
        """Hold the environment's folder for this run (force: set its results aside first) and share its rows with the workers."""
        held.enter_context(environment_lock(job.output_dir))
        if force and (aside := set_aside_results(job.output_dir)):
            self.report(f"{job.name}: earlier results set aside as {aside}")
        rows = ReceivedRows(job.output_dir)
        variable = Variable(f"{self.topic}-{job.name}", client=self.client)
        variable.set(rows.text())
        return rows, variable

    def _submit_limits(self, workers: dict[str, str], priority: int) -> dict[Future, str]:
        """One machine-limits task on the first benchmark worker of each host, before its environments; none when measured already."""
        devices = {job.params.device for job in self.jobs}
        if all(read_limits(self.run_dir, device) for device in devices):
            self.report(f"machine limits: not measured again, {self.run_dir / LIMITS_FILE} has them")
            return {}
        first = {host: address for address, host in reversed(workers.items())}
        futures = {}
        for host, address in first.items():
            future = self.client.submit(
                measure_limits_task, self.jobs, self.topic, key=f"benchlib-machine-limits-{host}-{self.token}",
                workers=[address], allow_other_workers=False, resources={RESOURCE: 1}, priority=priority, pure=False,
            )  # fmt: skip
            future.add_done_callback(self.events.put)
            futures[future] = address
        return futures

    def _follow(self, tasks: list[_Task], limits: dict[Future, str]) -> dict[int, EnvironmentOutcome]:
        """Handle events and finished tasks until every environment's task has ended, and every machine-limits task
        whose worker is still there."""
        by_environment = {(task.job.name, task.job.params.current_round): task for task in tasks}
        by_future = {task.future: task for task in tasks}
        outcomes: dict[int, EnvironmentOutcome] = {}
        while len(outcomes) < len(tasks) or self._limits_to_wait_for(limits):
            try:
                item = self.events.get(timeout=1)
            except queue.Empty:
                self._watch_workers()
                continue
            if isinstance(item, Future) and item in by_future:
                task = by_future[item]
                outcomes[task.index] = self._finished(task)
            elif isinstance(item, Future) and item in limits:
                self._limits_finished(item, limits.pop(item))
            elif not isinstance(item, Future):
                self._event(item[1], by_environment)
        return outcomes

    def _limits_to_wait_for(self, limits: dict[Future, str]) -> bool:
        """Whether a machine-limits task is still to end on a connected worker; those whose worker was lost are dropped."""
        connected = self.client.scheduler_info(n_workers=-1)["workers"]
        for future, address in list(limits.items()):
            if address not in connected and not future.done():
                future.cancel()
                del limits[future]
                self.report(f"machine limits on {address}: not measured (its worker was lost)")
        return bool(limits)

    def _watch_workers(self, every_s: float = 30) -> None:
        """Say when no benchmark worker is left (the tasks then wait for one to join), and when one is back."""
        if time.monotonic() - self._watched < every_s:
            return
        self._watched = time.monotonic()
        try:
            benchmark_workers(self.client)
            alone = False
        except ClusterError:
            alone = True
        if alone != self._alone:
            self._alone = alone
            self.report(
                f"no worker with the resource {RESOURCE}=1 is connected: the environments wait for one to join" if alone else f"a worker with the resource {RESOURCE}=1 is back"
            )

    def _event(self, msg: dict[str, Any], tasks: dict[tuple[str, int], _Task]) -> None:
        """A worker's message: a task started, rows written, or a line to report."""
        task = tasks.get((msg["environment"], msg["round"]))
        where = f"{msg['worker']} ({msg['host']})"
        if task is None:
            self.report(f"{where}: {msg.get('line', msg['kind'])}")
            return
        if msg["kind"] == "start":
            again = f" again on {where}: {task.worker} was lost" if task.worker else f" on {where}"
            task.worker, task.started = msg["worker"], task.started or time.perf_counter()
            have = task.rows.cells(task.job.params.current_round)
            self.report(f"{task.step} {task.job.name}: started{again}" + (f"; {have} of {task.job.cell_count} cells already have a row" if have else ""))
        elif msg["kind"] == "rows":
            self._rows(task, msg["records"])
        else:
            self.report(f"{task.step} {task.job.name} on {msg['worker']}: {msg['line']}")

    def _rows(self, task: _Task, records: Sequence[str]) -> None:
        """Append a worker's rows once, let a restarted task start from them, and show the progress."""
        added = task.rows.add(records)
        if not added:
            return
        task.variable.set(task.rows.text())
        if self.progress:
            done = task.rows.cells(task.job.params.current_round)
            for row in added:
                attempt = f", attempt {row['attempt']}" if row["attempt"] not in ("", "1") else ""
                self.report(
                    f"{task.step} {task.job.name}: {done} of {task.job.cell_count} cells on {task.worker} "
                    f"({row['model']} {row['batch_size']}x{row['sequence_length']} {row['status']}{attempt})"
                )

    def _finished(self, task: _Task) -> EnvironmentOutcome:
        """The outcome of a task that ended: its last rows, notebook, environment.json and kernel.log written beside the others."""
        step, job = task.step, task.job
        elapsed = time.perf_counter() - task.started if task.started else 0.0
        if task.future.status != "finished":
            error = status.describe(task.future.exception()) if task.future.status == "error" else "cancelled"
            self.report(f"{step} {job.name}: FAILED after {format_duration(elapsed)}: {error}")
            return EnvironmentOutcome(task.name, False, elapsed, error)
        result = task.future.result()
        self._rows(task, split_records(result["results"])[0])
        files = dict(result["files"])
        if environment := files.pop(ENVIRONMENT_FILE, None):
            merge_environment(job.output_dir, environment)
        with open(job.output_dir / KERNEL_LOG, "ab") as log:
            log.write(files.pop(KERNEL_LOG, b""))
        for name, data in files.items():
            (job.output_dir / name).write_bytes(data)
        if not result["succeeded"]:
            self.report(f"{step} {job.name}: FAILED after {format_duration(elapsed)} on {task.worker}: {result['error']} (record: {job.executed_notebook})")
            return EnvironmentOutcome(task.name, False, elapsed, result["error"])
        rows = task.rows.cells(job.params.current_round)
        self.report(f"{step} {job.name}: done in {format_duration(elapsed)} on {task.worker}, {rows} cells in {task.rows.path}")
        return EnvironmentOutcome(task.name, True, elapsed)

    def _limits_finished(self, future: Future, address: str) -> None:
        """Write one machine's limits: where a local run puts them for the first machine, named by host for the others."""
        if future.status != "finished":
            self.report(f"machine limits on {address}: not measured ({status.describe(future.exception()) if future.status == 'error' else 'cancelled'})")
            return
        files = dict(future.result())
        with open(self.run_dir / KERNEL_LOG, "ab") as log:
            log.write(files.pop(KERNEL_LOG, b""))
        measured = parse_limits(files.pop(LIMITS_FILE, b"{}"))
        host = parse_host_port(parse_address(address)[1])[0]
        first = {device for device in measured if not read_limits(self.run_dir, device)}
        for device in first:
            write_limits(self.run_dir, measured[device])
        if others := {device: limits for device, limits in measured.items() if device not in first}:
            write_json(host_file(self.run_dir / LIMITS_FILE, host), others)
        for name, data in files.items():
            path = self.run_dir / name
            (path if limits_notebook_device(name) in first else host_file(path, host)).write_bytes(data)


def run_on_cluster(
    address: str, jobs: Sequence[EnvironmentJob], *, limits: bool = True, progress: bool = True,
    report: Callable[[str], None] = print, max_restarts: int = DEFAULT_MAX_RESTARTS, force: bool = False,
) -> list[EnvironmentOutcome]:  # fmt: skip
    """Run `jobs` (every round) on the Dask cluster at `address` (or `local:N`), one environment per benchmark worker at a time.

    Rows land in `<run>/<env>/results.csv` as the workers write them; a task whose worker is lost runs
    again elsewhere from the rows already received. ClusterError (one line) before anything runs when
    the cluster cannot be used."""
    with connect(address) as client:
        return ClusterRun(client, jobs, report, progress, max_restarts).run(force, limits)
