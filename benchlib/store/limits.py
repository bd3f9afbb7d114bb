"""machine_limits.json: the machine's measured roofs, per device, in the run folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchlib.store.environment import write_json
from benchlib.store.layout import LIMITS_FILE


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
