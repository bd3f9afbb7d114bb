"""The model catalogue: architectures built offline from configuration values shipped as data."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

MODEL_SCALES: tuple[str, ...] = ("full", "tiny")


@dataclass(frozen=True)
class ModelSpec:
    """One catalogue entry: how to build a checkpoint's architecture in either framework."""

    name: str
    config_class: str
    pytorch_class: str
    tensorflow_class: str
    max_sequence_length: int | None
    published_parameters: int | None
    config: dict[str, Any]
    tiny: dict[str, Any]
    inference_config: dict[str, Any] = field(default_factory=dict)
    unsupported: dict[str, str] = field(default_factory=dict)
    family: str | None = None  # the FLOP formulas' family in data/flops.yaml

    def fits(self, sequence_length: int) -> bool:
        """Whether the study measures this sequence length for this model."""
        return self.max_sequence_length is None or sequence_length <= self.max_sequence_length

    def unsupported_reason(self, framework: str, mode: str, precision: str = "float32") -> str | None:
        """Why this model cannot run in `framework`/`mode` at `precision`, or None when it can. The keys
        that apply come from the backends' registry: `framework/mode`, `framework/precision`,
        `framework`, then the framework whose model it starts from (an ONNX export of a PyTorch
        model fails where PyTorch does)."""
        from benchlib.backends import backend_info

        keys = backend_info(framework).unsupported_keys(mode, precision)
        return next((self.unsupported[key] for key in keys if key in self.unsupported), None)

    def config_values(self, scale: str = "full", **overrides: Any) -> dict[str, Any]:
        """The configuration values at `scale` ("full" or "tiny"), with `overrides` on top."""
        if scale not in MODEL_SCALES:
            raise ValueError(f"model_scale must be one of {', '.join(MODEL_SCALES)}, not {scale!r}")
        values = dict(self.config)
        if scale == "tiny":
            values.update(self.tiny)
        values.update(overrides)
        return values

    def build_config(self, scale: str = "full", **overrides: Any) -> Any:
        """A `transformers` configuration object for this model (imports transformers)."""
        import transformers

        return getattr(transformers, self.config_class)(**self.config_values(scale, **overrides))

    def model_class(self, framework: str) -> Any:
        """The `transformers` model class that backend `framework` builds from (its registry entry's
        `model_class`: the catalogue's pytorch_class or tensorflow_class)."""
        import transformers

        from benchlib.backends import backend_info

        return getattr(transformers, getattr(self, f"{backend_info(framework).model_class}_class"))

    def vocab_size(self, scale: str = "full") -> int:
        """Size of the vocabulary at `scale`: token ids are drawn below it."""
        return int(self.config_values(scale)["vocab_size"])


@cache
def load_catalogue() -> dict[str, ModelSpec]:
    """All catalogue entries by name, in the order of `benchlib/data/models.yaml`."""
    text = resources.files("benchlib").joinpath("data/models.yaml").read_text(encoding="utf-8")
    return {name: ModelSpec(name=name, **entry) for name, entry in yaml.safe_load(text).items()}


def get_model(name: str) -> ModelSpec:
    """The catalogue entry `name`; a KeyError lists the catalogue when it is unknown."""
    catalogue = load_catalogue()
    if name not in catalogue:
        raise KeyError(f"unknown model {name!r}; the catalogue has: {', '.join(catalogue)}")
    return catalogue[name]
