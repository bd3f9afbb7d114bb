"""How much does a cell's time move between fresh processes, and what moves it? A rerunnable check.

Measures the same cells in `--processes` fresh Python processes per variant (each runs the kit's sweep
on one environment: build, warm up, samples), then prints per cell and variant the median of each
process's median and the spread between processes (largest / smallest - 1, and the standard deviation
of the log medians: `variance.split`'s `between`). Variants change one thing the kit could control:

- `default`: the environment as shipped;
- `onednn-off`: TF_ENABLE_ONEDNN_OPTS=0 (TensorFlow without oneDNN's kernels and their primitive cache);
- `one-thread`: num_threads 1 (no intra-op thread pool to settle);
- `no-aslr`: the process started under `setarch -R` (the same addresses every time: where memory lands);
- `thp`: THP_MEM_ALLOC_ENABLE=1 (PyTorch asks for transparent huge pages for its large CPU allocations).

Run it on a quiet machine; never beside other work (its own figures would move):

    .venv/bin/python benchmarks/process_spread.py --environment cpu-tensorflow --processes 6
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchlib.analysis.variance import split
from benchlib.paths import PROJECT_ROOT

MEASURE = """
import json, sys
from benchlib import run_environment
from benchlib.config.jobs import plan_run
from pathlib import Path
job = plan_run(Path(sys.argv[1]), "quick", [sys.argv[2]], [sys.argv[3]])[0]
rows = run_environment(job.params, progress=False)
print(json.dumps([[r.model, int(r.sequence_length), list(r.samples_s)] for r in rows.itertuples() if r.status == "ok"]))
"""
VARIANTS: dict[str, tuple[dict[str, str], list[str], dict]] = {
    "default": ({}, [], {}),
    "onednn-off": ({"TF_ENABLE_ONEDNN_OPTS": "0"}, [], {}),
    "one-thread": ({}, [], {"num_threads": 1}),
    "no-aslr": ({}, ["setarch", "-R"], {}),
    "thp": ({"THP_MEM_ALLOC_ENABLE": "1"}, [], {}),
}


def measure(environment: str, params: dict, env: dict[str, str], prefix: list[str]) -> dict[tuple[str, int], list[float]]:
    """One fresh process's samples per cell."""
    folder = Path(tempfile.mkdtemp(prefix="spread-"))
    try:
        grid = folder / "params.yaml"
        grid.write_text(json.dumps(params))  # JSON is YAML
        command = [*prefix, sys.executable, "-c", MEASURE, str(folder / "run"), environment, str(grid)]
        out = subprocess.run(command, cwd=PROJECT_ROOT, env={**os.environ, **env}, capture_output=True, text=True, check=True).stdout
        return {(model, sequence): samples for model, sequence, samples in json.loads(out.strip().splitlines()[-1])}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--environment", default="cpu-tensorflow")
    parser.add_argument("--models", default="distilgpt2,bert-base-cased")
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    base = {"models": args.models.split(","), "sequence_lengths": [8, 64], "repeat": 30, "rounds": 1, "remeasure": 0}
    print(f"{'variant':<11} {'cell':<22} {'median ms':>9} {'max/min-1':>9} {'between':>8}")
    for name in args.variants.split(","):
        env, prefix, extra = VARIANTS[name]
        if prefix and shutil.which(prefix[0]) is None:
            print(f"{name}: {prefix[0]} not found, left out")
            continue
        runs = [measure(args.environment, {**base, **extra}, env, prefix) for _ in range(args.processes)]
        for cell in runs[0]:
            medians = [float(np.median(run[cell])) for run in runs if cell in run]
            parts = split([run[cell] for run in runs if cell in run])
            between = f"{100 * parts[1]:.1f}%" if parts else ""
            label = f"{cell[0]} 1x{cell[1]}"
            print(f"{name:<11} {label:<22} {1000 * np.median(medians):9.2f} {100 * (max(medians) / min(medians) - 1):8.1f}% {between:>8}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
