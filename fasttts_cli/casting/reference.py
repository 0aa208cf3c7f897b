"""One speaker's timbre reference from the source audio: each solo span trimmed to its speech, scored for
cleanliness, and the best concatenated to 3-12 s with short cross-fades.

The cleanliness score of a span is its speech-to-background energy ratio in dB: the mean energy of its
speech frames over the background level (the quietest fifth of the frames around it, never below the
programme's own floor). A span with clipped samples scores nothing: clipping is distortion the clone would
copy. Frames are 20 ms; "speech" is a frame above a threshold set per programme between its floor and its
loud frames, so a music bed under the dialogue is background, not speech.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fasttts_cli.audio.load import db_to_gain
from fasttts_cli.casting.spans import Span

FRAME = 0.02  # seconds per analysis frame
PAD = 0.06  # seconds kept either side of the first/last speech frame
MIN_PIECE = 0.4  # seconds: a trimmed span shorter than this holds too little of one voice
MIN_SECONDS = 3.0  # the reference bounds of the issue
TARGET_SECONDS = 10.0
MAX_SECONDS = 12.0
CROSSFADE = 0.03
CLIP_LEVEL = 0.999
CLIP_FRACTION = 1e-4  # more than 1 in 10,000 samples at full scale: clipped


@dataclass(frozen=True)
class Levels:
    """The programme's frame levels in dB: its floor and the speech threshold derived from it."""

    floor_db: float
    threshold_db: float


@dataclass(frozen=True)
class Piece:
    start: float
    end: float
    score: float  # speech-to-background dB; -inf for clipped

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Reference:
    audio: np.ndarray  # float32 mono at the source rate
    sample_rate: int
    spans: list[Span]  # the pieces used, in source seconds, in time order
    seconds: float  # total of the spans
    score: float  # duration-weighted mean score of the pieces

    @property
    def duration(self) -> float:
        return len(self.audio) / self.sample_rate


def frame_db(x: np.ndarray, sr: int) -> np.ndarray:
    """Energy per 20 ms frame, in dB (full-scale sine = -3 dB)."""
    n = max(1, round(FRAME * sr))
    m = len(x) // n
    if m == 0:
        return np.full(1, -120.0)
    e = np.mean(np.square(x[: m * n].reshape(m, n).astype(np.float64)), axis=1)
    return 10.0 * np.log10(e + 1e-12)


def programme_levels(x: np.ndarray, sr: int) -> Levels:
    """Floor = 10th percentile frame level; threshold 40% of the way from it to the loud (95th) frames,
    and at least 6 dB over it."""
    db = frame_db(x, sr)
    floor, loud = float(np.percentile(db, 10)), float(np.percentile(db, 95))
    return Levels(floor, floor + max(6.0, 0.4 * (loud - floor)))


def _frames(t0: float, t1: float, n_frames: int) -> tuple[int, int]:
    return max(0, int(t0 / FRAME)), min(n_frames, int(np.ceil(t1 / FRAME)))


def score_span(x: np.ndarray, sr: int, span: Span, levels: Levels, db: np.ndarray) -> Piece | None:
    """The span trimmed to its speech and scored; None when it holds less than MIN_PIECE of speech."""
    f0, f1 = _frames(span[0], span[1], len(db))
    if f1 <= f0:
        return None
    local = db[f0:f1]
    speech = np.nonzero(local > levels.threshold_db)[0]
    if len(speech) == 0:
        return None
    start = max(span[0], (f0 + speech[0]) * FRAME - PAD)
    end = min(span[1], (f0 + speech[-1] + 1) * FRAME + PAD)
    if end - start < MIN_PIECE:
        return None
    seg = x[int(start * sr) : int(end * sr)]
    clipped = float(np.mean(np.abs(seg) >= CLIP_LEVEL)) > CLIP_FRACTION
    if clipped:
        return Piece(start, end, float("-inf"))
    # The background around the span: its quietest fifth of frames, 1 s either side included.
    g0, g1 = _frames(span[0] - 1.0, span[1] + 1.0, len(db))
    background = max(levels.floor_db, float(np.percentile(db[g0:g1], 20)))
    speech_energy = float(np.mean(np.power(10.0, local[speech] / 10.0)))
    return Piece(start, end, 10.0 * np.log10(speech_energy + 1e-12) - background)


def rank_pieces(x: np.ndarray, sr: int, spans: Sequence[Span], levels: Levels) -> list[Piece]:
    """Usable pieces of `spans`, best score first (clipped ones dropped)."""
    db = frame_db(x, sr)
    pieces = [p for s in spans if (p := score_span(x, sr, s, levels, db)) is not None]
    return sorted((p for p in pieces if np.isfinite(p.score)), key=lambda p: (-p.score, p.start))


def choose(pieces: Sequence[Piece]) -> list[Piece]:
    """The best pieces until TARGET_SECONDS, the last one cut so the whole stays within MAX_SECONDS;
    in time order."""
    chosen: list[Piece] = []
    total = 0.0
    for p in pieces:
        if total >= TARGET_SECONDS:
            break
        room = MAX_SECONDS - total - CROSSFADE * len(chosen)
        if room < MIN_PIECE:
            break
        if p.seconds > room:
            p = Piece(p.start, p.start + room, p.score)
        chosen.append(p)
        total += p.seconds
    return sorted(chosen, key=lambda p: p.start)


def crossfade_concat(segments: Sequence[np.ndarray], sr: int) -> np.ndarray:
    """Segments joined with equal-power cross-fades of CROSSFADE seconds (shorter for short segments)."""
    out = np.zeros(0, dtype=np.float32)
    for seg in segments:
        seg = seg.astype(np.float32)
        n = min(int(CROSSFADE * sr), len(out) // 2, len(seg) // 2)
        if n == 0:
            out = np.concatenate([out, seg])
            continue
        t = np.linspace(0.0, np.pi / 2, n, dtype=np.float32)
        mixed = out[-n:] * np.cos(t) + seg[:n] * np.sin(t)
        out = np.concatenate([out[:-n], mixed, seg[n:]])
    return out


def build_reference(
    x: np.ndarray, sr: int, spans: Sequence[Span], levels: Levels
) -> tuple[Reference | None, float]:
    """The reference from `spans` of mono `x`, or None when the clean speech found is under MIN_SECONDS;
    with the seconds of clean speech found either way."""
    pieces = rank_pieces(x, sr, spans, levels)
    found = sum(p.seconds for p in pieces)
    chosen = choose(pieces)
    if not chosen:
        return None, found
    audio = crossfade_concat([x[int(p.start * sr) : int(p.end * sr)] for p in chosen], sr)
    if len(audio) / sr < MIN_SECONDS:
        return None, found
    peak = float(np.max(np.abs(audio)))
    if peak > 0:
        audio = audio * np.float32(db_to_gain(-3.0) / peak)  # -3 dBFS peak: level is not identity
    seconds = float(sum(p.seconds for p in chosen))
    score = float(sum(p.score * p.seconds for p in chosen) / seconds)
    # Milliseconds rounded inwards: a recorded span never reaches past the cue it came from.
    spans_used = [(math.ceil(p.start * 1000) / 1000, math.floor(p.end * 1000) / 1000) for p in chosen]
    return Reference(
        audio.astype(np.float32), sr, spans_used, round(sum(b - a for a, b in spans_used), 3), round(score, 2)
    ), found
