"""Random-weight DiTs for tests and the benchmark: the release size (13 blocks x 512) and small ones.

Weights follow the parity checkpoint's init rules (../shared/parity/keys.json): dense weights
z / sqrt(fan_in), biases 0.1 z, norm scales 1 + 0.1 z. PyTorch's default init makes the transformer's
module outputs tiny next to the long skip, so almost any skip looks free; with these rules every module
moves the output, which is what a caching benchmark needs. Random weights still are not trained
weights: real quality thresholds need the real checkpoint.
"""

from __future__ import annotations

import torch

from fasttts_cli.build.dit import DiT, DiTConfig
from fasttts_cli.build.wavenet import WaveNetConfig


def dit_config(
    hidden: int = 512,
    depth: int = 13,
    heads: int = 8,
    content_dim: int = 512,
    style_dim: int = 192,
    wavenet_layers: int = 8,
) -> DiTConfig:
    """The release config (spec §1.2) by default; smaller sizes for tests."""
    return DiTConfig(
        hidden_dim=hidden,
        num_heads=heads,
        depth=depth,
        in_channels=80,
        content_dim=content_dim,
        style_dim=style_dim,
        content_codebook_size=1024,
        max_positions=16384,
        freq_embed_dim=256,
        wavenet=WaveNetConfig(hidden, wavenet_layers, 5, 1, hidden),
    )


@torch.no_grad()
def randomize(dit: DiT, seed: int = 0) -> DiT:
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(dit.named_parameters()):
        z = torch.randn(p.shape, generator=g)
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.1 * z)
        elif name.endswith("bias") or p.dim() == 1:
            p.copy_(0.1 * z)
        elif "embedder" in name and p.dim() == 2 and not name.startswith("t_embedder"):
            p.copy_(0.02 * z)  # the unused embedding tables
        else:
            fan_in = p[0].numel()
            p.copy_(z / fan_in**0.5)
    return dit.eval()


def random_dit(cfg: DiTConfig | None = None, seed: int = 0) -> DiT:
    return randomize(DiT(cfg or dit_config()), seed)
