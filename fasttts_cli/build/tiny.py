"""`fasttts tiny-checkpoint DIR`: a random, shrunken IndexTTS-2 checkpoint in the official layout.

Every file of spec §1.1 is written in its official format (config.yaml, flat `gpt.pth`, `s2mel.pth` with
`net`, stats and emotion matrices as torch files, a SentencePiece `bpe.model`, the w2v-BERT folder with
config/preprocessor JSON and safetensors, the codec safetensors, the CAMPPlus state dict, BigVGAN's
config.json + {'generator': ...}) from OUR module definitions instantiated with every width shrunk. That
works because our loaders derive every size from config.yaml and the tensors (the original hard-codes
some widths: the GPT stays 1280 wide, w2v-BERT/codec/conditioners 1024, which is why the parity
checkpoint is 0.9 GB and this one is about 5 MB).

config.yaml carries `fasttts_random_weights: true` (checkpoint.RANDOM_KEY), which `fasttts build` copies
into the engine's manifest as `random_weights`, so every engine made from it says that it does not clone.

Weights are random but non-trivial (norm scales near 1 but not 1, biases non-zero, BatchNorm running
statistics set, weight-norm gains consistent with their directions), drawn from a torch Generator seeded
with `seed`, so the same seed gives the same tensors. The tokenizer is trained on the spot from a small
built-in text with SentencePiece's trainer (deterministic, single-threaded).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from fasttts_cli.build.checkpoint import RANDOM_KEY

EMO_NUM = [3, 17, 2, 8, 4, 5, 10, 24]


@dataclass(frozen=True)
class Sizes:
    """Every width of a generated checkpoint. TINY is the test checkpoint; FULL has the release's sizes
    (about 5 GB of random weights; for load/export/bench checks at scale)."""

    w2v_width: int = 32  # w2v-BERT hidden = codec hidden = conditioner input = length-regulator input
    w2v_layers: int = 17  # hidden_states[17] is read
    w2v_heads: int = 2
    w2v_ffn: int = 32
    w2v_conv_kernel: int = 5
    gpt_dim: int = 32
    gpt_layers: int = 2
    gpt_heads: int = 2
    max_mel_tokens: int = 400
    max_text_tokens: int = 160
    number_text_tokens: int = 256
    cond_width: int = 16
    cond_units: int = 32
    cond_heads: int = 2
    cond_blocks: int = 1
    emo_cond_units: int = 32
    emo_cond_heads: int = 2
    emo_cond_blocks: int = 1
    cond_kernel: int = 5
    cond_max_len: int = 1000
    perceiver_dim_head: int = 8
    emo_perceiver_dim: int = 24
    codec_dim: int = 16
    codec_inter: int = 32
    codec_layers: int = 1
    style_dim: int = 16
    s2mel_dim: int = 16  # DiT hidden = WaveNet hidden = length-regulator channels = content dim
    dit_heads: int = 2
    dit_depth: int = 3
    dit_ffn: int = 48
    dit_freq_dim: int = 32
    wavenet_layers: int = 2
    lr_blocks: int = 2
    lr_codebook: int = 64
    gpt_layer_widths: tuple[int, int] = (16, 16)
    campplus: tuple[int, tuple[int, int], int, int, int, tuple[int, int, int]] = (
        4,
        (1, 1),
        8,
        4,
        8,
        (1, 1, 1),
    )
    bigvgan_channels: int = 32
    bigvgan_rates: tuple[int, ...] = (4, 4, 4, 4)
    bigvgan_kernels: tuple[int, ...] = (8, 8, 8, 8)
    bigvgan_res_kernels: tuple[int, ...] = (3,)
    bigvgan_res_dilations: tuple[tuple[int, ...], ...] = ((1, 3),)


TINY = Sizes()
STOP_BIAS = 1.0  # added to the stop code's logit bias in random checkpoints (see _build_gpt)
FULL = Sizes(
    w2v_width=1024,
    w2v_layers=24,
    w2v_heads=16,
    w2v_ffn=4096,
    w2v_conv_kernel=31,
    gpt_dim=1280,
    gpt_layers=24,
    gpt_heads=20,
    max_mel_tokens=1815,
    max_text_tokens=600,
    number_text_tokens=12000,
    cond_width=512,
    cond_units=2048,
    cond_heads=8,
    cond_blocks=6,
    emo_cond_units=1024,
    emo_cond_heads=4,
    emo_cond_blocks=4,
    cond_kernel=15,
    cond_max_len=5000,
    perceiver_dim_head=64,
    emo_perceiver_dim=1024,
    codec_dim=384,
    codec_inter=2048,
    codec_layers=12,
    style_dim=192,
    s2mel_dim=512,
    dit_heads=8,
    dit_depth=13,
    dit_ffn=1536,
    dit_freq_dim=256,
    wavenet_layers=8,
    lr_blocks=4,
    lr_codebook=2048,
    gpt_layer_widths=(256, 128),
    campplus=(32, (2, 2), 128, 32, 128, (12, 24, 16)),
    bigvgan_channels=1536,
    bigvgan_rates=(4, 4, 2, 2, 2, 2),
    bigvgan_kernels=(8, 8, 4, 4, 4, 4),
    bigvgan_res_kernels=(3, 7, 11),
    bigvgan_res_dilations=((1, 3, 5), (1, 3, 5), (1, 3, 5)),
)


def make_config(z: Sizes = TINY) -> dict[str, Any]:
    """config.yaml in the official schema (spec §1.2) for sizes `z`."""
    cond = {"input_layer": "conv2d2", "perceiver_mult": 2}
    return {
        "dataset": {
            "bpe_model": "bpe.model",
            "sample_rate": 24000,
            "squeeze": False,
            "mel": {
                "sample_rate": 24000,
                "n_fft": 1024,
                "hop_length": 256,
                "win_length": 1024,
                "n_mels": 100,
                "mel_fmin": 0,
                "normalize": False,
            },
        },
        "gpt": {
            "model_dim": z.gpt_dim,
            "max_mel_tokens": z.max_mel_tokens,
            "max_text_tokens": z.max_text_tokens,
            "heads": z.gpt_heads,
            "use_mel_codes_as_input": True,
            "mel_length_compression": 1024,
            "layers": z.gpt_layers,
            "number_text_tokens": z.number_text_tokens,
            "number_mel_codes": 8194,
            "start_mel_token": 8192,
            "stop_mel_token": 8193,
            "start_text_token": 0,
            "stop_text_token": 1,
            "train_solo_embeddings": False,
            "condition_type": "conformer_perceiver",
            "condition_module": {
                "output_size": z.cond_width,
                "linear_units": z.cond_units,
                "attention_heads": z.cond_heads,
                "num_blocks": z.cond_blocks,
                **cond,
            },
            "emo_condition_module": {
                "output_size": z.cond_width,
                "linear_units": z.emo_cond_units,
                "attention_heads": z.emo_cond_heads,
                "num_blocks": z.emo_cond_blocks,
                **cond,
            },
        },
        "semantic_codec": {
            "codebook_size": 8192,
            "hidden_size": z.w2v_width,
            "codebook_dim": 8,
            "vocos_dim": z.codec_dim,
            "vocos_intermediate_dim": z.codec_inter,
            "vocos_num_layers": z.codec_layers,
        },
        "s2mel": {
            "preprocess_params": {
                "sr": 22050,
                "spect_params": {
                    "n_fft": 1024,
                    "win_length": 1024,
                    "hop_length": 256,
                    "n_mels": 80,
                    "fmin": 0,
                    "fmax": "None",
                },
            },
            "dit_type": "DiT",
            "reg_loss_type": "l1",
            "style_encoder": {"dim": z.style_dim},
            "length_regulator": {
                "channels": z.s2mel_dim,
                "is_discrete": False,
                "in_channels": z.w2v_width,
                "content_codebook_size": z.lr_codebook,
                "sampling_ratios": [1] * z.lr_blocks,
                "vector_quantize": False,
                "n_codebooks": 1,
                "quantizer_dropout": 0.0,
                "f0_condition": False,
                "n_f0_bins": 512,
            },
            "DiT": {
                "hidden_dim": z.s2mel_dim,
                "num_heads": z.dit_heads,
                "depth": z.dit_depth,
                "class_dropout_prob": 0.1,
                "block_size": 8192,
                "in_channels": 80,
                "style_condition": True,
                "final_layer_type": "wavenet",
                "target": "mel",
                "content_dim": z.s2mel_dim,
                "content_codebook_size": 1024 if z.s2mel_dim >= 512 else z.lr_codebook,
                "content_type": "discrete",
                "f0_condition": False,
                "n_f0_bins": 512,
                "content_codebooks": 1,
                "is_causal": False,
                "long_skip_connection": True,
                "zero_prompt_speech_token": False,
                "time_as_token": False,
                "style_as_token": False,
                "uvit_skip_connection": True,
                "add_resblock_in_transformer": False,
            },
            "wavenet": {
                "hidden_dim": z.s2mel_dim,
                "num_layers": z.wavenet_layers,
                "kernel_size": 5,
                "dilation_rate": 1,
                "p_dropout": 0.2,
                "style_condition": True,
            },
        },
        "gpt_checkpoint": "gpt.pth",
        "w2v_stat": "wav2vec2bert_stats.pt",
        "s2mel_checkpoint": "s2mel.pth",
        "emo_matrix": "feat2.pt",
        "spk_matrix": "feat1.pt",
        "emo_num": EMO_NUM,
        "qwen_emo_path": "qwen0.6bemo4-merge/",
        "vocoder": {"type": "bigvgan", "name": "nvidia/bigvgan_v2_22khz_80band_256x"},
        "version": 2.0,
    }


TINY_CONFIG = make_config(TINY)


def w2v_config(z: Sizes = TINY) -> dict[str, Any]:
    return {
        "hidden_size": z.w2v_width,
        "num_hidden_layers": z.w2v_layers,
        "num_attention_heads": z.w2v_heads,
        "intermediate_size": z.w2v_ffn,
        "feature_projection_input_dim": 160,
        "output_hidden_size": z.w2v_width,
        "position_embeddings_type": "relative_key",
        "left_max_position_embeddings": 64,
        "right_max_position_embeddings": 8,
        "conv_depthwise_kernel_size": z.w2v_conv_kernel,
        "hidden_act": "swish",
        "layer_norm_eps": 1e-5,
        "add_adapter": False,
        "apply_spec_augment": True,
        "mask_time_prob": 0.05,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "feat_proj_dropout": 0.0,
        "layerdrop": 0.0,
    }


PREPROCESSOR_CONFIG = {
    "feature_extractor_type": "SeamlessM4TFeatureExtractor",
    "feature_size": 80,
    "num_mel_bins": 80,
    "padding_side": "right",
    "padding_value": 1.0,
    "return_attention_mask": True,
    "sampling_rate": 16000,
    "stride": 2,
}


def bigvgan_config(z: Sizes = TINY) -> dict[str, Any]:
    return {
        "resblock": "1",
        "upsample_rates": list(z.bigvgan_rates),
        "upsample_kernel_sizes": list(z.bigvgan_kernels),
        "upsample_initial_channel": z.bigvgan_channels,
        "resblock_kernel_sizes": list(z.bigvgan_res_kernels),
        "resblock_dilation_sizes": [list(d) for d in z.bigvgan_res_dilations],
        "use_tanh_at_final": False,
        "use_bias_at_final": False,
        "activation": "snakebeta",
        "snake_logscale": True,
        "num_mels": 80,
        "n_fft": 1024,
        "hop_size": 256,
        "win_size": 1024,
        "sampling_rate": 22050,
        "fmin": 0,
        "fmax": None,
    }


# Uppercase English (the original upper-cases before SentencePiece) plus a few CJK characters, so both
# routes of the text front end produce known pieces.
_BPE_TEXT = """
THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG. HELLO WORLD, THIS IS A SMALL TEST!
IT IS QUITE READY, IS IT NOT? WE WILL MEET AGAIN AT SEVEN O'CLOCK TONIGHT.
SHE SAID THAT THE WEATHER WOULD BE FINE TOMORROW, BUT IT RAINED ALL DAY.
ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE TEN ELEVEN TWELVE TWENTY THIRTY HUNDRED THOUSAND.
WHERE ARE YOU GOING? I AM GOING HOME. PLEASE CALL ME WHEN YOU ARRIVE.
THE DOCTOR AND THE NURSE WALKED INTO THE ROOM AND LOOKED AT THE WINDOW.
DO NOT WORRY ABOUT IT; EVERYTHING WILL BE ALL RIGHT IN THE END.
MY NAME IS ALICE AND THIS IS BOB. WE LIVE IN A SMALL TOWN NEAR THE RIVER.
WHAT TIME IS IT NOW? IT IS HALF PAST NINE IN THE MORNING.
THANK YOU VERY MUCH FOR YOUR HELP. YOU ARE WELCOME, MY FRIEND.
你 好 世 界 我 们 是 朋 友 今 天 天 气 很 好 谢 谢 再 见 中 国 人 大 小 一 二 三 十 百 千 万 点 分 年 月 日
"""


# ------------------------------------------------------------------------------------------ weights


def _randomize(module: nn.Module, g: torch.Generator, *, gains: dict[str, float] | None = None) -> None:
    """Fill every parameter (and BatchNorm statistics) with ordinary, non-trivial values.

    dense weights z * gain / sqrt(fan_in); 1-D weights (norm scales, layer scales) 1 + 0.1 z; biases and
    SnakeBeta log-alpha/beta 0.1 z; embedding-like tables 0.5 z; weight-norm gains sized so the folded
    weight has the dense scale. `gains` maps a name regex to a gain.
    """
    gains = gains or {}

    def z(shape: torch.Size) -> torch.Tensor:
        return torch.randn(shape, generator=g)

    def gain_of(name: str) -> float:
        for pat, val in gains.items():
            if re.search(pat, name):
                return val
        return 1.0

    params = dict(module.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "weight_g":
                continue  # after its weight_v
            if leaf in ("bias",) or leaf in ("alpha", "beta"):
                p.copy_(0.1 * z(p.shape))
            elif leaf == "weight_v":
                p.copy_(z(p.shape))
                gname = name[: -len("weight_v")] + "weight_g"
                if gname in params:
                    gp = params[gname]
                    dims = tuple(range(1, p.dim()))
                    norm = p.norm(dim=dims, keepdim=True).reshape(gp.shape)
                    fan_in = p.numel() / p.shape[0]
                    gp.copy_(norm * gain_of(name) / math.sqrt(fan_in) * (1 + 0.1 * z(gp.shape)))
            elif p.dim() == 1:
                p.copy_(1.0 + 0.1 * z(p.shape))
            elif re.search(r"(embedding|emb|latents|codebook|pos_bias_[uv]|mask_token|embedder)\b", name) or (
                "distance_embedding" in name
            ):
                p.copy_(0.5 * z(p.shape))
            else:
                # GPT-2 Conv1D stores (in, out); everything else (out, in, ...).
                conv1d = re.search(r"\.c_(attn|proj|fc)\.weight$", name) is not None
                fan_in = p.shape[0] if conv1d else p.numel() / p.shape[0]
                p.copy_(z(p.shape) * gain_of(name) / math.sqrt(fan_in))
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * z(b.shape))
            elif name.endswith("running_var"):
                b.copy_(0.5 + 0.5 * z(b.shape).abs())


def _build_gpt(g: torch.Generator, z: Sizes, stop_bias: float = STOP_BIAS) -> nn.Module:
    from fasttts_cli.build.unified_voice import UnifiedVoice, UnifiedVoiceConfig

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
    _randomize(uv, g)
    # Random weights almost never pick the stop code, so every line would run to max tokens. A trained
    # model stops at a plausible length; this bias (measured on the sample voices at 1 beam: lines of
    # roughly 10-300 codes) lets the tiny model stop too, so the stop and guard paths get exercised.
    with torch.no_grad():
        uv.mel_head.bias[cfg.stop_mel_token] += stop_bias
    return uv


def _build_s2mel(g: torch.Generator, z: Sizes) -> nn.Module:
    from fasttts_cli.build.dit import DiT, DiTConfig
    from fasttts_cli.build.s2mel import CFM, GptLayer, LengthRegulator, S2Mel
    from fasttts_cli.build.wavenet import WaveNetConfig

    s = make_config(z)["s2mel"]
    d = z.s2mel_dim
    wn = WaveNetConfig(hidden_dim=d, num_layers=z.wavenet_layers, kernel_size=5, dilation_rate=1, cond_dim=d)
    dcfg = DiTConfig(
        hidden_dim=d,
        num_heads=z.dit_heads,
        depth=z.dit_depth,
        in_channels=80,
        content_dim=d,
        style_dim=z.style_dim,
        content_codebook_size=s["DiT"]["content_codebook_size"],
        max_positions=16384,
        freq_embed_dim=z.dit_freq_dim,
        wavenet=wn,
        uvit_skip=True,
        ffn_dim=z.dit_ffn,
    )
    lr = LengthRegulator(
        in_channels=z.w2v_width, channels=d, n_blocks=z.lr_blocks, codebook_size=z.lr_codebook
    )
    model = S2Mel(CFM(DiT(dcfg)), lr, GptLayer([z.gpt_dim, *z.gpt_layer_widths, z.w2v_width]))
    _randomize(model, g)
    return model


def _build_w2v(g: torch.Generator, z: Sizes) -> nn.Module:
    from transformers import Wav2Vec2BertConfig, Wav2Vec2BertModel

    model = Wav2Vec2BertModel(Wav2Vec2BertConfig(**w2v_config(z)))
    _randomize(model, g)
    return model


def _build_codec(g: torch.Generator, z: Sizes) -> nn.Module:
    from fasttts_cli.build.codec import CodecSizes, SemanticCodec

    codec = SemanticCodec(CodecSizes(z.w2v_width, z.codec_dim, z.codec_inter, z.codec_layers, 8192, 8))
    _randomize(codec, g)
    return codec


def _build_campplus(g: torch.Generator, z: Sizes) -> nn.Module:
    from fasttts_cli.build.campplus import CAMPPlus

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
    _randomize(m, g)
    return m


def _build_bigvgan(g: torch.Generator, z: Sizes) -> nn.Module:
    from fasttts_cli.build.bigvgan import BigVGAN, BigVGANConfig

    m = BigVGAN(BigVGANConfig.from_json(bigvgan_config(z)))
    # keep the residual stacks from growing the signal, and the waveform mostly inside [-1, 1]
    _randomize(m, g, gains={r"^resblocks\.": 0.5, r"^conv_post\.": 0.2})
    return m


def train_bpe(vocab_size: int = 200) -> bytes:
    """A small SentencePiece BPE model (ids 0/1/2 = <s>/</s>/<unk>), trained deterministically."""
    import sentencepiece as spm

    lines = [ln.strip() for ln in _BPE_TEXT.strip().splitlines() if ln.strip()]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 4),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        bos_id=0,
        eos_id=1,
        unk_id=2,
        pad_id=-1,
        num_threads=1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return buf.getvalue()


# ------------------------------------------------------------------------------------------ writer


def _save_torch(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, path)


def _state(module: nn.Module, *, copy: bool = False) -> dict[str, torch.Tensor]:
    # safetensors refuses tensors that share storage: copy for it; torch.save needs no copy (full-size
    # GPT weights are 3.5 GB, a copy would double that)
    return {
        k: (v.detach().clone() if copy else v.detach()).contiguous() for k, v in module.state_dict().items()
    }


def _make_readable(folder: Path) -> None:
    # mkdtemp makes a 0700 folder and safetensors writes 0600 files; a checkpoint is ordinary data.
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def write_tiny_checkpoint(
    out_dir: Path | str, seed: int = 0, sizes: Sizes = TINY, *, stop_bias: float = STOP_BIAS
) -> Path:
    """Write every file of the official layout into `out_dir` (created; must be empty or absent).
    `sizes=FULL` writes a full-size random checkpoint (the release's shapes) instead."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        from fasttts_cli.errors import UsageError

        raise UsageError(f"{out}: directory is not empty", hint="choose a new folder for the tiny checkpoint")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            n_proto = sum(EMO_NUM)
            feat1 = 0.5 * torch.randn(n_proto, sizes.style_dim, generator=g)
            feat2 = 0.5 * torch.randn(n_proto, sizes.gpt_dim, generator=g)
            mean = 0.1 * torch.randn(sizes.w2v_width, generator=g)
            var = 0.5 + 0.5 * torch.randn(sizes.w2v_width, generator=g).abs()

        (tmp / "config.yaml").write_text(
            "# IndexTTS-2 config.yaml (official schema) of a RANDOM-WEIGHT checkpoint written by "
            "`fasttts tiny-checkpoint`.\n"
            + yaml.safe_dump({**make_config(sizes), RANDOM_KEY: True}, sort_keys=False, allow_unicode=True),
            encoding="utf-8",
        )
        # one module at a time, so a full-size checkpoint never holds every module in memory at once
        with torch.no_grad():
            gpt = _build_gpt(g, sizes, stop_bias)
        _save_torch(_state(gpt), tmp / "gpt.pth")
        del gpt
        with torch.no_grad():
            s2mel = _build_s2mel(g, sizes)
        _save_torch({"net": {k: dict(v) for k, v in s2mel.official_state_dict().items()}}, tmp / "s2mel.pth")
        del s2mel
        _save_torch({"mean": mean, "var": var}, tmp / "wav2vec2bert_stats.pt")
        _save_torch(feat1, tmp / "feat1.pt")
        _save_torch(feat2, tmp / "feat2.pt")
        (tmp / "bpe.model").write_bytes(train_bpe())

        hf = tmp / "hf_cache"
        w2v_dir = hf / "w2v-bert-2.0"
        w2v_dir.mkdir(parents=True)
        with torch.no_grad():
            w2v = _build_w2v(g, sizes)
        w2v_cfg = w2v.config.to_dict()
        w2v_cfg["architectures"] = ["Wav2Vec2BertModel"]
        (w2v_dir / "config.json").write_text(json.dumps(w2v_cfg, indent=2, sort_keys=True), encoding="utf-8")
        (w2v_dir / "preprocessor_config.json").write_text(
            json.dumps(PREPROCESSOR_CONFIG, indent=2), encoding="utf-8"
        )
        save_file(_state(w2v, copy=True), str(w2v_dir / "model.safetensors"), metadata={"format": "pt"})
        del w2v
        with torch.no_grad():
            codec = _build_codec(g, sizes)
            campplus = _build_campplus(g, sizes)
            bigvgan = _build_bigvgan(g, sizes)
        save_file(
            _state(codec, copy=True), str(hf / "semantic_codec_model.safetensors"), metadata={"format": "pt"}
        )
        _save_torch(_state(campplus), hf / "campplus_cn_common.bin")
        (hf / "bigvgan").mkdir()
        (hf / "bigvgan" / "config.json").write_text(
            json.dumps(bigvgan_config(sizes), indent=2), encoding="utf-8"
        )
        _save_torch({"generator": _state(bigvgan)}, hf / "bigvgan" / "bigvgan_generator.pt")

        _make_readable(tmp)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _source_digest() -> str:
    """Digest of the code that shapes a tiny checkpoint: a cached one is stale when any of it changes."""
    import hashlib

    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in sorted(p.name for p in here.glob("*.py")):
        h.update(name.encode())
        h.update((here / name).read_bytes())
    return h.hexdigest()


def ensure_tiny_checkpoint(out_dir: Path | str, seed: int = 0) -> Path:
    """`write_tiny_checkpoint` once per code version: reuse `out_dir` when its marker matches, else
    rewrite it. A file lock makes parallel test workers share one copy."""
    import fcntl

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    marker = {"seed": seed, "source": _source_digest()}
    with open(out.parent / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = out / "tiny_checkpoint.json"
        if stamp.is_file():
            try:
                if json.loads(stamp.read_text(encoding="utf-8")) == marker:
                    return out
            except (OSError, json.JSONDecodeError):
                pass
        if out.exists():
            shutil.rmtree(out)
        write_tiny_checkpoint(out, seed)
        stamp.write_text(json.dumps(marker), encoding="utf-8")
    return out
