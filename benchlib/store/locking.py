"""One writer per environment folder: a second run on a folder in use is refused."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import psutil

from benchlib.store.layout import LOCK_FILE

EXIT_WAIT_S = 10.0  # how long a holder that is exiting may keep the lock


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
        if not _acquire(file):
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


def _holder_exiting(file: IO[str]) -> bool:
    """Whether the process named in the lock file is exiting: its main thread has ended (a zombie) while
    its other threads are still being torn down, holding the lock for a moment (a kernel whose runner died)."""
    file.seek(0)
    match = re.fullmatch(r"pid (\d+)", file.read().strip())
    try:
        return bool(match) and psutil.Process(int(match.group(1))).status() == psutil.STATUS_ZOMBIE
    except psutil.ZombieProcess:
        return True
    except psutil.Error:
        return False


def _acquire(file: IO[str]) -> bool:
    """Take the lock on `file` without waiting, or after a holder that is exiting has gone (up to EXIT_WAIT_S)."""
    deadline = time.monotonic() + EXIT_WAIT_S
    while True:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if not _holder_exiting(file) or time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def check_free(output_dir: Path) -> None:
    """Raise FolderInUseError now if another process is writing into `output_dir`."""
    if (Path(output_dir) / LOCK_FILE).exists():
        with environment_lock(output_dir):
            pass
