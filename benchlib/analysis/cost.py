"""Which machine, at what price: each load row's cost per million requests at its operating point, and the cheapest machine,
environment and settings that meet the bound and keep the quality target.

A machine's name and price per hour come from its runs' environment.json (`machine_name`, `price_per_hour`, `currency`,
set by `run --machine-name --price-per-hour`; no name: the hostname) or from a prices file given at summary time (a YAML
list of `name`, `price_per_hour`, `currency`, optionally `source` and `date`), which wins over the runs' own. No price is
ever guessed: a machine without one has no cost.

The cost of a million requests is price / (3600 x rate) x 10^6, at the server's largest rate VALID under the bound and at
Offline's samples per second; when generating, of a million output tokens at LoadGen's tokens per second. Its interval is
the rate's over rounds (the bootstrap interval of the median of the rounds' figures): one round gives none. A cell timed
one call at a time costs price / 3600 x its time per call x 10^6 per million calls: at one stream, never a served rate.
Only an environment that keeps the quality target (agreement with eager PyTorch float32 at its `quality_target`, at least
MLPerf's 99%, and the task's quality where measured) is ranked; a tune's confirmed gain counts, with the settings file to deploy.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from benchlib import status
from benchlib.analysis import significance
from benchlib.analysis import load as under_load
from benchlib.analysis import tune as tunes
from benchlib.config.params import CURRENCY_PATTERN
from benchlib.machine import machine_description
from benchlib.store import layout
from benchlib.store.environment import read_environment
from benchlib.store.layout import environment_dirs
from benchlib.store.results import judged_percentile, read_results
from benchlib.workloads.agreement import AGREEMENT_BAR
from benchlib.workloads.quality import BELOW, KEEPS, UNDECIDED, examples_to_decide

PER = 1e6  # costs are per million requests, tokens or calls
PRICED_SCENARIOS: tuple[str, ...] = ("server", "offline")
PRICE_FIELDS: tuple[str, ...] = ("name", "price_per_hour", "currency", "source", "date")
COST_COLUMNS: tuple[str, ...] = (
    "model", "scenario", "machine", "environment", "run", "rounds", "rate", "rate_low", "rate_high", "rate_is_lower_bound", "price_per_hour", "currency",
    "cost_per_million", "cost_low", "cost_high", "tokens_per_s", "cost_per_million_tokens", "tokens_cost_low", "tokens_cost_high",
    "energy_j", "energy_unit", "latency_ms", "agreement", "target", "quality_verdict", "to_decide", "settings_file", "price_from",
)  # fmt: skip
DECISION_COLUMNS: tuple[str, ...] = (
    "model", "scenario", "rank", "machine", "environment", "cost_per_million", "cost_low", "cost_high", "currency", "rate",
    "price_per_hour", "within_interval", "settings_file", "run",
)  # fmt: skip
CALL_COST_COLUMNS: tuple[str, ...] = (
    "model", "machine", "environment", "batch_size", "sequence_length", "time_s", "price_per_hour", "currency", "cost_per_million_calls", "run",
)  # fmt: skip
UNIT = {"server": "requests", "offline": "samples"}
LOWER_BOUND = "max_qps is a lower bound"  # a server's reason where every rate tried met the bound


class PriceError(ValueError):
    """A price, a prices file or a machine's name that cannot be used; the message is one line naming where."""


@dataclass(frozen=True)
class Price:
    """A machine's price per hour in a currency, and where it was given (`file:line`, or a run's environment.json)."""

    per_hour: float
    currency: str
    origin: str
    source: str = ""
    date: str = ""

    def described(self) -> str:
        """Where the price was given, with its source and date where the prices file gives them."""
        said = ", ".join(part for part in (self.source, self.date) if part)
        return f"{self.origin} ({said})" if said else self.origin


def check_price(value: Any, where: str) -> float:
    """`value` as a price per hour: a finite number above 0; else PriceError naming `where`."""
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if number is None or not math.isfinite(number) or number <= 0:
        raise PriceError(f"{where}: price_per_hour: must be a number above 0 (what the machine costs an hour), not {value!r}")
    return float(number)


def check_currency(value: Any, where: str) -> str:
    """`value` as a currency: an ISO 4217 code; else PriceError naming `where`."""
    if not (isinstance(value, str) and re.fullmatch(CURRENCY_PATTERN, value)):
        raise PriceError(f"{where}: currency: must be an ISO 4217 code such as USD or EUR, not {value!r}")
    return value


def read_prices(path: str | os.PathLike[str]) -> dict[str, Price]:
    """A prices file: a YAML list of machines, each `name`, `price_per_hour`, `currency` (default USD), optionally `source` and
    `date`; by name. Raises PriceError with the file and line of the first problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError) as error:
        raise PriceError(f"{path}: cannot be read as YAML: {' '.join(str(error).split())}") from None
    if not isinstance(root, yaml.SequenceNode):
        raise PriceError(f"{path}:1: must be a list of machines, each with name, price_per_hour and currency")
    prices: dict[str, Price] = {}
    for node in root.value:
        line = node.start_mark.line + 1
        if not isinstance(node, yaml.MappingNode):
            raise PriceError(f"{path}:{line}: each machine is a mapping of name, price_per_hour and currency")
        values = {key.value: (_value(value), value.start_mark.line + 1) for key, value in node.value}
        unknown = [key for key in values if key not in PRICE_FIELDS]
        if unknown:
            raise PriceError(f"{path}:{values[unknown[0]][1]}: {unknown[0]}: unknown field; allowed: {', '.join(PRICE_FIELDS)}")
        name, name_line = values.get("name", (None, line))
        if not isinstance(name, str) or not name:
            raise PriceError(f"{path}:{name_line}: name: each machine needs a name (its runs' machine_name, or hostname)")
        if name in prices:
            raise PriceError(f"{path}:{name_line}: name: {name!r} is priced twice (first at {prices[name].origin})")
        price, price_line = values.get("price_per_hour", (None, line))
        currency, currency_line = values.get("currency", ("USD", line))
        prices[name] = Price(
            check_price(price, f"{path}:{price_line}"), check_currency(currency, f"{path}:{currency_line}"), f"{path}:{name_line}",
            str(values.get("source", ("", 0))[0]), str(values.get("date", ("", 0))[0]),
        )  # fmt: skip
    return prices


def _value(node: yaml.Node) -> Any:
    """A scalar node's value as YAML's safe loader reads it."""
    return yaml.safe_load(yaml.serialize(node))


def run_machines(run_dirs: Iterable[str | os.PathLike[str]], prices_file: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """Per run and environment folder: its machine's name (`machine_name`, else the hostname), its hardware, and its price
    (the prices file's, else the run's own; none where neither gives one). Raises PriceError where two runs give one name
    to different hardware, a prices file names a machine no run has, or the prices are in more than one currency."""
    lines = []
    for run_dir in run_dirs:
        measured = environment_dirs(run_dir)
        tuned = [env_dir for env_dir in tunes.tuned_environments([run_dir]) if env_dir not in measured]
        for env_dir in measured + tuned:
            # a tuned environment's machine is its points' (its own folder holds no rows)
            info = read_environment(env_dir) or next((read_environment(point) for point in layout.point_folders(env_dir)), {})
            parameters = info.get("parameters", {})
            where = f"{Path(run_dir).name}/{env_dir.name}/{layout.ENVIRONMENT_FILE}"
            name = parameters.get("machine_name") or (info.get("machine") or {}).get("hostname") or "unnamed machine"
            own = parameters.get("price_per_hour")
            price = Price(check_price(own, where), check_currency(parameters.get("currency", "USD"), where), where) if own is not None else None
            lines.append({
                "run": Path(run_dir).name, "environment": env_dir.name, "machine": name, "hardware": machine_description(info), "price": price,
                "where": where, "target": max(float(parameters.get("quality_target") or AGREEMENT_BAR), AGREEMENT_BAR),
            })  # fmt: skip
    table = pd.DataFrame(lines, columns=["run", "environment", "machine", "hardware", "price", "where", "target"])
    for name, group in table.groupby("machine", sort=False):
        if group["hardware"].nunique() > 1:
            first, other = group.iloc[0], group[group["hardware"] != group["hardware"].iloc[0]].iloc[0]
            raise PriceError(
                f"{other['where']}: machine_name: {name!r} is also the machine of {first['where']}, whose hardware differs "
                f"({first['hardware']}; here {other['hardware']}): give each machine a name of its own"
            )
    if prices_file is not None:
        prices = read_prices(prices_file)
        for name, price in prices.items():
            if name not in set(table["machine"]):
                raise PriceError(f"{price.origin}: name: no run here has a machine {name!r} (theirs: {', '.join(dict.fromkeys(table['machine'])) or 'none'})")
        table["price"] = [prices.get(name, own) for name, own in zip(table["machine"], table["price"])]
    priced = [price for price in table["price"] if price is not None]
    for price in priced:
        if price.currency != priced[0].currency:
            raise PriceError(f"{price.origin}: currency: {price.currency} mixed with {priced[0].currency} ({priced[0].origin}): one decision compares prices in one currency")
    return table


def priced_machines(machines: pd.DataFrame) -> list[str]:
    """The machines that have a price."""
    return list(dict.fromkeys(machines.loc[machines["price"].notna(), "machine"]))


def unpriced_sentence(machines: pd.DataFrame) -> str | None:
    """One sentence naming the machines without a price (so without a cost), and how to give one; None where all have one."""
    missing = list(dict.fromkeys(machines.loc[machines["price"].isna(), "machine"]))
    if not missing:
        return None
    return (
        f"No price for {', '.join(missing)}: no cost is shown for {'it' if len(missing) == 1 else 'them'} "
        "(`run --price-per-hour`, or `summary --prices FILE`)."
    )


def cost_of(price_per_hour: float, rate: float) -> float:
    """What a million units cost at `rate` units per second on a machine at `price_per_hour`."""
    return price_per_hour / (3600 * rate) * PER if rate > 0 else math.nan


def _rates(rows: pd.DataFrame) -> list[float]:
    """A scenario's figure in each round that has a VALID one."""
    return [figure for _, row in rows.sort_values("round").iterrows() if not math.isnan(figure := under_load.figure_of(row))]


def _quality(cells: pd.DataFrame, target: float) -> tuple[float, str, str]:
    """(the agreement with eager PyTorch float32, the quality verdict, what would decide an undecided one): `below` under
    `target` (the environment's `quality_target`, at least AGREEMENT_BAR) or where a task's quality is below its target,
    `undecided` where the task's quality cannot tell (about how many examples would decide) or nothing was compared,
    else `keeps`."""
    agreement = under_load.agreement_of(cells)
    verdicts = set(cells["quality_verdict"].dropna().astype(str)) - {""} if "quality_verdict" in cells else set()
    if agreement < target or BELOW in verdicts:
        return agreement, BELOW, ""
    if UNDECIDED in verdicts:
        line = cells[cells["quality_verdict"].astype(str) == UNDECIDED].iloc[0]
        number = lambda column: pd.to_numeric(line.get(column), errors="coerce")  # noqa: E731
        examples = examples_to_decide(number("quality_ratio"), number("quality_ratio_low"), number("quality_ratio_high"),
                                      number("quality_target"), int(number("quality_n")) if pd.notna(number("quality_n")) else 0)  # fmt: skip
        return agreement, UNDECIDED, f"about {examples:,} examples would decide" if examples else "more examples would decide"
    if math.isnan(agreement):
        return agreement, UNDECIDED, "its agreement with eager PyTorch float32, measured beside it, would decide"
    return agreement, KEEPS, ""


def _numbers(rows: pd.DataFrame, column: str) -> pd.Series:
    """A column's numbers, blanks dropped (none where the rows have no such column)."""
    return pd.to_numeric(rows[column], errors="coerce").dropna() if column in rows else pd.Series(dtype=float)


def _line(model: str, scenario: str, machine: dict[str, Any], environment: str, rates: list[float], cells: pd.DataFrame) -> dict[str, Any]:
    """One cost line from a scenario's VALID rates per round and its cells."""
    price: Price | None = machine["price"]
    low, high = significance.median_interval(rates)
    rate = float(pd.Series(rates).median())
    per_hour = price.per_hour if price else math.nan
    valid = cells[cells.apply(under_load.is_valid, axis=1)]
    tokens = _numbers(valid, "tokens_per_s") if (cells["workload"] == "generate").any() else pd.Series(dtype=float)
    token_low, token_high = significance.median_interval(tokens.tolist())
    energy = _numbers(valid, "energy_j")
    percentile = judged_percentile(valid.iloc[0]) if scenario == "server" else None
    latency = _numbers(valid, f"latency_p{percentile}_s").median() * 1000 if percentile else math.nan
    agreement, quality, decide = _quality(cells, machine["target"])
    return {
        "model": model, "scenario": scenario, "machine": machine["machine"], "environment": environment, "run": machine["run"],
        "rounds": len(rates), "rate": rate, "rate_low": low, "rate_high": high, "price_per_hour": per_hour,
        "rate_is_lower_bound": bool(valid["reason"].astype(str).str.contains(LOWER_BOUND).any()),
        "currency": price.currency if price else "", "cost_per_million": cost_of(per_hour, rate),
        "cost_low": cost_of(per_hour, high), "cost_high": cost_of(per_hour, low),
        "tokens_per_s": tokens.median() if len(tokens) else math.nan,
        "cost_per_million_tokens": cost_of(per_hour, tokens.median()) if len(tokens) else math.nan,
        "tokens_cost_low": cost_of(per_hour, token_high), "tokens_cost_high": cost_of(per_hour, token_low),
        "energy_j": energy.median() if len(energy) else math.nan,
        "energy_unit": str(valid["energy_unit"].dropna().iloc[0]) if len(energy) else "", "latency_ms": latency,
        "agreement": agreement, "target": machine["target"], "quality_verdict": quality, "to_decide": decide, "settings_file": "", "price_from": price.described() if price else "",
    }  # fmt: skip


def cost_table(loaded: pd.DataFrame, machines: pd.DataFrame, run_dirs: Iterable[str | os.PathLike[str]] = ()) -> pd.DataFrame:
    """Per model, priced scenario (server, offline), machine and environment with a VALID figure: the rate (the median over
    rounds, with its interval), the cost per million requests (and output tokens when generating) with the interval the
    rate's gives, joules per unit where a counter read them, the server's latency at its judged percentile, and the quality
    verdict; then each tune's confirmed best settings (`run_dirs`), a line of their own naming the file to deploy."""
    lines = []
    by_folder = machines.set_index(["run", "environment"])
    if not loaded.empty:
        rows = loaded[loaded["scenario"].isin(PRICED_SCENARIOS) & (loaded["status"] == status.OK)]
        rows = rows.assign(**under_load.ways(rows))  # the baseline is told by them
        for (run, environment, model, scenario), cells in rows.groupby(["run", "environment", "model", "scenario"], sort=False):
            rates = _rates(cells)
            if rates and (run, environment) in by_folder.index:
                lines.append(_line(model, scenario, {**by_folder.loc[(run, environment)].to_dict(), "run": run}, environment, rates, cells))
    lines += _tuned_lines(run_dirs, by_folder)
    return pd.DataFrame(lines, columns=list(COST_COLUMNS))


def _tuned_lines(run_dirs: Iterable[str | os.PathLike[str]], by_folder: pd.DataFrame) -> list[dict[str, Any]]:
    """A cost line per tuned environment and model whose best settings were confirmed faster in fresh kernels."""
    lines = []
    for run_dir in run_dirs:
        table = tunes.at_its_best([run_dir])
        points = tunes.tune_points([run_dir])
        if table.empty:
            continue
        for _, best in table[(table["verdict"] == significance.FASTER) & table["objective"].isin(PRICED_SCENARIOS)].iterrows():
            group = points[(points["environment"] == best["environment"]) & (points["model"] == best["model"])]
            env_dir, label = Path(group["env_dir"].iloc[0]), Path(group["folder"].iloc[0]).parts[1]
            folder = layout.confirm_folder(env_dir, label, "best")
            cells = read_results(folder).assign(model=best["model"])
            cells = cells[cells["scenario"] == best["objective"]]
            cells = cells.assign(**under_load.ways(cells))
            rates = _rates(cells)
            key = (Path(run_dir).name, best["environment"])
            if not rates or key not in by_folder.index:
                continue
            name = f"{best['environment']} at {tunes.settings_text(best['best_settings'])}"
            line = _line(best["model"], best["objective"], {**by_folder.loc[key].to_dict(), "run": key[0]}, name, rates, cells)
            lines.append({**line, "settings_file": str(layout.tuned_settings_file(run_dir, best["environment"], label))})
    return lines


def call_cost_table(rows: pd.DataFrame, machines: pd.DataFrame) -> pd.DataFrame:
    """Per priced cell timed one call at a time (`runs.load_runs`' rows): the cost of a million calls at one stream, price /
    3600 x the time per call x 10^6 (one call after another: not a served rate)."""
    if rows.empty or "time_s" not in rows:
        return pd.DataFrame(columns=list(CALL_COST_COLUMNS))
    prices = {(line.run, line.environment): line for line in machines.itertuples() if line.price is not None}
    lines = []
    for _, row in rows[rows["status"] == status.OK].iterrows():
        machine = prices.get((row["run"], row["environment"]))
        if machine is None or not row["time_s"] > 0:
            continue
        lines.append({
            "model": row["model"], "machine": machine.machine, "environment": row["environment"], "batch_size": row["batch_size"],
            "sequence_length": row["sequence_length"], "time_s": row["time_s"], "price_per_hour": machine.price.per_hour,
            "currency": machine.price.currency, "cost_per_million_calls": machine.price.per_hour / 3600 * row["time_s"] * PER, "run": row["run"],
        })  # fmt: skip
    return pd.DataFrame(lines, columns=list(CALL_COST_COLUMNS))


def _overlaps(line: pd.Series, best: pd.Series) -> bool:
    """Whether `line`'s cost interval reaches the cheapest's (both need one)."""
    return bool(pd.notna(line["cost_low"]) and pd.notna(best["cost_high"]) and line["cost_low"] <= best["cost_high"])


def decision_table(costs: pd.DataFrame) -> pd.DataFrame:
    """Per model and priced scenario: the priced lines that keep the quality target, cheapest first (`rank`), each with
    `within_interval`: whether its cost's interval reaches the cheapest's (a tie). No other line is ranked."""
    ranked = costs[(costs["quality_verdict"] == KEEPS) & costs["cost_per_million"].notna()]
    lines = []
    for (_, _), group in ranked.groupby(["model", "scenario"], sort=False):
        group = group.sort_values("cost_per_million")
        best = group.iloc[0]
        for rank, (_, line) in enumerate(group.iterrows(), 1):
            lines.append({**{key: line[key] for key in DECISION_COLUMNS if key in line}, "rank": rank, "within_interval": rank == 1 or _overlaps(line, best)})
    return pd.DataFrame(lines, columns=list(DECISION_COLUMNS))


def money(value: float, currency: str) -> str:
    return f"{value:.4g} {currency}"


def interval_text(line: pd.Series, low: str = "cost_low", high: str = "cost_high") -> str:
    """`95% interval 0.11 to 0.13 over 3 rounds`, or `one round: no interval`."""
    if pd.isna(line[low]):
        return "one round: no interval" if line["rounds"] == 1 else f"{line['rounds']} rounds, no interval"
    return f"95% interval {line[low]:.4g} to {line[high]:.4g} over {line['rounds']} rounds"


def _choice(line: pd.Series) -> str:
    return f"{line['environment']} on {line['machine']}"


def decision_sentences(costs: pd.DataFrame, bound: str = "") -> list[str]:
    """Per model and priced scenario: the cheapest machine and environment that meets the bound and keeps the quality
    target, its cost with interval, and the runners-up within it (a tie, said as one); the lines below the target and the
    undecided ones, named as not ranked."""
    sentences = []
    decision = decision_table(costs)
    for (model, scenario), group in costs[costs["cost_per_million"].notna()].groupby(["model", "scenario"], sort=False):
        ranked = decision[(decision["model"] == model) & (decision["scenario"] == scenario)]
        where = f"served {bound or 'under the latency bound'} (server)" if scenario == "server" else "every request at once (offline)"
        if ranked.empty:
            sentence = f"For {model}, {where}: no priced environment keeps the quality target, so none is ranked."
        else:
            best = group[(group["environment"] == ranked.iloc[0]["environment"]) & (group["machine"] == ranked.iloc[0]["machine"])].iloc[0]
            unit = UNIT[scenario]
            sentence = (
                f"For {model}, {where}, the cheapest is {_choice(best)}: {money(best['cost_per_million'], best['currency'])} per million {unit} "
                f"({interval_text(best)}), serving {'at least ' if best['rate_is_lower_bound'] else ''}{best['rate']:.4g} {unit}/s at "
                f"{money(best['price_per_hour'], best['currency'])} an hour"
            )
            if best["rate_is_lower_bound"]:
                sentence += " (every rate tried met the bound: the cost is at most this)"
            if pd.notna(best["cost_per_million_tokens"]):
                sentence += f", {money(best['cost_per_million_tokens'], best['currency'])} per million output tokens"
            if best["settings_file"]:
                sentence += f"; deploy {best['settings_file']}"
            sentence += "."
            ties = ranked[(ranked["rank"] > 1) & ranked["within_interval"]]
            if len(ties):
                sentence += " Tied with it, within its interval: " + "; ".join(
                    f"{_choice(line)} ({money(line['cost_per_million'], line['currency'])})" for _, line in ties.iterrows()
                ) + "."
            elif len(ranked) > 1:
                line = ranked.iloc[1]
                sentence += f" The next, {_choice(line)}, costs {money(line['cost_per_million'], line['currency'])} per million {unit}" + (
                    ", outside its interval." if pd.notna(best["cost_low"]) and pd.notna(line["cost_low"]) else " (one of the two has no interval: no tie can be told)."
                )
        below = group[group["quality_verdict"] == BELOW]
        if len(below):
            sentence += " Not ranked, below the quality target: " + "; ".join(f"{_choice(line)} (agreement {line['agreement']:.6g} under {line['target']:.6g})" for _, line in below.iterrows()) + "."
        undecided = group[group["quality_verdict"] == UNDECIDED]
        if len(undecided):
            sentence += " Undecided, not ranked until its quality is known: " + "; ".join(
                f"{_choice(line)} ({line['to_decide']})" for _, line in undecided.iterrows()
            ) + "."
        sentences.append(sentence)
    return sentences


def cheaper_sentences(before: pd.DataFrame, after: pd.DataFrame) -> list[str]:
    """Per model and scenario, where the cheapest choice of `after` (a run's `cost_table`) is another than `before`'s and
    costs less: a sentence saying a cheaper choice appeared."""
    first, second = decision_table(before), decision_table(after)
    sentences = []
    for (model, scenario), group in second[second["rank"] == 1].groupby(["model", "scenario"], sort=False):
        new = group.iloc[0]
        old = first[(first["model"] == model) & (first["scenario"] == scenario) & (first["rank"] == 1)]
        if old.empty:
            continue
        old = old.iloc[0]
        if (_choice(new) != _choice(old)) and new["currency"] == old["currency"] and new["cost_per_million"] < old["cost_per_million"]:
            sentences.append(
                f"A cheaper choice appeared for {model} ({scenario}): {_choice(new)} at {money(new['cost_per_million'], new['currency'])} "
                f"per million {UNIT[scenario]} in B, against {_choice(old)}'s {money(old['cost_per_million'], old['currency'])} in A."
            )
    return sentences
