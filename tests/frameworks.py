"""Run code in a fresh Python process, so that each framework gets a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any


def run_python(code: str, timeout: float = 600) -> Any:
    """Run `code` in a new interpreter; it prints one JSON document last, which is returned."""
    # The framework switches that a backend imported in this process set are not inherited.
    env = {name: value for name, value in os.environ.items() if name not in ("USE_TF", "USE_TORCH")}
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env
    )
    if completed.returncode != 0:
        raise AssertionError(f"subprocess failed ({completed.returncode}):\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])
