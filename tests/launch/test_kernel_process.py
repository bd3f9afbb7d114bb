"""The kit's kernels run `benchlib.launch.kernel_process`: ipykernel's launcher ending without the interpreter's teardown,
and nothing else changed (the threads a cell left joined, `atexit` handlers run, every line in the log, status 0)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from benchlib.launch.kernel import KernelWatch
from benchlib.launch.kernel_process import MODULE, kernel_command
from benchlib.launch.notebook import execute_notebook


def test_the_kernel_command_swaps_ipykernels_launcher_and_nothing_else() -> None:
    spec = ["/venv/bin/python", "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "/run/kernel-1.json"]
    assert kernel_command(spec) == ["/venv/bin/python", "-Xfrozen_modules=off", "-m", MODULE, "-f", "/run/kernel-1.json"]
    other = ["/opt/conda/bin/python", "-m", "other_kernel", "-f", "{connection_file}"]
    assert kernel_command(other) == other


# Cells that leave work for the kernel's end: an `atexit` handler, a thread still running, a line without its end in
# the process's own stdout (the log), then an error, as a failing notebook raises.
CELLS = [
    "import atexit, json, pathlib, sys, threading, time",
    "folder = pathlib.Path({folder!r})\n"
    "(folder / 'argv.json').write_text(json.dumps(sys.argv))\n"
    "atexit.register(lambda: (folder / 'atexit').write_text('ran'))",
    "threading.Thread(target=lambda: (time.sleep(1), (folder / 'thread').write_text('joined'))).start()",
    "sys.__stdout__.write('a line without its end')",
    "raise ValueError('the last cell fails')",
]


@pytest.mark.e2e
def test_a_kernel_ends_with_its_clean_up_done_and_its_log_whole(tmp_path: Path) -> None:
    notebook = tmp_path / "ends.ipynb"
    cells = [nbformat.v4.new_code_cell(source.format(folder=str(tmp_path))) for source in CELLS]
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": kernelspec}), notebook)
    log = tmp_path / "kernel.log"
    with KernelWatch(tmp_path) as watch:
        with pytest.raises(Exception) as failed:
            execute_notebook(notebook, tmp_path / "out.ipynb", {}, log, watch)
    assert getattr(failed.value, "ename", None) == "ValueError"  # the notebook's own error, as papermill reports it
    assert Path(json.loads((tmp_path / "argv.json").read_text())[0]).name == "kernel_process.py"
    assert watch.process is not None and watch.process.poll() == 0  # ended by itself: no signal
    assert (tmp_path / "atexit").read_text() == "ran" and (tmp_path / "thread").read_text() == "joined"
    assert "a line without its end" in log.read_text(encoding="utf-8")
