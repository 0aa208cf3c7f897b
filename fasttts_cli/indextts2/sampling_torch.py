"""The original's logits processors (HF `generate` semantics) on tensors, a row per line or beam.

Same semantics as `fasttts_cli.indextts2.sampling` (the numpy reference, which the generate loop samples
with on every backend; the tests hold them equal): repetition penalty on the set of seen ids (dummy
prefix ids included), temperature, top-k (ties survive), top-p (stable ascending sort, cumulative float64
probability), on log-probabilities with min_tokens_to_keep 2 in beam mode and on raw logits with 1
otherwise. The parity check (parity_torch, stage 3.6) and the GPU bench run them on the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fasttts_cli.indextts2.sampling import SamplingParams

NEG_INF = float("-inf")


# ------------------------------------------------------------------------------------ row parameters


@dataclass
class RowParams:
    """Per-row sampling settings as device tensors (rows = lines x beams)."""

    temperature: torch.Tensor  # (R,) float32
    top_k: torch.Tensor  # (R,) int64
    top_p: torch.Tensor  # (R,) float64
    penalty: torch.Tensor  # (R,) float32

    @classmethod
    def build(
        cls, params: Sequence[SamplingParams], rows_per_line: int, device: torch.device | str
    ) -> RowParams:
        def col(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(np.repeat(values, rows_per_line), dtype=dtype, device=device)

        return cls(
            col([p.temperature for p in params], torch.float32),
            col([p.top_k for p in params], torch.int64),
            col([p.top_p for p in params], torch.float64),
            col([p.repetition_penalty for p in params], torch.float32),
        )

    def select(self, index: torch.Tensor) -> RowParams:
        return RowParams(
            *(t.index_select(0, index) for t in (self.temperature, self.top_k, self.top_p, self.penalty))
        )


# ------------------------------------------------------------------------------------ processors


def apply_repetition_penalty(scores: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    pen = penalty[:, None]
    return torch.where(seen, torch.where(scores < 0, scores * pen, scores / pen), scores)


def apply_top_k(scores: torch.Tensor, top_k: torch.Tensor, keep: int) -> torch.Tensor:
    """Drop everything strictly below each row's k-th largest score; rows with top_k <= 0 untouched."""
    v = scores.shape[-1]
    k = top_k.clamp(min=keep).clamp(max=v)
    kth = torch.sort(scores, dim=-1, descending=True).values.gather(1, (k - 1)[:, None])
    kth = torch.where((top_k > 0)[:, None], kth, torch.full_like(kth, NEG_INF))
    return scores.masked_fill(scores < kth, NEG_INF)


def apply_top_p(scores: torch.Tensor, top_p: torch.Tensor, keep: int) -> torch.Tensor:
    """Drop the low tail whose cumulative probability (ascending, float64) is <= 1 - p; rows with
    top_p >= 1 untouched; the `keep` best always survive."""
    srt, order = torch.sort(scores, dim=-1, stable=True)
    cum = torch.softmax(srt.double(), dim=-1).cumsum(dim=-1)
    remove = cum <= (1.0 - top_p)[:, None]
    remove[:, -keep:] = False
    remove &= (top_p < 1.0)[:, None]
    mask = torch.zeros_like(remove).scatter(1, order, remove)
    return scores.masked_fill(mask, NEG_INF)


def process_scores(
    logits: torch.Tensor, seen: torch.Tensor, rp: RowParams, *, beam_mode: bool, do_sample: bool
) -> torch.Tensor:
    """(R, V) float32 scores the original draws from (see `indextts2.sampling.process_logits`)."""
    logits = logits.float()
    scores = torch.log_softmax(logits.double(), dim=-1).float() if beam_mode else logits
    scores = apply_repetition_penalty(scores, seen, rp.penalty)
    if not do_sample:
        return scores
    keep = 2 if beam_mode else 1
    scores = scores / rp.temperature[:, None]
    scores = apply_top_k(scores, rp.top_k, keep)
    return apply_top_p(scores, rp.top_p, keep)
