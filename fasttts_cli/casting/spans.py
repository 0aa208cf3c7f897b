"""Where a speaker speaks alone: that speaker's cue intervals minus every other speaker's cue intervals.
Pure interval arithmetic over cues; no audio here."""

from __future__ import annotations

from collections.abc import Iterable

from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.dubbing.speakers import speaker_key

Span = tuple[float, float]


def merge(spans: Iterable[Span]) -> list[Span]:
    """Sorted, non-overlapping union of `spans` (empty ones dropped)."""
    out: list[list[float]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def subtract(spans: Iterable[Span], holes: Iterable[Span]) -> list[Span]:
    """`spans` with every point inside `holes` removed."""
    hs = merge(holes)
    out: list[Span] = []
    for a, b in merge(spans):
        cur = a
        for ha, hb in hs:
            if hb <= cur or ha >= b:
                continue
            if ha > cur:
                out.append((cur, ha))
            cur = max(cur, hb)
            if cur >= b:
                break
        if cur < b:
            out.append((cur, b))
    return out


def solo_spans(cues: Iterable[Cue], speaker: str | None, *, min_len: float = 0.3) -> list[Span]:
    """The spans of `speaker`'s own timed cues where no other speaker's cue overlaps, at least `min_len`
    seconds each (shorter leftovers hold no usable timbre)."""
    timed = [c for c in cues if c.start is not None and c.end is not None]
    key = speaker_key(speaker)
    own = [(c.start, c.end) for c in timed if speaker_key(c.speaker) == key]
    others = [(c.start, c.end) for c in timed if speaker_key(c.speaker) != key]
    return [s for s in subtract(own, others) if s[1] - s[0] >= min_len]  # type: ignore[arg-type]


def cue_spans(cues: Iterable[Cue]) -> dict[int, Span]:
    """cue index -> (start, end) of every timed cue."""
    return {c.index: (c.start, c.end) for c in cues if c.start is not None and c.end is not None}  # type: ignore[misc]
