"""environment.json: the machine, the software and the parameters behind a results.csv."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import psutil

import benchlib


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, else `platform`)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def gpus() -> list[dict[str, str]]:
    """GPUs seen by nvidia-smi (name, memory, driver); empty without one."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    keys = ("name", "memory", "driver")
    return [dict(zip(keys, (part.strip() for part in line.split(",")))) for line in out.splitlines() if line.strip()]


def package_version(name: str) -> str | None:
    """Installed version of distribution `name`, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """The commit of the kit's checkout, if it is one."""
    root = Path(benchlib.__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def describe_environment(
    parameters: dict[str, Any], backend_settings: dict[str, Any], backend_versions: dict[str, str], distributions: dict[str, str | None] | None = None
) -> dict[str, Any]:
    """Everything needed to trace a result to its parameters, machine and software.

    `distributions` are the installed versions of what the backend declares (its registry entry),
    `backend_versions` what the framework itself reports (CUDA, cuDNN, ...).
    """
    memory = psutil.virtual_memory()
    return {
        "parameters": parameters,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "hostname": platform.node(),
            "cpu": cpu_model(),
            "physical_cores": psutil.cpu_count(logical=False),
            "logical_cores": psutil.cpu_count(logical=True),
            "affinity_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "memory_bytes": memory.total,
            "gpus": gpus(),
            "os": platform.platform(),
        },
        "software": {
            "python": platform.python_version(),
            "benchlib": benchlib.__version__,
            "benchlib_commit": git_commit(),
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
