"""Which machine, at what price (`analysis.cost`), on two real runs made here under the load-smoke grid and given two
machine names and prices: the costs from their rows, the decision and its flip when the prices swap, an environment below
the quality target never the cheapest, the interval over rounds carried, no cost without a price, each bad input's one
line, `compare`'s cheaper choice, and the rendered summary's first screen in headless Chromium."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from benchlib import read_results
from benchlib.analysis import cost, runs
from benchlib.analysis import load as under_load
from benchlib.analysis.compare import compare_runs
from benchlib.cli import main
from benchlib.paths import OUTPUTS_DIR
from benchlib.report.glossary import COLUMNS as GLOSSARY
from benchlib.store.environment import describe_environment
from benchlib.store.layout import ENVIRONMENT_FILE
from tests.analysis.test_under_load import load_row
from tests.report.test_browser import browser, seen  # noqa: F401  (the module's Chromium, reused)

SMALL, BIG = ("small-vm", 0.01), ("big-vm", 1.0)  # a hundredfold: the flip outlasts a busy machine's spread of rates


def make_run(folder: Path, name: str, price: float, environments: str, params: str) -> Path:
    """One real run of gpt2 under load-smoke's server scenario, its machine named and priced."""
    extra = folder / f"{name}.yaml"
    extra.write_text(params, encoding="utf-8")
    out = folder / name
    code = main([
        "run", "--grid", "load-smoke", "--models", "gpt2", "--environments", environments, "--params", str(extra), "--out", str(out),
        "--no-summary", "--no-limits", "--quiet", "--machine-name", name, "--price-per-hour", str(price),
    ])  # fmt: skip
    assert code == 0
    return out


@pytest.fixture(scope="module")
def priced_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The small machine: eager PyTorch and ONNX Runtime int8 (whose agreement is held to a target above its own), one
    round; the big machine: eager PyTorch, two rounds (an interval). Half-second LoadGen tests, as the tune's: a rate
    is all a cost needs."""
    folder = tmp_path_factory.mktemp("priced")
    load = "scenario: [server]\nmax_trials: 3\nmin_duration_s: 0.5\n"
    small = make_run(folder, *SMALL, "cpu-pytorch,cpu-onnxruntime-int8", f"{load}quality_target: 0.999999\n")
    big = make_run(folder, *BIG, "cpu-pytorch", f"{load}rounds: 2\n")
    return small, big


def costs_of(run_dirs: list[Path], prices: Path | None = None) -> pd.DataFrame:
    return cost.cost_table(under_load.load_rows(run_dirs), cost.run_machines(run_dirs, prices), run_dirs)


def prices_file(folder: Path, text: str) -> Path:
    path = folder / "prices.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.e2e
def test_each_cost_is_the_price_over_the_rate_from_the_rows_with_the_rounds_interval(priced_runs: tuple[Path, Path]) -> None:
    small, big = priced_runs
    recorded = json.loads((big / "cpu-pytorch" / ENVIRONMENT_FILE).read_text())["parameters"]
    assert (recorded["machine_name"], recorded["price_per_hour"], recorded["currency"]) == ("big-vm", 1.0, "USD")
    costs = costs_of([small, big]).set_index(["machine", "environment", "scenario"])
    for machine, run, price in ((*SMALL[:1], small, SMALL[1]), (*BIG[:1], big, BIG[1])):
        rows = read_results(run / "cpu-pytorch")
        rates = pd.to_numeric(rows.loc[rows["scenario"] == "server", "max_qps"]).tolist()
        line = costs.loc[(machine, "cpu-pytorch", "server")]
        assert line["cost_per_million"] == pytest.approx(price / (3600 * pd.Series(rates).median()) * 1e6)
        assert line["rounds"] == len(rates) and line["currency"] == "USD"
    one = costs.loc[("small-vm", "cpu-pytorch", "server")]
    assert math.isnan(one["cost_low"]) and cost.interval_text(one) == "one round: no interval"
    two = costs.loc[("big-vm", "cpu-pytorch", "server")]  # two rounds: the rate's interval, carried into the cost's
    assert two["rate_low"] <= two["rate"] <= two["rate_high"]
    assert (two["cost_low"], two["cost_high"]) == pytest.approx((1.0 / (3600 * two["rate_high"]) * 1e6, 1.0 / (3600 * two["rate_low"]) * 1e6))


@pytest.mark.e2e
def test_the_decision_flips_when_the_prices_swap_and_never_ranks_an_environment_below_the_target(priced_runs: tuple[Path, Path], tmp_path: Path) -> None:
    small, big = priced_runs
    costs = costs_of([small, big])
    int8 = costs[costs["environment"] == "cpu-onnxruntime-int8"].set_index("scenario").loc["server"]
    cheapest_by_cost = costs[costs["scenario"] == "server"].sort_values("cost_per_million").iloc[0]
    assert cheapest_by_cost["environment"] == "cpu-onnxruntime-int8" and int8["quality_verdict"] == "below"  # cheapest, but below the target
    decision = cost.decision_table(costs)
    server = decision[decision["scenario"] == "server"]
    assert "cpu-onnxruntime-int8" not in set(decision["environment"])
    assert (server.iloc[0]["machine"], server.iloc[0]["environment"]) == ("small-vm", "cpu-pytorch")
    sentence = cost.decision_sentences(costs, "under 200 ms")[0]
    assert sentence.startswith("For gpt2, served under 200 ms (server), the cheapest is cpu-pytorch on small-vm: ")
    assert "Not ranked, below the quality target: cpu-onnxruntime-int8 on small-vm (agreement " in sentence
    swapped = prices_file(tmp_path, "- name: small-vm\n  price_per_hour: 1.0\n- name: big-vm\n  price_per_hour: 0.01\n  source: a test\n")
    repriced = costs_of([small, big], swapped)
    flipped = cost.decision_table(repriced)
    assert repriced.set_index("machine").loc["big-vm", "price_from"] == f"{swapped}:3 (a test)"  # the file's price, its line and source
    assert (flipped.iloc[0]["machine"], flipped.iloc[0]["environment"]) == ("big-vm", "cpu-pytorch")


@pytest.mark.e2e
def test_a_run_without_a_price_shows_no_cost_and_says_so_once(priced_runs: tuple[Path, Path], tmp_path: Path) -> None:
    unpriced = shutil.copytree(priced_runs[1], tmp_path / "unpriced")  # as if made without --price-per-hour
    record = unpriced / "cpu-pytorch" / ENVIRONMENT_FILE
    info = json.loads(record.read_text())
    info["parameters"]["price_per_hour"] = None
    record.write_text(json.dumps(info))
    costs = costs_of([unpriced])
    assert costs["cost_per_million"].isna().all() and cost.decision_table(costs).empty and cost.decision_sentences(costs) == []
    assert cost.unpriced_sentence(cost.run_machines([unpriced])) == "No price for big-vm: no cost is shown for it (`run --price-per-hour`, or `summary --prices FILE`)."
    assert main(["summary", str(unpriced)]) == 0
    findings = (unpriced / "findings.md").read_text(encoding="utf-8")
    assert findings.count("No price for big-vm") == 1 and "per million" not in findings and not (unpriced / "tables" / "cost.csv").exists()


@pytest.mark.e2e
def test_each_bad_price_or_name_is_one_line_and_changes_nothing(priced_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small, big = priced_runs
    before = {path: path.read_bytes() for run in (small, big) for path in sorted(run.rglob("*")) if path.is_file()}
    must = "price_per_hour: must be a number above 0 (what the machine costs an hour), not"
    bad = {
        "- name: small-vm\n  price_per_hour: -0.5\n": f"2: {must} -0.5",
        "- name: small-vm\n  price_per_hour: 0\n": f"2: {must} 0",
        "- name: small-vm\n  price_per_hour: cheap\n": f"2: {must} 'cheap'",
        "- name: small-vm\n  price_per_hour: 1\n- name: big-vm\n  price_per_hour: 2\n  currency: EUR\n": "3: currency: EUR mixed with USD",
        "- name: small-vm\n  price_per_hour: 1\n- name: gpu-box\n  price_per_hour: 2\n": "3: name: no run here has a machine 'gpu-box' (theirs: small-vm, big-vm)",
    }  # fmt: skip
    for text, line in bad.items():
        path = prices_file(tmp_path, text)
        assert main(["summary", str(small), str(big), "--prices", str(path)]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and error.startswith(f"{path}:{line}"), error
    other = shutil.copytree(big, tmp_path / "other")  # a run that names its machine small-vm, on other hardware
    record = other / "cpu-pytorch" / ENVIRONMENT_FILE
    info = json.loads(record.read_text())
    info["parameters"]["machine_name"], info["machine"]["cpu"] = "small-vm", "Another CPU"
    record.write_text(json.dumps(info))
    assert main(["summary", str(small), str(other)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("other/cpu-pytorch/environment.json: machine_name: 'small-vm' is also the machine of small-vm/"), error
    assert "whose hardware differs (" in error and "; here Another CPU," in error
    assert {path: path.read_bytes() for run in (small, big) for path in sorted(run.rglob("*")) if path.is_file()} == before  # nothing changed


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [("--price-per-hour", price, f"--price-per-hour: must be a number above 0 (what the machine costs an hour), not {price!r}") for price in ("-1", "0", "abc", "nan")]
    + [("--currency", "usd", "cpu-pytorch: currency: must be an ISO 4217 code such as USD or EUR, not 'usd' (from --currency)")],
)  # fmt: skip
def test_a_bad_price_or_currency_on_run_is_one_line_before_any_kernel(option: str, value: str, error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--grid", "load-smoke", "--environments", "cpu-pytorch", "--out", str(tmp_path / "no"), option, value]) == 2
    assert capsys.readouterr().err == error + "\n" and not (tmp_path / "no").exists()


@pytest.mark.e2e
def test_compare_says_when_a_cheaper_choice_appeared(priced_runs: tuple[Path, Path]) -> None:
    small, big = priced_runs
    cheaper = [note for note in compare_runs(big, small).notes if note.startswith("A cheaper choice appeared")]
    assert len(cheaper) == 1 and cheaper[0].startswith("A cheaper choice appeared for gpt2 (server): cpu-pytorch on small-vm at "), cheaper
    assert " per million requests in B, against cpu-pytorch on big-vm's " in cheaper[0]
    assert not [note for note in compare_runs(small, big).notes if note.startswith("A cheaper choice")]


def test_a_cell_timed_one_call_at_a_time_costs_per_million_calls_at_one_stream(tmp_path: Path) -> None:
    """The reference run's cells (real rows), its machine priced by a prices file: price / 3600 x time per call x 10^6."""
    reference = OUTPUTS_DIR / "reference"
    host = cost.run_machines([reference])["machine"].iloc[0]
    machines = cost.run_machines([reference], prices_file(tmp_path, f"- name: {host}\n  price_per_hour: 0.72\n  currency: EUR\n"))
    rows = runs.load_runs([reference])
    table = cost.call_cost_table(rows, machines)
    ok = rows[rows["status"] == "ok"]
    assert len(table) == len(ok) and set(table["currency"]) == {"EUR"}
    assert table["cost_per_million_calls"].tolist() == pytest.approx((0.72 / 3600 * ok["time_s"] * 1e6).tolist())
    assert cost.call_cost_table(rows, cost.run_machines([reference])).empty  # no price: no cost


@pytest.mark.e2e
def test_the_summary_shows_the_decision_and_the_plot_on_its_first_screen(priced_runs: tuple[Path, Path], browser: object, tmp_path: Path) -> None:  # noqa: F811
    small, big = (shutil.copytree(run, tmp_path / run.name) for run in priced_runs)
    assert main(["summary", str(small), str(big)]) == 0
    page = small / "summary.html"
    html = page.read_text(encoding="utf-8")
    assert html.index('id="Which-machine"') < html.index('id="Findings"') and "the cheapest is cpu-pytorch on small-vm" in html
    assert (small / "figures" / "cost_latency.png").stat().st_size > 0 and (small / "tables" / "cost_decision.csv").is_file()
    columns = {column for name in ("cost", "cost_decision") for column in pd.read_csv(small / "tables" / f"{name}.csv", nrows=0).columns}
    assert columns - set(GLOSSARY) == set()  # every column is in the glossary the summary links to
    state = seen(browser, page, tmp_path / "which-machine.png")
    assert all(image["drawn"] for image in state["images"])
    screen = browser.execute_script(
        "const h = window.innerHeight; const title = document.getElementById('Which-machine');"
        "const plot = Array.from(document.images).find(i => i.getBoundingClientRect().top > title.getBoundingClientRect().top);"
        "const text = Array.from(document.querySelectorAll('li')).find(l => l.textContent.includes('the cheapest is'));"
        "return {height: h, title: title.getBoundingClientRect().top, text: text.getBoundingClientRect().bottom, plot: plot.getBoundingClientRect().bottom};"
    )  # fmt: skip
    assert screen["title"] < screen["text"] < screen["plot"] <= screen["height"], screen


def test_a_workers_own_name_and_price_are_recorded_where_the_parameters_give_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's worker started with BENCHLIB_MACHINE_NAME and BENCHLIB_PRICE_PER_HOUR records them in environment.json."""
    monkeypatch.setenv("BENCHLIB_MACHINE_NAME", "worker-a")
    monkeypatch.setenv("BENCHLIB_PRICE_PER_HOUR", "0.42")
    monkeypatch.setenv("BENCHLIB_CURRENCY", "EUR")
    unset = {"machine_name": None, "price_per_hour": None, "currency": "USD"}
    recorded = describe_environment(unset, {}, {})["parameters"]
    assert (recorded["machine_name"], recorded["price_per_hour"], recorded["currency"]) == ("worker-a", 0.42, "EUR")
    given = describe_environment({"machine_name": "small-vm", "price_per_hour": 0.1, "currency": "USD"}, {}, {})["parameters"]
    assert (given["machine_name"], given["price_per_hour"], given["currency"]) == ("small-vm", 0.1, "USD")  # the run's own win
    monkeypatch.setenv("BENCHLIB_PRICE_PER_HOUR", "cheap")
    assert describe_environment(unset, {}, {})["parameters"]["price_per_hour"] == "cheap"  # kept as given: the summary refuses it
    with pytest.raises(cost.PriceError, match=r"^run/env/environment.json: price_per_hour: must be a number above 0 .*, not 'cheap'$"):
        cost.check_price("cheap", "run/env/environment.json")


def test_offlines_rate_and_output_tokens_and_joules_are_priced_too() -> None:
    """Rows as results.csv holds them (`test_under_load.load_row`): Offline's samples per second over three rounds, a
    generating server's tokens per second, and the energy counter's joules per unit, each beside its cost."""
    rows = pd.DataFrame([
        *(load_row("cpu-pytorch", "offline", r, samples_per_s=s, energy_j=0.5, energy_unit="sample") for r, s in ((1, 90.0), (2, 100.0), (3, 110.0))),
        load_row("cpu-onnxruntime", "server", max_qps=20.0, workload="generate", tokens_per_s=600.0, latency_p99_s=0.15, latency_percentile=99),
    ]).assign(run="run", token_agreement=1.0)  # fmt: skip
    machines = pd.DataFrame([
        {"run": "run", "environment": name, "machine": "vm", "hardware": "x", "price": cost.Price(0.36, "USD", "prices.yaml:1"), "where": "", "target": 0.99}
        for name in ("cpu-pytorch", "cpu-onnxruntime")
    ])  # fmt: skip
    costs = cost.cost_table(rows, machines).set_index("scenario")
    offline = costs.loc["offline"]
    assert offline["rate"] == 100.0 and offline["cost_per_million"] == pytest.approx(0.36 / (3600 * 100.0) * 1e6) and offline["rounds"] == 3
    assert 90.0 <= offline["rate_low"] < offline["rate_high"] <= 110.0 and offline["cost_high"] == pytest.approx(0.36 / (3600 * offline["rate_low"]) * 1e6)
    assert (offline["energy_j"], offline["energy_unit"]) == (0.5, "sample")
    server = costs.loc["server"]
    assert server["cost_per_million_tokens"] == pytest.approx(0.36 / (3600 * 600.0) * 1e6) and server["latency_ms"] == pytest.approx(150.0)
    assert "per million output tokens" in cost.decision_sentences(costs.reset_index())[1]


def test_a_runner_up_within_the_cheapests_interval_is_said_as_a_tie_and_an_undecided_one_is_not_ranked() -> None:
    rows = pd.DataFrame([
        *(load_row("cpu-pytorch", "server", r, max_qps=q) for r, q in ((1, 100.0), (2, 120.0), (3, 110.0))),
        *(load_row("cpu-onnxruntime", "server", r, max_qps=q) for r, q in ((1, 95.0), (2, 118.0), (3, 105.0))),
        *(load_row("cpu-openvino", "server", r, max_qps=q, agreement="") for r, q in ((1, 400.0), (2, 420.0))),
    ]).assign(run="run")  # fmt: skip
    machines = pd.DataFrame([
        {"run": "run", "environment": name, "machine": "vm", "hardware": "x", "price": cost.Price(1.0, "USD", "f:1"), "where": "", "target": 0.99}
        for name in ("cpu-pytorch", "cpu-onnxruntime", "cpu-openvino")
    ])  # fmt: skip
    costs = cost.cost_table(rows, machines)
    assert costs.set_index("environment").loc["cpu-openvino", "quality_verdict"] == "undecided"  # not compared with eager float32
    decision = cost.decision_table(costs)
    assert list(decision["environment"]) == ["cpu-pytorch", "cpu-onnxruntime"] and list(decision["within_interval"]) == [True, True]
    sentence = cost.decision_sentences(costs)[0]
    assert "the cheapest is cpu-pytorch on vm: 2.525 USD per million requests (95% interval " in sentence
    assert " Tied with it, within its interval: cpu-onnxruntime on vm (2.646 USD)." in sentence
    assert sentence.endswith(
        "Undecided, not ranked until its quality is known: cpu-openvino on vm (its agreement with eager PyTorch float32, measured beside it, would decide)."
    )


def test_an_environment_whose_task_quality_cannot_tell_says_how_many_examples_would_decide() -> None:
    quality = dict(quality_verdict="undecided", quality_ratio=0.985, quality_ratio_low=0.97, quality_ratio_high=1.0, quality_target=0.99, quality_n=100)
    rows = pd.DataFrame([load_row("cpu-pytorch", "server", max_qps=50.0), load_row("cpu-onnxruntime", "server", max_qps=80.0, **quality)]).assign(run="run")
    machines = pd.DataFrame([
        {"run": "run", "environment": name, "machine": "vm", "hardware": "x", "price": cost.Price(1.0, "USD", "f:1"), "where": "", "target": 0.99}
        for name in ("cpu-pytorch", "cpu-onnxruntime")
    ])  # fmt: skip
    line = cost.cost_table(rows, machines).set_index("environment").loc["cpu-onnxruntime"]
    assert (line["quality_verdict"], line["to_decide"]) == ("undecided", "about 900 examples would decide")  # 100 x (0.015 / 0.005)^2
    assert cost.decision_sentences(cost.cost_table(rows, machines))[0].startswith("For bert, served under the latency bound (server), the cheapest is cpu-pytorch on vm")
