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
once on each worker machine, before its environments. Before the first task the client compares each
worker's kit with its own (`worker_check`): a worker that differs gets no task. A scheduler lost
mid-run stops the run with one line; a rerun measures what is missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
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
from distributed.comm.core import CommClosedError

from benchlib import status
from benchlib.config.jobs import EnvironmentJob, round_schedule, rounds_of
from benchlib.launch import connection
from benchlib.launch.certificates import client_security, local_security
from benchlib.launch.connection import ClusterError, ClusterTarget, probe_scheduler
from benchlib.launch.execution import DEFAULT_MAX_RESTARTS, EnvironmentOutcome, run_job
from benchlib.launch.local import format_duration, measure_machine_limits
from benchlib.launch.polling import Poller
from benchlib.launch.worker_check import differences, kit_fingerprint
from benchlib.measure.sweep import nothing_to_measure
from benchlib.store.disk import DiskFullError, disk_full, raise_if_disk_full
from benchlib.store.environment import merge_environment, write_json
from benchlib.store.layout import ENVIRONMENT_FILE, KERNEL_LOG, LIMITS_FILE, host_file, limits_notebook_device, results_path
from benchlib.store.limits import parse_limits, read_limits, write_limits
from benchlib.store.locking import FolderInUseError, environment_lock
from benchlib.store.recovery import set_aside_results
from benchlib.store.results import ReceivedRows, read_exactly, records_after, split_records

RESOURCE = "benchmark"
WORKER_COMMAND = "dask worker {address} --nworkers 1 --nthreads 1 --resources benchmark=1"
DEFAULT_SCHEDULER_WAIT_S = 60
TAIL_INTERVAL_S = 0.2


class SchedulerLostError(ClusterError):
    """The scheduler went away mid-run and did not come back within the wait allowed. One line."""


@contextlib.contextmanager
def connect(target: ClusterTarget, scheduler_wait_s: float = DEFAULT_SCHEDULER_WAIT_S) -> Iterator[Client]:
    """A client of the scheduler at `target` (probed first: `connection.probe_scheduler`), or of a LocalCluster of N
    single-benchmark worker processes on 127.0.0.1 for `local:N`, TLS unless `--insecure`. A lost scheduler is waited
    for `scheduler_wait_s` before the client gives up. Dask's own log stays quiet: the run says what happens, in one line."""
    with _quiet_dask(), _client(target, scheduler_wait_s) as client:
        yield client


@contextlib.contextmanager
def _quiet_dask() -> Iterator[None]:
    """Dask's loggers in this process at CRITICAL for the duration (a lost scheduler would log tracebacks)."""
    names = ["distributed", *(name for name in logging.root.manager.loggerDict if name.startswith("distributed."))]
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


@contextlib.contextmanager
def _client(target: ClusterTarget, scheduler_wait_s: float) -> Iterator[Client]:
    """The client of `connect`."""
    if target.local:
        security = None if target.insecure else local_security(target.tls)
        with (
            LocalCluster(
                n_workers=target.local, threads_per_worker=1, processes=True, resources={RESOURCE: 1}, host="127.0.0.1",
                dashboard_address=None, protocol="tcp://" if security is None else "tls://", security=security,
            ) as cluster,
            Client(cluster, security=security) as client,
        ):  # fmt: skip
            yield client
        return
    probe_scheduler(target, connection.CONNECT_TIMEOUT_S)
    security = client_security(target.tls) if target.tls else None
    try:
        client = Client(target.address, timeout=max(connection.CONNECT_TIMEOUT_S, scheduler_wait_s), security=security)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(f"--cluster: no Dask scheduler answered at {target.address} within {connection.CONNECT_TIMEOUT_S} s ({status.describe(exc)})") from None
    with client:
        yield client


def benchmark_workers(client: Client) -> dict[str, str]:
    """The address and host of every worker that offers the `benchmark` resource; ClusterError when there is none."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    found = {address: info["host"] for address, info in workers.items() if info.get("resources", {}).get(RESOURCE, 0) >= 1}
    if not found:
        address = client.scheduler.address
        tls = " --tls-ca-file DIR/ca.pem --tls-cert DIR/worker.pem --tls-key DIR/worker.key" if address.startswith("tls://") else ""
        raise ClusterError(f"--cluster: the scheduler at {address} has no worker with the resource {RESOURCE}=1; start one per machine: {WORKER_COMMAND.format(address=address)}{tls}")
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


def _offer_waiting_tasks(dask_worker: Any) -> None:
    """On a worker just admitted to a run: tell the scheduler it is ready again, as a worker does when it resumes from a
    pause, so that the tasks that waited for a worker it may now take are offered to it."""
    from distributed.core import Status

    dask_worker.status = Status.paused
    dask_worker.status = Status.running


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
    """The client's side of a run on a cluster: checks the workers' kits, submits the tasks, writes what comes back,
    reports progress, and stops when the scheduler is lost."""

    def __init__(
        self, client: Client, jobs: Sequence[EnvironmentJob], report: Callable[[str], None], progress: bool, max_restarts: int,
        target: ClusterTarget | None = None, allow_mismatch: bool = False, scheduler_wait_s: float = DEFAULT_SCHEDULER_WAIT_S,
    ) -> None:  # fmt: skip
        self.client, self.jobs, self.report, self.progress, self.max_restarts = client, list(jobs), report, progress, max_restarts
        scheduler = getattr(client, "scheduler", None)
        self.address = scheduler.address if scheduler else "the scheduler's address"  # named still once Dask has dropped it
        self.target, self.allow_mismatch, self.scheduler_wait_s = target, allow_mismatch, scheduler_wait_s
        self.token = uuid.uuid4().hex[:10]
        self.topic = f"benchlib-{self.token}"
        self.events: queue.Queue[Any] = queue.Queue()
        self.run_dir = self.jobs[0].output_dir.parent
        self._watched, self._alone = time.monotonic(), False
        self.mine: dict[str, Any] = {}
        self.checked: set[str] = set()
        self.same: set[str] = set()  # the workers whose kit is this machine's
        self.restricted = False  # the tasks may run on those only (a worker differed)
        self.mismatches: dict[str, list[str]] = {}  # recorded with --allow-mismatch

    def run(self, force: bool, limits: bool) -> list[EnvironmentOutcome]:
        """Every environment and round of the jobs, each a task; the outcomes in `round_schedule` order."""
        workers = self._check_workers(benchmark_workers(self.client))
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
                        workers=sorted(self.same) if self.restricted else None, allow_other_workers=False,
                    )  # fmt: skip
                    task.future.add_done_callback(self.events.put)
                outcomes.update(self._follow(tasks, limit_futures))
            finally:
                self.client.unsubscribe_topic(self.topic)
                self.client.cancel([task.future for task in tasks if task.future])
                for task in tasks:
                    task.variable.delete()
        return [outcomes[key] for key in sorted(outcomes)]

    def _check_workers(self, workers: dict[str, str]) -> dict[str, str]:
        """The benchmark workers whose kit (version, commit, changes, Python, packages) is this machine's; one line per
        difference of each other worker, which then gets no task (with --allow-mismatch: every worker, the differences
        recorded). ClusterError when no worker is left."""
        self.mine = self.mine or kit_fingerprint()
        found = self.client.run(kit_fingerprint, workers=list(workers), on_error="return")
        self.checked |= set(workers)
        differing = {
            address: [f"its kit could not be read ({status.describe(theirs)})"] if isinstance(theirs, BaseException) else differences(self.mine, theirs)
            for address, theirs in found.items()
        }  # fmt: skip
        differing = {address: lines for address, lines in differing.items() if lines}
        consequence = f"recorded in each {ENVIRONMENT_FILE} (--allow-mismatch)" if self.allow_mismatch else "it gets no task"
        for address, lines in differing.items():
            for line in lines:
                self.report(f"worker {address} ({workers[address]}) differs from this machine: {line}; {consequence}")
        if self.allow_mismatch:
            self.mismatches.update(differing)
            return workers
        same = {address: host for address, host in workers.items() if address not in differing}
        if not same and not self.same:
            raise ClusterError(
                f"--cluster: the kit of every benchmark worker differs from this machine's ({len(differing)} workers, above): "
                "install the same commit and packages there, or run with --allow-mismatch"
            )
        self.same |= set(same)
        self.restricted = self.restricted or bool(differing)
        return same

    def _admit_newcomers(self, tasks: Sequence[_Task]) -> None:
        """Check the benchmark workers that joined since the start. Once one has differed, the tasks left may run only
        on the workers with this machine's kit: those that join later too, offered the tasks that waited for one."""
        if self.allow_mismatch:
            return
        with contextlib.suppress(ClusterError):
            new = {address: host for address, host in benchmark_workers(self.client).items() if address not in self.checked}
            if not new:
                return
            same = self._check_workers(new)
            if self.restricted:
                waiting = {task.future.key: sorted(self.same) for task in tasks if task.future and not task.future.done()}
                self.client.sync(self.client.scheduler.set_restrictions, worker=waiting)
                if same:
                    self.client.run(_offer_waiting_tasks, workers=list(same))

    def _prepare(self, held: contextlib.ExitStack, force: bool) -> tuple[dict[int, EnvironmentOutcome], list[_Task]]:
        """The tasks of every environment and round; an environment whose folder cannot be opened fails at once, and one
        whose round's record is here with every row (`sweep.nothing_to_measure`) gets no task."""
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
            if not force and job.executed_notebook.exists() and nothing_to_measure(p):  # as a local run: no kernel for it
                self.report(f"{step} {job.name}: every cell of round {p.current_round} has its row: nothing to measure, no task")
                outcomes[index] = EnvironmentOutcome(_outcome_name(job, rounds), True, 0.0)
                continue
            self.report(f"{step} {job.name}: {job.describe()}: queued")
            tasks.append(_Task(job, index, step, rounds, *problem))
        for name, entry in opened.items():  # an environment all of whose rounds got no task: no worker reads its rows
            if not isinstance(entry, str) and all(task.job.name != name for task in tasks):
                entry[1].delete()
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
                self._watch_workers(tasks)
                continue
            if isinstance(item, Future) and item.status == "cancelled" and self.client.status != "running":
                self._scheduler_lost()
            if isinstance(item, Future) and item in by_future:
                task = by_future[item]
                outcomes[task.index] = self._finished(task)
            elif isinstance(item, Future) and item in limits:
                self._limits_finished(item, limits.pop(item))
            elif not isinstance(item, Future):
                self._event(item[1], by_environment)
        return outcomes

    def _scheduler_lost(self) -> None:
        """The connection to the scheduler dropped, and with it every task of the run (Dask cancels them): wait, at
        most the scheduler wait, for Dask's client to reconnect or give up, then stop the run with one line."""
        deadline = time.monotonic() + self.scheduler_wait_s
        while self.client.status == "connecting" and time.monotonic() < deadline:
            time.sleep(0.2)
        address = self.client.scheduler.address if self.client.scheduler else self.address
        back = "it answers again, but the run's tasks went with the connection" if self.client.status == "running" else f"it did not come back within {self.scheduler_wait_s:g} s"
        raise SchedulerLostError(
            f"--cluster: the scheduler at {address} was lost mid-run ({back}): the rows received are in {self.run_dir}; "
            "rerun with the same --out against a scheduler to measure only what is missing"
        )

    def _limits_to_wait_for(self, limits: dict[Future, str]) -> bool:
        """Whether a machine-limits task is still to end on a connected worker; those whose worker was lost are dropped."""
        if self.client.status != "running":
            self._scheduler_lost()
        connected = self.client.scheduler_info(n_workers=-1)["workers"]
        for future, address in list(limits.items()):
            if address not in connected and not future.done():
                future.cancel()
                del limits[future]
                self.report(f"machine limits on {address}: not measured (its worker was lost)")
        return bool(limits)

    def _watch_workers(self, tasks: Sequence[_Task], every_s: float = 30) -> None:
        """Stop when the scheduler is lost; check the workers that joined; say when no benchmark worker with this
        machine's kit is left (the tasks then wait for one to join), and when one is back."""
        if self.client.status != "running":
            self._scheduler_lost()
        self._admit_newcomers(tasks)
        if time.monotonic() - self._watched < every_s:
            return
        self._watched = time.monotonic()
        try:
            connected = benchmark_workers(self.client)
            alone = self.restricted and not self.same & set(connected)
        except ClusterError:
            alone = True
        if alone != self._alone:
            self._alone = alone
            self.report(
                f"no worker with the resource {RESOURCE}=1 and this machine's kit is connected: the environments wait for one to join"
                if alone else f"a worker with the resource {RESOURCE}=1 is back"
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
        try:
            task.variable.set(task.rows.text())
        except (CommClosedError, OSError):  # the scheduler went away as the rows came: they are on disk; stop in one line
            deadline = time.monotonic() + self.scheduler_wait_s
            while self.client.status == "running" and time.monotonic() < deadline:  # until Dask's client sees it too
                time.sleep(0.1)
            self._scheduler_lost()
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
            failure = task.future.exception() if task.future.status == "error" else None
            if failure is not None and (full := disk_full(failure, job.output_dir)):  # the worker's disk: its next task would meet it too
                raise DiskFullError(f"{full} (on the worker {task.worker})")
            error = status.describe(failure) if failure is not None else "cancelled"
            self.report(f"{step} {job.name}: FAILED after {format_duration(elapsed)}: {error}")
            return EnvironmentOutcome(task.name, False, elapsed, error)
        result = task.future.result()
        self._rows(task, split_records(result["results"])[0])
        files = dict(result["files"])
        try:
            if environment := files.pop(ENVIRONMENT_FILE, None):
                merge_environment(job.output_dir, environment, self._cluster_record())
            with open(job.output_dir / KERNEL_LOG, "ab") as log:
                log.write(files.pop(KERNEL_LOG, b""))
            for name, data in files.items():
                (job.output_dir / name).write_bytes(data)
        except OSError as exc:  # this machine's disk: the rows are in, the environment's files are not
            raise_if_disk_full(exc, job.output_dir)
            raise
        if not result["succeeded"]:
            self.report(f"{step} {job.name}: FAILED after {format_duration(elapsed)} on {task.worker}: {result['error']} (record: {job.executed_notebook})")
            return EnvironmentOutcome(task.name, False, elapsed, result["error"])
        rows = task.rows.cells(job.params.current_round)
        self.report(f"{step} {job.name}: done in {format_duration(elapsed)} on {task.worker}, {rows} cells in {task.rows.path}")
        return EnvironmentOutcome(task.name, True, elapsed)

    def _cluster_record(self) -> dict[str, Any]:
        """What environment.json records of the cluster: how the run reached it and, with --allow-mismatch, how the
        workers' kits differed from this machine's."""
        record = self.target.record() if self.target else {}
        return {**record, **({"worker_differences": self.mismatches} if self.mismatches else {})}

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
    target: ClusterTarget, jobs: Sequence[EnvironmentJob], *, limits: bool = True, progress: bool = True,
    report: Callable[[str], None] = print, max_restarts: int = DEFAULT_MAX_RESTARTS, force: bool = False,
    allow_mismatch: bool = False, scheduler_wait_s: float = DEFAULT_SCHEDULER_WAIT_S,
) -> list[EnvironmentOutcome]:  # fmt: skip
    """Run `jobs` (every round) on the Dask cluster of `target` (`connection.plan_target`), one environment per benchmark
    worker at a time, on the workers whose kit is this machine's (every worker with `allow_mismatch`).

    Rows land in `<run>/<env>/results.csv` as the workers write them; a task whose worker is lost runs
    again elsewhere from the rows already received. ClusterError (one line) before anything runs when
    the cluster cannot be used; SchedulerLostError when its scheduler is lost mid-run."""
    with connect(target, scheduler_wait_s) as client:
        run = ClusterRun(client, jobs, report, progress, max_restarts, target, allow_mismatch, scheduler_wait_s)
        return run.run(force, limits)
