"""The summary's generation section: time to first token, time per output token and tokens per second per environment,
model and prompt length (`generation_table`); speed-ups over eager PyTorch float32 (`generation_speedups`), the fastest
environment per cell (`generation_fastest`), the tokens that differ from eager PyTorch float32's (`divergence`), the
2022 post's claims (`claims_2022`) and the sentences that open the section (`generation_findings`).

Pure pandas functions over results rows (`runs.load_runs`) that read their generate rows only (`runs.by_workload`).
A generate cell is keyed as a forward one, its `sequence_length` being the prompt's length (`prompt_length` here), and
is compared only with cells that generated as many tokens (`new_tokens`). Speed-ups, intervals and verdicts are those
of `speedups.speedups` over the time the rows carry: the whole generate call as loaded by default (a speed-up in tokens
per second), or the time to first token in rows loaded with `runs.TTFT`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from benchlib import status
from benchlib.analysis import speedups
from benchlib.analysis.claims import CLAIMS_2022, NOT_CHECKED, claims_table, load_claims
from benchlib.analysis.comparisons import BASELINE
from benchlib.analysis.runs import DEFAULT_PRECISION, GENERATE, GROUP, by_workload, prepare, shape_name

NO_GENERATION = "These runs have no generate cells (`workload: generate`): there is no generation to summarise."
# Generation's own columns of a results row, read as numbers.
NUMBERS: tuple[str, ...] = ("new_tokens", "ttft_s", "tpot_s", "tpot_p90_s", "token_agreement", "first_divergence")
GENERATION_COLUMNS: tuple[str, ...] = (
    "device", "machine", "environment", "precision", "model", "batch_size", "prompt_length", "new_tokens",
    "ttft_s", "tpot_s", "tpot_p90_s", "tokens_per_s", "generate_s", "token_clock", "token_agreement", "first_divergence",
    "status", "weights",
)  # fmt: skip
DIVERGENCE_COLUMNS: tuple[str, ...] = (
    "device", "machine", "environment", "precision", "model", "batch_size", "prompt_length", "new_tokens",
    "first_divergence", "token_agreement", "weights",
)  # fmt: skip


def generate_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The generate rows of `rows`, prepared (`runs.prepare`), generation's columns (NUMBERS) as numbers."""
    generated = prepare(by_workload(rows, GENERATE))
    for column in NUMBERS:
        generated[column] = pd.to_numeric(generated[column], errors="coerce") if column in generated else math.nan
    generated["token_clock"] = generated["token_clock"].fillna("") if "token_clock" in generated else ""
    return generated


def _per_new_tokens(generated: pd.DataFrame, table: Callable[[pd.DataFrame], pd.DataFrame]) -> pd.DataFrame:
    """`table` of the rows of each count of new tokens of `generated` (`generate_rows`), one below the other, with
    `new_tokens` after `machine`."""
    frames = [table(group).assign(new_tokens=count) for count, group in generated.groupby("new_tokens", sort=False, dropna=False)]
    stacked = pd.concat(frames, ignore_index=True) if frames else table(generated).assign(new_tokens=math.nan)
    columns = [column for column in stacked.columns if column != "new_tokens"]
    columns.insert(columns.index("machine") + 1, "new_tokens")
    return stacked[columns]


def _tokens_per_s(table: pd.DataFrame) -> pd.Series:
    """Tokens generated per second of each row's whole call (`time_s`)."""
    return table["batch_size"] * table["new_tokens"] / table["time_s"]


def generation_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per device, machine, environment, model, batch size, prompt length and new tokens: the time to first token, the
    median and 90th percentile time per output token after the first, tokens per second and the whole call's time
    (`generate_s`: the cell's time, over its rounds), how the tokens were timed (`token_clock`), the agreement of its
    tokens with eager PyTorch float32's and the first that differs (blank where not compared), the status, the weights."""
    generated = generate_rows(rows)
    ok = generated["status"] == status.OK
    table = generated.assign(
        device=generated["device_type"], prompt_length=generated["sequence_length"], generate_s=generated["time_s"].where(ok),
        tokens_per_s=_tokens_per_s(generated).where(ok),
    )  # fmt: skip
    return table.reindex(columns=list(GENERATION_COLUMNS)).reset_index(drop=True)


def generation_speedups(rows: pd.DataFrame, per_model: bool = False) -> pd.DataFrame:
    """Every environment's generation speed-up over eager PyTorch float32 on its device and machine, per count of new
    tokens (per model too with `per_model`): `speedups.speedups` over the time of `rows` (the whole call: its speed-up is
    that of tokens per second; rows loaded with `runs.TTFT`: the time to first token), with `token_agreement` the
    environment's lowest agreement of tokens (the baseline's is 1)."""
    generated = generate_rows(rows)
    generated["agreement"] = generated["token_agreement"]
    table = _per_new_tokens(generated, lambda group: speedups.speedups(group, per_model=per_model))
    return table.rename(columns={"agreement": "token_agreement"})


def generation_fastest(rows: pd.DataFrame) -> pd.DataFrame:
    """Per device, machine, count of new tokens, model, batch size and prompt length: the fastest environment on the
    whole call and its runner-up (`speedups.fastest`), with the fastest's tokens per second."""
    table = _per_new_tokens(generate_rows(rows), speedups.fastest)
    table.insert(table.columns.get_loc("time_s") + 1, "tokens_per_s", _tokens_per_s(table))
    return table.rename(columns={"sequence_length": "prompt_length", "time_s": "generate_s", "runner_up_s": "runner_up_generate_s"})


def divergence(rows: pd.DataFrame, reduced: bool = False) -> pd.DataFrame:
    """The cells whose tokens differ from eager PyTorch float32's, with the first that differs (1-based) and the share
    of equal tokens before it: of float32 environments (they should not differ: flagged), or with `reduced`, of
    reduced precision ones (they may: reported)."""
    table = generation_table(rows)
    differs = table["first_divergence"].notna() | (table["token_agreement"] < 1)
    float32 = table["precision"] == DEFAULT_PRECISION
    return table[differs & (float32 != reduced)].reindex(columns=list(DIVERGENCE_COLUMNS)).reset_index(drop=True)


def weights_sentence(rows: pd.DataFrame) -> str:
    """Whether the generate cells' models had random weights, and what that means for a divergence."""
    generated = generate_rows(rows)
    if generated.empty:
        return NO_GENERATION
    random = list(dict.fromkeys(generated.loc[generated["weights"] == "random", "model"]))
    if not random:
        return "Every model generated with its pretrained weights: a token that differs there is one a user would see."
    who = "Every model" if len(random) == generated["model"].nunique() else ", ".join(random)
    return (
        f"{who} generated with random weights: near-ties between their logits make an early divergence likelier than with "
        "trained weights, so a token that differs says how far an environment's numbers move, not that its text is worse."
    )


def claims_2022(rows: pd.DataFrame) -> pd.DataFrame:
    """The 2022 post's claims on generation (`benchlib/data/claims_2022.yaml`), checked on each device, machine and count
    of new tokens of the generate rows (`claims.claims_table`), with the device the post measured on (`device_2022`)."""
    claims = load_claims(CLAIMS_2022)
    table = _per_new_tokens(generate_rows(rows), lambda group: claims_table(group, claims))
    table.insert(table.columns.get_loc("new_tokens") + 1, "device_2022", claims["source"]["device"])
    return table


# ---------------------------------------------------------------- findings


def _fastest_sentence(where: str, whole: pd.DataFrame, ttft: pd.DataFrame) -> str:
    """The fastest generating environment of one device, machine and count of new tokens (`generation_speedups` rows,
    fastest first, on the whole call and on the first token) against the baseline."""
    base, top, baseline_first = speedups.leader(whole)
    if top is None:
        return f"{where}, no environment has cells ok in both it and {base}: there is no speed-up to report."
    if baseline_first:
        sentence = (
            f"{where}, {base} generates the most tokens per second; the next, {top['environment']}, reaches "
            f"{speedups.times_text(top['speedup'])} of its rate ({speedups.interval_text(top)})"
        )
    else:
        sentence = f"{where}, the fastest environment is {top['environment']}: {speedups.times_text(top['speedup'])} the tokens per second of {base} ({speedups.interval_text(top)})"
    first = ttft[ttft["environment"] == top["environment"]]
    if len(first) and first["cells"].iloc[0] > 0:
        sentence += f"; its first token comes {speedups.times_text(first['speedup'].iloc[0])} as fast ({first['verdict'].iloc[0]})"
    return sentence + "."


def _speedup_sentences(generated: pd.DataFrame, whole: pd.DataFrame, ttft: pd.DataFrame) -> list[str]:
    """Per device, machine and count of new tokens: the fastest environment, or why there is no speed-up."""
    sentences = []
    for (device, machine, new_tokens), group in generated.groupby([*GROUP, "new_tokens"], sort=False, dropna=False):
        where = f"Generating {new_tokens:g} tokens on {device} ({machine})"
        pick = [(frame["device"] == device) & (frame["machine"] == machine) & (frame["new_tokens"] == new_tokens) for frame in (whole, ttft)]
        if not BASELINE.select(group):
            sentences.append(f"{where}, there is no {speedups.BASELINE_NAME} environment: no speed-up there.")
        elif pick[0].any():
            sentences.append(_fastest_sentence(where, whole[pick[0]], ttft[pick[1]]))
    return sentences


def _claims_sentences(claims: pd.DataFrame) -> list[str]:
    """The 2022 claims' verdicts on each device, machine and count of new tokens, with the device the post measured on."""
    sentences = []
    for (device, machine, new_tokens), group in claims.groupby(["device", "machine", "new_tokens"], sort=False, dropna=False):
        parts = [
            f"“{row.claim.split(' (')[0]}” {row.holds}" + (f" ({speedups.times_text(row.value_this_run)})" if row.holds != NOT_CHECKED else f" ({row.detail})")
            for row in group.itertuples()
        ]  # fmt: skip
        where = f"on {device} ({machine}), generating {new_tokens:g} tokens" if machine else "here"
        sentences.append(f"The 2022 claims {where} (the post measured a {group['device_2022'].iloc[0]}): {'; '.join(parts)}.")
    return sentences


def _divergence_sentences(rows: pd.DataFrame) -> list[str]:
    """The float32 environments whose tokens differ from the baseline's (flagged, with the first token that differs),
    and the reduced precision ones (reported)."""
    compared = generation_table(rows).dropna(subset=["token_agreement"])
    if compared.empty:
        return []
    sentences = []
    float32 = divergence(rows)
    for environment, cells in float32.groupby("environment", sort=False):
        first = cells.sort_values("first_divergence", kind="stable").iloc[0]
        total = int((compared["environment"] == environment).sum())
        sentences.append(
            f"Flagged: {environment} (float32) generated other tokens than {speedups.BASELINE_NAME} in {len(cells)} of {total} cells "
            f"compared, first at token {first['first_divergence']:g} ({first['model']} {shape_name(first['batch_size'], first['prompt_length'])}): "
            "in float32 it should follow the baseline's tokens."
        )  # fmt: skip
    if float32.empty and (compared["precision"] == DEFAULT_PRECISION).any():
        sentences.append(f"Every float32 environment compared generated the same tokens as {speedups.BASELINE_NAME}.")
    reduced = divergence(rows, reduced=True)
    if not reduced.empty:
        parts = [
            f"{env} ({cells['precision'].iloc[0]}) in {len(cells)} cells, earliest at token {cells['first_divergence'].min():g}"
            for env, cells in reduced.groupby("environment", sort=False)
        ]  # fmt: skip
        sentences.append(f"Reduced precision diverged from {speedups.BASELINE_NAME}'s tokens, as it may (reported, not an error): {'; '.join(parts)}.")
    return sentences


def generation_findings(rows: pd.DataFrame, speedup: pd.DataFrame, ttft_speedup: pd.DataFrame, claims: pd.DataFrame) -> list[str]:
    """The generation section's opening sentences, from `generation_speedups` of the rows (the whole call) and of the rows
    loaded with `runs.TTFT`, and `claims_2022`: on each device, machine and count of new tokens the fastest environment,
    the 2022 claims' verdicts, the environments whose tokens differ from eager PyTorch float32's, and whether the weights
    were random."""
    generated = generate_rows(rows)
    if generated.empty:
        return [NO_GENERATION]
    return [
        *_speedup_sentences(generated, speedup, ttft_speedup), *_claims_sentences(claims), *_divergence_sentences(rows),
        weights_sentence(rows),
    ]  # fmt: skip
