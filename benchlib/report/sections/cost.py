"""Which machine, at what price: where the runs' machines have a price, the cheapest machine, environment and settings that
meet the bound and keep the quality target, on the summary's first screen with the plot of cost against latency; then the
cost of every load line and of every cell timed one call at a time."""

from __future__ import annotations

import pandas as pd

from benchlib.analysis import cost
from benchlib.analysis import load as under_load
from benchlib.report import plots
from benchlib.report.display import show_figure, show_table
from benchlib.report.sections.base import CELLS, LOAD, SummaryRun, section


def costs(run: SummaryRun) -> pd.DataFrame:
    """The runs' `cost.cost_table`, computed once."""
    return run.shared("costs", lambda: cost.cost_table(run.loaded, run.machines, run.run_dirs))


def decision(run: SummaryRun) -> list[str]:
    """The decision's sentences, then the machines without a price."""
    sentences = cost.decision_sentences(costs(run), under_load.bound_text(run.loaded, run.run_dirs))
    missing = cost.unpriced_sentence(run.machines)
    return sentences + ([missing] if missing else [])


def call_costs(run: SummaryRun) -> pd.DataFrame:
    """The runs' `cost.call_cost_table`, computed once."""
    return run.shared("call_costs", lambda: cost.call_cost_table(run.all_rows, run.machines))


def priced(run: SummaryRun) -> bool:
    """Whether some machine of the runs has a price, and a load line or a cell timed one call at a time priced."""
    return bool(cost.priced_machines(run.machines)) and (costs(run)["cost_per_million"].notna().any() or not call_costs(run).empty)


def show_decision(run: SummaryRun) -> None:
    """Above the findings: the decision across machines and the plot of cost against latency."""
    from IPython.display import Markdown, display

    if costs(run)["cost_per_million"].isna().all():
        return  # cells timed one call at a time alone: their cost is in the section, there is no decision to lead with
    display(Markdown("## Which machine\n\n" + "\n".join(f"- {sentence}" for sentence in decision(run))))
    try:
        figure = plots.cost_latency(costs(run), under_load.latency_bound_ms(run.run_dirs))
    except ValueError:
        return  # no server line to place on it: the sentences say the offline decision
    show_figure(figure, run.output_dir, "cost_latency")


@section(
    "cost", "Which machine", (LOAD, CELLS),
    "Per model and scenario, what a million requests cost on each machine at its largest rate VALID under the bound "
    "(server) and at Offline's rate: price per hour / (3600 x rate) x 10^6, with the interval the rate's over rounds "
    "gives, output tokens' cost when generating, joules per unit where a counter read them; the choices that keep the "
    "quality target ranked by cost, and the cost of a million calls one at a time at one stream.",
    has_data=priced, lead=show_decision,
)  # fmt: skip
def show_cost(run: SummaryRun) -> None:
    show_table(cost.decision_table(costs(run)), run.output_dir, "cost_decision",
               when_empty="No priced environment keeps the quality target: none is ranked.")  # fmt: skip
    show_table(costs(run), run.output_dir, "cost")
    show_table(call_costs(run), run.output_dir, "cost_per_call",
               when_empty="No priced cell was timed one call at a time.")  # fmt: skip
