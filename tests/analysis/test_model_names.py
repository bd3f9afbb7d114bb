"""A folder model by a short name in every table of a run, unique within the run; its path kept beside it."""

from __future__ import annotations

from pathlib import Path

from benchlib.analysis.load import load_rows
from benchlib.analysis.runs import load_run, short_model_names
from benchlib.measure.timing import Measurement
from benchlib.store.environment import write_json
from benchlib.store.results import ResultsWriter, make_row

FIRST, SECOND = "/data/first/bert", "/data/second/bert"


def write_environment(folder: Path, models: list[str], scenario: str = "cell") -> None:
    """An environment folder whose results hold one ok row per model (of `scenario`), and its environment.json."""
    with ResultsWriter(folder) as writer:
        for model in models:
            cell = {
                "environment": folder.name, "framework": "pytorch", "mode": "eager", "device": "cpu", "model": model, "batch_size": 1,
                "sequence_length": 8, "scenario": scenario,
            }  # fmt: skip
            writer.append(make_row({**cell, "samples_per_s": 10.0, "valid": True}, "ok", Measurement((0.1, 0.1), number=1)))
    write_json(folder / "environment.json", {"parameters": {"environment": folder.name, "models": [FIRST, SECOND, "gpt2"]}})


def test_two_folders_named_alike_get_names_unique_within_the_run_in_every_table(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_environment(run / "cpu-pytorch", [FIRST, "gpt2"])  # the other folder is in another environment, under load
    write_environment(run / "cpu-onnxruntime", [SECOND], scenario="offline")
    rows = load_run(run)
    assert rows[["model", "model_path"]].values.tolist() == [["first/bert", FIRST], ["gpt2", "gpt2"]]
    assert load_rows([run])[["model", "model_path"]].values.tolist() == [["second/bert", SECOND]]
    assert short_model_names(rows).equals(rows)  # named again from `model_path`: the same names

