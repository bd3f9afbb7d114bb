"""A tune on this machine: Optuna's search over an environment's serving settings, then its best point confirmed.

For each model, each point of the search (a value of every knob of the space, `config.tune`) is an environment run of
its own, in a fresh kernel started with the point's settings (those a runtime reads when it loads included; a serving
engine's, `engine_args` and `engine_env`: the point's run starts its own engine with them and stops it after), into
`<env>/tuning/<model>/point-NNN/`: the objective's LoadGen tests, agreement, interference and resume are a load run's.
The study is Optuna's, kept in `<env>/tuning/study.journal`: a stopped tune resumes it, a point it left half-measured is
finished in its folder, and no finished point is measured again. Its grid sampler tries the space whole where
`tune_trials` covers it, its TPE sampler otherwise; the environment's own settings are the first point. A point whose
result LoadGen found INVALID, or whose answer was beyond the precision's tolerance (the cell an `error`), is shown and
never chosen. `<env>/tuning/points.csv` has a row per point.

Then the best point and the default settings are measured again, alternately, in fresh kernels (`confirm_rounds`
rounds each, into `confirm/best/` and `confirm/default/`), so that the gain is known with an interval over processes
rather than from the search's one figure (which, being the best of several, is biased upward). The settings to deploy
go to `<run>/tuned/<env>/<model>.yaml`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from benchlib.backends import backend_info
from benchlib.config.jobs import EnvironmentJob
from benchlib.config.models import short_names
from benchlib.config.params import BenchmarkParams
from benchlib.config.tune import KIT_KNOBS, Point, default_point, space_size, tune_space, with_knobs
from benchlib.launch.execution import EnvironmentOutcome, run_job
from benchlib.measure.sweep import stream_threads
from benchlib.paths import PARAMETERS_DIR
from benchlib.store import layout
from benchlib.store.results import HIGHER_IS_BETTER, OBJECTIVE_FIGURES, judged_percentile, objective_figure, read_results

REPEAT_OF = "repeat_of"  # a trial's attribute: the point it repeats (the sampler asked for one measured already)
RESUMES = "resumes"  # a trial's attribute: the number of the trial a stopped tune left half-measured, whose folder it finishes
DUPLICATES = 10  # asks in a row that give points already measured before the sampler is taken to have no new one


@dataclass(frozen=True)
class PointResult:
    """One point's measurement: its figure (None when it may not be chosen) and why not."""

    figure: float | None
    refused: str
    columns: dict[str, Any]


def model_label(name: str, models: list[str]) -> str:
    """A model's short name as a folder name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", short_names(models)[name]).strip("_.") or "model"


def point_params(params: BenchmarkParams, model: str, point: Point, output_dir: Path, rounds: int = 1, current_round: int = 1) -> BenchmarkParams:
    """The parameters of one point: the environment's, with the point's knobs set, one model, no tune, its own folder."""
    kit = {knob: value for knob, value in point.items() if knob in KIT_KNOBS}
    options = with_knobs(params.options, point)
    values = {
        **params.model_dump(), **kit, "options": options, "models": [model], "tune": None, "output_dir": str(output_dir),
        "rounds": rounds, "current_round": current_round,
    }  # fmt: skip
    if "max_batch" in kit:
        values["batch_sizes"] = [kit["max_batch"]]
    return BenchmarkParams(**values)


def point_result(folder: Path, objective: str) -> PointResult:
    """The objective's figure from a point's row, and why it may not be chosen (`objective_figure`)."""
    try:
        rows = read_results(folder)
    except FileNotFoundError:
        return PointResult(None, "no row was written", {})
    rows = rows[rows["scenario"] == objective]
    if rows.empty:
        return PointResult(None, "no row was written", {})
    row = rows.iloc[-1]
    figure, refused = objective_figure(row)
    columns = {key: row[key] for key in ("status", "valid", "agreement", "interference", "reason")}
    columns["latency_s"] = row[f"latency_p{judged_percentile(row)}_s"]  # at the percentile judged (Offline: the 99th)
    return PointResult(figure, refused, columns)


def grid_sampler(space: dict[str, list[Any]], seed: int) -> Any:
    """Optuna's grid sampler, whose check after a trial enqueued by the kit (the default point, or a point a stopped tune
    left half-measured) passes over the grid id such a trial does not have: Optuna's own raises KeyError when one grid
    point is left unmeasured then (optuna/optuna#6844), and the search goes on to that point instead."""
    import optuna

    class GridSampler(optuna.samplers.GridSampler):
        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            if "grid_id" in trial.system_attrs:
                super().after_trial(study, trial, state, values)

    return GridSampler(space, seed=seed)


def study_for(journal: Path, name: str, space: dict[str, list[Any]], objective: str, trials: int, seed: int) -> Any:
    """The Optuna study of one model, created or resumed from `journal`: a grid sampler where the space fits in `trials`,
    TPE otherwise."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    journal.parent.mkdir(parents=True, exist_ok=True)
    grid = space_size(space) <= trials
    sampler = grid_sampler(space, seed) if grid else optuna.samplers.TPESampler(seed=seed)
    return optuna.create_study(
        study_name=name, storage=JournalStorage(JournalFileBackend(str(journal))), sampler=sampler, load_if_exists=True,
        direction="maximize" if HIGHER_IS_BETTER[objective] else "minimize",
    )  # fmt: skip


def folder_number(trial: Any) -> int:
    """The point folder a trial measures in: its own number's, or that of the trial it resumes."""
    return int(trial.user_attrs.get(RESUMES, trial.number))


def worst(objective: str) -> float:
    """The value told to Optuna for a point that may not be chosen: none served, or no latency worth having."""
    return 0.0 if HIGHER_IS_BETTER[objective] else 1e9


class Tune:
    """The search and confirmation of one environment's job, model after model."""

    def __init__(self, job: EnvironmentJob, notebook: Path, progress: bool, max_restarts: int, report: Callable[[str], None]) -> None:
        self.job, self.notebook, self.progress, self.max_restarts, self.report = job, notebook, progress, max_restarts, report
        p = job.params
        assert p.tune is not None
        self.objective = p.tune.objective
        self.space = tune_space(p)
        self.default = default_point(p.model_dump(), list(self.space))
        self.table_rows: list[dict[str, Any]] = []

    def measure(self, params: BenchmarkParams) -> EnvironmentOutcome:
        """One fresh kernel over `params` (its folder resumed where a stopped tune left it)."""
        folder_job = EnvironmentJob(self.job.name, params, self.job.sources)
        return run_job(folder_job, self.notebook, self.progress, self.max_restarts, False, self.report)

    def search(self, model: str) -> tuple[Point, PointResult] | None:
        """Optuna's search for `model`: the best point that may be chosen and its result (None when none may)."""
        import optuna

        p, label = self.job.params, model_label(model, self.job.params.models)
        study = study_for(self.job.output_dir / layout.TUNE_DIR / layout.TUNE_JOURNAL, label, self.space, self.objective, p.tune_trials, p.seed)
        if not study.trials:
            study.enqueue_trial(self.default)
        trials = study.get_trials(deepcopy=False)
        results: dict[str, tuple[Point, PointResult]] = {}
        state = optuna.trial.TrialState
        folders = {folder_number(trial) for trial in trials if trial.state in (state.COMPLETE, state.WAITING)}
        for trial in trials:
            if trial.state == state.COMPLETE and REPEAT_OF not in trial.user_attrs:  # a repeat has no folder
                results[json.dumps(trial.params, sort_keys=True)] = (trial.params, self.recorded(model, folder_number(trial), trial.params))
            elif trial.state == state.RUNNING and folder_number(trial) not in folders:  # left half-measured by a stopped tune
                study.enqueue_trial(trial.params, user_attrs={RESUMES: folder_number(trial)})  # finished in its own folder
                folders.add(folder_number(trial))
        target, repeats = min(p.tune_trials, space_size(self.space)), [0]

        def objective(trial: Any) -> float:
            point = {knob: trial.suggest_categorical(knob, values) for knob, values in self.space.items()}
            key = json.dumps(point, sort_keys=True)
            if key in results:  # a point measured already: its figure again, not a measurement
                trial.set_user_attr(REPEAT_OF, key)
                repeats[0] += 1
            else:
                repeats[0] = 0
                results[key] = (point, self.measure_point(model, folder_number(trial), point))
            return results[key][1].figure or worst(self.objective)

        def enough(study: Any, trial: Any) -> None:
            if len(results) >= target or repeats[0] >= DUPLICATES:
                study.stop()

        if len(results) < target:  # the grid sampler stops the loop itself once every point has been asked for
            study.optimize(objective, timeout=p.tune_budget_s, callbacks=[enough])
        chosen = [(point, result) for point, result in results.values() if result.figure is not None]
        if not chosen:
            return None
        pick = max if HIGHER_IS_BETTER[self.objective] else min
        return pick(chosen, key=lambda item: item[1].figure or 0.0)

    def measure_point(self, model: str, number: int, point: Point) -> PointResult:
        """Measure point `number` in its folder (resumed where a stopped tune left it)."""
        label = model_label(model, self.job.params.models)
        shown = ", ".join(f"{knob} {'(default)' if value is None else value}" for knob, value in point.items())
        self.report(f"{self.job.name}: {label} point {number}: {shown}")
        self.measure(point_params(self.job.params, model, point, layout.point_folder(self.job.output_dir, label, number)))
        return self.recorded(model, number, point)

    def recorded(self, model: str, number: int, point: Point) -> PointResult:
        """A measured point's result, added to the tune's table."""
        label = model_label(model, self.job.params.models)
        folder = layout.point_folder(self.job.output_dir, label, number)
        result = point_result(folder, self.objective)
        self.table_rows.append({
            "model": short_names(self.job.params.models)[model], "model_path": model, "point": number, **point, "settings": json.dumps(point, sort_keys=True), OBJECTIVE_FIGURES[self.objective]: result.figure,
            "default": point == self.default, **result.columns, "refused": result.refused, "folder": str(folder.relative_to(self.job.output_dir)),
        })  # fmt: skip
        self.write_table()
        return result

    def write_table(self) -> None:
        table = pd.DataFrame(self.table_rows).drop_duplicates(subset=["model_path", "point"], keep="last")
        path = self.job.output_dir / layout.TUNE_DIR / layout.TUNE_TABLE
        path.parent.mkdir(parents=True, exist_ok=True)
        table.sort_values(["model", "point"]).to_csv(path, index=False)

    def confirm(self, model: str, best: Point) -> None:
        """The best point and the default measured again, alternately, each round in fresh kernels."""
        p, label = self.job.params, model_label(model, self.job.params.models)
        for round_number in range(1, p.confirm_rounds + 1):
            order = ("default", "best") if round_number % 2 else ("best", "default")
            for which in order:
                point = best if which == "best" else self.default
                folder = layout.confirm_folder(self.job.output_dir, label, which)
                self.report(f"{self.job.name}: {label} confirmation round {round_number} of {p.confirm_rounds}: the {which} settings")
                self.measure(point_params(p, model, point, folder, p.confirm_rounds, round_number))

    def deploy(self, model: str, best: Point) -> Path:
        """The parameters that reproduce the best point with `python -m benchlib run --params`, and the same settings in
        the runtime's own words, one comment line each."""
        p, label = self.job.params, model_label(model, self.job.params.models)
        kit = {knob: value for knob, value in best.items() if knob in KIT_KNOBS}
        options = {knob: value for knob, value in best.items() if knob not in KIT_KNOBS}
        values = {**kit, **({"options": with_knobs(p.options, best)} if options else {}), "models": [model], "scenario": [self.objective], "tune": None}
        settings = point_params(p, model, best, self.job.output_dir)
        path = layout.tuned_settings_file(self.job.output_dir.parent, self.job.name, label)
        grid = self.job.sources[0]
        grid_name = grid.stem if grid.parent == PARAMETERS_DIR / "grids" else str(grid)
        info = backend_info(p.framework)
        runtime = {**options, **({"num_threads": threads} if (threads := stream_threads(settings)) is not None else {})}
        if settings.num_interop_threads is not None:
            runtime["num_interop_threads"] = settings.num_interop_threads
        lines = [
            f"# {self.job.name}, {model}: the settings the tune found best for {self.objective} ({layout.TUNE_DIR}/{layout.TUNE_TABLE} has every point tried).",
            f"# Measure them again: python -m benchlib run --grid {grid_name} --environments {self.job.name} --params {path}",
            f"# Serving: {settings.streams} stream(s), batches of up to {settings.max_batch} requests"
            + (f" waiting at most {settings.batch_timeout_ms:g} ms for more" if self.objective == "server" else "") + ".",
            f"# In {info.runtime()}'s own words (the threads a stream's share of num_threads):",
            *(f"#   {info.knob_words(knob, value)}" for knob, value in runtime.items()),
        ]  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n" + yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
        return path

    def run(self) -> EnvironmentOutcome:
        start = time.perf_counter()
        failed = []
        for model in self.job.params.models:
            found = self.search(model)
            if found is None:
                failed.append(f"{model}: no point tried could be chosen ({layout.TUNE_DIR}/{layout.TUNE_TABLE} says why)")
                continue
            best, result = found
            self.report(f"{self.job.name}: {model}: best point {best} ({OBJECTIVE_FIGURES[self.objective]} {result.figure:.4g} in the search)")
            self.deploy(model, best)
            if best != self.default:
                self.confirm(model, best)
        return EnvironmentOutcome(self.job.name, not failed, time.perf_counter() - start, "; ".join(failed))
