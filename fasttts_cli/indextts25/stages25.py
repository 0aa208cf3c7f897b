"""What IndexTTS-2.5 changes in v2's stage API, once for every backend (delta §0, §3-§5).

`Stages25` goes in front of a v2 engine class (the ONNX `IndexTTS2Engine`, the PyTorch `TorchEngine`):
the speaker is one row, `spk_emb_proj(style)` (CAM++), applied on the host; the prompt condition is the
length regulator on the continuous w2v-BERT features (no codec quantizer); the prefix is
[spk_row + emovec | 0 | 0 | text rows + the language row]; the natural length of n codes is
int(2n * 1.72) mel frames, and the length regulator always takes its target frames.

The host engine provides `embeddings`, `lang_embedding`, `spk_projection` ((D, style_dim) weight and
(D,) bias as float32 arrays), `code_upsample`, `code_to_frames`, `preset`, `times`, `length_regulator`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2 import features as feat

MAX_SEGMENT_TOKENS = 120  # infer_v2_5's max_text_tokens_per_segment default


def host_embeddings25(tables: Mapping[str, np.ndarray], tokens: dec.GPTTokens) -> dec.HostEmbeddings:
    """v2's host tables from 2.5's; the two zero slots after the speaker row are v2's speed rows set to
    zero, so HostEmbeddings.conds_latent makes 2.5's [spk + emovec | 0 | 0]."""
    keys = ("text_embedding", "text_pos", "mel_embedding", "mel_pos")
    t = {k: np.asarray(tables[k], np.float32) for k in keys}
    speed = np.zeros((2, t["mel_embedding"].shape[1]), np.float32)
    return dec.HostEmbeddings(**t, speed=speed, tokens=tokens)


class Stages25:
    """The 2.5 overrides of a v2 engine's stages (see the module docstring)."""

    latent_pass = False  # s2mel takes the codes alone (streaming reads this)
    preset: Any
    times: Any
    code_upsample: int
    code_to_frames: float
    embeddings: dec.HostEmbeddings
    lang_embedding: np.ndarray
    spk_projection: tuple[np.ndarray, np.ndarray]
    length_regulator: Any
    ref_mel: Any

    @property
    def max_text_tokens(self) -> int:
        """The segment budget infer_v2_5 uses (120), capped by the preset's limit."""
        return min(MAX_SEGMENT_TOKENS, int(self.preset.limits.max_text_tokens))

    def speaker_vector(self, style: np.ndarray) -> np.ndarray:
        """Stage 3.2 for 2.5: spk_emb_proj(style) -> (1, D), the one speaker row."""
        w, b = self.spk_projection
        return (np.asarray(style, np.float32).reshape(1, -1) @ w.T + b).astype(np.float32)

    # ------------------------------------------------------------------------------- voice

    def _prompt_features(
        self, audio: feat.SpeakerAudio, spk_cond_emb: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(spk_cond_emb, ref_mel, prompt_condition): 2.5 stretches the continuous features."""
        with self.times.time("speaker_features"):
            mel = self.ref_mel(audio.audio_22k)
            return spk_cond_emb, mel, self.length_regulator(spk_cond_emb, mel.shape[1])

    def _speaker_latents(self, spk_cond_emb: np.ndarray) -> np.ndarray | None:
        return None  # no speaker conditioner: the row is the style's (`_speaker_rows`)

    def _speaker_rows(self, latents: np.ndarray | None, style: np.ndarray) -> np.ndarray:
        return self.speaker_vector(style)

    # ------------------------------------------------------------------------------- GPT

    def prefix25(
        self, spk_row: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int], lang_index: int
    ) -> np.ndarray:
        """Stage 3.4: (3 + L + 2, D) = [spk_row + emovec | 0 | 0 | text rows + lang row]. The original
        left-pads with one zero, masked row per stripped start/stop id; masked rows are invisible to the
        trunk (it has no position embedding: positions are host-side, mel only), so they are left out
        here, which is exactly what the batch's own left padding does. `text_ids` with or without
        start/stop (they are stripped)."""
        emb = self.embeddings
        text = emb.text_embeddings(text_ids) + self.lang_embedding[int(lang_index)][None, :]
        return np.concatenate([emb.conds_latent(spk_row, emovec), text], axis=0)

    # ------------------------------------------------------------------------------- s2mel

    def target_lengths(self, code_lens: Sequence[int]) -> np.ndarray:
        """int(2n * 1.72) as the original computes it (Python double, truncated)."""
        return np.array([int(self.code_upsample * int(n) * self.code_to_frames) for n in code_lens], np.int64)

    @property
    def renders_to_length(self) -> bool:
        return True  # the length regulator always takes its target frames
