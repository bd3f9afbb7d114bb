"""Before `make test-gpu`: one line and exit status 2 where nvidia-smi finds a GPU and the installed PyTorch cannot use
it (every GPU test would be skipped and the target pass, having checked nothing); otherwise the pip line of each GPU
environment's package missing here (its cells would be `unsupported`), and exit status 0."""

from __future__ import annotations

import sys

from benchlib.backends import installed
from benchlib.backends.onnxruntime import GPU_INSTALL
from benchlib.machine import gpus, package_version

TENSORFLOW_CUDA = "nvidia-cudnn-cu12"  # one of the CUDA libraries tensorflow[and-cuda] installs
MISSING: dict[str, tuple[str, str]] = {  # environments -> (the distribution they need, the line that installs it)
    "gpu-onnxruntime, gpu-onnxruntime-tensorrt": ("onnxruntime-gpu", GPU_INSTALL),
    "gpu-tensorflow, gpu-tensorflow-xla": (TENSORFLOW_CUDA, ".venv/bin/pip install 'tensorflow[and-cuda]==2.21.*'"),
}


def unusable_gpu() -> str | None:
    """Why the GPU tests cannot run on a machine that has a GPU (None where PyTorch sees it, or nvidia-smi finds none)."""
    found = gpus()
    if not found:
        return None
    import torch

    if torch.cuda.is_available():
        return None
    build = f"PyTorch {torch.__version__} (CUDA {torch.version.cuda})" if torch.version.cuda else f"PyTorch {torch.__version__}, a CPU build,"
    return (
        f"make test-gpu: nvidia-smi finds {found[0]['name']} (driver {found[0]['driver']}) and {build} cannot use it: "
        "install PyTorch's CUDA build that matches the driver (https://pytorch.org/get-started/locally/)"
    )


def missing_lines() -> list[str]:
    """A line per GPU environment whose package is not installed here, with the line that installs it."""
    return [f"{names}: {needed} is not installed, so their cells are unsupported: {line}" for names, (needed, line) in MISSING.items() if not installed(needed)]


def main() -> int:
    reason = unusable_gpu()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    if gpus() and package_version("torch"):
        for line in missing_lines():
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
