"""A full disk: rows appended whole or not at all under a real file-size limit, and a full disk recognised and told in
one line wherever it surfaces (an OSError, a kernel's exception as papermill reports it, a library's own wording)."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from papermill.exceptions import PapermillExecutionError

from benchlib.paths import PROJECT_ROOT
from benchlib.store.disk import DiskFullError, disk_full, is_disk_full, raise_if_disk_full
from benchlib.store.results import ReceivedRows, csv_record, make_row, split_records

LIMIT = 20_000  # bytes: a results.csv of about 20 rows

# Appends rows until the file-size limit refuses one, then prints the error's line.
APPEND = """
import sys
from pathlib import Path
from benchlib.store.disk import DiskFullError
from benchlib.store.results import ReceivedRows, ResultsWriter, csv_record
from tests.store.test_disk import ROWS

folder, how = Path(sys.argv[1]), sys.argv[2]
try:
    if how == "writer":
        with ResultsWriter(folder) as writer:
            for row in ROWS:
                writer.append(row)
    else:
        ReceivedRows(folder).add([csv_record(row).decode() for row in ROWS])
except DiskFullError as full:
    print(full)
"""
ROWS = [make_row({"model": "gpt2", "batch_size": 1, "sequence_length": n}, "error", reason="x" * 700) for n in range(100)]


def file_of(count: int) -> bytes:
    """What a results.csv holds with the first `count` of ROWS."""
    return csv_record() + b"".join(csv_record(row) for row in ROWS[:count])


@pytest.mark.parametrize("how", ["writer", "received"])
def test_a_row_past_the_file_size_limit_leaves_the_file_as_it_was(tmp_path: Path, how: str) -> None:
    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))

    script = [sys.executable, "-c", textwrap.dedent(APPEND), str(tmp_path), how]
    child = subprocess.run(script, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, preexec_fn=limited)
    assert child.returncode == 0, child.stderr
    data = (tmp_path / "results.csv").read_bytes()
    records, rest = split_records(data.decode())
    written = len(records) - 1
    assert rest == "" and written > 0 and data == file_of(written) and len(file_of(written + 1)) > LIMIT  # whole rows only
    assert child.stdout.startswith(f"disk full: cannot write results.csv in {tmp_path} (a file reached the file-size limit, ulimit -f); ")
    assert "free there: raise the limit or write elsewhere, then rerun with the same --out" in child.stdout
    assert child.stdout.count("\n") == 1


def test_received_rows_keep_appending_after_a_refused_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    received = ReceivedRows(tmp_path)
    first, second = (csv_record(make_row({"model": "gpt2", "batch_size": 1, "sequence_length": n}, "ok")).decode() for n in (8, 16))
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:  # a record half written, then the disk is full
        monkeypatch.setattr(os, "write", real_write)
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(DiskFullError, match=r"^disk full: cannot write results.csv in .* \(no space left on the device\); "):
        received.add([first])
    assert received.text() == csv_record().decode()  # cut back to the header
    assert received.add([first, second]) and received.text() == csv_record().decode() + first + second


def test_a_full_disk_is_recognised_wherever_it_surfaces(tmp_path: Path) -> None:
    line = "disk full: cannot write results.csv in /run/cpu-pytorch (no space left on the device); 0 B free there: ..."
    kernel = PapermillExecutionError(4, 4, "rows = ...", "DiskFullError", line, [])
    assert str(disk_full(kernel, tmp_path)) == line  # as the kernel worded it
    for error in (
        OSError(errno.EFBIG, os.strerror(errno.EFBIG)),
        OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)),
        PapermillExecutionError(4, 4, "rows = ...", "OSError", f"[Errno {errno.ENOSPC}] No space left on device: '/x'", []),
        RuntimeError(f"Error while serializing: IoError(Os {{ code: {errno.ENOSPC}, kind: StorageFull }}): os error {errno.ENOSPC}"),
    ):
        assert is_disk_full(error)
        message = str(disk_full(error, tmp_path, "model.safetensors"))
        assert message.startswith(f"disk full: cannot write model.safetensors in {tmp_path} (") and "\n" not in message
    for error in (OSError(errno.ENOENT, "No such file or directory"), ValueError("bad value"), KeyError("x")):
        assert not is_disk_full(error) and disk_full(error, tmp_path) is None
        raise_if_disk_full(error, tmp_path)  # returns


def test_a_full_disk_names_the_file_that_could_not_be_written(tmp_path: Path) -> None:
    copy = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/tmp/scratch/summary.txt", None, str(tmp_path / "logs" / "summary.txt"))
    with pytest.raises(DiskFullError, match=rf"^disk full: cannot write summary.txt in {tmp_path / 'logs'} \(no space") as raised:
        raise_if_disk_full(copy, Path("/elsewhere"))
    assert raised.value.__cause__ is copy and "free there" in str(raised.value)
    wrapped = RuntimeError("a library's own error")
    wrapped.__cause__ = raised.value
    with pytest.raises(DiskFullError) as again:  # one raised already goes on as it was raised
        raise_if_disk_full(wrapped, Path("/elsewhere"))
    assert again.value is raised.value
