"""MaskGCT semantic codec (RepCodec) as IndexTTS-2 uses it: quantize the reference features, embed codes.

Only the inference path is computed: the Vocos-style encoder, the factorized quantizer (1x1 weight-normed
projections in and out of an 8-dim code space, nearest code by L2-normalised distance, embedding from the
raw codebook row). The decoder is built only so that `semantic_codec_model.safetensors` loads strictly.
All sizes come from the tensors; `config.yaml`'s `semantic_codec` block, when given, is checked against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fasttts_cli.errors import InputError
from fasttts_cli.nets.config import SemanticCodecConfig
from fasttts_cli.nets.weights import CheckpointKeyError, safetensors_load, strict_load


class WNConv1d(nn.Module):
    """1x1 Conv1d stored as weight_g/weight_v (old `torch.nn.utils.weight_norm`): w = g * v / ||v||."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.weight_g = nn.Parameter(torch.ones(cout, 1, 1))
        self.weight_v = nn.Parameter(torch.zeros(cout, cin, 1))
        self.bias = nn.Parameter(torch.zeros(cout))

    def weight(self) -> torch.Tensor:
        return self.weight_g * self.weight_v / self.weight_v.norm(dim=(1, 2), keepdim=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        return F.conv1d(x, self.weight(), self.bias)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int, intermediate: int):
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, intermediate)
        self.pwconv2 = nn.Linear(intermediate, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:  # (B, C, T)
        y = self.dwconv(x if mask is None else x * mask)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y.transpose(1, 2)))))
        return x + (self.gamma * y).transpose(1, 2)


class VocosBackbone(nn.Module):
    """(B, C_in, T) -> (B, T, dim). `mask` (B, 1, T) zeroes padded frames before each temporal conv, so a
    padded batch row equals its unpadded computation (the original only ever runs batch 1)."""

    def __init__(self, cin: int, dim: int, intermediate: int, layers: int):
        super().__init__()
        self.embed = nn.Conv1d(cin, dim, kernel_size=7, padding=3)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.convnext = nn.ModuleList([ConvNeXtBlock(dim, intermediate) for _ in range(layers)])
        self.final_layer_norm = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embed(x if mask is None else x * mask)
        x = self.norm(x.transpose(1, 2)).transpose(1, 2)
        for block in self.convnext:
            x = block(x, mask)
        return self.final_layer_norm(x.transpose(1, 2))


class VocosCoder(nn.Sequential):
    """Keys `encoder.0.*` (backbone) and `encoder.1.*` (Linear back to the feature width)."""

    def __init__(self, s: SemanticCodecConfig):
        super().__init__(
            VocosBackbone(s.hidden_size, s.vocos_dim, s.vocos_intermediate_dim, s.vocos_num_layers),
            nn.Linear(s.vocos_dim, s.hidden_size),
        )

    def run(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:  # (B,T,C) -> (B,T,C)
        return self[1](self[0](x.transpose(1, 2), mask))


class FactorizedVQ(nn.Module):
    def __init__(self, s: SemanticCodecConfig):
        super().__init__()
        self.in_project = WNConv1d(s.hidden_size, s.codebook_dim)
        self.out_project = WNConv1d(s.codebook_dim, s.hidden_size)
        self.codebook = nn.Embedding(s.codebook_size, s.codebook_dim)

    def nearest(self, z_e: torch.Tensor) -> torch.Tensor:
        """(B, D, T) -> (B, T) code indices: max of -squared L2 between L2-normalised vectors."""
        enc = F.normalize(z_e.transpose(1, 2), dim=-1)  # (B, T, D)
        cb = F.normalize(self.codebook.weight, dim=-1)  # (K, D)
        dist = enc.pow(2).sum(-1, keepdim=True) - 2 * enc @ cb.t() + cb.pow(2).sum(-1)[None, None, :]
        return (-dist).argmax(dim=-1)

    def embed(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, T) codes -> (B, D, T) raw (un-normalised) codebook rows."""
        return F.embedding(codes, self.codebook.weight).transpose(1, 2)


class QuantizerStack(nn.Module):
    def __init__(self, s: SemanticCodecConfig):
        super().__init__()
        self.quantizers = nn.ModuleList([FactorizedVQ(s)])


class SemanticCodec(nn.Module):
    """RepCodec with the official key layout (`encoder.*`, `decoder.*`, `quantizer.quantizers.0.*`)."""

    def __init__(self, sizes: SemanticCodecConfig):
        super().__init__()
        self.sizes = sizes
        self.encoder = VocosCoder(sizes)
        self.decoder = VocosCoder(sizes)  # loaded, never run
        self.quantizer = QuantizerStack(sizes)

    @property
    def vq(self) -> FactorizedVQ:
        return self.quantizer.quantizers[0]

    def quantize(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, hidden) normalised w2v-BERT features -> (z_e (B, D, T), indices (B, T), S (B, T, hidden)).

        `mask` (B, T) (1 = valid) makes padded rows match their unpadded computation; None = all valid.
        """
        m = None if mask is None else mask.to(x.dtype)[:, None, :]
        h = self.encoder.run(x, m).transpose(1, 2)  # (B, hidden, T)
        z_e = self.vq.in_project(h)
        idx = self.vq.nearest(z_e)
        z_q = self.vq.embed(idx)
        # the original's straight-through form; kept so S matches it to the last bit
        z_q = z_e + (z_q - z_e)
        return z_e, idx, self.vq.out_project(z_q).transpose(1, 2)

    def vq2emb(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, T) int codes -> (B, T, hidden): out_project(codebook[codes]), batch-correct."""
        return self.vq.out_project(self.vq.embed(codes)).transpose(1, 2)


class CodecQuantize(nn.Module):
    """Export wrapper: `(features (B,T,1024), mask (B,T) int64) -> (indices (B,T) int64, S (B,T,1024))`."""

    def __init__(self, codec: SemanticCodec):
        super().__init__()
        self.codec = codec

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, idx, s = self.codec.quantize(features, mask)
        return idx, s


class CodecEmbed(nn.Module):
    """Export wrapper: `codes (B,T) int64 -> (B,T,1024)` = vq2emb."""

    def __init__(self, codec: SemanticCodec):
        super().__init__()
        self.codec = codec

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.codec.vq2emb(codes)


def codec_sizes_from_state(
    state: Mapping[str, torch.Tensor], file: Path, coder: str = "encoder", prefix: str = ""
) -> SemanticCodecConfig:
    """Sizes from the tensors of one Vocos coder (`encoder`, or `decoder` for 2.5's decode-only load) and
    the quantizer. `prefix` names where the dict sits in the file, for the message only."""

    def shape(key: str) -> tuple[int, ...]:
        if key not in state:
            raise CheckpointKeyError(file, f"missing key {prefix}{key}")
        return tuple(state[key].shape)

    dim, hidden, _ = shape(f"{coder}.0.embed.weight")
    inter = shape(f"{coder}.0.convnext.0.pwconv1.weight")[0]
    layers = len({k.split(".")[3] for k in state if k.startswith(f"{coder}.0.convnext.")})
    size, cdim = shape("quantizer.quantizers.0.codebook.weight")
    n_q = len({k.split(".")[2] for k in state if k.startswith("quantizer.quantizers.")})
    if n_q != 1:
        raise InputError(file, f"{n_q} quantizers; the semantic codec has exactly 1")
    return SemanticCodecConfig(
        codebook_size=size,
        hidden_size=hidden,
        codebook_dim=cdim,
        vocos_dim=dim,
        vocos_intermediate_dim=inter,
        vocos_num_layers=layers,
        num_quantizers=n_q,
    )


SIZE_KEYS = (
    "hidden_size",
    "vocos_dim",
    "vocos_intermediate_dim",
    "vocos_num_layers",
    "codebook_size",
    "codebook_dim",
)


def check_sizes(path: Path, sizes: SemanticCodecConfig, cfg: Mapping[str, Any]) -> None:
    """Every size config.yaml's `semantic_codec` block names equals the tensors' (InputError otherwise)."""
    for key in SIZE_KEYS:
        if key in cfg and int(cfg[key]) != getattr(sizes, key):
            got = getattr(sizes, key)
            raise InputError(path, f"{key} is {got} in the tensors, {cfg[key]} in config.yaml")


def load_codec(path: Path | str, cfg: dict | None = None) -> SemanticCodec:
    """Load `semantic_codec_model.safetensors` strictly (decoder keys included). `cfg` is config.yaml's
    `semantic_codec` block; every size it names must agree with the tensors."""
    path = Path(path)
    state = safetensors_load(path, hint="expected hf_cache/semantic_codec_model.safetensors")
    sizes = codec_sizes_from_state(state, path)
    if cfg:
        check_sizes(path, sizes, cfg)
        if int(cfg.get("num_quantizers", 1)) != 1 or int(cfg.get("downsample_scale", 1) or 1) > 1:
            raise InputError(
                path, "only num_quantizers 1 and downsample_scale 1 are supported (IndexTTS-2's)"
            )
    codec = SemanticCodec(sizes)
    strict_load(codec, state, path)
    return codec.eval()
