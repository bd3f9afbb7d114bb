"""Shared fixtures (the kit's command line, one smoke run of every CPU environment per test session) and how the suite
runs on pytest-xdist workers (`make test`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from benchlib.backends.pytorch import use_torch
from benchlib.config.jobs import available
from benchlib.paths import PARAMETERS_DIR, PROJECT_ROOT
from benchlib.store.cache import CACHE_VARIABLE
from tests import timings

use_torch()  # this process runs PyTorch only: transformers must not import TensorFlow here (TensorFlow runs in subprocesses)

# The smoke run's catalogue models in `make test`: one of each kind the backends treat apart. A decoder with a key/value
# cache (GPT-2: TorchScript traces it without the cache) and its distilled student (the summary's distilled-vs-teacher
# table), a decoder past its positions at the smoke grid's 300 tokens (CTRL: too_long; unsupported in torch.compile) and one
# that only TensorFlow builds (Transformer-XL). The encoder is the user's BERT folder (`user_models`: its own weights and
# tokenizer, in TensorFlow from its PyTorch weights). `--full` runs every catalogue model.
SMOKE_MODELS_DEFAULT = ["gpt2", "distilgpt2", "ctrl", "transfo-xl-wt103"]
# The CPU environments that only `--full` gives the smoke run: variations of a runtime whose guarantee `make test` checks
# elsewhere, for less than a kernel of their own each (8 to 20 s here, about twice that on the slowest type; torch.compile's
# about 50 s, its builds). Each one's forward pass agrees with eager PyTorch on GPT-2 in the pytest process
# (tests/backends/test_backends.py: torch.compile, PyTorch's and OpenVINO's bfloat16, ONNX Runtime's and OpenVINO's
# int8), and its runtime's kernel starts in a run of `make test`: torch.compile's and PyTorch bfloat16's in the generate
# run (the user's Llama folder compiled), ONNX Runtime int8's in tests/analysis/test_cost.py's runs, OpenVINO's in the
# smoke run. Eager attention is cpu-pytorch's kernel with one option: measured beside sdpa in
# tests/backends/test_backends.py, and in tests/measure/test_memory.py's peak-memory comparison.
SMOKE_FULL_ONLY = (
    "cpu-torch-compile", "cpu-pytorch-bf16", "cpu-onnxruntime-int8", "cpu-openvino-bf16", "cpu-openvino-int8", "cpu-pytorch-eager-attention",
)  # fmt: skip


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full", action="store_true",
        help="the exhaustive tier too (`make test-full`): tests marked `full`, and the smoke run over every catalogue model",
    )  # fmt: skip
    parser.addoption(
        "--test-times", metavar="FILE", default=None,
        help="write every test's and fixture's time, its worker and the machine to FILE (JSON; `make test` does, in .test-times/; "
        "`benchmarks/suite_time.py report` reads it)",
    )  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without `--full`, tests marked `full` are deselected (reported as such, never skipped). The smoke run's modules
    and the generate run's come first: under `pytest -n` they start at once, one on each worker."""
    if not config.getoption("full"):
        full = [item for item in items if item.get_closest_marker("full")]
        if full:
            config.hook.pytest_deselected(items=full)
            items[:] = [item for item in items if not item.get_closest_marker("full")]
    strays = {item.nodeid for item in items if "smoke_run" in getattr(item, "fixturenames", ()) and work_unit(item.nodeid) != SMOKE_RUN}
    if strays:
        raise pytest.UsageError(f"tests use the smoke run outside SMOKE_RUN_MODULES (tests/conftest.py): {sorted(strays)}")
    items.sort(key=lambda item: FIRST_UNITS.index(unit) if (unit := work_unit(item.nodeid)) in FIRST_UNITS else len(FIRST_UNITS))


# `make test` runs the suite on two workers (pytest-xdist, `pytest -n 2`), each on its own share of the CPUs (one core
# each on two), which the kernels and subprocesses of its tests inherit: a worker's measurements never compete with the
# other's for a core (the kit counts interference on the CPUs a process may use). A module is a unit of work, run whole
# on one worker so that its fixtures are built once; the modules that share the session's smoke run are one unit.
SMOKE_RUN = "smoke run"
SMOKE_RUN_MODULES = ("tests/launch/test_crash_recovery.py", "tests/notebooks/test_benchmark_notebook.py", "tests/report/test_summary_notebook.py")
FIRST_UNITS = (SMOKE_RUN, "tests/notebooks/test_generate_run.py")  # the two longest (minutes each)


def pytest_configure(config: pytest.Config) -> None:
    """In a pytest-xdist worker: this process, and every process it starts, runs on the worker's share of the CPUs.
    SIGINT is answered as in a terminal, even where the suite's shell ignored it. Every process times its fixtures
    (tests/timings.py); with `--test-times`, the controlling one writes them down."""
    config.pluginmanager.register(timings, "benchlib-fixture-times")
    timings.register(config)
    # A suite started in the background by a script (`make test &`: the shell ignores SIGINT there, and every process
    # started after inherits that) still has the processes its tests start stop on SIGINT, which its tests send them.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if (workerinput := getattr(config, "workerinput", None)) is not None:
        os.sched_setaffinity(0, worker_cpus(os.sched_getaffinity(0), workerinput["workerid"], workerinput["workercount"]))


def worker_cpus(cpus: set[int], workerid: str, workers: int) -> set[int]:
    """The share of `cpus` of worker `workerid` ("gw0", "gw1", ...) among `workers`: every workers-th CPU; workers
    beyond the CPUs share them."""
    ordered = sorted(cpus)
    return set(ordered[int(workerid.removeprefix("gw")) % len(ordered) :: workers])


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under `pytest -n`: its module, or SMOKE_RUN."""
    module = nodeid.split("::")[0]
    return SMOKE_RUN if module in SMOKE_RUN_MODULES else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist's scheduling by module (`--dist loadfile`) with `work_unit`'s units, in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # collection order: FIRST_UNITS first, not the units with the most tests
    return WorkUnitScheduling(config, log)


def shared_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """Folder `name` of this test session's, the same for each of its pytest-xdist workers (under their common
    temporary folder), so that what one worker makes the other finds."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


@contextlib.contextmanager
def made_once(folder: Path) -> Iterator[bool]:
    """Held by one worker at a time (a lock file beside `folder`): yields whether `folder`'s contents are still to be
    made, and marks them made when the block ends without an error."""
    done = folder.with_name(folder.name + ".done")
    with open(folder.with_name(folder.name + ".lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield not done.exists()
            done.touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session", autouse=True)
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A build cache of this test session's own (BENCHLIB_CACHE, inherited by every process the tests start): the
    user's cache is never read or written, and each session starts cold. Each worker has its own."""
    folder = tmp_path_factory.mktemp("build-cache")
    previous = os.environ.get(CACHE_VARIABLE)
    os.environ[CACHE_VARIABLE] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop(CACHE_VARIABLE, None)
    else:
        os.environ[CACHE_VARIABLE] = previous


def _engine(name: str) -> bool:
    """Whether environment `name` is a serving engine's (framework openai): it generates only, tested on its own."""
    return yaml.safe_load((PARAMETERS_DIR / "environments" / f"{name}.yaml").read_text(encoding="utf-8")).get("framework") == "openai"


# Every CPU environment shipped in parameters/environments/ that runs in the kernel: the study's four and today's backends.
CPU_ENVIRONMENTS = [name for name in available("environments") if name.startswith("cpu-") and not _engine(name)]

RunCli = Callable[..., subprocess.CompletedProcess]


# Loaded by every Python process through PYTHONPATH (sitecustomize): a connection or a name lookup for any
# address off this machine is logged (pid and address) to $NETWORK_ATTEMPTS_LOG and refused.
BLOCK_NETWORK = """
import os, socket, sys

_LOG = os.environ["NETWORK_ATTEMPTS_LOG"]
_LOCAL = ("127.", "::1", "localhost", "0.0.0.0", "::")


def _blocked(where):
    with open(_LOG, "a") as log:
        log.write(f"{os.getpid()} {where}\\n")
    raise OSError(f"network blocked: {where}")


def _hook(event, args):
    if event == "socket.connect" and args[0].family in (socket.AF_INET, socket.AF_INET6):
        if not str(args[1][0]).startswith(_LOCAL):
            _blocked(args[1])
    elif event == "socket.getaddrinfo" and args[0] is not None and not str(args[0]).startswith(_LOCAL):
        _blocked(args[0])


sys.addaudithook(_hook)
"""


@dataclass(frozen=True)
class NetworkBlock:
    """An environment for subprocesses in which no connection leaves this machine, and the log of attempts."""

    env: dict[str, str]
    log: Path


@pytest.fixture(scope="session")
def network_blocked(tmp_path_factory: pytest.TempPathFactory) -> NetworkBlock:
    """The environment of this process without the hub's switches (HF_*, TRANSFORMERS_*: the kit must set its
    own), with every Python subprocess refusing and logging connections off this machine."""
    folder = tmp_path_factory.mktemp("network-blocked")
    (folder / "sitecustomize.py").write_text(textwrap.dedent(BLOCK_NETWORK))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "TRANSFORMERS_"))}
    return NetworkBlock({**env, "PYTHONPATH": str(folder), "NETWORK_ATTEMPTS_LOG": str(folder / "attempts.log")}, folder / "attempts.log")


# A whole `benchlib run` of a fixture (the smoke run, the generate run): a limit that ends a hang long before CI's own,
# never one that a slow machine reaches. Generous for the slowest type seen, not sized from this machine: the longest
# fixture has taken 15.5 minutes on a 2-core AMD EPYC with AVX2 only, beside the other worker's; this is three times that.
RUN_TIMEOUT_S = 45 * 60
STOP_GRACE_S = 30  # after the limit, how long the run has to stop its kernels on SIGINT (as Ctrl-C) before SIGKILL
PROGRESS_LINE = re.compile(r"^\[\d+/\d+\] ")  # `benchlib run`'s line for an environment starting or done


def _run_cli(*args: str, timeout: float = RUN_TIMEOUT_S, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m benchlib ARGS...` in the kit's folder, its output captured; past `timeout` it is stopped as Ctrl-C
    would stop it (its kernels with it) and the test fails saying which environment was running, and for how long."""
    process = subprocess.Popen(
        [sys.executable, "-m", "benchlib", *args], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, start_new_session=True,
    )  # fmt: skip
    start = time.monotonic()
    lines: list[tuple[float, str]] = []  # each line of standard output, with when it came
    errors: list[str] = []
    readers = [
        threading.Thread(target=lambda: lines.extend((time.monotonic() - start, line) for line in process.stdout), daemon=True),
        threading.Thread(target=lambda: errors.extend(process.stderr), daemon=True),
    ]  # fmt: skip
    for reader in readers:
        reader.start()
    try:
        process.wait(timeout=timeout)
    except BaseException as stopped:  # the limit, or the suite itself interrupted: the run has its own session, so pass it on
        with contextlib.suppress(ProcessLookupError):  # it may have ended meanwhile
            os.killpg(process.pid, signal.SIGINT)
        if not isinstance(stopped, subprocess.TimeoutExpired):
            raise
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for reader in readers:
            reader.join(timeout=5)
        pytest.fail(timed_out(args, timeout, lines, "".join(errors)), pytrace=False)
    for reader in readers:
        reader.join()
    return subprocess.CompletedProcess(process.args, process.returncode, "".join(line for _, line in lines), "".join(errors))


def timed_out(args: tuple[str, ...], timeout: float, lines: list[tuple[float, str]], errors: str) -> str:
    """What a run stopped at its limit was doing: the environment it had started last, since when, and its last lines."""
    progress = [(at, line.strip()) for at, line in lines if PROGRESS_LINE.match(line)]
    if not progress:
        doing = "no environment had started"
    else:
        at, line = progress[-1]
        doing = f"{'the last environment ended' if ': done in ' in line else 'running for'} {timeout - at:.0f} s: {line}"
    tail = "".join(line for _, line in lines[-15:]) + errors[-2000:]
    return f"`benchlib {' '.join(args[:3])} ...` passed its limit of {timeout:.0f} s; {doing}\nits last output:\n{tail}"


@pytest.fixture(scope="session")
def run_cli() -> RunCli:
    """Runs `python -m benchlib ARGS...` from the kit's folder; returns the completed process (output captured)."""
    return _run_cli


@pytest.fixture(scope="session")
def user_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Checkpoint folders as a user brings them (tests/checkpoints.py): a Llama-architecture causal LM and a BERT with a
    fill-mask head, each with its tokenizer."""
    from tests.checkpoints import save_bert, save_llama

    folder = shared_folder(tmp_path_factory, "user-models")  # one pair for both workers: the build cache knows them once
    paths = {"llama": folder / "llama", "bert": folder / "bert"}
    with made_once(folder) as to_make:
        if to_make:
            save_llama(paths["llama"])
            save_bert(paths["bert"], task="fill-mask")
    return paths


@pytest.fixture(scope="session")
def smoke_models(request: pytest.FixtureRequest, user_models: dict[str, Path]) -> list[str]:
    """The smoke run's models: with `--full` the smoke grid's (every catalogue entry), else SMOKE_MODELS_DEFAULT;
    and the `user_models` folders."""
    grid = yaml.safe_load((PARAMETERS_DIR / "grids" / "smoke.yaml").read_text(encoding="utf-8"))
    catalogue = grid["models"] if request.config.getoption("full") else SMOKE_MODELS_DEFAULT
    return [*catalogue, *(str(path) for path in user_models.values())]


def by_models(plan: dict[str, list[str]]) -> dict[str, list[str]]:
    """The environments of `plan` (each with its models) grouped by their models, joined as `--models` takes them: one
    `benchlib run` each."""
    groups: dict[str, list[str]] = {}
    for environment, models in plan.items():
        groups.setdefault(",".join(models), []).append(environment)
    return groups


@pytest.fixture(scope="session")
def smoke_environments(request: pytest.FixtureRequest) -> list[str]:
    """The smoke run's CPU environments: all but SMOKE_FULL_ONLY's, unless `--full`."""
    full = request.config.getoption("full")
    return [environment for environment in CPU_ENVIRONMENTS if full or environment not in SMOKE_FULL_ONLY]


@pytest.fixture(scope="session")
def smoke_run(
    tmp_path_factory: pytest.TempPathFactory, network_blocked: NetworkBlock, smoke_environments: list[str], smoke_models: list[str]
) -> Path:
    """The run folder of `python -m benchlib run --grid smoke --models ... --params text.yaml` over `smoke_environments`
    with `smoke_models` (the smoke grid's and `user_models`; no summary), text inputs where a model has a tokenizer,
    with the network blocked (`network_blocked`), the machine's limits measured first.

    Made once per test session (a few minutes): each environment is the benchmark notebook
    executed by papermill in its own kernel. Tests must not change it; copy it first.
    """
    run_dir = tmp_path_factory.mktemp("smoke-run")
    text = tmp_path_factory.mktemp("smoke-params") / "text.yaml"
    text.write_text("inputs: text\n", encoding="utf-8")
    completed = _run_cli(
        "run", "--grid", "smoke", "--environments", ",".join(smoke_environments), "--models", ",".join(smoke_models),
        "--params", str(text), "--out", str(run_dir), "--no-summary", "--quiet", env=network_blocked.env,
    )  # fmt: skip
    assert completed.returncode == 0, f"smoke run failed:\n{completed.stdout}\n{completed.stderr}"
    return run_dir


@pytest.fixture
def run_cli_in_process(capsys: pytest.CaptureFixture[str]) -> Callable[[list[str]], tuple[int, str, str]]:
    """Runs `benchlib.cli.main(args)` in this process: (exit status, standard output, standard error)."""
    from benchlib.cli import main

    def run(args: list[str]) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(args)
        out, err = capsys.readouterr()
        return code, out, err

    return run
