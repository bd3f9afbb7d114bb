"""The build cache: what is made from a model once (its seeded random weights, the ONNX export, the int8
quantization, the OpenVINO model) and reused by later rounds and runs on this machine.

One folder: `$BENCHLIB_CACHE`, or the user's cache directory (`~/.cache/benchlib` on Linux). An entry is a
folder `<kind>/<label>-<digest>/`, the digest a hash of everything that changes the artefact (its key: model
and configuration, seed, precision, opset, package versions, the entry it was made from). It holds the
artefact's files and `entry.json` (the key, and how many seconds making it took).

An entry is made in a hidden folder beside it and renamed into place whole, so that a process killed
while making it leaves only a hidden folder that no one reads (`clear` removes it). Two processes asking
for one entry at once take its lock file (`fcntl.flock`, released by the system if the holder dies): the
second waits, then finds the entry made.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

CACHE_VARIABLE = "BENCHLIB_CACHE"
ENTRY_FILE = "entry.json"
PARTIAL = ".partial-"  # prefix of an entry being made
LOCK_SUFFIX = ".lock"
# Folders the compilers fill themselves (torch.compile's inductor, XLA's persistent cache): listed and cleared whole.
COMPILER_CACHES: tuple[str, ...] = ("inductor", "xla")


def cache_root() -> Path:
    """The cache folder: `$BENCHLIB_CACHE`, or the user's cache directory."""
    return Path(os.environ.get(CACHE_VARIABLE) or platformdirs.user_cache_dir("benchlib")).expanduser()


def compiler_cache(name: str, root: Path | None = None) -> Path:
    """The folder of compiler cache `name` (one of COMPILER_CACHES) in the cache."""
    return (cache_root() if root is None else root) / name


def digest(key: dict[str, Any]) -> str:
    """A short hash of `key` (its JSON, keys sorted): equal keys, equal digests."""
    text = json.dumps(key, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Artefact:
    """An entry of the cache, as a build asked for it."""

    path: Path  # the entry's folder, <label>-<digest>
    cached: bool  # True: found made; False: made now
    made_s: float  # seconds making it took (now, or when it was made)

    @property
    def label(self) -> str:
        return self.path.name.rpartition("-")[0]

    @property
    def digest(self) -> str:
        return self.path.name.rpartition("-")[2]


_RECORD: ContextVar[list[Artefact] | None] = ContextVar("benchlib_cache_record", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[Artefact]]:
    """Inside, every artefact asked for (made or found) is appended to the list yielded: what a build cost."""
    found: list[Artefact] = []
    token = _RECORD.set(found)
    try:
        yield found
    finally:
        _RECORD.reset(token)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on file `path` (waits for another holder; released when the holder dies)."""
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_entry(folder: Path) -> dict[str, Any] | None:
    """The entry.json of a complete entry, or None where there is none."""
    try:
        return json.loads((folder / ENTRY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _folder(kind: str, label: str, key: dict[str, Any], root: Path | None) -> Path:
    """Where the entry of `kind` for `key` lives."""
    return (cache_root() if root is None else root) / kind / f"{label}-{digest(key)}"


def record(found: Artefact) -> Artefact:
    """`found` (an artefact asked for in another process), appended to the list of the `recording` in force, if any."""
    if (record := _RECORD.get()) is not None:
        record.append(found)
    return found


def find(kind: str, label: str, key: dict[str, Any], root: Path | None = None) -> Artefact | None:
    """The entry of `kind` for `key` when it is in the cache (recorded as `artefact` records it), else None."""
    found = _found(_folder(kind, label, key, root))
    return record(found) if found else None


def artefact(kind: str, label: str, key: dict[str, Any], make: Callable[[Path], None], root: Path | None = None) -> Artefact:
    """The entry of `kind` for `key`, made by `make(folder)` (which writes the artefact's files into `folder`)
    unless it is in the cache already. `label` names the entry for people (model and scale)."""
    folder = _folder(kind, label, key, root)
    found = _found(folder)
    if found is None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with _locked(folder.parent / f".{folder.name}{LOCK_SUFFIX}"):
            found = _found(folder) or _make(folder, kind, key, make)
    return record(found)


def _found(folder: Path) -> Artefact | None:
    """The complete entry at `folder`, its last use set to now; None when there is none."""
    entry = _read_entry(folder)
    if entry is None:
        return None
    with contextlib.suppress(OSError):  # a cache shared read-only is still used
        os.utime(folder / ENTRY_FILE)  # last used: what `clear --older-than` goes by
    return Artefact(folder, True, float(entry.get("made_s", 0.0)))


def _make(folder: Path, kind: str, key: dict[str, Any], make: Callable[[Path], None]) -> Artefact:
    """Make the entry at `folder` in a hidden folder beside it, then rename it into place (the lock is held)."""
    if folder.exists():  # a folder without entry.json was not made by this module: never trusted
        shutil.rmtree(folder)
    partial = Path(tempfile.mkdtemp(prefix=f"{PARTIAL}{folder.name}-", dir=folder.parent))
    try:
        start = time.perf_counter()
        make(partial)
        made_s = time.perf_counter() - start
        entry = {"kind": kind, "key": key, "made_s": made_s, "made": time.time()}
        (partial / ENTRY_FILE).write_text(json.dumps(entry, indent=1, sort_keys=True, default=str), encoding="utf-8")
        os.rename(partial, folder)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return Artefact(folder, False, made_s)


@dataclass(frozen=True)
class Entry:
    """An entry as `python -m benchlib cache` lists it."""

    kind: str
    name: str
    path: Path
    bytes: int
    made: float  # when it was made (seconds since the epoch)
    used: float  # when it was last used
    made_s: float
    partial: bool  # left by a process that was killed while making it


def folder_bytes(folder: Path) -> int:
    """Bytes of every file under `folder`."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def entries(root: Path | None = None) -> list[Entry]:
    """Every entry of the cache, complete or left half-made, oldest use first."""
    root = cache_root() if root is None else root
    found = []
    for kind in sorted(path for path in root.glob("*") if path.is_dir()):
        if kind.name in COMPILER_CACHES:
            used = max((path.stat().st_mtime for path in kind.rglob("*")), default=kind.stat().st_mtime)
            found.append(Entry(kind.name, kind.name, kind, folder_bytes(kind), kind.stat().st_ctime, used, 0.0, False))
            continue
        for folder in sorted(path for path in kind.iterdir() if path.is_dir()):
            entry = _read_entry(folder)
            partial = folder.name.startswith(PARTIAL)
            if entry is None and not partial:
                continue
            stamp = (folder / ENTRY_FILE).stat().st_mtime if entry else folder.stat().st_mtime
            made = float(entry["made"]) if entry else stamp
            found.append(Entry(kind.name, folder.name, folder, folder_bytes(folder), made, stamp, float((entry or {}).get("made_s", 0.0)), partial))
    return sorted(found, key=lambda entry: entry.used)


def _being_made(entry: Entry) -> bool:
    """Whether a live process holds the lock of the half-made `entry` (it is still making it)."""
    name = entry.name[len(PARTIAL) :].rsplit("-", 1)[0]
    lock = entry.path.parent / f".{name}{LOCK_SUFFIX}"
    if not lock.exists():
        return False
    with open(lock, "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def clear(older_than_days: float | None = None, root: Path | None = None, now: float | None = None) -> list[Entry]:
    """Remove the entries not used for `older_than_days` days (all when None), and every half-made entry whose
    maker is gone; returns what was removed. An entry still being made is left alone."""
    now = time.time() if now is None else now
    removed = []
    for entry in entries(root):
        if entry.partial and _being_made(entry):
            continue
        if entry.partial or older_than_days is None or now - entry.used > older_than_days * 86400:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry)
    return removed
