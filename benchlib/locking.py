"""One writer per environment folder: a second run on a folder in use is refused."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = ".lock"


class FolderInUseError(RuntimeError):
    """Another process is writing into this environment folder."""


@contextlib.contextmanager
def environment_lock(output_dir: Path) -> Iterator[None]:
    """Hold `<output_dir>/.lock` while writing; FolderInUseError if another process holds it.

    The lock is the operating system's (flock): it ends with the process that held it,
    so a killed kernel never leaves a folder locked.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    with open(output_dir / LOCK_FILE, "a+", encoding="utf-8") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            holder = file.read().strip() or "another process"
            raise FolderInUseError(
                f"{output_dir} is in use by {holder}; wait for that run to finish, or write to another folder (--out)"
            ) from None
        file.seek(0)
        file.truncate()
        file.write(f"pid {os.getpid()}")
        file.flush()
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def check_free(output_dir: Path) -> None:
    """Raise FolderInUseError now if another process is writing into `output_dir`."""
    if (Path(output_dir) / LOCK_FILE).exists():
        with environment_lock(output_dir):
            pass
