"""UnifiedVoice's sizes and options, read from the checkpoint's `config.yaml` (`gpt:` section)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fasttts_cli.errors import InputError
from fasttts_cli.nets.conformer import ConformerConfig
from fasttts_cli.nets.perceiver import PerceiverConfig

# 2.5's `lang_embedding` rows: len(LANGUAGE_DICT) + 1 = 106 language codes + 1 (delta §2.1)
LANG_ROWS = 107


@dataclass(frozen=True)
class UnifiedVoiceConfig:
    model_dim: int
    layers: int
    heads: int
    n_inner: int
    max_mel_tokens: int
    max_text_tokens: int
    max_conditioning_inputs: int
    number_text_tokens: int
    types: int
    number_mel_codes: int
    start_mel_token: int
    stop_mel_token: int
    start_text_token: int
    stop_text_token: int
    spk_conformer: ConformerConfig | None  # None in campplus mode (2.5)
    spk_perceiver: PerceiverConfig | None
    emo_conformer: ConformerConfig
    emo_perceiver: PerceiverConfig
    layer_norm_eps: float = 1e-5
    # "conformer" (IndexTTS-2: speaker conformer + perceiver, speed_emb) or "campplus" (2.5: one
    # Linear(style_dim -> D) speaker vector and `lang_embedding` with lang_rows rows; delta §3)
    spk_cond_mode: str = "conformer"
    style_dim: int = 0
    lang_rows: int = 0

    @property
    def text_vocab(self) -> int:
        return self.number_text_tokens * self.types + 1

    @property
    def mel_pos_rows(self) -> int:
        return self.max_mel_tokens + 2 + self.max_conditioning_inputs

    @property
    def text_pos_rows(self) -> int:
        return self.max_text_tokens + 2

    @property
    def campplus(self) -> bool:
        return self.spk_cond_mode == "campplus"

    @property
    def num_latents(self) -> int:
        """Speaker rows of the prefix: the perceiver's latents, or campplus mode's one vector."""
        return 1 if self.spk_perceiver is None else self.spk_perceiver.num_latents

    @property
    def n_conds(self) -> int:
        """Rows of the conditioning part of the prefix: speaker rows + two speed tokens (two zero rows
        in campplus mode)."""
        return self.num_latents + 2

    @property
    def head_dim(self) -> int:
        return self.model_dim // self.heads

    @classmethod
    def from_gpt_section(
        cls,
        gpt: Mapping[str, Any],
        state: Mapping[str, torch.Tensor] | None = None,
        *,
        cond_input_size: int = 1024,
        config_path: Path | str = "config.yaml",
        spk_cond_mode: str = "conformer",
    ) -> UnifiedVoiceConfig:
        """Sizes from config.yaml's `gpt` section; what the config does not hold comes from the tensors.

        spk_cond_mode "campplus" (2.5, which passes it to the original's constructor, not the config):
        `condition_module`/`condition_type` are accepted and ignored; the style width of `spk_emb_proj`
        (192 in the original, hard-coded) and the `lang_embedding` rows (107) come from the tensors.

        `cond_input_size` is the conditioner input width (w2v-BERT hidden size, 1024 in IndexTTS-2; the
        original hard-codes it). Sizes the original hard-codes inside modules (perceiver head width, FFN
        inner size, conv kernel, position-table length, emotion perceiver width) are read from `state`
        when given, so shrunken checkpoints load too.
        """
        state = state or {}

        def need(key: str, where: Mapping[str, Any] = gpt, prefix: str = "gpt") -> Any:
            if key not in where:
                raise InputError(config_path, f"missing key {prefix}.{key}")
            return where[key]

        def dim(key: str, axis: int, default: int) -> int:
            t = state.get(key)
            return int(t.shape[axis]) if t is not None and t.dim() > axis else default

        campplus = spk_cond_mode == "campplus"
        if spk_cond_mode not in ("conformer", "campplus"):
            raise ValueError(f"unknown spk_cond_mode {spk_cond_mode!r}")
        ctype = gpt.get("condition_type", "conformer_perceiver")
        if ctype != "conformer_perceiver" and not campplus:
            raise InputError(
                config_path,
                f"gpt.condition_type {ctype!r} is not supported (IndexTTS-2 uses conformer_perceiver)",
            )
        d = int(need("model_dim"))
        heads = int(need("heads"))

        def conditioner(section: str, prefix: str, perceiver: str, dim_out: int, latents: int):
            mod = need(section)
            name = f"gpt.{section}"
            if mod.get("input_layer", "conv2d2") != "conv2d2":
                raise InputError(config_path, f"{name}.input_layer {mod['input_layer']!r} is not supported")
            out = int(need("output_size", mod, name))
            h = int(need("attention_heads", mod, name))
            conf = ConformerConfig(
                input_size=cond_input_size,
                output_size=out,
                attention_heads=h,
                linear_units=int(need("linear_units", mod, name)),
                num_blocks=int(need("num_blocks", mod, name)),
                cnn_kernel=dim(f"{prefix}.encoders.0.conv_module.depthwise_conv.weight", 2, 15),
                max_len=dim(f"{prefix}.embed.pos_enc.pe", 1, 5000),
            )
            depth_keys = {k.split(".")[2] for k in state if k.startswith(f"{perceiver}.layers.")}
            perc = PerceiverConfig(
                dim=dim_out,
                dim_context=out,
                num_latents=latents,
                heads=h,
                dim_head=dim(f"{perceiver}.layers.0.0.to_q.weight", 0, 64 * h) // h,
                depth=len(depth_keys) if depth_keys else 2,
                ff_inner=dim(f"{perceiver}.layers.0.1.2.weight", 1, 0) or None,
                ff_mult=float(mod.get("perceiver_mult", 4)),
            )
            return conf, perc

        spk_conf, spk_perc = (
            (None, None)
            if campplus
            else conditioner(
                "condition_module",
                "conditioning_encoder",
                "perceiver_encoder",
                d,
                int(gpt.get("condition_num_latent", 32)),
            )
        )
        # The emotion perceiver's width is hard-coded to 1024 (= w2v-BERT width) in the original.
        emo_dim = dim("emo_perceiver_encoder.latents", 1, dim("emovec_layer.weight", 1, cond_input_size))
        emo_conf, emo_perc = conditioner(
            "emo_condition_module", "emo_conditioning_encoder", "emo_perceiver_encoder", emo_dim, 1
        )
        return cls(
            model_dim=d,
            layers=int(need("layers")),
            heads=heads,
            n_inner=dim("gpt.h.0.mlp.c_fc.weight", 1, 4 * d),
            max_mel_tokens=int(need("max_mel_tokens")),
            max_text_tokens=int(need("max_text_tokens")),
            max_conditioning_inputs=int(gpt.get("max_conditioning_inputs", 1)),
            number_text_tokens=int(need("number_text_tokens")),
            types=int(gpt.get("types", 1)),
            number_mel_codes=int(gpt.get("number_mel_codes", 8194)),
            start_mel_token=int(gpt.get("start_mel_token", 8192)),
            stop_mel_token=int(gpt.get("stop_mel_token", 8193)),
            start_text_token=int(gpt.get("start_text_token", 0)),
            stop_text_token=int(gpt.get("stop_text_token", 1)),
            spk_conformer=spk_conf,
            spk_perceiver=spk_perc,
            emo_conformer=emo_conf,
            emo_perceiver=emo_perc,
            spk_cond_mode=spk_cond_mode,
            style_dim=dim("spk_emb_proj.weight", 1, 192) if campplus else 0,
            lang_rows=dim("lang_embedding.weight", 0, LANG_ROWS) if campplus else 0,
        )
