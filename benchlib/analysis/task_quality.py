"""Quality on the user's data, for the summary and `compare`: each environment's task metric per model (the rows'
`quality_*` columns), its ratio to eager PyTorch float32's with its interval and verdict against `quality_target`
(MLPerf's 99% rule, read from the interval: `keeps`, `below` or `undecided`, `workloads.quality.verdict`), what
LoadGen's accuracy mode under load scored, and each environment's speed-up beside its quality, so that the fastest
environment named is the fastest that keeps the target, never one below it nor one the data cannot decide.

Pure functions of results rows (`read_results`) and of the speed-up tables of `speedups` and `load`.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd

from benchlib.analysis import load as under_load
from benchlib.analysis.runs import load_runs, prepare, short_model_names
from benchlib.analysis.speedups import BASELINE_NAME, times_text, winners_text
from benchlib.store.results import has_text
from benchlib.workloads.quality import KEEPS, UNDECIDED, examples_to_decide, verdict

QUALITY_COLUMNS: tuple[str, ...] = (
    "device", "machine", "model", "environment", "framework", "mode", "precision", "data", "metric", "value", "low", "high",
    "reference", "ratio", "ratio_low", "ratio_high", "target", "verdict", "examples", "decide_examples", "truncated", "f1",
    "served_value", "served_matches", "reason",
)  # fmt: skip
SPEED_QUALITY_COLUMNS: tuple[str, ...] = (
    "device", "machine", "model", "measured", "environment", "speedup", "ci95_low", "ci95_high", "speed_verdict", "judged_by",
    "quality", "quality_low", "quality_high", "quality_verdict", "decide_examples",
)  # fmt: skip
FORWARD_PASS = "the forward pass"  # `measured` of a speed-up from the cells timed one call at a time
BY_TASK, BY_AGREEMENT = "task metric", "agreement"  # `judged_by`: the metric on the user's data, or the proxy
# How close LoadGen's accuracy mode must score to the direct scoring of the same examples: the same runtime and
# precision answer both, so only a batch of another size (another kernel of the runtime) may move the last digits.
SERVED_TOLERANCE: dict[str, float] = {"float32": 1e-3, "bfloat16": 1e-2, "float16": 1e-2, "int8": 1e-2}


def _number(values: pd.Series) -> pd.Series:
    return pd.to_numeric(values, errors="coerce")


def served_matches(value: float, served: float, precision: str) -> bool | None:
    """Whether the score from LoadGen's accuracy log equals the direct score within the precision's tolerance (relative
    to the score, at least 1); None where there is no accuracy log."""
    if not (np.isfinite(value) and np.isfinite(served)):
        return None
    return bool(abs(served - value) <= SERVED_TOLERANCE.get(precision, 1e-2) * max(1.0, abs(value)))


def quality_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per device, machine, model (by its short name) and environment that scored the user's data (or the
    text's perplexity): the metric with its interval, eager float32's, the ratio with its interval and its verdict
    against the target read from that interval, and where undecided, about how many examples would decide
    (`decide_examples`); the examples scored and cut, the macro F1 of a classification, the score from LoadGen's accuracy
    log and whether it matches, and why a figure is missing. Empty (with the columns) where no row has one."""
    if rows.empty or "quality_metric" not in rows:
        return pd.DataFrame(columns=list(QUALITY_COLUMNS))
    scored = rows[has_text(rows["quality_metric"])]
    if scored.empty:
        return pd.DataFrame(columns=list(QUALITY_COLUMNS))
    scored = prepare(short_model_names(scored))
    lines = []
    for (device, machine, model, environment), group in scored.groupby(["device_type", "machine", "model", "environment"], sort=False):
        first = group.iloc[0]
        served = _number(group.get("served_quality_value", pd.Series(dtype=float))).dropna()
        numbers = {name: _number(pd.Series([first[f"quality_{name}"]])).iloc[0] for name in ("value", "low", "high", "reference", "ratio", "ratio_low", "ratio_high", "target", "n", "truncated", "f1")}
        served_value = served.iloc[0] if len(served) else math.nan
        judged = verdict(numbers["ratio"], numbers["ratio_low"], numbers["ratio_high"], numbers["target"]) if pd.notna(numbers["target"]) else ""
        decide = examples_to_decide(numbers["ratio"], numbers["ratio_low"], numbers["ratio_high"], numbers["target"], int(numbers["n"])) if judged == UNDECIDED else None
        lines.append({
            "device": device, "machine": machine, "model": model, "environment": environment, "framework": first["framework"],
            "mode": first["mode"], "precision": first["precision"], "data": first["quality_data"], "metric": first["quality_metric"],
            **numbers, "verdict": judged, "decide_examples": decide if decide is not None else math.nan, "served_value": served_value,
            "served_matches": served_matches(numbers["value"], served_value, first["precision"]),
            "reason": "; ".join(dict.fromkeys(str(r) for r in group["quality_reason"] if isinstance(r, str) and r)),
        })  # fmt: skip
    table = pd.DataFrame(lines).rename(columns={"n": "examples"})
    return table.reindex(columns=list(QUALITY_COLUMNS))


def speed_and_quality(quality: pd.DataFrame, cell_speedups: pd.DataFrame, load_speedups: pd.DataFrame) -> pd.DataFrame:
    """Each environment's speed-up over eager float32 per model (the forward pass's cells, `speedups(per_model=True)`; each
    load scenario, `load.scenario_speedups`) beside its quality: the task metric's ratio where the environment scored the
    user's data, else its agreement on the timed batch (`judged_by` says which), and its verdict against the target
    (from the ratio's interval, or generated tokens' agreement's under load; a forward output's agreement has none, so
    its point decides)."""
    lines = []
    by_task = quality.set_index(["model", "environment"]) if not quality.empty else pd.DataFrame()
    default_target = float(quality["target"].dropna().iloc[0]) if not quality.empty and quality["target"].notna().any() else 0.99
    sources = [(cell_speedups, None), (load_speedups, "scenario")]
    for table, measured_column in sources:
        if table is None or table.empty:
            continue
        for line in table.itertuples(index=False):
            line = line._asdict()
            key = (line["model"], line["environment"])
            if key in by_task.index and pd.notna(by_task.loc[key, "ratio"]):
                task = by_task.loc[key]
                judged, value, low, high, judgement, decide = BY_TASK, task["ratio"], task["ratio_low"], task["ratio_high"], task["verdict"], task["decide_examples"]
            else:  # generated tokens' agreement under load has its interval (`load.agreement_interval`); elsewhere the point decides
                value, low, high = line.get("agreement", math.nan), line.get("agreement_low", math.nan), line.get("agreement_high", math.nan)
                interval = (low, high) if pd.notna(low) and pd.notna(high) else (None, None)
                judged, judgement, decide = BY_AGREEMENT, verdict(value, *interval, default_target), math.nan
            lines.append({
                "device": line.get("device", ""), "machine": line.get("machine", ""), "model": line["model"],
                "measured": line[measured_column] if measured_column else FORWARD_PASS, "environment": line["environment"],
                "speedup": line["speedup"], "ci95_low": line.get("ci95_low", math.nan), "ci95_high": line.get("ci95_high", math.nan),
                "speed_verdict": line.get("verdict", ""), "judged_by": judged, "quality": value, "quality_low": low, "quality_high": high,
                "quality_verdict": judgement, "decide_examples": decide,
            })  # fmt: skip
    return pd.DataFrame(lines, columns=list(SPEED_QUALITY_COLUMNS))


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def quality_text(line: pd.Series) -> str:
    """A quality figure with its interval where it has one: `98.7% (93.6% to 102.9%)`."""
    if pd.isna(line["quality"]):
        return ""
    interval = f" ({_percent(line['quality_low'])} to {_percent(line['quality_high'])})" if pd.notna(line["quality_low"]) else ""
    return _percent(line["quality"]) + interval


def undecided_text(line: pd.Series) -> str:
    """An undecided environment with its quality's interval and about how many examples would decide it."""
    decide = f"; about {int(line['decide_examples']):,} examples would decide" if pd.notna(line["decide_examples"]) else ""
    return f"{line['environment']} ({times_text(line['speedup'])}, {quality_text(line)}{decide})"


def findings(quality: pd.DataFrame, speed: pd.DataFrame) -> list[str]:
    """Per model: one sentence with the answer (the fastest environment that keeps the target of eager float32's score
    on the user's data, or its agreement, said so) and a table with a line per measurement (the forward pass, each load
    scenario): the fastest, the fastest that keeps, and the undecided ones with their intervals and the examples that
    would decide; an undecided environment is never ranked nor set aside. Then any accuracy test under load whose score
    differs from the direct one."""
    sentences = []
    for model, by_model in speed.groupby("model", sort=False):
        judged = BY_TASK if (by_model["judged_by"] == BY_TASK).any() else BY_AGREEMENT
        line = quality[quality["model"] == model]
        target = float(line["target"].dropna().iloc[0]) if not line.empty and line["target"].notna().any() else 0.99
        what = (
            f"{line['metric'].iloc[0]} on {line['data'].iloc[0]}" if judged == BY_TASK
            else "agreement with eager float32 on the timed batch (the proxy: no eval_data scored here)"
        )  # fmt: skip
        rows, best, undecided = [], {}, []
        for measured, group in by_model.groupby("measured", sort=False):
            ranked = group[group["speedup"].notna() & (group["judged_by"] == judged)].sort_values("speedup", ascending=False)
            if len(ranked) < 2:
                continue
            top, keeping = ranked.iloc[0], ranked[ranked["quality_verdict"] == KEEPS]
            kept = keeping.iloc[0] if not keeping.empty else None
            waiting = ranked[ranked["quality_verdict"] == UNDECIDED]
            undecided += list(waiting["environment"])
            if kept is not None:
                best[measured] = kept["environment"]
            rows.append({
                "measured": measured, "fastest": f"{top['environment']} ({top['quality_verdict']})", "speed-up": times_text(top["speedup"]),
                "quality": quality_text(top), "fastest that keeps": kept["environment"] if kept is not None else "none",
                "its speed-up": times_text(kept["speedup"]) if kept is not None else "", "its quality": quality_text(kept) if kept is not None else "",
                "undecided": "; ".join(undecided_text(row) for _, row in waiting.iterrows()) or "none",
            })  # fmt: skip
        if not rows:
            continue
        keeps = f"keeps {_percent(target)} of {BASELINE_NAME}'s {what}"
        sentence = (
            f"For {model}, the fastest environment that {keeps} is {winners_text(best, 'in every measurement')}."
            if best else f"For {model}, no environment {keeps}."
        )  # fmt: skip
        if undecided:
            names = ", ".join(dict.fromkeys(undecided))
            sentence += f" Undecided (the interval holds the target), so neither ranked nor set aside: {names}; the table says about how many examples would decide."
        sentences.append(sentence + "\n\n" + pd.DataFrame(rows).to_markdown(index=False))
    for row in quality[quality["served_matches"] == False].itertuples():  # noqa: E712  # None: no accuracy test
        sentences.append(
            f"Under load, {row.environment} scored {row.model}'s {row.metric} {row.served_value:.5g} through LoadGen's accuracy mode "
            f"against {row.value:.5g} scored directly: serving changed its answers."
        )
    return sentences


def run_quality(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The `quality_table` of one run: its cells' rows and its load scenarios'."""
    return quality_table(pd.concat([load_runs([run_dir]), under_load.load_rows([run_dir])], ignore_index=True))


CHANGE_COLUMNS: tuple[str, ...] = (
    "model", "environment", "metric", "value_a", "low", "high", "value_b", "ratio_a", "ratio_low_a", "ratio_high_a", "ratio_b",
    "ratio_low_b", "ratio_high_b", "verdict_a", "verdict_b", "decide_examples_a", "decide_examples_b", "changed", "undecided_in_both",
)  # fmt: skip


def quality_changes(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per model and environment in both runs' `quality_table`s, scored on the same data: the score, the ratio to
    float32's with its interval and the verdict in each; whether the verdict changed or B's score is outside A's
    interval (`changed`), and whether neither run's examples decided it (`undecided_in_both`)."""
    keys = ["model", "environment", "metric", "data"]
    if a.empty or b.empty:
        return pd.DataFrame(columns=list(CHANGE_COLUMNS))
    ratios = ["ratio", "ratio_low", "ratio_high", "verdict", "decide_examples"]
    merged = a[[*keys, "value", "low", "high", *ratios]].merge(b[[*keys, "value", *ratios]], on=keys, suffixes=("_a", "_b"))
    outside = (merged["value_b"] < merged["low"]) | (merged["value_b"] > merged["high"])
    merged["changed"] = (merged["verdict_a"] != merged["verdict_b"]) | outside.fillna(False)
    merged["undecided_in_both"] = (merged["verdict_a"] == UNDECIDED) & (merged["verdict_b"] == UNDECIDED)
    return merged.reindex(columns=list(CHANGE_COLUMNS))


def _ratio_text(row: pd.Series, run: str) -> str:
    """A run's ratio to float32's with its interval: `0.987 (0.936 to 1.029) in A`."""
    value, low, high = row[f"ratio_{run}"], row[f"ratio_low_{run}"], row[f"ratio_high_{run}"]
    interval = f" ({low:.4g} to {high:.4g})" if pd.notna(low) else ""
    return f"{value:.4g}{interval} in {run.upper()}"


def change_lines(changes: pd.DataFrame) -> list[str]:
    """One line per model and environment whose quality changed between two runs (its score, and its ratio to
    float32's with both intervals where the verdict moved), and one per model and environment undecided in both."""
    lines = []
    for _, row in changes.iterrows():
        both = f"ratio to float32's {_ratio_text(row, 'a')}, {_ratio_text(row, 'b')}"
        if row["undecided_in_both"] == True:  # noqa: E712
            decide = max(row["decide_examples_a"], row["decide_examples_b"])
            more = f"; about {int(decide):,} examples would decide" if pd.notna(decide) else ""
            lines.append(f"quality undecided in both runs: {row['environment']} {row['model']} {row['metric']}, {both}: neither run's examples decide whether it keeps the target{more}")
        elif row["changed"] == True:  # noqa: E712
            moved = f"; {both}" if row["verdict_a"] != row["verdict_b"] else ""
            lines.append(
                f"quality changed: {row['environment']} {row['model']} {row['metric']} {row['value_a']:.5g} -> {row['value_b']:.5g} "
                f"(A's 95% interval {row['low']:.5g} to {row['high']:.5g}; verdict {row['verdict_a'] or '-'} -> {row['verdict_b'] or '-'}{moved})"
            )
    return lines
