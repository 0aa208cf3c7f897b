"""Subtitle and script readers: one user file in, a checked, time-ordered list of Cues out, with every event
of the file accounted for (README "Reading policy").

Formats (by extension, or `fmt`): SRT and WebVTT (readers_subrip), ASS/SSA (readers_ass), plain TXT and
TSV/CSV/JSONL scripts with the columns start, end, speaker, text (readers_table).

Policy every format shares (so `inspect`, `--only` and error messages agree whatever the format):
- Structural damage (a timing line that is not one, text outside any cue, a time out of range, a file with
  no cue at all, an end before its start) is an InputError (exit 2) naming `file:line`. Nothing is ever
  merged into spoken text.
- Untidy but readable events still read: a cue with no text or no length is a cue with nothing to say
  (make_plan lists it as no_speech); an event that is not dialogue (ASS comments, signs, karaoke) or that
  repeats another one exactly (same times, text and speaker: layered ASS duplicates) is a SkippedEvent with
  a reason. Cues + skipped = every event of the file.
- `Cue.index` is the cue's 1-based position in time order, not a number written in the file. Cues must be
  in time order (start times never decrease), except in ASS/SSA, whose events are sorted by start time.
- Overlaps, checked only between cues that have something to say: allowed when both have a speaker and the
  speakers differ; any other overlap is an InputError naming both cues. An overlap of at most
  OVERLAP_TOLERANCE seconds is a rounding artefact: the earlier cue's end is clipped to the later start.
- Speakers: WebVTT `<v Name>` spans (the first one when a cue has several), the ASS Name/Actor field, the
  speaker column of scripts, or (with `name_prefix=True`) a leading `Name: text` on cues that have no speaker
  yet. Names are compared case-insensitively (speakers.speaker_key).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.dubbing.plan import clean_text
from fasttts_cli.dubbing.readers_ass import ass_header, read_ass
from fasttts_cli.dubbing.readers_base import FormatRead, RawEvent, SkippedEvent, fmt_time, split_name_prefix
from fasttts_cli.dubbing.readers_subrip import read_srt, read_vtt
from fasttts_cli.dubbing.readers_table import SCRIPT_COLUMNS, parse_time, read_jsonl, read_table, read_txt
from fasttts_cli.dubbing.speakers import speaker_key
from fasttts_cli.dubbing.textio import STDIN, read_text
from fasttts_cli.errors import FastTTSError, InputError, UsageError

__all__ = [
    "FORMATS",
    "OVERLAP_TOLERANCE",
    "SCRIPT_COLUMNS",
    "ScriptRead",
    "SkippedEvent",
    "detect_format",
    "layout_untimed",
    "parse_styles",
    "parse_time",
    "read_script",
    "read_script_full",
    "split_name_prefix",
]

FORMATS = ("srt", "vtt", "ass", "ssa", "txt", "tsv", "csv", "jsonl")
_EXTENSIONS = {
    ".srt": "srt",
    ".vtt": "vtt",
    ".webvtt": "vtt",
    ".ass": "ass",
    ".ssa": "ssa",
    ".txt": "txt",
    ".text": "txt",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
OVERLAP_TOLERANCE = 0.05  # seconds; about one video frame
_READERS: dict[str, Callable[..., FormatRead]] = {
    "srt": read_srt,
    "vtt": read_vtt,
    "ass": read_ass,
    "ssa": read_ass,
    "txt": read_txt,
    "tsv": read_table,
    "csv": read_table,
    "jsonl": read_jsonl,
}


@dataclass(frozen=True)
class ScriptRead:
    """A file as read: its cues (spoken or no_speech), the events left out, and untidy things met."""

    cues: list[Cue]
    skipped: list[SkippedEvent] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    format: str = ""
    header: str | None = None  # ASS/SSA: the script before [Events], for subtitles out in the same format

    @property
    def n_events(self) -> int:
        return len(self.cues) + len(self.skipped)


# ---------------------------------------------------------------------------------------------- entry point


def detect_format(path: Path | str, fmt: str | None = None, text: str | None = None) -> str:
    """The reader to use: `fmt` if given, else by extension, else by sniffing `text`."""
    if fmt is not None:
        f = fmt.strip().lower().lstrip(".")
        f = {"webvtt": "vtt", "text": "txt", "ndjson": "jsonl"}.get(f, f)
        if f not in FORMATS:
            raise UsageError(f"--format {fmt}: unknown format; choose one of {', '.join(FORMATS)}")
        return f
    ext = Path(str(path)).suffix.lower()
    if ext in _EXTENSIONS:
        return _EXTENSIONS[ext]
    if text is not None:
        head = text.lstrip()[:10000]
        if head.startswith("WEBVTT"):
            return "vtt"
        if "[Script Info]" in head or "[Events]" in head:
            return "ass"
        if "-->" in head:
            return "srt"
    where = "standard input" if str(path) == STDIN else f"extension {ext!r}" if ext else "no extension"
    raise InputError(
        path,
        f"cannot tell the file format ({where})",
        hint=f"pass --format with one of {', '.join(FORMATS)}",
    )


def parse_styles(spec: str | None) -> frozenset[str] | None:
    """`--styles "Default, Italics"` -> {"default", "italics"}; None when not given; UsageError if empty."""
    if spec is None:
        return None
    names = frozenset(s.strip().lower() for s in spec.split(",") if s.strip())
    if not names:
        raise UsageError(f"--styles {spec!r}: no style names", hint="e.g. --styles Default,Italics")
    return names


def read_script(
    path: Path,
    *,
    fmt: str | None = None,
    name_prefix: bool = False,
    styles: frozenset[str] | None = None,
    encoding: str | None = None,
) -> list[Cue]:
    """The cues of a subtitle/script file (see read_script_full). Raises InputError only."""
    return read_script_full(path, fmt=fmt, name_prefix=name_prefix, styles=styles, encoding=encoding).cues


def read_script_full(
    path: Path,
    *,
    fmt: str | None = None,
    name_prefix: bool = False,
    styles: frozenset[str] | None = None,
    encoding: str | None = None,
    allow_overlap: bool = False,
) -> ScriptRead:
    """Read a subtitle/script file per the module rules. Raises InputError (or UsageError for a bad
    `fmt`/`encoding`), never anything else: an unexpected failure is reported as the file's."""
    text = read_text(path, encoding=encoding)
    kind = detect_format(path, fmt, text)
    try:
        return _read(text, path, kind, name_prefix, styles, allow_overlap)
    except FastTTSError:
        raise
    except Exception as e:  # a reader bug must still name the file, not end in a traceback
        raise InputError(path, f"cannot read as {kind.upper()}: {type(e).__name__}: {e}") from e


def _read(
    text: str,
    path: Path,
    kind: str,
    name_prefix: bool,
    styles: frozenset[str] | None,
    allow_overlap: bool = False,
) -> ScriptRead:
    got = _READERS[kind](text, path, kind, styles)
    warnings = list(got.warnings)
    if styles is not None and kind not in ("ass", "ssa"):
        warnings.append(f"--styles applies to ASS/SSA files only; ignored for {path}")
    skipped = [(ln, why) for ln, why in got.skipped]
    events = got.events
    if not events:
        first = min((ln for ln, _ in skipped if ln is not None), default=1)
        counts = ", ".join(f"{n} {c}" for c, n in Counter(why.split(" ", 1)[0] for _, why in skipped).items())
        raise InputError(
            path,
            f"nothing to dub: every event is left out ({counts})" if skipped else f"no cues found ({kind})",
            line=first,
            hint="pass --styles with the dialogue styles' names" if kind in ("ass", "ssa") else None,
        )
    if name_prefix:
        events = [_apply_name_prefix(r) for r in events]
    if events[0].start is not None:
        events, dupes = _check_timing(
            events, path, sort=kind in ("ass", "ssa"), allow_overlap=allow_overlap, warnings=warnings
        )
        skipped += dupes
    cues = [
        Cue(
            index=i,
            start=r.start,
            end=r.end,
            text=r.text,
            speaker=r.speaker,
            source=f"{path}:{r.line}" if r.line is not None else f"{path}#{i}",
            style=r.style,
        )
        for i, r in enumerate(events, 1)
    ]
    skipped.sort(key=lambda s: s[0] or 0)
    out = [SkippedEvent(f"{path}:{ln}" if ln is not None else str(path), why) for ln, why in skipped]
    if out:
        counts = Counter(s.category for s in out)
        summary = ", ".join(f"{n} {c}" for c, n in counts.most_common())
        warnings.append(f"{path}: {len(out)} events left out ({summary}); see 'skipped' in --json/the report")
    header = ass_header(text) if kind in ("ass", "ssa") else None
    return ScriptRead(cues, out, warnings, kind, header)


def layout_untimed(
    cues: list[Cue],
    *,
    chars_per_second: float = 14.0,
    gap: float = 0.4,
    start: float = 0.0,
    min_duration: float = 1.0,
) -> list[Cue]:
    """Give untimed cues (TXT) consecutive slots: len(text)/chars_per_second long (at least
    min_duration), `gap` seconds apart, from `start`. Cues that already have times are kept and push later
    slots after them."""
    if chars_per_second <= 0 or gap < 0 or min_duration <= 0:
        raise ValueError("chars_per_second and min_duration must be > 0 and gap >= 0")
    t = start
    out: list[Cue] = []
    for c in cues:
        if c.start is not None and c.end is not None:
            out.append(c)
            t = max(t, c.end + gap)
            continue
        dur = max(min_duration, len(c.text) / chars_per_second)
        out.append(replace(c, start=round(t, 3), end=round(t + dur, 3)))
        t += dur + gap
    return out


def _apply_name_prefix(r: RawEvent) -> RawEvent:
    if r.speaker is not None:
        return r
    name, rest = split_name_prefix(r.text)
    return r if name is None else replace(r, speaker=name, text=rest)


# ------------------------------------------------------------------------------------------------- timing


def _where(r: RawEvent) -> str:
    return f"line {r.line}" if r.line is not None else "a cue"


def _speaks(r: RawEvent) -> bool:
    """Whether the cue has something to say and time to say it (the cues overlap rules apply to)."""
    return r.end > r.start and bool(clean_text(r.text))  # type: ignore[operator]


def _check_timing(
    raws: list[RawEvent],
    path: Path,
    *,
    sort: bool,
    allow_overlap: bool = False,
    warnings: list[str] | None = None,
) -> tuple[list[RawEvent], list[tuple[int | None, str]]]:
    for r in raws:
        assert r.start is not None and r.end is not None
        if r.start < 0:
            raise InputError(path, f"cue starts at a negative time ({r.start:.3f} s)", line=r.line)
        if r.end < r.start:
            raise InputError(
                path,
                f"cue ends before it starts ({fmt_time(r.start)} --> {fmt_time(r.end)})",
                line=r.line,
                hint="the end time must be after the start time",
            )
    if sort:
        raws = sorted(raws, key=lambda r: r.start)  # type: ignore[arg-type,return-value]  # stable
    for a, b in itertools.pairwise(raws):
        if b.start < a.start:  # type: ignore[operator]
            raise InputError(
                path,
                f"cue starts at {fmt_time(b.start)}, before the cue at {_where(a)} "
                f"({fmt_time(a.start)}): cues must be in time order",
                line=b.line,
                hint="sort the cues by start time",
            )
    raws, dupes = _drop_duplicates(raws)
    return _check_overlaps(raws, path, allow_overlap, warnings if warnings is not None else []), dupes


def _drop_duplicates(raws: list[RawEvent]) -> tuple[list[RawEvent], list[tuple[int | None, str]]]:
    """The same text, times and speaker twice (an ASS sign or line drawn on several layers) is one line."""
    first: dict[tuple, RawEvent] = {}
    kept, dupes = [], []
    for r in raws:
        key = (r.start, r.end, " ".join(r.text.split()), speaker_key(r.speaker))
        if r.text and key in first:
            dupes.append((r.line, f"duplicate of {_where(first[key])} (same text and times)"))
            continue
        first.setdefault(key, r)
        kept.append(r)
    return kept, dupes


def _check_overlaps(
    raws: list[RawEvent], path: Path, allow_overlap: bool, warnings: list[str]
) -> list[RawEvent]:
    """The overlap rule (module doc); with `allow_overlap` (--allow-overlap) a clash is a warning and both
    lines are spoken, over each other."""
    out = list(raws)
    last_by_speaker: dict[str | None, int] = {}  # speaker key -> index in `out` of its latest-ending cue
    last_any: int | None = None  # latest-ending cue of any speaker
    for i, b in enumerate(out):
        if not _speaks(b):
            continue
        key = speaker_key(b.speaker)
        # An unnamed cue may clash with anyone; a named one with the same name or with unnamed cues.
        rivals = [last_any] if key is None else [last_by_speaker.get(key), last_by_speaker.get(None)]
        for j in rivals:
            if j is None:
                continue
            a = out[j]
            overlap = a.end - b.start  # type: ignore[operator]
            if overlap <= 0:
                continue
            if overlap <= OVERLAP_TOLERANCE and b.start > a.start:  # type: ignore[operator]
                out[j] = a = replace(a, end=b.start)
                continue
            who = (
                f"both spoken by {a.speaker}"
                if key is not None and speaker_key(a.speaker) == key
                else "and at least one has no speaker"
            )
            hint = (
                "fix the times, name the speakers (overlapping cues are allowed only for different named "
                "speakers), or pass --allow-overlap to speak both lines over each other"
            )
            if a.style is not None and b.style is not None and a.style.lower() != b.style.lower():
                # Two tracks at once (bilingual subs, a song over dialogue): the user picks what to dub.
                hint = (
                    f"the two are in styles {a.style!r} and {b.style!r}: pass --styles to dub only the "
                    "dialogue styles, or " + hint
                )
            what = (
                f"cue overlaps the cue at {_where(a)} ({fmt_time(a.start)} --> {fmt_time(a.end)} and "
                f"{fmt_time(b.start)} --> {fmt_time(b.end)}), {who}"
            )
            if allow_overlap:
                warnings.append(f"{path}:{b.line}: {what}; both are spoken (--allow-overlap)")
                continue
            raise InputError(path, what, line=b.line, hint=hint)
        last_by_speaker[key] = _later(out, last_by_speaker.get(key), i)
        last_any = _later(out, last_any, i)
    return out


def _later(cues: list[RawEvent], j: int | None, i: int) -> int:
    return i if j is None or cues[i].end >= cues[j].end else j  # type: ignore[operator]
