"""What a backend that generates hands to the generation workload: a `Generator` (one model ready to generate from one
prompt) and, where its generation loop runs in Python, a `StepClock` that the loop reads at each token.
`transformers_generator` makes both for any model with transformers' `generate` (PyTorch, and optimum's ONNX Runtime and
OpenVINO models)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


def _no_sync(output: Any) -> None:
    """A CPU's calls return when their work is done."""


class StepClock:
    """The clock read at each token a call of `generate` makes (`tick`, from inside the generation loop); `on_first`, where
    set, is called as soon as a call's first token is made (a load scenario reports it to LoadGen)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter, sync: Callable[[Any], None] = _no_sync) -> None:
        self._clock, self._sync = clock, sync
        self.times: list[float] = []
        self.on_first: Callable[[], None] | None = None

    def start(self) -> None:
        """Forget the ticks of the last call."""
        self.times.clear()

    def tick(self) -> None:
        """A token is made: read the clock (after the device has finished making it)."""
        self._sync(None)
        self.times.append(self._clock())
        if len(self.times) == 1 and self.on_first is not None:
            self.on_first()


@dataclass(frozen=True)
class Generator:
    """A model ready to generate from one prompt, as a backend hands it to the workload."""

    generate: Callable[[int], Any]  # generate(n): one call that greedily makes n new tokens per row, end of sequence ignored
    new_ids: Callable[[Any], np.ndarray]  # the ids (batch, n) that a call's output holds after the prompt
    clock: StepClock | None = None  # ticked at each token by the generation loop; None where the loop cannot be seen into
    compiles_per_prompt: bool = False  # a generator for another prompt compiles again from scratch (torch.compile's)


def transformers_generator(model: Any, input_ids: Any, sync: Callable[[Any], None] = _no_sync, **options: Any) -> Generator:
    """A `Generator` over transformers' `generate` of `model` (a PyTorch model, or optimum's ONNX Runtime or OpenVINO model)
    on the prompt `input_ids` (a tensor): greedy, the key/value cache on, exactly n tokens (`min_new_tokens` keeps the end
    of sequence away), with a `StepClock` ticked by a stopping criterion that never stops; `options` go to every call."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    clock = StepClock(sync=sync)

    class Ticks(StoppingCriteria):
        def __call__(self, ids: Any, scores: Any, **kwargs: Any) -> Any:
            clock.tick()
            return torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)

    pad = pad_token_id(model.generation_config)
    mask = torch.ones_like(input_ids)
    criteria = StoppingCriteriaList([Ticks()])
    prompt_length = input_ids.shape[1]

    def generate(new_tokens: int) -> Any:
        return model.generate(
            input_ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, num_beams=1,
            use_cache=True, stopping_criteria=criteria, pad_token_id=pad, **options,
        )  # fmt: skip

    return Generator(generate, lambda output: np.asarray(output[:, prompt_length:].cpu()), clock)


def pad_token_id(generation_config: Any) -> int:
    """The pad id every backend's `generate` is given: the configuration's pad id, else its first end-of-sequence id, else 0
    (one prompt per row, never padded: it only keeps transformers from warning)."""
    eos = generation_config.eos_token_id
    first_eos = eos[0] if isinstance(eos, list) and eos else eos if isinstance(eos, int) else None
    pad = generation_config.pad_token_id if generation_config.pad_token_id is not None else first_eos
    return pad if pad is not None else 0
