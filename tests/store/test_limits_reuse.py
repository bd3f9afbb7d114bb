"""Limits measured today on this machine are reused by a later run from the build cache, never a disturbed
measurement, and never across a change of CPUs, threads, code-path caps or day."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest

from benchlib.launch.local import describe_roofs, limits_key
from benchlib.store.cache import CACHE_VARIABLE
from benchlib.store.layout import limits_notebook
from benchlib.store.limits import keep_limits, read_limits, reuse_limits, write_limits

MEASURED = {"device": "cpu", "float32_flops_per_s": 2.16e11, "bandwidth_bytes_per_s": 2.83e10, "measured_at": "2026-12-05T10:00:00+00:00"}


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    return tmp_path / "cache"


def measured_run(run_dir: Path, disturbed: bool = False) -> Path:
    """A run folder holding limits as `measure_machine_limits` writes them: the figures and the notebook's record."""
    write_limits(run_dir, {**MEASURED, "disturbed": disturbed})
    limits_notebook(run_dir, "cpu").write_text("the record of the measurement")
    return run_dir


def test_limits_kept_after_a_run_are_reused_by_the_next_with_their_record_and_marked_so(tmp_path: Path) -> None:
    key = limits_key("cpu", "cores")
    keep_limits(measured_run(tmp_path / "first"), "cpu", key)
    later = tmp_path / "later"
    later.mkdir()
    reused = reuse_limits(later, "cpu", limits_key("cpu", "cores"))
    assert reused == read_limits(later, "cpu") == {**MEASURED, "disturbed": False, "reused": True}
    assert limits_notebook(later, "cpu").read_text() == "the record of the measurement"
    assert describe_roofs(reused) == "float32 peak 216 GFLOP/s, bandwidth 28.3 GB/s"


def test_a_disturbed_measurement_is_never_kept(tmp_path: Path) -> None:
    key = limits_key("cpu", "cores")
    keep_limits(measured_run(tmp_path / "first", disturbed=True), "cpu", key)
    (tmp_path / "later").mkdir()
    assert reuse_limits(tmp_path / "later", "cpu", key) is None and not (tmp_path / "later" / "machine_limits.json").exists()


def test_other_threads_cpus_code_paths_or_day_measure_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keep_limits(measured_run(tmp_path / "first"), "cpu", limits_key("cpu", "cores"))
    (tmp_path / "later").mkdir()
    assert reuse_limits(tmp_path / "later", "cpu", limits_key("cpu", 1)) is None
    with monkeypatch.context() as patch:
        patch.setenv("ATEN_CPU_CAPABILITY", "default" if os.environ.get("ATEN_CPU_CAPABILITY") == "avx2" else "avx2")  # another cap than now
        assert reuse_limits(tmp_path / "later", "cpu", limits_key("cpu", "cores")) is None
    cpus = sorted(os.sched_getaffinity(0))
    with monkeypatch.context() as patch:
        patch.setattr(os, "sched_getaffinity", lambda pid: set(cpus[:1]) if len(cpus) > 1 else {cpus[0] + 1})
        assert reuse_limits(tmp_path / "later", "cpu", limits_key("cpu", "cores")) is None
    key = limits_key("cpu", "cores")
    tomorrow = (datetime.date.fromisoformat(key["day"]) + datetime.timedelta(days=1)).isoformat()
    assert reuse_limits(tmp_path / "later", "cpu", {**key, "day": tomorrow}) is None
    assert reuse_limits(tmp_path / "later", "cpu", key) is not None  # the same machine, threads and day: reused
