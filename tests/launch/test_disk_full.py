"""A full disk mid-run, for real: `benchlib run` under a file-size limit (RLIMIT_FSIZE, which its kernel inherits; CPython
ignores SIGXFSZ, so a write past it fails with EFBIG) stops in one line, tears no row, and the rerun measures the rest."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from benchlib import read_results
from benchlib.backends import pytorch as pytorch_backend
from benchlib.config.catalogue import get_model
from benchlib.paths import PROJECT_ROOT
from benchlib.store.results import split_records

MODELS = ["gpt2", "bert-base-cased", "distilgpt2", "openai-gpt"]
# Sizes on disk: the executed notebook holds about 17 kB while the sweep runs and about 31 kB once its progress bar's
# widget state is saved at the end (an error's one line included); a row of 30 samples holds about 1.2 kB.
ROWS_CASE = {"models": MODELS, "batch_sizes": [1, 2], "sequence_lengths": [8, 16, 32, 64], "repeat": 30, "remeasure": 0}
ROWS_LIMIT = 35_000  # results.csv (32 rows, about 38 kB) reaches it mid-sweep, before the notebook does
NOTEBOOK_CASE = {"models": MODELS[:2], "sequence_lengths": [8, 16], "repeat": 20, "remeasure": 0}
NOTEBOOK_LIMIT = 26_000  # the notebook's last save (about 30 kB) reaches it, after every row (about 5 kB)


def run(run_dir: Path, params: Path, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """`benchlib run` of cpu-pytorch with `params` into `run_dir`, under a file-size limit of `limit` bytes."""
    command = [
        sys.executable, "-m", "benchlib", "run", "--grid", "smoke", "--environments", "cpu-pytorch", "--params", str(params),
        "--out", str(run_dir), "--no-summary", "--no-limits", "--quiet",
    ]  # fmt: skip

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, preexec_fn=limited if limit else None)


def cells(rows: pd.DataFrame) -> list[tuple[str, int, int]]:
    """(model, batch size, sequence length) of each row, in the file's order."""
    return list(zip(rows.model, rows.batch_size, rows.sequence_length))


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("values", "limit", "written"),
    # a row refused at the file-size limit is checked without a kernel (tests/store/test_disk.py): its run is `--full`'s
    [pytest.param(ROWS_CASE, ROWS_LIMIT, "results.csv", marks=pytest.mark.full), (NOTEBOOK_CASE, NOTEBOOK_LIMIT, "benchmark.ipynb")],
    ids=["row", "notebook"],
)
def test_a_full_disk_stops_the_run_in_one_line_and_the_rerun_measures_only_what_is_missing(tmp_path: Path, values: dict, limit: int, written: str) -> None:
    for name in values["models"]:  # the build cache's weights (hundreds of kB each) are made before the limit applies
        pytorch_backend.weights(get_model(name), "tiny", seed=0)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(values), encoding="utf-8")
    env_dir = tmp_path / "run" / "cpu-pytorch"
    grid = [(m, b, s) for m in values["models"] for b in values.get("batch_sizes", [1]) for s in values["sequence_lengths"]]

    full = run(tmp_path / "run", params, limit)
    assert full.returncode == 1, full.stdout + full.stderr
    assert full.stderr.startswith(f"disk full: cannot write {written} in {env_dir} (a file reached the file-size limit"), full.stderr
    assert full.stderr.count("\n") == 1 and full.stderr.endswith("\n") and "Traceback" not in full.stdout + full.stderr
    data = (env_dir / "results.csv").read_bytes()
    records, rest = split_records(data.decode("utf-8"))
    assert rest == "" and len(data) <= limit and not (env_dir / "results.cutoff.txt").exists()  # no row torn
    before = read_results(env_dir, every_attempt=True)
    assert len(records) == len(before) + 1 and before.status.eq("ok").all(), before.reason.tolist()  # every row parses, none failed
    assert 0 < len(before) <= len(grid) and cells(before) == grid[: len(before)]  # the rows written before it, in order

    again = run(tmp_path / "run", params)
    assert again.returncode == 0, again.stdout + again.stderr
    after = (env_dir / "results.csv").read_bytes()
    assert after.startswith(data)  # the earlier rows stay as they were
    measured = read_results(env_dir, every_attempt=True).iloc[len(before) :]
    assert sorted(cells(measured)) == sorted(set(grid) - set(cells(before)))  # only the missing cells, each once
    assert sorted(cells(read_results(env_dir, every_attempt=True))) == sorted(grid)
    print(f"{written}: {len(before)} rows before, {len(before) + len(measured)} after, {len(measured)} measured by the rerun")
