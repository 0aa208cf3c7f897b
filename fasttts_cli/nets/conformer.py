"""WeNet-style Conformer encoder as IndexTTS-2's speaker and emotion conditioners use it.

Weight-compatible with the `conditioning_encoder.` / `emo_conditioning_encoder.` keys of `gpt.pth`.
Quirks kept on purpose (spec §2.6.2, §6): `conv2d2` subsampling into one wide Linear, x * sqrt(d)
with the sinusoidal table used only as the "relative" position input (never added to x), relative
attention WITHOUT rel_shift, LayerNorm (not BatchNorm) in the conv module, SiLU, pre-norm blocks with a
per-block `norm_final` and a closing `after_norm`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ConformerConfig:
    input_size: int  # feature width of the input frames (w2v-BERT: 1024)
    output_size: int
    attention_heads: int
    linear_units: int
    num_blocks: int
    cnn_kernel: int = 15
    max_len: int = 5000  # rows of the stored sinusoidal table `embed.pos_enc.pe`


class Conv2dSubsampling2(nn.Module):
    """Conv2d(1, d, 3, stride 2) + ReLU over the (T, F) image, then Linear(d * ((F-1)//2) -> d).

    With `freq_group` set (see `subsampling_in_freq_groups`), the same function is computed one band
    of output frequency bins at a time: each band's conv output goes through its slice of the Linear
    and the partial products are summed. The full-width conv output is (d, T', F') floats, 104 MB for a
    4 s reference and 390 MB for 15 s, and ONNX Runtime wrote it three times (conv, NCHWc reorder,
    transpose); on a fresh process those pages cost more than the conv itself. Bands of 64 bins keep
    each intermediate an eighth of that and reuse the same arena blocks. Only the summation order of
    the Linear changes (relative differences ~1e-6).
    """

    freq_group: int | None = None

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        d = cfg.output_size
        self.conv = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU())
        self.out = nn.Sequential(nn.Linear(d * ((cfg.input_size - 1) // 2), d))
        self.pos_enc = _PosTable(cfg.max_len, d)
        self.xscale = math.sqrt(d)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.freq_group is not None:
            x = self._banded(x.unsqueeze(1), self.freq_group)
        else:
            x = self.conv(x.unsqueeze(1))  # (B, d, T', F')
            b, c, t, f = x.shape
            x = self.out(x.transpose(1, 2).reshape(b, t, c * f))
        # Legacy WeNet "rel_pos": the table goes to the attention as pos_emb, x is only scaled.
        return x * self.xscale, self.pos_enc.pe[:, : x.shape[1]]

    def _banded(self, x: torch.Tensor, width: int) -> torch.Tensor:
        linear = self.out[0]
        acc: torch.Tensor | None = None
        for i, lo in enumerate(range(0, self._bins(), width)):
            band = self.conv(x[..., 2 * lo : 2 * (lo + width) + 1])  # input bins 2f .. 2f+2 per f
            b, c, t, f = band.shape
            part = torch.matmul(band.transpose(1, 2).reshape(b, t, c * f), getattr(self, f"band_w{i}"))
            acc = part if acc is None else acc + part
        assert acc is not None
        return acc + linear.bias

    def _bins(self) -> int:
        return self.out[0].in_features // self.conv[0].out_channels

    def _band_weights(self, width: int) -> list[torch.Tensor]:
        """Each band's slice of the Linear, transposed to (d * bins, d_out) so an exporter stores it
        as a plain MatMul initializer (ONNX Runtime pre-packs those; a transposed one it would not)."""
        linear, d = self.out[0], self.conv[0].out_channels
        w = linear.weight.detach().view(linear.out_features, d, self._bins())  # index c * F' + f
        return [
            w[:, :, lo : lo + width].reshape(linear.out_features, -1).t().contiguous()
            for lo in range(0, self._bins(), width)
        ]


FREQ_GROUP = 64  # output frequency bins per band in exported conditioners (511 bins -> 8 bands)


@contextmanager
def subsampling_in_freq_groups(module: nn.Module, width: int | None = None) -> Iterator[None]:
    """Run every `Conv2dSubsampling2` under `module` band by band (`width` bins, default `FREQ_GROUP`)
    while the block is active (exports). The band weights exist only meanwhile, as non-persistent
    buffers: state dicts never see them."""
    width = FREQ_GROUP if width is None else width
    subs = [m for m in module.modules() if isinstance(m, Conv2dSubsampling2)]
    for m in subs:
        for i, w in enumerate(m._band_weights(width)):
            m.register_buffer(f"band_w{i}", w, persistent=False)
        m.freq_group = width
    try:
        yield
    finally:
        for m in subs:
            m.freq_group = None
            for name in [n for n in m._buffers if n.startswith("band_w")]:
                del m._buffers[name]


class _PosTable(nn.Module):
    """Holds the persistent buffer `pe` (1, max_len, d); it is loaded from the checkpoint, not recomputed."""

    def __init__(self, max_len: int, d: int) -> None:
        super().__init__()
        self.register_buffer("pe", _sinusoid(max_len, d))


def _sinusoid(max_len: int, d: int) -> torch.Tensor:
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * -(math.log(10000.0) / d))
    pe = torch.zeros(max_len, d)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe[None]


class RelPositionAttention(nn.Module):
    """MHSA with learnable u/v biases and a projected position table, but no rel_shift (WeNet removed it)."""

    def __init__(self, heads: int, d: int) -> None:
        super().__init__()
        self.h = heads
        self.d_k = d // heads
        self.linear_q = nn.Linear(d, d)
        self.linear_k = nn.Linear(d, d)
        self.linear_v = nn.Linear(d, d)
        self.linear_out = nn.Linear(d, d)
        self.linear_pos = nn.Linear(d, d, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(heads, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.zeros(heads, self.d_k))

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.linear_q(x).view(b, t, self.h, self.d_k)
        k = self.linear_k(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(x).view(b, t, self.h, self.d_k).transpose(1, 2)
        p = self.linear_pos(pos_emb).view(pos_emb.shape[0], -1, self.h, self.d_k).transpose(1, 2)
        ac = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        bd = torch.matmul((q + self.pos_bias_v).transpose(1, 2), p.transpose(-2, -1))
        scores = (ac + bd) / math.sqrt(self.d_k)
        # key_mask (B, 1, T) -> (B, 1, 1, T). A finite fill keeps fully padded rows NaN-free; the
        # probabilities of masked keys are zeroed afterwards exactly as the original does.
        keep = key_mask.unsqueeze(1)
        scores = torch.where(keep, scores, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1) * keep.to(scores.dtype)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, self.h * self.d_k)
        return self.linear_out(out)


class ConvolutionModule(nn.Module):
    def __init__(self, d: int, kernel: int) -> None:
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(d, 2 * d, 1)
        self.depthwise_conv = nn.Conv1d(d, d, kernel, padding=(kernel - 1) // 2, groups=d)
        self.norm = nn.LayerNorm(d)
        self.pointwise_conv2 = nn.Conv1d(d, d, 1)

    def forward(self, x: torch.Tensor, frame_mask: torch.Tensor) -> torch.Tensor:
        # The original zeroes padded frames before pointwise_conv1 and after pointwise_conv2 only, so its
        # bias leaks into the depthwise conv's view of padding. Zeroing again after the GLU makes padded
        # frames act exactly like the conv's own zero padding, so a masked batch row equals the row run
        # alone; without padding (all the original ever runs) every mask is a no-op.
        keep = frame_mask.to(x.dtype)  # (B, 1, T)
        x = x.transpose(1, 2) * keep
        x = F.glu(self.pointwise_conv1(x), dim=1) * keep
        x = self.depthwise_conv(x)
        x = F.silu(self.norm(x.transpose(1, 2))).transpose(1, 2)
        x = self.pointwise_conv2(x) * keep
        return x.transpose(1, 2)


class FeedForward(nn.Module):
    def __init__(self, d: int, units: int) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d, units)
        self.w_2 = nn.Linear(units, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(F.silu(self.w_1(x)))


class ConformerBlock(nn.Module):
    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        d = cfg.output_size
        self.self_attn = RelPositionAttention(cfg.attention_heads, d)
        self.feed_forward = FeedForward(d, cfg.linear_units)
        self.conv_module = ConvolutionModule(d, cfg.cnn_kernel)
        self.norm_ff = nn.LayerNorm(d)
        self.norm_mha = nn.LayerNorm(d)
        self.norm_conv = nn.LayerNorm(d)
        self.norm_final = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.norm_mha(x), mask, pos_emb)
        x = x + self.conv_module(self.norm_conv(x), mask)
        x = x + self.feed_forward(self.norm_ff(x))
        return self.norm_final(x)


class ConformerEncoder(nn.Module):
    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = Conv2dSubsampling2(cfg)
        self.encoders = nn.ModuleList(ConformerBlock(cfg) for _ in range(cfg.num_blocks))
        self.after_norm = nn.LayerNorm(cfg.output_size)

    def forward(
        self, xs: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """xs (B, T, input_size), lengths (B,) valid input frames or None (all valid).

        Returns (out (B, T', d), mask (B, 1, T') bool) with T' = (T - 1) // 2. The original passes the
        feature width (1024) as the length, which masks nothing for prompts up to 1024 frames; None does
        the same. Real lengths give batch rows that match running each row alone on its valid frames.
        """
        t = xs.shape[1]
        frames = torch.arange(t, device=xs.device)[None, :]
        if lengths is None:
            mask = torch.ones_like(frames, dtype=torch.bool).expand(xs.shape[0], t)
        else:
            mask = frames < lengths.to(xs.device)[:, None]
        x, pos_emb = self.embed(xs)
        # An output frame is valid when all three input frames under its kernel are (WeNet's [2::2]).
        mask = mask[:, None, 2::2]
        for block in self.encoders:
            x = block(x, mask, pos_emb)
        return self.after_norm(x), mask
