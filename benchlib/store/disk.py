"""A full disk while the kit writes: appends that land whole or not at all, a full disk recognised wherever it surfaces
(an OSError, or a kernel's or papermill's failure that names one), and told in one line (`DiskFullError`) that names
the folder, what could not be written there and the space left, so that the run stops instead of recording cells."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec

P = ParamSpec("P")
DISK_FULL_STATUS = 1  # the exit status of a command stopped by a full disk

# A write refused for want of room: (how the line words it, what to do before the rerun).
DISK_FULL_ERRNOS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on the device", "free space"),
    errno.EFBIG: ("a file reached the file-size limit, ulimit -f", "raise the limit or write elsewhere"),
    errno.EDQUOT: ("the disk quota is used up", "free space within the quota"),
}


class DiskFullError(RuntimeError):
    """A write failed because the disk is full, a file reached the file-size limit, or the quota is used up; the
    message is the one line to show, and the run stops (the next cells and environments would fail the same way)."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it in a notebook (the record, which papermill writes on the same disk): the line alone."""
        return [f"{type(self).__name__}: {self}"]


def size_text(count: float) -> str:
    """Bytes as people read them: 512 B, 3.4 MB, 6.5 GB."""
    for unit in ("B", "kB", "MB"):
        if count < 1000:
            return f"{count:.0f} B" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} GB"


def free_space(folder: Path) -> str:
    """'51.2 GB free there': the room left on the file system of `folder` (or of its nearest existing parent)."""
    for place in (folder, *folder.parents):
        with contextlib.suppress(OSError):
            return f"{size_text(shutil.disk_usage(place).free)} free there"
    return "free space there unknown"


def disk_full_message(folder: Path, what: str, code: int) -> str:
    """The one line for a write of `what` (a file's name, or "" for any) in `folder` refused with errno `code`."""
    reason, advice = DISK_FULL_ERRNOS[code]
    target = f"{what} in {folder}" if what else f"in {folder}"
    return (
        f"disk full: cannot write {target} ({reason}); {free_space(folder)}: {advice}, "
        "then rerun with the same --out to measure only what is missing"
    )


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the exceptions it was raised from or while handling, each once."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        link = todo.pop(0)
        if link is not None and all(link is not other for other in seen):
            seen.append(link)
            todo += [link.__cause__, link.__context__]
    return seen


def _code_in(text: str) -> int | None:
    """The disk-full errno that a message names (`[Errno 28]`, `os error 27`, or the C library's wording), or None."""
    return next((code for code in DISK_FULL_ERRNOS if f"[Errno {code}]" in text or f"os error {code}" in text or os.strerror(code) in text), None)


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from) is a write refused for want of room: a DiskFullError, an OSError with
    errno ENOSPC, EFBIG or EDQUOT, or a failure whose message names one (a kernel's exception as papermill reports it,
    a library's own error type wrapping the OS's)."""
    return disk_full(exc, Path()) is not None


def disk_full(exc: BaseException, folder: Path, what: str = "") -> DiskFullError | None:
    """`exc` as a DiskFullError, or None when it is no full disk. A DiskFullError's line is kept as worded where it was
    raised (in a kernel too: papermill reports its name and message); an OSError that names its file is told by that
    file; any other by `what` in `folder`."""
    for link in _chain(exc):
        ename, evalue = getattr(link, "ename", None), str(getattr(link, "evalue", ""))
        if isinstance(link, DiskFullError):
            return link
        if ename == DiskFullError.__name__:
            return DiskFullError(evalue)
        if isinstance(link, OSError) and link.errno in DISK_FULL_ERRNOS:
            named = link.filename2 or link.filename  # shutil's copies name the destination second
            if isinstance(named, (str, os.PathLike)):
                return DiskFullError(disk_full_message(Path(named).parent, Path(named).name, link.errno))
            return DiskFullError(disk_full_message(folder, what, link.errno))
        if (code := _code_in(evalue if ename else str(link))) is not None:
            return DiskFullError(disk_full_message(folder, what, code))
    return None


def raise_if_disk_full(exc: BaseException, folder: Path, what: str = "") -> None:
    """Raise `exc` as a DiskFullError (`disk_full`) when it is a full disk (one raised already: as it was); otherwise return."""
    full = disk_full(exc, folder, what)
    if full is None:
        return
    if any(full is link for link in _chain(exc)):
        raise full
    raise full from exc


def append_whole(fd: int, data: bytes, path: Path) -> None:
    """Append `data` to the file open at `fd` (in append mode, unbuffered) with one write, flushed to disk, or not at
    all: on an OSError the file is cut back to its size before the write, and the error raised (a full disk as a
    DiskFullError naming `path`). No torn record stays behind."""
    size = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:  # a write stopped short (at a file-size limit) is continued, so that the limit raises
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a file that cannot be cut back is repaired on resume (repair_results)
            os.ftruncate(fd, size)
        raise_if_disk_full(exc, path.parent, path.name)
        raise


def stops_on_full_disk(command: Callable[P, int]) -> Callable[P, int]:
    """`command` (which returns an exit status), ended by a DiskFullError with its one line on stderr (no traceback)
    and DISK_FULL_STATUS."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            return command(*args, **kwargs)
        except DiskFullError as full:
            with contextlib.suppress(OSError):  # stderr may be a file on the full disk
                print(full, file=sys.stderr, flush=True)
            return DISK_FULL_STATUS

    return run
