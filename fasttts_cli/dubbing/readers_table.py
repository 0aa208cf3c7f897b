"""Plain TXT and the TSV / CSV / JSONL scripts (columns start, end, speaker, text): one row, one cue.

Damage (exit 2) is anything that would change what a row means: a missing header or text column, a row
with the wrong number of fields, a time that does not parse. A row with empty text is a cue with nothing to
say (no_speech), not an error.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

from fasttts_cli.dubbing.readers_base import FormatRead, RawEvent, join_lines
from fasttts_cli.errors import InputError

SCRIPT_COLUMNS = ("start", "end", "speaker", "text")
_TIME_HINT = "times are seconds (12.5) or HH:MM:SS,mmm / HH:MM:SS.mmm / MM:SS.mmm"


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


# ---------------------------------------------------------------------------------------------------- TXT


def read_txt(text: str, path: Path, kind: str, styles: object = None) -> FormatRead:
    """One cue per non-empty line, untimed."""
    events = [
        RawEvent(n, None, None, " ".join(line.split()), None)
        for n, line in enumerate(text.split("\n"), 1)
        if line.strip()
    ]
    if not events:
        raise InputError(path, "no cues found: the file has no text", line=1, hint="is this the right file?")
    return FormatRead(events)


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


def read_table(text: str, path: Path, kind: str, styles: object = None) -> FormatRead:
    rows = _table_rows(text, path, kind)
    if not rows:
        raise InputError(path, "no cues found: the file is empty", line=1, hint="is this the right file?")
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
        out.append(RawEvent(n, start, end, join_lines(get["text"].split("\n")), get.get("speaker") or None))
    return FormatRead(out)


def read_jsonl(text: str, path: Path, kind: str, styles: object = None) -> FormatRead:
    out: list[RawEvent] = []
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
        text = join_lines(obj["text"].split("\n"))
        out.append(RawEvent(n, start, end, text, (speaker or "").strip() or None))
    return FormatRead(out)


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
