"""Each line's own delivery as its emotion reference: the source audio of its cue, trimmed to its speech,
written once into the work folder under a name made from its content (so a re-run finds the same file,
and a changed source makes a new one, which the line's cache key then follows).

A cue with under MIN_SPEECH seconds of speech (the programme's speech threshold, reference.py) has no
clip: its line takes its emotion from the speaker's reference instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from fasttts_cli.casting.build import write_wav
from fasttts_cli.casting.reference import FRAME, Levels, frame_db, score_span
from fasttts_cli.casting.spans import Span

MIN_SPEECH = 0.5  # seconds of speech frames a cue needs to carry a delivery of its own
MIN_CLIP = 1.0  # seconds: what an engine accepts as a reference (audio/load.py); shorter clips are padded


def cue_clip(x: np.ndarray, sr: int, span: Span, levels: Levels, db: np.ndarray) -> np.ndarray | None:
    """The speech of `span` in mono `x` (peak at -3 dBFS, silence-padded to MIN_CLIP), or None when it
    holds under MIN_SPEECH seconds of speech."""
    f0, f1 = max(0, int(span[0] / FRAME)), min(len(db), int(np.ceil(span[1] / FRAME)))
    if f1 <= f0 or np.count_nonzero(db[f0:f1] > levels.threshold_db) * FRAME < MIN_SPEECH:
        return None
    piece = score_span(x, sr, span, levels, db)
    if piece is None:
        return None
    seg = np.asarray(x[int(piece.start * sr) : int(piece.end * sr)], dtype=np.float32)
    peak = float(np.max(np.abs(seg))) if seg.size else 0.0
    if peak <= 0.0:
        return None
    seg = seg * np.float32(10 ** (-3.0 / 20) / peak)
    short = int(np.ceil(MIN_CLIP * sr)) - len(seg)
    if short > 0:
        # Silence either side, not more of the source: the neighbours may be another speaker.
        seg = np.pad(seg, (short // 2, short - short // 2))
    return seg.astype(np.float32)


def write_cue_clips(
    x: np.ndarray, sr: int, spans: Mapping[int, Span], levels: Levels, folder: Path
) -> dict[int, Path | None]:
    """line -> its clip under `folder` (`ab/<sha256>.wav`, the stem naming its content: callers key on
    it), or None (too little speech). A clip already there is not rewritten."""
    db = frame_db(x, sr)
    out: dict[int, Path | None] = {}
    for i, span in spans.items():
        clip = cue_clip(x, sr, span, levels, db)
        if clip is None:
            out[i] = None
            continue
        pcm = np.round(np.clip(clip, -1.0, 1.0) * 32767).astype("<i2")  # what the WAV holds
        sha = hashlib.sha256(pcm.tobytes() + str(sr).encode()).hexdigest()
        path = folder / sha[:2] / f"{sha}.wav"
        if not path.is_file():
            write_wav(path, clip, sr)
        out[i] = path
    return out
