"""results.csv: one row per cell, appended and flushed as soon as the cell is done."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
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
    "attempt", "interference", "disturbed", "probe_s", "warmup_calls", "prepare_s", "attn_implementation", "round",
    "flops", "precision", "max_abs_diff", "options",
)  # fmt: skip
CELL_KEY: tuple[str, ...] = ("model", "batch_size", "sequence_length")
# A cell measured in one round: rows of a file written before rounds existed are round 1.
ROUND_KEY: tuple[str, ...] = (*CELL_KEY, "round")
# Columns that every row has; a row without them was cut off and is not a finished cell.
_REQUIRED: tuple[str, ...] = (*CELL_KEY, "status")


def make_row(cell: dict[str, Any], state: str, measurement: Measurement | None = None, reason: str = "") -> dict[str, Any]:
    """A results row for `cell` (environment fields, model, shape and any other column the sweep knows) ending with `state`."""
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
            prepare_s=_number_or_blank(measurement.prepare_s),
            warmup_calls=measurement.warmup_calls,
            interference="" if measurement.interference is None else round(measurement.interference.fraction, 4),
            max_abs_diff=_number_or_blank(measurement.max_abs_diff),
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


def read_results(path: str | os.PathLike[str], every_attempt: bool = False) -> pd.DataFrame:
    """The rows of a results.csv (or of `<path>/results.csv`), `samples_s` parsed to lists.

    A cell measured more than once (a disturbed cell measured again) has one row per attempt in
    the file; by default only the kept one is returned (`kept_attempts`), with `attempts` added.
    A file written before a column existed reads with that column empty.
    """
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype={"reason": str})
    extra = [column for column in frame.columns if column not in COLUMNS]
    frame = frame.reindex(columns=[*COLUMNS, *extra])
    frame["reason"] = frame["reason"].fillna("")
    frame["precision"] = frame["precision"].astype(object).fillna("float32")  # files written before precisions existed
    frame["round"] = pd.to_numeric(frame["round"], errors="coerce").fillna(1).astype(int)
    frame["samples_s"] = [json.loads(s) if isinstance(s, str) and s else [] for s in frame["samples_s"]]
    return frame if every_attempt else kept_attempts(frame)


def kept_attempts(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per cell and round, in the order they were first measured, with `attempts` (rows of that cell and round).

    The kept row is an `ok` one if any, the least disturbed of those (lowest `interference`),
    the latest on a tie; rows cut off before their cell and status were written are left out.
    """
    rows = rows.dropna(subset=list(_REQUIRED))
    if rows.empty:
        return rows.assign(attempts=pd.Series(dtype=int)).reset_index(drop=True)
    cells = rows.groupby(list(ROUND_KEY), sort=False)
    ranked = rows.assign(
        attempts=cells["status"].transform("size"),
        _cell=cells.ngroup(),
        _not_ok=rows["status"] != status.OK,
        _interference=pd.to_numeric(rows["interference"], errors="coerce"),
        _later=-np.arange(len(rows)),
    ).sort_values(["_cell", "_not_ok", "_interference", "_later"], na_position="last", kind="stable")
    kept = ranked.drop_duplicates(subset=list(ROUND_KEY), keep="first")
    return kept.drop(columns=["_cell", "_not_ok", "_interference", "_later"]).reset_index(drop=True)


def is_true(values: pd.Series) -> pd.Series:
    """Whether each value of a True/False column is true: "True", True, or 1.0 where rows with blanks were concatenated."""
    return values.map(lambda v: v.strip().lower() == "true" if isinstance(v, str) else bool(pd.notna(v) and v)).astype(bool)


def finished_cells(rows: pd.DataFrame, round_number: int | None = None) -> set[tuple[str, int, int]]:
    """(model, batch_size, sequence_length) of every row in `rows` (of round `round_number` only, when given)."""
    if round_number is not None:
        rows = rows[rows["round"] == round_number]
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

