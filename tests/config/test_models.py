"""Models by catalogue name, folder or Hub id: resolved and checked before anything starts, with the rules of loading
safely (no repository code, no unpickling, no network unless asked), and built by every backend from the same weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from benchlib import status
from benchlib.backends import load_backend
from benchlib.config.models import ModelError, ModelRequest, checkpoint_digest, file_digest, resolve_model, short_names, task_of
from benchlib.measure.sweep import run_environment
from tests.checkpoints import save_bert, save_llama

GRID = {"batch_sizes": [2], "sequence_lengths": [8], "repeat": 2, "number": 1, "warmup": 0, "remeasure": 0, "max_interference": 1.0}


def params(tmp_path: Path, models: list[str], **values: object) -> dict[str, object]:
    return {"environment": "t", "framework": "pytorch", "mode": "eager", "models": models, "output_dir": str(tmp_path / "out"), **GRID, **values}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    config_only = root / "config-only"
    config_only.mkdir()
    (config_only / "config.json").write_text((save_bert(root / "bert") / "config.json").read_text())
    return {"bert": root / "bert", "llama": save_llama(root / "llama"), "config-only": config_only, "root": root}


def test_a_catalogue_name_resolves_to_its_entry_with_random_weights() -> None:
    spec = resolve_model("bert-base-cased")
    assert (spec.source, spec.weights, spec.task, spec.pytorch_class) == (None, "random", "feature-extraction", "BertModel")
    head = resolve_model("gpt2", ModelRequest(task="causal-lm"))
    assert (head.pytorch_class, head.tensorflow_class, head.config) == ("AutoModelForCausalLM", "TFAutoModelForCausalLM", spec_config("gpt2"))
    with pytest.raises(ModelError, match="a catalogue entry has random weights; for its published weights give a folder or its Hub id"):
        resolve_model("gpt2", ModelRequest(weights="pretrained"))


def spec_config(name: str) -> dict[str, object]:
    return resolve_model(name).config


def test_a_folder_resolves_to_its_checkpoint_task_and_positions(folders: dict[str, Path]) -> None:
    llama = resolve_model(str(folders["llama"]))
    assert (llama.source, llama.weights, llama.task, llama.max_sequence_length) == (str(folders["llama"]), "pretrained", "causal-lm", 512)
    assert llama.inference_config == {"use_cache": False} and llama.cache_label("full").endswith("llama-full") and "/" not in llama.cache_label("full")
    assert resolve_model(str(folders["bert"])).task == "feature-extraction"
    assert resolve_model(str(folders["bert"]), ModelRequest(task="fill-mask")).pytorch_class == "AutoModelForMaskedLM"
    assert task_of({"architectures": ["BertForSequenceClassification"]}) == "text-classification"
    assert task_of({"architectures": ["GPT2LMHeadModel"]}) == "causal-lm" and task_of({}) == "feature-extraction"


def test_a_folder_is_measured_with_its_own_weights(folders: dict[str, Path], tmp_path: Path) -> None:
    rows = run_environment(params(tmp_path, [str(folders["llama"])], framework="onnxruntime", mode="session", inputs="text"), progress=False)
    assert rows[["model", "status", "task", "weights", "inputs", "agreement_metric"]].values.tolist() == [
        [str(folders["llama"]), status.OK, "causal-lm", "pretrained", "text", "top1_agreement"]
    ]
    assert rows["agreement"].iloc[0] == 1.0 and rows["max_abs_diff"].iloc[0] < 1e-4 and rows["flops"].isna().all()  # no formula for a user's model
    # The reference is the folder's model itself, not random weights drawn from its configuration.
    built = load_backend("pytorch", "eager").build(resolve_model(str(folders["llama"])), "full")
    saved = load_file(folders["llama"] / "model.safetensors")
    torch.testing.assert_close(built.model.model.embed_tokens.weight, saved["model.embed_tokens.weight"])


def test_a_folder_with_config_only_runs_with_random_weights(folders: dict[str, Path], tmp_path: Path) -> None:
    name = str(folders["config-only"])
    with pytest.raises(ModelError, match="the folder holds no weights \\(model.safetensors\\); use weights: random"):
        resolve_model(name)
    rows = run_environment(params(tmp_path, [name], weights="random", inputs="text"), progress=False)
    assert rows[["status", "weights", "inputs"]].values.tolist() == [[status.OK, "random", "random (no tokenizer)"]]


def test_pickled_weights_are_refused_unless_allowed(folders: dict[str, Path]) -> None:
    pickled = folders["root"] / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((folders["bert"] / "config.json").read_text())
    torch.save({}, pickled / "pytorch_model.bin")
    with pytest.raises(ModelError, match="its weights are pickled \\(pytorch_model.bin\\) and unpickling can run code; set allow_pickle: true"):
        resolve_model(str(pickled))
    assert resolve_model(str(pickled), ModelRequest(allow_pickle=True)).weights == "pretrained"
    assert resolve_model(str(pickled), ModelRequest(weights="random")).weights == "random"  # nothing is unpickled


def test_custom_code_is_refused_unless_trusted(folders: dict[str, Path]) -> None:
    custom = folders["root"] / "custom"
    custom.mkdir()
    config = json.loads((folders["bert"] / "config.json").read_text())
    (custom / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "modeling_custom.CustomModel"}}))
    with pytest.raises(ModelError, match="needs the repository's own Python code; set trust_remote_code: true to run it"):
        resolve_model(str(custom), ModelRequest(weights="random"))
    assert resolve_model(str(custom), ModelRequest(weights="random", trust_remote_code=True)).trust_remote_code


def test_names_that_are_nothing_are_refused_with_what_is_allowed(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="unknown model bert-large: not in the catalogue, not a folder and not a Hub id"):
        resolve_model("bert-large")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="the folder has no config.json"):
        resolve_model(str(tmp_path / "empty"))


def test_a_hub_id_missing_offline_is_one_line_and_exit_2_before_any_kernel(run_cli_in_process, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # an empty local cache
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("benchlib.launch.local.run_jobs", lambda *a, **k: pytest.fail("a kernel started"))
    code, out, err = run_cli_in_process(["run", "--grid", "smoke", "--environments", "cpu-pytorch", "--models", "someone/some-model", "--out", str(tmp_path / "run")])
    assert code == 2 and out == "" and not (tmp_path / "run").exists()
    assert err.strip().splitlines() == [
        "cpu-pytorch: models: model someone/some-model: not in the local Hugging Face cache and the kit is offline; fetch it with "
        "`huggingface-cli download someone/some-model`, or run with --online (offline: false) (from --models)"
    ]


def test_a_hub_id_in_the_local_cache_is_its_snapshot(folders: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    snapshot = tmp_path / "hub" / "models--someone--tiny-llama" / "snapshots" / ("0" * 40)
    snapshot.parent.mkdir(parents=True)
    shutil.copytree(folders["llama"], snapshot)
    (tmp_path / "hub" / "models--someone--tiny-llama" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--tiny-llama" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    resolve_model.cache_clear()
    spec = resolve_model("someone/tiny-llama")
    assert (spec.name, spec.source, spec.task) == ("someone/tiny-llama", str(snapshot), "causal-lm")


def test_models_option_replaces_the_grids_list_and_finds_relative_folders(folders: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    from benchlib.config.jobs import plan_run

    monkeypatch.chdir(folders["root"])
    jobs = plan_run(tmp_path / "run", "smoke", ["cpu-pytorch"], overrides={"models": (["gpt2", "llama"], "--models"), "offline": (False, "--online")})
    assert jobs[0].params.models == ["gpt2", str(folders["llama"])] and jobs[0].params.offline is False


@pytest.mark.e2e
def test_online_fetches_before_any_kernel_and_says_why_it_could_not(run_cli, network_blocked, tmp_path: Path) -> None:
    """With --online the runner itself asks the Hub (here every connection off the machine is refused): one line, exit 2."""
    attempts = tmp_path / "attempts.log"  # this test's own log: the session's must stay empty
    env = {**network_blocked.env, "NETWORK_ATTEMPTS_LOG": str(attempts), "HF_HUB_CACHE": str(tmp_path / "hub")}
    completed = run_cli("run", "--grid", "smoke", "--environments", "cpu-pytorch", "--models", "someone/some-model", "--online",
                        "--out", str(tmp_path / "run"), env=env)  # fmt: skip
    assert completed.returncode == 2 and not (tmp_path / "run").exists()
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cpu-pytorch: models: model someone/some-model: could not fetch it from the Hugging Face Hub: ")
    assert "huggingface.co" in attempts.read_text()  # it did try, from the runner


def test_a_folder_is_named_by_its_folder_unique_within_a_run() -> None:
    models = ["bert-base-cased", "sentence-transformers/all-MiniLM-L6-v2", "/r/x/bert", "/r/y/bert", "/r/tiny", "/r/gt/model", "/s/gt/model"]
    names = short_names(models)
    assert names == {
        "bert-base-cased": "bert-base-cased", "sentence-transformers/all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2",
        "/r/x/bert": "x/bert", "/r/y/bert": "y/bert", "/r/tiny": "tiny", "/r/gt/model": "r/gt/model", "/s/gt/model": "s/gt/model",
    }  # fmt: skip
    assert short_names(reversed(models)) == names and short_names(["/q/gt/model"]) == {"/q/gt/model": "gt/model"}  # a generic name keeps its parent
    assert short_names(["/r/bert-base-cased", "bert-base-cased"])["/r/bert-base-cased"] == "r/bert-base-cased"  # never a catalogue entry's name


def test_a_checkpoints_digest_travels_with_its_files_and_changes_with_its_weights(folders: dict[str, Path], tmp_path: Path) -> None:
    digest = checkpoint_digest(folders["bert"])
    copy = shutil.copytree(folders["bert"], tmp_path / "elsewhere" / "copy")
    hits = file_digest.cache_info().hits
    assert checkpoint_digest(copy) == digest == checkpoint_digest(folders["bert"]) and len(digest) == 64
    assert file_digest.cache_info().hits > hits  # the original's files are not read again
    assert checkpoint_digest(save_bert(tmp_path / "other", tokenizer=False, seed=1)) != digest
    assert checkpoint_digest(folders["config-only"]) != digest  # no weights: its config.json only
