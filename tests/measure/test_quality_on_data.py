"""Quality on the user's data, for real: tiny checkpoints of real architectures score sets made so that the answer is
known (a classifier's labels taken from eager float32's own predictions, so that float32 scores 1 by construction),
each metric is checked against transformers computed here directly, and LoadGen's accuracy mode scores the same as the
direct scoring, read back from LoadGen's own log."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from scipy import stats

from benchlib import run_environment
from benchlib.analysis import task_quality
from benchlib.config.params import ParameterError, validate_params
from benchlib.measure.quality import SAMPLE_TEXT
from benchlib.report.render import render_summary
from benchlib.scenarios.loadgen import read_accuracy_log
from benchlib.store.layout import LOADGEN_ACCURACY
from benchlib.workloads.inputs import sample_text
from tests.checkpoints import save_bert, save_llama

SENTENCES = [s.strip() + "." for s in sample_text().replace("\n", " ").split(".") if len(s.split()) > 3]


def near_tie_classifier(folder: Path) -> Path:
    """A tiny BERT classifier whose two classes' weights differ by a hair: float32's answers are decided by small
    margins, which int8's rounding flips."""
    save_bert(folder, task="text-classification")
    model = transformers.BertForSequenceClassification.from_pretrained(folder)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        model.classifier.weight[1] = model.classifier.weight[0] + 1e-3 * torch.randn(model.classifier.weight.shape[1], generator=generator)
        model.classifier.bias[1] = model.classifier.bias[0]
    model.save_pretrained(folder)
    return folder


def float32_labels(folder: Path, texts: list[str]) -> list[str]:
    """Eager float32's own label for each text (cut to the model's 512 positions), computed here with transformers."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        return [model.config.id2label[int(model(**tokenizer(text, truncation=True, max_length=512, return_tensors="pt")).logits.argmax())] for text in texts]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("quality")
    classifier = near_tie_classifier(root / "classifier")
    texts = [*SENTENCES, " ".join(SENTENCES * 8)]  # the last is longer than the model's 512 positions: cut, and counted
    labels = float32_labels(classifier, texts)
    rng = np.random.default_rng(0)
    pairs = [{"text": a, "text_pair": b, "score": round(float(rng.uniform(0, 5)), 2)} for a, b in zip(SENTENCES, SENTENCES[1:])]
    return {
        "classifier": classifier, "encoder": save_bert(root / "encoder"), "llama": save_llama(root / "llama"), "root": root,
        "classification": write_jsonl(root / "classification.jsonl", [{"text": t, "label": label} for t, label in zip(texts, labels)]),
        "similarity": write_jsonl(root / "similarity.jsonl", pairs),
        "perplexity": write_jsonl(root / "perplexity.jsonl", [{"text": s} for s in SENTENCES]),
    }  # fmt: skip


def params(made: dict[str, Path], environment: str, model: str, **overrides: object) -> dict:
    framework, mode, precision = {"cpu-pytorch": ("pytorch", "eager", "float32"), "cpu-onnxruntime-int8": ("onnxruntime", "session", "int8")}[environment]
    values = dict(
        environment=environment, framework=framework, mode=mode, precision=precision, models=[str(made[model])], batch_sizes=[4],
        sequence_lengths=[16], repeat=3, number=1, remeasure=0, output_dir=str(made["root"] / overrides.pop("run", "run") / environment),
    )  # fmt: skip
    return {**values, **overrides}


@pytest.fixture(scope="module")
def classification_run(made: dict[str, Path]) -> Path:
    for environment in ("cpu-pytorch", "cpu-onnxruntime-int8"):
        run_environment(params(made, environment, "classifier", eval_data=str(made["classification"])), progress=False)
    return made["root"] / "run"


def row_of(run: Path, environment: str) -> pd.Series:
    return pd.read_csv(run / environment / "results.csv").iloc[0]


def test_float32_keeps_its_own_answers_and_int8_whose_answers_flip_is_below_the_target(classification_run: Path, made: dict[str, Path]) -> None:
    reference, int8 = row_of(classification_run, "cpu-pytorch"), row_of(classification_run, "cpu-onnxruntime-int8")
    examples = len(SENTENCES) + 1
    assert reference["quality_metric"] == "accuracy" and reference["quality_value"] == 1.0 and reference["quality_f1"] == 1.0
    assert (reference["quality_ratio"], reference["quality_verdict"], reference["quality_n"], reference["quality_truncated"]) == (1.0, "keeps", examples, 1)
    assert int8["quality_reference"] == 1.0 and int8["quality_value"] < 0.99 and int8["quality_ratio"] == pytest.approx(int8["quality_value"])
    assert int8["quality_verdict"] == "below" and int8["quality_low"] <= int8["quality_value"] <= int8["quality_high"]
    assert int8["quality_ratio_low"] <= int8["quality_ratio"] <= int8["quality_ratio_high"] < 1.0
    assert round(int8["quality_value"] * examples) == int8["quality_value"] * examples  # a share of the examples


def test_an_environment_below_the_target_is_never_named_the_fastest_that_keeps_quality(classification_run: Path, tmp_path: Path) -> None:
    run = shutil.copytree(classification_run, tmp_path / "run")
    rows = pd.concat([pd.read_csv(run / env / "results.csv").assign(machine="m") for env in ("cpu-pytorch", "cpu-onnxruntime-int8")])
    quality = task_quality.quality_table(rows)
    faster = pd.DataFrame({  # int8 made the faster: it must still not be ranked
        "device": "cpu", "machine": "m", "model": quality["model"].iloc[0], "environment": ["cpu-onnxruntime-int8", "cpu-pytorch"],
        "speedup": [3.0, 1.0], "ci95_low": [2.5, 1.0], "ci95_high": [3.5, 1.0], "verdict": ["faster", "baseline"], "agreement": [0.2, 1.0],
    })  # fmt: skip
    sentences = task_quality.findings(quality, task_quality.speed_and_quality(quality, faster, None))
    assert len(sentences) == 1 and "keeps 99.0% of eager PyTorch float32's accuracy on " in sentences[0]
    assert " is cpu-pytorch: 1.00x (baseline), 100.0% of float32's" in sentences[0]
    assert "faster but below the target, so not ranked: cpu-onnxruntime-int8 (3.00x, " in sentences[0]
    page = render_summary([run]).read_text(encoding="utf-8")
    assert ".-Quality-on-your-data" in page and "float32's accuracy on classification.jsonl is cpu-onnxruntime-int8" not in page
    table = pd.read_csv(run / "tables" / "quality.csv").set_index("environment")
    assert table.loc["cpu-onnxruntime-int8", "verdict"] == "below" and table.loc["cpu-pytorch", "verdict"] == "keeps"
    assert (run / "tables" / "speed_and_quality.csv").exists() and (run / "figures" / "speed_and_quality.png").stat().st_size > 0
    assert "the fastest environment that keeps 99.0% of eager PyTorch float32's accuracy" in page
    assert "fastest environment whose agreement with eager PyTorch float32 is at least 99% in every cell" not in page  # judged on the data


def mean_pooled(model: transformers.PreTrainedModel, tokenizer: transformers.PreTrainedTokenizerBase, text: str) -> np.ndarray:
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0].mean(dim=0).numpy()


def test_similarity_is_spearmans_correlation_of_the_mean_pooled_cosine(made: dict[str, Path]) -> None:
    row = run_environment(params(made, "cpu-pytorch", "encoder", eval_data=str(made["similarity"]), run="similarity"), progress=False).iloc[0]
    tokenizer, model = transformers.AutoTokenizer.from_pretrained(made["encoder"]), transformers.BertModel.from_pretrained(made["encoder"]).eval()
    records = [json.loads(line) for line in made["similarity"].read_text(encoding="utf-8").splitlines()]
    cosines = []
    for record in records:
        a, b = mean_pooled(model, tokenizer, record["text"]), mean_pooled(model, tokenizer, record["text_pair"])
        cosines.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
    expected = stats.spearmanr(cosines, [record["score"] for record in records]).statistic
    assert row["quality_metric"] == "spearman" and row["quality_value"] == pytest.approx(expected, abs=1e-9)
    assert row["quality_n"] == len(records) and row["quality_low"] <= row["quality_value"] <= row["quality_high"]


def perplexity_of(folder: Path, texts: list[str]) -> float:
    """The perplexity over `texts` (each short enough for one window), from transformers' own loss."""
    tokenizer, model = transformers.AutoTokenizer.from_pretrained(folder), transformers.LlamaForCausalLM.from_pretrained(folder).eval()
    nll, tokens = 0.0, 0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]
            if ids.shape[1] > 1:
                nll += float(model(ids, labels=ids).loss) * (ids.shape[1] - 1)
                tokens += ids.shape[1] - 1
    return math.exp(nll / tokens)


def test_a_causal_model_has_a_perplexity_with_eval_data_and_when_generating_without(made: dict[str, Path]) -> None:
    given = run_environment(params(made, "cpu-pytorch", "llama", eval_data=str(made["perplexity"]), run="perplexity"), progress=False).iloc[0]
    assert given["quality_metric"] == "perplexity" and given["quality_value"] == pytest.approx(perplexity_of(made["llama"], SENTENCES), rel=1e-5)
    generating = params(made, "cpu-pytorch", "llama", workload="generate", prompt_lengths=[8], new_tokens=4, run="generate")
    del generating["sequence_lengths"]
    row = run_environment(generating, progress=False).iloc[0]
    paragraphs = [part.strip() for part in sample_text().split("\n\n") if part.strip()]
    assert row["quality_data"] == SAMPLE_TEXT and row["quality_metric"] == "perplexity" and row["quality_n"] == len(paragraphs)
    assert row["quality_value"] == pytest.approx(perplexity_of(made["llama"], paragraphs), rel=1e-5) and row["quality_verdict"] == "keeps"


@pytest.mark.parametrize("environment", ["cpu-pytorch", "cpu-onnxruntime-int8"])
def test_loadgens_accuracy_log_is_kept_and_scores_as_the_direct_scoring(environment: str, made: dict[str, Path]) -> None:
    loaded = params(
        made, environment, "classifier", eval_data=str(made["classification"]), scenario="offline", request_lengths=[8, 16], max_batch=4,
        min_duration_s=0.5, min_query_count=10, run="load",
    )  # fmt: skip
    del loaded["batch_sizes"], loaded["sequence_lengths"]
    row = run_environment(loaded, progress=False).iloc[0]
    log = Path(loaded["output_dir"]) / row["accuracy_log"] / LOADGEN_ACCURACY
    assert row["scenario"] == "offline" and log.is_file()
    responses = read_accuracy_log(log, int(row["quality_n"]))
    assert all(response.shape == (2,) for response in responses)  # each example's two logits, as LoadGen logged them
    assert row["served_quality_value"] == row["quality_value"]
    assert task_quality.served_matches(row["quality_value"], row["served_quality_value"], loaded["precision"]) is True


BAD_INPUTS = [  # (file name, its text or None for no file, what the one line says)
    ("missing.jsonl", None, "missing.jsonl: no such file"),
    ("empty.jsonl", "", "empty.jsonl: holds no examples"),
    ("columns.jsonl", '{"sentence": "a b c", "class": 1}\n', "columns.jsonl line 1: fields class, sentence name no task; allowed: label, text (classification)"),
    ("label.jsonl", '{"text": "a b c", "label": "LABEL_0"}\n{"text": "d e f", "label": "happy"}\n',
     "label.jsonl line 2: label: 'happy' is not one of model {classifier}'s labels (LABEL_0, LABEL_1) nor an index below 2"),
    ("score.csv", "text,text_pair,score\na b,c d,1.5\ne f,g h,very\n", "score.csv line 3: score: must be a number, not 'very'"),
    ("headless.jsonl", '{"text": "a b c", "label": "LABEL_0"}\n', "a classification set needs a classification head (task: text-classification), and this model is run as feature-extraction"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "message"), BAD_INPUTS, ids=[case[0] for case in BAD_INPUTS])
def test_bad_eval_data_is_one_line_naming_the_file_line_and_field(name: str, text: str | None, message: str, made: dict[str, Path]) -> None:
    path = made["root"] / name
    if text is not None:
        path.write_text(text, encoding="utf-8")
    model = "encoder" if name == "headless.jsonl" else "classifier"
    with pytest.raises(ParameterError) as raised:
        validate_params(params(made, "cpu-pytorch", model, eval_data=str(path)))
    line = str(raised.value)
    assert "\n" not in line and line.startswith("parameters: eval_data: ") and message.format(classifier=made["classifier"]) in line


def test_bad_eval_data_exits_2_before_any_kernel(run_cli, made: dict[str, Path], tmp_path: Path) -> None:
    bad = made["root"] / "label.jsonl"
    bad.write_text('{"text": "a b c", "label": "happy"}\n', encoding="utf-8")
    extra = tmp_path / "eval.yaml"
    extra.write_text(f"eval_data: {bad}\nmodel_scale: tiny\n", encoding="utf-8")
    done = run_cli("run", "--grid", "smoke", "--environments", "cpu-pytorch", "--models", str(made["classifier"]), "--params", str(extra), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and not (tmp_path / "out" / "cpu-pytorch" / "results.csv").exists()
    assert f"eval_data: {bad} line 1: label: 'happy' is not one of model {made['classifier']}'s labels" in done.stderr and "Traceback" not in done.stderr
