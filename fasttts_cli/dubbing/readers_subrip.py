"""SRT and WebVTT readers: line by line, so that every cue keeps its line number and no damaged timing line
is ever taken for text.

pysubs2 is not used here on purpose: it takes any line with two timestamps for a timing line (so a WebVTT
text line with two inline timestamps becomes a cue), glues a line it cannot read into the previous cue's
text, and gives no line numbers. The rules below follow the `srt` library for SRT (cue text may hold blank
lines: a paragraph belongs to the cue above until a cue number + timing line starts the next one) and the
W3C WebVTT parser for WebVTT (a timing line is one that contains `-->`; a blank line ends a cue).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from fasttts_cli.dubbing.readers_base import (
    TIMEISH,
    TS,
    FormatRead,
    RawEvent,
    display_text,
    join_lines,
    quote,
    stamp_seconds,
)
from fasttts_cli.errors import InputError

_SRT_TIMING = re.compile(rf"\s*{TS}\s*-[-\s]*>\s*{TS}(?:\s.*)?")  # `-->` plus the untidy `->`, `-- >`
# Cue settings may follow the end time with no space (W3C: "00:01.000line:40%" is a valid cue).
_VTT_TIMING = re.compile(
    rf"\s*{TS}[ \t]*-->[ \t]*{TS}(?:[ \t].*|(?:line|position|size|align|region|vertical):.*)?"
)
_ARROWISH = re.compile(r"-+\s*>|=+\s*>|[–—]+\s*>|<\s*-+")
_VTT_VOICE = re.compile(r"<v(?:\.[^\s>]*)*(?:[ \t]+([^>]*))?>")
_VTT_BLOCK = re.compile(r"(NOTE|STYLE|REGION)([ \t]|$)")
_SRT_EXAMPLE = "00:00:01,000 --> 00:00:03,500"
_VTT_EXAMPLE = "00:00:01.000 --> 00:00:03.500"


def _times(m: re.Match[str], line: str, path: Path, n: int, example: str) -> tuple[float, float]:
    try:
        return stamp_seconds(m, 1), stamp_seconds(m, 5)
    except ValueError as e:
        raise InputError(
            path, f"bad timing line {quote(line)}: {e}", line=n, hint=f"e.g. {example}"
        ) from None


class _Untidy:
    """Timing lines read although they are not in the format's own notation (a foreign separator before
    the milliseconds, `->` for `-->`): one warning per kind, naming its first line and how many more."""

    def __init__(self, path: Path, sep: str, fmt: str) -> None:
        self.path, self.sep, self.fmt = path, sep, fmt
        self.seen: dict[str, list[tuple[int, str]]] = {}

    def check(self, m: re.Match[str], line: str, n: int) -> None:
        marks = {m.string[m.end(g)] for g in (3, 7) if m.group(g + 1) is not None}  # the char before ms
        kinds = [
            f"{c!r} before the milliseconds ({self.fmt} writes {self.sep!r})"
            for c in sorted(marks - {self.sep})
        ]
        if "-->" not in line:
            kinds.append("an arrow other than '-->'")
        for k in kinds:
            self.seen.setdefault(k, []).append((n, line))

    def warnings(self) -> list[str]:
        out = []
        for kind, where in self.seen.items():
            n, line = where[0]
            more = f", and {len(where) - 1} more such line(s)" if len(where) > 1 else ""
            out.append(f"{self.path}:{n}: untidy timing line {quote(line)}: {kind}{more}; read anyway")
        return out


def _malformed(path: Path, line: str, n: int, example: str) -> InputError:
    return InputError(
        path,
        f"malformed timing line {quote(line)}",
        line=n,
        hint=f"expected two timestamps like {example}",
    )


def _srt_timing_attempt(s: str) -> bool:
    """A line that someone meant as a timing line, though it may not be one."""
    return bool(_ARROWISH.search(s)) or len(TIMEISH.findall(s)) >= 2


def _timing_shaped(s: str) -> bool:
    """Two timestamps joined by an arrow-like token: a timing line even inside a cue's text."""
    return bool(_ARROWISH.search(s)) and len(TIMEISH.findall(s)) >= 2


def read_srt(text: str, path: Path, kind: str, styles: object = None) -> FormatRead:
    """SRT: blocks of [number], timing line, text. Damage (exit 2): a line with `-->` that is not a timing
    line, a block that starts like a timing line but is not one, a cue number followed by anything but a
    timing line, text before the first timing line, a timestamp out of range. Untidy but read: missing
    or repeated numbers, missing blank lines between cues, `.` for `,`, blank lines inside a cue's text,
    a lone cue number at the end of the file, cues with no text (no_speech), byte-order marks left inside
    the file by concatenating files."""
    lines = text.replace("\ufeff", "").split("\n")
    n_lines = len(lines)
    out = FormatRead()
    untidy = _Untidy(path, ",", "SRT")
    cur: tuple[int, float, float, list[str]] | None = None

    def close() -> None:
        if cur is not None:
            line, start, end, body = cur
            out.events.append(RawEvent(line, start, end, display_text("\n".join(body)), None))

    prev_blank = True
    i = 0
    while i < n_lines:
        s = lines[i].strip()
        if not s:
            prev_blank = True
            i += 1
            continue
        nxt = lines[i + 1].strip() if i + 1 < n_lines else ""
        timing_at = None
        if _SRT_TIMING.fullmatch(s):
            timing_at = i
        elif s.isdigit() and _SRT_TIMING.fullmatch(nxt):
            timing_at = i + 1
        elif "-->" in s or (prev_blank and _srt_timing_attempt(s)) or _timing_shaped(s):
            raise _malformed(path, s, i + 1, _SRT_EXAMPLE)
        elif s.isdigit() and nxt and _srt_timing_attempt(nxt):  # a cue number, blank line missing or not
            raise _malformed(path, nxt, i + 2, _SRT_EXAMPLE)
        elif s.isdigit() and prev_blank:
            after = next((j for j in range(i + 1, n_lines) if lines[j].strip()), None)
            if after is None:
                out.warnings.append(
                    f"{path}:{i + 1}: cue number {s} at the end of the file has no cue; ignored"
                )
                break
            if not nxt and _SRT_TIMING.fullmatch(lines[after].strip()):
                i = after  # "5", blank line, timing line: untidy, but the number is plainly the cue's
                continue
            raise InputError(
                path,
                f"cue number {s} is not followed by a timing line (next: {quote(lines[after])})",
                line=i + 1,
                hint=f"give the cue a timing line like {_SRT_EXAMPLE}, or delete the number",
            )
        if timing_at is not None:
            close()
            timing = lines[timing_at].strip()
            m = _SRT_TIMING.fullmatch(timing)
            assert m is not None
            start, end = _times(m, timing, path, timing_at + 1, _SRT_EXAMPLE)
            untidy.check(m, timing, timing_at + 1)
            cur = (timing_at + 1, start, end, [])
            i, prev_blank = timing_at + 1, False
            continue
        if cur is None:
            other = "vtt" if s.startswith("WEBVTT") else "ass" if s.lower() == "[script info]" else None
            raise InputError(
                path,
                f"text before the first timing line: {quote(s)}",
                line=i + 1,
                hint=f"this is not SRT: pass --format {other}"
                if other
                else f"every cue needs a timing line like {_SRT_EXAMPLE} above its text",
            )
        cur[3].append(lines[i])
        prev_blank = False
        i += 1
    close()
    if not out.events:
        raise InputError(path, "no cues found (read as SRT)", line=1, hint="is this the right file?")
    out.warnings += untidy.warnings()
    return out


def _vtt_text_line(lines: list[str], i: int) -> bool:
    """Whether line i continues a cue's text. W3C: any line but an empty one or one with `-->`. A line of
    spaces is text (auto-captions start cues with one) unless a new cue follows it: then it is an untidy
    blank line, and the cue identifier after it is not spoken."""
    line = lines[i]
    if not line or "-->" in line:
        return False
    if line.strip():
        return True
    nxt = lines[i + 1] if i + 1 < len(lines) else ""
    after = lines[i + 2] if i + 2 < len(lines) else ""
    return bool(nxt.strip()) and "-->" not in nxt and "-->" not in after


def read_vtt(text: str, path: Path, kind: str, styles: object = None) -> FormatRead:
    """WebVTT per the W3C parser: the WEBVTT header, then blocks separated by blank lines; a block whose
    first or second line contains `-->` is a cue (the first line then being its identifier); NOTE, STYLE and
    REGION blocks are skipped. A cue's text ends at a blank line or at a line containing `-->`, which starts
    the next cue. Damage (exit 2): a timing line that does not parse, a timestamp out of range, a block of
    text outside any cue. Cues with no text are no_speech."""
    lines = text.split("\n")
    n_lines = len(lines)
    if not lines[0].startswith("WEBVTT"):
        raise InputError(path, "not a WebVTT file: the first line must be WEBVTT", line=1)
    out = FormatRead()
    untidy = _Untidy(path, ".", "WebVTT")
    i = 1
    # Header lines (Kind:, Language:, ...) up to the first blank line. A timing line there (a file with no
    # blank line after WEBVTT) starts the first cue: the W3C parser would drop that cue, losing its text.
    while i < n_lines and lines[i].strip() and "-->" not in lines[i]:
        i += 1
    while i < n_lines:
        s = lines[i].strip()
        if not s:
            i += 1
            continue
        if "-->" not in s and _VTT_BLOCK.match(s):
            while i < n_lines and lines[i] and "-->" not in lines[i]:  # a "-->" line ends the block (W3C)
                i += 1
            continue
        if "-->" not in s:
            # W3C: a line right above a "-->" line is the cue's identifier, whatever it holds (arrows too).
            if i + 1 < n_lines and "-->" in lines[i + 1]:
                i += 1
            elif _srt_timing_attempt(s):  # "00:01.000 -> 00:02.000": meant as a timing line
                raise _malformed(path, s, i + 1, _VTT_EXAMPLE)
            else:
                raise InputError(
                    path,
                    f"text outside any cue: {quote(s)}",
                    line=i + 1,
                    hint=f"give it a timing line like {_VTT_EXAMPLE}, or start the block with NOTE",
                )
        timing = lines[i].strip()
        m = _VTT_TIMING.fullmatch(timing)
        if m is None:
            raise _malformed(path, timing, i + 1, _VTT_EXAMPLE)
        start, end = _times(m, timing, path, i + 1, _VTT_EXAMPLE)
        untidy.check(m, timing, i + 1)
        line_no = i + 1
        i += 1
        body: list[str] = []
        while i < n_lines and _vtt_text_line(lines, i):
            body.append(lines[i])
            i += 1
        raw = "\n".join(body)
        voice = _VTT_VOICE.search(raw)
        speaker = voice[1].strip() if voice and voice[1] and voice[1].strip() else None
        body_text = join_lines(html.unescape(display_text(raw)).split("\n"))  # &nbsp; -> space, collapsed
        out.events.append(RawEvent(line_no, start, end, body_text, speaker))
    if not out.events:
        raise InputError(
            path, "no cues found after the WEBVTT header", line=1, hint="is this the right file?"
        )
    out.warnings += untidy.warnings()
    return out
