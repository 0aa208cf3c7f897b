"""The Cue: one subtitle or script line as read from the user's file, before any planning."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cue:
    index: int  # 1-based cue number as the user counts them (what --only 3,7-9 refers to)
    start: float | None  # seconds; None for untimed input (TXT) until laid out
    end: float | None
    text: str  # display text: markup stripped, one "\n" per line break (clean_text needs them: dashes)
    speaker: str | None
    source: str  # "path:line" for messages
    style: str | None = None  # ASS/SSA style: the re-timed subtitles keep it

    @property
    def timed(self) -> bool:
        return self.start is not None and self.end is not None

    @property
    def duration(self) -> float | None:
        return None if self.start is None or self.end is None else self.end - self.start
