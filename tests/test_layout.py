"""The package's layout: imports flow one way through the pipeline's packages, and only `store/` names run-folder files."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from benchlib.paths import PROJECT_ROOT
from benchlib.store import layout

PACKAGE = PROJECT_ROOT / "benchlib"
# Lowest first: a module may import from its own layer and the layers before it, never after.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("paths", "status", "machine"),
    ("store",),
    ("backends",),
    ("config",),
    ("workloads",),
    ("scenarios",),
    ("measure",),
    ("launch",),
    ("analysis",),
    ("report",),
    ("cli", "__main__"),
)
# The run folder's file names. The notebooks' own names (benchmark.ipynb, summary.ipynb) are left out: the
# kit's notebooks/ folder holds files of those names too (benchlib/paths.py).
RUN_FOLDER_NAMES = tuple(
    getattr(layout, name) for name in dir(layout)
    if name.isupper() and isinstance(getattr(layout, name), str) and name not in ("EXECUTED_NOTEBOOK", "SUMMARY_NOTEBOOK")
)  # fmt: skip


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its __init__)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(path: Path, name: str) -> set[str]:
    """The benchlib modules that `path` imports, at module level or inside functions (type-checking imports left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    checking = {id(node) for stmt in ast.walk(tree) if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test) for node in ast.walk(stmt)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("benchlib")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if base.startswith("benchlib"):
                found |= {f"{base}.{alias.name}" for alias in node.names} | {base}
    known = modules()
    return {target for target in found if target in known and target != name}


def layer(name: str) -> int:
    """The layer of module `name` (benchlib.x.y: by x)."""
    top = name.split(".")[1]
    return next(index for index, members in enumerate(LAYERS) if top in members)


def import_graph() -> dict[str, set[str]]:
    """Module → the benchlib modules it imports; the top package (a facade of lazy exports) is left out."""
    return {name: imports_of(path, name) - {"benchlib"} for name, path in modules().items() if name != "benchlib"}


def test_every_module_is_in_a_layer() -> None:
    assert all(layer(name) >= 0 for name in import_graph())


def test_imports_flow_one_way_through_the_layers() -> None:
    upward = [f"{name} imports {target}" for name, targets in import_graph().items() for target in targets if layer(target) > layer(name)]
    assert upward == []


def test_no_import_cycle() -> None:
    graph = import_graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(name: str, stack: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph.get(name, ())):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target):], target] if target in stack else [name, target])
            elif target not in state:
                visit(target, [*stack, target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    # A package importing its own modules (an __init__ re-export) is no cycle through the pipeline.
    assert [cycle for cycle in cycles if len(cycle) > 2 or cycle[0].rpartition(".")[0] != cycle[1].rpartition(".")[0]] == []


def test_the_catalogue_does_not_import_the_backends() -> None:
    assert not any(target.startswith("benchlib.backends") for target in import_graph()["benchlib.config.catalogue"])


@functools.cache
def string_literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the string constants of a module, docstrings left out (parsed once per module and session)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value) for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body
        and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip
    return [(node.lineno, node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def names_file(text: str, name: str) -> bool:
    """Whether a string literal spells run-folder entry `name`: the name itself, a path through it, or (a file
    name, with a dot) a word of a message; a folder's name as a plain word of a sentence does not count."""
    return text == name or f"/{name}" in text or f"{name}/" in text or ("." in name and name in text.split())


@pytest.mark.parametrize("name", RUN_FOLDER_NAMES)
def test_only_the_store_names_run_folder_files(name: str) -> None:
    spelled = [
        f"{path.relative_to(PROJECT_ROOT)}:{line}: {text!r}" for path in sorted(PACKAGE.rglob("*.py")) if "store" not in path.relative_to(PACKAGE).parts
        for line, text in string_literals(path) if names_file(text, name)
    ]  # fmt: skip
    assert spelled == []


def test_the_check_would_see_a_spelled_name(tmp_path: Path) -> None:
    module = tmp_path / "example.py"
    module.write_text('"""Reads results.csv."""\nPATH = "results.csv"\nTABLE = "tables/x.csv"\nWORDS = "the tables are"\n', encoding="utf-8")
    literals = [text for _, text in string_literals(module)]
    assert literals == ["results.csv", "tables/x.csv", "the tables are"]
    assert [names_file(text, name) for text in literals for name in ("results.csv", "tables")] == [True, False, False, True, False, False]
