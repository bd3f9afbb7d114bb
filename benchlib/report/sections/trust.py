"""How far to trust a run's cells: the cells other work disturbed, the speed probe, the spread between rounds and where
it comes from, the noisy cells and the thread counts."""

from __future__ import annotations

from IPython.display import Markdown, display

from benchlib.analysis import quality, variance
from benchlib.report import plots
from benchlib.report.display import show_figure, show_table
from benchlib.report.sections.base import CELLS, SummaryRun, section


@section(
    "trust", "How far to trust these numbers", CELLS,
    "The cells still disturbed by other work on the machine, the speed probe over the run, the spread between rounds and "
    "where it comes from, the noisy cells, and the threads each environment ran with.",
)  # fmt: skip
def show_trust(run: SummaryRun) -> None:
    rows, environments, output_dir = run.rows, run.environments, run.output_dir
    # Without when_empty, an empty table shows its notes in its place: they say why it is empty.
    show_table(quality.disturbed_cells(rows), output_dir, "disturbed_cells", notes=quality.interference_notes(rows, environments))
    probes = quality.probe_table(environments)
    if probes.empty:
        display(Markdown("No environment of these runs recorded a speed probe (results from before it existed): whether the machine changed speed during the run cannot be checked."))
    else:
        show_figure(plots.speed_probe(probes), output_dir, "speed_probe")
        notes = quality.probe_warnings(environments) or ["The speed probe stayed within 10% (slowest / fastest) on every machine: the machine kept its speed through the run."]
        display(Markdown("\n".join(f"- {note}" for note in notes)))
    display(Markdown("How far each cell's per-round medians spread, as % of its time:"))
    show_table(quality.round_spread(rows), output_dir, "round_spread", when_empty="Every environment ran in one round: there is no spread between rounds to show (set `rounds` to measure it).")
    display(Markdown("Where the spread comes from, within a process and between processes (`between_share`), and the rounds a comparison of two runs needs:"))
    show_table(variance.environment_spread(rows), output_dir, "spread_within_and_between", when_empty="No environment ran in two rounds or more: the spread between processes is not measured (set `rounds`).")
    display(Markdown("The noisy cells (interquartile range over 10% of the median):"))
    show_table(quality.noisy_cells(rows), output_dir, "noisy_cells", when_empty="No cell is noisy: every ok cell's interquartile range is within 10% of its median.")
    display(Markdown("The thread counts each environment ran with, as read back from the framework:"))
    show_table(quality.thread_table(environments), output_dir, "threads", quality.thread_count_warnings(environments))
