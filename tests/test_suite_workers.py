"""`make test` on two workers (pytest-xdist, tests/conftest.py): each worker, and every process its tests start, runs on
its own share of the CPUs, and the modules that share the session's smoke run stay together on one worker; the times
the session writes (tests/timings.py) and their report (benchmarks/suite_time.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import psutil
import pytest
import yaml

from benchlib.paths import PROJECT_ROOT
from tests.conftest import SMOKE_RUN, SMOKE_RUN_MODULES, _run_cli, timed_out, work_unit, worker_cpus

# One test module of the inner session: it records its worker, its CPUs and those of a process it starts.
PROBE = """
import json, os, subprocess, sys, time
from pathlib import Path

import pytest

@pytest.fixture(scope="module")
def slow_fixture():
    time.sleep(0.3)

def test_probe(slow_fixture):
    child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"], capture_output=True, text=True)
    record = {"worker": os.environ["PYTEST_XDIST_WORKER"], "cpus": sorted(os.sched_getaffinity(0)), "child": json.loads(child.stdout)}
    (Path(__file__).parent / (Path(__file__).stem + ".json")).write_text(json.dumps(record))
"""


@pytest.mark.parametrize("cpus, workers", [({0, 1}, 2), ({0, 1, 2, 3, 4}, 2), ({3}, 2), ({0, 2, 4}, 3), ({0, 1}, 1)])
def test_the_workers_shares_are_disjoint_cover_the_cpus_and_are_never_empty(cpus: set[int], workers: int) -> None:
    shares = [worker_cpus(cpus, f"gw{worker}", workers) for worker in range(workers)]
    assert all(shares) and set().union(*shares) == cpus
    if len(cpus) >= workers:
        assert sum(len(share) for share in shares) == len(cpus)  # disjoint
    assert worker_cpus({0, 1}, "gw0", 2) == {0} and worker_cpus({0, 1}, "gw1", 2) == {1}


def test_the_smoke_runs_modules_are_one_unit_and_the_others_their_own() -> None:
    assert {work_unit(f"{module}::test_x[a-b]") for module in SMOKE_RUN_MODULES} == {SMOKE_RUN}
    assert work_unit("tests/test_cli.py::test_x") == "tests/test_cli.py"


@pytest.mark.e2e
def test_each_worker_and_the_processes_its_tests_start_run_on_its_own_cpus(tmp_path) -> None:
    for name in ("test_first", "test_second"):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(PROBE), encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path), str(tmp_path),
         f"--test-times={tmp_path / 'times.json'}"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    records = [json.loads((tmp_path / f"{name}.json").read_text()) for name in ("test_first", "test_second")]
    assert {record["worker"] for record in records} == {"gw0", "gw1"}  # one unit (module) each
    mine = os.sched_getaffinity(0)
    for record in records:
        assert record["child"] == record["cpus"] == sorted(worker_cpus(mine, record["worker"], 2))
    if len(mine) >= 2:
        assert not set(records[0]["cpus"]) & set(records[1]["cpus"])
    # the session's times (`make test` writes them): each test's phases and worker, each fixture where it was set up
    times = json.loads((tmp_path / "times.json").read_text())
    assert times["exit_status"] == 0 and times["workers"] == 2 and times["machine"]["cores"] == len(mine)
    for name, record in zip(("test_first", "test_second"), records):
        test = times["tests"][f"{name}.py::test_probe"]
        assert test["worker"] == record["worker"] and test["outcome"] == "passed" and test["setup"] >= 0.3
        fixtures = {name: (scope, seconds) for name, scope, seconds in test["fixtures"]}
        assert fixtures["slow_fixture"][0] == "module" and fixtures["slow_fixture"][1] >= 0.3
    # the host's speed beside them (the speed probe at the start and the end, the steal), and the report says it
    assert len(times["host"]["probe_s"]) == 2 and all(seconds > 0 for seconds in times["host"]["probe_s"]) and 0 <= times["host"]["steal"] <= 1
    report = subprocess.run([sys.executable, "benchmarks/suite_time.py", "report", str(tmp_path / "times.json")], cwd=PROJECT_ROOT, capture_output=True, text=True)
    start, end = (f"{seconds * 1e3:.1f} ms" for seconds in times["host"]["probe_s"])
    assert report.returncode == 0 and f"- the host: the speed probe (numpy float32 matmul 1024x1024, 1 thread, median of 3) {start} at the start, {end} at the end" in report.stdout


# One test module of an inner session started with SIGINT ignored: it records whether a process it starts ignores it.
SIGINT_PROBE = """
import json, subprocess, sys
from pathlib import Path

def test_probe():
    child = subprocess.run([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"], capture_output=True, text=True)
    (Path(__file__).parent / "child.json").write_text(json.dumps({"ignored": child.stdout.strip() == "True"}))
"""


@pytest.mark.e2e
def test_a_suite_started_with_sigint_ignored_starts_processes_that_answer_it(tmp_path) -> None:
    """As `make test &` from a script starts it (the shell ignores SIGINT for a background command): the processes the
    tests start still stop on SIGINT, which the tests of a stopped run and an interrupted kernel send them."""
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(SIGINT_PROBE), encoding="utf-8")
    pytest_command = [sys.executable, "-m", "pytest", "-n", "1", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path), str(tmp_path)]
    ignoring = f"import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execv(sys.executable, {pytest_command!r})"
    completed = subprocess.run([sys.executable, "-c", ignoring], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert json.loads((tmp_path / "child.json").read_text()) == {"ignored": False}


def test_a_run_past_its_limit_names_the_environment_it_was_running_and_since_when() -> None:
    lines = [(2.0, "run folder: x\n"), (10.0, "[1/2] cpu-pytorch: pytorch/eager on cpu, 2 cells\n"), (50.0, "[1/2] cpu-pytorch: done in 40 s\n"),
             (55.0, "[2/2] cpu-torch-compile: pytorch/compile on cpu, 2 cells\n"), (60.0, "a warning\n")]  # fmt: skip
    message = timed_out(("run", "--grid", "smoke", "--out", "x"), 100, lines, "")
    assert message.startswith("`benchlib run --grid smoke ...` passed its limit of 100 s; running for 45 s: [2/2] cpu-torch-compile: pytorch/compile")
    assert message.endswith("a warning\n")
    assert "the last environment ended 50 s: [1/2] cpu-pytorch: done in 40 s" in timed_out(("run",), 100, lines[:3], "")
    assert "no environment had started" in timed_out(("run",), 100, lines[:1], "")


@pytest.mark.e2e
@pytest.mark.full  # make test: the message of a run past its limit (above); stopping it is Ctrl-C's path (tests/launch/test_runner_death.py)
def test_a_run_stopped_at_its_limit_fails_the_test_in_one_message_and_leaves_no_process(tmp_path) -> None:
    """A fixture's run stopped by its limit: stopped as Ctrl-C stops it (its kernel with it), and the test fails naming
    the environment that was running. The run's cells take minutes on any machine (a hundred thousand calls each)."""
    params = tmp_path / "long.yaml"
    params.write_text(yaml.safe_dump({"repeat": 10_000, "number": 10, "remeasure": 0}), encoding="utf-8")
    args = ("run", "--grid", "smoke", "--environments", "cpu-pytorch", "--models", "bert-base-cased", "--params", str(params),
            "--out", str(tmp_path / "run"), "--no-summary", "--no-limits")  # fmt: skip
    mark = f"limit-{uuid.uuid4().hex}"  # inherited by every process the run starts, its kernel included
    with pytest.raises(pytest.fail.Exception) as failed:
        _run_cli(*args, timeout=8, env={**os.environ, "BENCHLIB_TEST_MARK": mark})
    assert "passed its limit of 8 s" in str(failed.value)
    assert "[1/1] cpu-pytorch" in str(failed.value) or "no environment had started" in str(failed.value)
    assert marked_processes(mark) == []


def marked_processes(mark: str) -> list[str]:
    """The command lines of the processes alive with BENCHLIB_TEST_MARK=`mark` in their environment."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if process.environ().get("BENCHLIB_TEST_MARK") == mark and process.status() != psutil.STATUS_ZOMBIE:
                found.append(" ".join(process.info["cmdline"] or []))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found
