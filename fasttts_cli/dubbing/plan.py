"""Cues -> Plan: spoken text per line, its voice and token count, and batches to synthesize.

Batching rule: lines are grouped by voice (an engine conditions a whole batch on one prepared voice), then
sorted by token count within a voice so that batch-mates have similar lengths and padding stays small. A
batch closes when it holds `batch_size` lines or when its padded size (lines x longest line's tokens) would
exceed `max_batch_tokens`; a single line longer than `max_batch_tokens` gets a batch of its own.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.dubbing.speakers import VoiceMap, check_voices
from fasttts_cli.errors import UsageError

T = TypeVar("T")

PLAN_VERSION = 1

_ASS_BLOCK = re.compile(r"\{[^{}]*\}")
_TAG = re.compile(r"</?[A-Za-z][^<>]*>|<\d[\d:.]*>")
_SOUND = re.compile(r"\[[^\[\]]*\]")  # SDH sound descriptions: [door slams], [MUSIC]
# Music markers of SDH subtitles: notes, the pilcrow, and a '#' standing alone ("# Happy birthday #"; not
# "#1" or "C#"). Text between two markers, or after/before an unpaired one on its line, is sung: not said.
_MARK = r"(?:[♪♫♩♬¶]|(?<!\S)#(?!\S))"
_MARKER = re.compile(_MARK)
_LYRICS = re.compile(rf"{_MARK}.*?{_MARK}")
_LINE_DASH = re.compile(r"^\s*[-‐‑–—]+\s*", re.M)
_SENTENCE_DASH = re.compile(r"([.!?…\"'”’])\s+[-‐‑–—]+\s+")


def clean_text(text: str) -> str:
    """The text to speak: markup and non-speech removed, whitespace collapsed, punctuation kept.

    Removes ASS blocks `{...}` and `\\N`/`\\n`/`\\h`, HTML-ish tags (`<i>`, `<v Bob>`, `<font ...>`), entities
    (`&amp;` -> `&`), SDH sound descriptions in square brackets, music (see _MARK: the markers and the lyrics
    they enclose), and dialogue dashes that open a line ("- Where to\\n- Home." -> "Where to Home."), also
    after a sentence end once lines were joined ("- Hi. - Hello."). Dashes inside a sentence ("I — well —
    no") are kept. Result is NFC-normalized, so equal text caches equal.
    """
    s = unicodedata.normalize("NFC", text)
    s = _ASS_BLOCK.sub("", s)
    s = s.replace("\\N", "\n").replace("\\n", "\n").replace("\\h", " ")
    s = _TAG.sub("", s)
    s = html.unescape(s)
    s = _SOUND.sub(" ", s)
    s = "\n".join(_without_lyrics(line) for line in s.split("\n"))
    opener = _LINE_DASH.match(s)
    s = _LINE_DASH.sub("", s)
    s = " ".join(s.split())
    if opener:  # "- Where to - Home." read from one line: the opening dash marks the others as turns too
        dash = opener[0].strip()[0]
        s = re.sub(rf"\s+{re.escape(dash)}+\s+", " ", s)
    s = _SENTENCE_DASH.sub(r"\1 ", s)
    return s.strip()


def _without_lyrics(line: str) -> str:
    line = _LYRICS.sub(" ", line)
    return "" if _MARKER.search(line) else line


@dataclass(frozen=True)
class Line:
    index: int
    text: str  # cleaned, what gets spoken
    speaker: str | None
    voice: Path
    start: float
    end: float
    n_tokens: int
    source: str


@dataclass(frozen=True)
class Batch:
    index: int  # 1-based, in synthesis order
    voice: Path
    line_indices: tuple[int, ...]  # Line.index values, shortest first


@dataclass(frozen=True)
class Plan:
    lines: tuple[Line, ...]  # every cue with something to say, in time order (including lines not in `only`)
    batches: tuple[Batch, ...]  # only the lines selected for synthesis
    # cue indices with nothing to say (no_speech): no text after cleanup ("♪♪", "[MUSIC]") or no length
    skipped: tuple[int, ...] = ()

    def line(self, index: int) -> Line:
        for ln in self.lines:
            if ln.index == index:
                return ln
        raise KeyError(index)

    @property
    def selected(self) -> tuple[int, ...]:
        """Line indices that some batch synthesizes, in time order."""
        chosen = {i for b in self.batches for i in b.line_indices}
        return tuple(ln.index for ln in self.lines if ln.index in chosen)

    def to_json(self) -> dict[str, Any]:
        tokens = {ln.index: ln.n_tokens for ln in self.lines}
        chosen = set(self.selected)
        return {
            "version": PLAN_VERSION,
            "lines": [
                {
                    "index": ln.index,
                    "text": ln.text,
                    "speaker": ln.speaker,
                    "voice": str(ln.voice),
                    "start": ln.start,
                    "end": ln.end,
                    "n_tokens": ln.n_tokens,
                    "source": ln.source,
                    "synthesize": ln.index in chosen,
                }
                for ln in self.lines
            ],
            "batches": [
                {
                    "index": b.index,
                    "voice": str(b.voice),
                    "lines": list(b.line_indices),
                    "padded_tokens": len(b.line_indices) * max(tokens[i] for i in b.line_indices),
                }
                for b in self.batches
            ],
            "skipped": list(self.skipped),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        if data.get("version") != PLAN_VERSION:
            raise ValueError(f"plan version {data.get('version')!r}, expected {PLAN_VERSION}")
        lines = tuple(
            Line(
                index=d["index"],
                text=d["text"],
                speaker=d["speaker"],
                voice=Path(d["voice"]),
                start=d["start"],
                end=d["end"],
                n_tokens=d["n_tokens"],
                source=d["source"],
            )
            for d in data["lines"]
        )
        batches = tuple(
            Batch(index=d["index"], voice=Path(d["voice"]), line_indices=tuple(d["lines"]))
            for d in data["batches"]
        )
        return cls(lines=lines, batches=batches, skipped=tuple(data.get("skipped", ())))


def make_plan(
    cues: list[Cue],
    voices: VoiceMap,
    count_tokens: Callable[[str], int],
    *,
    batch_size: int = 8,
    max_batch_tokens: int = 2000,
    only: set[int] | None = None,
) -> Plan:
    """Plan every cue (cues must be timed: lay out TXT input with readers.layout_untimed first).

    `only` restricts which lines are batched for synthesis; the plan still lists all lines so that the
    timeline and the report cover the whole file. Unknown indices in `only` are a UsageError.
    """
    if batch_size < 1:
        raise UsageError(f"--batch-size {batch_size}: must be at least 1")
    if max_batch_tokens < 1:
        raise UsageError(f"--max-batch-tokens {max_batch_tokens}: must be at least 1")
    if only is not None:
        known = {c.index for c in cues}
        unknown = sorted(set(only) - known)
        if unknown:
            span = f"1-{max(known)}" if known else "none"
            raise UsageError(
                f"--only: no cue numbered {', '.join(map(str, unknown))} (cues: {span})",
                hint="cue numbers are the ones `fasttts inspect` shows",
            )
    check_voices(cues, voices)  # one error listing every unmapped speaker, not just the first
    lines: list[Line] = []
    skipped: list[int] = []
    for c in cues:
        if c.start is None or c.end is None:
            raise ValueError(f"{c.source}: cue {c.index} has no timing; call layout_untimed() first")
        text = clean_text(c.text)
        if not text or c.end <= c.start:  # a zero-length cue leaves no time to say anything
            skipped.append(c.index)
            continue
        lines.append(
            Line(
                index=c.index,
                text=text,
                speaker=c.speaker,
                voice=voices.resolve(c.speaker),
                start=c.start,
                end=c.end,
                n_tokens=int(count_tokens(text)),
                source=c.source,
            )
        )
    lines.sort(key=lambda ln: (ln.start, ln.index))
    todo = [ln for ln in lines if only is None or ln.index in only]
    return Plan(
        lines=tuple(lines), batches=_batch(todo, batch_size, max_batch_tokens), skipped=tuple(skipped)
    )


def _batch(lines: list[Line], batch_size: int, max_batch_tokens: int) -> tuple[Batch, ...]:
    by_voice: dict[Path, list[Line]] = {}
    for ln in lines:  # voices in order of first appearance, so the first batch starts at the top of the file
        by_voice.setdefault(ln.voice, []).append(ln)
    batches: list[Batch] = []
    for voice, group in by_voice.items():
        group = sorted(group, key=lambda ln: (ln.n_tokens, ln.index))
        for chunk in pack(group, lambda ln: ln.n_tokens, batch_size, max_batch_tokens):
            batches.append(Batch(len(batches) + 1, voice, tuple(x.index for x in chunk)))
    return tuple(batches)


def pack(
    items: Sequence[T], n_tokens: Callable[[T], int], batch_size: int, max_batch_tokens: int
) -> list[list[T]]:
    """Cut items sorted by ascending length into batches: a batch closes at `batch_size` items, or when
    items x longest item would exceed `max_batch_tokens` (a line longer than the budget goes alone)."""
    out: list[list[T]] = []
    current: list[T] = []
    for it in items:
        # Sorted ascending, so the newcomer is the longest and sets the padded width.
        padded = n_tokens(it) * (len(current) + 1)
        if current and (len(current) >= batch_size or padded > max_batch_tokens):
            out.append(current)
            current = []
        current.append(it)
    if current:
        out.append(current)
    return out


def spec_parts(spec: str, flag: str, want: str) -> list[str]:
    """The comma-separated items of a line selection (--only, --retake, --take). "" or " , " selects no
    line at all, which must not fall through to "every line": a UsageError saying what to give."""
    parts = [p.strip() for p in spec.split(",")]
    if not any(parts):
        raise UsageError(f'{flag} "{spec}": empty selection; give {want}')
    return parts


def parse_only(spec: str, flag: str = "--only") -> set[int]:
    """`"3,7-9"` -> {3, 7, 8, 9}. Cue numbers are 1-based; a bad spec is a UsageError naming `flag`
    (--only, --retake)."""
    out: set[int] = set()
    for part in spec_parts(spec, flag, "cue numbers like 3,7-9"):
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise UsageError(f"{flag} {spec}: {part!r} is not a number or range", hint=f"e.g. {flag} 3,7-9")
        lo = int(m[1])
        hi = int(m[2]) if m[2] is not None else lo
        if lo < 1:
            raise UsageError(f"{flag} {spec}: cue numbers start at 1", hint=f"e.g. {flag} 3,7-9")
        if hi < lo:
            raise UsageError(f"{flag} {spec}: range {part!r} runs backwards", hint=f"write {hi}-{lo}")
        out.update(range(lo, hi + 1))
    return out


def forecast(
    plan: Plan,
    chars_per_second: float = 15.0,
    *,
    max_speedup: float = 1.25,
    min_gap: float = 0.08,
    media_end: float | None = None,
) -> list[dict[str, Any]]:
    """A rough per-line timing forecast for `fasttts inspect`, before any audio exists.

    Natural duration is guessed as len(text) / chars_per_second (about right for English; CJK speech packs
    fewer characters per second, pass a lower rate). `room` is the slot plus the silence up to the next line
    (or to `media_end` for the last line; unbounded when that is unknown), less `min_gap`, which the timing
    solver may borrow. Verdicts: "fits" (fits its slot), "borrows" (fits by using silence after the slot),
    "speedup" (needs at most `max_speedup`), "overflow" (needs more: it will be shifted, overlapped or
    truncated per --overflow). It ignores ripple from earlier overflows.
    """
    if chars_per_second <= 0:
        raise ValueError("chars_per_second must be > 0")
    lines = sorted(plan.lines, key=lambda ln: (ln.start, ln.index))
    out = []
    for i, ln in enumerate(lines):
        slot = max(ln.end - ln.start, 1e-6)
        natural = len(ln.text) / chars_per_second
        later = [n.start for n in lines[i + 1 :] if n.start > ln.start]
        limit = min(later) - min_gap if later else (media_end if media_end is not None else None)
        room = max(slot, natural) if limit is None else max(slot, limit - ln.start)
        speedup = natural / room
        verdict = (
            "fits"
            if natural <= slot
            else "borrows"
            if natural <= room
            else "speedup"
            if speedup <= max_speedup
            else "overflow"
        )
        out.append(
            {
                "index": ln.index,
                "speaker": ln.speaker,
                "start": ln.start,
                "end": ln.end,
                "slot": round(slot, 3),
                "natural_est": round(natural, 3),
                "room": round(room, 3),
                "speedup": round(max(speedup, 1.0), 3),
                "verdict": verdict,
            }
        )
    return out
