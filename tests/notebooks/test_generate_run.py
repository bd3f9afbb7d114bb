"""`workload: generate` end to end: `python -m benchlib run --grid generate-smoke --environments generate`, each
environment the benchmark notebook executed by papermill, on a tiny catalogue GPT-2 and a user's Llama folder (its own
weights and tokenizer), then the summary."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from transformers import AutoTokenizer

from benchlib import read_results
from benchlib.backends.pytorch import bfloat16_unsupported
from benchlib.config.jobs import environment_sets
from benchlib.measure.quality import NO_TOKENIZER_REASON
from benchlib.paths import PARAMETERS_DIR, PROJECT_ROOT
from benchlib.status import OK, UNSUPPORTED
from benchlib.store.layout import FINDINGS_FILE, LIMITS_FILE, SITE_DIR
from benchlib.workloads.inputs import sample_text
from tests.conftest import NetworkBlock, RunCli, by_models
from tests.known_crashes import accepted_crash
from tests.pages import site_problems

GRID = yaml.safe_load((PARAMETERS_DIR / "grids" / "generate-smoke.yaml").read_text(encoding="utf-8"))
GENERATING = environment_sets()["generate"]
# Float32 environments other than the baseline: their greedy tokens are eager PyTorch float32's.
FLOAT32 = ["cpu-torch-compile", "cpu-onnxruntime", "cpu-openvino", "cpu-tensorflow", "cpu-tensorflow-xla"]


# torch.compile generates on one model: it compiles the static cache's forward for each prompt's shape, the suite's
# costliest build by far on a slow CPU, and a second decoder takes the same path. The user's Llama folder (its own
# weights and tokenizer) is the one; `--full` compiles GPT-2's too.
COMPILED_ONCE = "cpu-torch-compile"


def models_of(environment: str, models: list[str], full: bool) -> list[str]:
    """The models an environment generates with in this test's run."""
    return models if full or environment != COMPILED_ONCE else models[1:]


# OpenVINO's bfloat16 and int8 generate through cpu-openvino's path (the same export, another precision hint or its
# weights compressed), and reduced precision's agreement is checked on cpu-pytorch-bf16: `make test-full` runs them.
FULL_ONLY = ("cpu-openvino-bf16", "cpu-openvino-int8")


def environments_of(full: bool) -> list[str]:
    """The generating environments of this test's run."""
    return [environment for environment in GENERATING if full or environment not in FULL_ONLY]


def write_short_text(folder: Path, llama: Path) -> Path:
    """Parameters giving the run a text of one sentence, the sample's first, as many tokens long as the grid's prompt:
    the Llama folder's perplexity (scored in each environment as it generates) is then one window of the prompt's shape,
    and torch.compile builds the C++ kernels that its graph and the prompt's graph share once (inductor's cache), rather
    than the kit's whole sample's windows (their lengths are tested in tests/measure/test_quality_on_data.py)."""
    sentence = sample_text().split(". ")[0] + "."
    length = len(AutoTokenizer.from_pretrained(llama)(sentence)["input_ids"])
    assert [length] == GRID["prompt_lengths"], f"the text's {length} tokens are not the prompt's {GRID['prompt_lengths']}: pick another"
    text = folder / "short.txt"
    text.write_text(sentence + "\n", encoding="utf-8")
    params = folder / "short-text.yaml"
    params.write_text(yaml.safe_dump({"text_file": str(text)}), encoding="utf-8")
    return params


@pytest.fixture(scope="module")
def environments(request: pytest.FixtureRequest) -> list[str]:
    return environments_of(request.config.getoption("full"))


@pytest.fixture(scope="module")
def generate_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, run_cli: RunCli, network_blocked: NetworkBlock,
    user_models: dict[str, Path], environments: list[str],
) -> Path:
    """The generate run: every generating environment (`make test`: but FULL_ONLY's) on both models, but torch.compile
    on the Llama folder alone (`models_of`), with a text of one sentence (`write_short_text`), in two `benchlib run` calls
    into one run folder, the second making the summary of both."""
    run_dir = tmp_path_factory.mktemp("generate-run")
    params = write_short_text(tmp_path_factory.mktemp("generate-params"), user_models["llama"])
    models = ["distilgpt2", str(user_models["llama"])]
    full = request.config.getoption("full")
    groups = by_models({environment: models_of(environment, models, full) for environment in environments})
    for number, (names, environments) in enumerate(groups.items(), start=1):
        summary = [] if number == len(groups) else ["--no-summary"]
        completed = run_cli(
            "run", "--grid", "generate-smoke", "--environments", ",".join(environments), "--models", names, "--params", str(params),
            "--out", str(run_dir), "--quiet", *summary, env=network_blocked.env,
        )  # fmt: skip
        assert completed.returncode == 0, f"generate run failed:\n{completed.stdout}\n{completed.stderr}"
    return run_dir


@pytest.fixture(scope="module")
def rows(generate_run: Path, environments: list[str]) -> pd.DataFrame:
    return pd.concat([read_results(generate_run / environment) for environment in environments], ignore_index=True)


@pytest.mark.e2e
def test_every_generating_environment_has_one_row_per_cell_ok_or_unsupported_with_a_reason(
    rows: pd.DataFrame, user_models: dict[str, Path], request: pytest.FixtureRequest, environments: list[str]
) -> None:
    models = ["distilgpt2", str(user_models["llama"])]
    expected = {environment: len(models_of(environment, models, request.config.getoption("full"))) * len(GRID["prompt_lengths"]) for environment in environments}
    assert rows.groupby("environment").size().to_dict() == expected
    crashed = accepted_crash(rows, str(user_models["llama"]))  # OpenVINO's known crash (tests/known_crashes.py)
    assert set(rows.loc[~crashed, "status"]) <= {OK, UNSUPPORTED} and rows.loc[rows["status"] != OK, "reason"].str.len().gt(0).all()
    assert set(rows["workload"]) == {"generate"} and set(rows["new_tokens"]) == {GRID["new_tokens"]} and set(rows["task"]) == {"causal-lm"}
    ok = rows[rows["status"] == OK].set_index(["environment", "model"])
    for environment in set(environments) - {"cpu-pytorch-bf16", "cpu-openvino-bf16"} - {"cpu-tensorflow", "cpu-tensorflow-xla"}:
        assert list(ok.loc[environment].index) == models_of(environment, models, request.config.getoption("full")), environment  # the user's Llama too
    for environment in ("cpu-tensorflow", "cpu-tensorflow-xla"):  # transformers has GPT-2 in TensorFlow, not Llama
        assert list(ok.loc[environment].index) == ["distilgpt2"]
        llama = rows[(rows["environment"] == environment) & (rows["model"] != "distilgpt2")]
        assert (llama["status"] == UNSUPPORTED).all() and llama["reason"].str.contains("no TensorFlow Llama").all()
    if reason := bfloat16_unsupported():
        assert set(rows.loc[rows["precision"] == "bfloat16", "reason"]) == {reason}


@pytest.mark.e2e
def test_the_figures_of_a_generate_cell_are_consistent(rows: pd.DataFrame) -> None:
    ok = rows[rows["status"] == OK]
    # "each step" reads the first token inside the call it times; "two calls" times it in a call of its own, so that
    # a cell measured while other work ran (`disturbed`) can have its first token slower than its whole call (and then
    # no time per later token).
    steady = ok[(ok["token_clock"] == "each step") | ~ok["disturbed"].eq(True)]
    assert (ok["ttft_s"] > 0).all() and (steady["ttft_s"] < steady["generate_s"]).all() and (steady["tpot_s"] > 0).all()
    assert (steady["tpot_s"] <= steady["tpot_p90_s"]).all() and (ok["generate_s"] == ok["median_s"]).all()
    assert ((ok["tokens_per_s"] - ok["batch_size"] * ok["new_tokens"] / ok["generate_s"]).abs() < 1e-6 * ok["tokens_per_s"]).all()
    assert all(len(samples) == repeat for samples, repeat in zip(ok["ttft_samples_s"], ok["repeat"]))
    clocks = ok.groupby("framework")["token_clock"].agg(set)
    assert clocks.pop("tensorflow") == {"two calls"} and all(clock == {"each step"} for clock in clocks)
    assert ok["flops"].isna().all()  # a forward pass's FLOPs are not a generate call's


@pytest.mark.e2e
def test_float32_environments_generate_eager_pytorchs_tokens(rows: pd.DataFrame) -> None:
    ok = rows[rows["status"] == OK].set_index("environment")
    assert ok.loc["cpu-pytorch", "token_agreement"].isna().all()  # the baseline itself
    for environment in FLOAT32:
        cells = ok.loc[[environment]]
        assert (cells["token_agreement"] == 1.0).all() and cells["first_divergence"].isna().all(), environment
    reduced = ok[ok["precision"] != "float32"]
    assert reduced["token_agreement"].between(0, 1).all()  # reported, whatever it is


@pytest.mark.e2e
def test_each_environment_scores_the_llama_folders_perplexity_and_says_why_gpt2_has_none(rows: pd.DataFrame) -> None:
    """The user's Llama folder has its tokenizer: its perplexity on the text, scored in every environment that generated
    with it, float32's keeping eager float32's. The catalogue's GPT-2 is built from its configuration, with no tokenizer
    to read the text with: not scored, and its rows say so."""
    ok = rows[rows["status"] == OK]
    llama, gpt2 = ok[ok["model"] != "distilgpt2"], ok[ok["model"] == "distilgpt2"]
    assert set(llama["quality_metric"]) == {"perplexity"} and llama["quality_value"].gt(1).all(), llama["quality_reason"].tolist()
    assert set(llama.loc[llama["precision"] == "float32", "quality_verdict"]) == {"keeps"}
    assert set(gpt2["quality_reason"]) == {NO_TOKENIZER_REASON} and gpt2["quality_value"].isna().all()


@pytest.mark.e2e
def test_the_summary_of_a_generate_run_has_the_generation_section(generate_run: Path) -> None:
    tables = generate_run / "tables"
    for name in ("generation", "generation_speedups", "generation_ttft_speedups", "generation_fastest", "claims_2022"):
        assert (tables / f"{name}.csv").is_file(), name
    assert (generate_run / "figures" / "tpot_vs_prompt_length.png").stat().st_size > 0
    speedups = pd.read_csv(tables / "generation_speedups.csv")
    assert set(speedups["environment"]) <= set(GENERATING) and "cpu-pytorch" in set(speedups["environment"])
    claims = pd.read_csv(tables / "claims_2022.csv")
    assert len(claims) == 2 and set(claims["holds"]) <= {"holds", "does not hold", "inconclusive", "not checked"}
    assert not (tables / "framework_averages.csv").is_file() or pd.read_csv(tables / "framework_averages.csv").empty  # no forward cell
    assert not (generate_run / LIMITS_FILE).exists()  # nor the machine's limits, which only the forward passes' roofline uses


@pytest.mark.e2e
def test_the_run_is_published_as_a_site_with_each_environments_executed_notebook(
    generate_run: Path, user_models: dict[str, Path], environments: list[str]
) -> None:
    """`benchlib run` publishes the run it made (`<run>/site`): each environment's executed notebook rendered with its
    code, its results beside it, the summary's findings on the run's page; every link resolves inside the site, and no
    file names the run's folder, the user's model folder or the kit's folder."""
    site = generate_run / SITE_DIR
    page = (site / generate_run.name / "index.html").read_text(encoding="utf-8")
    assert "Findings" in page and (generate_run / FINDINGS_FILE).read_text(encoding="utf-8").startswith("- ")
    for environment in environments:
        notebook = (site / generate_run.name / environment / "benchmark.html").read_text(encoding="utf-8")
        assert "run_environment" in notebook and f'href="{environment}/benchmark.html"' in page  # the code, and the link to it
        assert (site / generate_run.name / environment / "results.csv").is_file()
    assert site_problems(site, [str(generate_run), str(user_models["llama"]), str(PROJECT_ROOT)]) == []
