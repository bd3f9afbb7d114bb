"""Does the kit notice other work on the machine? A rerunnable check of the interference meter.

1. Runs one environment with a CPU-bound process beside it (`python -c "while True: pass"`),
   then another environment quiet, into one run folder, and prints the share of each
   environment's cells that are `disturbed`: the first should be at least 90%, the second at
   most 10%.
2. Renders the summary over both: it must name the disturbed environment, and no claim that
   uses it may read `holds` or `does not hold`.
3. Times what the meter and the speed probe cost against the quiet environment's time.

    .venv/bin/python benchmarks/interference.py --out outputs/interference-check

Run it on an otherwise quiet machine: anything else running makes the quiet environment loud.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import timeit
from pathlib import Path

import yaml

from benchlib import read_results
from benchlib.analysis.claims import NOT_CHECKED, claims_table
from benchlib.analysis.runs import load_runs
from benchlib.measure.interference import InterferenceMeter
from benchlib.measure.probe import run_probe
from benchlib.paths import PROJECT_ROOT

SMALL_MODELS = ["bert-base-cased", "distilbert-base-uncased", "gpt2", "distilgpt2", "roberta-base"]


def run(out: Path, grid: str, environment: str, params: Path) -> float:
    """`python -m benchlib run` of one environment into `out`; returns its wall time."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "benchlib", "run", "--grid", grid, "--environments", environment, "--params", str(params),
         "--out", str(out), "--no-summary", "--quiet"],
        cwd=PROJECT_ROOT, check=True,
    )  # fmt: skip
    return time.perf_counter() - start


def share_disturbed(folder: Path) -> tuple[int, int, float]:
    """(disturbed cells, ok cells, median interference) over the kept rows of an environment."""
    rows = read_results(folder)
    ok = rows[rows["status"] == "ok"]
    return int((ok["disturbed"].astype(str) == "True").sum()), len(ok), float(ok["interference"].median())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="a new run folder")
    parser.add_argument("--grid", default="quick-all")
    parser.add_argument("--models", default=",".join(SMALL_MODELS), help="comma-separated models (default: the five smallest)")
    parser.add_argument("--loud", default="cpu-pytorch", help="the environment measured beside a busy process")
    parser.add_argument("--quiet", default="cpu-torchscript", help="the environment measured alone")
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=False)
    params = args.out / "check.yaml"
    # No remeasure: the busy process stays for the whole environment, so attempts would only repeat it.
    params.write_text(yaml.safe_dump({"models": args.models.split(","), "remeasure": 0}))
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loud_s = run(args.out, args.grid, args.loud, params)
    finally:
        spinner.kill()
        spinner.wait()
    quiet_s = run(args.out, args.grid, args.quiet, params)

    for name, seconds in ((args.loud, loud_s), (args.quiet, quiet_s)):
        disturbed, ok, median = share_disturbed(args.out / name)
        print(f"{name}: {disturbed} of {ok} ok cells disturbed ({100 * disturbed / max(ok, 1):.0f}%), "
              f"median interference {median:.3f}, {seconds:.0f} s")  # fmt: skip

    subprocess.run([sys.executable, "-m", "benchlib", "summary", str(args.out)], cwd=PROJECT_ROOT, check=True)
    claims = claims_table(load_runs([args.out]))
    checked = claims[claims["holds"] != NOT_CHECKED]
    for claim in checked.itertuples():
        print(f"claim: {claim.claim[:70]}: {claim.holds} ({claim.detail[:120]})")

    meter = InterferenceMeter()
    meter_s = min(timeit.repeat(lambda: (meter.start(), meter.stop()), number=100, repeat=5)) / 100
    probe_s = min(timeit.repeat(lambda: run_probe("cost"), number=1, repeat=5))
    info = json.loads((args.out / args.quiet / "environment.json").read_text())
    probes = len(info["probes"])
    rows = read_results(args.out / args.quiet)
    cells = int((rows["status"] == "ok").sum())
    print(f"meter: {1e6 * meter_s:.0f} us per cell ({cells} cells: {100 * meter_s * cells / quiet_s:.3f}% of {args.quiet}'s {quiet_s:.0f} s)")
    print(f"probe: {1e3 * probe_s:.0f} ms each, {probes} in {args.quiet}: {100 * probe_s * probes / quiet_s:.2f}% of its time")


if __name__ == "__main__":
    main()
