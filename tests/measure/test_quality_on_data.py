"""Quality on the user's data, for real: tiny checkpoints of real architectures score sets made so that the answer is
known on any CPU (a classifier's labels taken from eager float32's own predictions, so that float32 scores 1 by
construction; a classifier that ONNX Runtime's int8 cannot read, so that int8 scores exactly one half), each metric is
checked against transformers computed here directly, the verdict follows the interval, and LoadGen's accuracy mode
scores the same as the direct scoring, read back from LoadGen's own log."""

from __future__ import annotations

import collections
import json
import math
import re
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
from benchlib.config.eval_data import PERPLEXITY, EvalSet
from benchlib.measure.quality import SAMPLE_TEXT, own_part, run_lengths
from benchlib.report import plots
from benchlib.report.render import render_summary
from benchlib.scenarios.loadgen import read_accuracy_log
from benchlib.store.layout import LOADGEN_ACCURACY
from benchlib.store.results import read_results
from benchlib.workloads.inputs import sample_text
from benchlib.workloads.quality import prepare_examples, responses
from tests.checkpoints import SPECIALS, save_bert, save_llama

SENTENCES = [s.strip() + "." for s in sample_text().replace("\n", " ").split(".") if len(s.split()) > 3]


def int8_blind_classifier(folder: Path, texts: list[str]) -> Path:
    """A tiny BERT classifier that eager float32 reads and ONNX Runtime's dynamic int8 cannot, on any CPU, by
    construction rather than by any kernel's rounding: its position and token-type embeddings are zero, and the word
    embedding of [MASK], which no text uses, holds an outlier of 1000, so that int8's one scale for the word embeddings
    (1000 / 127) rounds every other row to 0. Int8 then reads every text as the same input and answers one class for
    all; float32's answers split `texts` in half (the bias halfway between the two middle logit differences), so int8
    keeps exactly half of them, whichever class it answers."""
    assert len(texts) % 2 == 0, "an even number of texts, so that float32's answers split them exactly in half"
    save_bert(folder, task="text-classification")
    model = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        embeddings = model.bert.embeddings
        embeddings.position_embeddings.weight.zero_()
        embeddings.token_type_embeddings.weight.zero_()
        embeddings.word_embeddings.weight[SPECIALS.index("[MASK]"), 0] = 1000.0
        model.classifier.bias.zero_()
        differences = sorted(float(model(**tokenizer(text, truncation=True, max_length=512, return_tensors="pt")).logits[0].diff()) for text in texts)
        half = len(texts) // 2
        model.classifier.bias[1] = -(differences[half - 1] + differences[half]) / 2
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
    long = " ".join(SENTENCES * 8)  # longer than the model's 512 positions: cut, and counted
    texts = [*SENTENCES[: len(SENTENCES) // 2 * 2 - 1], long]  # an even number of texts
    classifier = int8_blind_classifier(root / "classifier", texts)
    labels = float32_labels(classifier, texts)
    assert sorted(collections.Counter(labels).values()) == [len(texts) // 2] * 2, f"float32's answers split the texts in half: {labels}"
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


INT8_BLIND = (
    "the test needs ONNX Runtime's dynamic int8 to quantize the word embeddings (their Gather) with one scale for the "
    "whole table, so that the outlier rounds every other row to 0 and int8 answers one class for every text"
)


def examples_in(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_float32_keeps_its_own_answers_and_int8_that_cannot_read_the_words_is_below_the_target(classification_run: Path, made: dict[str, Path]) -> None:
    reference, int8 = row_of(classification_run, "cpu-pytorch"), row_of(classification_run, "cpu-onnxruntime-int8")
    examples = examples_in(made["classification"])
    assert reference["quality_metric"] == "accuracy" and reference["quality_value"] == 1.0 and reference["quality_f1"] == 1.0
    assert (reference["quality_ratio"], reference["quality_verdict"], reference["quality_n"], reference["quality_truncated"]) == (1.0, "keeps", examples, 1)
    assert int8["quality_value"] == 0.5, f"{INT8_BLIND}; it scored {int8['quality_value']}"  # the premise, checked
    assert int8["quality_reference"] == 1.0 and int8["quality_ratio"] == pytest.approx(int8["quality_value"])
    assert int8["quality_verdict"] == "below" and int8["quality_low"] <= int8["quality_value"] <= int8["quality_high"]
    assert int8["quality_ratio_low"] <= int8["quality_ratio"] <= int8["quality_ratio_high"] < 0.99  # wholly below the target


@pytest.mark.parametrize(("target", "expected"), [(0.2, "keeps"), (0.6, "undecided"), (0.99, "below")])
def test_the_verdict_follows_the_interval(target: float, expected: str, made: dict[str, Path]) -> None:
    """Int8 keeps exactly half of float32's accuracy here: its interval lies wholly above a target of 20%, holds one of
    60%, and lies wholly under one of 99%."""
    overrides = dict(eval_data=str(made["classification"]), quality_target=target, run=f"target-{target}")
    row = run_environment(params(made, "cpu-onnxruntime-int8", "classifier", **overrides), progress=False).iloc[0]
    assert row["quality_ratio"] == 0.5, f"{INT8_BLIND}; it kept {row['quality_ratio']}"
    low, high = row["quality_ratio_low"], row["quality_ratio_high"]
    assert row["quality_verdict"] == expected and (low >= target if expected == "keeps" else high < target if expected == "below" else low < target <= high)
    line = task_quality.quality_table(read_results(made["root"] / f"target-{target}" / "cpu-onnxruntime-int8").assign(machine="m")).iloc[0]
    assert line["verdict"] == expected and line["model"] == "classifier"
    if expected == "undecided":  # where the half of the interval facing the target would shrink to the distance to it
        assert line["decide_examples"] == math.ceil(examples_in(made["classification"]) * ((high - 0.5) / (target - 0.5)) ** 2)
        assert line["decide_examples"] > line["examples"]
    else:
        assert math.isnan(line["decide_examples"])


def test_an_environment_below_the_target_is_never_named_the_fastest_that_keeps_quality(classification_run: Path, tmp_path: Path) -> None:
    run = shutil.copytree(classification_run, tmp_path / "run")
    rows = pd.concat([pd.read_csv(run / env / "results.csv").assign(machine="m") for env in ("cpu-pytorch", "cpu-onnxruntime-int8")])
    quality = task_quality.quality_table(rows)
    assert list(quality["model"]) == ["classifier"] * 2  # the folder by its short name, as every section names it
    faster = pd.DataFrame({  # int8 made the faster: it must still not be ranked
        "device": "cpu", "machine": "m", "model": "classifier", "environment": ["cpu-onnxruntime-int8", "cpu-pytorch"],
        "speedup": [3.0, 1.0], "ci95_low": [2.5, 1.0], "ci95_high": [3.5, 1.0], "verdict": ["faster", "baseline"], "agreement": [0.2, 1.0],
    })  # fmt: skip
    findings = task_quality.findings(quality, task_quality.speed_and_quality(quality, faster, None))
    sentence, _, table = findings[0].partition("\n\n")
    assert len(findings) == 1 and sentence == (
        "For classifier, the fastest environment that keeps 99.0% of eager PyTorch float32's accuracy on classification.jsonl is cpu-pytorch."
    )
    line = [cell.strip() for cell in table.splitlines()[2].strip("|").split("|")]
    assert line[:4] == ["the forward pass", "cpu-onnxruntime-int8 (below)", "3.00x", line[3]] and line[3].startswith("50.0% (")
    assert line[4:] == ["cpu-pytorch", "1.00x", "100.0% (100.0% to 100.0%)", "none"]
    page = render_summary([run]).read_text(encoding="utf-8")
    assert ".-Quality-on-your-data" in page and "classification.jsonl is cpu-onnxruntime-int8" not in page
    assert str(run.parent) not in page.replace(str(run), "")  # no model named by its folder's path
    table = pd.read_csv(run / "tables" / "quality.csv").set_index("environment")
    assert table.loc["cpu-onnxruntime-int8", "verdict"] == "below" and table.loc["cpu-pytorch", "verdict"] == "keeps"
    assert (run / "tables" / "speed_and_quality.csv").exists() and (run / "figures" / "speed_and_quality.png").stat().st_size > 0
    assert "the fastest environment that keeps 99.0% of eager PyTorch float32's accuracy on classification.jsonl is cpu-pytorch" in page
    assert "fastest environment whose agreement with eager PyTorch float32 is at least 99% in every cell" not in page  # judged on the data


def test_an_undecided_environment_is_neither_ranked_nor_set_aside(made: dict[str, Path]) -> None:
    """Int8 at a target of 60% (its interval holds it) and faster than float32: named undecided, with its interval and
    the examples that would decide, never the fastest that keeps, never below."""
    for environment in ("cpu-pytorch", "cpu-onnxruntime-int8"):
        run_environment(params(made, environment, "classifier", eval_data=str(made["classification"]), quality_target=0.6, run="undecided"), progress=False)
    run = made["root"] / "undecided"
    rows = pd.concat([read_results(run / environment) for environment in ("cpu-pytorch", "cpu-onnxruntime-int8")]).assign(machine="m")
    quality = task_quality.quality_table(rows).set_index("environment")
    assert quality.loc["cpu-onnxruntime-int8", "verdict"] == "undecided"
    decide = int(quality.loc["cpu-onnxruntime-int8", "decide_examples"])
    faster = pd.DataFrame({
        "device": "cpu", "machine": "m", "model": "classifier", "environment": ["cpu-onnxruntime-int8", "cpu-pytorch"],
        "speedup": [3.0, 1.0], "ci95_low": [2.5, 1.0], "ci95_high": [3.5, 1.0], "verdict": ["faster", "baseline"], "agreement": [0.2, 1.0],
    })  # fmt: skip
    speed = task_quality.speed_and_quality(quality.reset_index(), faster, None)
    findings = task_quality.findings(quality.reset_index(), speed)
    sentence, _, table = findings[0].partition("\n\n")
    assert sentence.startswith("For classifier, the fastest environment that keeps 60.0% of eager PyTorch float32's accuracy on classification.jsonl is cpu-pytorch.")
    assert "Undecided (the interval holds the target), so neither ranked nor set aside: cpu-onnxruntime-int8;" in sentence
    line = [cell.strip() for cell in table.splitlines()[2].strip("|").split("|")]
    assert line[1] == "cpu-onnxruntime-int8 (undecided)" and line[4] == "cpu-pytorch"
    assert line[-1].startswith("cpu-onnxruntime-int8 (3.00x, 50.0% (") and line[-1].endswith(f"; about {decide:,} examples would decide)")
    assert "below" not in findings[0]
    figure = plots.speed_quality(speed, 0.6)  # drawn apart: a hollow square, neither a dot nor an x
    markers = {bars.get_label(): (bars.lines[0].get_marker(), bars.lines[0].get_markerfacecolor()) for bars in figure.axes[0].containers}
    assert markers["cpu-onnxruntime-int8"][0] == "s" and markers["cpu-onnxruntime-int8"][1] == "none" and markers["cpu-pytorch"][0] == "o"
    page = render_summary([run]).read_text(encoding="utf-8")  # the run itself: int8 undecided in the quality table, never below
    table = pd.read_csv(run / "tables" / "quality.csv").set_index("environment")
    assert table.loc["cpu-onnxruntime-int8", "verdict"] == "undecided" and table.loc["cpu-onnxruntime-int8", "decide_examples"] == decide
    assert re.search(r">\s*undecided\s*</td>", page) and "int8 (below)" not in page and not re.search(r">\s*below\s*</td>", page)


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


def test_perplexity_rows_are_read_at_few_lengths_and_their_responses_are_their_own(made: dict[str, Path]) -> None:
    """The sample's paragraphs (86 to 104 tokens here) are read at one length, the longest's, so that a backend compiling
    per shape compiles once; each row's log-likelihoods, cut back, are those of the row read alone."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(made["llama"])
    paragraphs = [part.strip() for part in sample_text().split("\n\n") if part.strip()]
    prepared = prepare_examples(EvalSet(SAMPLE_TEXT, PERPLEXITY, tuple(paragraphs), tuple(range(len(paragraphs)))), tokenizer, 512)
    read = run_lengths(prepared)
    assert len({len(row) for row in prepared.rows}) > 1 and {len(row) for row in read} == {max(len(row) for row in prepared.rows)}
    model = transformers.LlamaForCausalLM.from_pretrained(made["llama"]).eval()
    with torch.no_grad():
        for index, (row, longer) in enumerate(zip(prepared.rows, read)):
            assert np.array_equal(longer[: len(row)], row)
            alone, = responses(PERPLEXITY, model(torch.from_numpy(row[None])).logits.numpy(), row[None])
            padded, = responses(PERPLEXITY, model(torch.from_numpy(longer[None])).logits.numpy(), longer[None])
            assert np.allclose(own_part(padded, prepared, index), alone, atol=1e-5)


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
