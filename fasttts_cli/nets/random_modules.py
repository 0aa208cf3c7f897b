"""Random-weight UnifiedVoice, S2Mel and BigVGAN in-process, on a device, at two sizes: "full" (the official
config's widths, spec §1.2/§2.8) for the GPU bench and "tiny" for fast CPU tests.

Nothing is read from disk and nothing is downloaded, so the acceptance script needs no checkpoint carried to
the GPU machine. The weights come from the one factory (`build.random_model.init_weights`) with dense
scales capped GPT-2 style, so half precision runs without overflow and comparisons between precisions mean
something; they are not a trained model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from fasttts_cli.nets import random_model as rm
from fasttts_cli.nets.bigvgan import BigVGAN, BigVGANConfig
from fasttts_cli.nets.s2mel import S2Mel
from fasttts_cli.nets.tiny_config import FULL, bigvgan_config, make_config
from fasttts_cli.nets.unified_voice import UnifiedVoice, UnifiedVoiceConfig

# config.yaml's gpt section (spec §1.2) at the release's sizes and at the tiny test sizes
FULL_GPT: dict[str, Any] = make_config(FULL)["gpt"]
TINY_GPT: dict[str, Any] = make_config(
    replace(
        FULL,
        gpt_dim=64,
        gpt_layers=2,
        gpt_heads=4,
        max_mel_tokens=80,
        max_text_tokens=40,
        number_text_tokens=60,
        cond_width=32,
        cond_units=32,
        cond_heads=2,
        cond_blocks=1,
        emo_cond_units=32,
        emo_cond_heads=2,
        emo_cond_blocks=1,
    )
)["gpt"]


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

FULL_BIGVGAN = BigVGANConfig.from_json(bigvgan_config(FULL))
TINY_BIGVGAN = BigVGANConfig.from_json(
    bigvgan_config(
        replace(
            FULL,
            bigvgan_channels=32,
            bigvgan_rates=(4, 4),
            bigvgan_kernels=(8, 8),
            bigvgan_res_kernels=(3,),
            bigvgan_res_dilations=((1, 3),),
        )
    )
)
GPT_STD, S2MEL_STD = 0.02, 0.05  # dense-weight caps (GPT-2's 0.02; the s2mel nets and BigVGAN 0.05)


def random_unified_voice(
    size: str = "full", seed: int = 0, cond_input_size: int | None = None, device: torch.device | str = "cpu"
) -> UnifiedVoice:
    """Built on `device` directly (no CPU init of 866M parameters at full size); the conformers, whose
    sinusoid tables are buffers computed at construction, are built on the CPU and moved."""
    from fasttts_cli.nets.conformer import ConformerEncoder

    gpt = FULL_GPT if size == "full" else TINY_GPT
    cin = cond_input_size or (1024 if size == "full" else 16)
    cfg = UnifiedVoiceConfig.from_gpt_section(gpt, None, cond_input_size=cin)
    dev = torch.device(device)
    with torch.device("meta"):
        uv = UnifiedVoice(cfg)
    uv = uv.to_empty(device=dev)
    uv.conditioning_encoder = ConformerEncoder(cfg.spk_conformer).to(dev)
    uv.emo_conditioning_encoder = ConformerEncoder(cfg.emo_conformer).to(dev)
    with torch.no_grad():
        rm.init_weights(uv, rm.generator(seed, dev), rm.torch_rule(GPT_STD))
        g = rm.generator(seed + 1, dev)
        for emb in (uv.text_embedding, uv.mel_embedding, uv.speed_emb):  # at GPT-2's scale
            emb.weight.normal_(0.0, 0.02, generator=g)
    return uv.eval().requires_grad_(False)


def random_s2mel(size: str = "full", seed: int = 1, device: torch.device | str = "cpu") -> S2Mel:
    s = FULL_S2MEL if size == "full" else TINY_S2MEL
    full = size == "full"
    dcfg = rm.dit_config(
        s.hidden,
        s.depth,
        s.heads,
        s.lr_channels,
        s.style_dim,
        s.wavenet_layers,
        freq_embed_dim=256 if full else 32,
        max_positions=16384 if full else 256,
    )
    widths = [s.gpt_dim, 256, 128, s.content_in] if full else [s.gpt_dim, 24, s.content_in]
    model = rm.s2mel_module(dcfg, s.content_in, 4, 2048 if full else 16, widths).to(device)
    with torch.no_grad():
        rm.init_weights(model, rm.generator(seed, device), rm.torch_rule(S2MEL_STD))
    return model.eval().requires_grad_(False)


def random_bigvgan(size: str = "full", seed: int = 2, device: torch.device | str = "cpu") -> BigVGAN:
    model = BigVGAN(FULL_BIGVGAN if size == "full" else TINY_BIGVGAN).to(device)
    with torch.no_grad():
        rm.init_weights(model, rm.generator(seed, device), rm.torch_rule(S2MEL_STD))
    return model.eval().requires_grad_(False)
