"""A serving engine's process, as the `openai` backend starts it: its command line (`{model}`, `{port}`, `{dtype}` and
`{python}` substituted, the engine's own settings appended as flags) run in a process group of its own on a free
loopback port, its output written to a log file, ready once `/v1/models` or `/health` answers, and stopped (the whole
group: SIGTERM, then SIGKILL) when its model is done, when the kernel exits, and, should the kernel be killed, by the
system (the parent-death signal of its first process).

An engine that needs its own Python (`venv:` in its environment file) runs from a virtual environment under the build
cache, made once by `benchlib engines install NAME` (`engine_venv`, `install_venv`)."""

from __future__ import annotations

import ctypes
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.backends import lazy_import
from benchlib.status import Crashed, Unsupported
from benchlib.store.cache import cache_root, digest

httpx = lazy_import("httpx")  # imported by a kernel that serves, not by every kernel that loads the backends

READY_PATHS = ("/health", "/v1/models")  # /health first: transformers serve's /v1/models asks the Hub
PORT_TAKEN = ("address already in use", "errno 98")  # how a server says that its port was taken first
PORT_TRIES = 3  # a free port probed now can be taken before the engine binds it: tried again on another
LOG_TAIL_LINES = 8
STOP_GRACE_S = 10.0
PR_SET_PDEATHSIG = 1
ENGINES_VARIABLE = "BENCHLIB_ENGINES"


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """In the engine's first process, before it runs: SIGTERM when the process that started it dies (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: stopped at exit only
        pass


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` non-blank lines of `log`, joined by " | " (one line for a row's reason)."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    kept = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


def engines_root() -> Path:
    """Where the engines' own Python environments are made: `$BENCHLIB_ENGINES`, or `engines/` in the build cache."""
    return Path(os.environ.get(ENGINES_VARIABLE) or cache_root() / "engines").expanduser()


@dataclass(frozen=True)
class Venv:
    """An engine's own Python environment: what pip installs into it, the distributions removed after, its Python."""

    requirements: tuple[str, ...]
    python: str = "python3.11"
    remove: tuple[str, ...] = ()

    @property
    def folder(self) -> Path:
        """Its folder in `engines_root()`, named by a digest of what it holds."""
        return engines_root() / f"venv-{digest({'requirements': self.requirements, 'python': self.python, 'remove': self.remove})}"

    @property
    def interpreter(self) -> Path:
        return self.folder / "bin" / "python"

    def missing(self, environment: str) -> str | None:
        """Why the engine cannot start for want of its environment (one line, with the command that makes it), or None."""
        if self.interpreter.exists():
            return None
        return f"the engine's own Python environment is not made ({self.folder}): run `python -m benchlib engines install {environment}`"

    def install(self) -> Path:
        """Make it (once): `python -m venv`, pip install the requirements, uninstall `remove`. Returns its folder."""
        if self.interpreter.exists():
            return self.folder
        partial = self.folder.with_name(f".partial-{self.folder.name}")
        subprocess.run([self.python, "-m", "venv", "--clear", str(partial)], check=True)
        pip = [str(partial / "bin" / "python"), "-m", "pip"]
        subprocess.run([*pip, "install", *self.requirements], check=True)
        if self.remove:
            subprocess.run([*pip, "uninstall", "-y", *self.remove], check=True)
        partial.rename(self.folder)  # a venv's scripts name its folder: rewritten by pip only; the interpreter runs by path
        return self.folder


@dataclass
class EngineProcess:
    """A started engine: its command, port, log file and process (the leader of its own process group)."""

    command: list[str]
    port: int
    log: Path
    process: subprocess.Popen[bytes]
    _finalizer: weakref.finalize = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._finalizer = weakref.finalize(self, stop_group, self.process)  # at exit too

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def exited(self) -> int | None:
        """Its exit status once it has ended, else None."""
        return self.process.poll()

    def exited_within(self, seconds: float) -> int | None:
        """Its exit status if it ends within `seconds`, else None."""
        try:
            return self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def died(self, doing: str) -> Crashed:
        """The failure of a request to an engine that has ended: its status and the last lines of its log."""
        return Crashed(f"the engine exited with status {self.exited()} while {doing}: {log_tail(self.log)}")

    def stop(self) -> None:
        """Stop its whole process group, and wait for it."""
        self._finalizer()


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to `process`'s group, SIGKILL to what is left after a grace period; waits for `process`."""
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sent)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=STOP_GRACE_S)
            try:  # the leader is gone: anything left in its group is killed too
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break
        except subprocess.TimeoutExpired:
            continue
    if process.poll() is None:
        process.wait()


def engine_flags(settings: Mapping[str, Any]) -> list[str]:
    """The engine's own settings as flags: `--name value`; true is `--name` alone, false `--no-name` (argparse's and
    vLLM's spelling); None is left out (the engine's default)."""
    flags = []
    for name, value in settings.items():
        if value is True:
            flags.append(f"--{name}")
        elif value is False:
            flags.append(f"--no-{name}")
        elif value is not None:
            flags += [f"--{name}", str(value)]
    return flags


def template_flags(template: str) -> set[str]:
    """The names of the flags a command line gives (`--max_num_seqs` and `--max-num-seqs` both as `max-num-seqs`)."""
    return {flag_name(part[2:].partition("=")[0]) for part in shlex.split(template) if part.startswith("--")}


def flag_name(name: str) -> str:
    """A flag's name as engines read it: underscores and dashes alike."""
    return name.replace("_", "-")


def engine_command(template: str, model: str, port: int, dtype: str, python: str, settings: Mapping[str, Any] | None = None) -> list[str]:
    """The engine's command line: `template` split as a shell would, with {model}, {port}, {dtype} and {python}
    substituted, then its own `settings` as flags (`engine_flags`)."""
    values = {"model": model, "port": str(port), "dtype": dtype, "python": python}
    try:
        return [part.format(**values) for part in shlex.split(template)] + engine_flags(settings or {})
    except KeyError as exc:
        raise ValueError(f"serve: {{{exc.args[0]}}} is not a placeholder; the command may use {{model}}, {{port}}, {{dtype}} and {{python}}") from None


def answers(base_url: str, timeout_s: float = 2.0) -> bool:
    """Whether `/v1/models` or `/health` at `base_url` answers with a success."""
    for path in READY_PATHS:
        try:
            if httpx.get(base_url + path, timeout=timeout_s).is_success:
                return True
        except httpx.HTTPError:
            continue
    return False


def start_engine(
    template: str, model: str, dtype: str, log: Path, ready_timeout_s: float, python: str = sys.executable, env: dict[str, str] | None = None,
    unset: tuple[str, ...] = (), settings: Mapping[str, Any] | None = None,
) -> EngineProcess:  # fmt: skip
    """Start the engine of `template` for the model folder `model` and wait until it answers (`ready_timeout_s`). An engine
    that ends before then, or does not answer in time, is stopped and raised as a RuntimeError with its log's last lines
    (its own message: a model it cannot load, a missing package); a port taken first is tried again on another; a command
    that cannot run at all is `Unsupported`. It inherits this process's environment, less `unset`, with `env`; the engine's
own `settings` are flags after the command (`engine_command`)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(PORT_TRIES):
        port = free_port()
        command = engine_command(template, model, port, dtype, python, settings)
        with open(log, "ab") as output:
            output.write(f"$ {shlex.join(command)}\n".encode())
            output.flush()
            try:
                process = subprocess.Popen(
                    command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                    preexec_fn=_die_with_parent, env={**{k: v for k, v in os.environ.items() if k not in unset}, **(env or {})},
                )  # fmt: skip
            except OSError as exc:
                raise Unsupported(f"the engine's command cannot start ({command[0]}): {exc.strerror or exc}") from None
        engine = EngineProcess(command, port, log, process)
        deadline = time.monotonic() + ready_timeout_s
        while engine.exited() is None and time.monotonic() < deadline:
            if answers(engine.base_url):
                return engine
            time.sleep(0.25)
        engine.stop()
        tail = log_tail(log)
        if any(words in tail.lower() for words in PORT_TAKEN):
            continue
        if engine.process.returncode is not None and time.monotonic() < deadline:
            raise RuntimeError(f"the engine exited with status {engine.process.returncode} before answering: {tail}")
        raise RuntimeError(f"the engine did not answer at /v1/models or /health within ready_timeout_s {ready_timeout_s:g}: {tail}")
    raise RuntimeError(f"the engine found its port taken {PORT_TRIES} times: {log_tail(log)}")
