"""Serving engines as environments (the `openai` backend): `transformers serve` started by the kit on a tiny Llama folder,
timed through streamed requests with its tokens compared with eager PyTorch float32's, and stopped; and what goes wrong
(an engine that cannot start, one that dies while serving, a missing environment of its own), each a row or one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import pytest
import yaml

from benchlib.analysis.load import bound_text, load_rows, scenario_table, token_bounds_ms
from benchlib.report.plots import concurrency_sweep
from benchlib.backends import load_backend
from benchlib.backends._engine import ENGINES_VARIABLE, STOP_GRACE_S, Venv, answers, engine_command, start_engine
from benchlib.config.params import ParameterError, validate_params
from benchlib.config.tune import default_point, tune_space
from benchlib.launch.tune import point_params
from benchlib.measure.sweep import run_environment
from benchlib.paths import PARAMETERS_DIR, PROJECT_ROOT
from benchlib.status import CRASHED, ERROR, OK, UNSUPPORTED
from benchlib.store.layout import engine_log
from benchlib.store.recovery import read_in_flight
from benchlib.store.results import OBJECTIVE_FIGURES, rows_written
from tests.checkpoints import save_llama
from tests.kernels import has_row

GRID = {"workload": "generate", "batch_sizes": [1], "prompt_lengths": [8], "new_tokens": 4, "warmup": 1, "repeat": 3, "max_cell_seconds": 20, "remeasure": 0}
LOAD = {
    "workload": "generate", "scenario": ["server", "offline", "concurrency"], "request_lengths": [8], "new_tokens": 4, "max_batch": 1, "streams": 4,
    "ttft_bound_ms": 2000, "tpot_bound_ms": 500, "latency_percentile": 90, "min_duration_s": 1.0, "min_query_count": 8, "max_trials": 2,
    "remeasure": 0,
}  # fmt: skip


def environment(name: str) -> dict[str, Any]:
    return yaml.safe_load((PARAMETERS_DIR / "environments" / f"{name}.yaml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_llama(tmp_path_factory.mktemp("engine-model") / "llama")


ENGINE_ARGS = {"attn_implementation": "eager"}  # a setting of transformers serve's command line


@dataclass(frozen=True)
class Interrupted:
    """A `benchlib run` stopped by SIGINT while its engine served: its folder, exit status, output, and the engine's
    process group and port as they were."""

    env_dir: Path
    returncode: int
    out: str
    group: list[psutil.Process]
    port: int


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, llama: Path) -> Interrupted:
    """`benchlib run` of cpu-transformers-serve (an engine setting in its options) on the tiny Llama folder, batch sizes 1
    and 2, in a session of its own: sent SIGINT, as Ctrl-C sends it to the terminal's group, once the first cell's row is
    written and the second cell is in flight on the same engine (the kernel held still meanwhile, so that it cannot end)."""
    run = tmp_path_factory.mktemp("served")
    options = {**environment("cpu-transformers-serve")["options"], "engine_args": ENGINE_ARGS}
    params = run / "params.yaml"
    params.write_text(yaml.safe_dump({"batch_sizes": [1, 2], "remeasure": 0, "options": options}))  # one pass: one engine
    command = [
        sys.executable, "-m", "benchlib", "run", "--grid", "generate-smoke", "--environments", "cpu-transformers-serve", "--models", str(llama),
        "--params", str(params), "--out", str(run), "--no-summary", "--no-limits", "--quiet",
    ]  # fmt: skip
    env_dir = run / "cpu-transformers-serve"
    runner = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        kernel = second_cell_in_flight(env_dir, runner)
        try:
            engine = next(p for p in kernel.children(recursive=True) if "transformers_cli" in " ".join(p.cmdline()))
            group, port = [engine, *engine.children(recursive=True)], port_of(engine)
            assert answers(f"http://127.0.0.1:{port}")  # serving
            os.killpg(runner.pid, signal.SIGINT)
            # The runner's shutdown of its kernel begins with this interrupt of the kernel's own group (jupyter_client's);
            # sent now, it is the first thing the kernel meets when it runs again, so that the cell in flight cannot end
            # before it, however slow the runner is to send its own.
            os.killpg(os.getpgid(kernel.pid), signal.SIGINT)
        finally:
            kernel.resume()
        out, _ = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
    return Interrupted(env_dir, runner.returncode, out, group, port)


def second_cell_in_flight(env_dir: Path, runner: subprocess.Popen, timeout_s: float = 300) -> psutil.Process:
    """The kernel writing into `env_dir`, stopped (SIGSTOP) once the first cell's row is written and the second cell is in
    flight without one."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert time.monotonic() < deadline and runner.poll() is None, f"the second cell was never in flight in {env_dir}"
        marker = read_in_flight(env_dir)
        if marker and marker.get("batch_size") == 2 and rows_written(env_dir) >= 1:
            kernel = psutil.Process(marker["pid"])
            kernel.suspend()
            now = read_in_flight(env_dir)
            if now and now.get("batch_size") == 2 and has_row(env_dir, now) is False:
                return kernel
            kernel.resume()
        time.sleep(0.02)


def port_of(engine: psutil.Process) -> int:
    """The port on an engine's command line (`--port N`)."""
    line = engine.cmdline()
    return int(line[line.index("--port") + 1])


@pytest.mark.e2e
def test_transformers_serve_is_timed_and_agrees_with_eager_float32(served: Interrupted, llama: Path) -> None:
    """The cell measured before the interrupt: timed through the stream, its tokens eager float32's, the engine started
    with the environment's setting as a flag after its serve command. The cell in flight has no row, or a whole one: the
    kernel can lose an interrupt (Python drops a KeyboardInterrupt raised inside a weakref callback, seen here) and end
    the cell before the runner's shutdown stops it."""
    from benchlib.store.results import read_results

    rows = read_results(served.env_dir)
    assert list(rows["batch_size"]) in ([1], [1, 2]) and set(rows["status"]) == {OK}, (rows[["batch_size", "status", "reason"]].to_string(), served.out)
    assert (rows["token_agreement"] == 1.0).all()
    row = rows.iloc[0]
    assert row["environment"] == "cpu-transformers-serve" and row["framework"] == "openai" and row["workload"] == "generate"
    assert 0 < row["ttft_s"] < row["generate_s"] and row["tpot_s"] > 0 and row["token_clock"] == "each step"
    assert row["token_agreement"] == 1.0  # a float32 engine on a float32 model makes eager float32's tokens
    log = engine_log(served.env_dir, str(llama))
    assert log.is_file() and "transformers_cli serve" in log.read_text()
    started = [line.removeprefix("$ ") for line in log.read_text().splitlines() if line.startswith("$ ")]
    assert len(started) == 1 and f"--port {served.port} " in started[0]  # one engine for the model's cells
    assert started[0].endswith(" --log_level warning --attn_implementation eager")  # the setting, a flag after serve
    assert json.loads((served.env_dir / "environment.json").read_text())["parameters"]["options"]["engine_args"] == ENGINE_ARGS


@pytest.mark.e2e
def test_a_run_interrupted_while_its_engine_serves_leaves_no_engine_and_says_so_in_one_line(served: Interrupted) -> None:
    """The interrupted run ends with 128 + SIGINT and one line saying it was stopped; neither the engine nor any process
    of its group outlives it (stopped by the kernel as it shuts down, or by the system when the kernel dies)."""
    assert served.returncode == 128 + signal.SIGINT, served.out
    stopped = [line for line in served.out.splitlines() if "SIGINT" in line]
    assert len(stopped) == 1 and stopped[0].startswith("stopped by SIGINT: finished rows are kept"), served.out
    _, alive = psutil.wait_procs(served.group, timeout=STOP_GRACE_S)
    assert not alive and not answers(f"http://127.0.0.1:{served.port}", timeout_s=0.5)


@pytest.mark.e2e
def test_transformers_serve_under_load_has_goodput_a_knee_and_the_clients_ceiling(tmp_path: Path, llama: Path) -> None:
    """LoadGen's server and offline scenarios through the asynchronous client, four requests in flight: VALID, with the
    share of requests that met both bounds, the rate's share of the client's ceiling (recorded in environment.json), and
    the served tokens in agreement with eager float32's; the concurrency sweep: a trial row per level, the knee named."""
    from benchlib.store.results import read_results

    output_dir = tmp_path / "cpu-transformers-serve"
    rows = run_environment({**environment("cpu-transformers-serve"), "models": [str(llama)], **LOAD, "output_dir": str(output_dir)}, progress=False)
    rows = rows.set_index("scenario")
    assert set(rows["status"]) == {OK} and rows["valid"].all(), rows["reason"].tolist()
    trials = read_results(output_dir, trials=True)
    levels = trials[(trials["scenario"] == "concurrency") & trials["trial"].notna()]
    assert list(levels["concurrency"]) == [1, 2, 4][: len(levels)] and len(levels) >= 2
    knee = rows.loc["concurrency", "knee"]
    assert knee in set(levels["concurrency"]) and rows.loc["concurrency", "reason"].startswith(("at ", "every level up to 4"))
    by_level = levels.set_index("concurrency")["tokens_per_s"]
    assert rows.loc["concurrency", "tokens_per_s"] == by_level[knee] and (by_level[by_level.index <= knee].diff().dropna() > 0).all()
    assert rows.loc["server", "max_qps"] > 0 and 0 < rows.loc["server", "ttft_s"] < 2 and rows.loc["server", "tpot_s"] < 0.5
    assert ((rows["goodput"] >= 0) & (rows["goodput"] <= 1)).all() and rows.loc["server", "goodput"] >= 0.9  # judged at the 90th percentile
    ceiling = json.loads((output_dir / "environment.json").read_text())["threads"]["client_ceiling"]
    assert ceiling["requests_per_s"] > 0 and ceiling["tokens_per_s"] == ceiling["requests_per_s"] * ceiling["tokens"]
    served = rows["tokens_per_s"] / LOAD["new_tokens"]  # requests per second
    assert ((rows["client_share"] - served / ceiling["requests_per_s"]).abs() < 0.05 * rows["client_share"]).all()
    assert (rows["token_agreement"] == 1.0).all()
    table = scenario_table(load_rows([tmp_path])).set_index("environment")  # the summary's table: the knee is the sweep's figure
    assert table.loc["cpu-transformers-serve", "knee_tokens_per_s"] == rows.loc["concurrency", "tokens_per_s"]
    # The summary's sweep plot: a line through the levels in each panel, the knee starred, the bounds dashed; the server's
    # bound in words is the token bounds'.
    assert token_bounds_ms([tmp_path]) == (LOAD["ttft_bound_ms"], LOAD["tpot_bound_ms"])
    assert bound_text(load_rows([tmp_path]), [tmp_path]) == "within 2000 ms to the first token and 500 ms per output token at the 90th percentile"
    sweep = concurrency_sweep(levels.assign(model="llama"), rows.reset_index().assign(model="llama"), *token_bounds_ms([tmp_path]))
    for ax, figure, bound in zip(sweep.axes, ("ttft_s", "tpot_s"), (LOAD["ttft_bound_ms"], LOAD["tpot_bound_ms"])):
        median, _, bound_line = ax.lines
        assert list(median.get_xdata()) == list(levels["tokens_per_s"]) and list(median.get_ydata()) == pytest.approx(list(levels[figure] * 1e3))
        assert list(bound_line.get_ydata()) == [bound, bound]
        (star,) = [points for points in ax.collections if len(points.get_offsets())]
        assert star.get_offsets()[0][0] == by_level[knee]


@pytest.mark.e2e
@pytest.mark.full  # vLLM starts in minutes on a 2-core CPU: `make test-full` runs it where its environment is made
def test_vllm_where_its_environment_is_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cpu-vllm on a tiny Llama folder with heads of 64 (its CPU attention's smallest): ok, its tokens counted from its
    token ids and usage, and in agreement with eager float32's. Skipped, with the environment's own line, where its
    Python environment is not made (`benchlib engines install cpu-vllm`, minutes; never part of the suite's time): the
    user's own (the tests' build cache is their own, but an engine's environment is read where the user made it)."""
    import platformdirs

    monkeypatch.setenv(ENGINES_VARIABLE, os.environ.get(ENGINES_VARIABLE) or str(Path(platformdirs.user_cache_dir("benchlib")) / "engines"))
    vllm = environment("cpu-vllm")
    why = load_backend("openai", "stream", options=vllm["options"], workload="generate", environment="cpu-vllm").unsupported()
    if why is not None:
        pytest.skip(why)
    llama = save_llama(tmp_path / "llama64", hidden_size=128, num_attention_heads=2, num_key_value_heads=2, intermediate_size=256)
    rows = run_environment({**vllm, "models": [str(llama)], **GRID, "output_dir": str(tmp_path / "cpu-vllm")}, progress=False)
    assert list(rows["status"]) == [OK], rows["reason"].tolist()
    assert rows.iloc[0]["ttft_s"] > 0 and rows.iloc[0]["tpot_s"] > 0 and rows.iloc[0]["token_agreement"] == 1.0


DYING_ENGINE = r"""
    import http.server, os, sys

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"{}")

        def do_POST(self):
            if sys.argv[2] == "garbled":
                self.rfile.read(int(self.headers["content-length"]))
                self.send_response(200); self.send_header("content-length", "17"); self.end_headers()
                self.wfile.write(b"data: <garbled>\n\n")
                return
            print("the engine fell over while generating", flush=True)
            os._exit(7)

    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


@pytest.mark.e2e
def test_an_engine_that_cannot_start_or_dies_gives_rows_and_the_run_goes_on(tmp_path: Path, llama: Path) -> None:
    """An engine that exits before answering: each cell `error` with its own message; one that dies at its first request:
    `crashed` with its log's last lines; one whose stream is not the API's: `error` saying what it sent; no process is
    left either way."""
    script = tmp_path / "dying_engine.py"
    script.write_text(textwrap.dedent(DYING_ENGINE))
    cases = {
        "cannot-start": ("{python} -c \"import sys; print('cannot load {model}'); sys.exit(3)\"", ERROR, "exited with status 3 before answering"),
        "dies": (f"{{python}} {script} {{port}} dies", CRASHED, "exited with status 7 while serving a request"),
        "garbled": (f"{{python}} {script} {{port}} garbled", ERROR, "MalformedStream: an event of the stream is not JSON: '<garbled>'"),
    }
    for name, (command, expected, words) in cases.items():
        output_dir = tmp_path / name
        params = {"environment": name, "framework": "openai", "mode": "stream", "options": {"serve": command, "ready_timeout_s": 30}}
        sizes = [1] if name == "garbled" else [1, 2]  # a failed request waits DYING_S for the engine to end: one cell shows it
        rows = run_environment({**params, "models": [str(llama)], **GRID, "batch_sizes": sizes, "output_dir": str(output_dir)}, progress=False)
        assert list(rows["status"]) == [expected] * len(sizes), rows["reason"].tolist()
        assert rows["reason"].str.contains(words, regex=False).all(), rows["reason"].tolist()
        if name != "garbled":  # the engine's own words: the log's last lines
            assert rows["reason"].str.contains("cannot load" if name == "cannot-start" else "fell over").all()
        assert not [p for p in psutil.process_iter(["cmdline"]) if str(script) in " ".join(p.info["cmdline"] or ()) or "cannot load" in " ".join(p.info["cmdline"] or ())]


def test_a_missing_venv_or_engine_is_one_line(tmp_path: Path) -> None:
    """An engine of its own Python environment that is not made: every cell `unsupported` with the command that makes it;
    an environment that names no engine, or both a URL and a command: one line before anything starts."""
    options = {"serve": "{python} -m vllm.entrypoints.openai.api_server --model {model}", "venv": ["no-such-engine==1.0"]}
    backend = load_backend("openai", "stream", options=options, workload="generate", environment="cpu-engine")
    assert backend.unsupported() == (
        f"the engine's own Python environment is not made ({Venv(('no-such-engine==1.0',)).folder}): run `python -m benchlib engines install cpu-engine`"
    )
    with pytest.raises(ValueError, match="needs url .* or serve"):
        load_backend("openai", "stream", workload="generate")
    with pytest.raises(ValueError, match="not both"):
        load_backend("openai", "stream", options={"url": "http://127.0.0.1:1", "serve": "x"}, workload="generate")
    forward = load_backend("openai", "stream", options={"url": "http://127.0.0.1:1"})
    assert forward.unsupported() == "a serving engine generates: run it with workload: generate"



def test_gpu_vllm_validates_and_without_a_gpu_is_unsupported_with_the_reason(tmp_path: Path, run_cli_in_process, monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu-vllm (vLLM's GPU package in its own environment, device cuda) validates with its settings; where nvidia-smi
    finds no GPU its cells are `unsupported` saying so, before its environment is looked for, and `engines install`
    makes nothing: one line, or its skip among every engine's."""
    from benchlib import machine

    if machine.gpus():
        pytest.skip("nvidia-smi finds a GPU here: gpu-vllm may run")
    monkeypatch.setenv(ENGINES_VARIABLE, str(tmp_path / "engines"))  # a folder without any engine's environment
    values = environment("gpu-vllm")
    params = validate_params({**values, "models": ["gpt2"], **GRID, "output_dir": str(tmp_path)})
    assert params.device == "cuda" and list(params.options["venv"]) == ["vllm==0.33.*"] and params.options["engine_args"] == {"gpu-memory-utilization": 0.8}
    backend = load_backend("openai", "stream", device="cuda", options=values["options"], workload="generate", environment="gpu-vllm")
    assert backend.unsupported() == "device cuda: nvidia-smi finds no GPU on this machine, and this engine runs on one"
    code, out, err = run_cli_in_process(["engines", "install", "gpu-vllm"])
    assert code == 2 and out == "" and err.strip() == "gpu-vllm: its engine runs on a CUDA GPU, and nvidia-smi finds none on this machine: its environment is not made"
    assert not (tmp_path / "engines").exists()

def test_a_port_taken_first_is_tried_again_then_one_line(tmp_path: Path) -> None:
    """A server that finds its port taken is started again on another; after PORT_TRIES, one line with its message."""
    command = "{python} -c \"import sys; print('OSError: [Errno 98] Address already in use: {port}'); sys.exit(1)\""
    with pytest.raises(RuntimeError, match="found its port taken 3 times: .*Address already in use") as raised:
        start_engine(command, "model", "float32", tmp_path / "engine.log", 10)
    ports = {line.rsplit(" ", 1)[-1] for line in (tmp_path / "engine.log").read_text().splitlines() if line.startswith("OSError")}
    assert len(ports) == 3 and "\n" not in str(raised.value)


@pytest.mark.e2e
def test_engines_install_makes_the_venv_once(tmp_path: Path, run_cli_in_process, monkeypatch: pytest.MonkeyPatch) -> None:
    """`engines install FILE` makes the engine's own environment under the build cache (what pip installs, less what it
    removes after), then says it is made; an environment that is not an engine's is one line."""
    monkeypatch.delenv(ENGINES_VARIABLE, raising=False)  # the tests' own build cache, never the user's engines
    file = tmp_path / "cpu-engine.yaml"
    options = {"serve": "{python} -m engine --port {port}", "venv": ["six", "idna"], "venv_python": sys.executable, "venv_remove": ["idna"]}
    file.write_text(yaml.safe_dump({"environment": "cpu-engine", "framework": "openai", "mode": "stream", "options": options}))
    code, out, err = run_cli_in_process(["engines", "install", str(file)])
    venv = Venv(("six", "idna"), sys.executable, ("idna",))
    assert code == 0 and f"{venv.folder} is made" in out, err
    imports = subprocess.run([str(venv.interpreter), "-c", "import six; import idna"], capture_output=True, text=True)
    assert "No module named 'idna'" in imports.stderr
    assert load_backend("openai", "stream", options=options, workload="generate").unsupported() is None
    code, out, _ = run_cli_in_process(["engines", "install", str(file)])
    assert code == 0 and out.strip() == f"{file}: {venv.folder} is made"
    code, _, err = run_cli_in_process(["engines", "install", "cpu-pytorch"])
    assert code == 2 and err.strip() == "cpu-pytorch: framework 'pytorch' is not a serving engine's (openai)"


@pytest.mark.e2e
def test_a_url_engine_with_an_api_key_that_no_output_holds(tmp_path: Path, llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`url:` a running server (here a loopback one that streams four tokens of id 1 at once), its API key read from the
    variable `api_key_env` names: the cell is timed, its tokens compared (they are not eager float32's), and the key is
    in no file of the run."""
    from benchlib.backends._ceiling import INSTANT_SERVER
    from benchlib.backends._engine import answers, free_port, stop_group

    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", INSTANT_SERVER, str(port), "4"], start_new_session=True)
    try:
        while not answers(f"http://127.0.0.1:{port}", timeout_s=0.5):
            assert server.poll() is None
        monkeypatch.setenv("ENGINE_KEY", "key-that-stays-secret")
        options = {"url": f"http://127.0.0.1:{port}", "api_key_env": "ENGINE_KEY", "model_name": "instant", "stream_usage": False}
        params = {"environment": "remote", "framework": "openai", "mode": "stream", "options": options}
        rows = run_environment({**params, "models": [str(llama)], **GRID, "output_dir": str(tmp_path / "remote")}, progress=False)
    finally:
        stop_group(server)
    assert list(rows["status"]) == [OK], rows["reason"].tolist()
    assert rows.iloc[0]["ttft_s"] > 0 and rows.iloc[0]["token_agreement"] < 1
    assert not [path for path in (tmp_path / "remote").rglob("*") if path.is_file() and "key-that-stays-secret" in path.read_text(errors="replace")]


def test_vllms_own_settings_are_flags_and_variables_and_knobs_of_the_tune(tmp_path: Path) -> None:
    """cpu-vllm's settings (its file's engine_args, without its environment made): flags after serve; a tune's point sets a
    key (None leaves it out), an environment variable, true and false as vLLM spells them; the settings to deploy in the
    engine's words; bad input one line naming the field."""
    from benchlib.backends.openai import OpenAIOptions, knob_words

    vllm = environment("cpu-vllm")
    load = {
        **vllm, "models": ["gpt2"], "workload": "generate", "scenario": ["server"], "request_lengths": [8], "new_tokens": 4,
        "ttft_bound_ms": 2000, "tpot_bound_ms": 500, "output_dir": str(tmp_path),
    }  # fmt: skip
    space = {"engine_args.max-num-seqs": [1, 4], "engine_args.enable-chunked-prefill": [True, False], "engine_env.VLLM_CPU_KVCACHE_SPACE": [1, 4]}
    params = validate_params({**load, "tune": {"objective": "server", "space": space}})
    full = tune_space(params)
    assert full == {"engine_args.max-num-seqs": [None, 1, 4], "engine_args.enable-chunked-prefill": [None, True, False], "engine_env.VLLM_CPU_KVCACHE_SPACE": [None, 1, 4]}
    assert default_point(params.model_dump(), list(full)) == dict.fromkeys(full)  # the file sets none of them: the engine's defaults first
    point = point_params(params, "gpt2", {"engine_args.max-num-seqs": 4, "engine_args.enable-chunked-prefill": False, "engine_env.VLLM_CPU_KVCACHE_SPACE": 4}, tmp_path)
    options = OpenAIOptions(**point.options)
    command = engine_command(options.serve or "", "MODEL", 8000, "float32", "python", options.engine_args)
    assert command[command.index("float32") + 1 :] == ["--gpu-memory-utilization", "0.2", "--max-num-seqs", "4", "--no-enable-chunked-prefill"]
    assert options.variables()["VLLM_CPU_KVCACHE_SPACE"] == "4" and options.variables()["HF_HUB_OFFLINE"] == "1"
    unset = OpenAIOptions(**point_params(params, "gpt2", {"engine_args.gpu-memory-utilization": None}, tmp_path).options)
    assert "--gpu-memory-utilization" not in engine_command(unset.serve or "", "MODEL", 8000, "float32", "python", unset.engine_args)
    assert [knob_words("engine_args.enable-chunked-prefill", True), knob_words("engine_env.VLLM_CPU_KVCACHE_SPACE", 4)] == ["--enable-chunked-prefill", "VLLM_CPU_KVCACHE_SPACE=4"]
    bad = {
        "max num": ({"engine_args": {"max num": 4}}, "options: for openai: engine_args: 'max num' is not a flag's name"),
        "twice": ({"engine_args": {"dtype": "bfloat16"}}, "options: for openai: engine_args: dtype: the serve command gives --dtype already"),
        "list": ({"engine_args": {"max-num-seqs": [1, 2]}}, "options: for openai: engine_args: max-num-seqs: [1, 2] is not one value"),
        "variable": ({"engine_env": {"KV SPACE": 4}}, "options: for openai: engine_env: 'KV SPACE' is not an environment variable's name"),
        "url": ({"url": "http://127.0.0.1:1", "serve": None, "venv": []}, "options: for openai: engine_args is for an engine the kit starts: it needs serve"),
    }
    for options, message in bad.values():
        with pytest.raises(ParameterError) as raised:
            validate_params({**load, "options": {**vllm["options"], **options}})
        assert message in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(ParameterError, match=r"^parameters: tune: space.engine_args.max-num-seqs: \[1\]: max-num-seqs: \[1\] is not one value"):
        validate_params({**load, "tune": {"objective": "server", "space": {"engine_args.max-num-seqs": [[1]]}}})



@pytest.mark.e2e
@pytest.mark.full  # a kernel a point and an engine a kernel: a few minutes
def test_a_tune_of_an_engine_setting_starts_an_engine_for_each_point(tmp_path: Path, llama: Path, run_cli) -> None:
    """A tune over a setting of transformers serve: each point is an environment run of its own, in a fresh kernel, that
    starts its own engine with the point's flag (the default: none) and stops it; the settings to deploy give the flag."""
    params = tmp_path / "tune.yaml"
    params.write_text(yaml.safe_dump({
        "scenario": ["single-stream"], "request_lengths": [8], "max_batch": 1, "latency_percentile": 90, "min_duration_s": 1.0,
        "min_query_count": 8, "remeasure": 0, "tune_trials": 3, "confirm_rounds": 2,
        "tune": {"objective": "single-stream", "space": {"engine_args.attn_implementation": ["sdpa", "eager"]}},
    }))  # fmt: skip
    run = tmp_path / "run"
    done = run_cli(
        "run", "--grid", "generate-smoke", "--environments", "cpu-transformers-serve", "--models", str(llama), "--params", str(params),
        "--out", str(run), "--no-summary", "--no-limits", "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    env_dir = run / "cpu-transformers-serve"
    points = pd.read_csv(env_dir / "tuning" / "points.csv").set_index("point")
    assert len(points) == 3
    commands = []
    for number, point in points.iterrows():
        log = engine_log(env_dir / point["folder"], str(llama))
        started = [line for line in log.read_text().splitlines() if line.startswith("$ ")]
        setting = point["engine_args.attn_implementation"]
        assert len(started) == 1 and started[0].endswith(" --log_level warning" if pd.isna(setting) else f" --attn_implementation {setting}"), (number, started)
        commands += started
    ports = {command.split(" --port ")[1].split()[0] for command in commands}
    assert len(ports) == 3 and not [p for p in psutil.process_iter(["cmdline"]) if "transformers_cli" in (line := p.info["cmdline"] or []) and line[line.index("--port") + 1] in ports]
    deployed = next((run / "tuned" / "cpu-transformers-serve").glob("*.yaml")).read_text()
    best = points.loc[points[OBJECTIVE_FIGURES["single-stream"]].idxmin(), "engine_args.attn_implementation"]
    assert (f"--attn_implementation {best}" if isinstance(best, str) else "the engine's default") in deployed
