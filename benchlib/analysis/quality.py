"""How far a run's numbers can be trusted, for the summary: noisy cells, thread counts, peak memory,
other work on the machine (interference) and the machine's own speed (the speed probe).

Pure functions of results rows (`read_results`) and of the environment.json files of a run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from benchlib import status
from benchlib.machine import machine_description, machine_label
from benchlib.measure import probe, stats
from benchlib.paths import display_path
from benchlib.store.environment import read_run_environments
from benchlib.store.results import is_true

MIB = 2**20
CELL_COLUMNS = ["environment", "model", "batch_size", "sequence_length"]


def noisy_cells(rows: pd.DataFrame) -> pd.DataFrame:
    """The `ok` cells whose interquartile range exceeds 10% of their median, recomputed from `samples_s`.

    Columns: environment, model, batch_size, sequence_length, median_s, iqr_s, iqr_percent, samples.
    """
    measured = rows[rows["status"] == status.OK]
    records = []
    for cell, samples in zip(measured[CELL_COLUMNS].itertuples(index=False), measured["samples_s"]):
        if samples and stats.is_noisy(samples):
            median, spread = float(pd.Series(samples).median()), stats.iqr(samples)
            records.append({**cell._asdict(), "median_s": median, "iqr_s": spread, "iqr_percent": 100 * spread / median, "samples": len(samples)})
    return pd.DataFrame(records, columns=[*CELL_COLUMNS, "median_s", "iqr_s", "iqr_percent", "samples"])


def load_environments(run_dirs: Iterable[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """The environment.json of every `<run>/<env>/` folder, each with `run` (the run folder as a shared report names it:
    `display_path`, never a path of this machine) and `folder` (the environment folder's name) added."""
    environments = []
    for run_dir in run_dirs:
        for folder, data in read_run_environments(run_dir).items():
            environments.append({**data, "run": display_path(run_dir), "folder": folder})
    return environments


def thread_table(environments: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per environment: its machine, device and the thread counts read back when it ran."""
    records = []
    for env in environments:
        threads, parameters = env.get("threads", {}), env.get("parameters", {})
        records.append({
            "run": env.get("run"),
            "environment": parameters.get("environment", env.get("folder")),
            "machine": machine_label(env, parameters.get("device", "cpu")),
            "device": parameters.get("device", "cpu"),
            "num_threads": threads.get("num_threads"),
            "requested_threads": parameters.get("num_threads"),
            "OMP_NUM_THREADS": threads.get("OMP_NUM_THREADS"),
        })  # fmt: skip
    return pd.DataFrame(records, columns=["run", "environment", "machine", "device", "num_threads", "requested_threads", "OMP_NUM_THREADS"])


def thread_count_warnings(environments: list[dict[str, Any]]) -> list[str]:
    """One sentence per machine and device whose compared environments ran with different thread counts."""
    table = thread_table(environments)
    warnings = []
    for (machine, device), group in table.groupby(["machine", "device"], sort=True, dropna=False):
        if group["num_threads"].nunique(dropna=False) > 1:
            counts = ", ".join(f"{env} {count}" for env, count in zip(group["environment"], group["num_threads"]))
            warnings.append(
                f"On {machine} ({device}) the environments compared ran with different thread counts "
                f"({counts}); their times are not directly comparable."
            )
    return warnings


def peak_memory_table(rows: pd.DataFrame) -> pd.DataFrame:
    """(environment, model) × "BxS": peak memory of `ok` cells in MiB, the status of every other cell."""
    shapes = sorted(set(zip(rows["batch_size"], rows["sequence_length"])))
    cells = rows.assign(shape=[f"{b}x{s}" for b, s in zip(rows["batch_size"], rows["sequence_length"])])
    cells["cell"] = [
        f"{peak / MIB:.0f}" if state == status.OK and pd.notna(peak) else state
        for peak, state in zip(pd.to_numeric(cells["peak_memory_bytes"], errors="coerce"), cells["status"])
    ]
    table = cells.pivot_table(index=["environment", "model"], columns="shape", values="cell", aggfunc="last", sort=False)
    return table.reindex(columns=[f"{b}x{s}" for b, s in shapes]).fillna("")


# ---------------------------------------------------------------- other work on the machine, the machine's own speed


def _with_columns(rows: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """`rows` with every one of `columns`, empty where missing (rows from before a column existed)."""
    return rows.reindex(columns=list(dict.fromkeys([*rows.columns, *columns])))


def _names(names: Iterable[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    names = list(names)
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


def disturbed_cells(rows: pd.DataFrame) -> pd.DataFrame:
    """The kept `ok` cells still `disturbed` (other processes used more of the machine than allowed) after any remeasuring.

    Columns: environment, model, batch_size, sequence_length, interference, attempts, median_s.
    """
    columns = [*CELL_COLUMNS, "interference", "attempts", "median_s"]
    rows = _with_columns(rows, [*columns, "status", "disturbed"])
    return rows.loc[(rows["status"] == status.OK) & is_true(rows["disturbed"]), columns].reset_index(drop=True)


def round_spread(rows: pd.DataFrame) -> pd.DataFrame:
    """Per environment measured in two rounds or more (rows of `runs.load_runs`): how far its cells' per-round
    medians spread (largest minus smallest, % of the cell's time): the median over cells and the largest, with its cell."""
    columns = ["environment", "cells", "rounds", "median_spread_pct", "largest_spread_pct", "largest_spread_cell"]
    rows = _with_columns(rows, ["status", "rounds", "round_spread_pct"])
    several = rows[(rows["status"] == status.OK) & (pd.to_numeric(rows["rounds"], errors="coerce") > 1)]
    records = []
    for env, cells in several.groupby("environment", sort=False):
        worst = cells.loc[cells["round_spread_pct"].idxmax()]
        records.append({
            "environment": env, "cells": len(cells), "rounds": int(cells["rounds"].max()),
            "median_spread_pct": float(cells["round_spread_pct"].median()), "largest_spread_pct": float(worst["round_spread_pct"]),
            "largest_spread_cell": f"{worst['model']} {worst['batch_size']}x{worst['sequence_length']}",
        })  # fmt: skip
    return pd.DataFrame(records, columns=columns)


def time_to_first_result(rows: pd.DataFrame) -> pd.DataFrame:
    """Per environment (rows of `runs.load_runs`): the seconds a fresh process pays before its first result, over
    its models (each model's first `ok` cell, the one its process built it for): `warm`, with every artefact in
    the build cache (`build_s` + `prepare_s` + `first_call_s`), and `cold`, from nothing (plus `cold_export_s`,
    what making the weights, export and conversion took). Empty for runs from before the build cache."""
    columns = ["environment", "models", "warm_median_s", "cold_median_s", "slowest_model", "slowest_cold_s", "from_cache"]
    rows = _with_columns(rows, ["status", "build_s", "cold_export_s", "prepare_s", "first_call_s", "cached"])
    ok = rows[(rows["status"] == status.OK) & pd.to_numeric(rows["build_s"], errors="coerce").notna()]
    records = []
    for env, cells in ok.groupby("environment", sort=False):
        first = cells.drop_duplicates("model")
        number = {name: pd.to_numeric(first[name], errors="coerce").fillna(0.0) for name in ("build_s", "cold_export_s", "prepare_s", "first_call_s")}
        warm = number["build_s"] + number["prepare_s"] + number["first_call_s"]
        cold = warm + number["cold_export_s"]
        records.append({
            "environment": env, "models": len(first), "warm_median_s": float(warm.median()), "cold_median_s": float(cold.median()),
            "slowest_model": first.loc[cold.idxmax(), "model"], "slowest_cold_s": float(cold.max()),
            "from_cache": f"{int(is_true(first['cached']).sum())} of {len(first)}",
        })  # fmt: skip
    return pd.DataFrame(records, columns=columns)


def _threshold(environments: list[dict[str, Any]]) -> str:
    """The `max_interference` the environments ran with, in % ("5%", "5% or 10%")."""
    values = {(env.get("interference") or {}).get("max_interference") for env in environments}
    return " or ".join(f"{100 * float(v):g}%" for v in sorted(v for v in values if v is not None)) or "max_interference"


def interference_notes(rows: pd.DataFrame, environments: list[dict[str, Any]]) -> list[str]:
    """Sentences on how much other processes used the machine while the `ok` cells were measured; never empty.

    Names the environments where it was not measured, then each environment with disturbed cells,
    else gives the largest interference seen. `environments` (`load_environments`) give the threshold.
    """
    rows = _with_columns(rows, [*CELL_COLUMNS, "status", "interference", "disturbed", "steal"])
    ok = rows[rows["status"] == status.OK].assign(
        interference=lambda r: pd.to_numeric(r["interference"], errors="coerce"), steal=lambda r: pd.to_numeric(r["steal"], errors="coerce")
    )
    if ok.empty:
        return ["No cell is ok: there is no interference to report."]
    notes = []
    unmeasured = [env for env, cells in ok.groupby("environment", sort=False) if cells["interference"].isna().all()]
    if unmeasured:
        notes.append(
            f"Interference was not measured for {_names(unmeasured)} (results from before it was recorded, or no /proc/stat): "
            "whether other work on the machine affected their comparisons cannot be checked."
        )
    measured = ok[~ok["environment"].isin(unmeasured)]
    if measured.empty:
        return notes
    threshold = _threshold(environments)
    disturbed = is_true(measured["disturbed"])
    for env, cells in measured[disturbed].groupby("environment", sort=False):
        own = measured[measured["environment"] == env]
        notes.append(
            f"{env}: {len(cells)} of {len(own)} ok cells disturbed (other processes used over {threshold} of the CPUs), "
            f"median interference {100 * own['interference'].median():.1f}%{_steal_part(cells)}: "
            "its numbers were taken while other processes used the machine."
        )
    if not disturbed.any():
        worst = measured.loc[measured["interference"].idxmax()]
        notes.append(
            f"No cell was disturbed (other processes above {threshold} of the CPUs, beyond the meter's resolution, which is coarse on short cells): "
            f"the largest interference seen was {100 * worst['interference']:.1f}% "
            f"({worst['environment']}, {worst['model']} {worst['batch_size']}x{worst['sequence_length']})."
        )
    return notes


def _steal_part(disturbed: pd.DataFrame) -> str:
    """How much of the disturbed cells' interference was the hypervisor's steal (empty where it was not recorded)."""
    if disturbed["steal"].isna().all():
        return ""
    share = disturbed["steal"].sum() / disturbed["interference"].sum() if disturbed["interference"].sum() > 0 else 0.0
    return f" (of the disturbed cells' interference, {100 * share:.0f}% was steal: the host's other work, not a process on this machine)"


PROBE_COLUMNS = ["run", "environment", "machine", "device", "label", "time", "seconds", "workload", "host", "description"]
PROBE_TOLERANCE = 0.10  # the probe's variation on one machine above which the summary warns
SPEED_TOLERANCE = 0.05  # the difference in speed between two machines of one type above which the summary warns


def _environment_names(environments: list[dict[str, Any]]) -> list[str]:
    """Each environment's name as `runs.load_runs` gives it: `<env>@<run>` where the name is in more than one run."""
    names = [(env.get("parameters", {}).get("environment", env.get("folder")), Path(env.get("run") or "").name) for env in environments]
    runs: dict[str, set[str]] = {}
    for name, run in names:
        runs.setdefault(name, set()).add(run)
    return [f"{name}@{run}" if len(runs[name]) > 1 else name for name, run in names]


def machine_table(environments: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per environment: run, environment, device, machine (as the summary groups it), description (`machine_description`), host."""
    records = [
        {
            "run": Path(env.get("run") or "").name, "environment": name, "device": (device := env.get("parameters", {}).get("device") or "cpu"),
            "machine": machine_label(env, device), "description": machine_description(env), "host": (env.get("machine") or {}).get("hostname") or "",
        }  # fmt: skip
        for env, name in zip(environments, _environment_names(environments))
    ]
    return pd.DataFrame(records, columns=["run", "environment", "device", "machine", "description", "host"])


def machine_warnings(environments: list[dict[str, Any]]) -> list[str]:
    """One sentence per machine and device of the summary whose environments ran on machines of different types
    (CPU model, cores, memory, GPUs: `machine_description`), as on a cluster whose workers differ."""
    warnings = []
    for (machine, device), group in machine_table(environments).groupby(["machine", "device"], sort=True):
        types = group.groupby("description", sort=True)["environment"].agg(list)
        if len(types) > 1:
            warnings.append(
                f"On {machine} ({device}) the environments compared ran on machines of different types "
                f"({'; '.join(f'{description}: {_names(names)}' for description, names in types.items())}): "
                "their times differ by machine as well as by environment; run them on machines of one type to compare them."
            )
    return warnings


def machine_speed_warnings(environments: list[dict[str, Any]]) -> list[str]:
    """One sentence per machine type whose machines (hosts) differ in speed by more than 5%: each host's median speed
    probe over every environment it ran, slowest / fastest - 1."""
    table = probe_table(environments).dropna(subset=["seconds"])
    warnings = []
    for description, group in table.groupby("description", sort=True):
        medians = group.groupby("host", sort=True)["seconds"].median()
        change = probe.variation(medians.tolist())
        if change > SPEED_TOLERANCE:
            hosts = "; ".join(
                f"{host or 'unknown host'} {1000 * seconds:.1f} ms ({_names(dict.fromkeys(group.loc[group['host'] == host, 'environment']))})"
                for host, seconds in medians.items()
            )
            warnings.append(
                f"Machines of one type ({description}) differ in speed by {100 * change:.0f}% (median speed probe per machine: {hosts}): "
                "comparisons between environments measured on different machines carry that difference."
            )
    return warnings


def probe_table(environments: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per speed probe (`probes` of environment.json): run, environment, machine, device, label, time (UTC), seconds,
    workload, host (the probe's own `hostname`, or its environment's) and the machine's `description`."""
    records = []
    for env, name in zip(environments, _environment_names(environments)):
        device = env.get("parameters", {}).get("device") or "cpu"
        for record in env.get("probes") or []:
            records.append({
                "run": Path(env.get("run") or "").name, "environment": name,
                "machine": machine_label(env, device), "device": device, "label": record.get("label"),
                "time": record.get("time"), "seconds": record.get("seconds"), "workload": env.get("probe_workload"),
                "host": record.get("hostname") or (env.get("machine") or {}).get("hostname") or "", "description": machine_description(env),
            })  # fmt: skip
    table = pd.DataFrame(records, columns=PROBE_COLUMNS)
    table["time"] = pd.to_datetime(table["time"], utc=True, format="ISO8601")
    table["seconds"] = pd.to_numeric(table["seconds"], errors="coerce")
    return table


def probe_variation(group: pd.DataFrame) -> tuple[float, pd.Series]:
    """How much the machine's speed changed between environments: each environment's median probe
    (a single probe carries the probe's own noise; the median of an environment's does not), and
    their variation (slowest / fastest - 1)."""
    medians = group.groupby("environment", sort=False)["seconds"].median()
    return probe.variation(medians.tolist()), medians


def probe_warnings(environments: list[dict[str, Any]]) -> list[str]:
    """One sentence per machine (host) and device whose environments' median speed probes differ by more than 10%
    (slowest / fastest - 1), and one naming the environments without a probe, when others have one; then the
    warnings on machines of different types (`machine_warnings`) and on machines of one type that differ in speed
    (`machine_speed_warnings`), as when the environments ran on several workers of a cluster."""
    table = probe_table(environments).dropna(subset=["seconds"])
    warnings = []
    without = [name for env, name in zip(environments, _environment_names(environments)) if not env.get("probes")]
    if without and not table.empty:
        warnings.append(f"No speed probe was recorded for {_names(without)} (results from before it existed): whether the machine changed speed while it ran cannot be checked.")
    hosts = table.groupby(["machine", "device"])["host"].nunique()
    for (machine, device, host), group in table.groupby(["machine", "device", "host"], sort=True):
        change, medians = probe_variation(group)
        if change > PROBE_TOLERANCE:
            warnings.append(
                f"On {machine} ({device}{f', host {host}' if hosts[machine, device] > 1 else ''}) the median speed probe differed by {100 * change:.0f}% between environments, "
                f"from {1000 * medians.min():.1f} ms ({medians.idxmin()}) to {1000 * medians.max():.1f} ms ({medians.idxmax()}): "
                f"the machine itself changed speed during the run, and comparisons between {_names(medians.index)} carry that change."
            )
    return [*warnings, *machine_warnings(environments), *machine_speed_warnings(environments)]
