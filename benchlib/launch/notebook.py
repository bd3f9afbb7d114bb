"""Every papermill execution of the kit: a notebook run as a function, in a fresh kernel whose own messages
go to a log file, with the runner's PID handed to the kernel."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from benchlib import status
from benchlib.launch.kernel import KernelWatch
from benchlib.launch.kernel_process import KitKernelCommand
from benchlib.store.disk import raise_if_disk_full
from benchlib.store.recovery import RUNNER_PID_ENV


def execute_notebook(
    notebook: Path, output: Path, parameters: dict[str, Any], log: Path, watch: KernelWatch | None = None, environment: dict[str, str] | None = None,
) -> None:  # fmt: skip
    """Execute `notebook` with `parameters` injected into a fresh kernel, the executed copy written to `output`;
    the kernel works in the notebook's folder, starts with `environment` over this process's variables and writes its
    stdout and stderr to `log`. Raises what papermill raises (the notebook's own exception, or a dead kernel's); a full
    disk met writing `output` (papermill writes it as the cells run) as a DiskFullError. However it ends, its kernel has
    ended (`kill_left_kernels`)."""
    import papermill

    managers: list[Any] = []
    try:
        papermill.execute_notebook(
            str(notebook), str(output), parameters=parameters, cwd=str(notebook.parent), progress_bar=False,
            kernel_manager_class=kernel_manager_logging_to(log, watch, environment, managers),
        )  # fmt: skip
    except OSError as exc:  # raised in this process: papermill's own writes
        raise_if_disk_full(exc, output.parent, output.name)
        raise
    finally:
        kill_left_kernels(managers)


def kill_left_kernels(managers: list[Any]) -> None:
    """Kill the kernel of each of `managers` still running. papermill shuts its kernel down once the kernel is ready; an
    interrupt that comes while the kernel starts (nbclient's `setup_kernel`, before its clean-up is armed) would leave
    the kernel running until its parent poller sees the runner gone, a second or more later."""
    for manager in managers:
        process = getattr(getattr(manager, "provisioner", None), "process", None)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


def describe_failure(exc: BaseException) -> str:
    """One line for a failed execution: the notebook's own exception where papermill reports one."""
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename:
        message = " ".join(str(evalue).split())
        return f"{ename}: {message}" if message else str(ename)
    return status.describe(exc)


def kernel_manager_logging_to(
    path: Path, watch: KernelWatch | None = None, environment: dict[str, str] | None = None, managers: list[Any] | None = None,
) -> type:  # fmt: skip
    """A kernel manager class whose kernels write their process's stdout and stderr to `path`, started with `environment`
    (variables a runtime reads when it loads) over this process's; each manager that starts a kernel is added to
    `managers`, before the kernel's process exists.

    Framework start-up messages then stay out of the console and remain for a post-mortem.
    With `watch`, the kernel's process is handed to it when the kernel starts. The kernel gets this
    process's PID in RUNNER_PID_ENV, which marks its cells in flight as a runner's (`resolve_in_flight`).

    A kernel ends with the process that started it, even one killed by SIGKILL: jupyter_client passes
    that PID to the kernel (JPY_PARENT_PID), and ipykernel's ParentPollerUnix, a thread of the kernel,
    polls its parent every second and exits once it has changed. That follows the process, not the
    thread that started the kernel, so it holds as well for a Dask worker, which runs environments in
    one of its threads; Linux's PR_SET_PDEATHSIG would kill the kernel when that thread ends, and would
    need Popen's preexec_fn, which is unsafe in a process with threads. tests/launch/test_runner_death.py
    checks it, since the folder's lock (held by the kernel) depends on it.

    The kernel's process is `kernel_process`'s (ipykernel's launcher, which ends without the interpreter's teardown).
    """
    from jupyter_client import AsyncKernelManager

    class LoggingKernelManager(KitKernelCommand, AsyncKernelManager):
        async def start_kernel(self, **kw: Any) -> None:
            if managers is not None:
                managers.append(self)
            with open(path, "ab") as log:  # the kernel process keeps its own copy of the descriptor
                await super().start_kernel(stdout=log, stderr=log, env={**os.environ, **(environment or {}), RUNNER_PID_ENV: str(os.getpid())}, **kw)
            if watch is not None:
                watch.process = getattr(self.provisioner, "process", None)  # a local kernel's Popen

    return LoggingKernelManager
