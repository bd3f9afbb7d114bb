"""How long the test suite takes, and where the time goes: a rerunnable check of `make test`'s time.

Two uses:

    .venv/bin/python benchmarks/suite_time.py [--tier quick|test|full|all] [--top 10] [-- PYTEST ARGS...]
    .venv/bin/python benchmarks/suite_time.py report [FILE ...] [--top 10] [--out REPORT.md]

The first runs, with this interpreter, one after the other, each tier asked for, and reports each:
- quick: `pytest -m "not e2e"`, the kit's own logic on tiny eager PyTorch models;
- test: `pytest -n 2`, what `make test` runs (the quick tier, and one end-to-end check of each guarantee);
- full: `pytest -n 2 --full`, what `make test-full` runs (also every catalogue model in every environment,
  and the variations of a guarantee that `make test` checks once).
Targets: the quick tier under 2 minutes; `make test`'s within 15 minutes on every 2-core machine type, the
AVX2-only one included (`make test-full` has none). Exit status 1 when a tier fails or misses its target.

The second reads the files that `make test` writes (`.test-times/*.json`: every test's setup, call and teardown,
every fixture's setup, each worker, the machine; tests/timings.py) and says, per machine type, where the time
went: each worker's busy time (the longer is the suite's critical path), the costliest fixtures, tests and files, and
the host's speed meanwhile (the speed probe at the start and end, the hypervisor's steal): compare sessions whose host
ran alike.

Run it on an otherwise quiet machine: other work slows every test, and the suite's own kernels are
the only load it should see.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib.measure.probe import PROBE_WORKLOAD
from benchlib.paths import PROJECT_ROOT

TIMES_DIR = PROJECT_ROOT / ".test-times"  # where `make test` writes each session's times
# pytest's arguments for each tier: `make test` and `make test-full` run on two workers (the Makefile's TEST_WORKERS)
TIERS = {"quick": ["-m", "not e2e"], "test": ["-n", "2"], "full": ["-n", "2", "--full"]}
TARGET_S = {"quick": 120.0, "test": 15 * 60.0}


def run_tier(tier: str, extra: list[str]) -> dict[str, Any]:
    """The tier's pytest session in the kit's folder: its times file (tests/timings.py), with the tier's name."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "times.json"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TIERS[tier], f"--test-times={path}", *extra]
        start = time.perf_counter()
        completed = subprocess.run(command, cwd=PROJECT_ROOT)
        record = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"tests": {}, "machine": {}}
    return {**record, "tier": tier, "wall_s": time.perf_counter() - start, "exit_status": completed.returncode}


def test_seconds(test: dict[str, Any]) -> float:
    return sum(test.get(phase, 0.0) for phase in ("setup", "call", "teardown"))


def describe(record: dict[str, Any], top: int) -> list[str]:
    """One session's times as Markdown: the machine, the wall time, each worker's busy time, the costliest
    fixtures (setup, where they were first asked for), tests (call) and files (everything)."""
    machine, tests = record.get("machine", {}), record["tests"]
    switches = ", ".join(f"{name}={value}" for name, value in machine.get("isa_switches", {}).items()) or "none"
    outcomes = collections.Counter(test.get("outcome", "passed") for test in tests.values())
    lines = [
        f"### {machine.get('cpu', '?')} ({machine.get('cpu_class', '?')}), {machine.get('cores', '?')} cores, {record.get('date', '?')}",
        "",
        f"- instruction sets: {', '.join(machine.get('features', [])) or '?'}; code paths capped by: {switches}",
        f"- `pytest {' '.join(record.get('args', []))}`: {record['wall_s'] / 60:.1f} min of tests, exit status {record['exit_status']}, "
        + ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items())),
    ]  # fmt: skip
    if host := record.get("host"):
        lines.append(host_line(host))
    busy: collections.Counter[str] = collections.Counter()
    by_file: collections.Counter[str] = collections.Counter()
    fixtures: list[tuple[float, str, str, str]] = []
    for nodeid, test in tests.items():
        busy[test.get("worker") or "main"] += test_seconds(test)
        by_file[nodeid.split("::")[0]] += test_seconds(test)
        fixtures += [(seconds, name, scope, nodeid) for name, scope, seconds in test.get("fixtures", [])]
    lines.append("- busy time per worker: " + ", ".join(f"{worker} {seconds / 60:.1f} min" for worker, seconds in sorted(busy.items())))
    lines += ["", "| fixture | scope | seconds | first asked for by |", "|---|---|---:|---|"]
    lines += [f"| {name} | {scope} | {seconds:.0f} | `{nodeid}` |" for seconds, name, scope, nodeid in sorted(fixtures, reverse=True)[:top]]
    calls = sorted(((test.get("call", 0.0), nodeid) for nodeid, test in tests.items()), reverse=True)[:top]
    lines += ["", "| test (its call) | seconds |", "|---|---:|", *(f"| `{nodeid}` | {seconds:.0f} |" for seconds, nodeid in calls)]
    lines += ["", "| file (setup, calls, teardown) | seconds |", "|---|---:|"]
    lines += [f"| `{path}` | {seconds:.0f} |" for path, seconds in by_file.most_common(top)]
    return [*lines, ""]


def host_line(host: dict[str, Any]) -> str:
    """The host's speed during a session (tests/timings.py): a slower probe or a larger steal explains a slower session."""
    start, end = host["probe_s"]
    steal = "not read" if host.get("steal") is None else f"{host['steal']:.1%} of the session's CPUs"
    return f"- the host: the speed probe ({PROBE_WORKLOAD}) {start * 1e3:.1f} ms at the start, {end * 1e3:.1f} ms at the end; the hypervisor's steal {steal}"


def report(paths: list[Path], top: int) -> str:
    """Every session in `paths`, grouped by machine type (the CPU class and the switches that cap its code paths)."""
    records = [json.loads(path.read_text(encoding="utf-8")) for path in paths]
    by_type: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for record in records:
        machine = record.get("machine", {})
        rehearsal = " (code paths capped: a rehearsal)" if machine.get("isa_switches") else ""
        by_type[f"{machine.get('cpu_class', '?')}, {machine.get('cores', '?')} cores{rehearsal}"].append(record)
    lines = ["# The test suite's time", ""]
    for kind, sessions in sorted(by_type.items()):
        lines += [f"## {kind}", ""]
        for record in sorted(sessions, key=lambda record: record.get("date", "")):
            lines += describe(record, top)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        parser = argparse.ArgumentParser(prog="suite_time.py report", description="where the suite's time went, per machine type")
        parser.add_argument("files", nargs="*", type=Path, help=f"times files (default: every file in {TIMES_DIR})")
        parser.add_argument("--top", type=int, default=10, help="rows per table, costliest first")
        parser.add_argument("--out", type=Path, default=None, help="write the report (Markdown) here, not to standard output")
        args = parser.parse_args(argv[1:])
        files = args.files or sorted(TIMES_DIR.glob("*.json"))
        if not files:
            print(f"no times files: run `make test` (it writes {TIMES_DIR}), or name them", file=sys.stderr)
            return 2
        text = report(files, args.top)
        if args.out:
            args.out.write_text(text, encoding="utf-8")
        else:
            print(text)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", choices=[*TIERS, "all"], default=None, help="default: quick, then test; all: every tier")
    parser.add_argument("--top", type=int, default=10, help="rows per table, costliest first")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    tiers = {None: ["quick", "test"], "all": list(TIERS)}.get(args.tier, [args.tier])
    records = [run_tier(tier, args.pytest_args) for tier in tiers]
    for record in records:
        print(f"\n{record['tier']} tier (pytest {' '.join(TIERS[record['tier']])})")
        print("\n".join(describe(record, args.top)))
    failed = [f"{r['tier']} tier failed" for r in records if r["exit_status"] != 0]
    missed = [f"{r['tier']} tier {r['wall_s'] / 60:.1f} min > {TARGET_S[r['tier']] / 60:.0f} min" for r in records if r["wall_s"] > TARGET_S.get(r["tier"], float("inf"))]
    if failed or missed:
        print("; ".join([*failed, *missed]))
        return 1
    print("within the targets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
