"""The sizes and the official-schema configs of a generated (random-weight) IndexTTS-2 or 2.5 checkpoint:
`Sizes` holds every width, TINY the test checkpoint's, FULL the release's (spec §1.2), TINY25/FULL25
the 2.5 ones; `make_config` / `make_config25` write config.yaml's content for a `Sizes`, `w2v_config` /
`bigvgan_config` the HF w2v-BERT and BigVGAN JSON configs. Pure data: `nets.random_model` builds the
modules, `build.tiny` writes the files.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fasttts_cli.nets.tiktoken_ranks import N_SPECIAL, tiny_ranks

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


# -- IndexTTS-2.5 (delta §13.2) --------------------------------------------------------------------------

# The tiny tokenizer's ids run up to R + N_SPECIAL - 1: the text table holds them all.
TINY25 = replace(TINY, number_text_tokens=len(tiny_ranks()) + N_SPECIAL)
# Full-size random 2.5 checkpoints. The release's sizes are unknown (delta §12); chosen here: the v2 GPT
# (24 layers x 1280, 20 heads, max_text_tokens 600, max_mel_tokens 1815 >= 1498, start/stop text 0/1,
# mel 8192/8193 of 8194 codes), number_text_tokens 60509 (= n_vocab of the CosyVoice-sized vocabulary,
# 58836 ranks + 1673 specials, so 60510 text rows and about 810 M GPT parameters, the "0.8B" of the
# README), the v2 codec sizes (8192 x 8, vocos 384/2048/12, hidden 1024, downsample_scale 2), the v2
# s2mel (DiT 512 x 13, 8 heads, WaveNet 8, LR 512 from 1024) and emo_num.
FULL25 = replace(FULL, number_text_tokens=58836 + N_SPECIAL)


def make_config25(z: Sizes = TINY25) -> dict[str, Any]:
    """config.yaml of a 2.5 checkpoint: the v2 schema without `dataset.bpe_model`, with no
    `gpt.condition_module` (campplus mode reads none; the loader also accepts one), and
    `semantic_codec.downsample_scale` 2."""
    cfg = make_config(z)
    del cfg["dataset"]["bpe_model"]
    del cfg["gpt"]["condition_module"]
    cfg["semantic_codec"]["downsample_scale"] = 2
    cfg["version"] = 2.5
    return cfg
