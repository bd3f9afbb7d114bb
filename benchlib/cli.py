"""`python -m benchlib`: run the benchmark (`run`), render a run's summary (`summary`), compare two runs (`compare`), publish
runs as a static site (`publish`), list or clear the build cache (`cache`), make a serving engine's own Python environment
(`engines install`), open the notebooks (`lab`)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchlib import status
from benchlib.analysis.compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD
from benchlib.analysis.cost import PriceError, check_price, run_machines
from benchlib.backends import not_installed_message
from benchlib.config.jobs import (
    DEFAULT_ENVIRONMENTS, DEFAULT_GRID, GPU_DEFAULT_ENVIRONMENTS, available, default_environments, default_run_dir, load_parameter_file, plan_run,
    resolve_parameter_file,
)  # fmt: skip
from benchlib.config.params import ParameterError
from benchlib.launch.estimate import Remaining, estimate_run, max_run_minutes
from benchlib.launch.execution import DEFAULT_MAX_RESTARTS
from benchlib.launch.local import format_duration, measure_machine_limits, needs_machine_limits, report_energy_counters, run_jobs
from benchlib.launch.signals import stoppable
from benchlib.machine import gpus
from benchlib.paths import PROJECT_ROOT
from benchlib.store.cache import CACHE_VARIABLE, cache_root
from benchlib.store.cache import clear as clear_cache
from benchlib.store.cache import entries as cache_entries
from benchlib.store.disk import size_text, stops_on_full_disk
from benchlib.store.layout import COMPARE_DIR_PREFIX, SITE_DIR

# jsonschema (under nbformat, under papermill) imports rfc3987_syntax for its "iri" format checker, which builds some 35
# parsers as it loads: 2.5 s of every command's start on a fast core (python-jsonschema/jsonschema#1428). No notebook's
# schema uses that format: the commands go without it.
sys.modules.setdefault("rfc3987_syntax", None)

USAGE_ERROR = 2
CLUSTER_DISTRIBUTIONS = ("dask", "distributed", "cryptography")  # the cluster extra: pip install 'benchlib[cluster]'
CLUSTER_FLAGS = {
    "--tls": lambda args: args.tls is not None,
    "--insecure": lambda args: args.insecure,
    "--allow-mismatch": lambda args: args.allow_mismatch,
    "--scheduler-wait": lambda args: args.scheduler_wait is not None,
}


def build_parser() -> argparse.ArgumentParser:
    """The command line: `run`, `summary`, `compare`, `publish`, `cache`, `engines` and `lab`."""
    parser = argparse.ArgumentParser(prog="benchlib", description="Transformer inference benchmarks driven by papermill.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="measure environments (one notebook execution each), then render the summary")
    run.add_argument("--grid", default=DEFAULT_GRID, help=f"grid name in parameters/grids/ or a .yaml path (default: {DEFAULT_GRID})")
    run.add_argument(
        "--environments",
        help="a set of parameters/sets.yaml (default, study, today, gpu-default, ...; all: every environment for this machine's devices; "
        "gpu: every GPU environment whose packages are installed), or comma-separated environment names in parameters/environments/ "
        f"and .yaml paths (default: {','.join(DEFAULT_ENVIRONMENTS)}, or {','.join(GPU_DEFAULT_ENVIRONMENTS)} where nvidia-smi finds a GPU)",
    )
    run.add_argument(
        "--models", metavar="A,B,...",
        help="the models to measure instead of the grid's: catalogue names, folders holding a transformers checkpoint, or Hugging Face Hub ids",
    )  # fmt: skip
    run.add_argument("--online", action="store_true", help="fetch Hub ids missing from the local Hugging Face cache (offline: false); kernels stay offline")
    run.add_argument("--params", action="append", default=[], metavar="FILE", help="a .yaml file of parameter values set over the grid's and the environment's; repeatable, later files win")
    run.add_argument("--out", type=Path, help="the run folder (default: outputs/<timestamp>); a rerun on the same folder measures only the missing cells")
    run.add_argument("--force", action="store_true", help="measure every cell again; earlier results are kept as results.<timestamp>.csv")
    run.add_argument("--max-restarts", type=int, default=DEFAULT_MAX_RESTARTS, metavar="N", help=f"restarts of an environment whose kernel died mid-cell (default: {DEFAULT_MAX_RESTARTS})")
    run.add_argument("--no-summary", action="store_true", help="do not render the summary after the environments")
    run.add_argument("--no-limits", action="store_true", help="do not measure the machine's peak GEMM rate and memory bandwidth (machine_limits.json)")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.add_argument("--yes", action="store_true", help="run a load run whose estimate is over max_run_minutes without asking")
    run.add_argument("--machine-name", metavar="NAME", help="a name for this machine in the decision across machines (default: its hostname), recorded with the run")
    run.add_argument("--price-per-hour", metavar="PRICE", help="what this machine costs an hour, for the cost per million requests (default: none, no cost shown)")
    run.add_argument("--currency", metavar="CODE", help="the price's currency, an ISO 4217 code (default: USD)")
    run.add_argument(
        "--cluster", metavar="ADDRESS",
        help="run each environment as a task on the Dask cluster whose scheduler is at ADDRESS (tls://HOST:PORT with --tls; "
        "tcp:// on this machine's loopback), one per worker started with --resources benchmark=1; local:N starts N such workers on this machine, over TLS",
    )  # fmt: skip
    run.add_argument("--tls", type=Path, metavar="DIR", help="--cluster: the folder of the cluster's certificates, made by `python -m benchlib cluster certs DIR`")
    run.add_argument("--insecure", action="store_true", help="--cluster: allow a plain tcp:// scheduler across a network (environment.json records it); local:N without TLS")
    run.add_argument("--allow-mismatch", action="store_true", help="--cluster: give tasks to workers whose kit or packages differ from this machine's, the differences recorded")
    run.add_argument(
        "--scheduler-wait", type=float, metavar="SECONDS",
        help="--cluster: how long to wait for a scheduler lost mid-run to answer again before stopping (default: 60)",
    )  # fmt: skip

    cluster = commands.add_parser("cluster", help="cluster certs DIR: a CA and the TLS certificates and keys of a Dask cluster's scheduler, workers and client")
    cluster.add_argument("action", choices=("certs",), help="certs: write the certificates")
    cluster.add_argument("folder", type=Path, metavar="DIR", help="where to write them (ca.pem, scheduler.pem/.key, worker.pem/.key, client.pem/.key)")

    summary = commands.add_parser("summary", help="render the summary of one or more run folders (from several machines: which machine, at what price)")
    summary.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    summary.add_argument("--prices", type=Path, metavar="FILE", help="a YAML list of machines (name, price_per_hour, currency, source, date) pricing the runs' machines")

    compare = commands.add_parser("compare", help="what got faster or slower from run A to run B (exit status 1 when an environment got slower)")
    compare.add_argument("run_a", type=Path, metavar="RUN_A")
    compare.add_argument("run_b", type=Path, metavar="RUN_B")
    compare.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help=f"the smallest change that counts, as a fraction (default: {DEFAULT_THRESHOLD})")
    compare.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help=f"significance level of each cell's Mann-Whitney U test (default: {DEFAULT_ALPHA})")
    compare.add_argument("--out", type=Path, help=f"the report folder (default: RUN_B/{COMPARE_DIR_PREFIX}<name of RUN_A>)")

    publish = commands.add_parser("publish", help="one or more runs as a static site (summaries, executed notebooks, tables) to open from the folder or any host")
    publish.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN")
    publish.add_argument("--out", type=Path, required=True, help="the site's folder (its index.html opens the site)")

    cache = commands.add_parser("cache", help="list the build cache (models' weights, exports, compiled models), or clear it")
    cache.add_argument("action", nargs="?", choices=("list", "clear"), default="list", help="list (default) or clear the entries")
    cache.add_argument("--older-than", type=float, metavar="DAYS", help="clear: only the entries not used for DAYS days")

    engines = commands.add_parser("engines", help="install: make the Python environment of a serving engine that runs in one of its own (cpu-vllm)")
    engines.add_argument("action", choices=("install",), help="install: make it once, under the build cache")
    engines.add_argument("names", nargs="*", metavar="NAME", help="environments (names or .yaml paths); default: every shipped one that has its own")

    commands.add_parser("lab", help="start JupyterLab on notebooks/ (other arguments go to jupyter lab)")
    return parser


def render_summary(run_dirs: list[Path], prices: Path | None = None) -> bool:
    """Render the summary of `run_dirs` (their machines priced by `prices` where given); prints where summary.html is, or
    why it failed."""
    try:
        from benchlib.report.render import render_summary as render

        html = render(run_dirs, prices=prices)
    except Exception as exc:  # the environments' results stay; only the summary is missing
        print(f"summary failed: {status.describe(exc)}", file=sys.stderr)
        return False
    print(f"summary: {html}")
    return True


@stoppable
@stops_on_full_disk
def command_run(args: argparse.Namespace) -> int:
    """Plan and validate every environment, run them in turn, then the summary; a full disk stops the run (one line)."""
    run_dir: Path = args.out or default_run_dir()
    if args.environments is None:
        chosen, found = default_environments()
        args.environments = ",".join(chosen)
        if found:
            print(found, flush=True)
    environments = [name.strip() for name in args.environments.split(",") if name.strip()]
    if not environments:
        print("--environments: give at least one environment", file=sys.stderr)
        return USAGE_ERROR
    if args.max_restarts < 0:
        print(f"--max-restarts: must be 0 or more, not {args.max_restarts}", file=sys.stderr)
        return USAGE_ERROR
    if not args.cluster and (cluster_only := [flag for flag, given in CLUSTER_FLAGS.items() if given(args)]):
        print(f"{cluster_only[0]}: goes with --cluster", file=sys.stderr)
        return USAGE_ERROR
    if args.cluster:
        try:
            from benchlib.launch.cluster import DEFAULT_SCHEDULER_WAIT_S, ClusterError, SchedulerLostError, run_on_cluster
            from benchlib.launch.connection import plan_target
        except ImportError as error:  # the cluster extra is not installed: say which pip line installs it
            if (missing := (error.name or "").split(".")[0]) not in CLUSTER_DISTRIBUTIONS:
                raise
            print(f"--cluster: {not_installed_message([missing], 'cluster')}", file=sys.stderr)
            return USAGE_ERROR
        args.scheduler_wait = DEFAULT_SCHEDULER_WAIT_S if args.scheduler_wait is None else args.scheduler_wait
        if args.scheduler_wait <= 0:
            print(f"--scheduler-wait: must be more than 0 seconds, not {args.scheduler_wait:g}", file=sys.stderr)
            return USAGE_ERROR
        try:
            target = plan_target(args.cluster, args.tls, args.insecure)
        except ClusterError as error:
            print(error, file=sys.stderr)
            return USAGE_ERROR
    overrides = {"offline": (False, "--online")} if args.online else {}
    if args.price_per_hour is not None:
        try:
            args.price_per_hour = check_price(float(args.price_per_hour), "--price-per-hour")
        except ValueError:  # not a number (PriceError is one too)
            print(f"--price-per-hour: must be a number above 0 (what the machine costs an hour), not {args.price_per_hour!r}", file=sys.stderr)
            return USAGE_ERROR
    for name in ("machine_name", "price_per_hour", "currency"):
        if getattr(args, name) is not None:
            overrides[name] = (getattr(args, name), f"--{name.replace('_', '-')}")
    if args.models is not None:
        models = [name.strip() for name in args.models.split(",") if name.strip()]
        if not models:
            print("--models: give at least one model", file=sys.stderr)
            return USAGE_ERROR
        overrides["models"] = (models, "--models")
    try:
        jobs = plan_run(run_dir, args.grid, environments, args.params, overrides)
    except ParameterError as error:
        print(error, file=sys.stderr)
        return USAGE_ERROR
    if not args.cluster and (on_gpu := [job.name for job in jobs if job.params.device.startswith("cuda")]) and not gpus():
        print(f"--environments: {', '.join(dict.fromkeys(on_gpu))} run on a CUDA GPU, and nvidia-smi finds none on this machine: choose cpu-* environments, or run where a GPU is", file=sys.stderr)
        return USAGE_ERROR
    if any(job.params.tune is not None for job in jobs) and importlib.util.find_spec("optuna") is None:
        print(f"tune: {not_installed_message(['optuna'], 'tune')}", file=sys.stderr)
        return USAGE_ERROR
    if args.cluster and (tuned := [job.name for job in jobs if job.params.tune is not None]):
        print(f"--cluster: a tune runs on this machine, its points one after another ({', '.join(tuned)} tune)", file=sys.stderr)
        return USAGE_ERROR
    print(f"run folder: {run_dir}", flush=True)
    cost = estimate_run(jobs)
    for line in cost.lines():
        print(line, flush=True)
    if cost.jobs and (over := cost.over(max_run_minutes(jobs))) and not (args.yes or confirmed(over)):
        print(over, file=sys.stderr)
        return USAGE_ERROR
    start = time.perf_counter()
    limits = not args.no_limits and needs_machine_limits(jobs)
    if not args.no_limits and not limits:
        print("machine limits: not measured (the run only generates text; the roofline places forward passes only)", flush=True)
    if args.cluster:
        try:
            outcomes = run_on_cluster(
                target, jobs, limits=limits, progress=not args.quiet, report=lambda line: print(line, flush=True),
                max_restarts=args.max_restarts, force=args.force, allow_mismatch=args.allow_mismatch, scheduler_wait_s=args.scheduler_wait,
            )  # fmt: skip
        except SchedulerLostError as error:
            print(error, file=sys.stderr)
            return 1
        except ClusterError as error:
            print(error, file=sys.stderr)
            return USAGE_ERROR
    else:
        if limits:
            measure_machine_limits(jobs, report=lambda line: print(line, flush=True))
        report_energy_counters(jobs, report=lambda line: print(line, flush=True))
        outcomes = run_jobs(
            jobs, progress=not args.quiet, report=lambda line: print(line, flush=True), max_restarts=args.max_restarts, force=args.force,
            remaining=Remaining(cost) if cost.jobs else None,
        )  # fmt: skip
    failed = [outcome.name for outcome in outcomes if not outcome.succeeded]
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} environments succeeded in {format_duration(time.perf_counter() - start)}", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", flush=True)
    summary_ok = args.no_summary or (render_summary([run_dir]) and publish_runs([run_dir], run_dir / SITE_DIR))
    print(f"elapsed: {format_duration(time.perf_counter() - start)}")
    return 0 if not failed and summary_ok else 1


def confirmed(over: str) -> bool:
    """Whether the person at the terminal says to go on with a run over its bound (never without a terminal)."""
    if not sys.stdin.isatty():
        return False
    try:
        return input(f"{over}\ngo on? [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def publish_runs(run_dirs: list[Path], out: Path, progress: bool = False) -> bool:
    """Publish `run_dirs` as a static site in `out`; prints where its index is, or why it failed."""
    from benchlib.report.publish import publish

    try:
        index = publish(run_dirs, out, progress=progress)
    except ValueError as error:
        print(error, file=sys.stderr)
        return False
    print(f"site: {index} (open it in a browser, or copy the folder to any static host)")
    return True


def command_summary(args: argparse.Namespace) -> int:
    """Render the summary of existing run folders."""
    missing = [str(path) for path in args.run_dirs if not path.is_dir()]
    if missing:
        print(f"RUN_DIR: no such folder: {', '.join(missing)}", file=sys.stderr)
        return USAGE_ERROR
    try:
        run_machines(args.run_dirs, args.prices)  # names, hardware and prices checked before the notebook
    except PriceError as error:
        print(error, file=sys.stderr)
        return USAGE_ERROR
    return 0 if render_summary(list(args.run_dirs), args.prices) else 1


def age_text(seconds: float) -> str:
    """How long ago, in the largest whole unit: 40 s, 12 min, 5 h, 3 days."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f} {unit}"
    return f"{max(seconds, 0):.0f} s"


def command_cache(args: argparse.Namespace) -> int:
    """List the build cache's entries, or clear them (those not used for --older-than days)."""
    if args.older_than is not None and (args.action != "clear" or args.older_than < 0):
        problem = "goes with clear" if args.action != "clear" else f"must be 0 or more days, not {args.older_than:g}"
        print(f"--older-than: {problem}", file=sys.stderr)
        return USAGE_ERROR
    root, now = cache_root(), time.time()
    if args.action == "clear":
        removed = clear_cache(args.older_than)
        print(f"{root}: removed {len(removed)} {'entry' if len(removed) == 1 else 'entries'}, {size_text(sum(e.bytes for e in removed))}")
        return 0
    found = cache_entries()
    print(f"build cache: {root} ({CACHE_VARIABLE} moves it; `python -m benchlib cache clear [--older-than DAYS]` empties it)")
    if found:
        width = max(len(entry.name) for entry in found)
        print(f"{'kind':<10} {'entry':<{width}} {'size':>9} {'made':>9} {'used':>9}")
        for entry in found:
            name = f"{entry.name} (half-made)" if entry.partial else entry.name
            print(f"{entry.kind:<10} {name:<{width}} {size_text(entry.bytes):>9} {age_text(now - entry.made):>9} {age_text(now - entry.used):>9}")
    print(f"{len(found)} {'entry' if len(found) == 1 else 'entries'}, {size_text(sum(entry.bytes for entry in found))}")
    return 0


def engine_venv(name: str) -> Any:
    """The `Venv` of the environment `name` (None where its engine needs none); ParameterError for a file that is not a
    serving engine's or whose options are wrong."""
    from pydantic import ValidationError

    from benchlib.backends.openai import OpenAIOptions

    path = resolve_parameter_file(name, "environments")
    values = load_parameter_file(path)
    if values.get("framework") != "openai":
        raise ParameterError(f"{name}: framework {values.get('framework', 'pytorch')!r} is not a serving engine's (openai)")
    try:
        return OpenAIOptions(**values.get("options", {})).own_venv
    except ValidationError as exc:
        raise ParameterError(f"{name}: options: {'; '.join(error['msg'] for error in exc.errors())}") from None


def command_engines_install(names: Sequence[str]) -> int:
    """Make the own Python environment of each engine in `names` (default: every shipped environment that has one), but
    an engine's on a GPU where nvidia-smi finds none (one line each; exit status 2 where it was named)."""
    try:
        chosen = list(names) or [name for name in available("environments") if engine_venv_or_none(name) is not None]
        venvs = {name: engine_venv(name) for name in chosen}
    except ParameterError as error:
        print(error, file=sys.stderr)
        return USAGE_ERROR
    no_gpu = [name for name in venvs if venvs[name] is not None and engine_on_gpu(name) and not gpus()]
    for name in no_gpu:  # the engine's package is a GPU build: never made where it cannot run
        print(f"{name}: its engine runs on a CUDA GPU, and nvidia-smi finds none on this machine: its environment is not made", file=sys.stderr)
        del venvs[name]
    for name, venv in venvs.items():
        if venv is None:
            print(f"{name}: its engine runs in the kit's own Python; nothing to install")
        elif venv.interpreter.exists():
            print(f"{name}: {venv.folder} is made")
        else:
            print(f"{name}: making {venv.folder} ({venv.python}, pip install {' '.join(venv.requirements)}): several minutes", flush=True)
            try:
                venv.install()
            except (OSError, subprocess.CalledProcessError) as error:
                print(f"{name}: the engine's environment could not be made: {error}", file=sys.stderr)
                return 1
            print(f"{name}: {venv.folder} is made")
    return USAGE_ERROR if names and no_gpu else 0


def engine_on_gpu(name: str) -> bool:
    """Whether environment `name` runs on a CUDA GPU."""
    return str(load_parameter_file(resolve_parameter_file(name, "environments")).get("device", "cpu")).startswith("cuda")


def engine_venv_or_none(name: str) -> Any:
    """`engine_venv`, or None for an environment that is not a serving engine's."""
    try:
        return engine_venv(name)
    except ParameterError:
        return None


def command_cluster_certs(folder: Path) -> int:
    """Write a cluster's CA, certificates and keys into `folder` and print the commands that use them."""
    try:
        from benchlib.launch.certificates import ROLES, CertificatesError, role_files, start_commands, write_certificates
    except ImportError as error:
        print(f"cluster certs: {not_installed_message([(error.name or 'cryptography').split('.')[0]], 'cluster')}", file=sys.stderr)
        return USAGE_ERROR
    try:
        write_certificates(folder)
    except CertificatesError as error:
        print(error, file=sys.stderr)
        return USAGE_ERROR
    keys = ", ".join(role_files(folder, role).key.name for role in ROLES)
    print(f"{folder}: ca.pem, and a certificate and key for the scheduler, the workers and the client ({keys}: readable by you only)")
    print("copy ca.pem with the scheduler's files to its machine, with the worker's to each worker's, with the client's to where you run; then:")
    for command in start_commands(folder):
        print(f"  {command}")
    return 0


def command_lab(jupyter_args: Sequence[str]) -> int:
    """Replace this process with JupyterLab rooted at the kit's folder and opened on notebooks/."""
    argv = [
        sys.executable, "-m", "jupyterlab",
        f"--ServerApp.root_dir={PROJECT_ROOT}",
        "--ServerApp.default_url=/lab/tree/notebooks",
        *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),  # containers often run as root
        *jupyter_args,
    ]  # fmt: skip
    os.execv(sys.executable, argv)
    return 0  # not reached: execv does not return


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m benchlib` and of the `benchlib` command; returns the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "lab":
        return command_lab(extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "compare":
        from benchlib.report.compare_report import run_compare

        return run_compare(args.run_a, args.run_b, args.threshold, args.alpha, args.out)
    if args.command == "cache":
        return command_cache(args)
    if args.command == "cluster":
        return command_cluster_certs(args.folder)
    if args.command == "engines":
        return command_engines_install(args.names)
    if args.command == "publish":
        return 0 if publish_runs(args.run_dirs, args.out, progress=True) else USAGE_ERROR
    return command_run(args) if args.command == "run" else command_summary(args)
