"""The one runtime crash the suite accepts: OpenVINO's CPU plugin in bfloat16 on an Intel CPU with AMX, given one core
(as each pytest-xdist worker's kernels are), dies of SIGFPE (`traps: ... divide error ... in
libopenvino_intel_cpu_plugin.so`) on the tests' tiny Llama folder (tests/checkpoints.py: head_dim 8, grouped key/value
heads). The kit cannot avoid it where it cannot be reproduced; it must record it as what it is. A row of any other
environment, model, status or reason is not accepted: the tests that use this still fail when the kit itself is wrong."""

from __future__ import annotations

import pandas as pd

from benchlib.status import CRASHED

ENVIRONMENT = "cpu-openvino-bf16"
# The reason the runner writes (launch.kernel.crash_verdict): the signal by name, then the runtime and its version.
REASON = r"kernel died \(SIGFPE: [^)]+\) while measuring with openvino \d"


def accepted_crash(rows: pd.DataFrame, model: str) -> pd.Series:
    """Which of `rows` are that crash: `crashed`, in cpu-openvino-bf16, of `model`, the reason naming SIGFPE and OpenVINO."""
    reason = rows["reason"].astype(str).str.match(REASON)
    return (rows["status"] == CRASHED) & (rows["environment"] == ENVIRONMENT) & (rows["model"] == model) & reason
