"""Published claims checked on each device and machine of a run: the 2019 study's (`benchlib/data/claims_2019.yaml`,
the summary's section on them) and the 2022 post's on generation (`claims_2022.yaml`, checked on generate rows).

A claim names a metric of METRICS: most are a `Ratio`, a time ratio over the paired cells of a comparison
(`comparisons.COMPARISONS`, or one declared here) or of a distilled model and its teacher, computed by one function (`ratio_value`);
`oom_earlier` counts statuses. A claim `holds` or `does not hold` only when the whole 95% interval of its
value says so (`judge`), and is `inconclusive` otherwise, or when it rests on disturbed cells.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import pandas as pd
import yaml

from benchlib import status
from benchlib.analysis.comparisons import (
    BASELINE,
    Comparison,
    Selector,
    distilled_estimate,
    distilled_pairs,
    get_comparison,
    paired_cells,
    paired_estimate,
    study_rows,
)  # fmt: skip
from benchlib.analysis.runs import groups
from benchlib.analysis.significance import GEOMEAN, RATIO_OF_MEANS

HOLDS, DOES_NOT_HOLD, INCONCLUSIVE, NOT_CHECKED = "holds", "does not hold", "inconclusive", "not checked"
DISTILLED = "distilled"  # a Ratio's pairs: a student and its teacher (the claim's `args`), within each environment
CLAIMS_2019, CLAIMS_2022 = "claims_2019", "claims_2022"  # the sets of claims under benchlib/data/


def claims_columns(year: int = 2019) -> tuple[str, ...]:
    """The columns of a claims table whose source was published in `year`."""
    return ("claim", "device", "machine", "measure", f"value_{year}", "value_this_run", "ci95_low", "ci95_high", "holds_if", "holds", "detail")


CLAIMS_COLUMNS: tuple[str, ...] = claims_columns(2019)


@cache
def load_claims(name: str = CLAIMS_2019) -> dict[str, Any]:
    """A set of claims and their source (`benchlib/data/<name>.yaml`: CLAIMS_2019, the study's, or CLAIMS_2022)."""
    return yaml.safe_load(resources.files("benchlib").joinpath(f"data/{name}.yaml").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class ClaimValue:
    """This run's value of a claim's measure, its 95% interval and the disturbed cells it rests on; `value` None: not checked."""

    value: float | None
    detail: str
    low: float = math.nan
    high: float = math.nan
    disturbed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ratio:
    """A claim's measure as a time ratio over paired cells: of which pairs, taken how, over which cells, in what unit.

    `detail` is formatted with `cells` (the paired cells), `where` (the cell of `largest_reduction`),
    `base_mean_s` and `other_mean_s` (a comparison's mean times) or `environments` (DISTILLED's).
    """

    pairs: str | Comparison  # a Comparison or a key of COMPARISONS (other / base), or DISTILLED (student / teacher)
    how: str = GEOMEAN  # GEOMEAN or RATIO_OF_MEANS
    unit: Callable[[float], float] = float  # the ratio as the claim states it (it may reverse the interval's order)
    largest_reduction: bool = False  # over the one cell with the smallest ratio, not every paired cell
    detail: str = "over {cells} cells ok in both"


def _cells(group: pd.DataFrame, pairs: str | Comparison, student: str = "", teacher: str = "") -> tuple[pd.DataFrame, str]:
    """Every cell of `pairs` in one device and machine's rows, or none and why they cannot be compared."""
    if pairs == DISTILLED:
        missing = [m for m in (student, teacher) if m not in set(group["model"])]
        if missing:
            return group.iloc[:0], f"{' and '.join(missing)} not measured"
        cells = distilled_pairs(group, [(student, teacher)])
        return (cells, "") if cells["paired"].any() else (cells.iloc[:0], f"no cell is ok for both {student} and {teacher}")
    comparison = get_comparison(pairs)
    cells = paired_cells(group, comparison)
    for side in (comparison.base, comparison.other):
        if not side.select(group):
            return cells.iloc[:0], f"no {side.describe()} environment"
    if not cells["paired"].any():
        return cells.iloc[:0], f"no cell is ok in both {comparison.title.replace(' against ', ' and ')}"
    return cells, ""


def ratio_value(group: pd.DataFrame, ratio: Ratio, **args: str) -> ClaimValue:
    """The value of `ratio` on one device and machine's rows, in its unit, with its interval; not checked, and why,
    where no cell is paired. `args` name a DISTILLED ratio's `student` and `teacher`."""
    cells, why = _cells(group, ratio.pairs, **args)
    if why:
        return ClaimValue(None, why)
    paired = cells[cells["paired"]]
    facts: dict[str, Any] = {"cells": len(paired), "where": ""}
    if ratio.pairs == DISTILLED:
        facts["environments"] = paired["environment"].nunique()
    else:
        facts.update(base_mean_s=paired["base_s"].mean(), other_mean_s=paired["other_s"].mean())
    used = paired
    if ratio.largest_reduction:
        used = paired.loc[[paired["ratio"].idxmin()]]
        facts["where"] = f"{used['model'].iloc[0]} {used['shape'].iloc[0]}"
    estimate, disturbed = distilled_estimate(used) if ratio.pairs == DISTILLED else paired_estimate(used, ratio.how)
    low, high = sorted((ratio.unit(estimate.low), ratio.unit(estimate.high)))
    return ClaimValue(ratio.unit(estimate.ratio), ratio.detail.format(**facts), low, high, tuple(disturbed))


def oom_earlier(group: pd.DataFrame) -> ClaimValue:
    """Cells out of memory in PyTorch but ok in TensorFlow, minus the reverse (a count of statuses: no sampling interval)."""
    cells, why = _cells(group, "pytorch_vs_tensorflow")
    if why:
        return ClaimValue(None, why)
    if not ((cells["base_status"] == status.OOM) | (cells["other_status"] == status.OOM)).any():
        return ClaimValue(None, "no cell ran out of memory in either framework")
    pt_only = int(((cells["base_status"] == status.OOM) & (cells["other_status"] == status.OK)).sum())
    tf_only = int(((cells["other_status"] == status.OOM) & (cells["base_status"] == status.OK)).sum())
    count = float(pt_only - tf_only)
    return ClaimValue(count, f"{pt_only} cells out of memory in PyTorch only, {tf_only} in TensorFlow only", count, count)


# Eager PyTorch float32 against TensorFlow with XLA (the 2022 post's "faster than PyTorch").
XLA_VS_EAGER = Comparison("XLA against eager PyTorch", BASELINE, Selector("tensorflow", "xla"), "pytorch", "xla", "speedup", invert=True)

# The claims' `metric` names.
METRICS: dict[str, Ratio | Callable[..., ClaimValue]] = {
    "tf_over_pt_mean": Ratio("pytorch_vs_tensorflow", RATIO_OF_MEANS,
                             detail="PyTorch {base_mean_s:.4g} s, TensorFlow {other_mean_s:.4g} s over {cells} cells ok in both"),
    "torchscript_change_pct": Ratio("torchscript_vs_eager", unit=lambda ratio: (ratio - 1) * 100),
    "xla_speedup": Ratio("xla_vs_function", unit=lambda ratio: 1 / ratio),
    "eager_over_xla": Ratio(XLA_VS_EAGER, unit=lambda ratio: 1 / ratio),
    "xla_largest_reduction_pct": Ratio("xla_vs_function", unit=lambda ratio: (1 - ratio) * 100, largest_reduction=True,
                                       detail="at {where}, the largest of {cells} cells ok in both"),
    "distilled_ratio": Ratio(DISTILLED, detail="over {cells} matching cells in {environments} environments"),
    "oom_earlier": oom_earlier,
}  # fmt: skip


def measure(group: pd.DataFrame, metric: str, args: dict[str, Any] | None = None) -> ClaimValue:
    """The value of the metric called `metric` (a key of METRICS) on one device and machine's rows."""
    found = METRICS[metric]
    return ratio_value(group, found, **(args or {})) if isinstance(found, Ratio) else found(group, **(args or {}))


_OPERATORS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}


def passes(value: float, holds_if: str) -> bool:
    """Whether `value` passes a rule such as `>= 1.05`."""
    match = re.fullmatch(r"\s*(<=|>=|<|>)\s*(-?[0-9.]+)\s*", holds_if)
    if not match:
        raise ValueError(f"holds_if must be <=, >=, < or > and a number, not {holds_if!r}")
    return _OPERATORS[match.group(1)](value, float(match.group(2)))


def judge(value: ClaimValue, holds_if: str) -> tuple[str, str]:
    """`holds` or `does not hold` only when the whole 95% interval says so; else `inconclusive`, with the reason."""
    if value.value is None:
        return NOT_CHECKED, value.detail
    if value.disturbed:
        shown = "; ".join(value.disturbed[:3]) + ("; ..." if len(value.disturbed) > 3 else "")
        return INCONCLUSIVE, f"rests on {len(value.disturbed)} disturbed cells ({shown}); {value.detail}"
    low, high = (value.value, value.value) if math.isnan(value.low) else (value.low, value.high)
    if passes(low, holds_if) and passes(high, holds_if):
        return HOLDS, value.detail
    if not passes(low, holds_if) and not passes(high, holds_if):
        return DOES_NOT_HOLD, value.detail
    return INCONCLUSIVE, f"the 95% interval {low:.4g} to {high:.4g} straddles {holds_if.strip()}; {value.detail}"


def claims_table(rows: pd.DataFrame, claims: dict[str, Any] | None = None) -> pd.DataFrame:
    """Each claim (`load_claims()`, the 2019 study's, by default) checked on each device and machine it applies to:
    `holds`, `does not hold`, `inconclusive` or `not checked`; over the study's four ways only (`study_rows`), as the
    study measured them. The source's value is in `value_<year>` (the year of the claims' source)."""
    claims = claims or load_claims()
    year = claims["source"]["year"]
    found = list(groups(study_rows(rows)))
    records = []
    for claim in claims["claims"]:
        device = claim.get("device", "any")
        base = {key: claim.get(key) for key in ("claim", "measure", f"value_{year}", "holds_if")}
        targets = [(d, m, g) for d, m, g in found if device in ("any", d)]
        if not targets:
            records.append({**base, "device": device, "machine": "", "value_this_run": math.nan, "holds": NOT_CHECKED,
                            "detail": f"no {device} environment in these runs" if device != "any" else "no results"})  # fmt: skip
        for d, machine, group in targets:
            value = measure(group, claim["metric"], claim.get("args"))
            holds, detail = judge(value, claim["holds_if"])
            records.append({
                **base, "device": d, "machine": machine, "value_this_run": math.nan if value.value is None else value.value,
                "ci95_low": value.low, "ci95_high": value.high, "holds": holds, "detail": detail,
            })  # fmt: skip
    table = pd.DataFrame(records, columns=list(claims_columns(year)))
    table[f"value_{year}"] = pd.to_numeric(table[f"value_{year}"])
    return table
