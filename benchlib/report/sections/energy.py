"""Energy per inference: each environment's joules per call, generated token or served sample, from the machine's own
counter (NVML's on a GPU, RAPL's on a CPU), and the most frugal environment beside the fastest."""

from __future__ import annotations

import pandas as pd

from benchlib.analysis import energy
from benchlib.report.display import show_table
from benchlib.report.sections.base import CELLS, SummaryRun, section


def _table(run: SummaryRun) -> pd.DataFrame:
    return run.shared("energy", lambda: energy.energy_table(pd.concat([run.all_rows, run.loaded], ignore_index=True)))


def energy_findings(run: SummaryRun) -> list[str]:
    return energy.energy_findings(_table(run))


@section(
    "energy", "Energy per inference", CELLS,
    "Per model, what was measured and environment: the joules per call (the forward pass), per generated token or per "
    "served sample (under load), read from the machine's own counter around the samples (NVML's total energy on a GPU, "
    "the RAPL package counters on a CPU), the geometric mean over the cells every environment measured, the rate of work "
    "beside it, and its energy over the fastest's (`vs_fastest`). Never an estimate from a rated power.",
    findings=energy_findings, has_data=lambda run: not _table(run).empty,
)  # fmt: skip
def show_energy(run: SummaryRun) -> None:
    show_table(_table(run), run.output_dir, "energy")
