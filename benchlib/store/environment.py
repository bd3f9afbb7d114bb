"""environment.json: the machine, the software and the parameters behind a results.csv, and the speed
probes of each session; JSON files of the run folder are written and read here."""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path
from typing import Any

import benchlib
from benchlib.machine import describe_machine, git_commit, package_version
from benchlib.paths import PROJECT_ROOT
from benchlib.store.layout import ENVIRONMENT_FILE


def describe_environment(
    parameters: dict[str, Any], backend_settings: dict[str, Any], backend_versions: dict[str, str], distributions: dict[str, str | None] | None = None
) -> dict[str, Any]:
    """Everything needed to trace a result to its parameters, machine and software.

    `distributions` are the installed versions of what the backend declares (its registry entry),
    `backend_versions` what the framework itself reports (CUDA, cuDNN, ...).
    """
    return {
        "parameters": own_machine(parameters),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": describe_machine(),
        "software": {
            "python": platform.python_version(),
            "benchlib": benchlib.__version__,
            "benchlib_commit": git_commit(PROJECT_ROOT),
            "transformers": package_version("transformers"),
            **{name.replace("-", "_"): version for name, version in (distributions or {}).items()},
            "numpy": package_version("numpy"),
            **{f"backend_{key}": value for key, value in backend_versions.items()},
        },
        "threads": {
            **backend_settings,
            **{name: os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
        },
    }


# A machine's own name and price, set where it measures (a cluster's worker): used where the parameters give none.
MACHINE_VARIABLES: dict[str, str] = {"machine_name": "BENCHLIB_MACHINE_NAME", "price_per_hour": "BENCHLIB_PRICE_PER_HOUR", "currency": "BENCHLIB_CURRENCY"}


def own_machine(parameters: dict[str, Any]) -> dict[str, Any]:
    """`parameters` with the machine's name, and its price and currency together, from MACHINE_VARIABLES where the
    parameters give none (a price that is not a number is kept as given: the summary refuses it in one line)."""
    values = dict(parameters)
    if values.get("machine_name") is None and os.environ.get(MACHINE_VARIABLES["machine_name"]):
        values["machine_name"] = os.environ[MACHINE_VARIABLES["machine_name"]]
    price = os.environ.get(MACHINE_VARIABLES["price_per_hour"])
    if values.get("price_per_hour") is None and price:
        try:
            values["price_per_hour"] = float(price)
        except ValueError:
            values["price_per_hour"] = price
        values["currency"] = os.environ.get(MACHINE_VARIABLES["currency"]) or values.get("currency")
    return values


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def write_environment(env_dir: str | os.PathLike[str], description: dict[str, Any]) -> None:
    """Write an environment folder's environment.json."""
    write_json(Path(env_dir) / ENVIRONMENT_FILE, description)


def read_environment(env_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """An environment folder's environment.json; {} where it is missing or unreadable."""
    try:
        data = json.loads((Path(env_dir) / ENVIRONMENT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_run_environments(run_dir: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The environment.json of every environment folder of a run, by folder name, in folder order."""
    return {path.parent.name: read_environment(path.parent) for path in sorted(Path(run_dir).glob(f"*/{ENVIRONMENT_FILE}"))}


def earlier_probes(env_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The probes recorded by earlier sessions of this environment (a resumed run), oldest first."""
    return list(read_environment(env_dir).get("probes", []))


def merge_environment(env_dir: str | os.PathLike[str], returned: bytes, cluster: dict[str, Any] | None = None) -> None:
    """Write a worker's environment.json into `env_dir`, its probes added to those recorded before, each probe tagged
    with the `hostname` of the machine it ran on (rounds of one environment may run on different workers); `cluster`,
    how the run reached its workers, is recorded under that name."""
    new = {**json.loads(returned), **({"cluster": cluster} if cluster else {})}
    earlier = read_environment(env_dir)
    probes: dict[tuple[Any, ...], dict[str, Any]] = {}
    for info in (earlier, new):
        host = (info.get("machine") or {}).get("hostname")
        for probe in info.get("probes") or []:
            probes.setdefault((probe.get("round"), probe.get("label"), probe.get("time")), {"hostname": host, **probe})
    write_environment(env_dir, {**new, "probes": sorted(probes.values(), key=lambda probe: str(probe.get("time")))})
