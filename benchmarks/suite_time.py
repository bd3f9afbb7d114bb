"""How long each tier of the test suite takes on this machine: a rerunnable check of `make test`'s time.

Runs, with this interpreter, one after the other, each tier asked for, and prints for each its wall time,
its outcome and the files that took longest, with the CPU they ran on:
- quick: `pytest -m "not e2e"`, the kit's own logic on tiny eager PyTorch models;
- test: `pytest -n 2`, what `make test` runs (the quick tier, and one end-to-end check of each guarantee:
  every CPU environment through the real notebook on a few models, the summary, generation, a killed
  kernel and runner, out-of-memory, the cluster);
- full: `pytest -n 2 --full`, what `make test-full` runs (also every catalogue model in every environment,
  and the variations of a guarantee that `make test` checks once).
Targets: the quick tier under 2 minutes; `make test`'s within 20 minutes on a 2-core machine, the
AVX2-only one included (`make test-full` has none). Exit status 1 when a tier fails or misses its target.
`make test` adds installing `.venv` on a fresh clone.

    .venv/bin/python benchmarks/suite_time.py [--tier quick|test|full|all] [--top 10] [-- PYTEST ARGS...]

Run it on an otherwise quiet machine: other work slows every test, and the suite's own kernels are
the only load it should see.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

from benchlib.machine import cpu_flags, cpu_model, usable_cores
from benchlib.paths import PROJECT_ROOT

# pytest's arguments for each tier: `make test` and `make test-full` run on two workers (the Makefile's TEST_WORKERS)
TIERS = {"quick": ["-m", "not e2e"], "test": ["-n", "2"], "full": ["-n", "2", "--full"]}
TARGET_S = {"quick": 120.0, "test": 20 * 60.0}


@dataclass(frozen=True)
class TierTime:
    """One tier's pytest session: wall time, exit status and seconds per test file."""

    tier: str
    wall_s: float
    returncode: int
    tests: int
    by_file: dict[str, float]


def cpu_class(flags: set[str] | None) -> str:
    """The kind of x86 CPU, as the suite's machines differ: AMX, AVX512-BF16, AVX-512, AVX2 only."""
    flags = flags or set()
    for flag, name in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2 only")):
        if flag in flags:
            return name
    return "no AVX2"


def run_tier(tier: str, extra: list[str]) -> TierTime:
    """The tier's pytest session in the kit's folder, timed; per-file seconds from its JUnit report (setup and teardown included)."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TIERS[tier], f"--junitxml={report}", *extra]
        start = time.perf_counter()
        completed = subprocess.run(command, cwd=PROJECT_ROOT)
        wall_s = time.perf_counter() - start
        cases = ElementTree.parse(report).getroot().iter("testcase") if report.exists() else iter(())
        by_file: collections.Counter[str] = collections.Counter()
        tests = 0
        for case in cases:
            tests += 1
            by_file[case.get("classname", "").replace(".", "/") + ".py"] += float(case.get("time", 0))
    return TierTime(tier, wall_s, completed.returncode, tests, dict(by_file))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", choices=[*TIERS, "all"], default=None, help="default: quick, then test; all: every tier")
    parser.add_argument("--top", type=int, default=10, help="files to list per tier, slowest first")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    tiers = {None: ["quick", "test"], "all": list(TIERS)}.get(args.tier, [args.tier])
    times = [run_tier(tier, args.pytest_args) for tier in tiers]

    print(f"\n{cpu_model()} ({cpu_class(cpu_flags())}), {usable_cores()} cores")
    for result in times:
        print(f"{result.tier} tier (pytest {' '.join(TIERS[result.tier])}): {result.wall_s / 60:.1f} min, {result.tests} tests, exit status {result.returncode}")
        for path, seconds in sorted(result.by_file.items(), key=lambda item: -item[1])[: args.top]:
            print(f"  {seconds:7.1f} s  {path}")
    failed = [f"{t.tier} tier failed" for t in times if t.returncode != 0]
    missed = [f"{t.tier} tier {t.wall_s / 60:.1f} min > {TARGET_S[t.tier] / 60:.0f} min" for t in times if t.wall_s > TARGET_S.get(t.tier, float("inf"))]
    if failed or missed:
        print("; ".join([*failed, *missed]))
        return 1
    print("within the targets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
