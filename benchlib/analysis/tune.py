"""A tune read back: every point tried (`<env>/tuning/points.csv`), and the best point confirmed against the default settings
in fresh kernels, round after round: the gain with its 95% interval over those rounds and a verdict, beside the search's
own figure for the winner (the best of several measurements, biased upward: how much of it held up)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from benchlib.analysis import significance
from benchlib.store import layout
from benchlib.store.environment import read_environment
from benchlib.store.results import HIGHER_IS_BETTER, OBJECTIVE_FIGURES, objective_figure, read_results

DEFAULT_WAS_BEST = "the default was the best point"
# The columns of a tune's points.csv that are not knobs (every other column is one).
POINT_COLUMNS: tuple[str, ...] = (
    "model", "model_path", "point", "settings", *OBJECTIVE_FIGURES.values(), "default", "status", "valid", "agreement", "interference",
    "reason", "latency_s", "refused", "folder",
)  # fmt: skip


def tuned_environments(run_dirs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The environment folders of the runs that hold a tune."""
    return sorted(path.parent.parent for run_dir in run_dirs for path in Path(run_dir).glob(f"*/{layout.TUNE_DIR}/{layout.TUNE_TABLE}"))


def latency_bound_ms(run_dirs: Iterable[str | os.PathLike[str]]) -> float | None:
    """The server's latency bound the tunes were judged by (the first point's parameters)."""
    for env_dir in tuned_environments(run_dirs):
        for folder in layout.point_folders(env_dir):
            return read_environment(folder).get("parameters", {}).get("latency_bound_ms")
    return None


def objective_of(points: pd.DataFrame) -> str:
    """The objective a tune's table is of, by the figure it has."""
    return next(objective for objective, column in OBJECTIVE_FIGURES.items() if column in points)


def tune_points(run_dirs: Iterable[str | os.PathLike[str]]) -> pd.DataFrame:
    """Every point of every tune of the runs, with its environment and objective, and whether it is the best one."""
    frames = []
    for env_dir in tuned_environments(run_dirs):
        points = pd.read_csv(env_dir / layout.TUNE_DIR / layout.TUNE_TABLE)
        objective = objective_of(points)
        figure = points[OBJECTIVE_FIGURES[objective]]
        chosen = points[figure.notna()]
        best = chosen.groupby("model")[OBJECTIVE_FIGURES[objective]].transform("max" if HIGHER_IS_BETTER[objective] else "min")
        points["best"] = figure.eq(best.reindex(points.index)).fillna(False)
        frames.append(points.assign(environment=env_dir.name, env_dir=str(env_dir), objective=objective, figure=figure))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def round_figures(folder: Path, objective: str) -> list[float]:
    """The objective's figure in each round a confirmation folder measured (rounds without one left out)."""
    try:
        rows = read_results(folder)
    except FileNotFoundError:
        return []
    rows = rows[rows["scenario"] == objective].sort_values("round")
    return [figure for _, row in rows.iterrows() if (figure := objective_figure(row)[0]) is not None]


def confirmation(env_dir: Path, label: str, objective: str) -> dict[str, Any]:
    """The best point against the default, round by round: their medians, the gain (the best's speed over the default's,
    above 1 a gain) with its interval over the rounds, and the verdict (`faster`: a confirmed gain)."""
    best = round_figures(layout.confirm_folder(env_dir, label, "best"), objective)
    default = round_figures(layout.confirm_folder(env_dir, label, "default"), objective)
    if not best and not default:
        return {"confirmed_best": math.nan, "confirmed_default": math.nan, "gain": math.nan, "gain_low": math.nan, "gain_high": math.nan,
                "verdict": DEFAULT_WAS_BEST, "rounds": 0}  # fmt: skip

    def as_time(figures: list[float]) -> list[float]:  # a rate's time per sample: below 1, the best point is faster
        return [1 / figure for figure in figures] if HIGHER_IS_BETTER[objective] else figures

    estimate = significance.ratio_interval([as_time(default)], [as_time(best)], over="rounds")
    median = pd.Series(best).median(), pd.Series(default).median()
    return {
        "confirmed_best": median[0], "confirmed_default": median[1], "gain": 1 / estimate.ratio,
        "gain_low": 1 / estimate.high, "gain_high": 1 / estimate.low, "verdict": significance.verdict(estimate),
        "rounds": min(len(best), len(default)),
    }  # fmt: skip


def at_its_best(run_dirs: Iterable[str | os.PathLike[str]]) -> pd.DataFrame:
    """Per tuned environment and model: the objective, the points tried and refused, the best point's settings, its
    figure in the search, and the confirmation (`confirmation`); `search_over_confirmed` is the search's figure over the
    confirmed one (above 1 for a rate: the search's luck)."""
    points = tune_points(run_dirs)
    if points.empty:
        return pd.DataFrame()
    rows = []
    for (environment, model), group in points.groupby(["environment", "model"], sort=False):
        objective = group["objective"].iloc[0]
        best = group[group["best"]]
        label = Path(group["folder"].iloc[0]).parts[1]  # tune/<label>/point-NNN
        env_dir = Path(group["env_dir"].iloc[0])
        row: dict[str, Any] = {
            "environment": environment, "model": model, "objective": objective, "points": len(group),
            "refused": int(group["figure"].isna().sum()),
            "best_settings": best["settings"].iloc[0] if not best.empty else "", "search_figure": best["figure"].iloc[0] if not best.empty else math.nan,
            "default_figure": group.loc[group["default"].astype(bool), "figure"].iloc[0] if group["default"].astype(bool).any() else math.nan,
        }  # fmt: skip
        if not best.empty and bool(best["default"].iloc[0]):
            row.update(confirmed_best=math.nan, confirmed_default=math.nan, gain=1.0, gain_low=math.nan, gain_high=math.nan, verdict=DEFAULT_WAS_BEST, rounds=0)
        else:
            row.update(confirmation(env_dir, label, objective))
        row["search_over_confirmed"] = row["search_figure"] / row["confirmed_best"] if row["confirmed_best"] == row["confirmed_best"] else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def settings_text(settings: str) -> str:
    """A point's settings (points.csv's JSON) in words: `streams 2, max_batch 4`."""
    return ", ".join(f"{knob} {'(default)' if value is None else value}" for knob, value in json.loads(settings).items()) if settings else ""


def findings(table: pd.DataFrame) -> list[str]:
    """A sentence per tuned environment and model: the best settings, the gain confirmed or not, the search's luck;
    then, per model, the fastest environment at its best against the fastest at its defaults."""
    sentences = []
    for _, row in table.iterrows():
        figure = OBJECTIVE_FIGURES[row["objective"]]
        if row["verdict"] == DEFAULT_WAS_BEST:
            sentences.append(f"At its best, {row['environment']} ran {row['model']} with its default settings: no other of {row['points']} points did better ({figure}).")
            continue
        interval = "" if math.isnan(row["gain_low"]) else f" (95% interval {row['gain_low']:.2f} to {row['gain_high']:.2f})"
        held = {"faster": "a confirmed gain", "slower": "a loss once confirmed", "no clear difference": "no clear gain once confirmed"}.get(row["verdict"], "not confirmed")
        sentences.append(
            f"At its best, {row['environment']} ran {row['model']} with {settings_text(row['best_settings'])}: {row['gain']:.2f}x its default's {figure}"
            f"{interval} over {row['rounds']} rounds in fresh kernels, {held}; the search had measured it at {row['search_figure']:.4g}, "
            f"the confirmation at {row['confirmed_best']:.4g}."
        )
    for model, group in table.groupby("model", sort=False):
        if len(group) < 2:
            continue
        higher = HIGHER_IS_BETTER[group["objective"].iloc[0]]
        default = group["confirmed_default"].fillna(group["default_figure"])  # measured in fresh kernels where confirmed
        best = group["confirmed_best"].where(group["verdict"] == significance.FASTER, default)  # only a confirmed gain counts
        pick = (lambda figures: figures.idxmax()) if higher else (lambda figures: figures.idxmin())
        at_default, at_best = group.loc[pick(default)], group.loc[pick(best)]
        if at_best["environment"] == at_default["environment"]:
            sentences.append(f"For {model}, {at_best['environment']} is the fastest both at its defaults and at its best (between environments, one figure each: no interval).")
        else:
            sentences.append(
                f"For {model}, {at_default['environment']} is the fastest at its defaults ({default[at_default.name]:.4g}), but "
                f"{at_best['environment']} at its best ({best[at_best.name]:.4g}, a confirmed gain): settings change the ranking "
                "(between environments, one figure each: no interval)."
            )
    return sentences


def compared_cells(run_dir: str | os.PathLike[str]) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """A run's confirmed tunes as `compare` reads cells: the best point and the default of each tuned environment and
    model, each an environment of its own named by its settings (`cpu-pytorch at max_batch 2, streams 2`), over the
    confirmation's rounds; so two runs' tunes are compared only where the same settings were measured."""
    lines, infos = [], {}
    for env_dir in tuned_environments([run_dir]):
        points = pd.read_csv(env_dir / layout.TUNE_DIR / layout.TUNE_TABLE)
        objective = objective_of(points)
        knobs = [column for column in points.columns if column not in POINT_COLUMNS]
        for model_path, group in points.groupby("model_path", sort=False):
            label = Path(group["folder"].iloc[0]).parts[1]
            for which in ("best", "default"):
                folder = layout.confirm_folder(env_dir, label, which)
                if not (folder / layout.RESULTS_FILE).is_file():
                    continue
                info = read_environment(folder)
                parameters = info.get("parameters", {})
                settings = {knob: parameters[knob] if knob in parameters else parameters.get("options", {}).get(knob) for knob in knobs}
                name = f"{env_dir.name} at {settings_text(json.dumps(settings))}"
                rows = read_results(folder)
                rows = rows[rows["scenario"] == objective]
                figures = [figure for _, row in rows.iterrows() if (figure := objective_figure(row)[0]) is not None]
                times = [1 / figure for figure in figures] if HIGHER_IS_BETTER[objective] else figures
                line = rows.iloc[-1]
                lines.append({
                    **{key: line[key] for key in ("workload", "scenario", "batch_size", "sequence_length", "reason")},
                    "environment": name, "model": model_path, "status": "ok" if times else line["status"],
                    "time_s": float(pd.Series(times).median()) if times else math.nan, "values": times, "values_over": "rounds",
                    "samples": times, "disturbed": bool((rows["disturbed"].astype(str) == "True").any()),
                })  # fmt: skip
                infos[name] = info
    return pd.DataFrame(lines), infos

