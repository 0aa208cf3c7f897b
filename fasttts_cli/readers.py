"""Subtitle and script readers: one user file in, a checked, time-ordered list of Cues out.

Formats (by extension, or `fmt`): SRT, WebVTT, ASS/SSA (parsed with pysubs2), plain TXT, and TSV/CSV/JSONL
scripts with the columns start, end, speaker, text.

Rules every reader shares (so `inspect`, `--only` and error messages agree whatever the format):
- `Cue.index` is the cue's 1-based position in time order, not a number written in the file (SRT numbers
  are often missing, restarted or out of sequence). For SRT/VTT/TSV/CSV/JSONL/TXT that is file order.
- Cues must be in time order (start times never decrease), except in ASS/SSA, whose event order is an
  authoring detail (tracks are often grouped by actor): ASS events are sorted by start time.
- `end > start` for every timed cue.
- Overlaps: two cues may overlap only when both have a speaker and the speakers differ (two voices talking
  at once go to the same dub track but are still separate lines). Any other overlap is an InputError naming
  both cues, since one voice cannot say two lines at once. An overlap of at most OVERLAP_TOLERANCE seconds is
  a rounding artefact of subtitle tools, not intent: the earlier cue's end is clipped to the later start.
- A cue whose text is empty after markup is removed is an InputError (ASS Comment events are skipped, as are
  ASS events that are pure vector drawings: those are signs, not speech).
- Speakers: WebVTT `<v Name>` spans (the first one when a cue has several), the ASS Name/Actor field, the
  speaker column of scripts, or (with `name_prefix=True`) a leading `Name: text` on cues that have no speaker
  yet. Names are compared case-insensitively (speakers.speaker_key).
"""

from __future__ import annotations

import csv
import html
import io
import itertools
import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pysubs2
from pysubs2.formats.subrip import SubripFormat
from pysubs2.formats.substation import EVENT_FIELDS, SECTION_HEADING
from pysubs2.formats.webvtt import WebVTTFormat
from pysubs2.time import TIMESTAMP, TIMESTAMP_SHORT

from .cues import Cue
from .errors import InputError, UsageError
from .speakers import speaker_key
from .textio import STDIN, read_text

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
SCRIPT_COLUMNS = ("start", "end", "speaker", "text")
_TIME_HINT = "times are seconds (12.5) or HH:MM:SS,mmm / HH:MM:SS.mmm / MM:SS.mmm"


@dataclass(frozen=True)
class _Raw:
    """A cue as read, before numbering; `line` is the 1-based line in the file (None if unknown)."""

    line: int | None
    start: float | None
    end: float | None
    text: str
    speaker: str | None


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
        if any(len(SubripFormat.TIMESTAMP.findall(ln)) == 2 for ln in head.split("\n")):
            return "srt"
    where = "standard input" if str(path) == STDIN else f"extension {ext!r}" if ext else "no extension"
    raise InputError(
        path,
        f"cannot tell the file format ({where})",
        hint=f"pass --format with one of {', '.join(FORMATS)}",
    )


def read_script(path: Path, *, fmt: str | None = None, name_prefix: bool = False) -> list[Cue]:
    """Read a subtitle/script file into Cues (see module doc for the rules). Raises InputError."""
    text = read_text(path)
    kind = detect_format(path, fmt, text)
    raws = _READERS[kind](text, path, kind)
    if not raws:
        raise InputError(path, f"no cues found (read as {kind.upper()})", hint="is this the right file?")
    if name_prefix:
        raws = [_apply_name_prefix(r) for r in raws]
    for r in raws:
        if not r.text:
            raise InputError(
                path,
                "cue has no text",
                line=r.line,
                hint="give it text or delete the cue (fasttts does not dub silent cues)",
            )
    if raws[0].start is not None:
        raws = _check_timing(raws, path, sort=kind in ("ass", "ssa"))
    return [
        Cue(
            index=i,
            start=r.start,
            end=r.end,
            text=r.text,
            speaker=r.speaker,
            source=f"{path}:{r.line}" if r.line is not None else f"{path}#{i}",
        )
        for i, r in enumerate(raws, 1)
    ]


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


# ------------------------------------------------------------------------------------------------- timing


def parse_time(value: object) -> float:
    """Seconds from `12.5`, `HH:MM:SS,mmm`, `HH:MM:SS.mmm`, `MM:SS.mmm` or a JSON number; else ValueError."""
    if isinstance(value, bool):
        raise ValueError("not a time")
    if isinstance(value, int | float):
        v = float(value)
    elif isinstance(value, str):
        s = value.strip()
        if re.fullmatch(r"\d+(?:\.\d*)?|\.\d+", s):
            v = float(s)
        else:
            m = re.fullmatch(r"(?:(\d+):)?(\d+):(\d{1,2}(?:[.,]\d+)?)", s)
            if not m:
                raise ValueError("not a time")
            hours, minutes, seconds = int(m[1] or 0), int(m[2]), float(m[3].replace(",", "."))
            if seconds >= 60 or (m[1] is not None and minutes >= 60):
                raise ValueError("minutes and seconds must be below 60")
            v = hours * 3600 + minutes * 60 + seconds
    else:
        raise ValueError("not a time")
    if not math.isfinite(v) or v < 0:
        raise ValueError("times must be finite and not negative")
    return round(v, 6)


def _fmt_time(t: float | None) -> str:
    if t is None:
        return "?"
    ms = round(t * 1000)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}.{ms:03d}"


def _where(r: _Raw) -> str:
    return f"line {r.line}" if r.line is not None else "a cue"


def _check_timing(raws: list[_Raw], path: Path, *, sort: bool) -> list[_Raw]:
    for r in raws:
        assert r.start is not None and r.end is not None
        if r.start < 0:
            raise InputError(path, f"cue starts at a negative time ({r.start:.3f} s)", line=r.line)
        if r.end <= r.start:
            what = "ends before it starts" if r.end < r.start else "has zero length"
            raise InputError(
                path,
                f"cue {what} ({_fmt_time(r.start)} --> {_fmt_time(r.end)})",
                line=r.line,
                hint="the end time must be after the start time",
            )
    if sort:
        raws = sorted(raws, key=lambda r: r.start)  # stable: ties keep file order
    for a, b in itertools.pairwise(raws):
        if b.start < a.start:  # type: ignore[operator]
            raise InputError(
                path,
                f"cue starts at {_fmt_time(b.start)}, before the cue at {_where(a)} "
                f"({_fmt_time(a.start)}): cues must be in time order",
                line=b.line,
                hint="sort the cues by start time",
            )
    return _check_overlaps(raws, path)


def _check_overlaps(raws: list[_Raw], path: Path) -> list[_Raw]:
    out = list(raws)
    last_by_speaker: dict[str | None, int] = {}  # speaker key -> index in `out` of its latest-ending cue
    last_any: int | None = None  # latest-ending cue of any speaker
    for i, b in enumerate(out):
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
            raise InputError(
                path,
                f"cue overlaps the cue at {_where(a)} ({_fmt_time(a.start)} --> {_fmt_time(a.end)} and "
                f"{_fmt_time(b.start)} --> {_fmt_time(b.end)}), {who}",
                line=b.line,
                hint="fix the times: overlapping cues are allowed only for different named speakers",
            )
        last_by_speaker[key] = _later(out, last_by_speaker.get(key), i)
        last_any = _later(out, last_any, i)
    return out


def _later(cues: list[_Raw], j: int | None, i: int) -> int:
    return i if j is None or cues[i].end >= cues[j].end else j  # type: ignore[operator]


# ------------------------------------------------------------------------------------------- text helpers

_ASS_BLOCK = re.compile(r"\{[^{}]*\}")
_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]*>|<\d[\d:.]*>")  # plus WebVTT karaoke timestamps <00:01.500>
_VTT_VOICE = re.compile(r"<v(?:\.[^\s>]*)*(?:[ \t]+([^>]*))?>")
_SENTINEL = "\ue000"  # private-use character, never in real subtitles
_DRAWING = re.compile(r"\\p(\d+)")
_NAME_PREFIX = re.compile(r"([^\W\d_](?:[^\W\d]|[ '’.\-]){0,29}?)\s*(?::\s+|：\s*)(.*)", re.S)


def _display_text(raw: str) -> str:
    """Subtitle markup to display text: ASS override blocks and HTML-ish tags removed, breaks -> spaces."""
    s = _ASS_BLOCK.sub("", raw)
    s = s.replace("\\N", " ").replace("\\n", " ").replace("\\h", " ")
    s = _HTML_TAG.sub("", s)
    return " ".join(s.split())


def _ass_visible(raw: str) -> tuple[str, bool]:
    """ASS event text without vector drawings (`{\\p1}m 0 0 l ...{\\p0}`), and whether it had any."""
    parts: list[str] = []
    drawing = had_drawing = False
    for piece in re.split(r"(\{[^{}]*\})", raw):
        if piece.startswith("{") and piece.endswith("}"):
            for level in _DRAWING.findall(piece):
                drawing = int(level) > 0
                had_drawing |= drawing
        elif not drawing:
            parts.append(piece)
    return "".join(parts), had_drawing


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
    if name[0].islower() or len(name.split()) > 3 or not any(ch.isalpha() for ch in rest):
        return None, text
    return name, rest


def _apply_name_prefix(r: _Raw) -> _Raw:
    if r.speaker is not None:
        return r
    name, rest = split_name_prefix(r.text)
    return r if name is None else replace(r, speaker=name, text=rest)


# ------------------------------------------------------------------------------------------ SRT and WebVTT


def _read_subrip(text: str, path: Path, kind: str) -> list[_Raw]:
    """SRT/VTT through pysubs2, with a pre-pass that pysubs2 lacks: line numbers for every cue, malformed
    timing lines reported instead of being glued into the previous cue's text, and (VTT) cue identifiers and
    NOTE/STYLE/REGION blocks blanked out so they do not end up in the spoken text.

    WebVTT voices: the first `<v Name>` span of a cue gives its speaker; a cue with spans of several voices
    keeps all its text under the first voice (split such cues in the file to give each voice its own line).
    """
    vtt = kind == "vtt"
    stamp_re = WebVTTFormat.TIMESTAMP if vtt else SubripFormat.TIMESTAMP
    lines = text.split("\n")
    if vtt and not lines[0].lstrip("\ufeff").startswith("WEBVTT"):
        raise InputError(path, "not a WebVTT file: the first line must be WEBVTT", line=1)
    cleaned = list(lines)
    stamp_lines: list[int] = []
    prev_blank, skipping = True, False
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            prev_blank, skipping = True, False
            continue
        if skipping:
            cleaned[i] = ""
            continue
        if vtt and prev_blank and "-->" not in s and re.match(r"(NOTE|STYLE|REGION)(\s|$)", s):
            cleaned[i], skipping, prev_blank = "", True, False
            continue
        n_stamps = len(stamp_re.findall(line))
        if n_stamps == 2:  # the same rule pysubs2 uses to find timing lines
            stamp_lines.append(i + 1)
            before = lines[i - 1].strip() if i > 0 else ""
            # The cue number (SRT) / identifier (VTT) sits alone right before the timing line.
            if before and (before.isdigit() or (vtt and (i < 2 or not lines[i - 2].strip()))):
                cleaned[i - 1] = ""
        elif "-->" in s:
            example = "00:00:01.000 --> 00:00:03.500" if vtt else "00:00:01,000 --> 00:00:03,500"
            raise InputError(
                path,
                f"malformed timing line {s!r}",
                line=i + 1,
                hint=f"expected two timestamps like {example}",
            )
        prev_blank = False
    # pysubs2 drops a cue's last line when it is a bare number (it takes it for the next cue's number);
    # we already removed those, so shield real text lines ending a cue with a sentinel, removed below.
    bounds = [*stamp_lines[1:], len(lines) + 1]
    for first, nxt in zip(stamp_lines, bounds, strict=True):
        body_lines = [j for j in range(first, nxt - 1) if cleaned[j].strip()]
        if body_lines:
            cleaned[body_lines[-1]] += _SENTINEL
    try:
        subs = pysubs2.SSAFile.from_string("\n".join(cleaned), format_=kind, keep_html_tags=True)
    except Exception as e:  # pysubs2 raises assorted errors on odd input; the user needs the file name
        raise InputError(path, f"cannot parse as {kind.upper()}: {e}") from None
    if len(subs.events) != len(stamp_lines):  # pragma: no cover - our pre-pass mirrors pysubs2's rule
        stamp_lines = [None] * len(subs.events)  # type: ignore[list-item]
    out = []
    for ev, line_no in zip(subs.events, stamp_lines, strict=True):
        raw = ev.text.replace(_SENTINEL, "")
        speaker = None
        if vtt:
            m = _VTT_VOICE.search(raw)
            if m and m[1] and m[1].strip():
                speaker = m[1].strip()
        body = _display_text(raw)
        if vtt:
            body = html.unescape(body)
        out.append(_Raw(line_no, ev.start / 1000, ev.end / 1000, " ".join(body.split()), speaker))
    return out


# ------------------------------------------------------------------------------------------------ ASS/SSA


def _read_ass(text: str, path: Path, kind: str) -> list[_Raw]:
    """ASS/SSA through pysubs2. Name/Actor -> speaker; Comment events skipped; override tags removed;
    `\\N`, `\\n`, `\\h` -> space; pure drawing events skipped. A pre-pass mirrors pysubs2's line rules to
    report bad event lines with their line number (pysubs2 itself gives none)."""
    detected = _substation_flavour(text)
    if detected is None:
        raise InputError(path, "not an ASS/SSA file: no [Script Info] or [Events] section found")
    n_fields = len(EVENT_FIELDS[detected])
    event_lines: list[int] = []
    skip_section = False
    for n, raw_line in enumerate(text.split("\n"), 1):
        s = raw_line.strip()
        if SECTION_HEADING.match(s):
            skip_section = any(w in s for w in ("Info", "Aegisub", "Fonts", "Graphics"))
            continue
        if skip_section or not (s.startswith("Dialogue:") or s.startswith("Comment:")):
            continue
        fields = s.split(":", 1)[1].strip().split(",", n_fields - 1)
        if len(fields) < n_fields:
            raise InputError(
                path,
                f"event line has {len(fields)} fields, expected {n_fields} "
                "(Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text)",
                line=n,
            )
        for what, value in (("start", fields[1]), ("end", fields[2])):
            v = value.strip().lstrip("-")
            if not (TIMESTAMP.match(v) or TIMESTAMP_SHORT.match(v)):
                raise InputError(
                    path, f"bad {what} time {value.strip()!r}", line=n, hint="expected H:MM:SS.cc"
                )
        event_lines.append(n)
    try:
        subs = pysubs2.SSAFile.from_string(text, format_=detected)
    except Exception as e:
        raise InputError(path, f"cannot parse as {detected.upper()}: {e}") from None
    lines: list[int | None] = list(event_lines)
    if len(lines) != len(subs.events):  # pragma: no cover - the pre-pass mirrors pysubs2's rules
        lines = [None] * len(subs.events)
    out = []
    for ev, line_no in zip(subs.events, lines, strict=True):
        if ev.is_comment:
            continue
        visible, had_drawing = _ass_visible(ev.text)
        body = _display_text(visible)
        if not body and had_drawing:
            continue
        speaker = ev.name.strip() or None
        out.append(_Raw(line_no, ev.start / 1000, ev.end / 1000, body, speaker))
    return out


def _substation_flavour(text: str) -> str | None:
    """ "ass" (v4.00+) or "ssa" (v4.00), which decides pysubs2's event field list; None if neither."""
    head = text[:20000]
    if "[V4+ Styles]" in head or re.search(r"ScriptType:\s*v4\.00\+", head, re.I):
        return "ass"
    if "[V4 Styles]" in head or re.search(r"ScriptType:\s*v4\.00\b", head, re.I):
        return "ssa"
    if "[Script Info]" in head or "[Events]" in head:
        return "ass"
    return None


# ---------------------------------------------------------------------------------------------------- TXT


def _read_txt(text: str, path: Path, kind: str) -> list[_Raw]:
    """One cue per non-empty line, untimed."""
    return [
        _Raw(n, None, None, " ".join(line.split()), None)
        for n, line in enumerate(text.split("\n"), 1)
        if line.strip()
    ]


# ------------------------------------------------------------------------------------- TSV / CSV / JSONL


def _table_rows(text: str, path: Path, kind: str) -> list[tuple[int, list[str]]]:
    """(line number, fields) per non-blank row. TSV has no quoting (quotes in dialogue stay literal)."""
    if kind == "tsv":
        return [(n, line.split("\t")) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
    rows = []
    reader = csv.reader(io.StringIO(text), strict=True)
    prev = 0
    try:
        for fields in reader:
            first = prev + 1  # a quoted field may span lines; report where the row starts
            prev = reader.line_num
            if any(f.strip() for f in fields):
                rows.append((first, fields))
    except csv.Error as e:
        raise InputError(path, f"malformed CSV: {e}", line=reader.line_num) from None
    return rows


def _read_table(text: str, path: Path, kind: str) -> list[_Raw]:
    rows = _table_rows(text, path, kind)
    if not rows:
        return []
    header_line, header = rows[0]
    cols = [h.strip().lower() for h in header]
    expected = "\t".join(SCRIPT_COLUMNS) if kind == "tsv" else ",".join(SCRIPT_COLUMNS)
    if "text" not in cols:
        looks_like_data = bool(header) and _is_time(header[0])
        raise InputError(
            path,
            "the first line must be a header row naming the columns"
            if looks_like_data
            else f"no 'text' column in the header (found: {', '.join(c for c in cols if c) or 'nothing'})",
            line=header_line,
            hint=f"start the file with the header line: {expected}  (speaker is optional)",
        )
    for c in set(cols):
        if c and cols.count(c) > 1:
            raise InputError(path, f"column {c!r} appears twice in the header", line=header_line)
    timed = "start" in cols or "end" in cols
    if timed and not ("start" in cols and "end" in cols):
        missing = "end" if "start" in cols else "start"
        raise InputError(path, f"the header has no '{missing}' column", line=header_line, hint=expected)
    pos = {c: cols.index(c) for c in SCRIPT_COLUMNS if c in cols}
    out = []
    for n, fields in rows[1:]:
        if len(fields) != len(cols):
            extra = " (a tab inside the text?)" if kind == "tsv" and len(fields) > len(cols) else ""
            raise InputError(
                path,
                f"row has {len(fields)} fields, the header has {len(cols)}{extra}",
                line=n,
                hint=expected,
            )
        get = {c: fields[i].strip() for c, i in pos.items()}
        start = _time_field(get["start"], "start", path, n) if timed else None
        end = _time_field(get["end"], "end", path, n) if timed else None
        out.append(_Raw(n, start, end, " ".join(get["text"].split()), get.get("speaker") or None))
    return out


def _read_jsonl(text: str, path: Path, kind: str) -> list[_Raw]:
    out: list[_Raw] = []
    timed: bool | None = None
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(path, f"not valid JSON: {e.msg} (column {e.colno})", line=n) from None
        if not isinstance(obj, dict):
            raise InputError(path, "each line must be a JSON object like " + _JSONL_EXAMPLE, line=n)
        if "text" not in obj:
            raise InputError(path, 'object has no "text" key', line=n, hint=_JSONL_EXAMPLE)
        if not isinstance(obj["text"], str):
            raise InputError(path, '"text" must be a string', line=n)
        has_times = "start" in obj or "end" in obj
        if timed is None:
            timed = has_times
        if has_times != timed or (timed and not ("start" in obj and "end" in obj)):
            raise InputError(
                path,
                'every line needs both "start" and "end"' if timed else "first line had no times",
                line=n,
                hint="give start and end on every line, or on none (untimed script)",
            )
        speaker = obj.get("speaker")
        if speaker is not None and not isinstance(speaker, str):
            raise InputError(path, '"speaker" must be a string or null', line=n)
        start = _time_field(obj["start"], "start", path, n) if timed else None
        end = _time_field(obj["end"], "end", path, n) if timed else None
        out.append(_Raw(n, start, end, " ".join(obj["text"].split()), (speaker or "").strip() or None))
    return out


_JSONL_EXAMPLE = '{"start": 1.0, "end": 3.5, "speaker": "ALICE", "text": "Hello."}'


def _is_time(value: str) -> bool:
    try:
        parse_time(value)
    except ValueError:
        return False
    return True


def _time_field(value: object, what: str, path: Path, line: int) -> float:
    try:
        return parse_time(value)
    except ValueError:
        hint = _TIME_HINT
        if isinstance(value, str) and re.fullmatch(r"\d+,\d+", value.strip()):
            hint += " (use a decimal point, not a comma, for plain seconds)"
        raise InputError(path, f"bad {what} time {value!r}", line=line, hint=hint) from None


_READERS = {
    "srt": _read_subrip,
    "vtt": _read_subrip,
    "ass": _read_ass,
    "ssa": _read_ass,
    "txt": _read_txt,
    "tsv": _read_table,
    "csv": _read_table,
    "jsonl": _read_jsonl,
}
