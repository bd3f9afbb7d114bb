"""What a run's cells cost the machine: peak memory and time to first result, how close each environment came to the
machine's measured limits (and, on a GPU, which cells the launching Python bounds), and time against sequence length."""

from __future__ import annotations

import pandas as pd
from IPython.display import Markdown, display

from benchlib.analysis import efficiency, quality, speedups, tables
from benchlib.measure import peak as machine_limits
from benchlib.report import plots
from benchlib.report.display import show_figure, show_table
from benchlib.report.sections.base import CELLS, SummaryRun, section


def _has_memory(run: SummaryRun) -> bool:
    return "peak_memory_bytes" in run.rows and bool(run.rows["peak_memory_bytes"].notna().any())


@section(
    "memory", "Peak memory", CELLS,
    "Peak memory per cell in MiB (a GPU's own counter, or the process's peak resident memory on the CPU), then each "
    "environment's time to first result, warm (from the build cache) and cold (from nothing).",
    has_data=lambda run: _has_memory(run) or not quality.time_to_first_result(run.rows).empty,
)  # fmt: skip
def show_memory(run: SummaryRun) -> None:
    if _has_memory(run):
        show_table(quality.peak_memory_table(run.rows), run.output_dir, "peak_memory_mib")
        show_figure(plots.peak_memory(run.rows), run.output_dir, "peak_memory")
    else:
        display(Markdown("These runs recorded no peak memory: the table is left out."))
    show_table(quality.time_to_first_result(run.rows), run.output_dir, "time_to_first_result", when_empty="These runs recorded no build times (they are from before the build cache): time to first result is left out.")


def _limits(run: SummaryRun) -> efficiency.Limits:
    return run.shared("limits", lambda: efficiency.load_limits(run.run_dirs))


def _cells(run: SummaryRun) -> pd.DataFrame:
    return run.shared("efficiency_cells", lambda: efficiency.efficiency(run.rows, _limits(run)))


def limits_findings(run: SummaryRun) -> list[str]:
    """Where eager PyTorch is launch-bound: what this run measured of the environments that remove that overhead."""
    per_model = run.shared("speedups_per_model", lambda: speedups.speedups(run.rows, per_model=True))
    return efficiency.overhead_findings(_cells(run), per_model)


@section(
    "limits", "How close to the machine's limit", CELLS,
    "Each `ok` cell's FLOPs over its time, against the peak of the cell's own precision (float32, bfloat16, float16, TF32 for float32 on TF32 units) and "
    "the memory bandwidth, measured at the start of the run: each environment's median share of its precision's peak per "
    "model (%; none above 100% is shown, and none where the precision has no measured peak, as int8), and the roofline. "
    "A GPU cell whose call kept the GPU busy less than half its time is `launch`-bound: the launching Python limits it.",
    findings=limits_findings, has_data=lambda run: bool(_limits(run)),
)  # fmt: skip
def show_limits(run: SummaryRun) -> None:
    limits = _limits(run)
    cells = _cells(run)
    for machine in limits.values():
        display(Markdown("\n".join(f"- {sentence}" for sentence in machine_limits.describe_limits(machine))))
    show_table(efficiency.efficiency_table(cells), run.output_dir, "fraction_of_peak", efficiency.efficiency_sentences(cells),
               when_empty="No ok cell has a FLOP count (results from before it was recorded): the efficiency table is left out.")  # fmt: skip
    if not cells.empty:
        tables.save_table(cells, run.output_dir, "efficiency_cells")
        show_figure(efficiency.plot_roofline(cells, limits), run.output_dir, "roofline")


@section(
    "time_vs_sequence", "Time against sequence length", CELLS,
    "Time per call for every model (rows) and batch size (columns), one line per environment, on log scales.",
    has_data=lambda run: bool((run.rows["status"] == "ok").any()),
)  # fmt: skip
def show_time_vs_sequence(run: SummaryRun) -> None:
    show_figure(plots.time_vs_sequence(run.rows), run.output_dir, "time_vs_sequence")
