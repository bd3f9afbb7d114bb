"""The PyTorch worker of TensorFlow's kernels (`python -m benchlib.backends._reference`), as the kernel sees it."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys

from benchlib.paths import PROJECT_ROOT


def test_a_worker_interrupted_as_it_waits_ends_with_status_130_and_no_traceback() -> None:
    """jupyter_client interrupts a kernel's process group as it shuts the kernel down: the worker, waiting for its next
    request, ends then without writing a traceback into the kernel's log. A request it cannot answer is answered with
    the error, and the worker waits for the next."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "benchlib.backends._reference"], cwd=PROJECT_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert worker.stdin is not None and worker.stdout is not None and worker.stderr is not None
    try:
        pickle.dump(("nothing", ()), worker.stdin)
        worker.stdin.flush()
        assert pickle.load(worker.stdout) == (False, "KeyError: 'nothing'")  # answered: it waits for the next request now
        worker.send_signal(signal.SIGINT)
        assert worker.wait(timeout=60) == 130
        assert "Traceback" not in worker.stderr.read().decode()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
