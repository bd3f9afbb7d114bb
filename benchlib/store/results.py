"""results.csv: one row per cell, appended and flushed as soon as the cell is done; read back as a table,
counted, or passed between machines as raw records (a cluster's rows)."""

from __future__ import annotations

import csv
import datetime
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchlib import status
from benchlib.store.disk import append_whole
from benchlib.store.layout import CUTOFF_FILE, results_path

COLUMNS: tuple[str, ...] = (
    "environment", "framework", "mode", "device", "model", "model_scale",
    "batch_size", "sequence_length", "status",
    "mean_s", "median_s", "min_s", "std_s", "repeat", "number", "first_call_s", "samples_s",
    "reason",
    "iqr_s", "ci95_low_s", "ci95_high_s", "noisy", "stop_reason", "peak_memory_bytes",
    "attempt", "interference", "steal", "disturbed", "probe_s", "warmup_calls", "prepare_s", "attn_implementation", "round",
    "flops", "precision", "max_abs_diff", "options", "build_s", "export_s", "cold_export_s", "cached",
    "task", "weights", "inputs", "agreement_metric", "agreement",
    "workload", "new_tokens", "generate_s", "ttft_s", "ttft_samples_s", "tpot_s", "tpot_p90_s", "tpot_samples_s",
    "tokens_per_s", "token_agreement", "first_divergence", "token_clock",
    "scenario", "trial", "target_qps", "max_qps", "valid", "samples_per_s", "latency_p50_s", "latency_p90_s", "latency_p99_s",
    "loadgen_metric", "loadgen_value", "loadgen_log", "ttft_p99_s", "tpot_p99_s", "latency_percentile",
    "model_digest",  # a folder's or Hub id's checkpoint: the sha256 of its config.json and weights (config.models.checkpoint_digest)
    # Quality on the user's data (`eval_data`; perplexity on the text when generating), the same in every row of a model.
    "quality_data", "quality_metric", "quality_value", "quality_low", "quality_high", "quality_reference", "quality_ratio",
    "quality_ratio_low", "quality_ratio_high", "quality_target", "quality_verdict", "quality_n", "quality_truncated", "quality_f1",
    "quality_s", "quality_reason", "served_quality_value", "accuracy_log",
    # The warm-up (seconds, why it stopped) and the device over the samples (measure.device_state): a GPU's SM clock,
    # power, temperature, memory and throttle reasons (`slowed`: why it could not hold its steady clock), the energy
    # per call, generated token or served sample from the machine's counter, and the GPU's busy share of one call.
    "warmup_s", "warmup_stop", "gpu_clock_mhz", "gpu_clock_min_mhz", "gpu_sustained_mhz", "gpu_power_w", "gpu_temperature_c",
    "gpu_memory_bytes", "gpu_throttle", "slowed", "energy_j", "energy_unit", "energy_source", "gpu_busy_s", "gpu_busy", "launch_bound",
    # A load test's serving loop: the mean batch size, the queue wait of a batch's oldest request and the call's time.
    "served_batch_mean", "served_queue_wait_p50_s", "served_queue_wait_p99_s", "served_call_p50_s", "served_call_p99_s",
    # A serving engine under load: the share of requests that met both token bounds, and the rate served over the kit's
    # client's own ceiling (environment.json's client_ceiling).
    "goodput", "client_share",
    "concurrency", "knee",  # the concurrency sweep: a level's requests in flight; the scenario's row: the knee's
)  # fmt: skip
# Columns that hold a JSON list of seconds per sample, read back as lists.
SAMPLE_COLUMNS: tuple[str, ...] = ("samples_s", "ttft_samples_s", "tpot_samples_s")
CELL_KEY: tuple[str, ...] = ("model", "batch_size", "sequence_length")
# What a row is of: a cell of the grid, or one model under a load scenario (rows of a file written before scenarios
# existed are the `cell` scenario's). A server scenario's trials are rows of their own, with a `trial` number.
SCENARIO_KEY: tuple[str, ...] = (*CELL_KEY, "scenario")
CELL_SCENARIO = "cell"
# A cell measured in one round: rows of a file written before rounds existed are round 1.
ROUND_KEY: tuple[str, ...] = (*SCENARIO_KEY, "round")
# Columns that every row has; a row without them was cut off and is not a finished cell.
_REQUIRED: tuple[str, ...] = (*CELL_KEY, "status")


def csv_record(row: dict[str, Any] | None = None) -> bytes:
    """One results.csv record as csv writes it (CRLF-terminated, quoted where needed), encoded: `row`'s (whose columns
    must be COLUMNS'), or without one the header."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS)
    if row is None:
        writer.writeheader()
    else:
        writer.writerow(row)
    return buffer.getvalue().encode("utf-8")


def make_row(cell: dict[str, Any], state: str, measurement: Any = None, reason: str = "") -> dict[str, Any]:
    """A results row for `cell` (environment fields, model, shape and any other column the sweep knows) ending with `state`;
    a `measurement` (measure.timing.Measurement) fills the timing columns from its `row_fields()`."""
    if state not in status.STATUSES:
        raise ValueError(f"status must be one of {', '.join(status.STATUSES)}, not {state!r}")
    row: dict[str, Any] = {column: "" for column in COLUMNS}
    row.update({key: value for key, value in cell.items() if key in row})
    row.update(status=state, reason=reason)
    if measurement is not None:
        row.update({key: value for key, value in measurement.row_fields().items() if key in row})
    return row


class ResultsWriter:
    """Appends rows to `<output_dir>/results.csv`, each whole or not at all (`store.disk.append_whole`) and flushed to
    disk before the next cell; a full disk raises a DiskFullError."""

    def __init__(self, output_dir: str | os.PathLike[str]) -> None:
        self.path = results_path(output_dir)
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
        self._file = open(self.path, "ab", buffering=0)
        if new:
            append_whole(self._file.fileno(), csv_record(), self.path)

    def append(self, row: dict[str, Any]) -> None:
        append_whole(self._file.fileno(), csv_record(row), self.path)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_results(path: str | os.PathLike[str], every_attempt: bool = False, trials: bool = False) -> pd.DataFrame:
    """The rows of a results.csv (or of `<path>/results.csv`), the SAMPLE_COLUMNS parsed to lists.

    A cell measured more than once (a disturbed cell measured again) has one row per attempt in
    the file; by default only the kept one is returned (`kept_attempts`), with `attempts` added.
    A server scenario's trials are left out, or with `trials` are all that is returned, each as written.
    A file written before a column existed reads with that column empty.
    """
    frame = pd.read_csv(results_path(path), keep_default_na=False, na_values=[""], dtype={"reason": str, "loadgen_value": str})
    extra = [column for column in frame.columns if column not in COLUMNS]
    frame = frame.reindex(columns=[*COLUMNS, *extra])
    frame["reason"] = frame["reason"].fillna("")
    frame["precision"] = frame["precision"].astype(object).fillna("float32")  # files written before precisions existed
    frame["scenario"] = frame["scenario"].astype(object).fillna(CELL_SCENARIO)  # files written before scenarios existed
    frame["round"] = pd.to_numeric(frame["round"], errors="coerce").fillna(1).astype(int)
    for column in SAMPLE_COLUMNS:
        frame[column] = _json_lists(frame[column])
    frame = frame.copy()  # one block per dtype again, after the columns set one by one
    is_trial = frame["trial"].notna()
    if trials:
        return frame[is_trial].reset_index(drop=True)
    frame = frame[~is_trial].reset_index(drop=True)
    return frame if every_attempt else kept_attempts(frame)


def _json_lists(values: pd.Series) -> list[list[float]]:
    """Each JSON list of a column, parsed (an empty list where blank)."""
    return [json.loads(value) if isinstance(value, str) and value else [] for value in values]


def kept_attempts(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per cell and round, in the order they were first measured, with `attempts` (rows of that cell and round).

    The kept row is an `ok` one if any, an undisturbed one of those if any (neither other processes nor a slowed
    device), then the least disturbed (lowest `interference`), the latest on a tie; rows cut off before their cell and
    status were written are left out.
    """
    rows = rows.dropna(subset=list(_REQUIRED))
    if rows.empty:
        return rows.assign(attempts=pd.Series(dtype=int)).reset_index(drop=True)
    cells = rows.groupby(list(ROUND_KEY), sort=False)
    ranked = rows.assign(
        attempts=cells["status"].transform("size"),
        _cell=cells.ngroup(),
        _not_ok=rows["status"] != status.OK,
        _disturbed=is_true(rows["disturbed"]),
        _interference=pd.to_numeric(rows["interference"], errors="coerce"),
        _later=-np.arange(len(rows)),
    ).sort_values(["_cell", "_not_ok", "_disturbed", "_interference", "_later"], na_position="last", kind="stable")
    kept = ranked.drop_duplicates(subset=list(ROUND_KEY), keep="first")
    return kept.drop(columns=["_cell", "_not_ok", "_disturbed", "_interference", "_later"]).reset_index(drop=True)


def is_true(values: pd.Series) -> pd.Series:
    """Whether each value of a True/False column is true: "True", True, or 1.0 where rows with blanks were concatenated."""
    return values.map(lambda v: v.strip().lower() == "true" if isinstance(v, str) else bool(pd.notna(v) and v)).astype(bool)


def has_text(values: pd.Series) -> pd.Series:
    """Whether each value of a text column is a non-empty text (blank cells read back as NaN)."""
    return values.map(lambda v: isinstance(v, str) and v != "").astype(bool)


def finished_cells(rows: pd.DataFrame, round_number: int | None = None) -> set[tuple[str, int, int, str]]:
    """(model, batch_size, sequence_length, scenario) of every row in `rows` (of round `round_number` only, when given)."""
    if round_number is not None:
        rows = rows[rows["round"] == round_number]
    return set(zip(rows["model"], rows["batch_size"].astype(int), rows["sequence_length"].astype(int), rows["scenario"]))


def results_table(rows: pd.DataFrame, value: str = "mean_s") -> pd.DataFrame:
    """Model × (batch, sequence): the `value` of `ok` cells, the status of every other cell. A load scenario's cell is a
    column of its own (`4x128 offline`) with the figure it is judged by (`scenario_figure`)."""
    scenarios = rows["scenario"] if "scenario" in rows else pd.Series(CELL_SCENARIO, index=rows.index)
    cells = rows.assign(shape=[f"{b}x{s}" + ("" if sc == CELL_SCENARIO else f" {sc}") for b, s, sc in zip(rows["batch_size"], rows["sequence_length"], scenarios)])
    cells["cell"] = [
        (f"{row[value]:.4g}" if sc == CELL_SCENARIO else scenario_figure(row)) if row["status"] == status.OK else row["status"]
        for sc, (_, row) in zip(scenarios, cells.iterrows())
    ]
    order = list(dict.fromkeys(shape for _, shape in sorted(zip(zip(rows["batch_size"], rows["sequence_length"]), cells["shape"]), key=lambda p: p[0])))
    table = cells.pivot_table(index="model", columns="shape", values="cell", aggfunc="last", sort=False)
    return table.reindex(columns=order).fillna("")


# The percentile each load scenario's latency is judged at by default (LoadGen's, MLPerf's; Offline has none): what a
# run asks LoadGen for when `latency_percentile` is not given, and what a row written before that column was judged at.
MLPERF_PERCENTILE: dict[str, int] = {"single-stream": 90, "multi-stream": 99, "server": 99}


def judged_percentile(row: pd.Series) -> int:
    """The percentile a load row's latency was judged at: its `latency_percentile`, or for rows written before that
    column, MLPERF_PERCENTILE's."""
    value = pd.to_numeric(row.get("latency_percentile"), errors="coerce")
    return int(value) if pd.notna(value) else MLPERF_PERCENTILE.get(row["scenario"], 99)


def scenario_figure(row: pd.Series) -> str:
    """A load scenario's result in a few characters, from LoadGen's figures in its row: `p90 12.3 ms` (single-stream),
    `p99 45.6 ms` (multi-stream, per query), `max 78.9/s` (server), `123/s` (offline); `INVALID` marks LoadGen's verdict."""
    scenario = row["scenario"]
    if scenario == "server":
        figure = f"max {float(row['max_qps']):.4g}/s" if pd.notna(row["max_qps"]) and row["max_qps"] != "" else "no rate met the bound"
    elif scenario == "offline":
        figure = f"{float(row['samples_per_s']):.4g}/s"
    else:
        figure = f"p{judged_percentile(row)} {float(row['loadgen_value']) * 1e-6:.3g} ms"
    return figure if str(row["valid"]) == "True" or scenario == "server" else f"{figure} (INVALID)"


# The figure a tune judges each objective by (config/tune.py), as a tune's points.csv names it, and whether more of it is better.
OBJECTIVE_FIGURES: dict[str, str] = {"server": "max_qps", "offline": "samples_per_s", "single-stream": "latency_s"}
HIGHER_IS_BETTER: dict[str, bool] = {"server": True, "offline": True, "single-stream": False}


def objective_figure(row: pd.Series) -> tuple[float | None, str]:
    """A load scenario's row as a tune judges it: its figure (the server's largest VALID rate, Offline's samples per
    second, single-stream's latency in seconds at its percentile), or None and why it may not be chosen (a status other
    than ok, such as an answer beyond the precision's tolerance; LoadGen's INVALID; no figure)."""
    if row["status"] != "ok":
        return None, f"{row['status']}: {row['reason']}"
    if str(row["valid"]) != "True":
        return None, row["reason"] or "LoadGen: INVALID"
    column = f"latency_p{judged_percentile(row)}_s" if row["scenario"] == "single-stream" else OBJECTIVE_FIGURES[row["scenario"]]
    figure = pd.to_numeric(row[column], errors="coerce")
    if pd.isna(figure) or figure <= 0:
        return None, "no figure"
    return float(figure), ""


ROW_KEY: tuple[str, ...] = (*SCENARIO_KEY, "round", "attempt", "trial")


def split_records(text: str) -> tuple[list[str], str]:
    """The complete CSV records at the start of `text`, each with its line ending, and the unfinished rest.

    A record ends at a line break outside quotes (a quoted field may hold line breaks)."""
    records, start, quotes = [], 0, 0
    for index, char in enumerate(text):
        if char == '"':
            quotes += 1
        elif char == "\n" and quotes % 2 == 0:
            records.append(text[start : index + 1])
            start, quotes = index + 1, 0
    return records, text[start:]


def read_exactly(path: Path) -> str:
    """A results.csv's text with its line endings as written (csv ends records with CRLF)."""
    with open(path, encoding="utf-8", newline="") as file:
        return file.read()


def records_after(path: Path, offset: int) -> tuple[list[str], int]:
    """The complete records of a results.csv written after byte `offset`, and the offset after them
    (a record still being written is left for the next call; none where the file cannot be read)."""
    try:
        with open(path, "rb") as file:
            file.seek(offset)
            data = file.read()
    except OSError:
        return [], offset
    records, _ = split_records(data[: data.rfind(b"\n") + 1].decode("utf-8"))
    return records, offset + len("".join(records).encode("utf-8"))


def record_row(record: str) -> dict[str, str] | None:
    """The row of one results.csv record, or None for the header and for a record without every column."""
    fields = next(csv.reader(io.StringIO(record)), [])
    if len(fields) != len(COLUMNS) or tuple(fields) == COLUMNS:
        return None
    return dict(zip(COLUMNS, fields))


def row_key(row: dict[str, str]) -> tuple[str, ...]:
    """What makes a row unique in a results.csv: its cell and scenario, round, attempt and trial (blank rounds and
    attempts are 1, a blank scenario `cell`)."""
    blank = {"round": "1", "attempt": "1", "scenario": CELL_SCENARIO}
    return tuple(row[column] or blank.get(column, "") for column in ROW_KEY)


class ReceivedRows:
    """The client's `<env>/results.csv`, fed with the records workers send; each (cell, round, attempt) is appended once."""

    def __init__(self, output_dir: Path) -> None:
        self.path = results_path(output_dir)
        repair_results(self.path)
        ResultsWriter(output_dir).close()  # the header of a new file; refuses a file with other columns
        records, _ = split_records(read_exactly(self.path))
        self._keys = {row_key(row) for record in records if (row := record_row(record))}

    def add(self, records: Sequence[str]) -> list[dict[str, str]]:
        """Append the records whose row is not in the file yet, each whole or not at all and flushed to disk; returns
        their rows. A record that cannot be written leaves the file as it was before that record (the ones before it
        stay) and raises: a full disk as a DiskFullError (`store.disk`)."""
        added = []
        with open(self.path, "ab", buffering=0) as file:
            for record in records:
                row = record_row(record)
                if row is None or row_key(row) in self._keys:
                    continue
                append_whole(file.fileno(), record.encode("utf-8"), self.path)
                self._keys.add(row_key(row))
                added.append(row)
        return added

    def text(self) -> str:
        """The file as it is now."""
        return read_exactly(self.path)

    def cells(self, round_number: int) -> int:
        """How many cells of round `round_number` have a row (a server scenario's trials are not cells)."""
        cell, round_at, trial_at = len(SCENARIO_KEY), ROW_KEY.index("round"), ROW_KEY.index("trial")
        return len({key[:cell] for key in self._keys if key[round_at] == str(round_number) and not key[trial_at]})


def round_rows(output_dir: Path, round_number: int | None = None) -> list[dict[str, str]]:
    """The rows in `<output_dir>/results.csv` (of round `round_number` only, when given; none when there is no file yet),
    a server scenario's trials included."""
    try:
        records, _ = split_records(read_exactly(results_path(output_dir)))
    except OSError:
        return []
    rows = [row for record in records if (row := record_row(record))]
    return rows if round_number is None else [row for row in rows if (row["round"] or "1") == str(round_number)]


def rows_written(output_dir: Path, round_number: int | None = None, trials: bool = False) -> int:
    """Number of cells' rows in `<output_dir>/results.csv` (of round `round_number` only, when given; 0 when there is none
    yet): a server scenario's trials are not cells, and count only with `trials`."""
    return sum(1 for row in round_rows(output_dir, round_number) if trials or not row["trial"])


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
        stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        file.write(f"# {stamp}: cut off the end of {path.name}\n{fragment}\n")
    with open(path, "r+b") as file:
        file.truncate(keep)
        file.flush()
        os.fsync(file.fileno())
    return fragment
