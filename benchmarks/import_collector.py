"""How long an environment's imports take with Python's cyclic garbage collector running and paused
(`benchlib.measure.memory.collector_paused`, as `run_environment` does): a rerunnable check.

For each framework, starts `--processes` fresh Python processes of each kind in turn; each does what a kernel does
before its first cell (`measure.sweep.prepare_environment`: the backend, which imports the framework, and the code of
a few smoke models) and prints the seconds it took. Prints, per framework, the median of each kind and their ratio.

Run it on a quiet machine, on one core to see the slowest type's side of it:

    taskset -c 0 .venv/bin/python benchmarks/import_collector.py --processes 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

FRAMEWORKS = {"pytorch": "eager", "tensorflow": "function", "onnxruntime": "session", "openvino": "compiled"}
MODELS = ["gpt2", "distilgpt2", "ctrl", "bert-base-cased"]

PREPARE = """
import contextlib, sys, tempfile, time
from pathlib import Path
start = time.perf_counter()
from benchlib.config.params import validate_params
from benchlib.measure.memory import collector_paused
from benchlib.measure.sweep import prepare_environment
framework, mode, paused, models = sys.argv[1], sys.argv[2], sys.argv[3] == "paused", sys.argv[4].split(",")
output_dir = Path(tempfile.mkdtemp())
params = validate_params({
    "environment": framework, "framework": framework, "mode": mode, "models": models, "model_scale": "tiny", "batch_sizes": [1],
    "sequence_lengths": [8], "output_dir": str(output_dir),
})
with collector_paused() if paused else contextlib.nullcontext():
    prepare_environment(params, output_dir, models)
print(time.perf_counter() - start)
"""


def prepare_seconds(framework: str, kind: str) -> float:
    """Seconds a fresh process takes to import `framework` and the models' code, the collector `kind` (paused or running)."""
    completed = subprocess.run(
        [sys.executable, "-c", PREPARE, framework, FRAMEWORKS[framework], kind, ",".join(MODELS)], capture_output=True, text=True, check=True
    )
    return float(completed.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5, help="processes per framework and kind")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    args = parser.parse_args()
    print(f"{'framework':<12} {'running (s)':>12} {'paused (s)':>11} {'paused/running':>15}")
    for framework in args.frameworks.split(","):
        seconds: dict[str, list[float]] = {"running": [], "paused": []}
        for _ in range(args.processes):
            for kind in seconds:
                seconds[kind].append(prepare_seconds(framework, kind))
        running, paused = statistics.median(seconds["running"]), statistics.median(seconds["paused"])
        print(f"{framework:<12} {running:>12.2f} {paused:>11.2f} {paused / running:>15.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
