"""The stage protocols every backend implements (one seam, whatever runs the networks).

`GPTSteps` is the GPT's: the one generate loop (indextts2/generate_loop.py) drives ONNX Runtime's full-KV
and in-place trunks, the TensorRT-LLM worker client and the torch decoder through it, and owns the
sampling and the beam / row bookkeeping itself, so no backend carries a copy of them.

Row contract (what `step` may ask): after `prefill(prompts, rows_per_prompt, ...)` line i owns
rows_per_prompt[i] consecutive rows, lines in order. Each `step(parents, tokens)` makes the next rows:
row r continues the previous output's row parents[r] (a row of the same line: beams) and is fed
tokens[r]. A finished line's rows leave (never come back); the remaining lines keep their order and
their rows stay consecutive. A backend with a static batch (TensorRT-LLM) keeps the rows that left
internally; a host cache drops them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class StepOutput:
    """One GPT call's result for every current row, on the host."""

    logits: np.ndarray  # (R, n_mel) float32, the last position of every row
    hidden: np.ndarray  # (R, D) float32, after ln_f and final_norm, the same position


@runtime_checkable
class GPTSteps(Protocol):
    """A GPT that prefills a batch of lines and then steps it one code at a time (see the module doc).

    `prompt` makes a line's opaque GPT input (an embedded prefix for a host trunk, conditioning rows and
    text ids for the TensorRT-LLM worker); callers only take its `len` and hand it back."""

    @property
    def vocab(self) -> int:
        """Mel codes the GPT scores (logits columns)."""
        ...

    @property
    def max_codes(self) -> int:
        """Most codes one line can have: code k sits at mel position k + 2."""
        ...

    def prompt(self, spk_latents: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int]) -> Any: ...

    def prefill(self, prompts: Sequence[Any], rows_per_prompt: Sequence[int], max_steps: int) -> StepOutput:
        """[prompt | start token at mel position 0] for every line; line i gets rows_per_prompt[i] identical
        rows. At most `max_steps` steps follow."""
        ...

    def step(self, parents: np.ndarray, tokens: np.ndarray) -> StepOutput:
        """The next rows (see the row contract); the code fed at step k sits at mel position k + 2."""
        ...

    def end(self) -> None:
        """The generation is over: drop its cache (the next call is a prefill or a latent pass)."""
        ...

    def latents(self, prompts: Sequence[Any], codes: Sequence[np.ndarray]) -> list[Any]:
        """The teacher-forced second pass (spec §2.6.7): (n_i, D) per line."""
        ...
