"""CAM++ speaker embedding (3D-Speaker `CAMPPlus`, the `funasr/campplus` weights) as IndexTTS-2 uses it.

Input: mean-normalised Kaldi fbank (B, T, 80) (features.campplus_fbank); output: the 192-d "style" vector
(B, 192) that conditions the DiT. BatchNorm runs on its running statistics (eval); the final dense layer's
BatchNorm has no affine. Statistics pooling and the CAM context pooling span the whole time axis, so run it
one voice at a time (B = 1, any T) rather than on padded batches.

Channel widths and layer counts come from the tensors; the fixed hyper-parameters of the architecture
(kernel 3, dilations 1/2/2, 100-frame context segments) are those of the released model.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fasttts_cli.errors import InputError
from fasttts_cli.nets.weights import CheckpointKeyError, strict_load, torch_load

_DILATIONS = (1, 2, 2)


class _BNReLU(nn.Sequential):
    """`nonlinear` = Sequential(batchnorm[, relu]); keys `...nonlinear.batchnorm.*`."""

    def __init__(self, channels: int, affine: bool = True, relu: bool = True):
        super().__init__()
        self.add_module("batchnorm", nn.BatchNorm1d(channels, affine=affine))
        if relu:
            self.add_module("relu", nn.ReLU())


class _ResBlock2d(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=(stride, 1), bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class FCM(nn.Module):
    """2-D ResNet front end: (B, F, T) -> (B, C * F/8, T)."""

    def __init__(self, channels: int, blocks: tuple[int, int]):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.layer1 = nn.Sequential(
            *[_ResBlock2d(channels, channels, 2 if i == 0 else 1) for i in range(blocks[0])]
        )
        self.layer2 = nn.Sequential(
            *[_ResBlock2d(channels, channels, 2 if i == 0 else 1) for i in range(blocks[1])]
        )
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))
        y = F.relu(self.bn2(self.conv2(self.layer2(self.layer1(y)))))
        return y.flatten(1, 2)


class TDNNLayer(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int):
        super().__init__()
        self.linear = nn.Conv1d(cin, cout, kernel, stride=stride, padding=(kernel - 1) // 2, bias=False)
        self.nonlinear = _BNReLU(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x))


class CAMLayer(nn.Module):
    """Context-aware masking: local conv gated by utterance mean + 100-frame segment means."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int, seg_len: int = 100):
        super().__init__()
        self.linear_local = nn.Conv1d(
            cin, cout, kernel, padding=(kernel - 1) // 2 * dilation, dilation=dilation, bias=False
        )
        self.linear1 = nn.Conv1d(cin, cin // 2, 1)
        self.linear2 = nn.Conv1d(cin // 2, cout, 1)
        self.seg_len = seg_len

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear_local(x)
        seg = F.avg_pool1d(x, kernel_size=self.seg_len, stride=self.seg_len, ceil_mode=True)
        seg = (
            seg.unsqueeze(-1)
            .expand(*seg.shape, self.seg_len)
            .reshape(*seg.shape[:-1], -1)[..., : x.shape[-1]]
        )
        context = x.mean(-1, keepdim=True) + seg
        gate = torch.sigmoid(self.linear2(F.relu(self.linear1(context))))
        return y * gate


class CAMDenseTDNNLayer(nn.Module):
    def __init__(self, cin: int, growth: int, bottleneck: int, kernel: int, dilation: int):
        super().__init__()
        self.nonlinear1 = _BNReLU(cin)
        self.linear1 = nn.Conv1d(cin, bottleneck, 1, bias=False)
        self.nonlinear2 = _BNReLU(bottleneck)
        self.cam_layer = CAMLayer(bottleneck, growth, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class CAMDenseTDNNBlock(nn.ModuleDict):
    def __init__(self, layers: int, cin: int, growth: int, bottleneck: int, kernel: int, dilation: int):
        super().__init__(
            {
                f"tdnnd{i + 1}": CAMDenseTDNNLayer(cin + i * growth, growth, bottleneck, kernel, dilation)
                for i in range(layers)
            }
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.values():
            x = torch.cat([x, layer(x)], dim=1)
        return x


class TransitLayer(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.nonlinear = _BNReLU(cin)
        self.linear = nn.Conv1d(cin, cout, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


class DenseLayer(nn.Module):
    """Conv1d(k=1) on the pooled statistics, then BatchNorm without affine."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.linear = nn.Conv1d(cin, cout, 1, bias=False)
        self.nonlinear = _BNReLU(cout, affine=False, relu=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C)
        return self.nonlinear(self.linear(x.unsqueeze(-1)).squeeze(-1))


class StatsPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x.mean(dim=-1), x.std(dim=-1, unbiased=True)], dim=-1)


class CAMPPlus(nn.Module):
    """`fbank (B, T, 80) -> style (B, embedding)`; keys `head.*`, `xvector.*` as in the released file."""

    def __init__(
        self,
        feat_dim: int = 80,
        embedding_size: int = 192,
        head_channels: int = 32,
        head_blocks: tuple[int, int] = (2, 2),
        init_channels: int = 128,
        growth: int = 32,
        bottleneck: int = 128,
        block_layers: tuple[int, ...] = (12, 24, 16),
        kernel: int = 3,
    ):
        super().__init__()
        self.head = FCM(head_channels, head_blocks)
        xv = nn.Sequential()
        xv.add_module("tdnn", TDNNLayer(head_channels * (feat_dim // 8), init_channels, 5, stride=2))
        ch = init_channels
        for i, (layers, dilation) in enumerate(zip(block_layers, _DILATIONS, strict=True)):
            xv.add_module(
                f"block{i + 1}", CAMDenseTDNNBlock(layers, ch, growth, bottleneck, kernel, dilation)
            )
            ch += layers * growth
            xv.add_module(f"transit{i + 1}", TransitLayer(ch, ch // 2))
            ch //= 2
        xv.add_module("out_nonlinear", _BNReLU(ch))
        xv.add_module("stats", StatsPool())
        xv.add_module("dense", DenseLayer(ch * 2, embedding_size))
        self.xvector = xv

    def forward(self, fbank: torch.Tensor) -> torch.Tensor:
        return self.xvector(self.head(fbank.transpose(1, 2)))


def campplus_sizes(state: dict[str, torch.Tensor], file: Path) -> dict:
    def shape(key: str) -> tuple[int, ...]:
        if key not in state:
            raise CheckpointKeyError(file, f"missing key {key}")
        return tuple(state[key].shape)

    head_ch = shape("head.conv1.weight")[0]
    init_ch, head_out, _ = shape("xvector.tdnn.linear.weight")
    growth, bottleneck, kernel = shape("xvector.block1.tdnnd1.cam_layer.linear_local.weight")
    emb = shape("xvector.dense.linear.weight")[0]
    blocks = []
    for b in range(1, 4):
        names = {m.group(1) for k in state if (m := re.match(rf"xvector\.block{b}\.tdnnd(\d+)\.", k))}
        blocks.append(len(names))
    head_blocks = tuple(
        len({k.split(".")[2] for k in state if k.startswith(f"head.layer{i}.")}) for i in (1, 2)
    )
    return dict(
        feat_dim=head_out // head_ch * 8,
        embedding_size=emb,
        head_channels=head_ch,
        head_blocks=head_blocks,
        init_channels=init_ch,
        growth=growth,
        bottleneck=bottleneck,
        block_layers=tuple(blocks),
        kernel=kernel,
    )


def load_campplus(path: Path | str) -> CAMPPlus:
    """Load `hf_cache/campplus_cn_common.bin` (flat state dict with BN running stats) strictly."""
    path = Path(path)
    state = torch_load(path)
    if not isinstance(state, dict):
        raise InputError(path, "expected a CAMPPlus state dict")
    model = CAMPPlus(**campplus_sizes(state, path))
    strict_load(model, state, path)
    return model.eval()
