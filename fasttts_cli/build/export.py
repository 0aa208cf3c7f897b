"""`fasttts build`: export an official checkpoint to a self-contained engine folder (ONNX per component).

Every component is exported with the legacy TorchScript exporter (`dynamo=False`, opset 17: on torch 2.13
it gives graphs that match PyTorch to ~1e-6 with dynamic batch and time axes, including an empty KV
cache), then verified at once: ONNX Runtime against the PyTorch module on random inputs of two shapes
other than the export example, relative error < 1e-4 (integer outputs exact), else the build fails.

Engine folder (DESIGN.md §3b): the `.onnx` components (`<name>.onnx.data` beside a graph over 2 GB), the
tokenizer, the host-side tables as `.npy` (GPT embedding and position tables, speed embedding, emotion
matrices, w2v-BERT stats) and `manifest.json` (preset build keys, io names and shapes, model constants).
The folder is assembled under a temporary name and renamed when complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fasttts_cli import __version__
from fasttts_cli.build.checkpoint import CheckpointPaths, IndexTTS2Modules, load_checkpoint
from fasttts_cli.build.config import EMOTIONS
from fasttts_cli.build.quiet import quiet_native_output
from fasttts_cli.engine_folder import ComponentEntry, Manifest, component_sha256, write_manifest
from fasttts_cli.errors import FastTTSError, UsageError
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.presets import ComponentSpec, Preset, load_preset

OPSET = 17
EXTERNAL_DATA_BYTES = 2_000_000_000
VERIFY_REL = 1e-4
MODEL_ID = "indextts2"


class ExportError(FastTTSError):
    """A component failed to export or did not match its PyTorch module."""


# ------------------------------------------------------------------------------------------ graphs


class _W2V(nn.Module):
    def __init__(self, m: nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, input_features: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.m(input_features, attention_mask)


class _S2MelContent(nn.Module):
    """(latent (B,n,D), vq_emb (B,n,C), code_lens (B,)) -> (cond (B, max floor(1.72 n), C'), ylens (B,))."""

    def __init__(self, s2mel: nn.Module) -> None:
        super().__init__()
        self.s2mel = s2mel

    def forward(self, latent: torch.Tensor, vq_emb: torch.Tensor, code_lens: torch.Tensor):
        return self.s2mel.content(latent, vq_emb, code_lens)


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


def trunk_spec(uv: nn.Module) -> GraphSpec:
    """The GPT-2 trunk as one decoder step with explicit per-layer past/present key/values (decode.py
    names); logits at the last position only, hidden states (after both LayerNorms) at every position."""
    from fasttts_cli.build.unified_voice import TrunkGraph

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
    trunk_axes = {dec.INPUTS_EMBEDS: {0: "batch", 1: "new"}, dec.ATTENTION_MASK: {0: "batch", 1: "total"}}
    trunk_axes.update({n: {0: "batch", 2: "past"} for n in past})
    trunk_axes.update({dec.LOGITS: {0: "batch"}, dec.HIDDEN: {0: "batch", 1: "new"}})
    trunk_axes.update({n: {0: "batch", 2: "total"} for n in present})
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
    axes = {dec.INPUTS_EMBEDS: {0: "batch", 1: "new"}, SEQLENS_K: {0: "batch"}, LAST_INDEX: {0: "batch"}}
    axes.update({n: {0: "batch", 2: "capacity"} for n in past})
    axes.update({dec.LOGITS: {0: "batch"}, dec.HIDDEN: {0: "batch", 1: "new"}})
    axes.update({n: {0: "batch", 2: "capacity"} for n in present})
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
    from fasttts_cli.build.dit import use_ort_attention

    use_ort_attention(m.s2mel, ort_contrib_fits(preset.components.get("dit")))
    specs = graph_specs(m)
    if inplace_trunk_fits(m.gpt, preset.components.get("gpt")):
        specs = [inplace_trunk_spec(m.gpt) if sp.name == "gpt_trunk" else sp for sp in specs]
    return specs


def graph_specs(m: IndexTTS2Modules) -> list[GraphSpec]:
    """Every component of the engine, built from loaded modules; all sizes come from the modules."""
    uv = m.gpt
    from fasttts_cli.build.unified_voice import EmotionConditionerGraph, SpeakerConditionerGraph

    w2v_cfg = m.w2v_bert.model.config
    feat_in = int(w2v_cfg.feature_projection_input_dim)
    width = int(w2v_cfg.hidden_size)
    n_mels = int(m.s2mel.cfm.estimator.cfg.in_channels)
    style_dim = int(m.config.s2mel.style_dim)
    content_dim = int(m.s2mel.length_regulator.content_in_proj.weight.shape[0])
    codes = int(m.codec.vq.codebook.weight.shape[0]) if hasattr(m.codec.vq, "codebook") else 8192
    lat_dim = int(m.s2mel.gpt_layer[0].weight.shape[1])

    def mask_from(lens: torch.Tensor, t: int) -> torch.Tensor:
        return (torch.arange(t)[None, :] < lens[:, None]).to(torch.int64)

    def w2v_in(b, t, g):
        return _randn(g, b, t, feat_in), mask_from(_lengths(b, t, g), t)

    def codec_in(b, t, g):
        return _randn(g, b, t, width), mask_from(_lengths(b, t, g), t)

    def vq_in(b, t, g):
        return (torch.randint(0, codes, (b, t), generator=g),)

    def campplus_in(b, t, g):
        return (_randn(g, b, 4 * t, 80),)

    def cond_in(b, t, g):
        t = max(t, 5)
        return _randn(g, b, t, width), _lengths(b, t, g, low=3)

    def content_in(b, t, g):
        lens = _lengths(b, t, g, low=2)
        return _randn(g, b, t, lat_dim), _randn(g, b, t, width), lens

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
    return [
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
            "speaker_conditioner",
            "conditioners",
            SpeakerConditionerGraph(uv),
            cond_in,
            ["features", "lengths"],
            ["latents"],
            {"features": bt, "lengths": b_, "latents": b_},
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
        trunk_spec(uv),
        GraphSpec(
            "s2mel_content",
            "s2mel",
            _S2MelContent(m.s2mel),
            content_in,
            ["latent", "vq_emb", "code_lens"],
            ["cond", "ylens"],
            {"latent": bt, "vq_emb": bt, "code_lens": b_, "cond": {0: "batch", 1: "frames"}, "ylens": b_},
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


def _codec_quantize(codec: nn.Module) -> nn.Module:
    from fasttts_cli.build.codec import CodecQuantize

    return CodecQuantize(codec)


def _codec_embed(codec: nn.Module) -> nn.Module:
    from fasttts_cli.build.codec import CodecEmbed

    return CodecEmbed(codec)


# ------------------------------------------------------------------------------------------ export


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nb = np.linalg.norm(b64)
    return float(np.linalg.norm(a64 - b64) / (nb if nb > 0 else 1.0))


def export_graph(spec: GraphSpec, out_dir: Path, *, seed: int = 0) -> Path:
    """Export one component to `out_dir/<name>.onnx` (+ `.onnx.data` when large) and verify it."""
    g = torch.Generator().manual_seed(seed)
    example = spec.make_inputs(*spec.export_bt, g)
    path = out_dir / f"{spec.name}.onnx"
    spec.module.eval()
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's tracer warnings are expected noise
        raw = Path(tmp) / path.name
        try:
            with torch.no_grad(), quiet_native_output(f"the ONNX export of {spec.name}"):
                torch.onnx.export(
                    spec.module,
                    example,
                    str(raw),
                    input_names=spec.input_names,
                    output_names=spec.output_names,
                    dynamic_axes=spec.dynamic_axes,
                    opset_version=OPSET,
                    dynamo=False,
                    do_constant_folding=True,
                )
        except Exception as e:  # the exporter raises many types
            raise ExportError(f"export of component {spec.name!r} failed: {e}") from None
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        _finalize(raw, path, external=size > EXTERNAL_DATA_BYTES)
    verify_graph(spec, path, seed=seed + 1)
    return path


def _finalize(raw: Path, dest: Path, *, external: bool) -> None:
    """Move the exported graph into place; big graphs get all weights in one `<name>.onnx.data`."""
    if not external and not any(p != raw for p in raw.parent.iterdir()):
        os.replace(raw, dest)
        return
    import onnx

    model = onnx.load(str(raw), load_external_data=True)
    onnx.save_model(
        model,
        str(dest),
        save_as_external_data=external,
        all_tensors_to_one_file=True,
        location=dest.name + ".data",
        size_threshold=1024,
    )


def verify_graph(spec: GraphSpec, path: Path, *, seed: int = 1, tolerance: float = VERIFY_REL) -> float:
    """ORT vs PyTorch on shapes other than the export example; returns the worst relative error.
    Raises ExportError when an output's relative error reaches `tolerance` (or is not finite), a shape
    differs, or an integer output differs at all (integer checks are skipped for tolerance inf)."""
    from fasttts_cli.indextts2.sessions import OrtSession, SessionOptions

    sess = OrtSession(path, SessionOptions(graph_optimization="all"))
    g = torch.Generator().manual_seed(seed)
    worst = 0.0
    for b, t in spec.verify_bt:
        inputs = spec.make_inputs(b, t, g)
        with torch.no_grad():
            ref = spec.module(*inputs)
        ref = ref if isinstance(ref, tuple | list) else (ref,)
        out = sess.run(
            spec.output_names, {n: x.numpy() for n, x in zip(spec.input_names, inputs, strict=True)}
        )
        for name, r in zip(spec.output_names, ref, strict=True):
            a, want = out[name], r.detach().numpy()
            if a.shape != want.shape:
                raise ExportError(
                    f"component {spec.name!r}: output {name} shape {a.shape}, PyTorch {want.shape}"
                )
            if np.issubdtype(want.dtype, np.integer):
                if tolerance != float("inf") and not np.array_equal(a, want):
                    raise ExportError(f"component {spec.name!r}: integer output {name} differs from PyTorch")
                continue
            err = _rel(a, want)
            worst = max(worst, err)
            if not np.isfinite(err) or not err < tolerance:
                raise ExportError(
                    f"component {spec.name!r}: output {name} differs from PyTorch at batch {b}, "
                    f"time {t}: relative error {err:.2e} >= {tolerance:g}"
                )
    return worst


def _io_shapes(path: Path) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)

    def dims(vi: Any) -> list[Any]:
        return [d.dim_param if d.dim_param else int(d.dim_value) for d in vi.type.tensor_type.shape.dim]

    return (
        {i.name: dims(i) for i in model.graph.input},
        {o.name: dims(o) for o in model.graph.output},
    )


# ------------------------------------------------------------------------------------------ host files

W2V_MEAN = "w2v_stat_mean.npy"
W2V_VAR = "w2v_stat_var.npy"
SPK_MATRIX = "spk_matrix.npy"  # feat1
EMO_MATRIX = "emo_matrix.npy"  # feat2
BPE_MODEL = "bpe.model"


def gpt_host_tables(uv: nn.Module) -> dict[str, np.ndarray]:
    """decode.TABLE_FILES file name -> the GPT lookup table the runtime applies on the host."""
    tables = {
        "text_embedding": uv.text_embedding.weight,
        "text_pos": uv.text_pos_embedding.emb.weight,
        "mel_embedding": uv.mel_embedding.weight,
        "mel_pos": uv.mel_pos_embedding.emb.weight,
        "speed": uv.speed_emb.weight,
    }
    return {dec.TABLE_FILES[k]: v.detach().float().numpy().copy() for k, v in tables.items()}


def host_arrays(m: IndexTTS2Modules) -> dict[str, np.ndarray]:
    """File name -> array for every table the runtime applies on the host."""
    out = gpt_host_tables(m.gpt)
    out[W2V_MEAN] = m.w2v_mean.astype(np.float32)
    out[W2V_VAR] = m.w2v_var.astype(np.float32)
    out[SPK_MATRIX] = m.spk_matrix.astype(np.float32)
    out[EMO_MATRIX] = m.emo_matrix.astype(np.float32)
    return out


def model_constants(m: IndexTTS2Modules) -> dict[str, Any]:
    """What the runtime needs to know about the model (manifest `config`)."""
    c, g = m.config, m.gpt.cfg
    w2v_cfg = m.w2v_bert.model.config
    ups = list(m.bigvgan.cfg.upsample_rates)
    return {
        "gpt": {
            "model_dim": g.model_dim,
            "layers": g.layers,
            "heads": g.heads,
            "head_dim": g.head_dim,
            "num_latents": g.num_latents,
            "number_mel_codes": g.number_mel_codes,
            "start_mel_token": g.start_mel_token,
            "stop_mel_token": g.stop_mel_token,
            "start_text_token": g.start_text_token,
            "stop_text_token": g.stop_text_token,
            "max_mel_tokens": g.max_mel_tokens,
            "max_text_tokens": g.max_text_tokens,
            "text_vocab": g.text_vocab,
        },
        "w2v_bert": {
            "layer": int(m.w2v_bert.layer),
            "hidden_size": int(w2v_cfg.hidden_size),
            "feature_size": int(w2v_cfg.feature_projection_input_dim),
        },
        "s2mel": {
            "sr": c.s2mel.sr,
            "n_fft": c.s2mel.spect.n_fft,
            "win_length": c.s2mel.spect.win_length,
            "hop_length": c.s2mel.spect.hop_length,
            "n_mels": c.s2mel.spect.n_mels,
            "fmin": c.s2mel.spect.fmin,
            "fmax": c.s2mel.spect.fmax,
            "style_dim": c.s2mel.style_dim,
            "content_dim": int(m.s2mel.length_regulator.content_in_proj.weight.shape[0]),
            "code_to_frames": 1.72,
        },
        "vocoder": {"hop": int(np.prod(ups)), "sampling_rate": c.s2mel.sr},
        "emo_num": list(c.emo_num),
        "emotions": list(EMOTIONS),
        "version": c.version,
    }


# ------------------------------------------------------------------------------------------ build


def _check_preset(preset: Preset) -> None:
    """Backend/precision/option combinations (gpu_stack.check_preset), then what this builder makes."""
    from fasttts_cli.gpu_stack import check_preset

    check_preset(preset)
    for name, spec in sorted(preset.components.items()):
        if spec.backend == "torch":
            raise UsageError(
                f"--preset {preset.name}: component {name} runs on the torch backend, which needs no engine",
                hint="pass the checkpoint directory itself as --engine with this preset",
            )
        if spec.backend == "tensorrt-llm":
            from fasttts_cli.build.trtllm_build import require_stack

            require_stack()


def _build_trtllm_gpt(
    m: IndexTTS2Modules,
    comp: ComponentSpec,
    preset: Preset,
    tmp: Path,
    say: Callable[[str], None],
) -> ComponentEntry:
    from fasttts_cli.build.trtllm_build import GptSizes, build_gpt

    g = m.gpt.cfg
    sizes = GptSizes(
        heads=g.heads,
        n_conds=g.num_latents + 2,
        start_mel=g.start_mel_token,
        stop_mel=g.stop_mel_token,
        start_text=g.start_text_token,
        stop_text=g.stop_text_token,
    )
    return build_gpt(m.paths.gpt, sizes, comp, preset.limits, tmp, say)


def measure_graph(spec: GraphSpec, path: Path, *, seed: int = 1) -> float | None:
    """Worst relative error of a converted (quantized / fp16) graph against the fp32 PyTorch module, on
    the verification shapes; None when ONNX Runtime's CPU provider cannot run the graph."""
    try:
        return verify_graph(spec, path, seed=seed, tolerance=float("inf"))
    except ExportError:
        raise
    except Exception:  # e.g. fp16 kernels the CPU provider lacks
        return None


def _convert(
    spec: GraphSpec, path: Path, comp: ComponentSpec, say: Callable[[str], None]
) -> tuple[Path, dict[str, Any]]:
    """Apply the preset's precision to an exported fp32 graph (quantize.apply_precision)."""
    from fasttts_cli.build.quantize import apply_precision

    dst = path.with_name(f"{spec.name}.{comp.precision}.onnx")
    say(f"converting {spec.name} to {comp.precision}")
    report = apply_precision(path, dst, comp)
    if report is None:
        return path, {}
    for old in (path, path.with_name(path.name + ".data")):
        old.unlink(missing_ok=True)
    # scalars only: per-node lists would bloat the manifest at full size
    summary = {k: (len(v) if isinstance(v, list | tuple | dict) else v) for k, v in report.items()}
    info: dict[str, Any] = {"precision": comp.precision, "conversion": summary}
    info["rel_error_vs_pytorch"] = measure_graph(spec, dst)
    return dst, info


# Which loaded module each graph exports (an IndexTTS2Modules attribute), so a full-size build can drop
# a module as soon as its last graph is written (the peak memory of a full-size build is ~12 GB).
_MODULE_OF = {
    "w2v_bert": "w2v_bert",
    "codec_quantize": "codec",
    "codec_vq2emb": "codec",
    "campplus": "campplus",
    "speaker_conditioner": "gpt",
    "emotion_conditioner": "gpt",
    "gpt_trunk": "gpt",
    "s2mel_content": "s2mel",
    "length_regulator": "s2mel",
    "dit_cfg_step": "s2mel",
    "bigvgan": "bigvgan",
}


def _release_unused(m: IndexTTS2Modules, pending: list[GraphSpec | None]) -> None:
    import gc

    needed = {_MODULE_OF.get(sp.name) for sp in pending if sp is not None}
    for attr in set(_MODULE_OF.values()) - needed:
        if getattr(m, attr) is not None:
            setattr(m, attr, None)
    gc.collect()


def default_out_dir(checkpoint_dir: Path, preset_name: str) -> Path:
    from fasttts_cli.engine_select import engines_root

    return engines_root() / f"{Path(checkpoint_dir).resolve().name}-{preset_name}"


@dataclass(frozen=True)
class ComponentBuilt:
    """One component of an engine build is written (for a caller's progress display)."""

    name: str  # the graph (or "gpt_trtllm") as the manifest names it
    index: int  # 1-based
    total: int
    seconds: float  # this component: export, conversion and any TensorRT plan


def build_engine(
    checkpoint: CheckpointPaths | Path | str,
    preset: Preset | str | Path,
    out_dir: Path | str | None = None,
    *,
    overwrite: bool = False,
    components: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    on_component: Callable[[ComponentBuilt], None] | None = None,
) -> Path:
    """Export every component of `checkpoint` into an engine folder; returns its path.

    `components` limits the export to some graph names (for tests); the manifest then lists only those.
    `progress` gets a message per step; `on_component` a ComponentBuilt as each component is written.
    """
    say = progress or (lambda _msg: None)
    built = on_component or (lambda _c: None)
    preset = preset if isinstance(preset, Preset) else load_preset(preset)
    _check_preset(preset)
    paths = checkpoint if isinstance(checkpoint, CheckpointPaths) else CheckpointPaths(Path(checkpoint))
    out = Path(out_dir) if out_dir is not None else default_out_dir(paths.root, preset.name)
    if out.exists() and not overwrite:
        raise UsageError(f"--out {out}: already exists", hint="choose another folder or pass --overwrite")
    say(f"loading checkpoint {paths.root}")
    m = load_checkpoint(paths)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        entries: dict[str, ComponentEntry] = {}
        build_info: dict[str, Any] = {}
        trt_info: dict[str, Any] = {}
        constants = model_constants(m)
        arrays = host_arrays(m)  # before the loop, which releases each module once exported
        specs: list[GraphSpec | None] = [
            sp for sp in engine_specs(m, preset) if components is None or sp.name in components
        ]
        gpt_comp = preset.components.get("gpt")
        trtllm = gpt_comp is not None and gpt_comp.backend == "tensorrt-llm"
        if trtllm:
            # the GPT trunk becomes a TensorRT-LLM engine instead of an ONNX graph
            specs = [sp for sp in specs if sp is not None and sp.name != "gpt_trunk"]
        total = len(specs) + int(trtllm)
        if trtllm:
            assert gpt_comp is not None
            t_comp = time.monotonic()
            entries["gpt_trtllm"] = _build_trtllm_gpt(m, gpt_comp, preset, tmp, say)
            built(ComponentBuilt("gpt_trtllm", 1, total, time.monotonic() - t_comp))
        with torch.no_grad():
            for i, spec in enumerate(specs):
                assert spec is not None
                t_comp = time.monotonic()
                say(f"exporting {spec.name}")
                path = export_graph(spec, tmp)
                comp = preset.components.get(spec.group) or ComponentSpec()
                if comp.precision != "fp32":
                    path, build_info[spec.name] = _convert(spec, path, comp, say)
                ins, outs = _io_shapes(path)
                entry = ComponentEntry(
                    file=path.name,
                    backend="onnxruntime-cpu" if comp.backend == "tensorrt" else comp.backend,
                    precision=comp.precision,
                    inputs=ins,
                    outputs=outs,
                    sha256=component_sha256(path),
                )
                if comp.backend == "tensorrt":
                    from fasttts_cli.build.tensorrt_build import build_component

                    say(f"building TensorRT plan for {spec.name}")
                    entry, info = build_component(tmp, spec.name, entry, comp, preset.limits, constants)
                    trt_info[spec.name] = info.to_json()
                entries[spec.name] = entry
                built(ComponentBuilt(spec.name, i + 1 + int(trtllm), total, time.monotonic() - t_comp))
                specs[i] = spec = None
                _release_unused(m, specs)
        if build_info:
            constants["build"] = build_info
        if trt_info:
            constants["tensorrt"] = trt_info
        files: dict[str, str] = {}
        for fname, arr in arrays.items():
            np.save(tmp / fname, arr, allow_pickle=False)
            files[Path(fname).stem] = fname
        shutil.copyfile(m.bpe_model, tmp / BPE_MODEL)
        files["bpe_model"] = BPE_MODEL
        say("hashing checkpoint")
        manifest = Manifest(
            model_id=MODEL_ID,
            model_version=m.config.version,
            checkpoint_digest=m.digest(),
            preset=preset.name,
            preset_build_keys=preset.build_keys(),
            components=entries,
            opset=OPSET,
            tool_version=f"fasttts {__version__}",
            files=files,
            config=constants,
            random_weights=m.random_weights,
        )
        write_manifest(tmp, manifest)
        for p in [tmp, *tmp.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)  # mkdtemp's 0700 is not meant for an engine
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out  # the caller reports where it went (the CLI said it twice when this did too)
