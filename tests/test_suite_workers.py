"""`make test` on two workers (pytest-xdist, tests/conftest.py): each worker, and every process its tests start, runs on
its own share of the CPUs, and the modules that share the session's smoke run stay together on one worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from benchlib.paths import PROJECT_ROOT
from tests.conftest import SMOKE_RUN, SMOKE_RUN_MODULES, work_unit, worker_cpus

# One test module of the inner session: it records its worker, its CPUs and those of a process it starts.
PROBE = """
import json, os, subprocess, sys
from pathlib import Path

def test_probe():
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
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path), str(tmp_path)],
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
