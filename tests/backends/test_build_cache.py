"""The backends' artefacts in the build cache: made once, loaded by every later kernel, and what building cost per row."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from benchlib import status
from benchlib.backends import pytorch as pytorch_backend
from benchlib.backends._export import MODEL_FILE
from benchlib.config.catalogue import get_model
from benchlib.measure.sweep import build_cost, run_environment
from benchlib.store.cache import CACHE_VARIABLE, Artefact, entries, folder_bytes
from tests.frameworks import run_python


def tiny(tmp_path: Path, name: str, **values: object) -> dict:
    return {
        "environment": name, "models": ["bert-base-cased"], "model_scale": "tiny", "batch_sizes": [1], "sequence_lengths": [8, 16],
        "repeat": 3, "number": 1, "remeasure": 0, "warmup_max_seconds": 0.2, "output_dir": str(tmp_path / "run" / name), **values,
    }  # fmt: skip


def test_cached_weights_are_the_seeded_random_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    spec = get_model("gpt2")
    torch.manual_seed(0)
    drawn = spec.transformers_class("pytorch")(spec.build_config("tiny", **spec.inference_config)).state_dict()
    made = pytorch_backend.build_reference(spec, "tiny", seed=0).state_dict()  # made now, then loaded
    loaded = pytorch_backend.build_reference(spec, "tiny", seed=0).state_dict()  # loaded
    assert made.keys() == drawn.keys() == loaded.keys()
    assert all(torch.equal(drawn[name], made[name]) and torch.equal(made[name], loaded[name]) for name in drawn)
    other = pytorch_backend.build_reference(spec, "tiny", seed=1).state_dict()
    assert not torch.equal(other["wte.weight"], made["wte.weight"])
    assert [entry.kind for entry in entries(tmp_path / "cache")] == ["weights", "weights"]


@pytest.mark.e2e
def test_artefacts_are_made_once_and_rows_say_what_building_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    onnxruntime = run_environment(tiny(tmp_path, "ort", framework="onnxruntime", mode="session"), progress=False)
    [onnx] = [entry for entry in entries(tmp_path / "cache") if entry.kind == "onnx"]
    written = (onnx.path / MODEL_FILE).stat().st_mtime_ns
    openvino = run_environment(tiny(tmp_path, "ov", framework="openvino", mode="compiled"), progress=False)
    again = run_environment(tiny(tmp_path, "ov-again", framework="openvino", mode="compiled"), progress=False)

    for rows in (onnxruntime, openvino, again):
        assert rows["status"].tolist() == [status.OK, status.OK], rows["reason"].tolist()
        assert (rows["build_s"] > 0).all() and rows["build_s"].nunique() == 1  # one build per model, on each of its rows
    # The first environment made the weights and the export; OpenVINO reused both and made its conversion; the third made nothing.
    assert not onnxruntime["cached"].any() and (onnxruntime["export_s"] > 0).all()
    assert not openvino["cached"].any() and (0 < openvino["export_s"]).all() and (openvino["export_s"] < openvino["cold_export_s"]).all()
    assert again["cached"].all() and (again["export_s"] == 0).all()
    assert again["cold_export_s"].iloc[0] == pytest.approx(openvino["cold_export_s"].iloc[0])
    assert (onnx.path / MODEL_FILE).stat().st_mtime_ns == written
    assert sorted(entry.kind for entry in entries(tmp_path / "cache")) == ["onnx", "openvino", "weights"]
    assert folder_bytes(tmp_path / "run") < 2_000_000  # nothing large in the run folder
    assert {"build_s", "export_s", "cold_export_s", "cached"} <= set(pd.read_csv(tmp_path / "run" / "ov" / "results.csv").columns)


def test_build_cost_counts_each_artefact_once(tmp_path: Path) -> None:
    weights, export = Artefact(tmp_path / "w-a", False, 2.0), Artefact(tmp_path / "o-b", True, 5.0)
    found_again = Artefact(tmp_path / "w-a", True, 2.0)  # asked again after it was made
    assert build_cost(10.0, [weights, export, found_again]) == {"build_s": 8.0, "export_s": 2.0, "cold_export_s": 7.0, "cached": False}
    assert build_cost(1.5, [export]) == {"build_s": 1.5, "export_s": 0.0, "cold_export_s": 5.0, "cached": True}
    assert build_cost(1.5, []) == {"build_s": 1.5, "export_s": 0.0, "cold_export_s": 0.0, "cached": ""}  # TensorFlow: nothing cached


@pytest.mark.e2e
@pytest.mark.full
def test_xla_keeps_what_it_compiled_in_the_build_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    code = """
        import json, os
        from benchlib.backends import load_backend
        from benchlib.config.catalogue import get_model
        from benchlib.workloads.inputs import random_ids
        backend = load_backend("tensorflow", "xla")
        spec = get_model("bert-base-cased")
        model = backend.build(spec, "tiny")
        with backend.inference_context():
            backend.prepare(model, backend.as_inputs(random_ids(spec.vocab_size("tiny"), 1, 8, 0)))()
        print(json.dumps(os.environ["TF_XLA_FLAGS"]))
    """
    flags = run_python(code)
    assert f"--tf_xla_persistent_cache_directory={tmp_path / 'cache' / 'xla'}" in flags
    compiled = {path: path.stat().st_mtime_ns for path in (tmp_path / "cache" / "xla").rglob("*.pb")}
    assert compiled and sorted(entry.kind for entry in entries(tmp_path / "cache")) == ["weights", "xla"]  # PyTorch's weights, loaded
    assert run_python(code) == flags  # a second kernel: it loads what the first compiled, and writes nothing
    assert {path: path.stat().st_mtime_ns for path in (tmp_path / "cache" / "xla").rglob("*.pb")} == compiled


@pytest.mark.e2e
def test_int8_found_in_the_cache_is_loaded_beside_its_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    made = run_environment(tiny(tmp_path, "int8", framework="onnxruntime", mode="session", precision="int8"), progress=False)
    found = run_environment(tiny(tmp_path, "int8-again", framework="onnxruntime", mode="session", precision="int8"), progress=False)
    assert set(made["status"]) == set(found["status"]) == {status.OK}
    assert not made["cached"].any() and found["cached"].all() and (found["export_s"] == 0).all()
    assert sorted(entry.kind for entry in entries(tmp_path / "cache")) == ["onnx", "onnx-int8", "weights"]


@pytest.mark.e2e
def test_a_tensorflow_kernel_starts_the_pytorch_worker_only_for_what_the_build_cache_lacks(tmp_path: Path) -> None:
    """In one TensorFlow process, two backends one after the other, as two kernels (each with a worker of its own): the
    first's worker makes the weights and eager PyTorch's answers for tiny causal distilgpt2; the second finds them (no
    worker) and gets the same answers, and asks its worker only for another prompt's. PyTorch is never imported there."""
    kernels = run_python(f"""
        import json, sys
        import numpy as np
        from pathlib import Path
        from benchlib.backends import load_backend
        from benchlib.config.models import ModelRequest, resolve_model
        from benchlib.store.cache import recording

        spec = resolve_model("distilgpt2", ModelRequest(task="causal-lm"))
        kernels = []
        for seeds in ([0], [0, 1]):
            backend = load_backend("tensorflow", "function", workload="generate", seed=0, cache_dir=Path({str(tmp_path / "cache")!r}))
            with recording() as artefacts:
                built = backend.build(spec, "tiny")
            answers = []
            for seed in seeds:
                inputs = backend.as_inputs(np.random.default_rng(seed).integers(0, 1000, (2, 8)))
                output, tokens = backend.reference_output(built, inputs), backend.reference_tokens(built, inputs, 3)
                answers.append({{"output": output.round(6).tolist(), "tokens": tokens.tolist(), "worker": backend._worker._process is not None}})
            kernels.append({{"built_from": [[item.label, item.cached] for item in artefacts], "answers": answers}})
        print(json.dumps([kernels, "torch" in sys.modules]))
    """)
    (first, second), torch_imported = kernels
    assert first["built_from"] == [["distilgpt2-tiny", False]] and first["answers"][0]["worker"]
    assert second["built_from"] == [["distilgpt2-tiny", True]]
    again, other = second["answers"]
    assert not again["worker"] and (again["output"], again["tokens"]) == (first["answers"][0]["output"], first["answers"][0]["tokens"])
    assert other["worker"] and other["tokens"] != again["tokens"] and not torch_imported
    assert [entry.kind for entry in entries(tmp_path / "cache")].count("references") == 4  # output and tokens, for each of two prompts
