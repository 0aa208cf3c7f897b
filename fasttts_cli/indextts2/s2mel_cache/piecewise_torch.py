"""The DiT run in pieces over the same `DiT` module's weights (PyTorch), with per-(layer, step) caching.

`TorchPieces(dit)` exposes the pieces `core.guided_velocity` drives: `DiT.embed`, each block's
`skip_in` / `attention_out` / `ffn_out`, and `DiT.head`. `solve` is `CFM.solve`'s loop (core.prepare and
core.euler) over these pieces, so with no policy (T0) it is the single-graph CFM; with a policy it skips
what the policy says. `diagonal_scores` measures how diagonal each (layer, step) attention map is
(calibration phase 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fasttts_cli.cfm import loop as core
from fasttts_cli.cfm.loop import FULL, CacheState, CFMRun, run_steps
from fasttts_cli.cfm.loop import prepare as prepare  # torch runs prepare with the one masking
from fasttts_cli.nets.dit import DiT, DiTInputs, apply_rope

# Half-width (frames) of the band around the diagonal whose attention mass defines "diagonal-like".
DIAGONAL_BAND = 3


class TorchPieces:
    def __init__(self, dit: DiT, row_padding: bool = True) -> None:
        self.dit = dit
        self.depth = dit.cfg.depth
        self.skip_plan = dict(dit.skip_plan)
        self.row_padding = row_padding  # False: the original's padded-row WaveNet padding

    def embed(self, x, prompt_x, x_lens, t, style, mu) -> DiTInputs:
        return self.dit.embed(x, prompt_x, x_lens, t, style, mu)

    def first_rows(self, ctx: DiTInputs, n: int) -> DiTInputs:
        def cut(a: torch.Tensor) -> torch.Tensor:
            return a if a.shape[0] == 1 else a[:n]

        return DiTInputs(
            h=ctx.h[:n],
            c=ctx.c[:n],
            t1=ctx.t1[:n],
            x_t=ctx.x_t[:n],
            rope=ctx.rope,
            key_mask=cut(ctx.key_mask),
            x_mask=cut(ctx.x_mask),
        )

    def hidden(self, ctx: DiTInputs) -> torch.Tensor:
        return ctx.h

    def skip_in(self, layer: int, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.dit.transformer.layers[layer].skip_in(x, skip)

    def module(self, kind: str, layer: int, x: torch.Tensor, ctx: DiTInputs) -> torch.Tensor:
        block = self.dit.transformer.layers[layer]
        n = x.shape[0]
        if ctx.c.shape[0] != n:
            ctx = self.first_rows(ctx, n)
        if kind == "attn":
            return block.attention_out(x, ctx.c, ctx.rope, ctx.key_mask)
        return block.ffn_out(x, ctx.c)

    def head(self, h, x, x_lens, t, prompt_lens, ctx: DiTInputs) -> torch.Tensor:
        if ctx.c.shape[0] != h.shape[0]:
            ctx = self.first_rows(ctx, h.shape[0])
        start = None if prompt_lens is None else self.dit.head_start(prompt_lens)
        return self.dit.head(h, ctx, t, x_lens if self.row_padding else None, start)

    def cat(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.cat([a, b], dim=0)

    def zeros_like(self, a: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(a)

    def rows_t(self, value: np.float32, n: int) -> torch.Tensor:
        return torch.full((n,), float(value), dtype=torch.float32, device=self.dit.input_pos.device)


@torch.inference_mode()
def solve(dit: DiT, *inputs: Any, **options: Any) -> torch.Tensor:
    """core.solve over this DiT's pieces: (mu, x_lens, prompt, prompt_lens, style, z, steps, cfg_rate,
    schedule=, times=, plan=) -> x (B, 80, T); with no plan (T0) it is `CFM.solve`."""
    return core.solve(TorchPieces(dit), inputs[:6], *inputs[6:], **options)


def attention_probs(dit: DiT, layer: int, x: torch.Tensor, ctx: DiTInputs) -> torch.Tensor:
    """(N, H, T, T) softmax attention weights of block `layer` for the stream x entering it."""
    block = dit.transformer.layers[layer]
    att = block.attention
    b, t, _ = x.shape
    xn = block.attention_norm(x, ctx.c if ctx.c.shape[0] == b else ctx.c[:b])
    q, k, _ = att.wqkv(xn).split(att.n_head * att.head_dim, dim=-1)
    q = apply_rope(q.view(b, t, att.n_head, att.head_dim), ctx.rope).transpose(1, 2)
    k = apply_rope(k.view(b, t, att.n_head, att.head_dim), ctx.rope).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / float(np.sqrt(att.head_dim))
    km = ctx.key_mask if ctx.key_mask.shape[0] in (1, b) else ctx.key_mask[:b]
    scores = scores.masked_fill(~km, float("-inf"))
    return torch.softmax(scores, dim=-1)


def diagonal_mass(probs: torch.Tensor, key_mask: torch.Tensor, band: int = DIAGONAL_BAND) -> torch.Tensor:
    """(N,) per row: the attention mass on keys within +-band frames of the query, averaged over heads and
    the row's valid queries. 1.0 = purely local (diagonal) attention; uniform attention over T valid
    frames gives about (2 band + 1) / T."""
    n, _, t, _ = probs.shape
    i = torch.arange(t)
    near = ((i[:, None] - i[None, :]).abs() <= band).to(probs.dtype)
    mass = (probs * near).sum(-1).mean(1)  # (N, T)
    valid = key_mask.reshape(key_mask.shape[0], t).to(probs.dtype).expand(n, t)
    return (mass * valid).sum(-1) / valid.sum(-1)


@torch.inference_mode()
def diagonal_scores(dit: DiT, run: CFMRun, x0: torch.Tensor, band: int = DIAGONAL_BAND) -> np.ndarray:
    """(depth, steps) diagonal-likeness of each (layer, step) attention map on the uncompressed run,
    averaged over the conditional rows (the rows every policy computes)."""
    pieces = TorchPieces(dit)
    b = x0.shape[0]
    out = np.zeros((dit.cfg.depth, run.steps), np.float64)

    def observe(layer: int, step: int, h: torch.Tensor, ctx: Any) -> None:
        cond = pieces.first_rows(ctx, b)
        probs = attention_probs(dit, layer, h[:b], cond)
        out[layer, step] = float(diagonal_mass(probs, cond.key_mask, band).mean())

    run_steps(pieces, FULL, run, x0, CacheState(), observer=observe)
    return out
