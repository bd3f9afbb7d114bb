"""Out-of-memory recognition for both frameworks and both devices, on real exceptions."""

from __future__ import annotations

import pytest
import torch

from benchlib.backends import is_out_of_memory
from benchlib.status import describe
from tests.frameworks import run_python


def test_pytorch_cpu_allocator_failure_is_out_of_memory():
    with pytest.raises(RuntimeError) as caught:
        torch.empty(2**50, dtype=torch.uint8)  # a petabyte: the CPU allocator refuses it
    assert is_out_of_memory(caught.value)


def test_cuda_and_python_out_of_memory():
    assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(MemoryError())


@pytest.mark.e2e
@pytest.mark.full
def test_tensorflow_resource_exhausted_is_out_of_memory():
    found = run_python(
        """
        import json
        import benchlib, tensorflow as tf
        from benchlib.backends import is_out_of_memory
        try:
            tf.zeros([2**48], dtype=tf.uint8) + 1
            caught = None
        except Exception as exc:
            caught = exc
        gpu = tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor on /GPU:0")
        print(json.dumps([type(caught).__name__, is_out_of_memory(caught), is_out_of_memory(gpu)]))
        """
    )
    assert found == ["ResourceExhaustedError", True, True]


@pytest.mark.parametrize("exc", [ValueError("bad shape"), RuntimeError("index out of range in self"), TypeError("x")])
def test_other_errors_are_not_out_of_memory(exc):
    assert not is_out_of_memory(exc)


def test_describe_is_one_line():
    assert describe(ValueError("a\nb   c")) == "ValueError: a b c"
    assert describe(KeyError()) == "KeyError"
