"""machine_limits.json: the machine's measured roofs, per device, in the run folder; and those measured today on this
machine, kept in the build cache for later runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from benchlib.store import cache
from benchlib.store.environment import write_json
from benchlib.store.layout import LIMITS_FILE, limits_notebook


def write_limits(run_dir: str | Path, limits: dict[str, Any]) -> Path:
    """Store `limits` in `<run_dir>/machine_limits.json` under its device, beside other devices' limits; returns the path."""
    path = Path(run_dir) / LIMITS_FILE
    stored = read_limits(run_dir) or {}
    stored[limits["device"]] = limits
    write_json(path, stored)
    return path


def read_limits(run_dir: str | Path, device: str | None = None) -> dict[str, Any] | None:
    """The limits stored in `<run_dir>/machine_limits.json`: those of `device`, or all of them keyed by device
    when `device` is None; None when the file (or that device's entry) is absent."""
    path = Path(run_dir) / LIMITS_FILE
    if not path.exists():
        return None
    stored = parse_limits(path.read_bytes())
    return stored if device is None else stored.get(device)


def parse_limits(data: bytes) -> dict[str, Any]:
    """The limits by device in the bytes of a machine_limits.json (a worker's, sent to the client)."""
    return json.loads(data)


# Limits measured on this machine today are reused by later runs (the build cache's `limits` entries): the same
# machine, CPUs, thread setting, code-path caps, torch and way of measuring give the same roofs, and measuring them
# again costs a fresh kernel and several seconds of full load per run. A disturbed measurement is never kept.
LIMITS_KIND = "limits"


def reuse_limits(run_dir: str | Path, device: str, key: dict[str, Any]) -> dict[str, Any] | None:
    """The limits kept in the build cache for `key`, written into `run_dir` (marked `reused`, with the record of their
    measurement beside them), or None where none are kept."""
    found = cache.find(LIMITS_KIND, device.replace(":", "-"), key)
    if found is None:
        return None
    limits = {**parse_limits((found.path / LIMITS_FILE).read_bytes())[device], "reused": True}
    shutil.copyfile(found.path / limits_notebook(".", device).name, limits_notebook(run_dir, device))
    write_limits(run_dir, limits)
    return limits


def keep_limits(run_dir: str | Path, device: str, key: dict[str, Any]) -> None:
    """Keep the limits of `device` just measured into `run_dir` for later runs, unless their measurement was disturbed."""
    limits = read_limits(run_dir, device)
    if limits is None or limits.get("disturbed") or limits.get("reused"):
        return

    def make(folder: Path) -> None:
        write_json(folder / LIMITS_FILE, {device: limits})
        shutil.copyfile(limits_notebook(run_dir, device), folder / limits_notebook(".", device).name)

    cache.artefact(LIMITS_KIND, device.replace(":", "-"), key, make)
