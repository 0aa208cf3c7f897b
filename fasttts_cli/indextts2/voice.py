"""A voice's conditioning, once for every backend: stages 1.1-1.7 and 3.1-3.3 chained over `VoiceStages`.

`VoiceFlow` is mixed into each engine (`IndexTTS2Engine` over ONNX Runtime / TensorRT sessions,
`TorchEngine` over PyTorch modules); the engine supplies the networks (`indextts2.stages.VoiceStages`:
w2v-BERT, codec, CAMPPlus, length regulator, conditioners) and this module does the rest: loading the
references, the log-mel prompt, the emotion blends and the emotion-vector mode, and running the speaker
and emotion chains side by side where the engine says they may.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fasttts_cli.indextts2 import emotion as emo
from fasttts_cli.indextts2 import features as feat
from fasttts_cli.indextts2.stages import VoiceStages


@dataclass
class SpeakerFeatures:
    """Stages 1.1-1.7 of one speaker reference."""

    spk_cond_emb: np.ndarray  # (T, 1024) normalised w2v-BERT layer-17 features
    s_ref: np.ndarray  # (T, 1024) codec-quantized features
    ref_mel: np.ndarray  # (n_mels, Tm) CFM prompt
    style: np.ndarray  # (style_dim,) CAMPPlus
    prompt_condition: np.ndarray  # (Tm, C) length regulator of S_ref to Tm frames


@dataclass
class VoiceConditioning:
    """Everything synthesis needs from a reference voice (+ emotion); what the voice cache stores."""

    spk_latents: np.ndarray  # (num_latents, D) speaker perceiver output, before the emovec is added
    emovec: np.ndarray  # (D,) the emotion vector the GPT gets
    style: np.ndarray  # (style_dim,)
    ref_mel: np.ndarray  # (n_mels, Tm)
    prompt_condition: np.ndarray  # (Tm, C)

    FIELDS = ("spk_latents", "emovec", "style", "ref_mel", "prompt_condition")

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(getattr(self, k), dtype=np.float32) for k in self.FIELDS}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> VoiceConditioning:
        missing = [k for k in cls.FIELDS if k not in arrays]
        if missing:
            raise KeyError(f"voice conditioning lacks {', '.join(missing)}")
        return cls(**{k: np.asarray(arrays[k], dtype=np.float32) for k in cls.FIELDS})


def cond_lengths(t: int, width: int) -> np.ndarray:
    """The conditioners' `lengths` input: the original passes the feature width (1024) as the length,
    so nothing is masked for T <= 1024."""
    return np.array([min(t, width)], np.int64)


class VoiceFlow:
    """The voice-conditioning flow over the host engine's `VoiceStages` members (see the module doc)."""

    _voice_side: ThreadPoolExecutor | None = None

    def speaker_audio(self, path: Path | str) -> feat.SpeakerAudio:
        """Stage 1.1: 22.05 kHz (soxr HQ, cut to the preset's max_ref_seconds) and 16 kHz (sinc)."""
        return feat.load_speaker_audio(path, self._stages().preset.limits.max_ref_seconds)

    def emotion_audio(self, path: Path | str) -> np.ndarray:
        """Stage 1.8: the emotion path loads straight to 16 kHz (not via 22.05 kHz)."""
        return feat.load_emotion_audio(path, self._stages().preset.limits.max_ref_seconds)

    def ref_mel(self, audio_22k: np.ndarray) -> np.ndarray:
        """Stage 1.5: (n_mels, floor(N / hop)) log-mel, the CFM prompt."""
        return feat.log_mel(audio_22k, self._stages().mel_params)

    def features(self, audio: feat.SpeakerAudio) -> SpeakerFeatures:
        """Stages 1.2-1.7 for a speaker reference."""
        stages = self._stages()
        spk = stages.w2v_bert(audio.audio_16k)
        s_ref, mel, prompt = self._prompt_features(audio, spk)
        return SpeakerFeatures(spk, s_ref, mel, stages.style(audio.audio_16k), prompt)

    def _prompt_features(
        self, audio: feat.SpeakerAudio, spk_cond_emb: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(S_ref, ref_mel, prompt_condition): the CFM prompt side of a speaker reference."""
        stages = self._stages()
        with stages.times.time("speaker_features"):
            _, s_ref = stages.codec_quantize(spk_cond_emb)
            mel = self.ref_mel(audio.audio_22k)
            return s_ref, mel, stages.length_regulator(s_ref, mel.shape[1])

    def emotion_vector(
        self, emo_cond_emb: np.ndarray, spk_cond_emb: np.ndarray, alpha: float = 1.0
    ) -> np.ndarray:
        """Stage 3.1: merge_emovec = base + alpha (emo - base), base from the speaker features."""
        return self._merge_emovec(self._stages().emovec_of(emo_cond_emb), spk_cond_emb, alpha)

    def _merge_emovec(self, emo_vec: np.ndarray, spk_cond_emb: np.ndarray, alpha: float) -> np.ndarray:
        if alpha == 1.0:
            # base + (emo - base) is emo up to one rounding step: skip the speaker-side emotion
            # conditioner (about 10% of a voice's preparation) in the default case.
            return emo_vec
        return self.blend_emovec(emo_vec, self._stages().emovec_of(spk_cond_emb), alpha)

    @staticmethod
    def blend_emovec(emo_vec: np.ndarray, base: np.ndarray, alpha: float) -> np.ndarray:
        return emo_vec if alpha == 1.0 else emo.blend_emovec(base[None], emo_vec[None], alpha)[0]

    def speaker_emovec(self, speaker: feat.SpeakerAudio) -> np.ndarray:
        """The emotion conditioner's vector of the speaker reference itself: where an alpha blend starts."""
        stages = self._stages()
        return stages.emovec_of(stages.w2v_bert(speaker.audio_16k))

    def clip_emovec(self, emotion_16k: np.ndarray) -> np.ndarray:
        """The emotion chain alone (stage 3.1 before the blend), for a clip over a speaker whose other
        conditioning is already known: only the emovec depends on the emotion reference."""
        stages = self._stages()
        return stages.emovec_of(stages.w2v_bert(emotion_16k))

    def emotion_vector_mode(
        self, style: np.ndarray, weights: Sequence[float], emovec: np.ndarray, alpha: float = 1.0
    ) -> np.ndarray:
        """Stage 3.3: the 8-value emotion vector (scaled by clamp(alpha, 0, 1)) mixed into emovec (D,)."""
        w = emo.scale_weights(weights, alpha)
        mats = self._stages().emotion_matrices
        _, _, out = emo.emotion_vector_mode(style, w, np.asarray(emovec)[None], mats)
        return out[0]

    def voice_conditioning(
        self,
        speaker: feat.SpeakerAudio,
        emotion_16k: np.ndarray,
        *,
        alpha: float = 1.0,
        vector: Sequence[float] | None = None,
    ) -> VoiceConditioning:
        """All of a voice's conditioning. `emotion_16k`: the emotion reference on the emotion path (the
        speaker file itself by default). With `vector`, the original drops the emotion reference (the
        speaker audio with alpha 1 stands in) and scales the vector by alpha instead."""
        stages = self._stages()
        blend = 1.0 if vector is not None else alpha
        side = self._side_chain(emotion_16k, speaker.audio_16k) if stages.voice_chains_side_by_side else None
        spk = stages.w2v_bert(speaker.audio_16k)
        latents = self._speaker_latents(spk)
        _, mel, prompt = self._prompt_features(speaker, spk)
        emo_vec, style = side.result() if side else self._side_work(emotion_16k, speaker.audio_16k)
        emovec = self._merge_emovec(emo_vec, spk, blend)
        if vector is not None:
            emovec = self.emotion_vector_mode(style, vector, emovec, alpha)
        return VoiceConditioning(self._speaker_rows(latents, style), emovec, style, mel, prompt)

    def _speaker_latents(self, spk_cond_emb: np.ndarray) -> np.ndarray | None:
        """The speaker conditioner's latents (stage 3.2), on the main thread while the side chain runs;
        None where the model's speaker rows come from the style instead (`_speaker_rows`)."""
        return self._stages().speaker_conditioning(spk_cond_emb)

    def _speaker_rows(self, latents: np.ndarray | None, style: np.ndarray) -> np.ndarray:
        """What the GPT's speaker rows are made of: the conditioner's latents here."""
        assert latents is not None
        return latents

    def _side_chain(
        self, emotion_16k: np.ndarray, speaker_16k: np.ndarray
    ) -> Future[tuple[np.ndarray, np.ndarray]]:
        """The emotion chain, then CAMPPlus, on the side thread while the main thread does the rest of
        the speaker chain. CAMPPlus needs only the audio; it goes to the side because the speaker's own
        tail (conditioner, codec, length regulator) is the longer one: 0.57 s against 0.42 s after the
        w2v-BERT passes, full size, on 1 thread each."""
        if self._voice_side is None:
            self._voice_side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fasttts-voice")
        return self._voice_side.submit(self._side_work, emotion_16k, speaker_16k)

    def _side_work(self, emotion_16k: np.ndarray, speaker_16k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(emotion conditioner's emovec, CAMPPlus style)."""
        stages = self._stages()
        return stages.emovec_of(stages.w2v_bert(emotion_16k)), stages.style(speaker_16k)

    def _close_voice_side(self) -> None:
        if self._voice_side is not None:
            self._voice_side.shutdown(wait=True)
            self._voice_side = None

    def _stages(self) -> VoiceStages:
        return self  # type: ignore[return-value]  # the host engine implements VoiceStages
