"""The device's state beside every timed cell: a GPU's clocks, power, temperature, memory, throttle reasons and energy
from NVML, and a CPU's energy from RAPL. This machine has neither a GPU nor readable RAPL counters, so NVML's answers and
a powercap folder are faked (the only fakes here); the cells, the sweep, the rows and environment.json are real."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from benchlib import read_results, run_environment
from benchlib.measure import device_state
from benchlib.measure import sweep as sweep_module
from benchlib.measure.device_state import NO_COUNTER, DeviceMonitor, DeviceState, NvmlMonitor, RaplMonitor, make_monitor, rapl_zones
from benchlib.store.results import read_results as read_every


class FakeNvml:
    """NVML's answers for one GPU (what this machine lacks): an SM clock that `clock` sets, an energy counter that runs
    at `watts` of wall time, and clock-event reasons that `reasons` sets; `pynvml`'s names and units (MHz, mW, mJ)."""

    class NVMLError(Exception):
        pass

    def __init__(self, clock: float = 1980.0, sustained: float = 1980.0, watts: float = 250.0, reasons: int = 0, unsupported: tuple[str, ...] = ()) -> None:
        self.clock, self.sustained, self.watts, self.reasons = clock, sustained, watts, reasons
        self.began = time.perf_counter()
        self.unsupported = unsupported  # the queries this card answers "Not Supported" (a VM, a MIG instance, an older GPU)

    def __getattribute__(self, name: str) -> object:
        if name.startswith("nvml") and name in object.__getattribute__(self, "unsupported"):

            def not_supported(*args: object) -> object:
                raise FakeNvml.NVMLError("Not Supported")

            return not_supported
        return object.__getattribute__(self, name)

    def nvmlDeviceGetClockInfo(self, handle: object, kind: int) -> int:  # noqa: N802  (NVML's names)
        return int(self.clock)

    def nvmlDeviceGetApplicationsClock(self, handle: object, kind: int) -> int:  # noqa: N802
        return int(self.sustained)

    def nvmlDeviceGetMaxClockInfo(self, handle: object, kind: int) -> int:  # noqa: N802
        return 1980

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:  # noqa: N802
        return int(self.watts * 1000)

    def nvmlDeviceGetTemperature(self, handle: object, kind: int) -> int:  # noqa: N802
        return 41

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> object:  # noqa: N802
        return type("Memory", (), {"used": 3 * 2**30, "total": 141 * 2**30})()

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:  # noqa: N802
        return self.reasons

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:  # noqa: N802
        return int((time.perf_counter() - self.began) * self.watts * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object) -> int:  # noqa: N802
        return 700_000

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "580.159.04"

    def nvmlDeviceGetName(self, handle: object) -> str:  # noqa: N802
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, handle: object) -> str:  # noqa: N802
        return "GPU-5b5e3f67-0000-4000-8000-000000000000"


def tiny(tmp_path: Path, name: str, **overrides: object) -> dict:
    """A tiny BERT's cells; other processes' share of this shared machine never flags one here (`max_interference` at
    its top): only the device's state does."""
    values = dict(
        environment="cpu-pytorch", framework="pytorch", mode="eager", models=["bert-base-cased"], model_scale="tiny", batch_sizes=[1],
        sequence_lengths=[8, 16], warmup=1, repeat=5, number=20, remeasure=0, max_interference=1.0, output_dir=str(tmp_path / name),
    )  # fmt: skip
    return {**values, **overrides}


def with_monitor(monkeypatch: pytest.MonkeyPatch, monitor: DeviceMonitor) -> None:
    """The sweep reads `monitor` as it would a GPU's (the model itself runs on this machine's CPU)."""
    monkeypatch.setattr(sweep_module, "make_monitor", lambda device: monitor)


def test_nvmls_fields_reach_every_row_and_environment_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml(watts=250.0)
    with_monitor(monkeypatch, NvmlMonitor(nvml, handle=0))
    rows = run_environment(tiny(tmp_path, "gpu"), progress=False)
    assert rows["status"].eq("ok").all() and rows["gpu_clock_mhz"].eq(1980).all() and rows["gpu_clock_min_mhz"].eq(1980).all()
    assert rows["gpu_sustained_mhz"].eq(1980).all() and rows["gpu_power_w"].eq(250).all() and rows["gpu_temperature_c"].eq(41).all()
    assert rows["gpu_memory_bytes"].eq(3 * 2**30).all() and rows["gpu_throttle"].isna().all() and rows["slowed"].isna().all()
    assert rows["energy_source"].eq("nvml").all() and rows["energy_unit"].eq("call").all()
    # The counter runs at 250 W of wall time: a call's joules are 250 W x its time in the energy's own window of calls.
    # Other work on this shared machine slows some calls, in the samples or in that window: the bounds leave a factor of
    # five either way, and still tell joules per call from per sample (20 calls), per window or millijoules.
    assert ((rows["energy_j"] >= 0.2 * 250 * rows["min_s"]) & (rows["energy_j"] <= 10 * 250 * rows["mean_s"])).all()
    assert set(rows["warmup_stop"]) <= {"stable", "time limit"} and (rows["warmup_s"] > 0).all()
    recorded = json.loads((tmp_path / "gpu" / "environment.json").read_text(encoding="utf-8"))["device_state"]
    assert recorded["gpu"] == {
        "name": "NVIDIA H200", "driver": "580.159.04", "uuid": "GPU-5b5e3f67-0000-4000-8000-000000000000", "sustained_sm_clock_mhz": 1980.0, "max_sm_clock_mhz": 1980, "power_limit_w": 700.0,
        "memory_total_bytes": 141 * 2**30,
    }  # fmt: skip
    assert recorded["energy"]["source"] == "nvml"


class SteppedEnergy(FakeNvml):
    """An energy counter that moves in steps of `step_s` of its power, as NVML's power sensor of an A100 or H100 does
    (what this machine lacks)."""

    step_s = 0.1

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:  # noqa: N802
        seconds = time.perf_counter() - self.began
        return int((seconds // self.step_s) * self.step_s * self.watts * 1000)


def test_a_gpu_cells_energy_is_read_over_a_second_of_calls_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Samples of a few milliseconds would read a stepped counter as 0 (or a whole step): the energy's own window of at
    least ENERGY_WINDOW_S of calls, read at its ends only, reads it within a step."""
    monitor = NvmlMonitor(SteppedEnergy(watts=250.0), handle=0)

    def call() -> None:  # 2 ms of work
        began = time.perf_counter()
        while time.perf_counter() - began < 0.002:
            pass

    joules, calls = monitor.energy_over(call, lambda output: None, per_call_s=0.002)
    assert calls == 500 and 250 * (1.0 - SteppedEnergy.step_s) <= joules  # a second of calls at least, however busy this machine
    stepped = SteppedEnergy(watts=250.0)
    stepped.step_s = 0.5
    with_monitor(monkeypatch, NvmlMonitor(stepped, handle=0))
    rows = run_environment(tiny(tmp_path, "stepped", sequence_lengths=[8, 16], repeat=3, number=2), progress=False)
    assert rows["energy_source"].eq("nvml").all() and (rows["energy_j"] > 0).all()
    state = DeviceState(energy_j=2.0, energy_calls=400)
    assert state.row_fields(6, "call")["energy_j"] == pytest.approx(0.005) and state.row_fields(6, "token", 16)["energy_j"] == pytest.approx(2.0 / 6400)


class ThrottledFirst(NvmlMonitor):
    """NVML saying the card was held back by heat in the first window read, and not after."""

    def __init__(self, nvml: FakeNvml) -> None:
        super().__init__(nvml, handle=0)
        self.windows = 0

    def begin(self) -> None:
        self.windows += 1
        self.nvml.reasons = 0x20 if self.windows == 1 else 0
        super().begin()


def test_a_throttled_cell_is_flagged_and_measured_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monitor = ThrottledFirst(FakeNvml())
    with_monitor(monkeypatch, monitor)
    kept = run_environment(tiny(tmp_path, "throttled", sequence_lengths=[8], remeasure=2), progress=False)
    every = read_every(tmp_path / "throttled", every_attempt=True)
    assert every["attempt"].tolist() == [1, 2] and every["slowed"].tolist()[0] == "throttled: thermal (software)"
    assert str(every["disturbed"].iloc[0]) == "True" and pd.isna(every["slowed"].iloc[1])
    assert kept["attempt"].tolist() == [2] and pd.isna(kept["slowed"].iloc[0])  # the steady try is the one kept


def test_a_card_at_its_power_cap_is_steady_at_the_clock_its_warm_up_settled_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy H100 under its power cap: clock-event reason 0x4 and a clock held below its applications clock (its
    highest): the normal state of a compute-bound datacenter GPU, neither `slowed` nor a warm-up run to its limit."""
    capped = NvmlMonitor(FakeNvml(clock=1620.0, reasons=0x4), handle=0)
    assert [capped.steady(), capped.steady()] == [False, True]  # the clock stopped climbing: the warm-up may end
    with_monitor(monkeypatch, NvmlMonitor(FakeNvml(clock=1620.0, reasons=0x4), handle=0))
    kept = run_environment(tiny(tmp_path, "capped", sequence_lengths=[8], remeasure=1), progress=False)
    every = read_every(tmp_path / "capped", every_attempt=True)
    assert every["attempt"].tolist() == [1] and kept["status"].tolist() == ["ok"] and pd.isna(kept["slowed"].iloc[0])
    assert kept["gpu_throttle"].iloc[0] == "power cap (software)" and kept["gpu_sustained_mhz"].iloc[0] == 1620


class ClockFallsInTheSamples(NvmlMonitor):
    """A card that settles at 1980 MHz in the warm-up and falls to 1200 MHz while the samples are taken."""

    def begin(self) -> None:
        super().begin()
        self.nvml.clock = 1200.0

    def steady(self) -> bool:
        self.nvml.clock = 1980.0
        return super().steady()


def test_a_cell_whose_clock_falls_below_its_steady_clock_is_never_reported_as_steady(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_monitor(monkeypatch, ClockFallsInTheSamples(FakeNvml(), handle=0))
    kept = run_environment(tiny(tmp_path, "slow", sequence_lengths=[8], remeasure=1), progress=False)
    every = read_every(tmp_path / "slow", every_attempt=True)
    assert every["attempt"].tolist() == [1, 2] and every["disturbed"].astype(str).eq("True").all()
    assert kept["slowed"].iloc[0] == "SM clock down to 1200 MHz, below the steady 1980 MHz of its warm-up" and str(kept["disturbed"].iloc[0]) == "True"


NOT_IN_A_VM = ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTotalEnergyConsumption")


def test_an_nvml_field_the_card_does_not_answer_is_blank_and_environment_json_says_why_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_monitor(monkeypatch, NvmlMonitor(FakeNvml(unsupported=NOT_IN_A_VM), handle=0))
    rows = run_environment(tiny(tmp_path, "vm"), progress=False)
    assert rows["status"].eq("ok").all() and rows["gpu_clock_mhz"].eq(1980).all() and rows["gpu_memory_bytes"].eq(3 * 2**30).all()
    assert rows["gpu_power_w"].isna().all() and rows["gpu_temperature_c"].isna().all() and rows["energy_j"].isna().all()
    recorded = json.loads((tmp_path / "vm" / "environment.json").read_text(encoding="utf-8"))["device_state"]
    assert recorded["gpu"]["not_read"] == {
        "gpu_power_w (nvmlDeviceGetPowerUsage)": "NVMLError: Not Supported", "gpu_temperature_c (nvmlDeviceGetTemperature)": "NVMLError: Not Supported",
        "gpu_throttle (nvmlDeviceGetCurrentClocksEventReasons)": "NVMLError: Not Supported",
        "energy_j (nvmlDeviceGetTotalEnergyConsumption)": "NVMLError: Not Supported",
    }  # fmt: skip
    assert recorded["energy"] == {"source": None, "reason": f"{NO_COUNTER}: this GPU has no NVML energy counter (NVMLError: Not Supported)"}


def test_a_load_tests_polling_thread_outlives_a_field_that_stops_answering() -> None:
    nvml = FakeNvml()
    monitor = NvmlMonitor(nvml, handle=0)
    with monitor.polling():
        time.sleep(2.5 * device_state.POLL_S)
        nvml.unsupported = ("nvmlDeviceGetPowerUsage",)  # the card stops answering in the middle of the test
        time.sleep(2.5 * device_state.POLL_S)
    state = monitor.end()
    assert state.clock_mhz == 1980 and state.power_w == 250 and state.energy_j is not None
    assert list(monitor.missing) == ["power"]


def test_without_a_counter_the_energy_columns_are_empty_and_environment_json_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "powercap"
    empty.mkdir()
    with_monitor(monkeypatch, make_monitor("cpu", empty))
    rows = run_environment(tiny(tmp_path, "none", sequence_lengths=[8]), progress=False)
    assert rows["energy_j"].isna().all() and rows["energy_source"].isna().all() and rows["gpu_clock_mhz"].isna().all()
    recorded = json.loads((tmp_path / "none" / "environment.json").read_text(encoding="utf-8"))["device_state"]
    assert recorded == {"energy": {"source": None, "reason": f"{NO_COUNTER}: no RAPL counter under {empty}, and no GPU"}}


def powercap(root: Path, microjoules: int, wraps_at: int = 2**32) -> Path:
    """A powercap folder as Linux lays it out (what this machine lacks): package 0, with a core subzone inside it."""
    for zone, name in (("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "core")):
        (root / zone).mkdir(parents=True, exist_ok=True)
        (root / zone / "name").write_text(name + "\n", encoding="ascii")
        (root / zone / "energy_uj").write_text(f"{microjoules}\n", encoding="ascii")
        (root / zone / "max_energy_range_uj").write_text(f"{wraps_at}\n", encoding="ascii")
    return root


def test_rapl_reads_the_package_counters_and_their_wrap(tmp_path: Path) -> None:
    root = powercap(tmp_path, 2**32 - 1_000_000)
    assert rapl_zones(root) == [root / "intel-rapl:0"]  # the package, not its core subzone
    monitor = make_monitor("cpu", root)
    assert isinstance(monitor, RaplMonitor) and monitor.describe()["energy"]["zones"] == ["package-0"]
    monitor.begin()
    (root / "intel-rapl:0" / "energy_uj").write_text("2500000\n", encoding="ascii")  # wrapped past 2^32 uJ
    state = monitor.end()
    assert state.energy_j == pytest.approx(3.5) and state.energy_source == "rapl" and state.clock_mhz is None
    assert state.row_fields(7, "call")["energy_j"] == pytest.approx(0.5)


def test_a_cpu_run_fills_the_energy_columns_from_rapl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = powercap(tmp_path / "powercap", 0)
    counter, stop = root / "intel-rapl:0" / "energy_uj", threading.Event()

    def package_at_40_watts() -> None:  # the counter the kernel would keep, advanced as the package uses energy
        began = time.perf_counter()
        while not stop.wait(0.002):
            fresh = counter.with_name("energy_uj.new")
            fresh.write_text(f"{int((time.perf_counter() - began) * 40e6)}\n", encoding="ascii")
            fresh.replace(counter)  # whole, as the kernel's file reads: never half written

    writer = threading.Thread(target=package_at_40_watts)
    writer.start()
    try:
        with_monitor(monkeypatch, make_monitor("cpu", root))
        rows = run_environment(tiny(tmp_path, "rapl"), progress=False)
    finally:
        stop.set()
        writer.join()
    assert rows["energy_source"].eq("rapl").all() and rows["energy_unit"].eq("call").all()
    per_call = 40 * rows["mean_s"]
    assert ((rows["energy_j"] >= 0.5 * per_call) & (rows["energy_j"] <= 2 * per_call)).all()  # the fake file's steps are 2 ms


def test_the_state_says_why_a_device_was_slowed() -> None:
    assert DeviceState(clock_mhz=1950, sustained_mhz=1980).slowed() == ""  # within 3% of the steady clock
    assert DeviceState(clock_mhz=1900, sustained_mhz=1980).slowed() == "SM clock down to 1900 MHz, below the steady 1980 MHz of its warm-up"
    assert DeviceState(throttle=("thermal (hardware)",)).slowed() == "throttled: thermal (hardware)"
    assert DeviceState(throttle=("power cap (software)",)).slowed() == ""  # a busy datacenter GPU's normal state
    assert DeviceState(throttle=("power cap (software)", "power brake (hardware)")).slowed() == "throttled: power brake (hardware)"


def test_no_nvml_is_a_monitor_that_reads_nothing_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # not installed
    monitor = make_monitor("cuda:0")
    assert type(monitor) is DeviceMonitor and monitor.end() == DeviceState() and monitor.steady()
    assert monitor.describe()["energy"]["reason"].startswith(f"{NO_COUNTER}: NVML cannot be read (")


def test_the_nvml_index_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert device_state.nvml_index("cuda") == 3 and device_state.nvml_index("cuda:1") == 1
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert device_state.nvml_index("cuda:2") == 2


class TwoCardsAndAMigInstance(FakeNvml):
    """NVML of a machine with two H100s in PCI order (index 0: GPU-aaa, index 1: GPU-bbb) and one MIG instance of the
    second (MIG-ccc), which answers for its memory only, as NVML does (what this machine lacks)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def nvmlInit(self) -> None:  # noqa: N802
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802
        return ["GPU-aaa", "GPU-bbb"][index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802
        self.asked.append(uuid)
        if uuid not in ("GPU-aaa", "GPU-bbb", "MIG-ccc"):
            raise FakeNvml.NVMLError("Not Found")
        return uuid

    def nvmlDeviceIsMigDeviceHandle(self, handle: str) -> bool:  # noqa: N802
        return handle.startswith("MIG-")

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: str) -> str:  # noqa: N802
        return "GPU-bbb"

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:  # noqa: N802
        if str(handle).startswith("MIG-"):
            raise FakeNvml.NVMLError("Not Supported")
        return super().nvmlDeviceGetPowerUsage(handle)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:  # noqa: N802
        if str(handle).startswith("MIG-"):
            raise FakeNvml.NVMLError("Not Supported")
        return super().nvmlDeviceGetTotalEnergyConsumption(handle)


def test_nvmls_handle_is_the_card_cuda_calls_the_device_found_by_its_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = TwoCardsAndAMigInstance()
    monkeypatch.setitem(__import__("sys").modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbb,GPU-aaa")  # CUDA's cuda:0 is NVML's index 1
    assert make_monitor("cuda:0").handle == "GPU-bbb" and make_monitor("cuda:1").handle == "GPU-aaa"

    class Properties:  # PyTorch's view of the card (CUDA's own order, fastest first): its UUID without NVML's prefix
        uuid = "bbb"

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: Properties())
    assert make_monitor("cuda:0").handle == "GPU-bbb" and nvml.asked[-1] == "GPU-bbb"  # not index 0's GPU-aaa


def test_on_a_mig_instance_the_energy_is_marked_as_the_whole_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = TwoCardsAndAMigInstance()
    monkeypatch.setitem(__import__("sys").modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-ccc")
    monitor = make_monitor("cuda")
    assert isinstance(monitor, NvmlMonitor) and (monitor.handle, monitor.card) == ("MIG-ccc", "GPU-bbb") and not monitor.missing
    monitor.begin()
    monitor.read()
    time.sleep(0.05)
    state = monitor.end()
    assert state.energy_j > 0 and state.power_w == 250 and state.energy_source == "nvml-whole-card"
    described = monitor.describe()
    assert described["energy"]["source"] == "nvml-whole-card" and "the other instances' work included" in described["energy"]["method"]
    assert described["gpu"]["mig_of"] == "NVIDIA H200"


def test_a_cpu_run_reads_the_machines_own_counters(tmp_path: Path) -> None:
    """No fake: on this machine, whatever it has (RAPL where readable; else the reason), recorded as it is."""
    run_environment(tiny(tmp_path, "real", sequence_lengths=[8]), progress=False)
    recorded = json.loads((tmp_path / "real" / "environment.json").read_text(encoding="utf-8"))["device_state"]["energy"]
    rows = read_results(tmp_path / "real")
    if recorded["source"] == "rapl":
        assert (rows["energy_j"] > 0).all()
    else:
        assert recorded["reason"].startswith(NO_COUNTER) and rows["energy_j"].isna().all()


def test_each_loadgen_test_has_the_devices_state_its_energy_per_served_sample_and_what_the_serving_loop_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    pytest.importorskip("mlperf_loadgen", reason="LoadGen is the load scenarios' extra (pip install -e '.[loadgen]')")
    with_monitor(monkeypatch, NvmlMonitor(FakeNvml(watts=100.0), handle=0))
    loaded = tiny(tmp_path, "load", scenario="offline", request_lengths=[8, 16], max_batch=4, min_duration_s=0.5, min_query_count=10)
    del loaded["batch_sizes"], loaded["sequence_lengths"]
    row = run_environment(loaded, progress=False).iloc[0]
    assert row["scenario"] == "offline" and row["gpu_clock_mhz"] == 1980 and row["gpu_power_w"] == 100 and pd.isna(row["slowed"])
    assert row["energy_unit"] == "sample" and row["energy_source"] == "nvml"
    # The counter runs at 100 W: a served sample's joules are about 100 W over the samples served per second.
    assert 0.5 * 100 / row["samples_per_s"] <= row["energy_j"] <= 2 * 100 / row["samples_per_s"]
    assert 1 <= row["served_batch_mean"] <= 4 and 0 <= row["served_queue_wait_p50_s"] <= row["served_queue_wait_p99_s"]
    assert 0 < row["served_call_p50_s"] <= row["served_call_p99_s"]


class Event:
    """A profile's event as torch.profiler gives it (the fields read): where it ran and its self time in microseconds."""

    def __init__(self, device_type: str, self_device_time_total: float) -> None:
        self.device_type, self.self_device_time_total = device_type, self_device_time_total


def test_the_gpus_busy_time_is_the_sum_of_what_ran_on_it() -> None:
    from benchlib.backends.pytorch import kernel_seconds

    events = [Event("DeviceType.CPU", 900.0), Event("DeviceType.CUDA", 1200.0), Event("DeviceType.CUDA", 300.0)]
    assert kernel_seconds(events) == pytest.approx(0.0015)  # the CPU's ops are not the GPU's time


@pytest.mark.parametrize(("share", "launch_bound"), [(0.2, True), (0.9, False)])
def test_a_cell_is_launch_bound_where_the_profiled_gpu_is_busy_less_than_half_the_call(
    share: float, launch_bound: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    from benchlib.backends.pytorch import PyTorchBackend

    # The profile a GPU would give (what this machine lacks): its kernels busy `share` of the call as the cell timed it.
    # Calls timed apart from the cell's samples would not do: the host's speed moves between them (a fifth of one held-up
    # call passed for a GPU busy longer; samples 1.8x slower than the five calls after them made a GPU 90 % busy look
    # launch-bound, both seen in rehearsals).
    medians: list[float] = []
    real_measure = sweep_module.measure

    def timed(*args: object, **kwargs: object) -> object:
        measurement = real_measure(*args, **kwargs)
        medians.append(measurement.median_s)
        return measurement

    monkeypatch.setattr(sweep_module, "measure", timed)
    monkeypatch.setattr(PyTorchBackend, "device_busy_s", lambda self, call: share * medians[-1])
    rows = run_environment(tiny(tmp_path, f"busy-{share}", repeat=10, number=50), progress=False)
    assert rows["launch_bound"].astype(str).eq(str(launch_bound)).all() and (rows["gpu_busy_s"] > 0).all()
    assert rows["gpu_busy"].tolist() == pytest.approx([share] * len(rows)) and rows["gpu_busy_s"].tolist() == pytest.approx((share * rows["median_s"]).tolist())


def test_a_cpu_cell_has_no_busy_share() -> None:
    assert sweep_module.launch_busy_columns(None, 0.01) == {}
    assert sweep_module.launch_busy_columns(0.03, 0.01) == {"gpu_busy_s": 0.03, "gpu_busy": 1.0, "launch_bound": False}  # overlapping streams
