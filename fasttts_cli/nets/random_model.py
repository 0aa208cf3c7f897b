"""The one random-weight model factory: every IndexTTS-2 and 2.5 module family at any size, from OUR module
definitions, with seeded, ordinary, non-trivial values. Used by the tiny checkpoint (`build.tiny`), the
random torch models of the GPU bench and tests (`nets.random_modules`), the random DiTs of the
s2mel cache tests and benchmarks, and the full-size random checkpoint of `fasttts bench --random-weights`.

One init rule (`init_weights`): dense weights z * gain / sqrt(fan_in) (optionally capped at `std_cap`,
GPT-2's 0.02 style, so half precision never overflows at full size); 1-D weights (norm scales, layer
scales) 1 + 0.1 z; biases and SnakeBeta log-alpha/beta 0.1 z; embedding-like tables 0.5 z; weight-norm
gains sized so the folded weight has the dense scale; BatchNorm running statistics set. With these every
module moves its output (PyTorch's default init makes the DiT's transformer modules tiny next to the long
skip). Random weights are still not trained weights: they do not clone a voice.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import torch
from torch import nn

from fasttts_cli.nets.config import SemanticCodecConfig
from fasttts_cli.nets.dit import DiT, DiTConfig
from fasttts_cli.nets.tiny_config import (
    STOP_BIAS,
    TINY,
    TINY25,
    Sizes,
    bigvgan_config,
    make_config,
    make_config25,
    w2v_config,
)
from fasttts_cli.nets.wavenet import WaveNetConfig


@dataclass(frozen=True)
class InitRule:
    """The scales of `init_weights`. The default is the tiny checkpoint's rule; `torch_rule` and
    `DIT_RULE` are the variants the random torch models and the s2mel cache's DiTs are drawn with."""

    vector_spread: float = 0.1  # 1-D weights (norm and layer scales): 1 + spread z
    bias_scale: float = 0.1
    snake_scale: float = 0.1  # SnakeBeta log-alpha / log-beta
    tables: re.Pattern[str] | None = re.compile(
        r"(embedding|emb|latents|codebook|pos_bias_[uv]|mask_token|embedder)\b|distance_embedding"
    )
    table_scale: float = 0.5
    std_cap: float | None = None  # dense scale min(std_cap, gain / sqrt(fan_in)): GPT-2 style at full size
    conv1d: re.Pattern[str] = re.compile(r"\.c_(attn|proj|fc)\.weight$")  # GPT-2 Conv1D stores (in, out)


TINY_RULE = InitRule()
# The DiT's own tables (its input projection counted with them) small, so the content, time and style
# paths and every transformer module, not the raw mel input, dominate the velocity, as the s2mel cache's
# skipping experiments need.
DIT_RULE = InitRule(
    tables=re.compile(r"^(x_embedder|cond_embedder|content_mask_embedder)\.weight$"), table_scale=0.02
)


def torch_rule(std: float) -> InitRule:
    """The random torch models' rule: every matrix dense (capped at `std`), small biases."""
    return InitRule(
        vector_spread=0.05, bias_scale=0.02, tables=None, std_cap=std, conv1d=re.compile(r"c_attn\.weight$")
    )


def generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


@torch.no_grad()
def init_weights(
    module: nn.Module,
    g: torch.Generator,
    rule: InitRule = TINY_RULE,
    *,
    gains: dict[str, float] | None = None,
) -> nn.Module:
    """Fill every parameter (and BatchNorm statistics) of `module` from `g`, on g's device, in
    named_parameters order (so a seed gives the same tensors). `gains` maps a name regex to a gain of the
    dense scale."""
    gains = gains or {}

    def z(shape: torch.Size) -> torch.Tensor:
        return torch.randn(shape, generator=g, device=g.device)

    def gain_of(name: str) -> float:
        for pat, val in gains.items():
            if re.search(pat, name):
                return val
        return 1.0

    def scaled(t: torch.Tensor, name: str, fan_in: float) -> torch.Tensor:
        if rule.std_cap is not None:
            return t * min(rule.std_cap, gain_of(name) / math.sqrt(max(fan_in, 1)))
        return t * gain_of(name) / math.sqrt(fan_in)

    params = dict(module.named_parameters())
    for name, p in params.items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "weight_g":
            continue  # after its weight_v
        if leaf == "bias":
            p.copy_(rule.bias_scale * z(p.shape))
        elif leaf in ("alpha", "beta"):
            p.copy_(rule.snake_scale * z(p.shape))
        elif leaf == "weight_v":
            p.copy_(z(p.shape))
            gname = name[: -len("weight_v")] + "weight_g"
            if gname in params:
                gp = params[gname]
                norm = p.norm(dim=tuple(range(1, p.dim())), keepdim=True).reshape(gp.shape)
                gp.copy_(scaled(norm, name, p.numel() / p.shape[0]) * (1 + 0.1 * z(gp.shape)))
        elif p.dim() == 1:
            p.copy_(1.0 + rule.vector_spread * z(p.shape))
        elif rule.tables is not None and rule.tables.search(name):
            p.copy_(rule.table_scale * z(p.shape))
        else:
            fan_in = p.shape[0] if rule.conv1d.search(name) else p.numel() / p.shape[0]
            p.copy_(scaled(z(p.shape), name, fan_in))
    for name, b in module.named_buffers():
        if name.endswith("running_mean"):
            b.copy_(0.1 * z(b.shape))
        elif name.endswith("running_var"):
            b.copy_(0.5 + 0.5 * z(b.shape).abs())
    return module


# -- per module family -----------------------------------------------------------------------------------


def dit_config(
    hidden: int = 512,
    depth: int = 13,
    heads: int = 8,
    content_dim: int = 512,
    style_dim: int = 192,
    wavenet_layers: int = 8,
    *,
    ffn_dim: int | None = None,
    freq_embed_dim: int = 256,
    max_positions: int = 16384,
    content_codebook_size: int = 1024,
) -> DiTConfig:
    """A DiT's config: the release's (spec §1.2) by default; any other size by argument."""
    return DiTConfig(
        hidden_dim=hidden,
        num_heads=heads,
        depth=depth,
        in_channels=80,
        content_dim=content_dim,
        style_dim=style_dim,
        content_codebook_size=content_codebook_size,
        max_positions=max_positions,
        freq_embed_dim=freq_embed_dim,
        wavenet=WaveNetConfig(hidden, wavenet_layers, 5, 1, hidden),
        uvit_skip=True,
        ffn_dim=ffn_dim,
    )


@torch.no_grad()
def random_dit(cfg: DiTConfig | None = None, seed: int = 0) -> DiT:
    """A random DiT (the release size by default), for the s2mel cache's tests and benchmarks."""
    dit = DiT(cfg or dit_config())
    return init_weights(dit, generator(seed), DIT_RULE).eval()


def s2mel_module(
    dcfg: DiTConfig, content_in: int, lr_blocks: int, lr_codebook: int, gpt_layer: list[int]
) -> nn.Module:
    """An S2Mel (CFM over the DiT, length regulator, gpt_layer) with default-initialised weights."""
    from fasttts_cli.nets.s2mel import CFM, GptLayer, LengthRegulator, S2Mel

    lr = LengthRegulator(content_in, dcfg.content_dim, lr_blocks, lr_codebook)
    return S2Mel(CFM(DiT(dcfg)), lr, GptLayer(gpt_layer))


@torch.no_grad()
def random_gpt(g: torch.Generator, z: Sizes = TINY, stop_bias: float = STOP_BIAS) -> nn.Module:
    from fasttts_cli.nets.unified_voice import UnifiedVoice, UnifiedVoiceConfig

    cfg = UnifiedVoiceConfig.from_gpt_section(make_config(z)["gpt"], None, cond_input_size=z.w2v_width)
    conf = {"cnn_kernel": z.cond_kernel, "max_len": z.cond_max_len}
    cfg = replace(
        cfg,
        spk_conformer=replace(cfg.spk_conformer, **conf),
        emo_conformer=replace(cfg.emo_conformer, **conf),
        spk_perceiver=replace(cfg.spk_perceiver, dim_head=z.perceiver_dim_head),
        emo_perceiver=replace(cfg.emo_perceiver, dim=z.emo_perceiver_dim, dim_head=z.perceiver_dim_head),
    )
    uv = UnifiedVoice(cfg)
    init_weights(uv, g)
    # Random weights almost never pick the stop code, so every line would run to max tokens. A trained
    # model stops at a plausible length; this bias (measured on the sample voices at 1 beam: lines of
    # roughly 10-300 codes) lets the tiny model stop too, so the stop and guard paths get exercised.
    uv.mel_head.bias[cfg.stop_mel_token] += stop_bias
    return uv


@torch.no_grad()
def random_gpt25(g: torch.Generator, z: Sizes = TINY25, stop_bias: float = STOP_BIAS) -> nn.Module:
    """2.5's UnifiedVoice (campplus mode) at sizes `z`: spk_emb_proj from the style width, lang_embedding
    with the original's 107 rows."""
    from fasttts_cli.nets.unified_voice25 import UnifiedVoice25
    from fasttts_cli.nets.unified_voice_config import LANG_ROWS, UnifiedVoiceConfig

    gpt = make_config25(z)["gpt"]
    cfg = UnifiedVoiceConfig.from_gpt_section(
        gpt, None, cond_input_size=z.w2v_width, spk_cond_mode="campplus"
    )
    cfg = replace(
        cfg,
        emo_conformer=replace(cfg.emo_conformer, cnn_kernel=z.cond_kernel, max_len=z.cond_max_len),
        emo_perceiver=replace(cfg.emo_perceiver, dim=z.emo_perceiver_dim, dim_head=z.perceiver_dim_head),
        style_dim=z.style_dim,
        lang_rows=LANG_ROWS,
    )
    uv = UnifiedVoice25(cfg)
    init_weights(uv, g)
    uv.mel_head.bias[cfg.stop_mel_token] += stop_bias  # as random_gpt: let random lines stop
    return uv


@torch.no_grad()
def random_s2mel(g: torch.Generator, z: Sizes = TINY) -> nn.Module:
    d = z.s2mel_dim
    dcfg = dit_config(
        d,
        z.dit_depth,
        z.dit_heads,
        d,
        z.style_dim,
        z.wavenet_layers,
        ffn_dim=z.dit_ffn,
        freq_embed_dim=z.dit_freq_dim,
        content_codebook_size=make_config(z)["s2mel"]["DiT"]["content_codebook_size"],
    )
    model = s2mel_module(
        dcfg, z.w2v_width, z.lr_blocks, z.lr_codebook, [z.gpt_dim, *z.gpt_layer_widths, z.w2v_width]
    )
    return init_weights(model, g)


@torch.no_grad()
def random_w2v(g: torch.Generator, z: Sizes = TINY) -> nn.Module:
    from transformers import Wav2Vec2BertConfig, Wav2Vec2BertModel

    return init_weights(Wav2Vec2BertModel(Wav2Vec2BertConfig(**w2v_config(z))), g)


@torch.no_grad()
def random_codec(g: torch.Generator, z: Sizes = TINY) -> nn.Module:
    from fasttts_cli.nets.codec import SemanticCodec

    return init_weights(SemanticCodec(SemanticCodecConfig(**make_config(z)["semantic_codec"])), g)


@torch.no_grad()
def random_codec25(g: torch.Generator, z: Sizes = TINY25) -> nn.Module:
    """2.5's EnhancedCodec with every key of the official codec.pth (the unused encoder side too)."""
    from fasttts_cli.nets.codec_enhanced import EnhancedCodec

    sizes = SemanticCodecConfig(**make_config25(z)["semantic_codec"])
    return init_weights(EnhancedCodec(sizes, encoder_side=True), g)


@torch.no_grad()
def random_campplus(g: torch.Generator, z: Sizes = TINY) -> nn.Module:
    from fasttts_cli.nets.campplus import CAMPPlus

    head, head_blocks, init, growth, bottleneck, blocks = z.campplus
    m = CAMPPlus(
        feat_dim=80,
        embedding_size=z.style_dim,
        head_channels=head,
        head_blocks=head_blocks,
        init_channels=init,
        growth=growth,
        bottleneck=bottleneck,
        block_layers=blocks,
        kernel=3,
    )
    return init_weights(m, g)


# keep BigVGAN's residual stacks from growing the signal, and the waveform mostly inside [-1, 1]
BIGVGAN_GAINS = {r"^resblocks\.": 0.5, r"^conv_post\.": 0.2}


@torch.no_grad()
def random_bigvgan(g: torch.Generator, z: Sizes = TINY) -> nn.Module:
    from fasttts_cli.nets.bigvgan import BigVGAN, BigVGANConfig

    return init_weights(BigVGAN(BigVGANConfig.from_json(bigvgan_config(z))), g, gains=BIGVGAN_GAINS)
