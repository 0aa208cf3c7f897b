"""On-disk cache of voice conditioning: computed once per reference voice (+ emotion spec) and engine.

Preparing a voice runs w2v-BERT twice, the codec, CAMPPlus and both conditioners (seconds on a CPU);
what synthesis needs afterwards is a few small arrays (`VoiceConditioning`). They are stored as one
`.npz` per key under `$FASTTTS_CACHE_DIR/voices` (default `~/.cache/fasttts/voices`).

The key covers everything the arrays depend on: the speaker audio's sha256, the emotion spec (its audio's
sha256, not its path; the vector; alpha), the engine identity (model, checkpoint digest, component files),
the preset limit that shapes the features (max reference seconds) and this module's format version.
Writes go to a temporary file in the same folder and are renamed into place, so a crash or a parallel
writer never leaves a half file under a valid name; an unreadable entry is treated as a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

CACHE_ENV = "FASTTTS_CACHE_DIR"
FORMAT = 1


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    base = Path(env).expanduser() if env else Path.home() / ".cache" / "fasttts"
    return base / "voices"


def voice_key(
    audio_sha256: str,
    engine_identity: str,
    *,
    emotion_audio_sha256: str | None = None,
    vector: tuple[float, ...] | None = None,
    alpha: float = 1.0,
    extra: Mapping[str, object] | None = None,
) -> str:
    """sha256 hex of everything the conditioning depends on."""
    payload = {
        "format": FORMAT,
        "audio": audio_sha256,
        "engine": engine_identity,
        "emotion_audio": emotion_audio_sha256,
        "vector": None if vector is None else [float(x) for x in vector],
        "alpha": float(alpha),
        "extra": dict(extra or {}),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


class VoiceCache:
    """npz files by key. `get` returns the arrays or None; `put` writes atomically."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else cache_root()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.npz"

    def get(self, key: str) -> dict[str, np.ndarray] | None:
        p = self.path(key)
        if not p.is_file():
            return None
        try:
            with np.load(p, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError, KeyError, EOFError):
            return None  # a damaged entry is a miss; the next put replaces it

    def put(self, key: str, arrays: Mapping[str, np.ndarray]) -> Path | None:
        """Store `arrays`; returns the path, or None when the cache folder is not writable (the voice
        is then simply recomputed next time: a read-only home must not fail synthesis)."""
        p = self.path(key)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:12]}.", suffix=".npz.tmp", dir=p.parent)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()})
            os.replace(tmp, p)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
            return None  # disk full or similar: the voice is recomputed next time
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return p
