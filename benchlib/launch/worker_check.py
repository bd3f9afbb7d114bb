"""The same kit on every worker: what a machine runs (the kit's version and commit, its uncommitted changes, Python, the
backends' packages), and the differences between a worker's and the client's, one line each."""

from __future__ import annotations

import hashlib
import platform
import subprocess
from typing import Any

import benchlib
from benchlib.backends import backend_info, registry
from benchlib.machine import git_commit, package_version
from benchlib.paths import PROJECT_ROOT

COMMON_PACKAGES = ("transformers", "tokenizers", "numpy", "papermill", "safetensors")


def uncommitted_changes() -> str:
    """A short digest of the kit's uncommitted changes to tracked files ("" for a clean tree or no git checkout)."""
    try:
        diff = subprocess.run(["git", "-C", str(PROJECT_ROOT), "diff", "HEAD"], capture_output=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return hashlib.sha256(diff).hexdigest()[:12] if diff else ""


def kit_fingerprint() -> dict[str, Any]:
    """What this machine would measure with: the kit, its commit and changes, Python and the packages of every backend."""
    packages = dict.fromkeys([*COMMON_PACKAGES, *(name for framework in registry() for name in backend_info(framework).versions)])
    return {
        "benchlib": benchlib.__version__,
        "commit": git_commit(PROJECT_ROOT),
        "changes": uncommitted_changes(),
        "python": platform.python_version(),
        **{name: package_version(name) for name in packages},
    }


def _shown(key: str, value: Any) -> str:
    """A fingerprint value as the difference lines show it."""
    if value is None:
        return "not installed" if key not in ("commit",) else "no git checkout"
    if key == "commit":
        return str(value)[:12]
    if key == "changes":
        return f"uncommitted changes {value}" if value else "no uncommitted changes"
    return str(value)


def differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """One line per way `theirs` differs from `mine` ("commit 1a2b3c4d5e6f, here 0f9e8d7c6b5a")."""
    lines = []
    for key in dict.fromkeys([*mine, *theirs]):
        if mine.get(key) != theirs.get(key):
            label = "kit" if key == "changes" else key
            lines.append(f"{label} {_shown(key, theirs.get(key))}, here {_shown(key, mine.get(key))}")
    return lines
