"""Emotion control of IndexTTS-2 in numpy: the 8-value emotion-vector mode and the alpha blends.

Category order (fixed by the model): happy, angry, sad, afraid, disgusted, melancholic, surprised, calm.
`feat1` (73, 192) holds CAMPPlus-space prototypes and `feat2` (73, 1280) the matching GPT-space emotion
vectors, both split into per-category chunks by config.yaml's `emo_num` ([3, 17, 2, 8, 4, 5, 10, 24]).

With an emotion vector w the original picks, per category, the prototype row whose feat1 entry is most
cosine-similar to the speaker's style, and uses
    emovec = sum_i w_i * feat2_i[proto_i] + (1 - sum_i w_i) * emovec_speaker.
Inside `infer()` w is only scaled by clamp(emo_alpha, 0, 1) (truncated to 4 decimals); the per-category
bias and the 0.8 cap of `normalize_emo_vec` are what the original's web UI applies to hand-set vectors,
offered here as `normalize_weights` for the CLI to apply to `--emotion-vector`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CATEGORIES = ("happy", "angry", "sad", "afraid", "disgusted", "melancholic", "surprised", "calm")
EMO_NUM = (3, 17, 2, 8, 4, 5, 10, 24)
_UI_BIAS = (0.9375, 0.875, 1.0, 1.0, 0.9375, 0.9375, 0.6875, 0.5625)
_UI_MAX_SUM = 0.8


@dataclass(frozen=True)
class EmotionMatrices:
    """feat1/feat2 and the per-category split; what the engine folder stores as .npy + manifest."""

    spk: np.ndarray  # (N, style_dim) float32, feat1
    emo: np.ndarray  # (N, model_dim) float32, feat2
    counts: tuple[int, ...]  # emo_num

    def __post_init__(self) -> None:
        if self.spk.shape[0] != self.emo.shape[0] or sum(self.counts) != self.spk.shape[0]:
            raise ValueError(
                f"feat1 {self.spk.shape} / feat2 {self.emo.shape} do not split by emo_num {list(self.counts)}"
            )
        if len(self.counts) != len(CATEGORIES):
            raise ValueError(f"emo_num has {len(self.counts)} entries, {len(CATEGORIES)} categories expected")

    def chunks(self, m: np.ndarray) -> list[np.ndarray]:
        return np.split(m, np.cumsum(self.counts)[:-1])


def nearest_prototypes(style: np.ndarray, mats: EmotionMatrices) -> np.ndarray:
    """(8,) int64: per category, argmax cosine(style, feat1 chunk row) (first index on ties, as torch)."""
    q = np.asarray(style, np.float64).reshape(-1)
    out = []
    for chunk in mats.chunks(np.asarray(mats.spk, np.float64)):
        # torch.cosine_similarity: x.y / max(||x|| ||y||, eps) with eps 1e-8
        denom = np.maximum(np.linalg.norm(chunk, axis=1) * np.linalg.norm(q), 1e-8)
        out.append(int(np.argmax(chunk @ q / denom)))
    return np.asarray(out, dtype=np.int64)


def random_prototypes(mats: EmotionMatrices, rng: np.random.Generator) -> np.ndarray:
    """`use_random=True`: one uniform row per category."""
    return np.asarray([rng.integers(0, n) for n in mats.counts], dtype=np.int64)


def emotion_matrix_vector(weights: Sequence[float], proto: np.ndarray, mats: EmotionMatrices) -> np.ndarray:
    """(1, model_dim) float32: sum_i w_i * feat2_chunk_i[proto_i]."""
    w = _weights(weights)
    rows = np.stack([c[i] for c, i in zip(mats.chunks(np.asarray(mats.emo, np.float64)), proto, strict=True)])
    return (w[:, None] * rows).sum(axis=0, keepdims=True).astype(np.float32)


def apply_emotion_vector(emovec: np.ndarray, weights: Sequence[float], mat_vec: np.ndarray) -> np.ndarray:
    """The emovec the GPT gets in vector mode: mat_vec + (1 - sum w) * emovec (shapes (B, D))."""
    w = _weights(weights)
    return (np.asarray(mat_vec, np.float64) + (1.0 - w.sum()) * np.asarray(emovec, np.float64)).astype(
        np.float32
    )


def emotion_vector_mode(
    style: np.ndarray, weights: Sequence[float], emovec_speaker: np.ndarray, mats: EmotionMatrices
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stage 3.3 in one call: (prototype indices (8,), matrix vector (1, D), final emovec (1, D))."""
    proto = nearest_prototypes(style, mats)
    mat_vec = emotion_matrix_vector(weights, proto, mats)
    return proto, mat_vec, apply_emotion_vector(emovec_speaker, weights, mat_vec)


def scale_weights(weights: Sequence[float], emo_alpha: float) -> list[float]:
    """infer(): w scaled by clamp(alpha, 0, 1) and truncated to 4 decimals (unchanged when the scale is 1)."""
    scale = max(0.0, min(1.0, float(emo_alpha)))
    if scale == 1.0:
        return [float(x) for x in weights]
    return [int(float(x) * scale * 10000) / 10000 for x in weights]


def normalize_weights(weights: Sequence[float], apply_bias: bool = True) -> list[float]:
    """The original web UI's normalize_emo_vec: per-category bias, then rescale so the sum is <= 0.8."""
    w = (
        [float(x) * b for x, b in zip(weights, _UI_BIAS, strict=True)]
        if apply_bias
        else [float(x) for x in weights]
    )
    total = sum(w)
    if total > _UI_MAX_SUM:
        w = [x * (_UI_MAX_SUM / total) for x in w]
    return w


def blend_emovec(base: np.ndarray, emo: np.ndarray, alpha: float) -> np.ndarray:
    """merge_emovec: base + alpha * (emo - base), for emotion reference audio with --emo-alpha."""
    b = np.asarray(base, np.float32)
    return (b + np.float32(alpha) * (np.asarray(emo, np.float32) - b)).astype(np.float32)


def _weights(weights: Sequence[float]) -> np.ndarray:
    # the original holds w in a float32 tensor
    w = np.asarray(weights, dtype=np.float32).astype(np.float64)
    if w.shape != (len(CATEGORIES),):
        raise ValueError(
            f"an emotion vector has {len(CATEGORIES)} values ({', '.join(CATEGORIES)}), got {w.shape}"
        )
    return w
