"""The summary, built from parts: each kind of measurement (the forward pass's cells, the 2019 study's tables, generation,
the load scenarios, tunes) offers its sections, and each section says whether a run holds its data, what it finds, and shows
its tables and figures. The summary notebook asks every registered section and shows those with data, in order, after
the findings of all of them and a contents line that also names what the run did not measure.

A section is a `Section` registered with `@section(...)` in one module of this package per kind of measurement; adding
a kind adds a module, not edits across the notebook. What each section's figures mean, and how they are made, is the
documentation's "Reading the summary" page (`docs/summary.md`), whose column glossary is `benchlib.report.glossary`.
"""

from __future__ import annotations

import importlib

from benchlib.report.sections.base import (
    CELLS,
    GENERATION,
    KINDS,
    LOAD,
    QUALITY,
    SECTIONS,
    TUNE,
    Section,
    SummaryRun,
    contents,
    findings,
    get,
    not_measured_sentence,
    present,
    section,
    show_section,
    show_summary,
)

# Each kind of measurement's module, in the summary's order: importing it registers its sections.
PARTS: tuple[str, ...] = ("cost", "cells", "study", "trust", "machine", "energy", "generation", "load", "tune", "task_quality")
for _part in PARTS:
    importlib.import_module(f"{__name__}.{_part}")
del _part

__all__ = [
    "CELLS", "GENERATION", "KINDS", "LOAD", "PARTS", "QUALITY", "SECTIONS", "TUNE", "Section", "SummaryRun", "contents", "findings", "get", "not_measured_sentence",
    "present", "section", "show_section", "show_summary",
]  # fmt: skip
