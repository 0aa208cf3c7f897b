"""Random-weight UnifiedVoice, S2Mel and BigVGAN built in-process from our own module definitions.

For the GPU bench (full size: the official config's widths, spec §1.2/§2.8) and for fast CPU tests (tiny).
Nothing is read from disk and nothing is downloaded, so the acceptance script needs no checkpoint carried to
the GPU machine. Values are seeded and of ordinary magnitude (GPT-2-style init), so half precision runs
without overflow and comparisons between precisions mean something; they are not a trained model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fasttts_cli.build.bigvgan import BigVGAN, BigVGANConfig
from fasttts_cli.build.dit import DiT, DiTConfig
from fasttts_cli.build.s2mel import CFM, GptLayer, LengthRegulator, S2Mel
from fasttts_cli.build.unified_voice import UnifiedVoice, UnifiedVoiceConfig
from fasttts_cli.build.wavenet import WaveNetConfig


def _conditioner(out: int, units: int, heads: int, blocks: int) -> dict[str, Any]:
    return {
        "output_size": out,
        "linear_units": units,
        "attention_heads": heads,
        "num_blocks": blocks,
        "input_layer": "conv2d2",
        "perceiver_mult": 2,
    }


FULL_GPT: dict[str, Any] = {
    "model_dim": 1280,
    "layers": 24,
    "heads": 20,
    "max_mel_tokens": 1815,
    "max_text_tokens": 600,
    "number_text_tokens": 12000,
    "number_mel_codes": 8194,
    "start_mel_token": 8192,
    "stop_mel_token": 8193,
    "start_text_token": 0,
    "stop_text_token": 1,
    "condition_type": "conformer_perceiver",
    "condition_module": _conditioner(512, 2048, 8, 6),
    "emo_condition_module": _conditioner(512, 1024, 4, 4),
}

TINY_GPT: dict[str, Any] = {
    **FULL_GPT,
    "model_dim": 64,
    "layers": 2,
    "heads": 4,
    "max_mel_tokens": 80,
    "max_text_tokens": 40,
    "number_text_tokens": 60,
    "condition_module": _conditioner(32, 32, 2, 1),
    "emo_condition_module": _conditioner(32, 32, 2, 1),
}


@dataclass(frozen=True)
class S2MelSizes:
    hidden: int = 512
    heads: int = 8
    depth: int = 13
    wavenet_layers: int = 8
    lr_channels: int = 512
    gpt_dim: int = 1280
    content_in: int = 1024
    style_dim: int = 192
    n_mels: int = 80


FULL_S2MEL = S2MelSizes()
TINY_S2MEL = S2MelSizes(
    hidden=32, heads=2, depth=3, wavenet_layers=2, lr_channels=32, gpt_dim=64, content_in=16
)

FULL_BIGVGAN = BigVGANConfig(
    num_mels=80,
    upsample_initial_channel=1536,
    upsample_rates=(4, 4, 2, 2, 2, 2),
    upsample_kernel_sizes=(8, 8, 4, 4, 4, 4),
    resblock_kernel_sizes=(3, 7, 11),
    resblock_dilation_sizes=((1, 3, 5), (1, 3, 5), (1, 3, 5)),
    use_tanh_at_final=False,
    use_bias_at_final=False,
)
TINY_BIGVGAN = BigVGANConfig(
    num_mels=80,
    upsample_initial_channel=32,
    upsample_rates=(4, 4),
    upsample_kernel_sizes=(8, 8),
    resblock_kernel_sizes=(3,),
    resblock_dilation_sizes=((1, 3),),
    use_tanh_at_final=False,
    use_bias_at_final=False,
)


@torch.no_grad()
def randomize(module: nn.Module, seed: int, std: float = 0.02) -> nn.Module:
    """Seeded values for every parameter: matrices N(0, std) scaled for fan-in > 1024, vectors as norm
    scales (1 + small) or biases (small). Buffers (BigVGAN's filters, position tables) stay as built."""
    first = next(module.parameters(), None)
    dev = first.device if first is not None else torch.device("cpu")
    g = torch.Generator(device=dev).manual_seed(seed)

    def randn(shape: torch.Size) -> torch.Tensor:
        return torch.randn(shape, generator=g, device=dev)

    for name, p in module.named_parameters():
        if p.dim() >= 2:
            fan_in = p[0].numel() if not name.endswith("c_attn.weight") else p.shape[0]
            s = min(std, 1.0 / math.sqrt(max(fan_in, 1)))
            p.copy_(randn(p.shape) * s)
        elif name.endswith(("weight", "gamma", "scale")):
            p.copy_(1.0 + 0.05 * randn(p.shape))
        elif name.endswith(("alpha", "beta")):
            p.copy_(0.1 * randn(p.shape))
        else:
            p.copy_(0.02 * randn(p.shape))
    return module


def random_unified_voice(
    size: str = "full", seed: int = 0, cond_input_size: int | None = None, device: torch.device | str = "cpu"
) -> UnifiedVoice:
    """Built on `device` directly (no CPU init of 866M parameters at full size); the conformers, whose
    sinusoid tables are buffers computed at construction, are built on the CPU and moved."""
    from fasttts_cli.build.conformer import ConformerEncoder

    gpt = FULL_GPT if size == "full" else TINY_GPT
    cin = cond_input_size or (1024 if size == "full" else 16)
    cfg = UnifiedVoiceConfig.from_gpt_section(gpt, None, cond_input_size=cin)
    dev = torch.device(device)
    with torch.device("meta"):
        uv = UnifiedVoice(cfg)
    uv = uv.to_empty(device=dev)
    uv.conditioning_encoder = ConformerEncoder(cfg.spk_conformer).to(dev)
    uv.emo_conditioning_encoder = ConformerEncoder(cfg.emo_conformer).to(dev)
    randomize(uv, seed)
    g = torch.Generator(device=dev).manual_seed(seed + 1)
    with torch.no_grad():  # embeddings and position tables at GPT-2's scale
        for emb in (uv.text_embedding, uv.mel_embedding, uv.speed_emb):
            emb.weight.normal_(0.0, 0.02, generator=g)
    return uv.eval().requires_grad_(False)


def random_s2mel(size: str = "full", seed: int = 1, device: torch.device | str = "cpu") -> S2Mel:
    s = FULL_S2MEL if size == "full" else TINY_S2MEL
    wn = WaveNetConfig(
        hidden_dim=s.hidden, num_layers=s.wavenet_layers, kernel_size=5, dilation_rate=1, cond_dim=s.hidden
    )
    dcfg = DiTConfig(
        hidden_dim=s.hidden,
        num_heads=s.heads,
        depth=s.depth,
        in_channels=s.n_mels,
        content_dim=s.lr_channels,
        style_dim=s.style_dim,
        content_codebook_size=1024,
        max_positions=16384 if size == "full" else 256,
        freq_embed_dim=256 if size == "full" else 32,
        wavenet=wn,
        uvit_skip=True,
    )
    lr = LengthRegulator(s.content_in, s.lr_channels, 4, 2048 if size == "full" else 16)
    widths = [s.gpt_dim, 256, 128, s.content_in] if size == "full" else [s.gpt_dim, 24, s.content_in]
    model = S2Mel(CFM(DiT(dcfg)), lr, GptLayer(widths)).to(device)
    randomize(model, seed, std=0.05)
    return model.eval().requires_grad_(False)


def random_bigvgan(size: str = "full", seed: int = 2, device: torch.device | str = "cpu") -> BigVGAN:
    model = BigVGAN(FULL_BIGVGAN if size == "full" else TINY_BIGVGAN).to(device)
    randomize(model, seed, std=0.05)
    return model.eval().requires_grad_(False)
