"""What the generation models of ONNX Runtime and OpenVINO share: they are made by the libraries made for this (optimum-onnx's
`ORTModelForCausalLM`, optimum-intel's `OVModelForCausalLM`), exported once per model's weights into the build cache as a
decoder that carries its key/value cache from one token to the next, and loaded from there by every kernel.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchlib.backends.pytorch import use_torch, weights, weights_key
from benchlib.machine import package_version
from benchlib.status import Unsupported
from benchlib.store.cache import Artefact, artefact

if TYPE_CHECKING:  # the catalogue sits above the backends: they are handed its entries
    from benchlib.config.catalogue import ModelSpec

TASK = "text-generation-with-past"  # optimum's task: a causal language model with its key/value cache
QUIET_LOGGERS: tuple[str, ...] = ("optimum", "transformers", "openvino", "nncf")
EXPORTERS = {"onnx": "optimum-onnx", "openvino": "optimum-intel"}  # optimum's exporter names, and the distributions that hold them


def exporters_loggers() -> list[logging.Logger]:
    """The loggers of optimum, transformers, OpenVINO and nncf; nncf's only once nncf has made it (of its own class, which
    a logger made here first would not be)."""
    made = logging.root.manager.loggerDict
    return [logging.getLogger(name) for name in QUIET_LOGGERS if name != "nncf" or isinstance(made.get(name), logging.Logger)]


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Exporting and loading without the exporters' log records and warnings (tracer warnings, optimum's advice, nncf's
    tables, OpenVINO's converter notes): what was built is checked by its tokens' agreement with eager PyTorch float32, and
    a failure raises. Levels are set, not `logging.disable` (optimum-intel resets that itself); a library first imported
    inside sets its logger's level again, so the exporters are imported before."""
    loggers = exporters_loggers()
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def unexportable(model_type: str, exporter: str) -> str | None:
    """Why optimum's `exporter` ("onnx" or "openvino") has no generation export of `model_type` models, or None."""
    importlib.import_module(f"optimum.exporters.{exporter}.model_configs")  # registers the exporter's model types
    from optimum.exporters.tasks import TasksManager

    try:
        tasks = TasksManager.get_supported_tasks_for_model_type(model_type, exporter, library_name="transformers")
    except KeyError:  # a model type it does not know
        tasks = {}
    distribution = EXPORTERS[exporter]
    return None if TASK in tasks else f"{distribution} {package_version(distribution)} has no {TASK} export of {model_type} models"


def generation_export(
    kind: str, exporter: str, spec: ModelSpec, scale: str, seed: int, cache_dir: Path | None, make: Callable[[Path, Path], None],
    **values: Any,
) -> Artefact:  # fmt: skip
    """The build cache's entry of `kind`: the generation model that optimum's `exporter`, called by `make(weights folder,
    folder)`, exports from `spec`'s weights (`pytorch.weights`) into `folder`, once per weights, task, the versions of torch
    and transformers that trace it, and `values` (the exporter's versions and settings). `Unsupported` where the exporter
    does not know the architecture."""
    use_torch()  # optimum imports transformers: without TensorFlow
    made_from = weights(spec, scale, seed, cache_dir)
    key = {
        "weights": weights_key(made_from), "task": TASK, "torch": package_version("torch"), "transformers": package_version("transformers"),
        **values,
    }  # fmt: skip

    def export(folder: Path) -> None:
        model_type = json.loads((made_from.path / "config.json").read_text(encoding="utf-8"))["model_type"]
        if reason := unexportable(model_type, exporter):
            raise Unsupported(reason)
        with quiet():
            make(made_from.path, folder)

    return artefact(kind, spec.cache_label(scale), key, export, cache_dir)
