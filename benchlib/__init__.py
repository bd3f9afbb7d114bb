"""benchlib: rerunnable Transformer inference benchmarks (PyTorch, TorchScript, TensorFlow, XLA)."""

import os

# Offline by default, and TensorFlow's Keras 2 (tf-keras) for transformers' TF models:
# both must be set before transformers or TensorFlow is first imported.
for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TF_USE_LEGACY_KERAS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}.items():
    os.environ.setdefault(_name, _value)

__version__ = "0.1.0"

from benchlib.results import read_results, results_table  # noqa: E402
from benchlib.sweep import run_environment  # noqa: E402

__all__ = ["__version__", "read_results", "results_table", "run_environment"]
