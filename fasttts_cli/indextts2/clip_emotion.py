"""A voice with an emotion clip of its own, prepared from the speaker's own conditioning plus the clip's
emotion vector: of everything a voice holds (`VoiceConditioning`) only `emovec` depends on the emotion
reference, so a speaker is conditioned once and each clip adds one emotion-chain pass (w2v-BERT and the
emotion conditioner) and one (D,) vector in the voice cache, instead of a whole voice each (two w2v-BERT
passes, the codec, CAMPPlus, both conditioners; about 2 MB of arrays for a 10 s reference). That is what
`--emotion-from-line` (one clip per line) needs; the result equals `voice_conditioning(speaker, clip)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.indextts2.voice import VoiceConditioning
from fasttts_cli.indextts2.voice_cache import VoiceCache, voice_key


def _vector(cache: VoiceCache, key: str) -> np.ndarray | None:
    hit = cache.get(key)
    return None if hit is None or "emovec" not in hit else np.asarray(hit["emovec"], np.float32)


def with_clip_emotion(
    engine: Any,
    cache: VoiceCache,
    own: VoiceConditioning,
    speaker: tuple[Path, str],
    clip: tuple[Path, str, float],
    extra: Mapping[str, object],
) -> tuple[VoiceConditioning, bool]:
    """`own` (the speaker's conditioning with its own emotion) with the emotion of `clip` at its alpha;
    speaker as (path, sha256), clip as (path, sha256, alpha). Also whether the clip's vector came from
    the cache."""
    (path, sha), (clip_path, clip_sha, alpha) = speaker, clip
    ident = engine.identity()
    key = voice_key(sha, ident, emotion_audio_sha256=clip_sha, alpha=alpha, extra={**extra, "part": "emovec"})
    emovec = _vector(cache, key)
    if emovec is not None:
        return replace(own, emovec=emovec), True
    base = None
    if alpha != 1.0:
        base_key = voice_key(sha, ident, extra={**extra, "part": "speaker_emovec"})
        base = _vector(cache, base_key)
        if base is None:
            with engine.times.time("voice"):
                base = engine.speaker_emovec(engine.speaker_audio(path))
            cache.put(base_key, {"emovec": base})
    with engine.times.time("voice"):
        emovec = engine.blend_emovec(engine.clip_emovec(engine.emotion_audio(clip_path)), base, alpha)
    cache.put(key, {"emovec": emovec})
    return replace(own, emovec=np.asarray(emovec, np.float32)), False
