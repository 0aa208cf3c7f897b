"""The voice stages (`indextts2.stages.VoiceStages`) over an engine folder's sessions.

Mixed into `IndexTTS2Engine` beside `voice.VoiceFlow`, which chains them; the host provides
`session(name)` (opened through the backend registry) and `times`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fasttts_cli.backends.onnxruntime.session import Session
from fasttts_cli.indextts2 import features as feat
from fasttts_cli.indextts2.components import (
    CAMPPLUS,
    CODEC_QUANTIZE,
    EMOTION_CONDITIONER,
    LENGTH_REGULATOR,
    SPEAKER_CONDITIONER,
    W2V_BERT,
)
from fasttts_cli.indextts2.stages import StageTimes
from fasttts_cli.indextts2.voice import cond_lengths


class SessionVoiceStages:
    """w2v-BERT, codec, CAMPPlus, length regulator and the two conditioners, one session each."""

    times: StageTimes  # the host's
    session: Callable[[str], Session]  # the host's: a component's session, opened on first use

    def w2v_bert(self, audio_16k: np.ndarray) -> np.ndarray:
        """Stages 1.2-1.3: (T, 1024) normalised hidden_states[17] of one 16 kHz waveform."""
        with self.times.time("w2v_bert"):
            x, mask = feat.w2v_bert_features(audio_16k)
            out = self.session(W2V_BERT).run(["spk_cond_emb"], {"input_features": x, "attention_mask": mask})
        return out["spk_cond_emb"][0, : int(mask[0].sum())]

    def codec_quantize(self, spk_cond_emb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stage 1.4: (codes (T,), S_ref (T, 1024))."""
        x = np.asarray(spk_cond_emb, np.float32)[None]
        out = self.session(CODEC_QUANTIZE).run(
            ["indices", "quantized"], {"features": x, "mask": np.ones(x.shape[:2], np.int64)}
        )
        return out["indices"][0], out["quantized"][0]

    def style(self, audio_16k: np.ndarray) -> np.ndarray:
        """Stage 1.6: CAMPPlus style (style_dim,) from the mean-normalised Kaldi fbank."""
        with self.times.time("speaker_features"):
            _, fbank = feat.campplus_fbank(audio_16k)
            return self.session(CAMPPLUS).run(["style"], {"fbank": fbank[None]})["style"][0]

    def length_regulator(self, x: np.ndarray, y_len: int) -> np.ndarray:
        """Stage 1.7 (prompt condition): (T, 1024) -> (y_len, C), nearest upsampling + conv stack."""
        x = np.asarray(x, np.float32)[None]
        out = self.session(LENGTH_REGULATOR).run(
            ["y"],
            {"x": x, "x_lens": np.array([x.shape[1]], np.int64), "y_lens": np.array([y_len], np.int64)},
        )
        return out["y"][0]

    def speaker_conditioning(self, spk_cond_emb: np.ndarray) -> np.ndarray:
        """Stage 3.2: (T, 1024) -> speaker latents (num_latents, D)."""
        return self._conditioner(SPEAKER_CONDITIONER, "latents", spk_cond_emb)

    def emovec_of(self, cond_emb: np.ndarray) -> np.ndarray:
        """get_emovec: (T, 1024) -> (D,)."""
        return self._conditioner(EMOTION_CONDITIONER, "emovec", cond_emb)

    def _conditioner(self, name: str, output: str, features: np.ndarray) -> np.ndarray:
        x = np.asarray(features, np.float32)
        with self.times.time("conditioners"):
            out = self.session(name).run([output], {"features": x[None], "lengths": cond_lengths(*x.shape)})
        return out[output][0]
