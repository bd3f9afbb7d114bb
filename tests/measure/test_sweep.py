"""The sweep: one row per cell, statuses, out-of-memory and error isolation, resume."""

from __future__ import annotations

import gc
import json
import statistics
from pathlib import Path

import pytest
import torch

from benchlib import read_results, run_environment, status
from benchlib.backends import without_scikit_learn_in_transformers
from benchlib.backends.pytorch import PyTorchBackend
from benchlib.config.params import CELL, ParameterError, validate_params
from benchlib.measure import sweep
from benchlib.measure.sweep import nothing_to_measure
from benchlib.store.recovery import clear_in_flight, mark_in_flight, read_in_flight
from benchlib.store.results import COLUMNS, ResultsWriter, make_row
from tests.frameworks import run_python

REQUIRED_COLUMNS = (
    "environment framework mode device model batch_size sequence_length status mean_s median_s "
    "min_s std_s repeat number first_call_s samples_s reason"
).split()
# Token ids for batch 2**19 x 512 fit in memory; the embeddings of that batch (34 GB) do not.
TOO_BIG_BATCH = 2**19


def params(tmp_path, **overrides):
    values = dict(
        environment="cpu-pytorch", framework="pytorch", mode="eager", models=["bert-base-cased"],
        model_scale="tiny", batch_sizes=[1], sequence_lengths=[8], warmup=1, repeat=3, number=2,
        output_dir=str(tmp_path / "cpu-pytorch"),
    )  # fmt: skip
    return {**values, **overrides}


def test_measured_cell_row_format(tmp_path):
    rows = run_environment(params(tmp_path), progress=False)
    assert len(rows) == 1
    row = rows.iloc[0]
    assert set(REQUIRED_COLUMNS) <= set(rows.columns) and list(rows.columns) == [*COLUMNS, "attempts"]
    assert (row.status, row.model, row.batch_size, row.sequence_length) == ("ok", "bert-base-cased", 1, 8)
    assert len(row.samples_s) == 3 and (row["repeat"], row["number"]) == (3, 2)
    assert row.mean_s == pytest.approx(statistics.fmean(row.samples_s))
    assert row.median_s == pytest.approx(statistics.median(row.samples_s))
    assert row.min_s == pytest.approx(min(row.samples_s)) and row.std_s >= 0
    assert row.first_call_s > 0 and all(s > 0 for s in row.samples_s)
    environment = json.loads((tmp_path / "cpu-pytorch" / "environment.json").read_text())
    assert environment["parameters"]["repeat"] == 3
    assert environment["software"]["torch"].startswith("2.13")
    assert environment["software"]["transformers"].startswith("4.57")
    assert environment["machine"]["cpu"] and environment["machine"]["memory_bytes"] > 0
    assert environment["threads"]["num_threads"] >= 1


def test_a_sweep_imports_the_models_code_with_the_collector_paused_and_measures_with_it_running(tmp_path, monkeypatch):
    """The imports before the first cell run without the cyclic collector (`collector_paused`); the cells as the process
    runs otherwise."""
    seen: dict[str, bool] = {}

    def spy(name, real):
        def call(*args, **kwargs):
            seen.setdefault(name, gc.isenabled())
            return real(*args, **kwargs)

        monkeypatch.setattr(sweep, name, call)

    spy("import_model_code", sweep.import_model_code)
    spy("measure_cell", sweep.measure_cell)
    rows = run_environment(params(tmp_path), progress=False)
    assert rows["status"].tolist() == ["ok"] and seen == {"import_model_code": False, "measure_cell": True} and gc.isenabled()


def test_too_long_and_unsupported_cells_build_nothing(tmp_path, monkeypatch):
    def refuse(*args):
        raise AssertionError("a model was built")

    monkeypatch.setattr(PyTorchBackend, "build", refuse)
    grid = params(tmp_path, models=["ctrl", "transfo-xl-wt103"], sequence_lengths=[300])
    rows = run_environment(grid, progress=False)
    assert list(rows.status) == ["too_long", "unsupported"]
    assert "256" in rows.reason[0] and "type_as" in rows.reason[1]


@pytest.mark.e2e
def test_pytorch_out_of_memory_ends_one_cell_and_the_sweep_goes_on(tmp_path):
    grid = params(tmp_path, batch_sizes=[TOO_BIG_BATCH, 1], sequence_lengths=[512], repeat=1, number=1)
    rows = run_environment(grid, progress=False)
    assert list(rows.status) == ["oom", "ok"], rows.reason.tolist()
    assert "can't allocate memory" in rows.reason[0]


@pytest.mark.e2e
@pytest.mark.full
def test_tensorflow_out_of_memory_ends_one_cell_and_the_sweep_goes_on(tmp_path):
    grid = params(
        tmp_path, environment="cpu-tensorflow", framework="tensorflow", mode="function",
        batch_sizes=[TOO_BIG_BATCH, 1], sequence_lengths=[512], repeat=1, number=1,
    )  # fmt: skip
    statuses = run_python(
        f"""
        import json, benchlib
        rows = benchlib.run_environment({grid!r}, progress=False)
        print(json.dumps([rows.status.tolist(), rows.reason.tolist()]))
        """
    )
    assert statuses[0] == ["oom", "ok"], statuses
    assert "ResourceExhaustedError" in statuses[1][0]


@pytest.mark.e2e
def test_a_sweep_imports_neither_scikit_learn_nor_tensorflow_through_transformers(tmp_path):
    """transformers imports scikit-learn only for what no benchmark calls (about 1.3 s of every kernel's start), and
    TensorFlow wherever it is installed unless told not to: a kernel of an environment made from PyTorch (eager, ONNX
    Runtime's and OpenVINO's exports) holds neither (TensorFlow's import: about 5 s on a slow core, and its memory)."""
    grids = [
        params(tmp_path, environment=f"cpu-{framework}", framework=framework, mode=mode, models=["gpt2"], repeat=1, number=1,
               output_dir=str(tmp_path / framework))
        for framework, mode in (("onnxruntime", "session"), ("openvino", "compiled"))
    ]  # fmt: skip
    imported = run_python(
        f"""
        import json, sys, benchlib
        statuses = [benchlib.run_environment(grid, progress=False).status.tolist() for grid in {grids!r}]
        sklearn = sorted(name for name in sys.modules if name.partition(".")[0] == "sklearn")
        print(json.dumps([statuses, "transformers.generation.utils" in sys.modules, sklearn, "tensorflow" in sys.modules]))
        """
    )
    assert imported == [[["ok"], ["ok"]], True, [], False]


def test_a_process_that_has_transformers_generation_keeps_its_scikit_learn(monkeypatch):
    import transformers.generation.utils  # noqa: F401  (imported: whether it uses scikit-learn is settled)
    from transformers.utils import import_utils, is_sklearn_available

    monkeypatch.setattr(import_utils, "_sklearn_available", True)  # as in a process no sweep has run in
    without_scikit_learn_in_transformers()
    assert is_sklearn_available()


def test_cuda_out_of_memory_with_a_fake_gpu(tmp_path, monkeypatch):
    freed = []
    real_prepare = PyTorchBackend.prepare

    def prepare(self, model, inputs):
        if inputs.shape[0] == 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real_prepare(self, model, inputs)

    monkeypatch.setattr(PyTorchBackend, "prepare", prepare)
    monkeypatch.setattr(PyTorchBackend, "free", lambda self: freed.append(True))
    rows = run_environment(params(tmp_path, batch_sizes=[1, 2, 4]), progress=False)
    assert list(rows.status) == ["ok", "oom", "ok"]
    assert rows.reason[1].startswith("OutOfMemoryError: CUDA out of memory")
    assert freed, "memory was not freed after the out-of-memory error"


def test_gpu_synchronisation_with_a_fake_cuda(monkeypatch):
    synced, emptied = [], []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(str(device)))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    PyTorchBackend(mode="eager", device="cpu").sync(None)
    assert synced == []
    gpu = PyTorchBackend(mode="eager", device="cuda:1")
    gpu.sync(None)
    gpu.free()
    assert synced == ["cuda:1"] and emptied == [True]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(RuntimeError, match="device cuda: PyTorch sees 0 GPU"):
        PyTorchBackend(mode="eager", device="cuda")


def test_errors_stay_in_their_cell(tmp_path, monkeypatch):
    real_build = PyTorchBackend.build

    def build(self, spec, scale):
        if spec.name == "gpt2":
            raise ValueError("broken configuration")
        return real_build(self, spec, scale)

    monkeypatch.setattr(PyTorchBackend, "build", build)
    grid = params(tmp_path, models=["gpt2", "distilbert-base-uncased"], batch_sizes=[1, 2])
    rows = run_environment(grid, progress=False)
    assert rows.status.tolist() == ["error", "error", "ok", "ok"]
    assert rows.reason[0] == "building the model: ValueError: broken configuration"


@pytest.mark.parametrize("step", ["build", "prepare"])
def test_an_interrupt_that_a_library_turns_into_another_error_stops_the_sweep(tmp_path, monkeypatch, step):
    """A library's clean-up that fails while an interrupt unwinds (torch's vmap: `!dynamicLayerStack.empty()`) replaces
    the KeyboardInterrupt: the sweep stops as for the interrupt, and the cell is measured again, not kept as an error."""
    real = getattr(PyTorchBackend, step)

    def interrupted(self, *args):
        try:
            raise KeyboardInterrupt
        finally:
            raise RuntimeError("!dynamicLayerStack.empty() INTERNAL ASSERT FAILED")

    monkeypatch.setattr(PyTorchBackend, step, interrupted)
    grid = params(tmp_path, models=["gpt2", "bert-base-cased"])
    with pytest.raises(KeyboardInterrupt):
        run_environment(grid, progress=False)
    assert read_results(tmp_path / "cpu-pytorch").empty and read_in_flight(tmp_path / "cpu-pytorch") is None
    monkeypatch.setattr(PyTorchBackend, step, real)
    assert run_environment(grid, progress=False).status.tolist() == ["ok", "ok"]


def test_rerun_resumes_without_measuring_finished_cells(tmp_path):
    first = run_environment(params(tmp_path, batch_sizes=[1]), progress=False)
    assert nothing_to_measure(validate_params(params(tmp_path, batch_sizes=[1])))  # what a rerun's runner asks
    assert not nothing_to_measure(validate_params(params(tmp_path, batch_sizes=[1, 2])))
    second = run_environment(params(tmp_path, batch_sizes=[1, 2]), progress=False)
    assert len(first) == 1 and len(second) == 2
    assert second.samples_s[0] == first.samples_s[0]
    assert len(read_results(tmp_path / "cpu-pytorch")) == 2


def test_bad_parameters_fail_before_anything_is_built(tmp_path, monkeypatch):
    monkeypatch.setattr(PyTorchBackend, "build", lambda *a: pytest.fail("built"))
    with pytest.raises(ParameterError, match=r"models: unknown model bert-large: not in the catalogue, not a folder and not a Hub id \(owner/name\); the catalogue has: gpt2"):
        run_environment(params(tmp_path, models=["bert-large"]), progress=False)
    with pytest.raises(ParameterError, match="mode for pytorch must be one of eager, torchscript"):
        run_environment(params(tmp_path, mode="xla"), progress=False)
    assert not (tmp_path / "cpu-pytorch").exists()


def test_rerun_records_the_cell_that_was_in_flight_and_repairs_a_cut_off_row(tmp_path):
    from benchlib.store.recovery import mark_in_flight

    folder = tmp_path / "cpu-pytorch"
    run_environment(params(tmp_path, batch_sizes=[1]), progress=False)
    results = folder / "results.csv"
    with open(results, "a") as file:  # a process killed while writing its next row...
        file.write("cpu-pytorch,pytorch,eager,cpu,bert-base-cased,tiny,2,8,o")
    cell = dict(environment="cpu-pytorch", framework="pytorch", mode="eager", device="cpu", model_scale="tiny")
    mark_in_flight(folder, {**cell, "model": "bert-base-cased", "batch_size": 2, "sequence_length": 8})  # ...measuring 2x8
    rows = run_environment(params(tmp_path, batch_sizes=[1, 2, 4]), progress=False)
    assert [(r.batch_size, r.status) for r in rows.itertuples()] == [(1, "ok"), (2, "crashed"), (4, "ok")]
    assert "stopped before writing its row" in rows.reason[1]
    assert "2,8,o" in (folder / "results.cutoff.txt").read_text()
    assert not (folder / "in_flight.json").exists()


@pytest.mark.e2e
def test_memory_limit_turns_an_oversized_cell_into_oom(tmp_path):
    grid = params(tmp_path, batch_sizes=[2**16, 1], sequence_lengths=[512], repeat=1, number=1, memory_limit_gb=3)
    found = run_python(
        f"""
        import json, resource, benchlib
        rows = benchlib.run_environment({grid!r}, progress=False)
        print(json.dumps([rows.status.tolist(), resource.getrlimit(resource.RLIMIT_DATA)[0]]))
        """
    )
    assert found == [["oom", "ok"], 3 * 2**30]


def test_nothing_is_left_to_measure_only_with_every_cell_of_the_round_kept_none_due_again_none_in_flight_none_cut_off(tmp_path):
    """What a rerun's runner asks before starting a kernel (`launch.execution.run_job`)."""
    p = validate_params(params(tmp_path, sequence_lengths=[8, 16], remeasure=1))
    folder = Path(p.output_dir)
    cell = {"environment": p.environment, "model": "bert-base-cased", "batch_size": 1, "scenario": CELL, "round": 1, "attempt": 1}
    assert not nothing_to_measure(p)  # nothing measured yet
    with ResultsWriter(folder) as writer:
        writer.append(make_row({**cell, "sequence_length": 8, "disturbed": False}, status.OK))
        assert not nothing_to_measure(p)  # 1x16 has no row
        writer.append(make_row({**cell, "sequence_length": 16, "disturbed": True}, status.OK))
        assert not nothing_to_measure(p)  # 1x16 is due to be measured again
        assert nothing_to_measure(p.model_copy(update={"remeasure": 0}))
        writer.append(make_row({**cell, "sequence_length": 16, "disturbed": True, "attempt": 2}, status.OK))
    assert nothing_to_measure(p)  # measured again, still disturbed: kept as it is (the kernel's first remeasure finds none)
    assert not nothing_to_measure(p.model_copy(update={"current_round": 2}))
    mark_in_flight(folder, {**cell, "sequence_length": 8, "attempt": 2})
    assert not nothing_to_measure(p)
    clear_in_flight(folder)
    with open(folder / "results.csv", "ab") as file:
        file.write(b"cpu-pytorch,pytorch,eager")  # a row cut off by a killed process
    assert not nothing_to_measure(p)
