"""What every format reader shares: the raw event it produces, the record of an event left out, the
timestamp grammar of SRT/WebVTT, and markup-to-display-text helpers.

Kept apart from readers.py so each format's module (readers_subrip, readers_ass, readers_table) depends on
this small seam only, and readers.py holds the policy that is the same for every format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RawEvent:
    """An event as read, before numbering. `line` is the 1-based line in the file (None if unknown);
    `text` is display text with one `\\n` per line break; times are seconds (None: untimed input)."""

    line: int | None
    start: float | None
    end: float | None
    text: str
    speaker: str | None
    style: str | None = None  # ASS/SSA style, for messages that suggest --styles


@dataclass(frozen=True)
class SkippedEvent:
    """An event of the file that is not a cue (not dubbed, not numbered), and why.

    `source` is "file:line" like Cue.source; `reason` is one short phrase ("comment", "sign (style
    'Signs')", ...) that starts with its category word, which the report counts by."""

    source: str
    reason: str

    @property
    def category(self) -> str:
        return self.reason.split(" ", 1)[0]

    def to_json(self) -> dict[str, str]:
        return {"source": self.source, "reason": self.reason}


@dataclass
class FormatRead:
    """One format reader's result: the events to number as cues, those left out, and untidy things met."""

    events: list[RawEvent] = field(default_factory=list)
    skipped: list[tuple[int | None, str]] = field(default_factory=list)  # (line, reason)
    warnings: list[str] = field(default_factory=list)


# -------------------------------------------------------------------------------------------- timestamps

# One timestamp as SRT and WebVTT write it, read forgivingly: hours optional, one or two digits for minutes
# and seconds, `,` `.` or `:` before 1-3 fraction digits (a fraction is decimal: ",5" is half a second).
# Range (minutes, seconds < 60) is checked after matching, so "00:00:61,000" is an error, not text.
TS = r"(?:(\d+):)?(\d{1,2}):(\d{1,2})(?:[.,:](\d{1,3}))?"
# Anything a human might have meant as a timestamp (00:00:03;000, 00.00.03), but not "1,000,000": used only
# to recognise a damaged timing line.
TIMEISH = re.compile(r"\d{1,2}\s*[:;.]\s*\d{2}\s*[:;.,]\s*\d{2}")


def stamp_seconds(m: re.Match[str], first: int = 1) -> float:
    """Seconds of a TS match whose groups start at `first`; ValueError when minutes or seconds >= 60."""
    hours, minutes, seconds, frac = m.group(first, first + 1, first + 2, first + 3)
    h, mi, s = int(hours or 0), int(minutes), int(seconds)
    if mi >= 60 or s >= 60:
        lo = m.start(first) if hours else m.start(first + 1)
        stamp = m.string[lo : m.end(first + 3) if frac else m.end(first + 2)]
        raise ValueError(f"{stamp!r} is out of range (minutes and seconds must be below 60)")
    return round(h * 3600 + mi * 60 + s + (int(frac) / 10 ** len(frac) if frac else 0.0), 3)


def fmt_time(t: float | None) -> str:
    if t is None:
        return "?"
    ms = round(t * 1000)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}.{ms:03d}"


def quote(s: str, limit: int = 80) -> str:
    """The offending text for a message: repr, cut to `limit` characters."""
    s = s.strip()
    return repr(s if len(s) <= limit else s[: limit - 1] + "…")


# ------------------------------------------------------------------------------------------- text helpers

_ASS_BLOCK = re.compile(r"\{[^{}]*\}")
_RUBY_TEXT = re.compile(r"<rt\b[^<>]*>.*?</rt\s*>", re.S | re.I)  # furigana readings: said once, not twice
_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]*>|<\d[\d:.]*>")  # plus WebVTT karaoke timestamps <00:01.500>


def display_text(raw: str) -> str:
    """Subtitle markup to display text: ASS override blocks and HTML-ish tags removed, `\\N`/`\\n` -> line
    break, `\\h` -> space; spaces collapsed within each line and empty lines dropped."""
    s = _ASS_BLOCK.sub("", raw)
    s = s.replace("\\N", "\n").replace("\\n", "\n").replace("\\h", " ")
    s = _RUBY_TEXT.sub("", s)
    s = _HTML_TAG.sub("", s)
    return join_lines(s.split("\n"))


def join_lines(lines: list[str]) -> str:
    out = (" ".join(ln.split()) for ln in lines)
    return "\n".join(ln for ln in out if ln)


_NAME_PREFIX = re.compile(r"([^\W\d_](?:[^\W\d]|[ '’.\-]){0,29}?)\s*(?::\s+|：\s*)(.*)", re.S)


def split_name_prefix(text: str) -> tuple[str | None, str]:
    """`"ALICE: Hi."` -> ("ALICE", "Hi."); text unchanged with None when the prefix does not look like a name.

    A name: up to 30 characters, at most 3 words, letters (plus spaces, apostrophes, dots, hyphens), no
    digits, not starting lowercase; followed by ':' and a space (or a full-width '：'), and then text with a
    letter in it.
    So "Note: 5:30", "http://x", "at 10:30 we" and "see: below" (lowercase) stay text.
    """
    m = _NAME_PREFIX.fullmatch(text.strip())
    if not m:
        return None, text
    name, rest = m[1].strip(), m[2].strip()
    if "\n" in name or name[0].islower() or len(name.split()) > 3 or not any(ch.isalpha() for ch in rest):
        return None, text
    return name, rest
