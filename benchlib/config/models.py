"""Models as a grid names them: a catalogue entry, a folder holding a `transformers` checkpoint, or a Hugging Face
Hub id, resolved to a `ModelSpec` before any kernel starts, under the rules of loading safely: no repository's
Python (`trust_remote_code`) and no unpickled weights (`allow_pickle`) unless the user says so, and no network
unless the user asks for it (then a Hub id is downloaded here, once, and every kernel reads the local copy).

Nothing here imports transformers or a framework: a folder is read as files (config.json, the weights' and the
tokenizer's file names), so that validating a run stays cheap and keeps one framework per kernel.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from benchlib.config.catalogue import ModelSpec, load_catalogue

# Each task's classes (PyTorch, TensorFlow), the Auto classes that pick the architecture's head from config.json.
TASK_CLASSES: dict[str, tuple[str, str]] = {
    "feature-extraction": ("AutoModel", "TFAutoModel"),
    "text-classification": ("AutoModelForSequenceClassification", "TFAutoModelForSequenceClassification"),
    "fill-mask": ("AutoModelForMaskedLM", "TFAutoModelForMaskedLM"),
    "causal-lm": ("AutoModelForCausalLM", "TFAutoModelForCausalLM"),
}
TASKS: tuple[str, ...] = tuple(TASK_CLASSES)
WEIGHTS: tuple[str, ...] = ("pretrained", "random")
INPUTS: tuple[str, ...] = ("random", "text")  # seeded random token ids, or text tokenized by the model's tokenizer
# The task a checkpoint was saved for, from the class names in its config.json's `architectures`.
ARCHITECTURE_TASKS: tuple[tuple[str, str], ...] = (
    ("ForSequenceClassification", "text-classification"), ("ForMaskedLM", "fill-mask"), ("ForCausalLM", "causal-lm"),
    ("LMHeadModel", "causal-lm"),
)  # fmt: skip
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
SAFE_WEIGHTS: tuple[str, ...] = ("model.safetensors", "model.safetensors.index.json")
PICKLED_WEIGHTS: tuple[str, ...] = ("pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES: tuple[str, ...] = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model", "tokenizer.model")
# Folder names that say nothing of the model: such a folder is named with its parent's name too (`minilm/model`).
GENERIC_FOLDERS = re.compile(r"(?i)models?|checkpoints?(-\d+)?|weights|snapshots?|final|latest|best")
# The configuration keys that hold a model's maximum positions, the first present wins.
POSITION_KEYS: tuple[str, ...] = ("max_position_embeddings", "n_positions", "max_sequence_length")


class ModelError(ValueError):
    """A model that cannot be used as asked; the message is one line naming the model and what to do."""


@dataclass(frozen=True)
class ModelRequest:
    """How a run asks for its models (the grid's `weights`, `task`, `trust_remote_code`, `allow_pickle`, `offline`)."""

    weights: str | None = None  # None: pretrained for a folder or Hub id, random for a catalogue entry
    task: str | None = None  # None: feature-extraction for a catalogue entry, the checkpoint's own for a folder or id
    trust_remote_code: bool = False
    allow_pickle: bool = False
    offline: bool = True


def task_of(config: dict[str, Any]) -> str:
    """The task a checkpoint's config.json says it was saved for (its `architectures`), feature-extraction by default."""
    for architecture in config.get("architectures") or []:
        for suffix, task in ARCHITECTURE_TASKS:
            if str(architecture).endswith(suffix):
                return task
    return "feature-extraction"


def has_tokenizer(folder: str | Path | None) -> bool:
    """Whether `folder` holds a tokenizer's files."""
    return folder is not None and any((Path(folder) / name).is_file() for name in TOKENIZER_FILES)


def hub_snapshot(model_id: str) -> Path | None:
    """The local Hugging Face cache's folder of Hub id `model_id` (its latest snapshot with a config.json), or None."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(model_id, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def download(model_id: str) -> Path:
    """Fetch Hub id `model_id` into the local Hugging Face cache (its configuration, tokenizer and safetensors weights:
    never pickled ones), and return the snapshot folder; a ModelError when it cannot. The kit's offline switch is
    lifted for this call only: every kernel then reads the local copy."""
    from unittest import mock

    from huggingface_hub import constants, snapshot_download

    try:
        with mock.patch.object(constants, "HF_HUB_OFFLINE", False):
            return Path(snapshot_download(model_id, allow_patterns=["*.json", "*.txt", "*.model", "*.safetensors"]))
    except Exception as exc:  # no network, no such repository, no access: one line for the user
        raise ModelError(f"model {model_id}: could not fetch it from the Hugging Face Hub: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from None


def checkpoint_folder(name: str, offline: bool = True) -> Path:
    """The folder holding the checkpoint that `name` (a folder, or a Hub id) names; a ModelError when there is none
    (a Hub id missing from the local cache while offline says how to fetch it)."""
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"model {name}: the folder has no config.json (a transformers checkpoint is saved with save_pretrained)")
        return path.resolve()
    if not HUB_ID.fullmatch(name):
        catalogue = ", ".join(load_catalogue())
        raise ModelError(f"unknown model {name}: not in the catalogue, not a folder and not a Hub id (owner/name); the catalogue has: {catalogue}")
    if (snapshot := hub_snapshot(name)) is not None:
        return snapshot
    if offline:
        raise ModelError(
            f"model {name}: not in the local Hugging Face cache and the kit is offline; fetch it with "
            f"`huggingface-cli download {name}`, or run with --online (offline: false)"
        )
    return download(name)


def read_config(folder: Path, name: str) -> dict[str, Any]:
    """A checkpoint's config.json as a mapping; a ModelError when it is unreadable."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"model {name}: config.json is unreadable: {' '.join(str(exc).split())}") from None
    if not isinstance(config, dict):
        raise ModelError(f"model {name}: config.json must hold a mapping")
    return config


def check_loading(folder: Path, config: dict[str, Any], name: str, weights: str, request: ModelRequest) -> None:
    """The safety rules: custom code only with `trust_remote_code`, weights from safetensors, pickled weights only with
    `allow_pickle`; a ModelError naming the setting that allows it and what it means."""
    if config.get("auto_map") and not request.trust_remote_code:
        raise ModelError(
            f"model {name}: its architecture needs the repository's own Python code; set trust_remote_code: true "
            "to run it (it runs that code on this machine, with your rights)"
        )
    if weights != "pretrained" or any((folder / file).is_file() for file in SAFE_WEIGHTS):
        return
    if any((folder / file).is_file() for file in PICKLED_WEIGHTS):
        if not request.allow_pickle:
            raise ModelError(
                f"model {name}: its weights are pickled (pytorch_model.bin) and unpickling can run code; set allow_pickle: true "
                "if you trust the file, or save it as safetensors"
            )
        return
    raise ModelError(f"model {name}: the folder holds no weights (model.safetensors); use weights: random to measure its architecture")


def max_positions(config: dict[str, Any]) -> int | None:
    """The longest sequence a configuration allows (its maximum positions), or None where it sets none."""
    return next((int(config[key]) for key in POSITION_KEYS if isinstance(config.get(key), int)), None)


@cache
def resolve_model(name: str, request: ModelRequest = ModelRequest()) -> ModelSpec:
    """The `ModelSpec` of `name` as `request` asks for it: a catalogue entry (random weights; a task other than
    feature-extraction takes the architecture's Auto class of that head), or a folder or Hub id's checkpoint."""
    if request.weights not in (None, *WEIGHTS):
        raise ModelError(f"weights must be one of {', '.join(WEIGHTS)}, not {request.weights!r}")
    if request.task not in (None, *TASKS):
        raise ModelError(f"task must be one of {', '.join(TASKS)}, not {request.task!r}")
    catalogue = load_catalogue()
    if name in catalogue:
        if request.weights == "pretrained":
            raise ModelError(f"model {name}: a catalogue entry has random weights; for its published weights give a folder or its Hub id")
        spec = catalogue[name]
        task = request.task or "feature-extraction"
        if task == "feature-extraction":
            return spec
        pytorch_class, tensorflow_class = TASK_CLASSES[task]
        return ModelSpec(**{**spec.__dict__, "task": task, "pytorch_class": pytorch_class, "tensorflow_class": tensorflow_class})
    folder = checkpoint_folder(name, request.offline)
    config = read_config(folder, name)
    weights = request.weights or "pretrained"
    check_loading(folder, config, name, weights, request)
    task = request.task or task_of(config)
    pytorch_class, tensorflow_class = TASK_CLASSES[task]
    return ModelSpec(
        name=name, config_class="AutoConfig", pytorch_class=pytorch_class, tensorflow_class=tensorflow_class,
        max_sequence_length=max_positions(config), published_parameters=None, config=config, tiny={},
        inference_config={"use_cache": False} if "use_cache" in config or task == "causal-lm" else {},
        source=str(folder), weights=weights, task=task, trust_remote_code=request.trust_remote_code,
    )  # fmt: skip


def is_folder_name(model: str) -> bool:
    """Whether a model's name as a run gives it is a folder's path (it holds a separator and is not a Hub id)."""
    return "/" in model and not HUB_ID.fullmatch(model)


def _path_parts(model: str) -> tuple[str, ...]:
    """The folders of a path, its root left out."""
    path = Path(model)
    return path.parts[1:] if path.anchor else path.parts


def short_names(models: Iterable[str]) -> dict[str, str]:
    """Each of `models` by a name a reader knows, unique among them: a catalogue name or Hub id as given, a folder by
    its name; a folder whose name is generic (GENERIC_FOLDERS) or is another model's name by the end of its path
    (`parent/name`), with as many parent folders as it takes. The same models always get the same names."""
    models = list(dict.fromkeys(models))
    parts = {model: _path_parts(model) for model in models if is_folder_name(model)}
    depth = {model: min(len(p), 2 if GENERIC_FOLDERS.fullmatch(p[-1]) else 1) for model, p in parts.items()}
    while True:
        names = {model: "/".join(parts[model][-depth[model] :]) if model in parts else model for model in models}
        taken = Counter(names.values())
        deeper = [model for model in parts if taken[names[model]] > 1 and depth[model] < len(parts[model])]
        if not deeper:
            return names
        for model in deeper:
            depth[model] += 1


def weight_files(folder: Path) -> list[Path]:
    """The files a checkpoint's weights are read from: its safetensors files (and their index), else its pickled ones."""
    files = sorted(p for p in folder.iterdir() if p.name.endswith((".safetensors", ".safetensors.index.json")))
    return files or sorted(p for p in folder.iterdir() if p.name.startswith("pytorch_model") and p.name.endswith((".bin", ".bin.index.json")))


def checkpoint_digest(folder: str | Path) -> str:
    """The sha256 of a checkpoint: of its config.json and `weight_files`, by name and content; the same for a copy at
    another path. Each file is hashed once per path, size and modification time (`file_digest`)."""
    folder = Path(folder)
    digest = hashlib.sha256()
    for path in (folder / "config.json", *weight_files(folder)):
        stat = path.stat()
        digest.update(f"{path.name}\0{file_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)}\n".encode())
    return digest.hexdigest()


@cache
def file_digest(path: str, size: int, mtime_ns: int) -> str:
    """The sha256 of one file, read in chunks; `size` and `mtime_ns` key the cache, so that a changed file is hashed again."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()
