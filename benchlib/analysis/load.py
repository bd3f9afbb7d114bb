"""The summary's "Under load" section: the load scenarios' rows of one or more runs (`scenario` other than `cell`), their
figures as LoadGen reported them, the fastest environment per scenario, and the server scenario's trials.

A load cell's figure is the one its scenario is judged by: a percentile of latency one request at a time (single-stream,
MLPerf's 90th unless `latency_percentile` says otherwise) and of a query's latency (multi-stream, the 99th), the largest
rate VALID under the bound (server: `max_qps`) and samples per second (offline); over rounds, the median of the rounds'
figures. A latency's column names its percentile (`single_stream_p90_ms`). When generating,
the table adds LoadGen's tokens per second and the 99th percentiles of the time to first token and per output token.
The fastest environment one request at a time (single-stream) is not always the one that serves the most under load:
where it differs, a sentence says so.

Speed-ups over eager PyTorch float32 are per model and scenario: the baseline's figure over the environment's (a
latency) or the environment's over the baseline's (a rate), with the bootstrap interval of
`benchlib.analysis.significance` over the rounds' figures. A load cell has one figure per round, so one round gives no
interval and its verdict is `inconclusive`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from benchlib import status
from benchlib.analysis import significance
from benchlib.analysis.comparisons import BASELINE, BASELINE_VERDICT
from benchlib.analysis.runs import run_models, short_model_names
from benchlib.analysis.speedups import winners_text
from benchlib.store.environment import read_environment
from benchlib.store.layout import environment_dirs
from benchlib.store.results import CELL_SCENARIO, MLPERF_PERCENTILE, judged_percentile, read_results
from benchlib.workloads.agreement import AGREEMENT_BAR
from benchlib.workloads.quality import CONFIDENCE, KEEPS, UNDECIDED, verdict

SCENARIO_ORDER: tuple[str, ...] = ("single-stream", "multi-stream", "server", "offline", "concurrency")
# Per scenario: the table's column (a latency's with its percentile: `figure_column`), how a row gives it, and whether
# more is better.
FIGURES: dict[str, tuple[str, str, bool]] = {
    "single-stream": ("single_stream_p{}_ms", "latency", False),
    "multi-stream": ("multi_stream_p{}_ms", "latency", False),
    "server": ("server_max_qps", "max_qps", True),
    "offline": ("offline_samples_per_s", "samples_per_s", True),
    "concurrency": ("knee_tokens_per_s", "tokens_per_s", True),  # a serving engine's sweep: tokens per second at its knee
}
# When generating: per scenario, the table's extra columns and the row's column each takes (seconds become ms).
TOKEN_FIGURES: dict[str, tuple[tuple[str, str], ...]] = {
    "server": (("server_tokens_per_s", "tokens_per_s"), ("server_ttft_p99_ms", "ttft_p99_s"), ("server_tpot_p99_ms", "tpot_p99_s")),
    "offline": (("offline_tokens_per_s", "tokens_per_s"),),
}  # fmt: skip
FASTEST_COLUMNS: tuple[str, ...] = (
    "model", "scenario", "column", "fastest", "figure", "agreement", "environments", "fastest_keeping_99", "figure_keeping_99", "undecided",
)  # fmt: skip
ENGINE_FRAMEWORK = "openai"  # a serving engine's rows (`backends/openai.py`)
SPEEDUP_COLUMNS: tuple[str, ...] = (
    "model", "scenario", "environment", "baseline", "rounds", "speedup", "ci95_low", "ci95_high", "verdict", "agreement", "agreement_low",
    "agreement_high", "max_abs_diff", "no_valid_result",
)  # fmt: skip


def _rows(run_dirs: Iterable[str | os.PathLike[str]], trials: bool) -> pd.DataFrame:
    frames = []  # each model by its short name, as in the run's other tables
    for run_dir in run_dirs:
        for env_dir in environment_dirs(run_dir):
            rows = read_results(env_dir, trials=trials)
            rows = rows[rows["scenario"] != CELL_SCENARIO]
            if not rows.empty:
                frames.append(short_model_names(rows, run_models(run_dir)).assign(run=Path(run_dir).name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_rows(run_dirs: Iterable[str | os.PathLike[str]]) -> pd.DataFrame:
    """Every load scenario's cell of the runs (the kept attempt of each round), with `run`; empty when there is none."""
    return _rows(run_dirs, trials=False)


def load_trials(run_dirs: Iterable[str | os.PathLike[str]]) -> pd.DataFrame:
    """Every server trial of the runs, with `run`; empty when there is none."""
    return _rows(run_dirs, trials=True)


def is_valid(row: pd.Series) -> bool:
    """Whether LoadGen found a load cell's result VALID (for the server: some rate met the bound)."""
    return row["status"] == status.OK and str(row["valid"]) == "True"


def figure_of(row: pd.Series) -> float:
    """A load cell's figure (FIGURES), NaN where it has none: not ok, or INVALID (LoadGen's verdict: an INVALID result is
    never a figure to rank, nor a baseline; for the server, no rate met the bound)."""
    if not is_valid(row):
        return float("nan")
    _, source, _ = FIGURES[row["scenario"]]
    value = float(row["loadgen_value"]) * 1e-6 if source == "latency" else pd.to_numeric(row[source], errors="coerce")
    return float(value)


def figure_column(scenario: str, percentile: int) -> str:
    """The table's column of `scenario`'s figure; a latency's names the percentile it was judged at."""
    return FIGURES[scenario][0].format(percentile)


def figure_columns(table: pd.DataFrame, scenario: str) -> list[str]:
    """The columns of `table` that hold `scenario`'s figure (a latency's, one per percentile its rows were judged at)."""
    prefix, _, suffix = FIGURES[scenario][0].partition("{}")
    return [column for column in table.columns if column == prefix or (suffix and column.startswith(prefix) and column.endswith(suffix))]


def ways(rows: pd.DataFrame) -> dict[str, pd.Series]:
    """`options` and `precision` as the baseline's selector reads them (blank: the backend's defaults, float32)."""
    return {"options": rows["options"].astype(object).fillna("").astype(str), "precision": rows["precision"].fillna("float32")}


def invalid_text(cells: pd.DataFrame) -> str:
    """The INVALID results among a model's load cells in one environment, each scenario with LoadGen's reason (`; `)."""
    invalid = cells[(cells["status"] == status.OK) & ~cells.apply(is_valid, axis=1)]
    reasons = invalid.groupby("scenario", sort=False)["reason"].first()
    return "; ".join(f"{scenario}: {str(reason).removeprefix('LoadGen: ') or 'INVALID'}" for scenario, reason in reasons.items())


def agreement_of(cells: pd.DataFrame) -> float:
    """A model's agreement with eager PyTorch float32 in one environment under load: 1 for the baseline itself, else the
    lowest over its load cells (tokens when generating), NaN where not compared."""
    return 1.0 if BASELINE.select(cells) else _agreement(cells)


def token_interval(agreement: float, tokens: int) -> tuple[float, float]:
    """The exact binomial (Clopper-Pearson) 95% interval of a token agreement over the `tokens` compared; NaNs where none
    were."""
    if pd.isna(agreement) or tokens < 1:
        return float("nan"), float("nan")
    from scipy import stats  # here: scipy.stats costs every `benchlib` command a second more to start

    interval = stats.binomtest(round(agreement * tokens), tokens).proportion_ci(CONFIDENCE, method="exact")
    return float(interval.low), float(interval.high)


def token_verdict(agreement: float, tokens: int) -> str:
    """Token agreement against AGREEMENT_BAR (MLPerf's 99%), read from its interval over the `tokens` compared
    (`token_interval`): `keeps`, `below`, or `undecided` where too few tokens decide (with every token the same, fewer
    than about 370); "" where none were compared."""
    if pd.isna(agreement) or tokens < 1:
        return ""
    return verdict(agreement, *token_interval(agreement, tokens), AGREEMENT_BAR)


def _judged_tokens(cells: pd.DataFrame) -> tuple[float, int] | None:
    """The lowest token agreement of an environment's generating load cells and the tokens it was read over (a batch of
    `max_batch` prompts' `new_tokens`; (NaN, 0) where none was compared); None for the baseline itself and for a forward
    output's agreement, which has no interval."""
    if BASELINE.select(cells) or not (cells["workload"] == "generate").any():
        return None
    compared = cells.assign(value=pd.to_numeric(cells["token_agreement"], errors="coerce")).dropna(subset=["value"])
    if compared.empty:
        return float("nan"), 0
    lowest = compared.loc[compared["value"].idxmin()]
    return float(lowest["value"]), int(lowest["batch_size"]) * int(lowest["new_tokens"])


def agreement_verdict(cells: pd.DataFrame) -> str:
    """A model's agreement verdict in one environment under load: generated tokens' from their interval (`token_verdict`);
    otherwise its point decides (`keeps` for the baseline itself)."""
    tokens = _judged_tokens(cells)
    return verdict(agreement_of(cells), None, None, AGREEMENT_BAR) if tokens is None else token_verdict(*tokens)


def agreement_interval(cells: pd.DataFrame) -> tuple[float, float]:
    """The interval of an environment's generated tokens' agreement under load (`token_interval` of the lowest); NaNs
    for a forward output's agreement, which has none, and for the baseline itself."""
    tokens = _judged_tokens(cells)
    return (float("nan"), float("nan")) if tokens is None else token_interval(*tokens)


def scenario_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per environment and model: each scenario's figure (the median over its VALID rounds), `rounds`, the
    `agreement` with eager PyTorch float32 (`agreement_of`) and its verdict against 99% (`agreement_verdict`), and
    `invalid`: the scenarios that LoadGen found INVALID in a round, with its reason (for the server: no rate met the
    bound); when generating, the TOKEN_FIGURES too. An INVALID result has no figure here: it is never ranked."""
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(
        **ways(rows), figure=[figure_of(row) for _, row in rows.iterrows()],
        column=[figure_column(row["scenario"], judged_percentile(row)) for _, row in rows.iterrows()],
    )  # fmt: skip
    lines, measured = [], set(rows["scenario"])  # a scenario no row measured has no column
    for (environment, model), cells in rows.groupby(["environment", "model"], sort=False):
        line = {"environment": environment, "model": model, "rounds": int(cells["round"].nunique())}
        for scenario in [scenario for scenario in SCENARIO_ORDER if scenario in measured]:
            columns = cells.loc[cells["scenario"] == scenario, "column"].unique()
            for column in columns if len(columns) else [figure_column(scenario, MLPERF_PERCENTILE.get(scenario, 0))]:
                line[column] = cells.loc[cells["column"] == column, "figure"].median()
        generated = cells[(cells["workload"] == "generate") & (cells["status"] == status.OK)]
        for scenario, columns in TOKEN_FIGURES.items() if not generated.empty else ():
            for column, source in columns:
                values = pd.to_numeric(generated.loc[generated["scenario"] == scenario, source], errors="coerce")
                line[column] = values.median() * (1000 if column.endswith("_ms") else 1)
        line["agreement"] = agreement_of(cells)
        line["agreement_verdict"] = agreement_verdict(cells)
        line["invalid"] = invalid_text(cells)
        lines.append(line)
    return pd.DataFrame(lines)


def _shared_parameter(run_dirs: Iterable[str | os.PathLike[str]], name: str, workload: str | None = None) -> float | None:
    """Parameter `name` of the runs' load environments (of `workload` where given; environment.json), where they share
    one; else None."""
    values = set()
    for run_dir in run_dirs:
        for env_dir in environment_dirs(run_dir):
            parameters = read_environment(env_dir).get("parameters", {})
            if parameters.get("scenario", [CELL_SCENARIO]) != [CELL_SCENARIO] and workload in (None, parameters.get("workload")):
                values.add(parameters.get(name))
    return values.pop() if len(values) == 1 else None


def latency_bound_ms(run_dirs: Iterable[str | os.PathLike[str]]) -> float | None:
    """The server's latency bound of the runs' load environments (environment.json), where they share one; else None."""
    return _shared_parameter(run_dirs, "latency_bound_ms")


def token_bounds_ms(run_dirs: Iterable[str | os.PathLike[str]]) -> tuple[float | None, float | None]:
    """The time-to-first-token and time-per-output-token bounds of the runs' generating load environments, each where
    they share one; else None."""
    return _shared_parameter(run_dirs, "ttft_bound_ms", "generate"), _shared_parameter(run_dirs, "tpot_bound_ms", "generate")


def _best(figures: pd.Series, scenario: str) -> str:
    return str(figures.idxmax() if FIGURES[scenario][2] else figures.idxmin())


def fastest_per_scenario(table: pd.DataFrame) -> pd.DataFrame:
    """Per model and scenario: the environment with the best VALID figure (the lowest latency, the highest rate), its
    figure (in the unit of `scenario_table`'s column), its agreement and how many environments had one; the best whose
    agreement with eager PyTorch float32 keeps AGREEMENT_BAR (MLPerf's 99%, `agreement_verdict`; blank where none does);
    and those faster whose verdict is `undecided`, never named the one that keeps. Models measured in one environment
    are left out."""
    lines = []
    for model, group in table.groupby("model", sort=False):
        if len(group) < 2:
            continue
        indexed = group.set_index("environment")
        for scenario in SCENARIO_ORDER:
            for column in figure_columns(group, scenario):
                figures = indexed[column].dropna()
                if figures.empty:
                    continue
                best = _best(figures, scenario)
                verdicts = indexed.loc[figures.index, "agreement_verdict"]
                keeping = figures[verdicts == KEEPS]
                kept = _best(keeping, scenario) if len(keeping) else ""
                faster = figures if not kept else figures[(figures > keeping[kept]) if FIGURES[scenario][2] else (figures < keeping[kept])]
                lines.append({
                    "model": model, "scenario": scenario, "column": column, "fastest": best, "figure": figures[best],
                    "agreement": indexed.loc[best, "agreement"], "environments": len(figures), "fastest_keeping_99": kept,
                    "figure_keeping_99": keeping[kept] if kept else float("nan"),
                    "undecided": ", ".join(name for name in faster.index if verdicts[name] == UNDECIDED),
                })  # fmt: skip
    return pd.DataFrame(lines, columns=list(FASTEST_COLUMNS))


SCENARIO_WORDS: dict[str, str] = {
    "single-stream": "one request at a time (single-stream)", "multi-stream": "a query of several samples at a time (multi-stream)",
    "server": "requests arriving at random (server)", "offline": "every request at once (offline)",
    "concurrency": "more requests in flight until tokens per second stop rising (concurrency)",
}  # fmt: skip



def _percentile(column: str) -> str:
    """The percentile a latency column names (`single_stream_p90_ms`: "90th")."""
    return column.rsplit("_p", 1)[1].removesuffix("_ms") + "th"


def bound_text(rows: pd.DataFrame, run_dirs: Iterable[str | os.PathLike[str]]) -> str:
    """The server's bound in words (`under 100 ms at the 90th percentile`; when generating, `within 2000 ms to the first
    token and 200 ms per output token at the 90th percentile`), where the runs' load environments share one."""
    server = rows[rows["scenario"] == "server"] if not rows.empty else rows
    percentiles = {judged_percentile(row) for _, row in server.iterrows()}
    at = f" at the {percentiles.pop()}th percentile" if len(percentiles) == 1 else ""
    if not server.empty and set(server["workload"]) == {"generate"}:
        ttft, tpot = token_bounds_ms(run_dirs)
        bounds = [f"{ttft:g} ms to the first token" if ttft is not None else "", f"{tpot:g} ms per output token" if tpot is not None else ""]
        return f"within {' and '.join(filter(None, bounds))}{at}" if any(bounds) else "within the token bounds"
    bound_ms = latency_bound_ms(run_dirs)
    return f"under {bound_ms:g} ms{at}" if bound_ms is not None else "under the latency bound"


def figure_text(scenario: str, column: str, figure: float, bound: str = "") -> str:
    """A scenario's figure in words: `3.1 ms at the 90th percentile`, `serves 607 requests/s under 100 ms at the 90th
    percentile` (`bound`: `bound_text`), `1.2e+03 samples/s`."""
    if scenario == "server":
        return f"serves {figure:.4g} requests/s {bound or 'under the latency bound'}"
    if scenario == "offline":
        return f"{figure:.4g} samples/s"
    if scenario == "concurrency":
        return f"{figure:.4g} tokens/s at its knee"
    return f"{figure:.3g} ms at the {_percentile(column)} percentile"


def _speedup_text(speedups: pd.DataFrame, model: str, scenario: str, environment: str) -> str:
    """An environment's speed-up over eager PyTorch float32 in one scenario, short: `2.26x (2.10x to 2.41x)`, `1.5x (1
    round)`, `baseline`; "" where there is none."""
    found = speedups[(speedups["model"] == model) & (speedups["scenario"] == scenario) & (speedups["environment"] == environment)]
    if found.empty or pd.isna(found["speedup"].iloc[0]):
        return ""
    line = found.iloc[0]
    if line["verdict"] == BASELINE_VERDICT:
        return BASELINE_VERDICT
    if pd.isna(line["ci95_low"]):
        return f"{line['speedup']:.3g}x ({line['rounds']} round: {line['verdict']})"
    return f"{line['speedup']:.3g}x ({line['ci95_low']:.3g}x to {line['ci95_high']:.3g}x, {line['verdict']})"


def findings(table: pd.DataFrame, fastest: pd.DataFrame, speedups: pd.DataFrame, bound: str = "") -> list[str]:
    """The findings under load, from `scenario_table`, `fastest_per_scenario` and `scenario_speedups` (`bound`: the
    server's bound in words, `bound_text`): per model, one sentence with the answer and a table with a line per scenario
    (the fastest environment with a VALID result, its figure, speed-up over eager PyTorch float32 and agreement; the
    fastest whose agreement keeps AGREEMENT_BAR, its figure and speed-up), naming those faster whose agreement is
    undecided; a model measured in one environment, its figures; then the INVALID results, which no ranking uses."""
    sentences = []
    keeps = f"keeps {AGREEMENT_BAR:.0%} agreement with eager PyTorch float32"
    for model, lines in fastest.groupby("model", sort=False):
        rows, best, kept, undecided = [], {}, {}, {}
        several = lines["scenario"].duplicated(keep=False)
        for (_, line), many in zip(lines.iterrows(), several):
            short = lambda figure: figure_text(line["scenario"], line["column"], figure, "").removeprefix("serves ").removesuffix(" under the latency bound")  # noqa: E731
            name = f"{line['scenario']} ({line['column']})" if many else line["scenario"]
            best[name], keeping = line["fastest"], line["fastest_keeping_99"]
            if keeping:
                kept[name] = keeping
            for waiting in filter(None, str(line["undecided"] or "").split(", ")):
                undecided.setdefault(waiting, []).append(name)
            rows.append({
                "scenario": name, "fastest": line["fastest"], "figure": short(line["figure"]),
                "speed-up": _speedup_text(speedups, model, line["scenario"], line["fastest"]), "agreement": f"{line['agreement']:.5g}",
                f"fastest that keeps {AGREEMENT_BAR:.0%}": keeping or "none",
                "its figure": short(line["figure_keeping_99"]) if keeping and keeping != line["fastest"] else "",
                "its speed-up": _speedup_text(speedups, model, line["scenario"], keeping) if keeping and keeping != line["fastest"] else "",
            })  # fmt: skip
        if best == kept:
            sentence = f"Under load, for {model}, the fastest is {winners_text(best, 'in every scenario')}, and it {keeps}."
        elif kept:
            sentence = f"Under load, for {model}, the fastest is {winners_text(best, 'in every scenario')}; the fastest that {keeps} is {winners_text(kept, 'in every scenario')}."
        else:
            sentence = f"Under load, for {model}, the fastest is {winners_text(best, 'in every scenario')}; no environment with a VALID result {keeps}."
        if undecided:
            waiting = "; ".join(f"{name} ({' and '.join(scenarios)})" for name, scenarios in undecided.items())
            sentence += f" Faster, but too few tokens compared to tell whether it keeps 99% (undecided), so not named: {waiting}."
        if "server" in set(lines["scenario"]):
            sentence += f" A server's figure is the largest rate it served {bound or 'under the latency bound'}."
        sentences.append(sentence + "\n\n" + pd.DataFrame(rows).to_markdown(index=False))
    for model, group in table.groupby("model", sort=False):
        if len(group) == 1 and model not in set(fastest["model"]):
            line = group.iloc[0]
            figures = [
                f"{SCENARIO_WORDS[scenario]} {figure_text(scenario, column, line[column], bound)}"
                for scenario in SCENARIO_ORDER for column in figure_columns(group, scenario) if pd.notna(line[column])
            ]  # fmt: skip
            if figures:
                sentences.append(f"Under load, {model} was measured in {line['environment']} only: " + "; ".join(figures) + ".")
    invalid = [f"{line.environment} for {line.model} ({line.invalid})" for line in table.itertuples() if line.invalid]
    if invalid:
        sentences.append("Not ranked, INVALID in LoadGen's judgement: " + "; ".join(invalid) + ".")
    return sentences


def overhead_sentences(rows: pd.DataFrame) -> list[str]:
    """Per model and serving engine measured one request at a time (single-stream) beside eager PyTorch float32 in the
    kit's process: the engine's time to first token minus the in-process one (medians of LoadGen's median over VALID
    rounds), what the HTTP request and the engine add at one request."""
    if rows.empty or "ttft_s" not in rows:
        return []
    single = rows[(rows["scenario"] == "single-stream") & (rows["workload"] == "generate")].assign(**ways(rows))
    single = single[[is_valid(row) for _, row in single.iterrows()]].assign(ttft=lambda t: pd.to_numeric(t["ttft_s"], errors="coerce")).dropna(subset=["ttft"])
    sentences = []
    for model, group in single.groupby("model", sort=False):
        baseline = BASELINE.select(group)[:1]
        if not baseline:
            continue
        eager_ms = 1000 * group.loc[group["environment"] == baseline[0], "ttft"].median()
        for environment, cells in group[group["framework"] == ENGINE_FRAMEWORK].groupby("environment", sort=False):
            engine_ms = 1000 * cells["ttft"].median()
            difference = engine_ms - eager_ms
            sentences.append(
                f"At one request (single-stream), {environment}'s time to first token for {model} is {abs(difference):.3g} ms "
                f"{'above' if difference >= 0 else 'below'} {baseline[0]}'s in the kit's process ({engine_ms:.3g} ms against "
                f"{eager_ms:.3g} ms): what the HTTP request and the engine {'add' if difference >= 0 else 'save'}."
            )
    return sentences


def ranking_sentences(fastest: pd.DataFrame) -> list[str]:
    """A sentence per model where the fastest environment one request at a time (single-stream) is not the one that
    serves the most under the bound (server) or reaches the most samples per second (offline)."""
    sentences = []
    for model, group in fastest.groupby("model", sort=False):
        best = group.set_index("scenario")["fastest"]
        if "single-stream" not in best:
            continue
        for scenario, what in (("server", "serves the most requests per second under the latency bound"), ("offline", "reaches the most samples per second")):
            if scenario in best and best[scenario] != best["single-stream"]:
                sentences.append(f"For {model}, {best['single-stream']} is the fastest one request at a time, but {best[scenario]} {what} ({scenario}).")
    return sentences


def short_server_sentences(table: pd.DataFrame) -> list[str]:
    """A sentence per environment and model whose largest VALID server rate is above what it reached in Offline: a test
    too short for the queue to build up past the bound (`min_duration_s`), so the server's figure overstates the rate."""
    if not {"server_max_qps", "offline_samples_per_s"} <= set(table.columns):
        return []
    over = table[table["server_max_qps"] > table["offline_samples_per_s"]]
    return [
        f"For {line.model} in {line.environment}, the server's largest VALID rate ({line.server_max_qps:.4g}/s) is above what "
        f"Offline reached ({line.offline_samples_per_s:.4g} samples/s): its tests were too short for a queue to build up "
        "(raise min_duration_s); the server cannot sustain more than Offline's rate."
        for line in over.itertuples()
    ]


def _time_like(rows: pd.DataFrame, scenario: str) -> pd.Series:
    """Per round, a figure where less is better: the latency, or one over the rate."""
    figures = pd.Series([figure_of(row) for _, row in rows.iterrows()], index=rows["round"].to_numpy(), dtype=float).dropna()
    return 1 / figures if FIGURES[scenario][2] else figures


def _agreement(rows: pd.DataFrame) -> float:
    """The lowest agreement with eager PyTorch float32 of an environment's load cells (tokens when generating), NaN where
    not compared."""
    column = "token_agreement" if (rows["workload"] == "generate").any() else "agreement"
    return float(pd.to_numeric(rows[column], errors="coerce").min())


def scenario_speedups(rows: pd.DataFrame) -> pd.DataFrame:
    """Per model and scenario, every environment's speed-up over eager PyTorch float32 (the module's docstring): the rounds
    both have a VALID figure in, the interval and verdict (`inconclusive` with fewer than two such rounds, or a disturbed
    one), the environment's agreement and largest difference from the baseline's output, and `no_valid_result`: which
    side (baseline, environment) LoadGen found INVALID in every round, so that no speed-up rests on it. No rows without
    the baseline."""
    lines = []
    if rows.empty:
        return pd.DataFrame(columns=list(SPEEDUP_COLUMNS))
    rows = rows.assign(**ways(rows))
    for (model, scenario), group in rows.groupby(["model", "scenario"], sort=False):
        baseline = BASELINE.select(group)[:1]
        if not baseline:
            continue
        base_rows = group[group["environment"] == baseline[0]]
        base = _time_like(base_rows, scenario)
        for environment, cells in group.groupby("environment", sort=False):
            other = _time_like(cells, scenario)
            low, high = agreement_interval(cells)
            rounds = sorted(set(base.index) & set(other.index))
            invalid = [name for name, figures in (("baseline", base), ("environment", other)) if figures.empty]
            line = {
                "model": model, "scenario": scenario, "environment": environment, "baseline": baseline[0], "rounds": len(rounds),
                "agreement": _agreement(cells), "max_abs_diff": pd.to_numeric(cells["max_abs_diff"], errors="coerce").max(),
                "agreement_low": low, "agreement_high": high,
                "no_valid_result": " and ".join(invalid),
            }  # fmt: skip
            if environment == baseline[0]:
                lines.append({**line, "speedup": 1.0 if rounds else float("nan"), "verdict": BASELINE_VERDICT, "agreement": 1.0})
                continue
            point = float(base[rounds].median() / other[rounds].median()) if rounds else float("nan")
            if len(rounds) < 2:
                lines.append({**line, "speedup": point, "verdict": significance.INCONCLUSIVE})
                continue
            estimate = significance.ratio_interval([base[rounds].tolist()], [other[rounds].tolist()], over="rounds")
            disturbed = int((pd.concat([base_rows, cells])["disturbed"].astype(str) == "True").sum())
            line.update(speedup=1 / estimate.ratio, ci95_low=1 / estimate.high, ci95_high=1 / estimate.low)
            lines.append({**line, "verdict": significance.verdict(estimate, disturbed=disturbed)})
    return pd.DataFrame(lines).reindex(columns=list(SPEEDUP_COLUMNS))


def compared_cells(run_dir: str | os.PathLike[str]) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """A run's load cells as `compare` reads cells, one line per environment, model and scenario over its rounds: `time_s`
    the median over its `ok` rounds of a figure where less is better (the latency, or one over the rate), `values` and
    `samples` those rounds' figures (`values_over` "rounds": a load cell has one figure per round), `disturbed` when a
    kept round was; and each such environment's environment.json."""
    lines, infos = [], {}
    for env_dir in environment_dirs(run_dir):
        rows = read_results(env_dir)
        rows = rows[rows["scenario"] != CELL_SCENARIO]
        if rows.empty:
            continue
        infos[env_dir.name] = read_environment(env_dir)
        for _, cells in rows.groupby(["environment", "model", "scenario"], sort=False):
            ok = cells[cells["status"] == status.OK]
            figures = _time_like(ok, str(cells["scenario"].iloc[0])).tolist() if len(ok) else []
            line = (ok if len(ok) else cells).iloc[-1]
            lines.append({
                **{key: line[key] for key in ("environment", "workload", "scenario", "model", "batch_size", "sequence_length", "reason")},
                "status": status.OK if figures else line["status"], "time_s": float(pd.Series(figures).median()) if figures else float("nan"),
                "values": figures, "values_over": "rounds", "samples": figures, "disturbed": bool((cells["disturbed"].astype(str) == "True").any()),
            })  # fmt: skip
    return pd.DataFrame(lines), infos
