"""BigVGAN v2 generator (spec §2.8): weight-normed convs, AMP blocks with anti-aliased SnakeBeta.

`load_bigvgan(folder)` reads `config.json` + `bigvgan_generator.pt` ({'generator': state_dict}); the
Kaiser-sinc up/down filters are buffers of that file. `BigVGAN.forward(mel (B, num_mels, T),
lengths (B,) | None) -> wav (B, 1, hop * T)` in [-1, 1] (clamp, or tanh if the config asks for it).

With `lengths`, each row is computed as if it were alone: zeros emulate each conv's zero padding past
the row's end, and the anti-alias resamplers replicate each row's own last sample; samples past
hop * lengths[b] are zero. Without it, the original's computation on the whole array.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fasttts_cli.errors import InputError
from fasttts_cli.nets.wavenet import WNConv1d, WNConvTranspose1d, row_mask
from fasttts_cli.nets.weights import CheckpointKeyError, json_config, strict_load, torch_load


@dataclass(frozen=True)
class BigVGANConfig:
    num_mels: int
    upsample_initial_channel: int
    upsample_rates: tuple[int, ...]
    upsample_kernel_sizes: tuple[int, ...]
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    activation: str = "snakebeta"  # or "snake"
    snake_logscale: bool = True
    use_tanh_at_final: bool = True  # the original's default when the key is absent
    use_bias_at_final: bool = True
    conv_pre_kernel: int = 7
    conv_post_kernel: int = 7
    filter_kernel: int = 12  # anti-alias Kaiser-sinc taps (from the file's filter buffers)
    aa_ratio: int = 2  # anti-alias up/down ratio (Activation1d's fixed default)

    @classmethod
    def from_json(cls, h: Mapping[str, Any], **sizes: int) -> BigVGANConfig:
        if str(h.get("resblock", "1")) != "1":
            raise ValueError(f"resblock {h.get('resblock')!r} is not supported (BigVGAN v2 uses '1')")
        return cls(
            num_mels=int(h["num_mels"]),
            upsample_initial_channel=int(h["upsample_initial_channel"]),
            upsample_rates=tuple(int(u) for u in h["upsample_rates"]),
            upsample_kernel_sizes=tuple(int(k) for k in h["upsample_kernel_sizes"]),
            resblock_kernel_sizes=tuple(int(k) for k in h["resblock_kernel_sizes"]),
            resblock_dilation_sizes=tuple(tuple(int(d) for d in ds) for ds in h["resblock_dilation_sizes"]),
            activation=str(h.get("activation", "snakebeta")),
            snake_logscale=bool(h.get("snake_logscale", True)),
            use_tanh_at_final=bool(h.get("use_tanh_at_final", True)),
            use_bias_at_final=bool(h.get("use_bias_at_final", True)),
            **sizes,
        )

    @property
    def hop(self) -> int:
        n = 1
        for u in self.upsample_rates:
            n *= u
        return n


class SnakeBeta(nn.Module):
    """x + 1/(b + 1e-9) * sin(a x)^2, a = exp(alpha), b = exp(beta) in log scale; 'snake' uses b = a."""

    def __init__(self, channels: int, logscale: bool, with_beta: bool) -> None:
        super().__init__()
        self.logscale = logscale
        self.alpha = nn.Parameter(torch.zeros(channels) if logscale else torch.ones(channels))
        self.beta = (
            nn.Parameter(torch.zeros(channels) if logscale else torch.ones(channels)) if with_beta else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.alpha.unsqueeze(0).unsqueeze(-1)
        b = a if self.beta is None else self.beta.unsqueeze(0).unsqueeze(-1)
        if self.logscale:
            a = torch.exp(a)
            b = torch.exp(b)
        s = torch.sin(x * a)
        return x + (1.0 / (b + 1e-9)) * (s * s)


def kaiser_sinc_filter(cutoff: float, half_width: float, kernel: int) -> torch.Tensor:
    """(1, 1, kernel) Kaiser-windowed sinc low-pass, normalised to sum 1 (the filters BigVGAN files carry;
    a fresh module starts with them so a generated checkpoint holds the real kernels)."""
    even = kernel % 2 == 0
    half = kernel // 2
    a = 2.285 * (half - 1) * math.pi * (4 * half_width) + 7.95
    if a > 50.0:
        beta = 0.1102 * (a - 8.7)
    elif a >= 21.0:
        beta = 0.5842 * (a - 21) ** 0.4 + 0.07886 * (a - 21.0)
    else:
        beta = 0.0
    window = torch.kaiser_window(kernel, beta=beta, periodic=False)
    time = torch.arange(-half, half) + 0.5 if even else torch.arange(kernel) - half
    if cutoff == 0:
        return torch.zeros(1, 1, kernel)
    filt = 2 * cutoff * window * torch.sinc(2 * cutoff * time)
    return (filt / filt.sum()).view(1, 1, kernel)


def replicate_rows(x: torch.Tensor, left: int, right: int, lengths: torch.Tensor) -> torch.Tensor:
    """Pad (B, C, T) by replicating each row's own first and last sample, as if row b ended at
    lengths[b]. Only the `right` samples after a row's end can reach that row's valid outputs, so
    those get the row's last sample by a small scatter (what lies further out feeds only padding,
    which is zeroed downstream); the array's own edges come from F.pad. Exported, this costs a
    fraction of a gather over the whole tensor (wavenet.pad_rows), whose expanded int64 index cost
    more than the resampling it fed."""
    t = x.shape[-1]
    x = F.pad(x, (left, right), mode="replicate")
    last = (lengths.to(torch.int64) - 1).clamp(0, t - 1)  # (B or 1,)
    b, c = x.shape[0], x.shape[1]
    tail = torch.gather(x, 2, (last + left).view(-1, 1, 1).expand(b, c, 1))  # each row's last sample
    pos = (last + left + 1).view(-1, 1, 1) + torch.arange(right, device=x.device).view(1, 1, right)
    pos = pos.clamp(max=t + left + right - 1).expand(b, c, right)
    return x.scatter(2, pos, tail.expand(b, c, right))


def pad_replicate(x: torch.Tensor, left: int, right: int, lengths: torch.Tensor | None) -> torch.Tensor:
    """The resamplers' edge padding: the array's edges replicated, or each row's own (`replicate_rows`)."""
    if lengths is None:
        return F.pad(x, (left, right), mode="replicate")
    return replicate_rows(x, left, right, lengths)


def _export_form(kernel: int, ratio: int) -> bool:
    """ONNX Runtime's CPU kernels for depthwise (grouped) convolutions are slow and PyTorch's are fast,
    so exported graphs fold the channels into the batch (the filter is shared by every channel; the
    upsampler as r interleaved phases) and eager PyTorch keeps the original's grouped convolutions.
    Both are exact; measured on one full-size anti-aliased activation, the folded form took about 35%
    less ONNX Runtime time."""
    return torch.onnx.is_in_onnx_export() and kernel % ratio == 0


class UpSample1d(nn.Module):
    def __init__(self, ratio: int, kernel: int, channels: int) -> None:
        super().__init__()
        self.ratio = ratio
        self.channels = channels  # a python int, so an exported graph has a constant-shape kernel
        self.pad = kernel // ratio - 1
        self.crop_left = self.pad * ratio + (kernel - ratio) // 2
        self.crop_right = self.pad * ratio + (kernel - ratio + 1) // 2
        self.register_buffer("filter", kaiser_sinc_filter(0.5 / ratio, 0.6 / ratio, kernel))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        c = self.channels
        x = pad_replicate(x, self.pad, self.pad, lengths)
        if _export_form(self.filter.shape[-1], self.ratio):
            x = self.polyphase(x)
        else:
            x = F.conv_transpose1d(x, self.filter.expand(c, -1, -1), stride=self.ratio, groups=c)
        x = self.ratio * x
        return x[..., self.crop_left : x.shape[-1] - self.crop_right]

    def polyphase(self, x: torch.Tensor) -> torch.Tensor:
        """conv_transpose1d(x, f, stride=r) as r interleaved full convolutions with taps f[p::r]:
        output sample r*j + p is sum_i f[r*i + p] x[j - i]."""
        b, c, n = x.shape
        r, k = self.ratio, self.filter.shape[-1]
        taps = k // r
        f = self.filter.view(k)
        w = torch.stack([f[p::r].flip(0) for p in range(r)]).view(r, 1, taps)
        y = F.conv1d(x.reshape(b * c, 1, n), w, padding=taps - 1)  # (B*C, r, n + taps - 1)
        return y.transpose(1, 2).reshape(b, c, r * (n + taps - 1))


class LowPassFilter1d(nn.Module):
    def __init__(self, stride: int, kernel: int, channels: int) -> None:
        super().__init__()
        self.channels = channels
        even = kernel % 2 == 0
        self.pad_left = kernel // 2 - int(even)
        self.pad_right = kernel // 2
        self.stride = stride
        self.register_buffer("filter", kaiser_sinc_filter(0.5 / stride, 0.6 / stride, kernel))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        c = self.channels
        x = pad_replicate(x, self.pad_left, self.pad_right, lengths)
        if _export_form(self.filter.shape[-1], self.stride):
            return self.single_channel(x)
        return F.conv1d(x, self.filter.expand(c, -1, -1), stride=self.stride, groups=c)

    def single_channel(self, x: torch.Tensor) -> torch.Tensor:
        """The same strided conv with the channels folded into the batch (one shared filter)."""
        b, c, n = x.shape
        k = self.filter.shape[-1]
        y = F.conv1d(x.reshape(b * c, 1, n), self.filter.view(1, 1, k), stride=self.stride)
        return y.reshape(b, c, -1)


class DownSample1d(nn.Module):
    def __init__(self, ratio: int, kernel: int, channels: int) -> None:
        super().__init__()
        self.lowpass = LowPassFilter1d(ratio, kernel, channels)


class Activation1d(nn.Module):
    """2x upsample -> snake -> 2x downsample (anti-aliased activation); T in, T out."""

    def __init__(self, act: SnakeBeta, ratio: int, kernel: int) -> None:
        super().__init__()
        self.act = act
        self.ratio = ratio
        channels = act.alpha.shape[0]
        self.upsample = UpSample1d(ratio, kernel, channels)
        self.downsample = DownSample1d(ratio, kernel, channels)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        x = self.act(self.upsample(x, lengths))
        return self.downsample.lowpass(x, None if lengths is None else lengths * self.ratio)


def _zero_past(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return x if mask is None else x * mask


class AMPBlock1(nn.Module):
    def __init__(self, cfg: BigVGANConfig, channels: int, kernel: int, dilations: Sequence[int]) -> None:
        super().__init__()

        def conv(d: int) -> WNConv1d:
            return WNConv1d(channels, channels, kernel, 1, dilation=d, padding=(kernel * d - d) // 2)

        self.convs1 = nn.ModuleList(conv(d) for d in dilations)
        self.convs2 = nn.ModuleList(conv(1) for _ in dilations)
        with_beta = cfg.activation == "snakebeta"
        self.activations = nn.ModuleList(
            Activation1d(SnakeBeta(channels, cfg.snake_logscale, with_beta), cfg.aa_ratio, cfg.filter_kernel)
            for _ in range(2 * len(dilations))
        )

    def forward(
        self, x: torch.Tensor, lengths: torch.Tensor | None, mask: torch.Tensor | None
    ) -> torch.Tensor:
        for i, (c1, c2) in enumerate(zip(self.convs1, self.convs2, strict=True)):
            xt = c1(_zero_past(self.activations[2 * i](x, lengths), mask))
            xt = c2(_zero_past(self.activations[2 * i + 1](xt, lengths), mask))
            x = xt + x
        return x


class BigVGAN(nn.Module):
    def __init__(self, cfg: BigVGANConfig) -> None:
        super().__init__()
        if cfg.activation not in ("snake", "snakebeta"):
            raise ValueError(f"activation {cfg.activation!r} is not supported")
        if len(cfg.upsample_rates) != len(cfg.upsample_kernel_sizes):
            raise ValueError("upsample_rates and upsample_kernel_sizes differ in length")
        self.cfg = cfg
        ch0 = cfg.upsample_initial_channel
        k = cfg.conv_pre_kernel
        self.conv_pre = WNConv1d(cfg.num_mels, ch0, k, 1, padding=(k - 1) // 2)
        self.ups = nn.ModuleList(
            nn.ModuleList([WNConvTranspose1d(ch0 // 2**i, ch0 // 2 ** (i + 1), kk, u, padding=(kk - u) // 2)])
            for i, (u, kk) in enumerate(zip(cfg.upsample_rates, cfg.upsample_kernel_sizes, strict=True))
        )
        self.num_kernels = len(cfg.resblock_kernel_sizes)
        self.resblocks = nn.ModuleList(
            AMPBlock1(cfg, ch0 // 2 ** (i + 1), kr, ds)
            for i in range(len(self.ups))
            for kr, ds in zip(cfg.resblock_kernel_sizes, cfg.resblock_dilation_sizes, strict=True)
        )
        ch = ch0 // 2 ** len(self.ups)
        self.activation_post = Activation1d(
            SnakeBeta(ch, cfg.snake_logscale, cfg.activation == "snakebeta"), cfg.aa_ratio, cfg.filter_kernel
        )
        k = cfg.conv_post_kernel
        self.conv_post = WNConv1d(ch, 1, k, 1, padding=(k - 1) // 2, bias=cfg.use_bias_at_final)

    def forward(self, mel: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """mel (B, num_mels, T) -> wav (B, 1, hop * T); lengths (B,) frames per row, or None (all T)."""
        mask = None if lengths is None else row_mask(lengths, mel.shape[-1], mel.dtype).unsqueeze(1)
        x = self.conv_pre(_zero_past(mel, mask))
        for i, up in enumerate(self.ups):
            x = up[0](_zero_past(x, mask))
            if lengths is not None:
                lengths = lengths * self.cfg.upsample_rates[i]
                mask = row_mask(lengths, x.shape[-1], x.dtype).unsqueeze(1)
            blocks = self.resblocks[i * self.num_kernels : (i + 1) * self.num_kernels]
            xs = blocks[0](x, lengths, mask)
            for blk in blocks[1:]:
                xs = xs + blk(x, lengths, mask)
            x = xs / self.num_kernels
        x = self.conv_post(_zero_past(self.activation_post(x, lengths), mask))
        x = torch.tanh(x) if self.cfg.use_tanh_at_final else torch.clamp(x, min=-1.0, max=1.0)
        return _zero_past(x, mask)

    def official_state_dict(self) -> dict[str, torch.Tensor]:
        """The generator state dict with official keys (weight_g/weight_v); the file is {'generator': it}."""
        return dict(self.state_dict())


def wav_to_int16(wav: torch.Tensor) -> torch.Tensor:
    """The original's conversion: clamp(32767 * wav, -32767, 32767), truncated toward zero."""
    return torch.clamp(32767 * wav, -32767.0, 32767.0).to(torch.int16)


def load_bigvgan(folder: Path) -> BigVGAN:
    """Read `folder/config.json` and `folder/bigvgan_generator.pt` with strict keys."""
    folder = Path(folder)
    cfg_path, pt_path = folder / "config.json", folder / "bigvgan_generator.pt"
    h = json_config(cfg_path, hint="point at the BigVGAN folder (config.json + bigvgan_generator.pt)")
    blob = torch_load(pt_path)
    if not isinstance(blob, Mapping) or not isinstance(blob.get("generator"), Mapping):
        raise CheckpointKeyError(pt_path, "missing key generator (expected {'generator': state_dict})")
    sd = blob["generator"]
    try:
        cfg = BigVGANConfig.from_json(
            h,
            conv_pre_kernel=_dim(sd, "conv_pre.weight_v", -1, pt_path),
            conv_post_kernel=_dim(sd, "conv_post.weight_v", -1, pt_path),
            filter_kernel=_dim(sd, "activation_post.upsample.filter", -1, pt_path),
        )
        model = BigVGAN(cfg)
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        raise InputError(cfg_path, f"unsupported or incomplete BigVGAN config: {e}") from None
    strict_load(model, sd, pt_path, prefix="generator/")
    return model.eval()


def _dim(sd: Mapping[str, torch.Tensor], key: str, axis: int, file: Path) -> int:
    if key not in sd:
        raise CheckpointKeyError(file, f"missing key generator/{key}")
    return int(sd[key].shape[axis])
