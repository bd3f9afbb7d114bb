"""Generation timed one call at a time (`workload: generate`): time to first token, per output token and tokens per
second, speed-ups over eager PyTorch float32, where the tokens part from the baseline's, and the 2022 post's claims."""

from __future__ import annotations

from benchlib.analysis import generation, runs
from benchlib.report import plots
from benchlib.report.display import show_figure, show_table
from benchlib.report.sections.base import GENERATION, SummaryRun, section


def _speedups(run: SummaryRun) -> tuple:
    """(whole call's speed-ups, time to first token's, the 2022 claims)."""

    def make() -> tuple:
        ttft = generation.generation_speedups(runs.load_runs(run.run_dirs, runs.TTFT))  # a cell's time: its time to first token
        return generation.generation_speedups(run.generated), ttft, generation.claims_2022(run.generated)

    return run.shared("generation", make)


def generation_findings(run: SummaryRun) -> list[str]:
    whole, ttft, claims = _speedups(run)
    return generation.generation_findings(run.generated, whole, ttft, claims)


@section(
    "generation", "Generation", GENERATION,
    "Per environment, model, batch size and prompt length: time to first token (`ttft_s`), per output token (`tpot_s`) "
    "and tokens per second; then speed-ups over eager PyTorch float32, the fastest per cell, where generated tokens part "
    "from the baseline's, and the 2022 post's claims.",
    findings=generation_findings,
)  # fmt: skip
def show_generation(run: SummaryRun) -> None:
    generated, output_dir = run.generated, run.output_dir
    whole, ttft, claims = _speedups(run)
    show_table(generation.generation_table(generated), output_dir, "generation")
    show_table(whole, output_dir, "generation_speedups")
    show_table(ttft, output_dir, "generation_ttft_speedups")
    show_table(generation.generation_fastest(generated), output_dir, "generation_fastest")
    show_table(generation.divergence(generated), output_dir, "generation_divergence_float32",
               when_empty="Every float32 environment compared generated the same tokens as eager PyTorch float32.")  # fmt: skip
    show_table(generation.divergence(generated, reduced=True), output_dir, "generation_divergence_reduced",
               when_empty="No reduced precision environment compared generated other tokens than eager PyTorch float32.")  # fmt: skip
    show_table(claims, output_dir, "claims_2022")
    if ((generated["status"] == "ok") & generated["tpot_s"].notna()).any():
        show_figure(plots.tpot_vs_prompt_length(generated), output_dir, "tpot_vs_prompt_length")
