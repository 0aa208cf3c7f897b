"""`fasttts build` for an IndexTTS-2.5 checkpoint (delta §13): the v2 export machinery, 2.5's components.

Against a v2 engine folder (export.py):
- no `codec_quantize` / `codec_vq2emb` (2.5 never quantizes the prompt, and its codes go through the
  EnhancedCodec decoder instead), no `speaker_conditioner` (the speaker is CAM++'s style through
  `spk_emb_proj`, a Linear applied on the host), no `s2mel_content` (no latent pass, no gpt_layer: the
  content is the length regulator on the decoded codes, the `length_regulator` graph with its target
  frames input, the same graph that makes the prompt condition);
- `codec_decode`: codes (B, n) + code_lens (B,) -> S_infer (B, 2n, 1024) at 50 Hz;
- host tables: the GPT's text/mel tables, `lang_embedding` (one row per language) and `spk_emb_proj`;
  the tiktoken rank file instead of bpe.model; manifest model_id "indextts2.5";
- a GPT on TensorRT-LLM (w8a16 / w4a16) is v2's conversion with the whole prefix as prompt rows
  (3 conditioning rows + the text positions, `text_in_prompt`): the language row rides in every text row.
TensorRT components are planned as v2's are (export_components -> tensorrt_build; profiles know 2.5's
shapes from the manifest's `s2mel.code_upsample`).
The shared graphs (w2v-BERT, CAMPPlus, emotion conditioner, GPT trunk, length regulator, DiT step,
BigVGAN) are graphs.py's, exported from the 2.5 modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fasttts_cli.build.export import (
    ComponentBuilt,
    _build_trtllm_gpt,
    _check_preset,
    default_out_dir,
    export_components,
    write_folder,
)
from fasttts_cli.build.graphs import (
    GraphSpec,
    _lengths,
    common_specs,
    inplace_trunk_fits,
    inplace_trunk_spec,
    ort_contrib_fits,
    trunk_spec,
)
from fasttts_cli.build.host_files import model_constants, stat_arrays
from fasttts_cli.build.onnx_io import staged_folder
from fasttts_cli.errors import UsageError
from fasttts_cli.indextts2.gpt_trtllm import GPT_TRTLLM
from fasttts_cli.indextts25.components import (
    CODEC_DECODE,
    CODEC_DECODE_IO,
    MODEL_ID25,
    SPK_PROJ_BIAS,
    SPK_PROJ_WEIGHT,
    TABLES25,
    TOKENIZER,
)
from fasttts_cli.nets.checkpoint25 import IndexTTS25Modules, load_checkpoint25
from fasttts_cli.nets.codec_enhanced import UPSAMPLE
from fasttts_cli.nets.tiktoken_ranks import TOKENIZER_FILE
from fasttts_cli.spec.engine_folder import ComponentEntry
from fasttts_cli.spec.presets import Preset, load_preset


class _CodecDecode(nn.Module):
    """(codes (B, n) int64, code_lens (B,)) -> S_infer (B, 2n, hidden), zero past 2 code_lens[b]: a
    padded row equals the row alone (EnhancedCodec.decode's masks)."""

    def __init__(self, codec: nn.Module) -> None:
        super().__init__()
        self.codec = codec

    def forward(self, codes: torch.Tensor, code_lens: torch.Tensor) -> torch.Tensor:
        return self.codec.decode(codes, code_lens)


def codec_decode_spec(codec: nn.Module) -> GraphSpec:
    size = int(codec.vq.codebook.weight.shape[0])

    def dec_in(b: int, t: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
        return torch.randint(0, size, (b, t), generator=g), _lengths(b, t, g, low=2)

    return GraphSpec(
        CODEC_DECODE,
        "codec",
        _CodecDecode(codec),
        dec_in,
        list(CODEC_DECODE_IO[0]),
        list(CODEC_DECODE_IO[1]),
        {"codes": {0: "batch", 1: "time"}, "code_lens": {0: "batch"}, "s_infer": {0: "batch", 1: "frames"}},
    )


def engine_specs25(m: IndexTTS25Modules, preset: Preset) -> list[GraphSpec]:
    """The graphs of a 2.5 engine for `preset` (the in-place trunk and the DiT's contrib RoPE where they
    fit, as graphs.engine_specs decides for v2)."""
    from fasttts_cli.nets.dit import use_ort_attention

    use_ort_attention(m.s2mel, ort_contrib_fits(preset.components.get("dit")))
    common = common_specs(m)
    fits = inplace_trunk_fits(m.gpt, preset.components.get("gpt"))
    trunk = inplace_trunk_spec(m.gpt) if fits else trunk_spec(m.gpt)
    names = ("w2v_bert", "campplus", "emotion_conditioner")
    return [
        *(common[n] for n in names),
        trunk,
        codec_decode_spec(m.codec),
        *(common[n] for n in ("length_regulator", "dit_cfg_step", "bigvgan")),
    ]


def host_arrays25(m: IndexTTS25Modules) -> dict[str, np.ndarray]:
    """File name -> array of every table the 2.5 runtime applies on the host (indextts25.components'
    names: the GPT's tables, the language rows, spk_emb_proj)."""
    tables = m.gpt.host_tables()
    out = {f"{key}.npy": tables[k].numpy().copy() for k, key in TABLES25.items()}
    proj = m.gpt.spk_emb_proj
    out[f"{SPK_PROJ_WEIGHT}.npy"] = proj.weight.detach().float().numpy().copy()  # (D, style_dim)
    out[f"{SPK_PROJ_BIAS}.npy"] = proj.bias.detach().float().numpy().copy()
    return {**out, **stat_arrays(m)}


def model_constants25(m: IndexTTS25Modules) -> dict[str, Any]:
    """v2's constants with 2.5's: one speaker row, codes upsampled x2 before the 1.72 stretch, the
    tokenizer's rank count, the language rows."""
    c = model_constants(m)
    c["gpt"]["num_latents"] = 1
    c["gpt"]["lang_rows"] = int(m.gpt.cfg.lang_rows)
    c["gpt"]["style_dim"] = int(m.gpt.cfg.style_dim)
    c["s2mel"]["code_upsample"] = UPSAMPLE
    c["tokenizer"] = {"ranks": int(m.n_ranks)}
    return c


def build_engine25(
    checkpoint: Path | str,
    preset: Preset | str | Path,
    out_dir: Path | str | None = None,
    *,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
    on_component: Callable[[ComponentBuilt], None] | None = None,
) -> Path:
    """Export every component of a 2.5 checkpoint folder into an engine folder; returns its path."""
    say = progress or (lambda _msg: None)
    built = on_component or (lambda _c: None)
    preset = preset if isinstance(preset, Preset) else load_preset(preset)
    _check_preset(preset)  # torch components need no engine; a TensorRT-LLM GPT needs its stack
    root = Path(checkpoint)
    out = Path(out_dir) if out_dir is not None else default_out_dir(root, preset.name)
    if out.exists() and not overwrite:
        raise UsageError(f"--out {out}: already exists", hint="choose another folder or pass --overwrite")
    say(f"loading IndexTTS-2.5 checkpoint {root}")
    m = load_checkpoint25(root)
    with staged_folder(out) as tmp:
        constants = model_constants25(m)
        arrays = host_arrays25(m)
        build_info: dict[str, Any] = {}
        trt_info: dict[str, Any] = {}
        specs: list[GraphSpec | None] = list(engine_specs25(m, preset))
        entries: dict[str, ComponentEntry] = {}
        gpt_comp = preset.components.get("gpt")
        if gpt_comp is not None and gpt_comp.backend == "tensorrt-llm":
            # the GPT trunk becomes a TensorRT-LLM engine that takes the whole 2.5 prefix (the language
            # row is in every text row) through its prompt table: 3 conditioning rows + the text positions
            specs = [sp for sp in specs if sp is not None and sp.name != "gpt_trunk"]
            t0 = time.monotonic()
            rows = 3 + int(m.gpt.text_pos_embedding.emb.weight.shape[0])
            entries[GPT_TRTLLM] = _build_trtllm_gpt(
                m, gpt_comp, preset, tmp, say, n_conds=rows, text_in_prompt=True
            )
            built(ComponentBuilt(GPT_TRTLLM, 1, len(specs) + 1, time.monotonic() - t0))
        done = len(entries)
        entries |= export_components(specs, preset, tmp, say, built, constants, build_info, trt_info, m, done)
        if build_info:
            constants["build"] = build_info
        if trt_info:
            constants["tensorrt"] = trt_info
        say("hashing checkpoint")
        copies = {TOKENIZER: (m.tokenizer, TOKENIZER_FILE)}
        write_folder(tmp, MODEL_ID25, m, preset, entries, constants, arrays, copies)
    return out
