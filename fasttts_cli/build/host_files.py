"""What an engine folder carries besides its graphs: the host-side lookup tables (`.npy`) and the model
constants of the manifest's `config`."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.nets.checkpoint import IndexTTS2Modules
from fasttts_cli.nets.config import EMOTIONS

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
    return {**gpt_host_tables(m.gpt), **stat_arrays(m)}


def stat_arrays(m: Any) -> dict[str, np.ndarray]:
    """The w2v-BERT stats and the emotion matrices (feat1, feat2) of a v2 or 2.5 module set."""
    return {
        W2V_MEAN: m.w2v_mean.astype(np.float32),
        W2V_VAR: m.w2v_var.astype(np.float32),
        SPK_MATRIX: m.spk_matrix.astype(np.float32),
        EMO_MATRIX: m.emo_matrix.astype(np.float32),
    }


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
