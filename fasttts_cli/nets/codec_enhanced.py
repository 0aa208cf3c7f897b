"""IndexTTS-2.5's semantic codec (`EnhancedCodec`, delta §4): 25 Hz codes -> 50 Hz content features.

Only the decode path runs at inference:
    codebook[codes] (raw rows) -> out_project (WN Conv1d 8 -> hidden, k1) -> decoder VocosBackbone
    -> Linear vocos_dim -> hidden -> nearest x2 -> up (Conv1d k3, p1) = S_infer (B, 2n, hidden)
built from the v2 codec's blocks (nets/codec.py). `codec.pth` = {"model": state dict} also holds the
encoder side (`down.*`, `encoder.*`, `quantizer.quantizers.0.in_project.*`, ENCODER_SIDE), which 2.5 loads
but never runs: the loader accepts those keys as known extras and lists them; `EnhancedCodec(...,
encoder_side=True)` builds them too, for writing random checkpoints in the exact layout.
Every size comes from the tensors; config.yaml's `semantic_codec` block is checked against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fasttts_cli.nets.codec import (
    FactorizedVQ,
    QuantizerStack,
    VocosCoder,
    check_sizes,
    codec_sizes_from_state,
)
from fasttts_cli.nets.config import SemanticCodecConfig
from fasttts_cli.nets.wavenet import row_mask
from fasttts_cli.nets.weights import CheckpointKeyError, split_known, strict_load, torch_load

# key prefixes of codec.pth that only the (unused) quantize path reads
ENCODER_SIDE = ("down.", "encoder.", "quantizer.quantizers.0.in_project.")
UPSAMPLE = 2  # decode's F.interpolate(scale_factor=2), whatever downsample_scale > 1 says


class EnhancedCodec(nn.Module):
    """The official key layout; `encoder_side` adds the modules only the quantize path uses."""

    def __init__(self, sizes: SemanticCodecConfig, *, encoder_side: bool = False) -> None:
        super().__init__()
        self.sizes = sizes
        h = sizes.hidden_size
        if encoder_side:
            self.down = nn.Conv1d(h, h, kernel_size=3, stride=2, padding=1)
        self.up = nn.Conv1d(h, h, kernel_size=3, stride=1, padding=1)
        if encoder_side:
            self.encoder = VocosCoder(sizes)
        self.decoder = VocosCoder(sizes)
        self.quantizer = QuantizerStack(sizes)
        if not encoder_side:
            del self.vq.in_project

    @property
    def vq(self) -> FactorizedVQ:
        return self.quantizer.quantizers[0]

    def embed(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, n) -> out_project(codebook[codes]) (B, hidden, n): the original's `vq2emb`."""
        return self.vq.out_project(self.vq.embed(codes.long()))

    def decode(self, codes: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """codes (B, n) int -> S_infer (B, 2n, hidden).

        `lengths` (B,) valid codes per row (None = all): padded frames are zeroed before every temporal
        convolution, so a padded row equals the row alone; frames past 2 * lengths[b] are zero.
        """
        q = self.embed(codes)  # (B, hidden, n)
        mask = None if lengths is None else row_mask(lengths, codes.shape[1], q.dtype).unsqueeze(1)
        h = self.decoder[1](self.decoder[0](q, mask))  # (B, n, hidden)
        h = F.interpolate(h.transpose(1, 2), scale_factor=UPSAMPLE, mode="nearest")  # frame i <- i // 2
        if lengths is None:
            return self.up(h).transpose(1, 2)
        mask2 = row_mask(lengths * UPSAMPLE, h.shape[2], h.dtype).unsqueeze(1)
        return (self.up(h * mask2) * mask2).transpose(1, 2)


class CodecDecode(nn.Module):
    """Export wrapper: `codes (B,n) int64 -> S_infer (B,2n,hidden)`."""

    def __init__(self, codec: EnhancedCodec) -> None:
        super().__init__()
        self.codec = codec

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.codec.decode(codes)


def load_enhanced_codec(
    path: Path | str, cfg: SemanticCodecConfig | None = None
) -> tuple[EnhancedCodec, tuple[str, ...]]:
    """Load `codec.pth` ({"model": state dict}) strictly on the decoder side; returns the codec (eval) and
    the encoder-side keys found (known extras, sorted). `cfg` (config.yaml's `semantic_codec`) must agree
    with the tensors in every size."""
    path = Path(path)
    blob = torch_load(path)
    if not isinstance(blob, Mapping) or not isinstance(blob.get("model"), Mapping):
        raise CheckpointKeyError(path, "missing key model (expected {'model': EnhancedCodec state dict})")
    state, extras = split_known(dict(blob["model"]), ENCODER_SIDE)
    sizes = replace(codec_sizes_from_state(state, path, "decoder", "model/"), downsample_scale=UPSAMPLE)
    if cfg is not None:
        check_sizes(path, sizes, asdict(cfg))
    with torch.device("meta"):
        codec = EnhancedCodec(sizes)
    codec = codec.to_empty(device="cpu")
    strict_load(codec, {k: v.float() for k, v in state.items()}, path, prefix="model/")
    return codec.eval().requires_grad_(False), extras
