"""FLOPs and bytes of one cell (a model at batch size B and sequence length S), counted two ways.

- `analytic_flops`: from the model's configuration, with the formulas per architecture family
  in `benchlib/data/flops.yaml` (the matrix multiplies of each layer, a multiply-add = 2 FLOPs;
  elementwise work and embedding lookups left out). Pure Python: no framework is imported.
- `counted_flops`: builds the bare PyTorch model (eager attention, the catalogue's
  `inference_config` applied as `PyTorchBackend.build` does) and counts one forward call with
  `torch.utils.flop_counter.FlopCounterMode`. The model is built and run on the meta device
  (no memory, no arithmetic) where that works; see `count_flops` for the fallbacks.

`cell_bytes` (weights read once per call plus the activations estimated in flops.yaml) gives a
cell's arithmetic intensity, `flops / bytes`, for a roofline.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from benchlib.backends import unsupported_reason
from benchlib.config.catalogue import ModelSpec
from benchlib.machine import package_version
from benchlib.store.cache import artefact, digest

DIMENSIONS: tuple[str, ...] = ("B", "S")  # batch size, sequence length: the names every term may use

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_MAX_EXPONENT = 16


class FormulaError(ValueError):
    """A formula in flops.yaml that is not plain arithmetic over its declared names."""


class UncountableModelError(RuntimeError):
    """The model cannot be run in PyTorch, so its FLOPs cannot be counted (only computed analytically)."""


@dataclass(frozen=True)
class Expression:
    """One arithmetic expression of flops.yaml, checked once: numbers, declared names, + - * / // ** ( )."""

    text: str
    tree: ast.Expression
    where: str  # e.g. "family 'bert', layer term 'qkv'": named in every error

    @classmethod
    def parse(cls, text: Any, names: set[str], where: str) -> Expression:
        """Parse `text`, allowing only numbers, `names` and arithmetic; a FormulaError names `where`."""
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise FormulaError(f"flops.yaml, {where}: expected an arithmetic expression, not {text!r}")
        source = str(text)
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as exc:
            raise FormulaError(f"flops.yaml, {where}: cannot parse {source!r} ({exc.msg})") from None
        for node in ast.walk(tree):
            if isinstance(node, ast.Expression | ast.BinOp | ast.UnaryOp | ast.Load):
                continue
            if isinstance(node, ast.operator | ast.unaryop):
                if type(node) not in _BINARY and type(node) not in _UNARY:
                    raise FormulaError(f"flops.yaml, {where}: operator {type(node).__name__} is not allowed in {source!r}")
            elif isinstance(node, ast.Constant):
                if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                    raise FormulaError(f"flops.yaml, {where}: only numbers are allowed, not {node.value!r} in {source!r}")
            elif isinstance(node, ast.Name):
                if node.id not in names:
                    allowed = ", ".join(sorted(names))
                    raise FormulaError(f"flops.yaml, {where}: name {node.id!r} is not declared in {source!r} (allowed: {allowed})")
            else:
                raise FormulaError(
                    f"flops.yaml, {where}: {type(node).__name__} is not allowed in {source!r}; only numbers, declared names and + - * / // ** ( )"
                )
        return cls(text=source, tree=tree, where=where)

    def evaluate(self, values: Mapping[str, int | float]) -> int | float:
        """The value of the expression with `values` for its names."""

        def walk(node: ast.AST) -> int | float:
            if isinstance(node, ast.Expression):
                return walk(node.body)
            if isinstance(node, ast.Constant):
                return node.value
            if isinstance(node, ast.Name):
                return values[node.id]
            if isinstance(node, ast.UnaryOp):
                return _UNARY[type(node.op)](walk(node.operand))
            if isinstance(node, ast.BinOp):
                left, right = walk(node.left), walk(node.right)
                if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
                    raise FormulaError(f"flops.yaml, {self.where}: exponent {right} is too large in {self.text!r}")
                try:
                    return _BINARY[type(node.op)](left, right)
                except ZeroDivisionError:
                    raise FormulaError(f"flops.yaml, {self.where}: division by zero in {self.text!r} with {dict(values)}") from None
            raise FormulaError(f"flops.yaml, {self.where}: cannot evaluate {type(node).__name__}")  # parse() forbids it

        return walk(self.tree)


@dataclass(frozen=True)
class Variable:
    """A short name of a family's formulas: a configuration key (with a default) or a constant expression."""

    name: str
    key: str | None
    default: Expression | None


@dataclass(frozen=True)
class Family:
    """The FLOP and activation formulas of one architecture family (one entry of flops.yaml)."""

    name: str
    description: str
    variables: tuple[Variable, ...]
    assumes: dict[str, Any]
    layers: Expression
    layer: dict[str, Expression]
    outside: dict[str, Expression]
    layer_activations: dict[str, Expression]
    outside_activations: dict[str, Expression]
    source: tuple[str, ...]

    def values(self, config: Mapping[str, Any]) -> dict[str, int | float]:
        """The family's variables from the configuration values `config` (checks `assumes`)."""
        for key, expected in self.assumes.items():
            if key in config and config[key] != expected:
                raise ValueError(f"flops.yaml, family {self.name!r}: the formulas assume {key}={expected!r}, the configuration has {config[key]!r}")
        values: dict[str, int | float] = {}
        for variable in self.variables:
            value = config.get(variable.key) if variable.key else None
            if value is None:
                if variable.default is None:
                    raise ValueError(f"flops.yaml, family {self.name!r}, variable {variable.name!r}: configuration key {variable.key!r} is missing or null and has no default")
                value = variable.default.evaluate(values)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"flops.yaml, family {self.name!r}, variable {variable.name!r}: {variable.key!r} is {value!r}, not a number")
            values[variable.name] = value
        return values

    def terms(self, config: Mapping[str, Any], batch_size: int, sequence_length: int, activations: bool = False) -> dict[str, int]:
        """Each term summed over the layers (FLOPs, or activation elements with `activations`)."""
        values = {**self.values(config), "B": batch_size, "S": sequence_length}
        layers = self.layers.evaluate(values)
        layer, outside = (self.layer_activations, self.outside_activations) if activations else (self.layer, self.outside)
        totals = {name: round(layers * term.evaluate(values)) for name, term in layer.items()}
        for name, term in outside.items():
            totals[name] = totals.get(name, 0) + round(term.evaluate(values))
        return totals


def _parse_family(name: str, entry: Mapping[str, Any]) -> Family:
    where = f"family {name!r}"
    variables: list[Variable] = []
    for var, how in (entry.get("variables") or {}).items():
        if var in DIMENSIONS:
            raise FormulaError(f"flops.yaml, {where}: variable {var!r} clashes with the dimension of the same name")
        declared = {v.name for v in variables}
        if isinstance(how, str):
            variables.append(Variable(var, how, None))
        elif isinstance(how, Mapping) and set(how) <= {"key", "default"} and "key" in how:
            default = Expression.parse(how["default"], declared, f"{where}, variable {var!r}") if "default" in how else None
            variables.append(Variable(var, str(how["key"]), default))
        elif isinstance(how, Mapping) and set(how) == {"value"}:
            variables.append(Variable(var, None, Expression.parse(how["value"], declared, f"{where}, variable {var!r}")))
        else:
            raise FormulaError(f"flops.yaml, {where}, variable {var!r}: expected a configuration key, {{key:, default:}} or {{value:}}, not {how!r}")
    names = {v.name for v in variables} | set(DIMENSIONS)

    def terms(section: str) -> dict[str, Expression]:
        block = entry.get(section) or {}
        if not isinstance(block, Mapping):
            raise FormulaError(f"flops.yaml, {where}: {section} must map term names to expressions")
        return {term: Expression.parse(text, names, f"{where}, {section} term {term!r}") for term, text in block.items()}

    if not entry.get("layer"):
        raise FormulaError(f"flops.yaml, {where}: no per-layer terms (layer:)")
    return Family(
        name=name,
        description=str(entry.get("description", "")).strip(),
        variables=tuple(variables),
        assumes=dict(entry.get("assumes") or {}),
        layers=Expression.parse(entry.get("layers"), names, f"{where}, layers"),
        layer=terms("layer"),
        outside=terms("outside"),
        layer_activations=terms("layer_activations"),
        outside_activations=terms("outside_activations"),
        source=tuple(entry.get("source") or ()),
    )


def parse_families(text: str) -> dict[str, Family]:
    """The families of a flops.yaml text, every expression checked (a FormulaError names the family and term)."""
    data = yaml.safe_load(text) or {}
    return {name: _parse_family(name, entry) for name, entry in (data.get("families") or {}).items()}


@cache
def load_families() -> dict[str, Family]:
    """The families of `benchlib/data/flops.yaml`."""
    return parse_families(resources.files("benchlib").joinpath("data/flops.yaml").read_text(encoding="utf-8"))


def family_of(spec: ModelSpec) -> Family:
    """The formula family of a catalogue model (its `family:` in models.yaml)."""
    families = load_families()
    if spec.family not in families:
        raise KeyError(f"model {spec.name!r}: family {spec.family!r} is not in flops.yaml (it has: {', '.join(families)})")
    return families[spec.family]


def _config(spec: ModelSpec, scale: str) -> dict[str, Any]:
    return spec.config_values(scale, **spec.inference_config)


def analytic_terms(spec: ModelSpec, scale: str, batch_size: int, sequence_length: int) -> dict[str, int]:
    """The FLOPs of each term of the model's family, summed over its layers."""
    return family_of(spec).terms(_config(spec, scale), batch_size, sequence_length)


def has_formula(spec: ModelSpec) -> bool:
    """Whether `spec` has FLOP formulas: a catalogue entry with a family, timed as the bare model (no head)."""
    return spec.family is not None and spec.source is None and spec.task == "feature-extraction"


def analytic_flops(spec: ModelSpec, scale: str, batch_size: int, sequence_length: int) -> int:
    """FLOPs of one forward call of the bare model at (batch_size, sequence_length), from its configuration."""
    return sum(analytic_terms(spec, scale, batch_size, sequence_length).values())


@dataclass(frozen=True)
class FlopCount:
    """FLOPs counted by FlopCounterMode in one forward call, and where the model ran."""

    flops: int
    device: str  # "meta", "meta (built on cpu)" or "cpu"
    note: str = ""  # the detours taken to get there (legacy constructors, a forward that needed the cpu)


def _build_model(spec: ModelSpec, scale: str) -> Any:
    # The catalogue's inference_config as PyTorchBackend.build applies it; eager attention because
    # FlopCounterMode has no formula for the CPU scaled-dot-product-attention kernel.
    from benchlib.backends.pytorch import use_torch

    use_torch()  # before transformers: keeps TensorFlow out of this process

    config = spec.build_config(scale, **{**spec.inference_config, "attn_implementation": "eager"})
    model = spec.transformers_class("pytorch")(config).eval()
    if model.config._attn_implementation != "eager":
        raise RuntimeError(f"{spec.name}: asked for eager attention, got {model.config._attn_implementation!r}")
    return model


def _count_forward(model: Any, input_ids: Any) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model(input_ids)
    return int(counter.get_total_flops())


def count_flops(spec: ModelSpec, scale: str, batch_size: int, sequence_length: int) -> FlopCount:
    """FLOPs of one forward call counted by FlopCounterMode, and where it ran.

    First on the meta device: the model is built there and called on meta token ids, which costs
    no memory and no arithmetic (FlopCounterMode counts from shapes). Two details make that work:
    parameters that a legacy constructor (`torch.FloatTensor(...)`, XLNet) put on the CPU are
    moved to meta; and transformers' warning check for padding without an attention mask
    (`warn_if_padding_and_no_attention_mask`, which reads a token id with `.item()`: BERT,
    RoBERTa, DistilBERT) is switched off on that model, which changes no computation. A model
    whose forward needs real values anyway (XLM asserts on `lengths.max().item()`) is built and
    run on the CPU instead, with random token ids. `device` and `note` say which happened.
    """
    import torch

    reason = unsupported_reason(spec, "pytorch", "eager")
    if reason:
        raise UncountableModelError(f"{spec.name}: PyTorch cannot run this model, so its FLOPs are not counted (use analytic_flops): {reason}")
    shape = (batch_size, sequence_length)
    notes = []
    try:
        with torch.device("meta"):
            model = _build_model(spec, scale)
        device = "meta"
        if any(not t.is_meta for t in (*model.parameters(), *model.buffers())):
            notes.append("some parameters were built on the cpu (legacy constructors) and moved to meta")
    except Exception as exc:  # noqa: BLE001  (a constructor that cannot run on meta)
        notes.append(f"built on cpu: {type(exc).__name__}: {exc}")
        model = _build_model(spec, scale)
        device = "meta (built on cpu)"
    model.to("meta")
    model.warn_if_padding_and_no_attention_mask = _no_padding_check
    try:
        with torch.device("meta"):
            flops = _count_forward(model, torch.zeros(shape, dtype=torch.long))
        return FlopCount(flops, device, "; ".join(notes))
    except Exception as exc:  # noqa: BLE001  (e.g. .item() on a meta tensor)
        notes.append(f"forward on cpu: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    del model
    model = _build_model(spec, scale)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, spec.vocab_size(scale), shape, generator=generator)
    return FlopCount(_count_forward(model, input_ids), "cpu", "; ".join(notes))


def _no_padding_check(input_ids: Any, attention_mask: Any) -> None:
    """Stands in for transformers' padding warning check, which cannot read meta token ids."""


def counted_flops(spec: ModelSpec, scale: str, batch_size: int, sequence_length: int) -> int:
    """FLOPs of one forward call of the bare PyTorch model, counted by FlopCounterMode (see `count_flops`)."""
    return count_flops(spec, scale, batch_size, sequence_length).flops


_PARAMETER_COUNTS: dict[str, int] = {}
PARAMETERS_FILE = "parameters.json"  # a `parameters` entry of the build cache: the count


def parameter_count(spec: ModelSpec, scale: str) -> int:
    """Parameters of the bare PyTorch model at `scale` (shared weights once), counted on the meta
    device: no memory, no initialisation (on the CPU for a constructor that cannot run on meta).

    Counted once per model, configuration and versions of torch and transformers on this machine: the count is kept
    in the build cache (`parameters`), so that a later process (a summary's kernel) finding it there imports neither
    torch nor transformers. Where the cache cannot be written, it is counted in this process only.
    """
    config = json.dumps(_config(spec, scale), sort_keys=True, default=str)
    key = {"model": spec.name, "class": spec.pytorch_class, "scale": scale, "config": config, **_framework_versions()}
    name = digest(key)
    if name not in _PARAMETER_COUNTS:

        def make(folder: Path) -> None:
            (folder / PARAMETERS_FILE).write_text(json.dumps(_counted_parameters(spec, scale)), encoding="utf-8")

        try:
            entry = artefact("parameters", spec.cache_label(scale), key, make)
            _PARAMETER_COUNTS[name] = json.loads((entry.path / PARAMETERS_FILE).read_text(encoding="utf-8"))
        except OSError:
            _PARAMETER_COUNTS[name] = _counted_parameters(spec, scale)
    return _PARAMETER_COUNTS[name]


@cache
def _framework_versions() -> dict[str, str | None]:
    return {"torch": package_version("torch"), "transformers": package_version("transformers")}


def _counted_parameters(spec: ModelSpec, scale: str) -> int:
    import torch

    try:
        with torch.device("meta"):
            model = _build_model(spec, scale)
    except Exception:  # noqa: BLE001  (e.g. legacy torch.FloatTensor(...) constructors)
        model = _build_model(spec, scale)
    return sum(p.numel() for p in model.parameters())


def parameter_bytes(spec: ModelSpec, scale: str, bytes_per_element: int = 4) -> int:
    """Bytes of the weights, read once per call: parameter count x bytes per element.

    Every parameter counts, embedding tables included, although a call reads only the rows of
    its tokens: an upper bound on the weight traffic.
    """
    return parameter_count(spec, scale) * bytes_per_element


def activation_bytes(spec: ModelSpec, scale: str, batch_size: int, sequence_length: int, bytes_per_element: int = 4) -> int:
    """Bytes of activations the matrix multiplies read and write (flops.yaml's layer_activations and outside_activations)."""
    terms = family_of(spec).terms(_config(spec, scale), batch_size, sequence_length, activations=True)
    return sum(terms.values()) * bytes_per_element


def cell_bytes(spec: ModelSpec, scale: str, batch_size: int, sequence_length: int, bytes_per_element: int = 4) -> int:
    """Bytes moved by one call: the weights once plus the activations' estimate (see flops.yaml)."""
    return parameter_bytes(spec, scale, bytes_per_element) + activation_bytes(spec, scale, batch_size, sequence_length, bytes_per_element)


def arithmetic_intensity(spec: ModelSpec, scale: str, batch_size: int, sequence_length: int, bytes_per_element: int = 4) -> float:
    """FLOPs per byte of one call: analytic_flops / cell_bytes."""
    flops = analytic_flops(spec, scale, batch_size, sequence_length)
    total = cell_bytes(spec, scale, batch_size, sequence_length, bytes_per_element)
    if total <= 0:
        raise ValueError(f"{spec.name}: no bytes for {batch_size}x{sequence_length}")
    return flops / total
