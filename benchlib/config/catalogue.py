"""The model catalogue: architectures built offline from configuration values shipped as data."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

MODEL_SCALES: tuple[str, ...] = ("full", "tiny")


@dataclass(frozen=True)
class ModelSpec:
    """One model: how to build its architecture in either framework. A catalogue entry is built from the configuration
    values shipped in models.yaml; a user's model (`source`: a checkpoint's folder, see config/models.py) from its
    config.json, with its own weights or random ones."""

    name: str
    config_class: str
    pytorch_class: str
    tensorflow_class: str | None
    max_sequence_length: int | None
    published_parameters: int | None
    config: dict[str, Any]
    tiny: dict[str, Any]
    inference_config: dict[str, Any] = field(default_factory=dict)
    unsupported: dict[str, str] = field(default_factory=dict)
    family: str | None = None  # the FLOP formulas' family in data/flops.yaml
    task: str = "feature-extraction"  # the head whose output is timed and compared (config/models.py: TASKS)
    source: str | None = None  # a user's model: the folder of its checkpoint (config.json, weights, tokenizer)
    weights: str = "random"  # "random" (seeded) or "pretrained" (the checkpoint's own, from `source`)
    trust_remote_code: bool = False  # the checkpoint's own Python may run (the user said so)

    def fits(self, sequence_length: int) -> bool:
        """Whether the study measures this sequence length for this model."""
        return self.max_sequence_length is None or sequence_length <= self.max_sequence_length

    def unsupported_for(self, keys: tuple[str, ...]) -> str | None:
        """The reason recorded under the first of `keys` that this entry has (`backends.unsupported_reason`
        says which keys apply to an environment), or None when it has none of them."""
        return next((self.unsupported[key] for key in keys if key in self.unsupported), None)

    def cache_label(self, scale: str) -> str:
        """The model's name at `scale` as a build cache entry's label (a folder name: no path separators)."""
        return re.sub(r"[^A-Za-z0-9._-]+", "_", self.name).strip("_.") + f"-{scale}"

    def config_values(self, scale: str = "full", **overrides: Any) -> dict[str, Any]:
        """The configuration values at `scale` ("full" or "tiny"), with `overrides` on top."""
        if scale not in MODEL_SCALES:
            raise ValueError(f"model_scale must be one of {', '.join(MODEL_SCALES)}, not {scale!r}")
        values = dict(self.config)
        if scale == "tiny":
            values.update(self.tiny)  # empty for a user's model: it has one size, its own
        values.update(overrides)
        return values

    def build_config(self, scale: str = "full", **overrides: Any) -> Any:
        """A `transformers` configuration object for this model (imports transformers)."""
        import transformers

        if self.source:
            return transformers.AutoConfig.from_pretrained(self.source, trust_remote_code=self.trust_remote_code, **overrides)
        return getattr(transformers, self.config_class)(**self.config_values(scale, **overrides))

    def instantiate(self, kind: str, config: Any) -> Any:
        """A model of kind `kind` ("pytorch" or "tensorflow") with fresh weights, made from `config`."""
        model_class = self.transformers_class(kind)
        if model_class.__name__.removeprefix("TF").startswith("Auto"):
            return model_class.from_config(config, trust_remote_code=self.trust_remote_code)
        return model_class(config)

    def transformers_class(self, kind: str) -> Any:
        """The `transformers` model class of kind `kind` ("pytorch" or "tensorflow": the entry's
        pytorch_class or tensorflow_class; imports transformers)."""
        import transformers

        name = getattr(self, f"{kind}_class")
        if name is None:
            raise AttributeError(f"transformers {transformers.__version__} has no {kind} class for {self.name}")
        return getattr(transformers, name)

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
