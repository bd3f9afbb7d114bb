"""What the summary notebook calls to show its tables, findings and figures (each also saved in the output folder). Its
kernel imports this, not `report.render`, which renders notebooks on the host (nbformat, nbconvert, papermill)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from benchlib.analysis.tables import save_table
from benchlib.store import layout


def _display_notes(notes: list[str]) -> None:
    from IPython.display import Markdown, display

    if notes:
        display(Markdown("\n".join(f"- {note}" for note in notes)))


def _caption_value(value: object) -> str:
    """A value for a table's caption: floats to 4 significant digits, `none` for a blank."""
    if value is None or value is pd.NA or value == "" or (isinstance(value, float) and pd.isna(value)):
        return "none"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def table_view(table: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """`table` as shown: its index turned into columns, and, on two rows or more, the columns that hold one value
    on every row left out and named in the caption returned with it (`name: value · ...`)."""
    shown = table.reset_index(drop=isinstance(table.index, pd.RangeIndex))
    text = shown.astype(str)
    constant = [column for column in shown.columns if text[column].nunique(dropna=False) == 1] if len(shown) > 1 else []
    if len(constant) == len(shown.columns):
        constant = []
    caption = " · ".join(f"{column}: {_caption_value(shown[column].iloc[0])}" for column in constant)
    return shown.drop(columns=constant), caption


def show_table(table: pd.DataFrame, output_dir: str | os.PathLike[str], name: str, notes: list[str] | None = None, when_empty: str | None = None) -> None:
    """In the notebook: save `table` (every column) as tables/<name>.csv (`tables.save_table`) and display its `table_view`, without the
    index and with the columns that hold one value in the caption, then `notes`.

    An empty table is left out: `when_empty` (else the notes, else a sentence saying so) is shown instead.
    """
    from IPython.display import display

    notes = list(notes or [])
    if table.empty:
        _display_notes([when_empty] if when_empty else notes or [f"These runs have nothing for this table ({name}): it is left out."])
        return
    save_table(table, output_dir, name)
    shown, caption = table_view(table)
    floats = shown.select_dtypes("float").columns
    agreements = [column for column in floats if "agreement" in column]  # 0.99998 is not 1: one more digit
    styled = shown.style.hide(axis="index").set_caption(caption).format(na_rep="").format("{:.4g}", subset=floats, na_rep="")
    display(styled.format("{:.5g}", subset=agreements, na_rep=""))
    _display_notes(notes)


def findings_markdown(findings: list[str]) -> str:
    """The findings as a Markdown list; a finding that carries a table (its sentence, a blank line, then the table)
    shows the table under its sentence, between the list's items."""
    parts = []
    for finding in findings:
        sentence, _, table = finding.partition("\n\n")
        parts.append(f"- {sentence}" + (f"\n\n{table}\n" if table else ""))
    return "\n".join(parts)


def show_findings(sentences: list[str], output_dir: str | os.PathLike[str] | None = None) -> None:
    """In the notebook: the findings, under a heading, as a list (`findings_markdown`); saved as findings.md in
    `output_dir` where given (`publish` shows them in its index)."""
    from IPython.display import Markdown, display

    listed = findings_markdown(sentences)
    if output_dir is not None:
        (Path(output_dir) / layout.FINDINGS_FILE).write_text(listed + "\n", encoding="utf-8")
    display(Markdown("## Findings\n\n" + listed))


def show_figure(figure: Figure, output_dir: str | os.PathLike[str], name: str) -> None:
    """In the notebook: save `figure` as figures/<name>.png and display it."""
    from IPython.display import Image, display

    from benchlib.report.plots import save_figure

    display(Image(filename=save_figure(figure, output_dir, name)))
