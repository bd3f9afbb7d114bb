"""Nothing lost: the cell in flight, rows cut off by a killed process, results set aside by --force."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

from benchlib import status
from benchlib.results import RESULTS_FILE, ResultsWriter, make_row

IN_FLIGHT_FILE = "in_flight.json"
CUTOFF_FILE = "results.cutoff.txt"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def mark_in_flight(output_dir: Path, cell: dict[str, Any]) -> None:
    """Record, durably, that `cell` (environment fields, model and shape) is being measured."""
    path = Path(output_dir) / IN_FLIGHT_FILE
    temporary = path.with_suffix(".tmp")
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump({**cell, "started": _now(), "pid": os.getpid()}, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def clear_in_flight(output_dir: Path) -> None:
    """The cell in flight has its row: forget it."""
    (Path(output_dir) / IN_FLIGHT_FILE).unlink(missing_ok=True)


def read_in_flight(output_dir: Path) -> dict[str, Any] | None:
    """The cell that was being measured when the kernel stopped, if any."""
    path = Path(output_dir) / IN_FLIGHT_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def record_crash(output_dir: Path, reason: str) -> dict[str, Any] | None:
    """Write a `crashed` row for the cell in flight (if any) and clear the marker; return that cell."""
    cell = read_in_flight(output_dir)
    if cell is None:
        return None
    repair_results(Path(output_dir) / RESULTS_FILE)
    with ResultsWriter(output_dir) as writer:
        writer.append(make_row(cell, status.CRASHED, reason=f"{reason} (measuring since {cell.get('started', '?')})"))
    clear_in_flight(output_dir)
    return cell


def repair_results(path: Path) -> str | None:
    """Cut a last row left unfinished by a killed process off `path`, keeping it in results.cutoff.txt.

    Returns the fragment that was set aside, or None when the file was whole.
    """
    path = Path(path)
    if not path.exists():
        return None
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return None
    keep = data.rfind(b"\n") + 1
    fragment = data[keep:].decode("utf-8", errors="replace")
    with open(path.parent / CUTOFF_FILE, "a", encoding="utf-8") as file:
        file.write(f"# {_now()}: cut off the end of {path.name}\n{fragment}\n")
    with open(path, "r+b") as file:
        file.truncate(keep)
        file.flush()
        os.fsync(file.fileno())
    return fragment


def set_aside_results(output_dir: Path) -> Path | None:
    """Move an environment's results.csv to results.<timestamp>.csv (for --force); return the new path."""
    path = Path(output_dir) / RESULTS_FILE
    if not path.exists():
        return None
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"results.{stamp}.csv")
    os.replace(path, target)
    clear_in_flight(output_dir)
    return target
