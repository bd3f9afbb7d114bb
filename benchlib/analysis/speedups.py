"""Which way of running each model is fastest here: every environment against eager PyTorch float32 on its
device and machine (`speedups`), the fastest environment of each model and shape (`fastest`), and the
sentences the summary opens with (`findings`).

Pure pandas functions over results rows (`runs.load_runs`). A speed-up is baseline time / environment
time (above 1: faster than the baseline), the geometric mean over the cells `ok` in both, with the
bootstrap interval and verdict of `benchlib.analysis.significance` (the environment's against the baseline).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from benchlib import status
from benchlib.analysis import significance
from benchlib.analysis.claims import NOT_CHECKED
from benchlib.analysis.comparisons import (
    BASELINE,
    BASELINE_VERDICT,
    INTERVAL_COLUMNS,
    cells_of_pairs,
    geometric_mean,
    interval_columns,
    paired_estimate,
    ratio_estimate,
)  # fmt: skip
from benchlib.analysis.runs import GROUP, environments, prepare, shape_name
from benchlib.store.results import CELL_KEY, has_text
from benchlib.workloads.agreement import AGREEMENT_BAR

BASELINE_NAME = "eager PyTorch float32"
NO_RUNNER_UP = "no runner-up"  # the verdict of a cell that is ok in one environment only
NONE_OK = "none ok"  # the verdict of a cell that is ok in no environment
SPEEDUP_COLUMNS: tuple[str, ...] = (
    "device", "machine", "baseline", "environment", "framework", "mode", "precision",
    "cells", "cells_excluded", "speedup", *INTERVAL_COLUMNS, "max_abs_diff", "agreement", "weights",
)  # fmt: skip
FASTEST_COLUMNS: tuple[str, ...] = (
    "device", "machine", *CELL_KEY, "environments", "fastest", "time_s", "runner_up", "runner_up_s", "margin",
    *INTERVAL_COLUMNS, "max_abs_diff",
)  # fmt: skip


def _describe(row: pd.Series) -> str:
    """`framework, mode, precision` of an environment's row."""
    return f"{row['framework']}, {row['mode']}, {row['precision']}"


# ---------------------------------------------------------------- speed-ups


def baseline_cells(rows: pd.DataFrame) -> pd.DataFrame:
    """Every cell of every environment beside the same cell of the baseline (the first eager PyTorch float32
    environment of its device and machine; itself included): `comparisons.cells_of_pairs`'s columns."""
    return cells_of_pairs(rows, lambda group: [(base, env) for base in BASELINE.select(group)[:1] for env in environments(group)])


def _inverted_interval(estimate: significance.RatioEstimate, disturbed: list[str]) -> dict[str, Any]:
    """The interval columns of a ratio other / base, the interval turned into one of base / other (a speed-up)."""
    return {**interval_columns(estimate, disturbed), "ci95_low": 1 / estimate.high, "ci95_high": 1 / estimate.low}


def _speedup(cells: pd.DataFrame) -> dict[str, Any]:
    """The speed-up of one environment's cells (rows of `baseline_cells`) over the baseline, with its interval."""
    paired = cells[cells["paired"]]
    record = {
        "cells": len(paired), "cells_excluded": len(cells) - len(paired), "max_abs_diff": cells["other_max_abs_diff"].max(),
        "agreement": cells["other_agreement"].min(), "weights": ", ".join(sorted(set(paired["other_weights"].dropna()))),
    }  # fmt: skip
    if (cells["base_environment"] == cells["other_environment"]).all():
        return {**record, "agreement": 1.0, "speedup": 1.0 if len(paired) else math.nan, "verdict": BASELINE_VERDICT, "disturbed_cells": ""}
    return {**record, "speedup": 1 / geometric_mean(paired["ratio"]), **_inverted_interval(*paired_estimate(paired))}


def speedups(rows: pd.DataFrame, per_model: bool = False) -> pd.DataFrame:
    """Every environment's speed-up over eager PyTorch float32 on its device and machine (per model with `per_model`),
    fastest first: cells ok in both, the others, the speed-up with its interval and verdict, the disturbed cells it
    rests on, the environment's largest `max_abs_diff` and lowest `agreement` (the baseline's is 1; blank where not
    compared), and the models' `weights`. A device and machine without the baseline has no rows."""
    rows = prepare(rows)
    keys = ["device", "machine", "base_environment", "other_environment", *(["model"] if per_model else [])]
    records = [{**dict(zip(keys, key)), **_speedup(cells)} for key, cells in baseline_cells(rows).groupby(keys, sort=False)]
    columns = [*SPEEDUP_COLUMNS[:7], *(["model"] if per_model else []), *SPEEDUP_COLUMNS[7:]]
    if not records:
        return pd.DataFrame(columns=columns)
    kinds = rows.drop_duplicates("environment").set_index("environment")[["framework", "mode", "precision"]]
    table = pd.DataFrame(records).join(kinds, on="other_environment").rename(columns={"base_environment": "baseline", "other_environment": "environment"})
    order = ["device", "machine", *(["model"] if per_model else [])]
    table["_group"] = table.groupby(order, sort=False).ngroup()
    table = table.sort_values(["_group", "speedup"], ascending=[True, False], na_position="last", kind="stable")
    return table.reindex(columns=columns).reset_index(drop=True)


# ---------------------------------------------------------------- the fastest environment per cell


def _margin(ranked: pd.DataFrame) -> dict[str, Any]:
    """The fastest of a cell's `ok` environments (`ranked` by time), the runner-up, and the margin between them."""
    if ranked.empty:
        return {"fastest": "", "runner_up": "", "verdict": NONE_OK}
    first = ranked.iloc[0]
    record = {"fastest": first["environment"], "time_s": first["time_s"], "max_abs_diff": first["max_abs_diff"], "runner_up": ""}
    if len(ranked) == 1:
        return {**record, "verdict": NO_RUNNER_UP}
    second, where = ranked.iloc[1], f"{first['model']} {shape_name(first['batch_size'], first['sequence_length'])}"
    disturbed = [f"{env} {where}" for env, hit in zip(ranked["environment"][:2], ranked["disturbed"][:2]) if hit]
    interval = _inverted_interval(ratio_estimate(ranked.iloc[[1]], ranked.iloc[[0]]), disturbed)
    return {**record, "runner_up": second["environment"], "runner_up_s": second["time_s"], "margin": second["time_s"] / first["time_s"], **interval}


def fastest(rows: pd.DataFrame) -> pd.DataFrame:
    """Per device, machine, model and shape: the number of environments `ok` there, the fastest of them, its time,
    the runner-up and its time, the margin (runner-up time / fastest time) with its interval, the verdict of the
    fastest against the runner-up (`faster`: a clear margin), and the fastest's `max_abs_diff`."""
    rows = prepare(rows)
    keys = ["device_type", "machine", *CELL_KEY]
    records = []
    for key, cell in rows.groupby(keys, sort=False):
        ranked = cell[cell["status"] == status.OK].sort_values("time_s", kind="stable")
        records.append({**dict(zip(keys, key)), "environments": len(ranked), **_margin(ranked)})
    return pd.DataFrame(records).rename(columns={"device_type": "device"}).reindex(columns=list(FASTEST_COLUMNS))


# ---------------------------------------------------------------- findings


def times_text(speedup: float) -> str:
    """A speed-up or ratio in words: `1.23x`."""
    return f"{speedup:.2f}x"


def winners_text(best: dict[str, str], every: str) -> str:
    """Which environment wins in each measurement (`best`: measurement to environment), in words: `X` followed by
    `every` (`in every scenario`) where one wins them all, else `X for a and b, Y for c`."""
    names = list(dict.fromkeys(best.values()))
    if len(names) == 1:
        return f"{names[0]} {every}" if len(best) > 1 else names[0]
    return ", ".join(f"{name} for {' and '.join(m for m, e in best.items() if e == name)}" for name in names)


def interval_text(row: pd.Series) -> str:
    """A speed-up's interval and verdict, in words."""
    return f"95% interval {times_text(row['ci95_low'])} to {times_text(row['ci95_high'])} over {row['cells']} cells ok in both; verdict: {row['verdict']}"


def leader(table: pd.DataFrame) -> tuple[str, pd.Series | None, bool]:
    """Of `speedups` rows of one device and machine, fastest first: (the baseline's name, the fastest environment other
    than the baseline, None where none has cells ok in both, whether the baseline is faster than every other)."""
    base = f"{BASELINE_NAME} ({table['baseline'].iloc[0]})"
    compared = table[table["cells"] > 0]
    others = compared[compared["verdict"] != BASELINE_VERDICT]
    if others.empty:
        return base, None, False
    return base, others.iloc[0], compared["verdict"].iloc[0] == BASELINE_VERDICT


def _overall_sentence(where: str, table: pd.DataFrame) -> str:
    """The fastest environment of one device and machine (`speedups` rows, fastest first) against the baseline."""
    base, top, baseline_first = leader(table)
    if top is None:
        return f"{where}, no environment has cells ok in both it and {base}: there is no speed-up to report."
    interval = interval_text(top)
    if baseline_first:
        return f"{where}, {base} is the fastest environment overall: the next, {top['environment']} ({_describe(top)}), runs {times_text(top['speedup'])} as fast ({interval})."
    sentence = f"{where}, the fastest environment overall is {top['environment']} ({_describe(top)}): {times_text(top['speedup'])} as fast as {base} ({interval})."
    if pd.notna(top["max_abs_diff"]):
        sentence += f" Its outputs differ from {BASELINE_NAME}'s by at most {top['max_abs_diff']:.2g}."
    return sentence


def _agreeing_sentence(table: pd.DataFrame) -> str | None:
    """The fastest environment of one device and machine (`speedups` rows, fastest first) whose agreement with the baseline
    is at least AGREEMENT_BAR in every cell, the faster ones below it, and, where any weights were random, what that
    agreement says. None where no environment but the baseline was compared."""
    compared = table[(table["cells"] > 0) & table["agreement"].notna()]
    if (compared["verdict"] != BASELINE_VERDICT).sum() == 0:
        return None
    top = compared[compared["agreement"] >= AGREEMENT_BAR].iloc[0]
    below = compared[(compared["agreement"] < AGREEMENT_BAR) & (compared["speedup"] > top["speedup"])]
    faster = ", ".join(f"{row.environment} ({times_text(row.speedup)}, agreement {row.agreement:.3f})" for row in below.itertuples())
    sentence = (
        f"The fastest environment whose agreement with {BASELINE_NAME} is at least {AGREEMENT_BAR:.0%} in every cell is "
        f"{top['environment']} ({times_text(top['speedup'])})" + (f"; faster but below that bar: {faster}." if faster else ".")
    )
    sentence += " (Judged by agreement on the timed batch, the proxy: with `eval_data`, by the task's metric on your data.)"
    if "random" in " ".join(compared["weights"]):
        sentence += " Agreement on random weights says how far an environment's numbers move, not how accurate its answers are: measure the model's real weights for that."
    return sentence


def scored_on_data(rows: pd.DataFrame) -> bool:
    """Whether the rows hold a task metric's verdict on the user's data (`quality_verdict`), which the fastest that keeps
    quality is then judged by instead of agreement."""
    return "quality_verdict" in rows and bool(has_text(rows["quality_verdict"]).any())


def _per_model_sentence(table: pd.DataFrame) -> str:
    """The environment with the highest speed-up for each model (`speedups(..., per_model=True)` rows of one device and machine)."""
    best = table[table["cells"] > 0].drop_duplicates("model")
    parts = [f"{row.model}: {row.environment} {times_text(row.speedup)} ({row.verdict})" for row in best.itertuples()]
    return f"Per model there, the highest speed-up over {BASELINE_NAME}: " + "; ".join(parts) + "."


def _wins_sentence(where: str, cells: pd.DataFrame) -> str:
    """How many cells each environment is the fastest in (`fastest` rows of one device and machine), and how many clearly."""
    won = cells[cells["fastest"] != ""]
    wins = won.groupby("fastest", sort=False)["verdict"].agg(shapes="size", clear=lambda v: int((v == significance.FASTER).sum()))
    parts = [f"{env} in {row.shapes} (clearly in {row.clear})" for env, row in wins.sort_values("shapes", ascending=False, kind="stable").iterrows()]
    unwon = len(cells) - len(won)
    return f"Cell by cell {where}, the fastest environment of the {len(cells)} cells (model and shape) is " + ", ".join(parts) + (f"; {unwon} are ok in no environment." if unwon else ".")


def _claims_sentences(claims: pd.DataFrame) -> list[str]:
    """The study's claims that these runs check, with their verdicts, and how many they cannot check."""
    checked = claims[claims["holds"] != NOT_CHECKED]
    parts = [
        f"“{row.claim.split(' (')[0]}” {row.holds} on {row.device} ({row.value_this_run:.3g}"
        + (f"; 2019: {row.value_2019:.3g})" if pd.notna(row.value_2019) else ")")
        for row in checked.itertuples()
    ]  # fmt: skip
    sentences = [f"The 2019 claims: {'; '.join(parts)}."] if parts else []
    unchecked = len(claims) - len(checked)
    if unchecked:
        sentences.append(f"{unchecked} of the study's {len(claims)} claims are not checked here: these runs lack what they need (the 2019 claims' table says what).")
    return sentences


def _where(device: str, machine: str) -> str:
    return f"on {device} ({machine})"


def warning_sentences(rows: pd.DataFrame) -> list[str]:
    """One sentence per device and machine without the baseline, per environment with no `ok` cell or with cells
    not measured, and one on the disturbed cells."""
    rows = prepare(rows)
    sentences = []
    for (device, machine), group in rows.groupby(list(GROUP), sort=False):
        where = _where(device, machine)
        if not BASELINE.select(group):
            sentences.append(f"There is no {BASELINE_NAME} environment {where}: {', '.join(environments(group))} have no speed-up there.")
        cells = group.groupby(list(CELL_KEY), sort=False).ngroups
        for environment, env_rows in group.groupby("environment", sort=False):
            if not (env_rows["status"] == status.OK).any():
                counts = ", ".join(f"{state} {count}" for state, count in env_rows["status"].value_counts().items())
                sentences.append(f"{environment} has no ok cell {where} ({counts}): it is in no comparison.")
            elif len(env_rows) < cells:
                sentences.append(f"{environment} has no row for {cells - len(env_rows)} of the {cells} cells measured {where} (still running, or stopped).")
    ok = rows[rows["status"] == status.OK]
    if ok["disturbed"].any():
        sentences.append(f"{int(ok['disturbed'].sum())} of {len(ok)} ok cells were disturbed by other work on the machine: comparisons that rest on them are inconclusive (*How far to trust these numbers* lists them).")
    return sentences


def findings(rows: pd.DataFrame, speedup: pd.DataFrame, model_speedup: pd.DataFrame, fastest_cells: pd.DataFrame, claims: pd.DataFrame) -> list[str]:
    """The summary's opening sentences, from `speedups(rows)`, `speedups(rows, per_model=True)`, `fastest(rows)` and
    `claims.claims_table(rows)`: on each device and machine the fastest environment overall, per model and cell by
    cell, then the 2019 claims' verdicts and the `warning_sentences`."""
    if rows.empty:
        return ["These runs have no results yet: there is nothing to compare."]
    sentences = []
    for device, machine in dict.fromkeys(zip(fastest_cells["device"], fastest_cells["machine"])):
        table, per_model, cells = (frame[(frame["device"] == device) & (frame["machine"] == machine)] for frame in (speedup, model_speedup, fastest_cells))
        if not table.empty:
            sentences.append(_overall_sentence(f"On {device} ({machine})", table))
            if not scored_on_data(rows) and (agreeing := _agreeing_sentence(table)):  # else *Quality on your data* names it
                sentences.append(agreeing)
        if (per_model["cells"] > 0).any() and (per_model["verdict"] != BASELINE_VERDICT).any():
            sentences.append(_per_model_sentence(per_model))
        if (cells["fastest"] != "").any():
            sentences.append(_wins_sentence(_where(device, machine), cells))
    return sentences + _claims_sentences(claims) + warning_sentences(rows)
