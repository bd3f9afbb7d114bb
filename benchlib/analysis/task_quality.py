"""Quality on the user's data, for the summary and `compare`: each environment's task metric per model (the rows'
`quality_*` columns), its ratio to eager PyTorch float32's with its interval and verdict against `quality_target`
(MLPerf's 99% rule), what LoadGen's accuracy mode under load scored, and each environment's speed-up beside its quality,
so that the fastest environment named is the fastest that keeps the target, never one below it.

Pure functions of results rows (`read_results`) and of the speed-up tables of `speedups` and `load`.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd

from benchlib.analysis import load as under_load
from benchlib.analysis.runs import load_runs, prepare
from benchlib.analysis.speedups import BASELINE_NAME, times_text
from benchlib.store.results import has_text

QUALITY_COLUMNS: tuple[str, ...] = (
    "device", "machine", "model", "environment", "framework", "mode", "precision", "data", "metric", "value", "low", "high",
    "reference", "ratio", "ratio_low", "ratio_high", "target", "verdict", "examples", "truncated", "f1", "served_value",
    "served_matches", "reason",
)  # fmt: skip
SPEED_QUALITY_COLUMNS: tuple[str, ...] = (
    "device", "machine", "model", "measured", "environment", "speedup", "ci95_low", "ci95_high", "speed_verdict", "judged_by",
    "quality", "quality_low", "quality_high", "keeps",
)  # fmt: skip
KEEPS, BELOW = "keeps", "below"
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
    """One line per device, machine, model and environment that scored the user's data (or the text's perplexity):
    the metric with its interval, eager float32's, the ratio with its interval and verdict, the examples scored and cut,
    the macro F1 of a classification, the score from LoadGen's accuracy log and whether it matches, and why a figure is
    missing. Empty (with the columns) where no row has one."""
    if rows.empty or "quality_metric" not in rows:
        return pd.DataFrame(columns=list(QUALITY_COLUMNS))
    scored = rows[has_text(rows["quality_metric"])]
    if scored.empty:
        return pd.DataFrame(columns=list(QUALITY_COLUMNS))
    scored = prepare(scored)
    lines = []
    for (device, machine, model, environment), group in scored.groupby(["device_type", "machine", "model", "environment"], sort=False):
        first = group.iloc[0]
        served = _number(group.get("served_quality_value", pd.Series(dtype=float))).dropna()
        value = _number(pd.Series([first["quality_value"]])).iloc[0]
        served_value = served.iloc[0] if len(served) else math.nan
        lines.append({
            "device": device, "machine": machine, "model": model, "environment": environment, "framework": first["framework"],
            "mode": first["mode"], "precision": first["precision"], "data": first["quality_data"], "metric": first["quality_metric"],
            **{name: _number(pd.Series([first[f"quality_{name}"]])).iloc[0] for name in ("value", "low", "high", "reference", "ratio", "ratio_low", "ratio_high", "target", "n", "truncated", "f1")},
            "verdict": first["quality_verdict"] if isinstance(first["quality_verdict"], str) else "", "served_value": served_value,
            "served_matches": served_matches(value, served_value, first["precision"]),
            "reason": "; ".join(dict.fromkeys(str(r) for r in group["quality_reason"] if isinstance(r, str) and r)),
        })  # fmt: skip
    table = pd.DataFrame(lines).rename(columns={"n": "examples"})
    return table.reindex(columns=list(QUALITY_COLUMNS))


def speed_and_quality(quality: pd.DataFrame, cell_speedups: pd.DataFrame, load_speedups: pd.DataFrame) -> pd.DataFrame:
    """Each environment's speed-up over eager float32 per model (the forward pass's cells, `speedups(per_model=True)`; each
    load scenario, `load.scenario_speedups`) beside its quality: the task metric's ratio where the environment scored the
    user's data, else its agreement on the timed batch (`judged_by` says which), and whether it keeps the target."""
    lines = []
    targets = quality.set_index(["model", "environment"])["target"] if not quality.empty else pd.Series(dtype=float)
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
                judged, value, low, high = BY_TASK, task["ratio"], task["ratio_low"], task["ratio_high"]
                target = float(targets.get(key, default_target))
            else:
                judged, value, low, high, target = BY_AGREEMENT, line.get("agreement", math.nan), math.nan, math.nan, default_target
            lines.append({
                "device": line.get("device", ""), "machine": line.get("machine", ""), "model": line["model"],
                "measured": line[measured_column] if measured_column else FORWARD_PASS, "environment": line["environment"],
                "speedup": line["speedup"], "ci95_low": line.get("ci95_low", math.nan), "ci95_high": line.get("ci95_high", math.nan),
                "speed_verdict": line.get("verdict", ""), "judged_by": judged, "quality": value, "quality_low": low, "quality_high": high,
                "keeps": bool(pd.notna(value) and value >= target),
            })  # fmt: skip
    return pd.DataFrame(lines, columns=list(SPEED_QUALITY_COLUMNS))


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def findings(quality: pd.DataFrame, speed: pd.DataFrame) -> list[str]:
    """Per model and what was measured: the fastest environment that keeps the target of eager float32's score on the
    user's data (or its agreement, said so), and the faster ones below it; then the environments below the target, and
    any accuracy test under load whose score differs from the direct one."""
    sentences = []
    for (model, measured), group in speed.groupby(["model", "measured"], sort=False):
        ranked = group[group["speedup"].notna()].sort_values("speedup", ascending=False)
        if ranked.empty or len(ranked) < 2:
            continue
        judged = BY_TASK if (ranked["judged_by"] == BY_TASK).any() else BY_AGREEMENT
        ranked = ranked[ranked["judged_by"] == judged]
        line = quality[quality["model"] == model]
        target = float(line["target"].dropna().iloc[0]) if not line.empty and line["target"].notna().any() else 0.99
        what = (
            f"{line['metric'].iloc[0]} on {line['data'].iloc[0]}" if judged == BY_TASK
            else "agreement with eager float32 on the timed batch (the proxy: no eval_data scored here)"
        )  # fmt: skip
        keeping = ranked[ranked["keeps"]]
        if keeping.empty:
            sentences.append(f"For {model} ({measured}), no environment keeps {_percent(target)} of {BASELINE_NAME}'s {what}.")
            continue
        top = keeping.iloc[0]
        faster = ranked[(~ranked["keeps"]) & (ranked["speedup"] > top["speedup"])]
        sentence = (
            f"For {model} ({measured}), the fastest environment that keeps {_percent(target)} of {BASELINE_NAME}'s {what} is "
            f"{top['environment']}: {times_text(top['speedup'])} ({top['speed_verdict']}), {_percent(top['quality'])} of float32's"
        )
        if pd.notna(top["quality_low"]):
            sentence += f" (95% interval {_percent(top['quality_low'])} to {_percent(top['quality_high'])})"
        below = ", ".join(f"{row.environment} ({times_text(row.speedup)}, {_percent(row.quality)})" for row in faster.itertuples())
        sentences.append(sentence + (f"; faster but below the target, so not ranked: {below}." if below else "."))
    for row in quality[quality["served_matches"] == False].itertuples():  # noqa: E712  # None: no accuracy test
        sentences.append(
            f"Under load, {row.environment} scored {row.model}'s {row.metric} {row.served_value:.5g} through LoadGen's accuracy mode "
            f"against {row.value:.5g} scored directly: serving changed its answers."
        )
    return sentences


def run_quality(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The `quality_table` of one run: its cells' rows and its load scenarios'."""
    return quality_table(pd.concat([load_runs([run_dir]), under_load.load_rows([run_dir])], ignore_index=True))


CHANGE_COLUMNS: tuple[str, ...] = ("model", "environment", "metric", "value_a", "low", "high", "value_b", "ratio_a", "ratio_b", "verdict_a", "verdict_b", "changed")


def quality_changes(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per model and environment in both runs' `quality_table`s, scored on the same data: the score and ratio to
    float32's in each, and whether the verdict changed or B's score is outside A's interval (`changed`)."""
    keys = ["model", "environment", "metric", "data"]
    if a.empty or b.empty:
        return pd.DataFrame(columns=list(CHANGE_COLUMNS))
    merged = a[[*keys, "value", "low", "high", "ratio", "verdict"]].merge(b[[*keys, "value", "ratio", "verdict"]], on=keys, suffixes=("_a", "_b"))
    outside = (merged["value_b"] < merged["low"]) | (merged["value_b"] > merged["high"])
    merged["changed"] = (merged["verdict_a"] != merged["verdict_b"]) | outside.fillna(False)
    return merged.reindex(columns=list(CHANGE_COLUMNS))


def change_lines(changes: pd.DataFrame) -> list[str]:
    """One line per model and environment whose quality changed between two runs."""
    return [
        f"quality changed: {row.environment} {row.model} {row.metric} {row.value_a:.5g} -> {row.value_b:.5g} "
        f"(A's 95% interval {row.low:.5g} to {row.high:.5g}; verdict {row.verdict_a or '-'} -> {row.verdict_b or '-'})"
        for row in changes[changes["changed"] == True].itertuples()  # noqa: E712
    ]
