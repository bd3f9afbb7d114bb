"""What a run's cells cost the machine: peak memory and time to first result, how close each environment came to the
machine's measured limits, and time against sequence length."""

from __future__ import annotations

from IPython.display import Markdown, display

from benchlib.analysis import efficiency, quality, tables
from benchlib.measure import peak as machine_limits
from benchlib.report import plots
from benchlib.report.render import show_figure, show_table
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


@section(
    "limits", "How close to the machine's limit", CELLS,
    "Each `ok` cell's FLOPs over its time, against the machine's float32 peak and memory bandwidth measured at the start "
    "of the run: each environment's median fraction of that peak per model (%), and the roofline.",
    has_data=lambda run: bool(_limits(run)),
)  # fmt: skip
def show_limits(run: SummaryRun) -> None:
    limits = _limits(run)
    cells = efficiency.efficiency(run.rows, limits)
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
