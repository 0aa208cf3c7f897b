"""The re-timed subtitles, written in the input's own format: SRT, WebVTT (speakers as `<v Name>` spans) or
ASS/SSA (the script's own header and styles, each line under its style and actor); TXT/TSV/CSV/JSONL input
gets SRT. Line breaks are kept in every format."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fasttts_cli.dubbing.readers_table import SCRIPT_COLUMNS

# Formats written as themselves; anything else is written as SRT.
OWN_FORMATS = ("srt", "vtt", "ass", "ssa")


@dataclass(frozen=True)
class SubtitleEntry:
    start: float
    end: float
    text: str  # display text, "\n" between lines
    speaker: str | None = None
    style: str | None = None  # ASS/SSA style name


def subtitle_format(input_format: str | None) -> str:
    return input_format if input_format in OWN_FORMATS else "srt"


def format_subtitles(kind: str, entries: Sequence[SubtitleEntry], *, header: str | None = None) -> str:
    kind = subtitle_format(kind)
    if kind == "vtt":
        return format_vtt(entries)
    if kind in ("ass", "ssa"):
        return format_ass(entries, header=header, ssa=kind == "ssa")
    return format_srt(entries)


def _lines(text: str) -> list[str]:
    # A blank line would end the cue in SRT and WebVTT: drop empty lines inside the text.
    return [ln.strip() for ln in text.split("\n") if ln.strip()] or [""]


def _hms(t: float, sep: str) -> str:
    ms = max(0, round(t * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def format_srt(entries: Sequence[SubtitleEntry]) -> str:
    # An arrow in the text would read as a (malformed) timing line: "-->" is written "->".
    blocks = [
        f"{n}\n{_hms(e.start, ',')} --> {_hms(e.end, ',')}\n"
        + "\n".join(ln.replace("-->", "->") for ln in _lines(e.text))
        + "\n"
        for n, e in enumerate(entries, 1)
    ]
    return "\n".join(blocks)


def _vtt_escape(text: str) -> str:
    # WebVTT cue text is markup: &, < and > must be escaped, and "-->" may not appear in it.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("-->", "--&gt;")


def format_vtt(entries: Sequence[SubtitleEntry]) -> str:
    blocks = ["WEBVTT\n"]
    for e in entries:
        lines = [_vtt_escape(ln) for ln in _lines(e.text)]
        if e.speaker:
            voice = e.speaker.replace(">", "").replace("&", "&amp;")
            lines[0] = f"<v {voice}>{lines[0]}"
        blocks.append(f"{_hms(e.start, '.')} --> {_hms(e.end, '.')}\n" + "\n".join(lines) + "\n")
    return "\n".join(blocks)


_MINIMAL_HEADER = {
    False: (
        "[Script Info]\nScriptType: v4.00+\nWrapStyle: 0\nScaledBorderAndShadow: yes\n\n[V4+ Styles]\n"
        "Format: Name, Fontname, Fontsize, PrimaryColour, SecondaryColour, OutlineColour, BackColour, Bold, "
        "Italic, Underline, StrikeOut, ScaleX, ScaleY, Spacing, Angle, BorderStyle, Outline, Shadow, "
        "Alignment, MarginL, MarginR, MarginV, Encoding\n"
        "Style: Default,Arial,20,&H00FFFFFF,&H000000FF,&H00000000,&H00000000,0,0,0,0,100,100,0,0,1,2,2,"
        "2,10,10,10,1\n"
    ),
    True: (
        "[Script Info]\nScriptType: v4.00\n\n[V4 Styles]\n"
        "Format: Name, Fontname, Fontsize, PrimaryColour, SecondaryColour, TertiaryColour, BackColour, Bold, "
        "Italic, BorderStyle, Outline, Shadow, Alignment, MarginL, MarginR, MarginV, AlphaLevel, Encoding\n"
        "Style: Default,Arial,20,16777215,65535,65535,0,0,0,1,2,2,2,10,10,10,0,1\n"
    ),
}


def _ass_time(t: float) -> str:
    cs = max(0, round(t * 100))
    h, cs = divmod(cs, 360_000)
    m, cs = divmod(cs, 6000)
    s, cs = divmod(cs, 100)
    return f"{h}:{m:02d}:{s:02d}.{cs:02d}"


def _ass_text(text: str) -> str:
    # Braces would open an override block; the text is display text, so they are literal.
    body = "\\N".join(_lines(text))
    return body.replace("{", "(").replace("}", ")")


def _field(value: str | None) -> str:
    return (value or "").replace(",", ";").replace("\n", " ").strip()


def format_ass(entries: Sequence[SubtitleEntry], *, header: str | None = None, ssa: bool = False) -> str:
    head = header if header else _MINIMAL_HEADER[ssa]
    if ssa:
        fmt, first = "Marked, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text", "Marked=0"
    else:
        fmt, first = "Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text", "0"
    rows = [
        f"Dialogue: {first},{_ass_time(e.start)},{_ass_time(e.end)},{_field(e.style) or 'Default'},"
        f"{_field(e.speaker)},0,0,0,,{_ass_text(e.text)}"
        for e in entries
    ]
    return head.rstrip("\n") + "\n\n[Events]\nFormat: " + fmt + "\n" + "\n".join(rows) + "\n"


def format_table(entries: Sequence[SubtitleEntry], kind: str) -> str:
    """TSV or CSV with the script columns `start, end, speaker, text` (what readers_table reads back).
    TSV has no quoting: tabs and line breaks in the text become spaces; CSV quotes as the csv module does."""
    import csv
    import io

    rows = [
        (_hms(e.start, ","), _hms(e.end, ","), e.speaker or "", " ".join(_lines(e.text))) for e in entries
    ]
    if kind == "tsv":
        clean = [tuple(" ".join(f.split()) for f in r) for r in rows]
        return "\n".join("\t".join(r) for r in [SCRIPT_COLUMNS, *clean]) + "\n"
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(SCRIPT_COLUMNS)
    w.writerows(rows)
    return buf.getvalue()
