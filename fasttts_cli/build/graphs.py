"""The graphs `fasttts build` exports: one GraphSpec per component (its module, example inputs, io names
and dynamic axes), the wrapper modules that give each component its ONNX signature, and the choice of
graph forms per preset (the in-place trunk and ONNX Runtime contrib ops only where they run)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.nets.checkpoint import IndexTTS2Modules
from fasttts_cli.nets.s2mel import target_lengths
from fasttts_cli.spec.presets import ComponentSpec, Preset


class _W2V(nn.Module):
    def __init__(self, m: nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, input_features: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.m(input_features, attention_mask)


class _S2MelContent(nn.Module):
    """(latent (B,n,D), vq_emb (B,n,C), code_lens (B,), ylens (B,)) -> cond (B, max ylens, C'). The target
    frames are an input, not floor(1.72 n) inside the graph: the host renders a line to any length (its
    natural one is `IndexTTS2Engine.target_lengths`)."""

    def __init__(self, s2mel: nn.Module) -> None:
        super().__init__()
        self.s2mel = s2mel

    def forward(
        self, latent: torch.Tensor, vq_emb: torch.Tensor, code_lens: torch.Tensor, ylens: torch.Tensor
    ) -> torch.Tensor:
        return self.s2mel.content(latent, vq_emb, code_lens, ylens)[0]


class _LengthRegulator(nn.Module):
    """Prompt condition: (x (B,T,C), x_lens (B,), y_lens (B,)) -> (B, max y_lens, C')."""

    def __init__(self, s2mel: nn.Module) -> None:
        super().__init__()
        self.lr = s2mel.length_regulator

    def forward(self, x: torch.Tensor, x_lens: torch.Tensor, y_lens: torch.Tensor) -> torch.Tensor:
        return self.lr(x, x_lens, y_lens)


class _CFGStep(nn.Module):
    """One batched classifier-free-guidance DiT step: the estimator on [cond; uncond] rows, combined as
    (1 + cfg_rate) v_c - cfg_rate v_u. cfg_rate is an input so the run-time preset can change it."""

    def __init__(self, s2mel: nn.Module) -> None:
        super().__init__()
        self.cfm = s2mel.cfm

    def forward(self, x, prompt_x, x_lens, t, style, mu, cfg_rate, prompt_lens):
        v, _ = self.cfm.cfg_velocity(x, prompt_x, x_lens, t, style, mu, cfg_rate, prompt_lens)
        return v


class _Vocoder(nn.Module):
    """(mel (B, 80, T), lengths (B,)) -> wav (B, hop * T), zero past hop * lengths[b]."""

    def __init__(self, bigvgan: nn.Module) -> None:
        super().__init__()
        self.bigvgan = bigvgan

    def forward(self, mel: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.bigvgan(mel, lengths)[:, 0]


Inputs = tuple[torch.Tensor, ...]


@dataclass
class GraphSpec:
    """One ONNX component: how to build its example inputs at (batch, time) and name its axes."""

    name: str  # file stem and manifest key
    group: str  # preset component it belongs to
    module: nn.Module
    make_inputs: Callable[[int, int, torch.Generator], Inputs]
    input_names: list[str]
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    export_bt: tuple[int, int] = (2, 24)
    verify_bt: list[tuple[int, int]] = field(default_factory=lambda: [(3, 17), (1, 31)])


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def _lengths(b: int, t: int, g: torch.Generator, low: int | None = None) -> torch.Tensor:
    """Row 0 full length, the others random in [low, t] so padding is exercised."""
    low = max(1, t // 2) if low is None else low
    out = torch.randint(low, t + 1, (b,), generator=g)
    out[0] = t
    return out


def _trunk_axes(
    layers: int, inputs: dict[str, dict[int, str]], *, past_len: str, present_len: str
) -> dict[str, dict[int, str]]:
    """A GPT trunk's dynamic axes: its own inputs, then the per-layer cache in (length `past_len`), logits
    and hidden, the cache out (length `present_len`); batch is axis 0 everywhere, cache length axis 2."""
    axes = dict(inputs)
    axes.update({n: {0: "batch", 2: past_len} for n in dec.past_names(layers)})
    axes.update({dec.LOGITS: {0: "batch"}, dec.HIDDEN: {0: "batch", 1: "new"}})
    axes.update({n: {0: "batch", 2: present_len} for n in dec.present_names(layers)})
    return axes


def trunk_spec(uv: nn.Module) -> GraphSpec:
    """The GPT-2 trunk as one decoder step with explicit per-layer past/present key/values (decode.py
    names); logits at the last position only, hidden states (after both LayerNorms) at every position."""
    from fasttts_cli.nets.unified_voice import TrunkGraph

    d, layers, heads, dh = uv.cfg.model_dim, uv.cfg.layers, uv.cfg.heads, uv.cfg.head_dim

    def trunk_in(b, t, g):
        # t: new tokens; past length from t too, so both axes vary between shapes
        past = t // 2
        mask = torch.ones(b, past + t, dtype=torch.int64)
        if b > 1:
            mask[1, : min(3, past + t - 1)] = 0  # a left-padded row
        kv = [_randn(g, b, heads, past, dh) for _ in range(2 * layers)]
        return (_randn(g, b, t, d), mask, *kv)

    past, present = dec.past_names(layers), dec.present_names(layers)
    trunk_axes = _trunk_axes(
        layers,
        {dec.INPUTS_EMBEDS: {0: "batch", 1: "new"}, dec.ATTENTION_MASK: {0: "batch", 1: "total"}},
        past_len="past",
        present_len="total",
    )
    return GraphSpec(
        "gpt_trunk",
        "gpt",
        TrunkGraph(uv, kv_layout="per_layer", logits_for="last"),
        trunk_in,
        [dec.INPUTS_EMBEDS, dec.ATTENTION_MASK, *past],
        [dec.LOGITS, dec.HIDDEN, *present],
        trunk_axes,
        export_bt=(2, 6),
        verify_bt=[(3, 5), (1, 9), (2, 1)],
    )


def inplace_trunk_spec(uv: nn.Module) -> GraphSpec:
    """The trunk with the KV cache updated in place (gqa_trunk.py), named `gpt_trunk` like the classic
    form; the runtime tells them apart by their inputs (decode_inplace.inplace_inputs)."""
    from fasttts_cli.build.gqa_trunk import LAST_INDEX, SEQLENS_K, TOTAL_LEN, GqaTrunkGraph

    d, layers, heads, dh = uv.cfg.model_dim, uv.cfg.layers, uv.cfg.heads, uv.cfg.head_dim

    def trunk_in(b, t, g):
        # t > 1: a prompt call, every row t long (a right-padded row's padding is unspecified output);
        # t == 1: a decode step, rows with different past lengths in a buffer with spare columns
        if t > 1:
            seqlens = torch.full((b,), t - 1, dtype=torch.int32)
            total, last, cap = t, torch.full((b,), t - 1, dtype=torch.int64), t + 3
            kv = [torch.zeros(b, heads, cap, dh) for _ in range(2 * layers)]
        else:
            past = torch.randint(2, 9, (b,), generator=g)
            seqlens, total, last, cap = (
                past.to(torch.int32),
                int(past.max()) + 1,
                torch.zeros(b, dtype=torch.int64),
                12,
            )
            kv = [_randn(g, b, heads, cap, dh) for _ in range(2 * layers)]
            for a in kv:
                for r in range(b):
                    a[r, :, int(past[r]) :] = 0  # columns past a row's length hold nothing yet
        return (_randn(g, b, t, d), seqlens, torch.tensor(total, dtype=torch.int32), last, *kv)

    past, present = dec.past_names(layers), dec.present_names(layers)
    axes = _trunk_axes(
        layers,
        {dec.INPUTS_EMBEDS: {0: "batch", 1: "new"}, SEQLENS_K: {0: "batch"}, LAST_INDEX: {0: "batch"}},
        past_len="capacity",
        present_len="capacity",
    )
    return GraphSpec(
        "gpt_trunk",
        "gpt",
        GqaTrunkGraph(uv),
        trunk_in,
        [dec.INPUTS_EMBEDS, SEQLENS_K, TOTAL_LEN, LAST_INDEX, *past],
        [dec.LOGITS, dec.HIDDEN, *present],
        axes,
        export_bt=(2, 6),
        verify_bt=[(3, 5), (1, 9), (2, 1), (3, 1)],
    )


def inplace_trunk_fits(uv: nn.Module, comp: ComponentSpec | None) -> bool:
    """The in-place form needs ONNX Runtime's CPU kernel (a contrib op: TensorRT cannot parse it; the
    CUDA session keeps its own device cache) and a head size that is a multiple of 8."""
    backend = (comp or ComponentSpec()).backend
    return backend == "onnxruntime-cpu" and uv.cfg.head_dim % 8 == 0


def ort_contrib_fits(comp: ComponentSpec | None) -> bool:
    """ONNX Runtime's contrib ops (the DiT's RotaryEmbedding) only where the graph runs on ONNX Runtime's
    CPU provider: TensorRT cannot parse them, and CUDA graphs go through the fp16 converter, which knows
    only standard ops."""
    return (comp or ComponentSpec()).backend == "onnxruntime-cpu"


def engine_specs(m: IndexTTS2Modules, preset: Preset) -> list[GraphSpec]:
    """The graphs `build_engine` exports for `preset`: `graph_specs`, with the in-place trunk where it
    fits (`inplace_trunk_fits`) and the DiT's RoPE as a contrib op where it fits (`ort_contrib_fits`;
    this sets a flag on the DiT's modules that the export reads)."""
    from fasttts_cli.nets.dit import use_ort_attention

    use_ort_attention(m.s2mel, ort_contrib_fits(preset.components.get("dit")))
    specs = graph_specs(m)
    if inplace_trunk_fits(m.gpt, preset.components.get("gpt")):
        specs = [inplace_trunk_spec(m.gpt) if sp.name == "gpt_trunk" else sp for sp in specs]
    return specs


def _mask_from(lens: torch.Tensor, t: int) -> torch.Tensor:
    return (torch.arange(t)[None, :] < lens[:, None]).to(torch.int64)


def _conditioner_inputs(width: int) -> Callable[[int, int, torch.Generator], Inputs]:
    """A conditioner's example (features (B, T >= 5, width), lengths (B,) >= 3)."""

    def cond_in(b: int, t: int, g: torch.Generator) -> Inputs:
        t = max(t, 5)
        return _randn(g, b, t, width), _lengths(b, t, g, low=3)

    return cond_in


def graph_specs(m: IndexTTS2Modules) -> list[GraphSpec]:
    """Every component of the engine, built from loaded modules; all sizes come from the modules."""
    uv = m.gpt
    from fasttts_cli.nets.unified_voice import SpeakerConditionerGraph

    width = int(m.w2v_bert.model.config.hidden_size)
    codes = int(m.codec.vq.codebook.weight.shape[0]) if hasattr(m.codec.vq, "codebook") else 8192
    lat_dim = int(m.s2mel.gpt_layer[0].weight.shape[1])
    common = common_specs(m)

    def codec_in(b, t, g):
        return _randn(g, b, t, width), _mask_from(_lengths(b, t, g), t)

    def vq_in(b, t, g):
        return (torch.randint(0, codes, (b, t), generator=g),)

    cond_in = _conditioner_inputs(width)

    def content_in(b, t, g):
        lens = _lengths(b, t, g, low=2)
        # row 0 at its natural length, the others within +-25% of theirs (a line fitted to its slot)
        ylens = (target_lengths(lens) * (0.75 + 0.5 * torch.rand(b, generator=g))).long().clamp(min=1)
        ylens[0] = target_lengths(lens[:1])[0]
        return _randn(g, b, t, lat_dim), _randn(g, b, t, width), lens, ylens

    bt = {0: "batch", 1: "time"}
    b_ = {0: "batch"}
    return [
        common["w2v_bert"],
        GraphSpec(
            "codec_quantize",
            "codec",
            _codec_quantize(m.codec),
            codec_in,
            ["features", "mask"],
            ["indices", "quantized"],
            {"features": bt, "mask": bt, "indices": bt, "quantized": bt},
        ),
        GraphSpec(
            "codec_vq2emb",
            "codec",
            _codec_embed(m.codec),
            vq_in,
            ["codes"],
            ["embedding"],
            {"codes": bt, "embedding": bt},
        ),
        common["campplus"],
        GraphSpec(
            "speaker_conditioner",
            "conditioners",
            SpeakerConditionerGraph(uv),
            cond_in,
            ["features", "lengths"],
            ["latents"],
            {"features": bt, "lengths": b_, "latents": b_},
        ),
        common["emotion_conditioner"],
        trunk_spec(uv),
        GraphSpec(
            "s2mel_content",
            "s2mel",
            _S2MelContent(m.s2mel),
            content_in,
            ["latent", "vq_emb", "code_lens", "ylens"],
            ["cond"],
            {"latent": bt, "vq_emb": bt, "code_lens": b_, "ylens": b_, "cond": {0: "batch", 1: "frames"}},
        ),
        common["length_regulator"],
        common["dit_cfg_step"],
        common["bigvgan"],
    ]


def common_specs(m: Any) -> dict[str, GraphSpec]:
    """The graphs IndexTTS-2 and 2.5 share (w2v-BERT, CAMPPlus, emotion conditioner, length regulator,
    DiT step, vocoder), by name, from a loaded module set of either version (its w2v_bert, campplus,
    gpt, s2mel, bigvgan and config.s2mel.style_dim); all sizes come from the modules."""
    from fasttts_cli.nets.unified_voice import EmotionConditionerGraph

    uv = m.gpt
    w2v_cfg = m.w2v_bert.model.config
    feat_in = int(w2v_cfg.feature_projection_input_dim)
    width = int(w2v_cfg.hidden_size)
    n_mels = int(m.s2mel.cfm.estimator.cfg.in_channels)
    style_dim = int(m.config.s2mel.style_dim)
    content_dim = int(m.s2mel.length_regulator.content_in_proj.weight.shape[0])

    def w2v_in(b, t, g):
        return _randn(g, b, t, feat_in), _mask_from(_lengths(b, t, g), t)

    def campplus_in(b, t, g):
        return (_randn(g, b, 4 * t, 80),)

    cond_in = _conditioner_inputs(width)

    def lr_in(b, t, g):
        lens = _lengths(b, t, g, low=2)
        return _randn(g, b, t, width), lens, (lens.float() * 1.7).long() + 1

    def dit_in(b, t, g):
        t = max(t, 8)
        lens = _lengths(b, t, g, low=6)
        prompt = _randn(g, b, n_mels, t)
        return (
            _randn(g, b, n_mels, t),
            prompt,
            lens,
            torch.rand(b, generator=g),
            _randn(g, b, style_dim),
            _randn(g, b, t, content_dim),
            torch.tensor([0.7]),
            (lens * torch.rand(b, generator=g)).long(),  # prompt lengths: some rows crop, some not
        )

    def voc_in(b, t, g):
        return _randn(g, b, n_mels, t), _lengths(b, t, g, low=2)

    bt = {0: "batch", 1: "time"}
    b_ = {0: "batch"}
    specs = [
        GraphSpec(
            "w2v_bert",
            "w2v_bert",
            _W2V(m.w2v_bert),
            w2v_in,
            ["input_features", "attention_mask"],
            ["spk_cond_emb"],
            {"input_features": bt, "attention_mask": bt, "spk_cond_emb": bt},
            # 80 frames: past the relative-position window (64 left), so its clipping is checked too
            verify_bt=[(3, 17), (1, 80)],
        ),
        GraphSpec(
            "campplus",
            "campplus",
            m.campplus,
            campplus_in,
            ["fbank"],
            ["style"],
            {"fbank": bt, "style": b_},
        ),
        GraphSpec(
            "emotion_conditioner",
            "conditioners",
            EmotionConditionerGraph(uv),
            cond_in,
            ["features", "lengths"],
            ["emovec"],
            {"features": bt, "lengths": b_, "emovec": b_},
        ),
        GraphSpec(
            "length_regulator",
            "s2mel",
            _LengthRegulator(m.s2mel),
            lr_in,
            ["x", "x_lens", "y_lens"],
            ["y"],
            {"x": bt, "x_lens": b_, "y_lens": b_, "y": {0: "batch", 1: "frames"}},
        ),
        GraphSpec(
            "dit_cfg_step",
            "dit",
            _CFGStep(m.s2mel),
            dit_in,
            ["x", "prompt_x", "x_lens", "t", "style", "mu", "cfg_rate", "prompt_lens"],
            ["v"],
            {
                "x": {0: "batch", 2: "time"},
                "prompt_x": {0: "batch", 2: "time"},
                "x_lens": b_,
                "prompt_lens": b_,
                "t": b_,
                "style": b_,
                "mu": bt,
                "v": {0: "batch", 2: "time"},
            },
        ),
        GraphSpec(
            "bigvgan",
            "vocoder",
            _Vocoder(m.bigvgan),
            voc_in,
            ["mel", "lengths"],
            ["wav"],
            {"mel": {0: "batch", 2: "frames"}, "lengths": b_, "wav": {0: "batch", 1: "samples"}},
            export_bt=(2, 12),
            verify_bt=[(3, 9), (1, 17)],
        ),
    ]
    return {sp.name: sp for sp in specs}


def _codec_quantize(codec: nn.Module) -> nn.Module:
    from fasttts_cli.nets.codec import CodecQuantize

    return CodecQuantize(codec)


def _codec_embed(codec: nn.Module) -> nn.Module:
    from fasttts_cli.nets.codec import CodecEmbed

    return CodecEmbed(codec)
