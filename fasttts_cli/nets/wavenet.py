"""Weight-norm layers in the official file format, and the DiT's WaveNet head (spec §2.7.4).

Weight norm: the official files store `weight_g`/`weight_v` (the old `torch.nn.utils.weight_norm` form).
Our layers hold the folded `weight` as their parameter, so inference and ONNX export see plain
convolutions, but their `state_dict()` speaks the official keys: loading folds g/v (with the same
`torch._weight_norm` call the original uses, so the folded weight is bit-identical), saving unfolds
(g = ||w||, v = w; folding that back gives w within a rounding step). `state_dict(keep_vars=True)`
returns the live folded `weight` instead, because tracing (ONNX export) finds parameters that way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


def fold_weight_norm(g: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """weight = g * v / ||v||, the norm over every dim except dim 0 (what the official files mean)."""
    return torch._weight_norm(v, g, 0)


def unfold_weight_norm(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, v) with fold_weight_norm(g, v) == w up to rounding; g has w's rank with size-1 trailing dims."""
    dims = tuple(range(1, w.dim()))
    g = torch.linalg.vector_norm(w.detach(), dim=dims, keepdim=True)
    return g, w.detach().clone()


class _WeightNormMixin:
    """State-dict translation between our folded `weight` and the official `weight_g`/`weight_v`."""

    def _save_to_state_dict(self, destination, prefix, keep_vars):  # type: ignore[no-untyped-def]
        super()._save_to_state_dict(destination, prefix, keep_vars)  # type: ignore[misc]
        if keep_vars:
            # The live tensors (torch.jit/ONNX tracing and optimizers look parameters up this way).
            return
        w = destination.pop(prefix + "weight")
        g, v = unfold_weight_norm(w)
        destination[prefix + "weight_g"] = g
        destination[prefix + "weight_v"] = v

    def _load_from_state_dict(  # type: ignore[no-untyped-def]
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        gk, vk = prefix + "weight_g", prefix + "weight_v"
        if gk in state_dict and vk in state_dict:
            state_dict[prefix + "weight"] = fold_weight_norm(state_dict.pop(gk), state_dict.pop(vk))
        super()._load_from_state_dict(  # type: ignore[misc]
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


class WNLinear(_WeightNormMixin, nn.Linear):
    """nn.Linear whose file form is weight_g (out, 1) / weight_v (out, in)."""


class WNConv1d(_WeightNormMixin, nn.Conv1d):
    """nn.Conv1d whose file form is weight_g (out, 1, 1) / weight_v (out, in, k)."""


class WNConvTranspose1d(_WeightNormMixin, nn.ConvTranspose1d):
    """nn.ConvTranspose1d; its weight is (in, out, k), so g is per INPUT channel: (in, 1, 1)."""


def row_mask(lengths: torch.Tensor, size: int | torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, T) mask, 1 where position < lengths[b] (lengths (B,) or (1,), broadcast)."""
    pos = torch.arange(size, device=lengths.device)
    return (pos.unsqueeze(0) < lengths.unsqueeze(1)).to(dtype)


def pad_rows(x: torch.Tensor, left: int, right: int, lengths: torch.Tensor, mode: str) -> torch.Tensor:
    """Pad (B, C, T) as if each row ended at lengths[b]: 'reflect' or 'replicate' at that row's own end.

    The gather reads only valid positions, so what sits in a row's padding never leaks into its
    valid region: a padded batch gives each row exactly what it gets alone. With every length == T
    this equals F.pad(x, (left, right), mode).
    """
    t = x.shape[-1]
    pos = torch.arange(-left, t + right, device=x.device).unsqueeze(0)  # (1, T')
    last = (lengths.to(pos.dtype) - 1).unsqueeze(1)  # (B or 1, 1)
    if mode == "reflect":
        idx = torch.where(pos < 0, -pos, pos)
        idx = torch.where(idx > last, 2 * last - idx, idx)
    elif mode == "replicate":
        idx = torch.minimum(pos.clamp(min=0), last)
    else:
        raise ValueError(f"unknown padding mode {mode!r}")
    # Positions far past a short row's end reflect below 0; they only feed that row's padding
    # (masked downstream), so clamping keeps the gather in range without touching valid outputs.
    idx = idx.clamp(0, t - 1)
    idx = idx.expand(x.shape[0], -1).unsqueeze(1).expand(-1, x.shape[1], -1)
    return torch.gather(x, 2, idx)


class _NormConv1d(nn.Module):
    """Mirrors the official NormConv1d nesting, so keys read `...conv.conv.weight_g`."""

    def __init__(self, conv: nn.Conv1d) -> None:
        super().__init__()
        self.conv = conv


class SConv1d(nn.Module):
    """Weight-normed Conv1d with REFLECT 'same' padding (the original's SConv1d; its `padding` arg is
    ignored there, and it pads (k-1)*d split left-heavy by reflection instead)."""

    def __init__(self, cin: int, cout: int, kernel_size: int, dilation: int = 1) -> None:
        super().__init__()
        self.conv = _NormConv1d(WNConv1d(cin, cout, kernel_size, dilation=dilation))
        total = (kernel_size - 1) * dilation
        self.pad_right = total // 2
        self.pad_left = total - self.pad_right

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        if self.pad_left or self.pad_right:
            if lengths is None:
                x = F.pad(x, (self.pad_left, self.pad_right), mode="reflect")
            else:
                x = pad_rows(x, self.pad_left, self.pad_right, lengths, "reflect")
        conv = self.conv.conv
        if torch.onnx.is_in_onnx_export():
            return self._as_matmul(x)
        return conv(x)

    def _as_matmul(self, x: torch.Tensor) -> torch.Tensor:
        """The same convolution as one MatMul (exported graphs only; eager keeps the plain conv).

        A k-tap conv becomes a GEMM over the k shifted copies stacked on the channel axis: ONNX
        Runtime runs a k-tap conv through its own im2col at about two thirds of its GEMM speed. The
        GEMM is a MatMul with the weight as its constant right operand, not a 1x1 Conv, so dynamic
        int8 quantization (which rewrites MatMuls only) covers the WaveNet head too."""
        conv = self.conv.conv
        k, d = conv.kernel_size[0], conv.dilation[0]
        if k > 1:
            t = x.shape[-1] - (k - 1) * d
            x = torch.cat([x[..., j * d : j * d + t] for j in range(k)], dim=1)  # (B, k * C_in, T)
        w = conv.weight.permute(0, 2, 1).reshape(conv.out_channels, k * conv.in_channels)
        y = torch.matmul(x.transpose(1, 2), w.t())  # (B, T, C_out)
        if conv.bias is not None:
            y = y + conv.bias
        return y.transpose(1, 2)


@dataclass(frozen=True)
class WaveNetConfig:
    hidden_dim: int
    num_layers: int
    kernel_size: int
    dilation_rate: int
    cond_dim: int  # gin_channels: the width of the timestep embedding fed as g


class WaveNet(nn.Module):
    """VITS-style WN: gated tanh*sigmoid layers conditioned on a global g, residual + skip sums."""

    def __init__(self, cfg: WaveNetConfig) -> None:
        super().__init__()
        if cfg.kernel_size % 2 != 1:
            raise ValueError("wavenet kernel_size must be odd")
        self.cfg = cfg
        c, n = cfg.hidden_dim, cfg.num_layers
        self.in_layers = nn.ModuleList(
            SConv1d(c, 2 * c, cfg.kernel_size, dilation=cfg.dilation_rate**i) for i in range(n)
        )
        self.res_skip_layers = nn.ModuleList(SConv1d(c, 2 * c if i < n - 1 else c, 1) for i in range(n))
        self.cond_layer = SConv1d(cfg.cond_dim, 2 * c * n, 1)

    def forward(
        self,
        x: torch.Tensor,
        x_mask: torch.Tensor,
        g: torch.Tensor,
        lengths: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, C, T), x_mask (B|1, 1, T) float, g (B, cond_dim, 1) -> (B, C, T).

        lengths None: the original's padding (reflect at the array end, first input unmasked), which
        is what the original computes for padded rows. lengths (B,): reflect at each row's own end, so
        a padded row equals the same row alone.
        """
        c = self.cfg.hidden_dim
        out = torch.zeros_like(x)
        g_all = self.cond_layer(g)
        last = len(self.in_layers) - 1
        for i, (in_layer, res_layer) in enumerate(zip(self.in_layers, self.res_skip_layers, strict=True)):
            h = in_layer(x, lengths) + g_all[:, i * 2 * c : (i + 1) * 2 * c, :]
            acts = torch.tanh(h[:, :c]) * torch.sigmoid(h[:, c:])
            rs = res_layer(acts)
            if i < last:
                x = (x + rs[:, :c]) * x_mask
                out = out + rs[:, c:]
            else:
                out = out + rs
        return out * x_mask
