"""The suite's own time, as `make test` writes it: every test's setup, call and teardown, every fixture's setup, the
worker each ran on and the machine, in one JSON file per session (`--test-times FILE`), read by
`benchmarks/suite_time.py report`. Fixtures are timed in the process that sets them up (a pytest-xdist worker) and
travel to the controller in their test's report (`user_properties`). The host's own speed, which moves a cloud
machine's figures from hour to hour, is recorded beside them: the kit's speed probe at the session's start and end, and
the hypervisor's steal over the session."""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchlib.machine import ONEDNN_ISA_VARIABLES, cpu_class, cpu_flags, cpu_model, usable_cores
from benchlib.measure.interference import make_meter
from benchlib.measure.probe import time_workload

FIXTURES_PROPERTY = "fixture_setup_s"  # the user property of a setup report: [[fixture, scope, seconds], ...]
# The instruction sets that tell the suite's machine types apart, and the switches that cap the code paths used
CPU_FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
ISA_SWITCHES = ("ATEN_CPU_CAPABILITY", *ONEDNN_ISA_VARIABLES)

_fixtures: list[list[Any]] = []  # the fixtures set up for the test being set up, in this process


def machine() -> dict[str, Any]:
    """What the suite's time depends on: the CPU, its instruction sets, the CPUs this process may use, and the
    switches that cap the code paths (a rehearsal of a slower machine type sets them)."""
    flags = cpu_flags() or set()
    return {
        "cpu": cpu_model(), "cpu_class": cpu_class(flags), "features": [name for name in CPU_FEATURES if name in flags],
        "cores": usable_cores(), "isa_switches": {name: os.environ[name] for name in ISA_SWITCHES if name in os.environ},
    }  # fmt: skip


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Iterator[None]:
    start = time.perf_counter()
    yield
    _fixtures.append([fixturedef.argname, fixturedef.scope, round(time.perf_counter() - start, 3)])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    if call.when == "setup":
        report = outcome.get_result()
        report.user_properties.append((FIXTURES_PROPERTY, [entry for entry in _fixtures if entry[2] >= 0.01]))
        _fixtures.clear()


class TestTimes:
    """Collects every test report in the controlling process and writes them at the session's end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.start = time.time()
        self.tests: dict[str, dict[str, Any]] = {}
        self.meter = make_meter()  # the steal of the CPUs this session may use, from /proc/stat (None without it)
        if self.meter is not None:
            self.meter.start()
        self.probe_start_s = time_workload()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)  # pytest-xdist's worker that ran it; none in a session without workers
        test = self.tests.setdefault(report.nodeid, {"worker": node.gateway.id if node is not None else None})
        test[report.when] = round(report.duration, 3)
        if report.when == "call" or report.outcome != "passed":
            test["outcome"] = report.outcome
        for name, value in report.user_properties:
            if name == FIXTURES_PROPERTY and value:
                test["fixtures"] = value

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        record = {
            "date": datetime.datetime.fromtimestamp(self.start, datetime.timezone.utc).isoformat(timespec="seconds"),
            "wall_s": round(time.time() - self.start, 1), "exit_status": int(exitstatus), "args": session.config.invocation_params.args,
            "workers": getattr(session.config.option, "numprocesses", None) or 0, "machine": machine(), "host": self.host(), "tests": self.tests,
        }  # fmt: skip
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")

    def host(self) -> dict[str, Any]:
        """The speed probe's seconds (`benchlib.measure.probe`) at the session's start and now, and the hypervisor's share
        of the session's CPUs over the session (None where /proc/stat cannot be read)."""
        steal = self.meter.stop().steal if self.meter is not None else None
        return {"probe_s": [round(self.probe_start_s, 5), round(time_workload(), 5)], "steal": None if steal is None else round(steal, 4)}


def register(config: pytest.Config) -> None:
    """With `--test-times FILE`, in the controlling process (not in a pytest-xdist worker): write FILE at the end."""
    if (path := config.getoption("test_times")) and not hasattr(config, "workerinput"):
        config.pluginmanager.register(TestTimes(Path(path)), "benchlib-test-times")
