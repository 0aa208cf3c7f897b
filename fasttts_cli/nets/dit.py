"""The s2mel DiT estimator (spec §2.7.4): input merge, UViT blocks with AdaRMS norms and RoPE, WaveNet head.

Layout of one call: `DiT.forward(x, prompt_x, x_lens, t, style, cond) -> v`, all tensors explicit:
x, prompt_x (B, 80, T); x_lens (B,) or (1,) int64 (keys at positions >= x_lens[b] are masked for row b);
t (B,) float; style (B, style_dim); cond (B, T, content_dim); v (B, 80, T).

The call is split into pieces with clean boundaries so a later exporter can run it piecewise and cache
per-(block, step) module outputs (issue 5): `embed` (input merge + time embeddings), then per block
`skip_in` / `attention_out` / `ffn_out`, then `head`. `forward` is exactly that sequence.
Module names mirror the official state dict (`estimator.…` under `net.cfm`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fasttts_cli.nets.wavenet import WaveNet, WaveNetConfig, WNLinear


def find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - n % k


@dataclass(frozen=True)
class DiTConfig:
    hidden_dim: int
    num_heads: int
    depth: int
    in_channels: int  # mel bins
    content_dim: int  # width of `cond` (= length regulator channels)
    style_dim: int
    content_codebook_size: int  # rows of the unused discrete `cond_embedder` (kept for strict keys)
    max_positions: int  # length of the `input_pos` buffer in the file
    freq_embed_dim: int  # sinusoidal timestep embedding width (2 x the `freqs` buffer)
    wavenet: WaveNetConfig
    uvit_skip: bool = True
    ffn_dim: int | None = None  # None: gpt-fast's rule find_multiple(int(2 * 4 * dim / 3), 256)
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    time_scale: float = 1000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_dim // self.num_heads

    @property
    def ffn_hidden(self) -> int:
        return self.ffn_dim or find_multiple(int(2 * 4 * self.hidden_dim / 3), 256)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps) * self.weight


class AdaptiveRMSNorm(nn.Module):
    """w * RMSNorm(x) + b with (w, b) = project_layer(c) (c = the timestep embedding, (B, 1, D))."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.project_layer = nn.Linear(dim, 2 * dim)
        self.norm = RMSNorm(dim, eps)
        self.dim = dim

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        w, b = torch.split(self.project_layer(c), self.dim, dim=-1)
        return w * self.norm(x) + b


def rope_table(t: int | torch.Tensor, head_dim: int, base: float, device: torch.device) -> torch.Tensor:
    """(T, head_dim/2, 2) cos/sin for positions 0..T-1 (gpt-fast's precompute_freqs_cis, on the fly)."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device)[: head_dim // 2].float() / head_dim))
    ang = torch.outer(torch.arange(t, device=device).to(inv.dtype), inv)
    return torch.stack([torch.cos(ang), torch.sin(ang)], dim=-1)


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """x (B, T, H, D); rotation of interleaved pairs (x[2i], x[2i+1])."""
    xs = x.reshape(*x.shape[:-1], -1, 2)
    r = rope.unsqueeze(0).unsqueeze(2)  # (1, T, 1, D/2, 2)
    out = torch.stack(
        [
            xs[..., 0] * r[..., 0] - xs[..., 1] * r[..., 1],
            xs[..., 1] * r[..., 0] + xs[..., 0] * r[..., 1],
        ],
        dim=-1,
    )
    return out.flatten(3)


class _OrtRope(torch.autograd.Function):
    """apply_rope on (B, T, H*Dh); exported as ONNX Runtime's RotaryEmbedding (interleaved pairs)."""

    @staticmethod
    def forward(ctx, x, positions, cos, sin, heads: int):  # type: ignore[override]
        b, t, d = x.shape  # positions are 0..T-1 per row: the eager form needs only the table
        rope = torch.stack([cos, sin], dim=-1)
        return apply_rope(x.view(b, t, heads, d // heads), rope).reshape(b, t, d)

    @staticmethod
    def symbolic(g, x, positions, cos, sin, heads: int):  # type: ignore[no-untyped-def]
        return g.op(
            "com.microsoft::RotaryEmbedding", x, positions, cos, sin, interleaved_i=1, num_heads_i=heads
        )


class Attention(nn.Module):
    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.n_head, self.head_dim = cfg.num_heads, cfg.head_dim
        self.wqkv = nn.Linear(cfg.hidden_dim, 3 * cfg.num_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_dim, bias=False)
        # Set by `use_ort_attention` for graphs that run only on ONNX Runtime: exported, RoPE becomes its
        # RotaryEmbedding contrib op instead of a chain of split/mul/sub/concat nodes over q and k (3-5%
        # of a full-size CFG step at 516 frames on these CPUs). TensorRT cannot parse contrib ops, so
        # engines for it keep the standard form. (MultiHeadAttention for the rest measured no faster
        # than MatMul/Softmax with 2 threads, so the attention itself stays standard.)
        self.ort_contrib = False

    def forward(self, x: torch.Tensor, rope: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """x (B, T, D); key_mask bool (B|1, 1, 1, T), True = attend."""
        b, t, _ = x.shape
        q, k, v = self.wqkv(x).split(self.n_head * self.head_dim, dim=-1)
        if self.ort_contrib and torch.onnx.is_in_onnx_export():
            positions = torch.arange(t, device=x.device).unsqueeze(0).expand(b, t)
            cos, sin = rope[..., 0], rope[..., 1]
            q = _OrtRope.apply(q, positions, cos, sin, self.n_head).view(b, t, self.n_head, self.head_dim)
            k = _OrtRope.apply(k, positions, cos, sin, self.n_head).view(b, t, self.n_head, self.head_dim)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
        else:
            q = apply_rope(q.view(b, t, self.n_head, self.head_dim), rope).transpose(1, 2)
            k = apply_rope(k.view(b, t, self.n_head, self.head_dim), rope).transpose(1, 2)
        v = v.view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        # An additive bias rather than the bool mask: exported, a bool mask becomes Where and IsNaN passes
        # over every (B, H, T, T) score (15% of an ORT step); a key mask never empties a row, so -1e9
        # gives the same probabilities as -inf.
        bias = torch.zeros(key_mask.shape, dtype=q.dtype, device=q.device).masked_fill(~key_mask, -1e9)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.wo(y.transpose(1, 2).reshape(b, t, self.n_head * self.head_dim))


class FeedForward(nn.Module):
    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.hidden_dim, cfg.ffn_hidden, bias=False)
        self.w3 = nn.Linear(cfg.hidden_dim, cfg.ffn_hidden, bias=False)
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    """out = h + FFN(AdaRMS(h)), h = x + Attn(AdaRMS(x)); x first merged with a UViT skip if given.

    The three pieces are separate methods so a caller can compute or reuse each one per step.
    """

    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.attention = Attention(cfg)
        self.feed_forward = FeedForward(cfg)
        self.ffn_norm = AdaptiveRMSNorm(cfg.hidden_dim, cfg.norm_eps)
        self.attention_norm = AdaptiveRMSNorm(cfg.hidden_dim, cfg.norm_eps)
        # Every block owns one in the file (even those that never receive a skip).
        self.skip_in_linear = nn.Linear(2 * cfg.hidden_dim, cfg.hidden_dim) if cfg.uvit_skip else None

    def skip_in(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        assert self.skip_in_linear is not None
        return self.skip_in_linear(torch.cat([x, skip], dim=-1))

    def attention_out(
        self, x: torch.Tensor, c: torch.Tensor, rope: torch.Tensor, key_mask: torch.Tensor
    ) -> torch.Tensor:
        return self.attention(self.attention_norm(x, c), rope, key_mask)

    def ffn_out(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return self.feed_forward(self.ffn_norm(h, c))

    def forward(
        self,
        x: torch.Tensor,
        c: torch.Tensor,
        rope: torch.Tensor,
        key_mask: torch.Tensor,
        skip: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if skip is not None:
            x = self.skip_in(x, skip)
        h = x + self.attention_out(x, c, rope, key_mask)
        return h + self.ffn_out(h, c)


class Transformer(nn.Module):
    """Holds `layers` and the final AdaRMS `norm` (key names of the file)."""

    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.depth))
        self.norm = AdaptiveRMSNorm(cfg.hidden_dim, cfg.norm_eps)


def uvit_skip_plan(depth: int) -> dict[int, int]:
    """receiving block -> emitting block. Blocks i < depth//2 emit, blocks i > depth//2 receive, LIFO
    (13 blocks: 7<-5, 8<-4, ..., 12<-0; block 6 neither)."""
    emit = [i for i in range(depth) if i < depth // 2]
    recv = [i for i in range(depth) if i > depth // 2]
    return {r: emit[len(emit) - 1 - j] for j, r in enumerate(recv) if j < len(emit)}


class TimestepEmbedder(nn.Module):
    """[cos, sin](scale * t * freqs) -> Linear -> SiLU -> Linear. `freqs` is the file's buffer."""

    def __init__(self, hidden: int, freq_dim: int, scale: float) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(freq_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        half = freq_dim // 2
        self.register_buffer("freqs", torch.exp(-math.log(10000) * torch.arange(half).float() / half))
        self.scale = scale
        self.odd = freq_dim % 2 == 1

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        args = self.scale * t[:, None].float() * self.freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if self.odd:
            emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
        return self.mlp(emb)


class FinalLayer(nn.Module):
    """LayerNorm(no affine, eps 1e-6) -> x * (1 + scale) + shift, (shift, scale) from t1 -> WN-Linear."""

    def __init__(self, hidden: int, out: int) -> None:
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.linear = WNLinear(hidden, out)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 2 * hidden))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        x = self.norm_final(x) * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)
        return self.linear(x)


@dataclass
class DiTInputs:
    """What `DiT.embed` hands to the blocks and the head: explicit tensors only."""

    h: torch.Tensor  # (B, T, D) merged input
    c: torch.Tensor  # (B, 1, D) timestep embedding t1 for the AdaRMS norms
    t1: torch.Tensor  # (B, D)
    x_t: torch.Tensor  # (B, T, in_channels) the noisy x, channels last (long skip)
    rope: torch.Tensor  # (T, head_dim/2, 2)
    key_mask: torch.Tensor  # bool (B|1, 1, 1, T)
    x_mask: torch.Tensor  # float (B|1, 1, T)


class DiT(nn.Module):
    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, wn = cfg.hidden_dim, cfg.wavenet
        if wn.hidden_dim != d:
            # The original feeds the DiT-width t1 into the wavenet-width FinalLayer: they must agree.
            raise ValueError(f"wavenet.hidden_dim {wn.hidden_dim} must equal DiT.hidden_dim {d}")
        self.transformer = Transformer(cfg)
        self.x_embedder = WNLinear(cfg.in_channels, d)  # in the file, unused by inference
        self.cond_embedder = nn.Embedding(cfg.content_codebook_size, d)  # in the file, unused
        self.cond_projection = nn.Linear(cfg.content_dim, d)
        self.t_embedder = TimestepEmbedder(d, cfg.freq_embed_dim, cfg.time_scale)
        self.register_buffer("input_pos", torch.arange(cfg.max_positions))  # in the file, unused
        self.t_embedder2 = TimestepEmbedder(wn.hidden_dim, cfg.freq_embed_dim, cfg.time_scale)
        self.conv1 = nn.Linear(d, wn.hidden_dim)
        self.conv2 = nn.Conv1d(wn.hidden_dim, cfg.in_channels, 1)
        self.wavenet = WaveNet(wn)
        self.final_layer = FinalLayer(wn.hidden_dim, wn.hidden_dim)
        self.res_projection = nn.Linear(d, wn.hidden_dim)
        self.content_mask_embedder = nn.Embedding(1, d)  # in the file, unused
        self.skip_linear = nn.Linear(d + cfg.in_channels, d)
        self.cond_x_merge_linear = nn.Linear(2 * cfg.in_channels + d + cfg.style_dim, d)
        self.skip_plan = uvit_skip_plan(cfg.depth) if cfg.uvit_skip else {}

    # -- pieces --------------------------------------------------------------------------------------

    def embed(
        self,
        x: torch.Tensor,
        prompt_x: torch.Tensor,
        x_lens: torch.Tensor,
        t: torch.Tensor,
        style: torch.Tensor,
        cond: torch.Tensor,
    ) -> DiTInputs:
        """Input merge [x | prompt_x | cond_projection(cond) | style] -> Linear, and the time embedding."""
        T = x.shape[-1]
        t1 = self.t_embedder(t)
        x_t = x.transpose(1, 2)
        parts = [x_t, prompt_x.transpose(1, 2), self.cond_projection(cond)]
        parts.append(style[:, None, :].expand(-1, T, -1))
        h = self.cond_x_merge_linear(torch.cat(parts, dim=-1))
        valid = torch.arange(T, device=x.device).unsqueeze(0) < x_lens.unsqueeze(1)  # (B|1, T)
        return DiTInputs(
            h=h,
            c=t1.unsqueeze(1),
            t1=t1,
            x_t=x_t,
            rope=rope_table(T, self.cfg.head_dim, self.cfg.rope_base, x.device),
            key_mask=valid[:, None, None, :],
            x_mask=valid[:, None, :].to(x.dtype),
        )

    @property
    def head_margin(self) -> int:
        """How many frames left of a position the head's output there reads (the WaveNet's k-tap convs;
        everything else in the head is per frame)."""
        return sum(layer.pad_left for layer in self.wavenet.in_layers)

    def head_start(self, prompt_lens: torch.Tensor) -> torch.Tensor:
        """First frame the head must see so that its output is exact from every row's prompt end on:
        min(prompt_lens) - head_margin, at least 0 (0-d int64)."""
        return (prompt_lens.min() - self.head_margin).clamp(min=0)

    def head(
        self,
        h: torch.Tensor,
        inp: DiTInputs,
        t: torch.Tensor,
        x_lens: torch.Tensor | None = None,
        start: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Final AdaRMS norm, long skip, WaveNet, FinalLayer, conv2 -> v (B, in_channels, T).

        x_lens given: each row's WaveNet reflects at its own end (padded row == row alone); None: the
        original's padding (reflect at the array end), which is what the original does for padded rows.
        start (0-d int64, `head_start`): run the head on frames [start, T) only and return zeros before.
        The CFM discards v in the prompt region, and the head's output at a frame depends on frames at
        most `head_margin` to its left, so v from each row's prompt end on is unchanged; the prompt is
        usually most of the frames (a reference of several seconds, a line of a few), and the head is
        about a third of a step's work.
        """
        if start is not None:
            return self._cropped_head(h, inp, t, x_lens, start)
        x_res = self.transformer.norm(h, inp.c)
        x_res = self.skip_linear(torch.cat([x_res, inp.x_t], dim=-1))
        y = self.conv1(x_res).transpose(1, 2)
        t2 = self.t_embedder2(t)
        lengths = None if x_lens is None else x_lens.expand(h.shape[0])
        y = self.wavenet(y, inp.x_mask, t2.unsqueeze(2), lengths).transpose(1, 2) + self.res_projection(x_res)
        y = self.final_layer(y, inp.t1).transpose(1, 2)
        return self.conv2(y)

    def _cropped_head(
        self,
        h: torch.Tensor,
        inp: DiTInputs,
        t: torch.Tensor,
        x_lens: torch.Tensor | None,
        start: torch.Tensor,
    ) -> torch.Tensor:
        # index_select/scatter with a Range index keep the crop dynamic in the exported graph
        full = h.shape[1]
        idx = torch.arange(start, full, device=h.device)
        crop = DiTInputs(
            h=h.index_select(1, idx),
            c=inp.c,
            t1=inp.t1,
            x_t=inp.x_t.index_select(1, idx),
            rope=inp.rope,  # unused by the head
            key_mask=inp.key_mask,  # unused by the head
            x_mask=inp.x_mask.index_select(2, idx),
        )
        v = self.head(crop.h, crop, t, None if x_lens is None else x_lens - start)
        out = torch.zeros(v.shape[0], v.shape[1], full, dtype=v.dtype, device=v.device)
        return out.scatter(2, idx.view(1, 1, -1).expand(v.shape[0], v.shape[1], -1), v)

    # -- the whole call ------------------------------------------------------------------------------

    def forward(
        self,
        x: torch.Tensor,
        prompt_x: torch.Tensor,
        x_lens: torch.Tensor,
        t: torch.Tensor,
        style: torch.Tensor,
        cond: torch.Tensor,
        row_padding: bool = True,
        prompt_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """v (B, in_channels, T). row_padding=False reproduces the original's padded-row behaviour.
        prompt_lens (B,): v is only needed from each row's prompt end on; the head skips what it can
        (`head`), and v before min(prompt_lens) - head_margin is zero."""
        inp = self.embed(x, prompt_x, x_lens, t, style, cond)
        h = inp.h
        skips: dict[int, torch.Tensor] = {}
        emitters = set(self.skip_plan.values())
        for i, block in enumerate(self.transformer.layers):
            src = self.skip_plan.get(i)
            h = block(h, inp.c, inp.rope, inp.key_mask, skips.pop(src) if src is not None else None)
            if i in emitters:
                skips[i] = h
        start = None if prompt_lens is None else self.head_start(prompt_lens)
        return self.head(h, inp, t, x_lens if row_padding else None, start)


def use_ort_attention(module: nn.Module, on: bool = True) -> None:
    """Export every DiT attention in `module` with ONNX Runtime's RotaryEmbedding (or not: `on=False`)."""
    for m in module.modules():
        if isinstance(m, Attention):
            m.ort_contrib = on
