"""PerceiverResampler of IndexTTS-2's conditioners (keys `perceiver_encoder.` / `emo_perceiver_encoder.`).

Quirks kept on purpose (spec §2.6.2): the latents attend over [latents | context] (queries included in
the keys), the attention blocks have no pre-norm, GEGLU takes the first half as x and the second half as
the gate, and the closing "RMSNorm" is L2-normalise * sqrt(dim) * gamma.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class PerceiverConfig:
    dim: int
    dim_context: int
    num_latents: int
    heads: int
    dim_head: int = 64
    depth: int = 2
    ff_inner: int | None = None  # default int(dim * ff_mult * 2 / 3), as the original sizes it
    ff_mult: float = 4

    @property
    def inner(self) -> int:
        return self.ff_inner if self.ff_inner is not None else int(self.dim * self.ff_mult * 2 / 3)


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = dim_head**-0.5
        inner = heads * dim_head
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_kv = nn.Linear(dim, 2 * inner, bias=False)
        self.to_out = nn.Linear(inner, dim, bias=False)

    def forward(self, latents: torch.Tensor, context: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        kv_in = torch.cat([latents, context], dim=1)
        b, n, _ = latents.shape
        q = self.to_q(latents).view(b, n, self.heads, -1).transpose(1, 2)
        k, v = self.to_kv(kv_in).chunk(2, dim=-1)
        k = k.reshape(b, kv_in.shape[1], self.heads, -1).transpose(1, 2)
        v = v.reshape(b, kv_in.shape[1], self.heads, -1).transpose(1, 2)
        sim = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        sim = torch.where(key_mask[:, None, None, :], sim, -torch.finfo(sim.dtype).max)
        out = torch.matmul(sim.softmax(dim=-1), v).transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)


class _GEGLU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, gate = x.chunk(2, dim=-1)
        return F.gelu(gate) * x


def _feed_forward(dim: int, inner: int) -> nn.Sequential:
    # Indices 0 and 2 carry the weights (`layers.N.1.0`, `layers.N.1.2`), as in the checkpoint.
    return nn.Sequential(nn.Linear(dim, 2 * inner), _GEGLU(), nn.Linear(inner, dim))


class _L2Norm(nn.Module):
    """The original's "RMSNorm": F.normalize (no epsilon term beyond its 1e-12 clamp) * sqrt(dim) * gamma."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = dim**0.5
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=-1) * self.scale * self.gamma


class PerceiverResampler(nn.Module):
    def __init__(self, cfg: PerceiverConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.proj_context = (
            nn.Linear(cfg.dim_context, cfg.dim) if cfg.dim_context != cfg.dim else nn.Identity()
        )
        self.latents = nn.Parameter(torch.zeros(cfg.num_latents, cfg.dim))
        self.layers = nn.ModuleList(
            nn.ModuleList([_Attention(cfg.dim, cfg.heads, cfg.dim_head), _feed_forward(cfg.dim, cfg.inner)])
            for _ in range(cfg.depth)
        )
        self.norm = _L2Norm(cfg.dim)

    def forward(self, context: torch.Tensor, context_mask: torch.Tensor | None = None) -> torch.Tensor:
        """context (B, T, dim_context), context_mask (B, T) bool or None -> (B, num_latents, dim)."""
        b, t, _ = context.shape
        x = self.proj_context(context)
        latents = self.latents.unsqueeze(0).expand(b, -1, -1)
        # The latents themselves are always valid keys ([num_latents x True] + context mask).
        head = torch.ones(b, self.cfg.num_latents, dtype=torch.bool, device=context.device)
        if context_mask is None:
            context_mask = torch.ones(b, t, dtype=torch.bool, device=context.device)
        key_mask = torch.cat([head, context_mask.to(torch.bool)], dim=1)
        for attn, ff in self.layers:
            latents = attn(latents, x, key_mask) + latents
            latents = ff(latents) + latents
        return self.norm(latents)
