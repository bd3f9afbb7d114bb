"""The summary's quality checks: noisy cells, different thread counts, peak memory, interference, the speed probe."""

from __future__ import annotations

import json

import matplotlib
import pandas as pd
import pytest

from benchlib.analysis import quality
from benchlib.report import plots
from benchlib.store.results import COLUMNS, read_results

matplotlib.use("Agg")
MIB = 2**20
QUIET = [0.100, 0.101, 0.099, 0.102, 0.100]
NOISY = [0.100, 0.130, 0.080, 0.150, 0.100]  # IQR 0.03 > 10% of the median 0.1


def row(environment, model, batch, sequence, state="ok", samples=QUIET, peak=None):
    return {
        "environment": environment, "model": model, "batch_size": batch, "sequence_length": sequence,
        "status": state, "samples_s": samples if state == "ok" else [], "peak_memory_bytes": peak if state == "ok" else None,
    }  # fmt: skip


def rows():
    return pd.DataFrame([
        row("cpu-pytorch", "gpt2", 1, 8, peak=500 * MIB),
        row("cpu-pytorch", "gpt2", 1, 64, samples=NOISY, peak=600 * MIB),
        row("cpu-pytorch", "gpt2", 8, 1024, state="oom"),
        row("cpu-tensorflow", "gpt2", 1, 8, samples=NOISY, peak=700 * MIB),
        row("cpu-tensorflow", "gpt2", 1, 64, peak=800 * MIB),
        row("cpu-tensorflow", "gpt2", 8, 1024, peak=4096 * MIB),
    ])  # fmt: skip


def test_noisy_cells_are_listed_from_the_samples():
    noisy = quality.noisy_cells(rows())
    assert noisy[["environment", "sequence_length"]].values.tolist() == [["cpu-pytorch", 64], ["cpu-tensorflow", 8]]
    assert noisy.iqr_s.tolist() == pytest.approx([0.03, 0.03]) and noisy.iqr_percent.tolist() == pytest.approx([30, 30])
    assert quality.noisy_cells(rows().iloc[[0, 2]]).empty


def write_environment(run, folder, threads, device="cpu", cpu="CPU One"):
    path = run / folder / "environment.json"
    path.parent.mkdir(parents=True)
    data = {"parameters": {"environment": folder, "device": device, "num_threads": None}, "machine": {"cpu": cpu, "logical_cores": 2}, "threads": {"num_threads": threads, "OMP_NUM_THREADS": None}}
    path.write_text(json.dumps(data))


def test_thread_count_warning_names_the_environments(tmp_path):
    write_environment(tmp_path, "cpu-pytorch", 2)
    write_environment(tmp_path, "cpu-tensorflow", 1)
    write_environment(tmp_path, "gpu-pytorch", 8, device="cuda", cpu="CPU Two")
    environments = quality.load_environments([tmp_path])
    assert [env["folder"] for env in environments] == ["cpu-pytorch", "cpu-tensorflow", "gpu-pytorch"]
    assert quality.thread_table(environments).num_threads.tolist() == [2, 1, 8]
    assert quality.thread_count_warnings(environments) == [
        "On CPU One, 2 cores (cpu) the environments compared ran with different thread counts (cpu-pytorch 2, "
        "cpu-tensorflow 1); their times are not directly comparable."
    ]


def test_no_warning_when_thread_counts_agree(tmp_path):
    write_environment(tmp_path, "cpu-pytorch", 2)
    write_environment(tmp_path, "cpu-tensorflow", 2)
    write_environment(tmp_path, "gpu-pytorch", 8, device="cuda", cpu="CPU Two")
    assert quality.thread_count_warnings(quality.load_environments([tmp_path])) == []


def test_peak_memory_table_shows_mib_and_statuses():
    table = quality.peak_memory_table(rows())
    assert list(table.columns) == ["1x8", "1x64", "8x1024"]
    assert table.loc[("cpu-pytorch", "gpt2")].tolist() == ["500", "600", "oom"]
    assert table.loc[("cpu-tensorflow", "gpt2")].tolist() == ["700", "800", "4096"]


def test_peak_memory_plot_has_labels_with_units():
    figure = plots.peak_memory(rows())
    axis = figure.axes[0]
    assert axis.get_ylabel() == "peak memory (MiB)" and axis.get_xlabel() == "sequence length (tokens)"
    assert axis.get_title() == "gpt2" and len(axis.get_lines()) >= 3
    with pytest.raises(ValueError, match="no ok cell has a peak_memory_bytes value"):
        plots.peak_memory(rows().iloc[[2]])


# ---------------------------------------------------------------- interference and the speed probe


def attempt(model, sequence, number, interference, disturbed, state="ok", environment="cpu-pytorch", steal=""):
    """A results.csv row of one attempt at a cell, as the sweep writes it (blank where the sweep leaves it blank)."""
    return {"steal": steal,
        "environment": environment, "framework": "pytorch", "mode": "eager", "device": "cpu", "model": model,
        "model_scale": "tiny", "batch_size": 1, "sequence_length": sequence, "status": state,
        "median_s": 0.01 * number if state == "ok" else "", "samples_s": "[0.01]" if state == "ok" else "",
        "attempt": number, "interference": interference, "disturbed": disturbed,
    }  # fmt: skip


def written(tmp_path, attempts):
    """The kept rows of a results.csv holding `attempts`, read back as the summary reads it."""
    pd.DataFrame(attempts).reindex(columns=list(COLUMNS)).to_csv(tmp_path / "results.csv", index=False)
    return read_results(tmp_path)


def test_disturbed_cells_are_the_kept_ok_cells_still_disturbed(tmp_path):
    rows = written(tmp_path, [
        attempt("gpt2", 8, 1, 0.30, True),
        attempt("gpt2", 64, 1, 0.01, False),
        attempt("gpt2", 128, 1, "", "", state="oom"),
        attempt("gpt2", 256, 1, 0.20, True),
        attempt("gpt2", 8, 2, 0.12, True),  # measured again, still disturbed: the less disturbed attempt is kept
        attempt("gpt2", 256, 2, 0.02, False),  # measured again, quiet this time
    ])  # fmt: skip
    cells = quality.disturbed_cells(rows)
    assert list(cells.columns) == ["environment", "model", "batch_size", "sequence_length", "interference", "attempts", "median_s"]
    assert cells[["sequence_length", "interference", "attempts", "median_s"]].values.tolist() == [[8, 0.12, 2, 0.02]]
    assert quality.disturbed_cells(rows[rows["sequence_length"] != 8]).empty
    old = written(tmp_path, [attempt("gpt2", 8, 1, "", "", environment="cpu-tensorflow")])  # before the column existed
    new = written(tmp_path, [attempt("gpt2", 8, 1, 0.30, True), attempt("gpt2", 64, 1, 0.01, False)])
    both = pd.concat([old, new], ignore_index=True)  # as load_runs does: a bool column beside an empty one becomes 1.0/0.0/NaN
    assert quality.disturbed_cells(both)["sequence_length"].tolist() == [8]


def test_interference_notes_name_unmeasured_and_disturbed_environments(tmp_path):
    old = written(tmp_path, [attempt("gpt2", 8, 1, "", "", environment="cpu-tensorflow")])  # written before the columns existed
    new = written(tmp_path, [
        attempt("gpt2", 8, 1, 0.30, True), attempt("gpt2", 64, 1, 0.02, False), attempt("gpt2", 128, 1, 0.01, False),
        attempt("gpt2", 256, 1, "", "", state="failed"),
    ])  # fmt: skip
    environments = [{"interference": {"measured": True, "max_interference": 0.05}}, {}]
    notes = quality.interference_notes(pd.concat([old, new], ignore_index=True), environments)
    assert notes == [
        "Interference was not measured for cpu-tensorflow (results from before it was recorded, or no /proc/stat): "
        "whether other work on the machine affected their comparisons cannot be checked.",
        "cpu-pytorch: 1 of 3 ok cells disturbed (other processes used over 5% of the CPUs), median interference 2.0%: "
        "its numbers were taken while other processes used the machine.",
    ]
    assert quality.interference_notes(old, [{}])[0].startswith("Interference was not measured for cpu-tensorflow ")


def test_interference_notes_say_how_much_of_the_disturbance_was_the_host_s_steal(tmp_path):
    rows = written(tmp_path, [
        attempt("gpt2", 8, 1, 0.20, True, environment="cpu-tensorflow", steal=0.18),
        attempt("gpt2", 64, 1, 0.10, True, environment="cpu-tensorflow", steal=0.03),
        attempt("bert-base-cased", 8, 1, 0.01, False, environment="cpu-tensorflow", steal=0.01),
    ])  # fmt: skip
    notes = quality.interference_notes(rows, [{"interference": {"max_interference": 0.05}}])
    assert notes == [
        "cpu-tensorflow: 2 of 3 ok cells disturbed (other processes used over 5% of the CPUs), median interference 10.0% "
        "(of the disturbed cells' interference, 70% was steal: the host's other work, not a process on this machine): "  # (0.18 + 0.03) / 0.30
        "its numbers were taken while other processes used the machine."
    ]


def test_interference_notes_give_the_largest_interference_when_nothing_is_disturbed(tmp_path):
    rows = written(tmp_path, [attempt("gpt2", 8, 1, 0.03, False), attempt("bert-base-cased", 64, 1, 0.07, False)])
    notes = quality.interference_notes(rows, [{"interference": {"max_interference": 0.05}}])
    assert len(notes) == 1 and notes[0].startswith("No cell was disturbed (other processes above 5% of the CPUs")
    assert notes[0].endswith("the largest interference seen was 7.0% (cpu-pytorch, bert-base-cased 1x64).")
    assert quality.interference_notes(rows.iloc[:0], []) == ["No cell is ok: there is no interference to report."]


def probed(folder, seconds, cpu="CPU One", device="cpu", run="/runs/r1", start=0):
    """An environment.json as `load_environments` returns it, with one probe per value of `seconds`, a minute apart."""
    labels = ["start", *(f"before model{i}" for i in range(1, len(seconds) - 1)), "end"][: len(seconds)]
    probes = [{"label": label, "time": f"2026-11-30T10:{start + i:02d}:00.000+00:00", "seconds": s} for i, (label, s) in enumerate(zip(labels, seconds))]
    return {
        "parameters": {"environment": folder, "device": device}, "machine": {"cpu": cpu, "logical_cores": 2},
        "probe_workload": "numpy float32 matmul 1024x1024, 1 thread, median of 3", "probes": probes, "run": run, "folder": folder,
    }  # fmt: skip


def test_probe_table_has_one_row_per_probe():
    old = {"parameters": {"environment": "cpu-tensorflow", "device": "cpu"}, "machine": {"cpu": "CPU One"}, "run": "/runs/r1", "folder": "cpu-tensorflow"}
    table = quality.probe_table([probed("cpu-pytorch", [0.010, 0.011, 0.012]), old, probed("cpu-pytorch", [0.02], run="/runs/r2", start=30)])
    assert list(table.columns[:7]) == ["run", "environment", "machine", "device", "label", "time", "seconds"]
    assert table["environment"].tolist() == ["cpu-pytorch@r1"] * 3 + ["cpu-pytorch@r2"]
    assert table["label"].tolist() == ["start", "before model1", "end", "start"] and table["machine"].iloc[0] == "CPU One, 2 cores"
    assert str(table["time"].dt.tz) == "UTC" and table["time"].iloc[1] == pd.Timestamp("2026-11-30T10:01:00Z")
    assert table["seconds"].tolist() == [0.010, 0.011, 0.012, 0.02]
    assert quality.probe_table([old]).empty


def test_probe_warns_above_10_percent_on_one_machine():
    varied = [probed("cpu-pytorch", [0.100, 0.102, 0.101]), probed("cpu-tensorflow", [0.115, 0.110], start=10)]
    assert quality.probe_warnings(varied) == [  # medians 101 ms and 112.5 ms
        "On CPU One, 2 cores (cpu) the median speed probe differed by 11% between environments, from 101.0 ms (cpu-pytorch) "
        "to 112.5 ms (cpu-tensorflow): the machine itself changed speed during the run, and comparisons between "
        "cpu-pytorch and cpu-tensorflow carry that change."
    ]
    one_slow_probe = [probed("cpu-pytorch", [0.100, 0.130, 0.101]), probed("cpu-tensorflow", [0.102, 0.100], start=10)]
    assert quality.probe_warnings(one_slow_probe) == []  # a single probe's noise is not the machine's speed
    steady = [probed("cpu-pytorch", [0.100, 0.105]), probed("cpu-tensorflow", [0.103, 0.101], start=10), probed("cpu-other", [0.300], cpu="CPU Two")]
    assert quality.probe_warnings(steady) == []  # 5% on CPU One; CPU Two is another machine
    old = {"parameters": {"environment": "cpu-xla", "device": "cpu"}, "machine": {"cpu": "CPU One"}, "folder": "cpu-xla"}
    assert quality.probe_warnings([*steady, old]) == [
        "No speed probe was recorded for cpu-xla (results from before it existed): whether the machine changed speed while it ran cannot be checked."
    ]
    assert quality.probe_warnings([old]) == []


def test_probe_plot_shows_milliseconds_over_time():
    table = quality.probe_table([probed("cpu-pytorch", [0.100, 0.102, 0.101]), probed("cpu-tensorflow", [0.115, 0.110], start=10), probed("gpu", [0.1], cpu="CPU Two")])
    figure = plots.speed_probe(table)
    axis = figure.axes[0]
    assert len(figure.axes) == 2  # one panel per machine
    assert axis.get_ylabel() == "probe time (ms)" and axis.get_xlabel() == "time (UTC)"
    assert "numpy float32 matmul" in figure.get_suptitle() and axis.get_title().startswith("CPU One, 2 cores (cpu): environments' medians vary 11%")
    assert sorted(max(line.get_ydata()) for line in axis.get_lines() if len(line.get_ydata()) > 1 and line.get_marker() == "o") == pytest.approx([102, 115])
    with pytest.raises(ValueError, match="no speed probe to plot"):
        plots.speed_probe(table.iloc[:0])


def test_round_spread_per_environment() -> None:
    from benchlib.analysis.runs import collapse_rounds

    def row(model, round_number, median):
        return {"environment": "cpu-pytorch", "model": model, "batch_size": 1, "sequence_length": 8, "status": "ok",
                "median_s": median, "mean_s": median, "samples_s": [median], "round": round_number}  # fmt: skip

    rows = collapse_rounds(pd.DataFrame([row("gpt2", 1, 1.0), row("gpt2", 2, 1.2), row("gpt2", 3, 1.1), row("bert-base-cased", 1, 2.0), row("bert-base-cased", 2, 2.0)]))
    table = quality.round_spread(rows).squeeze()
    assert (table["environment"], table["cells"], table["rounds"]) == ("cpu-pytorch", 2, 3)
    assert table["largest_spread_pct"] == pytest.approx(0.2 / 1.1 * 100) and table["largest_spread_cell"] == "gpt2 1x8"
    assert table["median_spread_pct"] == pytest.approx(0.2 / 1.1 * 100 / 2)
    assert quality.round_spread(collapse_rounds(pd.DataFrame([row("gpt2", 1, 1.0)]))).empty


def on_host(environment, host, memory_gib=24, gpus=()):
    """`environment` as measured on `host`, a machine with `memory_gib` and `gpus`."""
    return {**environment, "machine": {**environment["machine"], "hostname": host, "memory_bytes": memory_gib * 2**30, "gpus": list(gpus)}}


def test_machine_description_names_cpu_cores_memory_and_gpus():
    assert quality.machine_description(on_host(probed("cpu-pytorch", [0.1]), "a")) == "CPU One, 2 cores, 24 GiB, no GPU"
    gpu = on_host(probed("gpu-pytorch", [0.1]), "b", 64, [{"name": "Tesla V100", "memory": "16384 MiB", "driver": "550"}])
    assert quality.machine_description(gpu) == "CPU One, 2 cores, 64 GiB, Tesla V100 16384 MiB"
    assert quality.machine_description({}) == "unknown CPU, no GPU"


def test_environments_compared_across_machines_of_different_types_are_flagged():
    same = [on_host(probed("cpu-pytorch", [0.1]), "a"), on_host(probed("cpu-tensorflow", [0.1], start=10), "b")]
    assert quality.machine_warnings(same) == [] and quality.probe_warnings(same) == []
    v100 = [{"name": "Tesla V100", "memory": "16384 MiB"}]
    other = [same[0], on_host(probed("cpu-tensorflow", [0.1], start=10), "b", gpus=v100), on_host(probed("cpu-xla", [0.1], start=20), "c", gpus=v100)]
    assert quality.machine_warnings(other) == [
        "On CPU One, 2 cores, 24 GiB (cpu) the environments compared ran on machines of different types "
        "(CPU One, 2 cores, 24 GiB, Tesla V100 16384 MiB: cpu-tensorflow and cpu-xla; CPU One, 2 cores, 24 GiB, no GPU: cpu-pytorch): "
        "their times differ by machine as well as by environment; run them on machines of one type to compare them."
    ]
    assert quality.probe_warnings(other) == quality.machine_warnings(other)
    elsewhere = [same[0], on_host(probed("cpu-other", [0.1], cpu="CPU Two"), "d")]
    assert quality.machine_warnings(elsewhere) == []  # another CPU: the summary does not compare them
    smaller = [same[0], on_host(probed("cpu-other", [0.1]), "d", memory_gib=16)]
    assert quality.machine_warnings(smaller) == []  # other memory: not compared either (machine.machine_label)


def test_machines_of_one_type_that_differ_in_speed_by_more_than_5_percent_are_flagged():
    a, b = on_host(probed("cpu-pytorch", [0.100, 0.101]), "a"), on_host(probed("cpu-tensorflow", [0.106, 0.107], start=10), "b")
    [warning] = quality.probe_warnings([a, b])  # 6%: under the 10% of one machine, over the 5% between two
    assert warning == (
        "Machines of one type (CPU One, 2 cores, 24 GiB, no GPU) differ in speed by 6% (median speed probe per machine: "
        "a 100.5 ms (cpu-pytorch); b 106.5 ms (cpu-tensorflow)): comparisons between environments measured on different machines carry that difference."
    )
    close = on_host(probed("cpu-tensorflow", [0.103, 0.104], start=10), "b")
    assert quality.machine_speed_warnings([a, close]) == []
    # Rounds of one environment on two machines: each probe counts for the machine it ran on.
    rounds = on_host(probed("cpu-pytorch", [0.100, 0.100, 0.120, 0.120]), "a")
    rounds["probes"] = [{**probe, "hostname": "a" if i < 2 else "b"} for i, probe in enumerate(rounds["probes"])]
    assert quality.probe_table([rounds])["host"].tolist() == ["a", "a", "b", "b"]
    [slower] = quality.probe_warnings([rounds])  # within each machine the probe is steady
    assert slower.startswith("Machines of one type (CPU One, 2 cores, 24 GiB, no GPU) differ in speed by 20% (median speed probe per machine: a 100.0 ms (cpu-pytorch); b 120.0 ms (cpu-pytorch))")


def test_the_speed_of_one_machine_is_checked_per_host():
    varied = [on_host(probed("cpu-pytorch", [0.100, 0.101]), "a"), on_host(probed("cpu-tensorflow", [0.115, 0.114], start=10), "a"), on_host(probed("cpu-xla", [0.100], start=20), "b")]
    warnings = quality.probe_warnings(varied)
    assert warnings[0].startswith("On CPU One, 2 cores, 24 GiB (cpu, host a) the median speed probe differed by 14% between environments, from 100.5 ms (cpu-pytorch) to 114.5 ms (cpu-tensorflow)")
    assert len(warnings) == 2 and warnings[1].startswith(  # a's median over both of its environments' probes
        "Machines of one type (CPU One, 2 cores, 24 GiB, no GPU) differ in speed by 7% (median speed probe per machine: a 107.5 ms (cpu-pytorch and cpu-tensorflow); b 100.0 ms (cpu-xla))"
    )


def test_time_to_first_result_warm_and_cold_per_environment() -> None:
    def row(env: str, model: str, sequence: int, build: float, made: float, cached: object, state: str = "ok") -> dict:
        return {"environment": env, "model": model, "batch_size": 1, "sequence_length": sequence, "status": state, "build_s": build,
                "cold_export_s": made, "prepare_s": 0.5, "first_call_s": 0.25, "cached": cached}  # fmt: skip

    rows = pd.DataFrame([
        row("cpu-openvino", "gpt2", 8, 1.0, 10.0, True), row("cpu-openvino", "gpt2", 64, 9.0, 99.0, True),  # the first cell counts
        row("cpu-openvino", "bert", 8, 2.0, 30.0, "False"), row("cpu-openvino", "ctrl", 8, 50.0, 0.0, False, state="oom"),
        row("cpu-tensorflow", "gpt2", 8, 3.0, 0.0, ""),
    ])  # fmt: skip
    table = quality.time_to_first_result(rows).set_index("environment")
    assert table.loc["cpu-openvino", "models"] == 2
    assert table.loc["cpu-openvino", "warm_median_s"] == pytest.approx((1.75 + 2.75) / 2)
    assert table.loc["cpu-openvino", "cold_median_s"] == pytest.approx((11.75 + 32.75) / 2)
    assert (table.loc["cpu-openvino", "slowest_model"], table.loc["cpu-openvino", "slowest_cold_s"]) == ("bert", pytest.approx(32.75))
    assert table.loc["cpu-openvino", "from_cache"] == "1 of 2" and table.loc["cpu-tensorflow", "from_cache"] == "0 of 1"
    assert table.loc["cpu-tensorflow", "cold_median_s"] == pytest.approx(3.75)
    assert quality.time_to_first_result(rows.drop(columns=["build_s"])).empty  # a run from before the build cache
