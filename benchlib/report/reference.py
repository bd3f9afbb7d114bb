"""The documentation's reference pages, generated from the code so that they cannot drift from it: the parameters from
`BenchmarkParams`, the backends from the registry, the environments, grids and sets from `parameters/`, the statuses from
`benchlib.status`, the command line from its argument parser, the summary's column glossary from
`benchlib.report.glossary`, and a run's headline tables from its folder.

`docs/hooks.py` fills each page when MkDocs builds the site (`fill`): `<!-- generated: NAME -->` becomes a table,
`<!-- default: FIELD -->` a parameter's default and `<!-- constant: MODULE.NAME -->` a module's constant, so that prose
names no value by hand either. The README's table of the reference run is `readme_table`, which a test holds it to.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from pydantic.fields import FieldInfo

from benchlib import status
from benchlib.backends import registry
from benchlib.config.jobs import available, environment_sets
from benchlib.config.params import BenchmarkParams
from benchlib.paths import OUTPUTS_DIR, PARAMETERS_DIR
from benchlib.report.glossary import glossary_page
from benchlib.store.environment import read_environment
from benchlib.store.layout import TABLES_DIR, TUNE_DIR, environment_dirs, point_folders

# The allowed values that validators, not the field's type, decide (from the backends' registry).
REGISTRY_ALLOWED: dict[str, Callable[[], str]] = {
    "framework": lambda: ", ".join(f"`{name}`" for name in sorted(registry())),
    "mode": lambda: "; ".join(f"{name}: " + ", ".join(f"`{mode}`" for mode in info.modes) for name, info in sorted(registry().items())),
    "precision": lambda: "; ".join(f"{name}: " + ", ".join(f"`{p}`" for p in info.precisions) for name, info in sorted(registry().items())),
    "device": lambda: "`cpu`, `cuda`, `cuda:N`",
}
REFERENCE_RUN_DIR = OUTPUTS_DIR / "reference"
# A run's headline tables (in its tables/ folder) and the columns the results page shows of each.
HEADLINE_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "framework_averages.csv": (
        "Each environment's average time per call over the cells ok in every environment, against eager PyTorch's",
        ("environment", "mean_s", "cells_used", "cells_excluded", "vs_baseline", "ci95_low", "ci95_high", "verdict"),
    ),
    "speedups.csv": (
        "Today's ways against eager PyTorch float32: the geometric mean speed-up over the cells ok in both",
        ("environment", "precision", "cells", "speedup", "ci95_low", "ci95_high", "verdict", "max_abs_diff"),
    ),
    "claims_2019.csv": ("The 2019 study's claims, checked on this run", ("claim", "value_2019", "value_this_run", "ci95_low", "ci95_high", "holds")),
}


def markdown_table(frame: pd.DataFrame) -> str:
    """`frame` as a Markdown table (numbers to four significant figures, empty cells blank)."""
    return frame.astype(object).where(frame.notna(), None).to_markdown(index=False, floatfmt=".4g", missingval="")


def _literal_values(annotation: Any) -> list[Any]:
    """The values of every `Literal` inside a type (`list[Literal["a", "b"]] | None` gives a, b)."""
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return [value for argument in typing.get_args(annotation) for value in _literal_values(argument)]


def _type_name(annotation: Any) -> str:
    """A type as a reader writes it in YAML terms: `list[int]`, `int | "cores" | null`."""
    if annotation is type(None):
        return "null"
    if typing.get_origin(annotation) is typing.Literal:
        return " | ".join(repr(value) if isinstance(value, str) else str(value) for value in typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " | ".join(_type_name(argument) for argument in typing.get_args(annotation))
    if typing.get_origin(annotation) in (list, dict):
        return f"{typing.get_origin(annotation).__name__}[{', '.join(_type_name(a) for a in typing.get_args(annotation))}]"
    if typing.get_origin(annotation) is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    return f"`{yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}`"


def _allowed(name: str, field: FieldInfo) -> str:
    if name in REGISTRY_ALLOWED:
        return REGISTRY_ALLOWED[name]()
    literals = _literal_values(field.annotation)
    bounds = []
    for constraint in field.metadata:
        for attribute, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "length ≥")):
            if getattr(constraint, attribute, None) is not None:
                bounds.append(f"{sign} {getattr(constraint, attribute)}")
    return ", ".join([*(f"`{value}`" for value in literals), *bounds])


def parameters_page() -> str:
    """Every parameter of `BenchmarkParams`: its name, type, default, allowed values and description."""
    lines = [
        {"parameter": f"`{name}`", "type": _type_name(field.annotation).replace("|", "\\|"), "default": _default(field),
         "allowed": _allowed(name, field).replace("|", "\\|"), "description": field.description or ""}
        for name, field in BenchmarkParams.model_fields.items()
    ]  # fmt: skip
    return markdown_table(pd.DataFrame(lines))


def backends_page() -> str:
    """Every registered backend: its modes, precisions, devices, options with their defaults, and what installs it."""
    lines = []
    for name, info in sorted(registry().items()):
        options = ", ".join(f"`{option}: {field.default}`" for option, field in info.options.model_fields.items())
        lines.append({
            "framework": f"`{name}`", "what it is": info.description, "modes": ", ".join(info.modes),
            "precisions": ", ".join(info.precisions), "devices": ", ".join(info.devices), "options": options,
            "install": f"`pip install 'benchlib[{info.extra}]'`" if info.extra else "the core",
        })  # fmt: skip
    return markdown_table(pd.DataFrame(lines))


def leading_comment(path: Path) -> str:
    """The comment lines at the top of a YAML file, joined into one paragraph."""
    comment = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    return " ".join(comment)


def _parameter_files(kind: str) -> Iterable[tuple[str, Path, dict[str, Any]]]:
    for name in available(kind):
        path = PARAMETERS_DIR / kind / f"{name}.yaml"
        yield name, path, yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def environments_page() -> str:
    """Every environment in `parameters/environments/`: what it sets and, from its file's comment, what runs."""
    lines = []
    for name, path, values in _parameter_files("environments"):
        setting = " / ".join(str(values.get(key, BenchmarkParams.model_fields[key].default)) for key in ("framework", "mode", "precision", "device"))
        options = ", ".join(f"`{key}: {value}`" for key, value in (values.get("options") or {}).items())
        lines.append({"environment": f"`{name}`", "framework / mode / precision / device": setting, "options": options, "what runs": leading_comment(path)})
    return markdown_table(pd.DataFrame(lines))


def grids_page() -> str:
    """Every grid in `parameters/grids/`: its models and, from its file's comment, what it is for."""
    lines = [
        {"grid": f"`{name}`", "models": ", ".join(values.get("models", [])), "what it is": leading_comment(path)}
        for name, path, values in _parameter_files("grids")
    ]  # fmt: skip
    return markdown_table(pd.DataFrame(lines))


def sets_page() -> str:
    """The named sets of environments (`parameters/sets.yaml`, and `all`)."""
    lines = [{"set": f"`{name}`", "environments": ", ".join(members)} for name, members in environment_sets().items()]
    return markdown_table(pd.DataFrame(lines))


def statuses_page() -> str:
    """The statuses a cell ends with (`benchlib.status`)."""
    return markdown_table(pd.DataFrame([{"status": f"`{name}`", "meaning": status.MEANINGS[name]} for name in status.STATUSES]))


def cli_page(parser: argparse.ArgumentParser) -> str:
    """Each command of `parser`: its usage line, what it does, and its arguments with their help."""
    sections = []
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    for name, command in commands.choices.items():
        usage = " ".join(command.format_usage().split()).removeprefix("usage: ")
        arguments = [
            {"argument": f"`{', '.join(action.option_strings) or action.metavar or action.dest}`", "what": (action.help or "").replace("|", "\\|")}
            for action in command._actions if not isinstance(action, argparse._HelpAction)
        ]  # fmt: skip
        table = markdown_table(pd.DataFrame(arguments)) if arguments else ""
        sections.append(f"### `{name}`\n\n{helps.get(name, '')}\n\n```\n{usage}\n```\n\n{table}".rstrip())
    return "\n\n".join(sections)


def run_facts(run_dir: str | os.PathLike[str], link: str | None = None) -> str:
    """A run's machine, date, grid and environments (from its environment.json files), as a Markdown list; `link` to
    its published site where given."""
    run_dir = Path(run_dir)
    infos = {env_dir.name: read_environment(env_dir) for env_dir in environment_dirs(run_dir)}
    for env_dir in sorted(path for path in run_dir.glob(f"*/{TUNE_DIR}") if path.is_dir()):  # tuned: its first point's record
        if points := point_folders(env_dir.parent):
            infos.setdefault(env_dir.parent.name, read_environment(points[0]))
    if not infos:
        raise ValueError(f"{run_dir}: no environment folder")
    first = next(iter(infos.values()))
    machine, parameters = first.get("machine", {}), first.get("parameters", {})
    dates = sorted(info["date"][:10] for info in infos.values() if info.get("date"))
    memory = machine.get("memory_bytes")
    facts = [
        f"- **Machine:** {machine.get('cpu', '?')}, {machine.get('physical_cores', '?')} cores"
        + (f", {memory / 2**30:.0f} GiB" if memory else "") + (f", GPUs: {', '.join(machine['gpus'])}" if machine.get("gpus") else ""),
        f"- **Date:** {dates[0] if dates else '?'}" + (f" to {dates[-1]}" if dates and dates[-1] != dates[0] else ""),
        f"- **Grid:** {', '.join(parameters.get('models', []))}; batch sizes {parameters.get('batch_sizes')}, sequence lengths "
        f"{parameters.get('sequence_lengths')}; {parameters.get('repeat')} samples of {parameters.get('number')} calls, "
        f"{parameters.get('rounds', 1)} round(s)",
        f"- **Environments:** {', '.join(sorted(infos))}",
    ]  # fmt: skip
    if link:  # raw HTML: a page of the published run, which MkDocs does not know among its own
        facts.append(f'- **The whole run:** <a href="{link}">its summary, environments and files</a>')
    return "\n".join(facts)


def run_tables(run_dir: str | os.PathLike[str]) -> str:
    """A run's headline tables (HEADLINE_TABLES, those its summary wrote) in Markdown, each with its caption."""
    sections = []
    for file, (caption, columns) in HEADLINE_TABLES.items():
        path = Path(run_dir) / TABLES_DIR / file
        if path.is_file():
            frame = pd.read_csv(path)
            sections.append(f"**{caption}** (`{TABLES_DIR}/{file}`):\n\n{markdown_table(frame[[c for c in columns if c in frame]])}")
    return "\n\n".join(sections)


README_TABLE = ("<!-- reference-table: generated from outputs/reference (tests/report/test_reference.py) -->", "<!-- /reference-table -->")


def readme_table() -> str:
    """The README's small table: the reference run's speed-ups over eager PyTorch float32, between README_TABLE's markers."""
    frame = pd.read_csv(REFERENCE_RUN_DIR / TABLES_DIR / "speedups.csv")
    frame = frame[["environment", "precision", "speedup", "ci95_low", "ci95_high", "verdict"]]
    return f"{README_TABLE[0]}\n{markdown_table(frame)}\n{README_TABLE[1]}"


GENERATED = re.compile(r"<!-- generated: ([a-z-]+) -->")
DEFAULT = re.compile(r"<!-- default: ([a-z_]+) -->")
# A module's constant: `<!-- constant: benchlib.measure.timing.WARMUP_TOLERANCE % -->` (a fraction as a percentage),
# `... GEMM_SIZE[cpu] -->` (a key of a mapping), a unit `ms` (seconds as milliseconds) or `MiB` (bytes).
CONSTANT = re.compile(r"<!-- constant: (benchlib(?:\.[a-z_]+)+)\.([A-Z_]+)(?:\[([a-z]+)\])?(?: (%|ms|MiB))? -->")
UNITS: dict[str | None, Callable[[float], str]] = {
    None: lambda value: f"{value:g}", "%": lambda value: f"{value * 100:g}%", "ms": lambda value: f"{value * 1000:g} ms",
    "MiB": lambda value: f"{value / 2**20:g} MiB",
}  # fmt: skip


def constant(match: re.Match[str]) -> str:
    """The value of the module constant a CONSTANT marker names, in its unit."""
    module, name, key, unit = match.groups()
    value = getattr(importlib.import_module(module), name)
    return UNITS[unit](value[key] if key else value)
REFERENCE_RUN_LINK = "reference-run/index.html"  # where docs/hooks.py publishes outputs/reference in the site


def fill(markdown: str, parser: argparse.ArgumentParser) -> str:
    """A page's Markdown with each `<!-- generated: NAME -->` replaced by `generate(NAME)` (the command line's from
    `parser`, `reference-run` from outputs/reference, linked to its published site), each `<!-- default: FIELD -->`
    by that parameter's default and each CONSTANT marker by the constant's value."""

    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "reference-run":
            return f"{run_facts(REFERENCE_RUN_DIR, REFERENCE_RUN_LINK)}\n\n{run_tables(REFERENCE_RUN_DIR)}"
        return cli_page(parser) if name == "cli" else generate(name)

    def default(match: re.Match[str]) -> str:
        if match.group(1) not in BenchmarkParams.model_fields:
            raise KeyError(f"no parameter {match.group(1)!r} for a default")
        return _default(BenchmarkParams.model_fields[match.group(1)])

    return CONSTANT.sub(constant, DEFAULT.sub(default, GENERATED.sub(generated, markdown)))


PAGES: dict[str, Callable[[], str]] = {
    "parameters": parameters_page, "backends": backends_page, "environments": environments_page, "grids": grids_page,
    "sets": sets_page, "statuses": statuses_page, "glossary": glossary_page,
}  # fmt: skip


def generate(name: str) -> str:
    """The generated Markdown called `name` (one of PAGES)."""
    if name not in PAGES:
        raise KeyError(f"no generated page {name!r}: one of {', '.join([*PAGES, 'cli', 'reference-run'])}")
    return PAGES[name]()
