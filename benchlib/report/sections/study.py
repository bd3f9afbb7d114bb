"""The 2019 study's tables on the forward pass's cells: the framework averages over the cells `ok` everywhere, its four
pairwise comparisons, its spreadsheet per environment, and its claims checked on this run."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from IPython.display import Markdown, display

from benchlib.analysis import runs, spreadsheet, tables
from benchlib.report import plots
from benchlib.report.display import show_figure, show_table
from benchlib.report.sections.base import CELLS, SummaryRun, section
from benchlib.report.sections.cells import claims


@section(
    "averages", "Average inference time per environment", CELLS,
    "The study's four ways (eager PyTorch, TorchScript, TensorFlow, XLA) averaged over the cells `ok` in all of them "
    "(`cells_used`; the others are `cells_excluded`, listed below), against eager PyTorch.",
)  # fmt: skip
def show_averages(run: SummaryRun) -> None:
    averages = tables.framework_averages(run.rows)
    show_table(averages, run.output_dir, "framework_averages")
    if not averages.empty:
        show_figure(plots.averages_bars(averages), run.output_dir, "framework_averages")
    display(Markdown("The cells excluded from these averages, with each status other than `ok` and its reason:"))
    show_table(tables.excluded_cells(run.rows), run.output_dir, "excluded_cells", when_empty="No cell is excluded: every cell is ok in every environment compared.")


@section(
    "pytorch_vs_tensorflow", "PyTorch against TensorFlow", CELLS,
    "The geometric mean of TensorFlow's time over eager PyTorch's, per model and over all models (above 1: PyTorch is faster).",
)  # fmt: skip
def show_pytorch_vs_tensorflow(run: SummaryRun) -> None:
    pt_tf = tables.pytorch_vs_tensorflow(run.rows)
    show_table(pt_tf, run.output_dir, "pytorch_vs_tensorflow", tables.missing_comparisons(run.rows, "pytorch_vs_tensorflow"))
    if pt_tf["cells"].sum():
        show_figure(plots.ratio_heatmap(run.rows), run.output_dir, "tf_over_pt_heatmap")


def _comparison(key: str, title: str, caption: str, table: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    """Register one of the study's pairwise comparisons: its table (`tables.<key>`), with the comparisons it lacks as notes."""

    def show(run: SummaryRun) -> None:
        show_table(table(run.rows), run.output_dir, key, tables.missing_comparisons(run.rows, key))

    section(key, title, CELLS, caption)(show)


_comparison(
    "torchscript_vs_eager", "TorchScript against eager PyTorch",
    "The mean change in time per cell (%) of the traced model against the eager one (negative: TorchScript is faster).",
    tables.torchscript_vs_eager,
)  # fmt: skip
_comparison(
    "xla_vs_function", "XLA against tf.function",
    "XLA's speed-up over plain `tf.function` (above 1: XLA is faster) and its largest reduction in one cell.",
    tables.xla_vs_function,
)  # fmt: skip
_comparison(
    "distilled_vs_teacher", "Distilled models against their teachers",
    "In each environment, the time of distilbert-base-uncased over bert-base-cased and distilgpt2 over gpt2 (the study found about one half).",
    tables.distilled_vs_teacher,
)  # fmt: skip


@section(
    "spreadsheet", "The study's spreadsheet, per environment", CELLS,
    "Models by shape, the time per call in seconds or the status; each also written as a CSV file in the 2019 script's layout.",
)  # fmt: skip
def show_spreadsheet(run: SummaryRun) -> None:
    for environment in runs.environments(run.rows):
        display(Markdown(f"### {environment}"))
        display(spreadsheet.spreadsheet(run.rows, environment, digits=4))
        spreadsheet.write_spreadsheet_2019(run.rows, environment, run.output_dir)


@section(
    "claims_2019", "The 2019 claims, checked on this run", CELLS,
    "Each claim of the study ([the 2019 post](https://medium.com/huggingface/benchmarking-transformers-pytorch-and-tensorflow-e2917fb891c2)), "
    "its value then and now with a 95% interval, and whether it *holds*, *does not hold* or is *inconclusive*.",
)  # fmt: skip
def show_claims(run: SummaryRun) -> None:
    show_table(claims(run), run.output_dir, "claims_2019")
