"""6. The study's spreadsheet: one environment as model × `<batch>x<sequence>`, and the 2019 script's own CSV layout."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pandas as pd

from benchlib import status
from benchlib.analysis.runs import NOT_MEASURED, environments, prepare, shape_name
from benchlib.store.layout import spreadsheet_2019_path

# The 2019 script's CSV: these columns, in this order, "N/A" where there is no time.
SHAPES_2019: tuple[str, ...] = tuple(f"{b}x{s}" for b in (1, 2, 4, 8) for s in (8, 64, 128, 256, 512, 1024))
COLUMNS_2019: tuple[str, ...] = ("model", *SHAPES_2019)


def spreadsheet(rows: pd.DataFrame, environment: str, digits: int | None = None) -> pd.DataFrame:
    """One environment as the study's spreadsheet: model × `<batch>x<sequence>`, seconds per call (`time_s`) or the status.

    With `digits`, times are strings with that many significant digits (for display).
    """
    env_rows = prepare(rows[rows["environment"] == environment])
    if env_rows.empty:
        raise ValueError(f"environment: {environment!r} has no rows; the rows have: {', '.join(environments(rows))}")
    shapes = [shape_name(b, s) for b, s in sorted(set(zip(env_rows["batch_size"], env_rows["sequence_length"])))]
    table = pd.DataFrame(index=pd.Index(list(dict.fromkeys(env_rows["model"])), name="model"), columns=shapes, dtype=object)
    for row in env_rows.itertuples():
        value = row.time_s if row.status == status.OK else row.status
        if digits is not None and row.status == status.OK:
            value = f"{value:.{digits}g}"
        table.loc[row.model, shape_name(row.batch_size, row.sequence_length)] = value
    return table.fillna(NOT_MEASURED)


def spreadsheet_2019_csv(rows: pd.DataFrame, environment: str) -> str:
    """One environment in exactly the 2019 script's CSV layout: `model,1x8,...,8x1024`, `N/A` where there is no time.

    Shapes outside the 2019 grid have no column there; they are in `spreadsheet`.
    """
    table = spreadsheet(rows, environment)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS_2019)
    writer.writeheader()
    for model, cells in table.iterrows():
        line = {shape: "N/A" for shape in SHAPES_2019}
        line.update({shape: float(value) for shape, value in cells.items() if shape in line and not isinstance(value, str)})
        writer.writerow({"model": model, **line})
    return out.getvalue()


def write_spreadsheet_2019(rows: pd.DataFrame, environment: str, output_dir: str | os.PathLike[str]) -> Path:
    """Write `spreadsheet_2019_csv` as the environment's table (`store.layout.spreadsheet_2019_path`) under `output_dir`; returns its path."""
    path = spreadsheet_2019_path(output_dir, environment)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as file:
        file.write(spreadsheet_2019_csv(rows, environment))
    return path
