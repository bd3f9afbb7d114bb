"""The process of every kernel the kit starts (`python -m benchlib.launch.kernel_process -f CONNECTION_FILE`):
ipykernel's own launcher, ending without the interpreter's teardown once the kernel has shut down.

A kernel asked to shut down leaves ipykernel's loop and then, as any Python process does at its end, tears down
every module it imported: with PyTorch and transformers loaded that takes a second or two of CPU (TensorFlow's
more), on every environment of a run, before the next kernel may start. Here the kernel does what the interpreter's
end does first (waits for the threads a cell left running, runs the `atexit` handlers, so every library's own
clean-up happens) and ends with status 0, skipping the teardown, which writes nothing: ipykernel has flushed the
kernel's output by then, so its log keeps every line. A kernel that fails to start, or raises, ends as ipykernel's
launcher would.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from pathlib import Path

MODULE = "benchlib.launch.kernel_process"  # what `python -m` is given in place of ipykernel's launcher


def kernel_command(command: list[str]) -> list[str]:
    """A kernel spec's command (`python -m ipykernel_launcher -f ...`) with this module in place of ipykernel's
    launcher; any other command unchanged."""
    for index in range(len(command) - 1):
        if command[index] == "-m" and command[index + 1] == "ipykernel_launcher":
            return [*command[: index + 1], MODULE, *command[index + 2 :]]
    return command


class KitKernelCommand:
    """A jupyter_client kernel manager's mixin (first among its bases): its kernels start as this module's process."""

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        return kernel_command(super().format_kernel_cmd(extra_arguments))  # type: ignore[misc]


def main() -> None:
    """ipykernel's launcher (the current folder off `sys.path` while it loads, as there), then the quick end."""
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter's end does first: join the threads a cell left
    atexit._run_exitfuncs()
    os._exit(0)


if __name__ == "__main__":
    main()
