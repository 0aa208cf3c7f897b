"""The IndexTTS-2.5 engine folder's contract (build/export25.py writes it): component names, the IO this
runtime feeds and reads, the host files, and `check_manifest25`, which refuses a folder that breaks it.

The shared components keep v2's names and IO (indextts2.components); 2.5 adds `codec_decode` and drops
the codec quantizer, the speaker conditioner and s2mel_content (delta §13).
"""

from __future__ import annotations

from pathlib import Path

from fasttts_cli.errors import EngineMismatchError
from fasttts_cli.indextts2.components import (
    CAMPPLUS,
    DIT_CFG_STEP,
    EMO_MATRIX,
    EMOTION_CONDITIONER,
    GPT_TRUNK,
    LENGTH_REGULATOR,
    SPK_MATRIX,
    VOCODER,
    W2V_BERT,
    W2V_MEAN,
    W2V_VAR,
    components_problems,
    config_problems,
    gpt_component,
    io_matches,
    refuse_mismatch,
)
from fasttts_cli.spec.engine_folder import Manifest

MODEL_ID25 = "indextts2.5"
SUPPORTED_MODEL_VERSIONS25 = ("2.5",)
CODEC_DECODE = "codec_decode"
CODEC_DECODE_IO = (("codes", "code_lens"), ("s_infer",))
_FIXED25 = (W2V_BERT, CAMPPLUS, EMOTION_CONDITIONER, LENGTH_REGULATOR, DIT_CFG_STEP, VOCODER, CODEC_DECODE)


def components25(gpt: str = GPT_TRUNK) -> tuple[str, ...]:
    """Every component of a 2.5 engine, with the GPT in form `gpt` (the ONNX / TensorRT trunk or the
    TensorRT-LLM folder: indextts2.components.GPT_FORMS)."""
    return (*_FIXED25, gpt)


# host files (manifest `files` keys): table -> key
TABLES25 = {
    "text_embedding": "gpt_text_embedding",
    "text_pos": "gpt_text_pos_embedding",
    "mel_embedding": "gpt_mel_embedding",
    "mel_pos": "gpt_mel_pos_embedding",
    "lang_embedding": "gpt_lang_embedding",
}
SPK_PROJ_WEIGHT, SPK_PROJ_BIAS, TOKENIZER = "gpt_spk_emb_proj_weight", "gpt_spk_emb_proj_bias", "tokenizer"
FILES25 = (
    *TABLES25.values(),
    SPK_PROJ_WEIGHT,
    SPK_PROJ_BIAS,
    W2V_MEAN,
    W2V_VAR,
    SPK_MATRIX,
    EMO_MATRIX,
    TOKENIZER,
)

_CONFIG_KEYS25 = {
    "gpt": ("model_dim", "layers", "heads", "max_text_tokens", "start_mel_token", "stop_mel_token"),
    "s2mel": ("sr", "n_fft", "win_length", "hop_length", "n_mels", "style_dim", "code_to_frames"),
    "vocoder": ("hop", "sampling_rate"),
}


def io_matches25(name: str, layers: int, inputs: set[str], outputs: set[str] | None = None) -> bool:
    """A 2.5 component's inputs equal, and its outputs include, what this runtime uses."""
    if name == CODEC_DECODE:
        ins, outs = CODEC_DECODE_IO
        return inputs == set(ins) and (outputs is None or set(outs) <= outputs)
    return io_matches(name, layers, inputs, outputs)


def check_manifest25(manifest: Manifest, folder: Path) -> None:
    """Refuse a 2.5 engine this runtime cannot drive; the message names every mismatch."""
    problems: list[str] = []
    if str(manifest.model_version) not in SUPPORTED_MODEL_VERSIONS25:
        problems.append(f"model_version {manifest.model_version!r} (this runtime runs 2.5)")
    cfg = manifest.config or {}
    problems += config_problems(cfg, _CONFIG_KEYS25)
    if problems:
        raise EngineMismatchError(f"{folder / 'manifest.json'}: " + "; ".join(problems))
    layers = int(cfg["gpt"]["layers"])
    names = components25(gpt_component(manifest.components))
    problems += components_problems(names, manifest, layers, folder, io_matches25)
    problems += [f"file {k!r} is not listed" for k in FILES25 if k not in manifest.files]
    refuse_mismatch(folder, "IndexTTS-2.5", problems)
