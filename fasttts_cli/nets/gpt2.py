"""The GPT-2 trunk of UnifiedVoice: HF `Conv1D` layout (keys `gpt.h.N...`, `gpt.ln_f`), a pure function
of `inputs_embeds`, an attention mask and explicit past key/values (layout: `unified_voice` docstring)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from fasttts_cli.nets.unified_voice_config import UnifiedVoiceConfig


class Conv1D(nn.Module):
    """HF GPT-2's Conv1D: a Linear whose weight is stored (in, out)."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, self.weight) + self.bias


class GPT2Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(d // heads)
        self.c_attn = Conv1D(d, 3 * d)
        self.c_proj = Conv1D(d, d)

    def forward(
        self, x: torch.Tensor, allowed: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        q, k, v = self.c_attn(x).chunk(3, dim=-1)
        q = q.view(b, t, self.heads, -1).transpose(1, 2)
        k = torch.cat([past_k, k.view(b, t, self.heads, -1).transpose(1, 2)], dim=2)
        v = torch.cat([past_v, v.view(b, t, self.heads, -1).transpose(1, 2)], dim=2)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        # finfo.min (not -inf): a left-padding row whose keys are all masked stays finite (its output is
        # never used); allowed keys are untouched, masked ones get exactly zero weight.
        scores = torch.where(allowed, scores, torch.finfo(scores.dtype).min)
        out = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, t, d)
        return self.c_proj(out), k, v


class GPT2MLP(nn.Module):
    def __init__(self, d: int, inner: int) -> None:
        super().__init__()
        self.c_fc = Conv1D(d, inner)
        self.c_proj = Conv1D(inner, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # HF "gelu_new"


class GPT2Block(nn.Module):
    def __init__(self, cfg: UnifiedVoiceConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.model_dim, eps=cfg.layer_norm_eps)
        self.attn = GPT2Attention(cfg.model_dim, cfg.heads)
        self.ln_2 = nn.LayerNorm(cfg.model_dim, eps=cfg.layer_norm_eps)
        self.mlp = GPT2MLP(cfg.model_dim, cfg.n_inner)

    def forward(
        self, x: torch.Tensor, allowed: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a, k, v = self.attn(self.ln_1(x), allowed, past_k, past_v)
        x = x + a
        return x + self.mlp(self.ln_2(x)), k, v


class GPT2Trunk(nn.Module):
    """GPT-2 blocks + ln_f, without token or position embeddings (the original zeroes wpe, drops wte)."""

    def __init__(self, cfg: UnifiedVoiceConfig) -> None:
        super().__init__()
        self.h = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.model_dim, eps=cfg.layer_norm_eps)


class PosTable(nn.Module):
    """Learned absolute positions, stored as `<name>.emb.weight`."""

    def __init__(self, rows: int, d: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(rows, d)
