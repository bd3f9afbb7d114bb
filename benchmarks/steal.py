"""Which environments does the host's steal reach? A rerunnable check, for virtual machines.

Starts one process per environment, each with one model built by the kit's backend (the `quick`
grid's settings) and its forward call prepared, then runs them in alternation, `--seconds` at a
time, `--segments` times: only one calls at a time, and the host's load changes slowly, so the
environments meet the same host. Per segment it prints the time per call and, from Linux
`/proc/stat` over the whole machine, the share of its CPU capacity that was idle and that was
stolen by the hypervisor; then each environment's totals. An environment whose threads sleep
between operations leaves its CPUs idle, and each wake-up of an idle virtual CPU waits for the
host: its segments show idle time and steal together.

Run it on a quiet machine; never beside other work:

    .venv/bin/python benchmarks/steal.py --environments cpu-tensorflow,cpu-pytorch --model bert-base-cased
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from benchlib.paths import PROJECT_ROOT

WORKER = """
import sys, tempfile, time
from pathlib import Path
from benchlib.backends import load_backend
from benchlib.config.jobs import plan_run
from benchlib.workloads import forward
from benchlib.workloads.inputs import cell_inputs

environment, model, sequence_length = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = plan_run(Path(tempfile.mkdtemp(prefix="steal-")), "quick", [environment])[0].params
backend = load_backend(p.framework, p.mode, p.device, p.num_threads, p.num_interop_threads, precision=p.precision,
                       options=p.options, seed=p.seed, workload=p.workload)
spec = p.model_spec(model)
built = backend.build(spec, p.model_scale)
ids = cell_inputs(spec, p.model_scale, p.inputs, p.text_file, 1, sequence_length, p.seed)
call = forward.prepare_call(backend, built, backend.as_inputs(ids.ids))
for _ in range(5):
    backend.sync(call())
print("ready", flush=True)
for line in sys.stdin:
    end, calls = time.perf_counter() + float(line), 0
    while time.perf_counter() < end:
        backend.sync(call())
        calls += 1
    print(calls, flush=True)
"""


def idle_and_steal() -> tuple[int, int, int]:
    """The machine's idle and steal clock ticks so far, and how many CPUs it has (/proc/stat)."""
    with open("/proc/stat", encoding="ascii") as stat:
        lines = stat.read().splitlines()
    values = [int(x) for x in lines[0].split()[1:9]]
    cpus = sum(1 for line in lines if line.startswith("cpu") and not line.startswith("cpu "))
    return values[3], values[7], cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--environments", default="cpu-tensorflow,cpu-pytorch", help="comma-separated environment names")
    parser.add_argument("--model", default="bert-base-cased", help="a catalogue model")
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of one segment")
    parser.add_argument("--segments", type=int, default=12, help="segments per environment")
    args = parser.parse_args()
    hz = os.sysconf("SC_CLK_TCK")  # /proc/stat's clock ticks per second
    workers = {}
    for environment in args.environments.split(","):
        command = [sys.executable, "-c", WORKER, environment, args.model, str(args.sequence_length)]
        workers[environment] = subprocess.Popen(command, cwd=PROJECT_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for environment, worker in workers.items():
        if worker.stdout.readline().strip() != "ready":
            sys.exit(f"{environment}: the worker did not start (its error is above)")
    totals = {environment: [0.0, 0.0, 0.0] for environment in workers}  # idle ticks, steal ticks, capacity in ticks
    for segment in range(args.segments):
        for environment, worker in workers.items():
            idle0, steal0, cpus = idle_and_steal()
            began = time.perf_counter()
            worker.stdin.write(f"{args.seconds}\n")
            worker.stdin.flush()
            calls = int(worker.stdout.readline())
            seconds = time.perf_counter() - began
            idle1, steal1, _ = idle_and_steal()
            capacity = cpus * seconds * hz
            total = totals[environment]
            total[0], total[1], total[2] = total[0] + idle1 - idle0, total[1] + steal1 - steal0, total[2] + capacity
            print(
                f"{segment:3d} {environment:24s} {1000 * seconds / max(calls, 1):8.1f} ms/call  "
                f"idle {100 * (idle1 - idle0) / capacity:5.1f}%  steal {100 * (steal1 - steal0) / capacity:5.1f}%",
                flush=True,
            )
    for environment, (idle, steal, capacity) in totals.items():
        print(f"{environment}: idle {100 * idle / capacity:.1f}%, steal {100 * steal / capacity:.2f}% of the machine over its segments")
    for worker in workers.values():
        worker.stdin.close()
        worker.wait()


if __name__ == "__main__":
    main()
