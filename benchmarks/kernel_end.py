"""How long a kernel takes to end once its notebook has run, with ipykernel's launcher and with the kit's
(`benchlib.launch.kernel_process`): a rerunnable check.

For each load (nothing, PyTorch with transformers, TensorFlow with transformers), starts `--kernels` kernels of each
launcher in turn from the kit's kernel spec, runs the load's imports and a tiny model in it, then asks the kernel to
shut down as papermill does (`shutdown_kernel(now=False)`) and times that, to the process's end. Prints, per load and
launcher, the median start, run and end, and the end's ratio.

Run it on a quiet machine, on one core to see the slowest type's side of it:

    taskset -c 0 .venv/bin/python benchmarks/kernel_end.py --kernels 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from jupyter_client import KernelManager

from benchlib.launch.kernel_process import KitKernelCommand

LOADS = {
    "nothing": "x = 1",
    "pytorch": "from benchlib.backends.pytorch import use_torch\nuse_torch()\nimport torch, transformers\n"
    "model = transformers.GPT2Model(transformers.GPT2Config(n_layer=2))\nmodel(torch.tensor([[1, 2, 3]]))",
    "tensorflow": "import tensorflow as tf, transformers\n"
    "model = transformers.TFGPT2Model(transformers.GPT2Config(n_layer=2))\nmodel(tf.constant([[1, 2, 3]]))",
}


class KitKernelManager(KitKernelCommand, KernelManager):
    """A kernel manager starting the kit's kernel process, as `benchlib.launch.notebook`'s does."""


def one_kernel(manager_class: type[KernelManager], code: str) -> tuple[float, float, float]:
    """Seconds to start a kernel, run `code` in it and end it."""
    start = time.perf_counter()
    manager = manager_class(kernel_name="python3")
    manager.start_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=120)
    started = time.perf_counter()
    reply = client.execute_interactive(code, timeout=300, output_hook=lambda message: None)
    assert reply["content"]["status"] == "ok", reply["content"]
    ran = time.perf_counter()
    manager.shutdown_kernel(now=False)
    ended = time.perf_counter()
    client.stop_channels()
    return started - start, ran - started, ended - ran


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=5, help="kernels per load and launcher")
    parser.add_argument("--loads", default=",".join(LOADS))
    args = parser.parse_args()
    launchers = {"ipykernel": KernelManager, "kit": KitKernelManager}
    print(f"{'load':<11} {'launcher':<10} {'start s':>8} {'run s':>7} {'end s':>7}")
    for load in args.loads.split(","):
        times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in launchers}
        for _ in range(args.kernels):  # the launchers in turn, so that a drift of the machine falls on both
            for name, manager_class in launchers.items():
                times[name].append(one_kernel(manager_class, LOADS[load]))
        for name, rows in times.items():
            start, run, end = (statistics.median(column) for column in zip(*rows))
            print(f"{load:<11} {name:<10} {start:8.2f} {run:7.2f} {end:7.2f}")
        ends = [statistics.median(row[2] for row in times[name]) for name in launchers]
        print(f"{load:<11} the kit's end takes {ends[1] / ends[0]:.2f} of ipykernel's ({ends[0] - ends[1]:.2f} s less a kernel)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
