"""results.csv: one row per cell, appended and flushed as soon as the cell is done."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from benchlib import status
from benchlib.timing import Measurement

RESULTS_FILE = "results.csv"
ENVIRONMENT_FILE = "environment.json"

COLUMNS: tuple[str, ...] = (
    "environment", "framework", "mode", "device", "model", "model_scale",
    "batch_size", "sequence_length", "status",
    "mean_s", "median_s", "min_s", "std_s", "repeat", "number", "first_call_s", "samples_s",
    "reason",
    "iqr_s", "ci95_low_s", "ci95_high_s", "noisy", "stop_reason", "peak_memory_bytes",
)  # fmt: skip
CELL_KEY: tuple[str, ...] = ("model", "batch_size", "sequence_length")


def make_row(cell: dict[str, Any], state: str, measurement: Measurement | None = None, reason: str = "") -> dict[str, Any]:
    """A results row for `cell` (environment fields, model and shape) ending with `state`."""
    if state not in status.STATUSES:
        raise ValueError(f"status must be one of {', '.join(status.STATUSES)}, not {state!r}")
    row: dict[str, Any] = {column: "" for column in COLUMNS}
    row.update({key: value for key, value in cell.items() if key in row})
    row.update(status=state, reason=reason)
    if measurement is not None:
        row.update(
            mean_s=measurement.mean_s,
            median_s=measurement.median_s,
            min_s=measurement.min_s,
            std_s=measurement.std_s,
            repeat=len(measurement.samples_s),
            number=measurement.number,
            first_call_s=measurement.first_call_s,
            samples_s=json.dumps(list(measurement.samples_s)),
            iqr_s=measurement.iqr_s,
            ci95_low_s=_number_or_blank(measurement.ci95_s[0]),
            ci95_high_s=_number_or_blank(measurement.ci95_s[1]),
            noisy=measurement.noisy,
            stop_reason=measurement.stop_reason,
            peak_memory_bytes=_number_or_blank(measurement.peak_memory_bytes),
        )
    return row


def _number_or_blank(value: float | None) -> float | str:
    """`value`, or "" where there is none (a one-sample interval, an unmeasured peak)."""
    return "" if value is None or math.isnan(value) else value


class ResultsWriter:
    """Appends rows to `<output_dir>/results.csv`, each flushed to disk before the next cell."""

    def __init__(self, output_dir: str | os.PathLike[str]) -> None:
        self.path = Path(output_dir) / RESULTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        if not new:
            with open(self.path, newline="", encoding="utf-8") as existing:
                header = next(csv.reader(existing), [])
            if tuple(header) != COLUMNS:
                raise ValueError(
                    f"{self.path} has other columns than this version of benchlib writes; "
                    "measure again into a new folder, or set it aside with --force"
                )
        self._file = open(self.path, "a", newline="", encoding="utf-8")
        self._writer = csv.DictWriter(self._file, fieldnames=COLUMNS)
        if new:
            self._writer.writeheader()
            self._flush()

    def append(self, row: dict[str, Any]) -> None:
        self._writer.writerow(row)
        self._flush()

    def _flush(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_results(path: str | os.PathLike[str]) -> pd.DataFrame:
    """The rows of a results.csv (or of `<path>/results.csv`), `samples_s` parsed to lists."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"reason": str})
    frame["reason"] = frame["reason"].fillna("")
    frame["samples_s"] = [json.loads(s) if isinstance(s, str) and s else [] for s in frame["samples_s"]]
    return frame


def finished_cells(rows: pd.DataFrame) -> set[tuple[str, int, int]]:
    """(model, batch_size, sequence_length) of every row in `rows`."""
    return set(zip(rows["model"], rows["batch_size"].astype(int), rows["sequence_length"].astype(int)))


def results_table(rows: pd.DataFrame, value: str = "mean_s") -> pd.DataFrame:
    """Model × (batch, sequence): the `value` of `ok` cells, the status of every other cell."""
    cells = rows.assign(shape=[f"{b}x{s}" for b, s in zip(rows["batch_size"], rows["sequence_length"])])
    cells["cell"] = [
        f"{v:.4g}" if st == status.OK else st for v, st in zip(cells[value], cells["status"])
    ]
    order = sorted(set(zip(rows["batch_size"], rows["sequence_length"])))
    table = cells.pivot_table(index="model", columns="shape", values="cell", aggfunc="last", sort=False)
    return table.reindex(columns=[f"{b}x{s}" for b, s in order]).fillna("")


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")

