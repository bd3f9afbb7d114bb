"""A load run's estimate: printed before any kernel starts, held to max_run_minutes, and what is left as rows are written."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import yaml

from benchlib.cli import main
from benchlib.config.jobs import plan_run
from benchlib.launch.estimate import MachineSpeed, Remaining, estimate_run, machine_speed
from benchlib.store.limits import write_limits

SPEED = MachineSpeed(200e9, 50e9, "a test's figures")


def params_file(path: Path, **values: object) -> Path:
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def test_each_environment_gets_its_tests_and_the_99th_percentile_costs_more_than_the_90th(tmp_path: Path) -> None:
    jobs = plan_run(tmp_path, "load-smoke", ["cpu-pytorch", "cpu-onnxruntime"])
    cost = estimate_run(jobs, SPEED)
    assert [job.name for job in cost.jobs] == ["cpu-pytorch", "cpu-onnxruntime"]
    tests = cost.jobs[0].tests
    assert [(t.model, t.scenario) for t in tests] == [(m, s) for m in ("gpt2", "bert-base-cased") for s in ("single-stream", "multi-stream", "server", "offline")]
    server = next(t for t in tests if t.scenario == "server")
    assert server.tests == jobs[0].params.max_trials and server.seconds >= server.tests * jobs[0].params.min_duration_s
    lines = cost.lines()
    assert lines[0].startswith("estimate: about ") and "2 kernels and 36 LoadGen tests" in lines[0] and "a test's figures" in lines[0]
    assert lines[1].startswith("  cpu-pytorch (") and "; gpt2: single-stream 1 x " in lines[1] and ", server 6 x " in lines[1]
    strict = plan_run(tmp_path, "load-smoke", ["cpu-pytorch"], [params_file(tmp_path / "p99.yaml", latency_percentile=99)])
    assert estimate_run(strict, SPEED).seconds > estimate_run(jobs[:1], SPEED).seconds
    judged = {t.scenario: t for t in estimate_run(strict, SPEED).jobs[0].tests if t.model == "gpt2"}
    assert (judged["single-stream"].queries, judged["multi-stream"].queries) == (662, 662) and judged["server"].queries >= 459  # early stopping's fewest
    assert estimate_run(plan_run(tmp_path, "smoke", ["cpu-pytorch"]), SPEED).jobs == ()  # a grid of cells: no LoadGen test
    rounds = plan_run(tmp_path, "load-smoke", ["cpu-pytorch"], [params_file(tmp_path / "rounds.yaml", rounds=2)])
    assert len(estimate_run(rounds, SPEED).jobs) == 2  # every round's kernel


def test_a_slower_machine_is_estimated_to_take_longer_and_a_rerun_reads_the_runs_own_limits(tmp_path: Path) -> None:
    jobs = plan_run(tmp_path, "load-generate", ["cpu-pytorch"])
    slow = dataclasses.replace(SPEED, flops_per_s=SPEED.flops_per_s / 10, bytes_per_s=SPEED.bytes_per_s / 10)
    assert estimate_run(jobs, slow).seconds > estimate_run(jobs, SPEED).seconds
    assert machine_speed(tmp_path).source.endswith(("AVX-512", "AVX2"))  # no limits yet: the CPU's vector width
    write_limits(tmp_path, {"device": "cpu", "float32_flops_per_s": 1e11, "bandwidth_bytes_per_s": 2e10})
    assert machine_speed(tmp_path) == MachineSpeed(1e11, 2e10, "this run's machine limits")


def test_over_max_run_minutes_the_run_says_which_setting_to_lower_and_starts_nothing_without_yes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    jobs = plan_run(tmp_path, "load-smoke", ["cpu-pytorch"], [params_file(tmp_path / "p99.yaml", latency_percentile=99)])
    cost = estimate_run(jobs, SPEED)
    assert cost.over(cost.seconds / 60 + 1) is None
    over = cost.over(0.1)
    assert over is not None and over.startswith("estimated ") and "more than max_run_minutes (0.1); the server tests take " in over
    assert "lower max_trials, min_query_count, latency_percentile (90 needs 44 queries a test, 99 needs 459)" in over  # the server's counts and over.endswith("or run with --yes")

    run_dir, bound = tmp_path / "run", params_file(tmp_path / "bound.yaml", max_run_minutes=0.05)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["run", "--grid", "load-smoke", "--environments", "cpu-pytorch", "--params", str(bound), "--out", str(run_dir), "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert "estimate: about " in out and "more than max_run_minutes (0.05)" in err and err.strip().endswith("or run with --yes")
    assert not (run_dir / "cpu-pytorch").exists()  # no kernel started
    answers = iter(["n"])
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    assert main(["run", "--grid", "load-smoke", "--environments", "cpu-pytorch", "--params", str(bound), "--out", str(run_dir), "--quiet"]) == 2
    assert not (run_dir / "cpu-pytorch").exists()  # asked at the terminal, and told no


def test_what_is_left_counts_finished_scenarios_and_a_servers_trials(tmp_path: Path) -> None:
    jobs = plan_run(tmp_path, "load-smoke", ["cpu-pytorch", "cpu-onnxruntime"])
    cost = estimate_run(jobs, SPEED)
    first = cost.jobs[0]
    single = next(t for t in first.tests if (t.model, t.scenario) == ("gpt2", "single-stream"))
    server = next(t for t in first.tests if (t.model, t.scenario) == ("gpt2", "server"))

    def row(scenario: str, trial: str = "") -> dict[str, str]:
        return {"model": "gpt2", "scenario": scenario, "trial": trial}

    assert first.done_s([]) == 0
    assert first.done_s([row("single-stream")]) == pytest.approx(first.setup_s + single.seconds)
    two_trials = [row("single-stream"), row("server", "1"), row("server", "2")]
    assert first.done_s(two_trials) == pytest.approx(first.setup_s + single.seconds + server.seconds * 2 / server.tests)
    remaining = Remaining(cost)
    assert remaining.text(0) == remaining.text(0, []) and remaining.text(0).startswith("about ") and remaining.text(0).endswith(" left")
    assert remaining.left_s(0) == pytest.approx(cost.seconds)  # nothing run: the whole estimate (under a minute: not scaled)
    done = first.seconds + cost.jobs[1].setup_s + single.seconds
    on_time = Remaining(cost, started=time.perf_counter() - done)  # the run took what its estimate said
    assert on_time.left_s(1, [row("single-stream")]) == pytest.approx(cost.seconds - done, rel=0.01)
    late = Remaining(cost, started=time.perf_counter() - 2 * done)  # twice as long: so will the rest be
    assert late.left_s(1, [row("single-stream")]) == pytest.approx(2 * (cost.seconds - done), rel=0.01) or done < 60
