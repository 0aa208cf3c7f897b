"""Property-based reader tests: generated valid files read exactly as generated (and as the reference
libraries read them), and damaged variants of them are either refused with a `file:line: ` InputError or read
with every cue accounted for; no other exception ever escapes.

Times are generated in centiseconds so every format (ASS has centiseconds) can write them exactly. Texts are
letters, digits inside words, accents, CJK and light punctuation, so no generated text can be mistaken for a
cue number, a timing line, a dialogue dash or a music marker; markup is added around whole words.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pysubs2
import pytest
import srt
import webvtt
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fasttts_cli.dubbing.readers_ass import _NAME_MARKERS, _word_category
from fasttts_cli.errors import InputError
from tests.test_readers_corpus import REPO, Read, read, source_line

VOICE = REPO / "samples" / "voices" / "alice.wav"
# No example database: runs stay independent and leave no .hypothesis/ folder in the checkout.
SETTINGS = settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
FORMATS = ("srt", "vtt", "ass", "tsv", "csv", "jsonl")


@dataclass(frozen=True)
class GenCue:
    start: int  # centiseconds
    end: int
    words: tuple[str, ...]  # display words; () for a cue with no text
    speaker: str | None
    breaks: tuple[int, ...]  # word positions where a line break goes


@dataclass(frozen=True)
class GenFile:
    kind: str
    cues: tuple[GenCue, ...]
    text: str  # as written, before encoding and newline variants
    data: bytes


_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyzÀÉéèüßçñ中文字", min_size=1, max_size=8)
_PUNCT = st.sampled_from(["", "", ",", ".", "?", "!", "'s"])
# A speaker, never a name the reading policy documents as a sign/song marker (an ASS actor "Ts" is
# typesetting, README "Reading policy"): those events are left out by design, not lost.
_NAME = st.from_regex(r"[A-Z][a-z]{1,7}", fullmatch=True).filter(
    lambda n: _word_category(n, _NAME_MARKERS) is None
)


@st.composite
def _words(draw) -> tuple[str, ...]:
    words = draw(st.lists(_WORD, min_size=1, max_size=7))
    return tuple(w + draw(_PUNCT) for w in words)


@st.composite
def cue_lists(draw, *, allow_empty: bool = False) -> tuple[GenCue, ...]:
    n = draw(st.integers(1, 7))
    t = draw(st.integers(0, 360_000))  # up to an hour in
    out = []
    for _ in range(n):
        t += draw(st.integers(0, 300))
        dur = draw(st.integers(1, 800))
        empty = allow_empty and draw(st.booleans())
        words = () if empty else draw(_words())
        speaker = draw(st.none() | _NAME)
        breaks = (
            tuple(sorted(draw(st.sets(st.integers(1, max(1, len(words) - 1)), max_size=2))))
            if len(words) > 1
            else ()
        )
        out.append(GenCue(t, t + dur, words, speaker, breaks))
        t += dur
    return tuple(out)


def _hms(cs: int, sep: str, *, short: bool = False) -> str:
    h, rest = divmod(cs, 360_000)
    m, rest = divmod(rest, 6000)
    s, c = divmod(rest, 100)
    return (
        f"{m:02d}:{s:02d}{sep}{c * 10:03d}"
        if short and h == 0
        else f"{h:02d}:{m:02d}:{s:02d}{sep}{c * 10:03d}"
    )


def _lines(c: GenCue, mark) -> list[str]:
    """The cue's words as text lines, `mark(word, i)` decorating each word."""
    lines, cur = [], []
    for i, w in enumerate(c.words):
        if i in c.breaks:
            lines.append(" ".join(cur))
            cur = []
        cur.append(mark(w, i))
    if cur:
        lines.append(" ".join(cur))
    return lines


def render(kind: str, cues: tuple[GenCue, ...], draw) -> str:
    if kind == "srt":
        tags = draw(
            st.sampled_from([("", ""), ("<i>", "</i>"), ("<b>", "</b>"), ('<font color="#ff0">', "</font>")])
        )
        blocks = []
        for i, c in enumerate(cues, 1):
            body = _lines(c, lambda w, j: f"{tags[0]}{w}{tags[1]}" if j == 0 else w)
            blocks.append("\n".join([str(i), f"{_hms(c.start, ',')} --> {_hms(c.end, ',')}", *body]))
        return "\n\n".join(blocks) + "\n"
    if kind == "vtt":
        short = draw(st.booleans())
        settings_ = draw(st.sampled_from(["", " align:start position:0%", " line:0"]))
        inline = draw(st.booleans())
        blocks = ["WEBVTT" + draw(st.sampled_from(["", " - title", "\nKind: captions\nLanguage: en"]))]
        for i, c in enumerate(cues, 1):
            n = max(1, len(c.words))

            def mark(w: str, j: int, c: GenCue = c, n: int = n) -> str:
                # A word timestamp inside the cue: text markup, never a timing line.
                stamp = f"<{_hms(c.start + (c.end - c.start) * j // n, '.')}>" if inline and j else ""
                return f"{stamp}<c>{w}</c>" if inline else w

            body = _lines(c, mark)
            if c.speaker and body:
                body[0] = f"<v {c.speaker}>{body[0]}"
            ident = [f"cue-{i}"] if draw(st.booleans()) else []
            timing = f"{_hms(c.start, '.', short=short)} --> {_hms(c.end, '.', short=short)}{settings_}"
            blocks.append("\n".join([*ident, timing, *body]))
        return "\n\n".join(blocks) + "\n"
    if kind == "ass":
        head = (
            "[Script Info]\nScriptType: v4.00+\nPlayResX: 1920\nPlayResY: 1080\n\n[V4+ Styles]\n"
            "Format: Name, Fontname, Fontsize, PrimaryColour, SecondaryColour, OutlineColour, BackColour, "
            "Bold, Italic, Underline, StrikeOut, ScaleX, ScaleY, Spacing, Angle, BorderStyle, Outline, "
            "Shadow, Alignment, MarginL, MarginR, MarginV, Encoding\n"
            "Style: Default,Arial,60,&H00FFFFFF,&H000000FF,&H00000000,&H00000000,0,0,0,0,100,100,0,0,1,2,1,"
            "2,10,10,10,1\n\n[Events]\nFormat: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, "
            "Effect, Text\n"
        )

        def t(cs: int) -> str:
            h, rest = divmod(cs, 360_000)
            m, rest = divmod(rest, 6000)
            return f"{h}:{m:02d}:{rest // 100:02d}.{rest % 100:02d}"

        events = []
        for c in cues:
            body = "\\N".join(_lines(c, lambda w, j: "{\\i1}" + w + "{\\i0}" if j == 1 else w))
            events.append(f"Dialogue: 0,{t(c.start)},{t(c.end)},Default,{c.speaker or ''},0,0,0,,{body}")
        # Event order is an authoring detail in ASS (the reader sorts by start); comments are not cues.
        events = list(draw(st.permutations(events)))
        for _ in range(draw(st.integers(0, 2))):
            at = draw(st.integers(0, len(events)))
            events.insert(at, "Comment: 0,0:00:00.00,0:00:00.00,Default,,0,0,0,,translator note")
        return head + "\n".join(events) + "\n"
    as_secs = draw(st.booleans())

    def tt(cs: int) -> str | float:
        return cs / 100 if as_secs else _hms(cs, draw(st.sampled_from([",", "."])))

    rows = [(tt(c.start), tt(c.end), c.speaker or "", " ".join(c.words)) for c in cues]
    if kind == "jsonl":
        return "".join(
            json.dumps({"start": a, "end": b, "speaker": s or None, "text": x}) + "\n" for a, b, s, x in rows
        )
    buf = io.StringIO()
    w = csv.writer(
        buf, delimiter="\t" if kind == "tsv" else ",", lineterminator="\n", quoting=csv.QUOTE_MINIMAL
    )
    if kind == "tsv":  # TSV is unquoted: nothing to quote in generated text
        buf.write("start\tend\tspeaker\ttext\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows))
    else:
        w.writerow(["start", "end", "speaker", "text"])
        w.writerows(rows)
    return buf.getvalue()


@st.composite
def files(draw, kinds=FORMATS, *, allow_empty: bool = False) -> GenFile:
    kind = draw(st.sampled_from(kinds))
    cues = draw(cue_lists(allow_empty=allow_empty))
    text = render(kind, cues, draw)
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"] if kind not in ("csv",) else ["\n", "\r\n"]))
    codec = draw(st.sampled_from(["utf-8", "utf-8-sig", "utf-16"]))
    return GenFile(kind, cues, text, text.replace("\n", newline).encode(codec))


def _write(g: GenFile | bytes, kind: str, tmp: str) -> Path:
    path = Path(tmp) / f"gen.{kind}"
    path.write_bytes(g.data if isinstance(g, GenFile) else g)
    return path


def _words_of(text: str) -> list[str]:
    return text.split()


def _reference_times(g: GenFile) -> list[tuple[int, int]]:
    """(start, end) in centiseconds of every cue/event as the reference library reads the written text."""
    if g.kind == "srt":
        return [
            (round(s.start.total_seconds() * 100), round(s.end.total_seconds() * 100))
            for s in srt.parse(g.text)
        ]
    if g.kind == "vtt":
        caps = webvtt.from_buffer(io.StringIO(g.text)).captions
        return [(c.start_time.in_milliseconds() // 10, c.end_time.in_milliseconds() // 10) for c in caps]
    if g.kind == "ass":
        evs = sorted(
            (e for e in pysubs2.SSAFile.from_string(g.text).events if not e.is_comment), key=lambda e: e.start
        )
        return [(e.start // 10, e.end // 10) for e in evs]
    return [(c.start, c.end) for c in g.cues]  # scripts: no reference library; the generator is the truth


# ------------------------------------------------------------------------------------------ valid files


def _check_exact(g: GenFile, got: Read) -> None:
    want = sorted(g.cues, key=lambda c: c.start)
    assert len(got.cues) == len(want), f"{len(got.cues)} cues read, {len(want)} written"
    assert _reference_times(g) == [(c.start, c.end) for c in want], "the reference library disagrees"
    for c, w in zip(got.cues, want, strict=True):
        assert math.isclose(c.start, w.start / 100, abs_tol=5e-4) and math.isclose(
            c.end, w.end / 100, abs_tol=5e-4
        )
        assert _words_of(c.text) == list(w.words), (c, w)
        if g.kind != "srt":  # SRT has no speaker field; a WebVTT cue with no text has no `<v>` span
            assert c.speaker == (None if g.kind == "vtt" and not w.words else w.speaker), (c, w)
        assert (c.index in got.no_speech) == (not w.words)
    assert all(reason.startswith("comment") for _, reason in got.skipped), got.skipped


@pytest.mark.parametrize("kind", FORMATS)
@SETTINGS
@given(data=st.data())
def test_valid_file_reads_exactly_as_written(kind: str, data):
    g = data.draw(files((kind,)))
    with tempfile.TemporaryDirectory() as tmp:
        _check_exact(g, read(_write(g, g.kind, tmp)))


@pytest.mark.parametrize("kind", FORMATS)
@SETTINGS
@given(data=st.data())
def test_cues_without_text_are_no_speech_not_errors(kind: str, data):
    g = data.draw(files((kind,), allow_empty=True))
    with tempfile.TemporaryDirectory() as tmp:
        _check_exact(g, read(_write(g, g.kind, tmp)))


# ------------------------------------------------------------------------------------------ damaged files


@dataclass(frozen=True)
class Damaged:
    kind: str
    data: bytes
    how: str
    times: frozenset[tuple[int, int]]  # (start, end) in centiseconds of every generated cue
    touched: range  # lines whose timestamps the damage may have changed (empty: no timestamp changed)


@st.composite
def damaged(draw) -> Damaged:
    g = draw(files())
    lines = g.text.split("\n")
    i = draw(st.integers(0, len(lines) - 1))
    how = draw(st.sampled_from(["delete", "duplicate", "swap", "stamp", "garbage", "truncate", "blank"]))
    touched = range(0)
    if how == "delete":
        del lines[i]
    elif how == "duplicate":
        lines.insert(i, lines[i])
    elif how == "swap" and i + 1 < len(lines):
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    elif how == "blank":
        lines.insert(i, "")
    elif how == "stamp":
        # Corrupt one character of a timestamp-looking stretch (a digit, `:`, `,` or `.`).
        spots = [(j, m.start()) for j, ln in enumerate(lines) for m in re.finditer(r"[\d:,.]", ln)]
        if spots:
            j, k = draw(st.sampled_from(spots))
            bad = draw(st.sampled_from(["x", ";", "", "99", " ", "-", "7", ":"]))
            lines[j] = lines[j][:k] + bad + lines[j][k + 1 :]
            touched = range(j + 1, j + 2)
    text = "\n".join(lines)
    data = text.encode("utf-8")
    if how == "garbage":
        at = draw(st.integers(0, len(data)))
        junk = draw(st.binary(min_size=1, max_size=6))
        data = data[:at] + junk + data[at:]
        first = data[:at].count(b"\n") + 1
        touched = range(first, first + junk.count(b"\n") + junk.count(b"\r") + 1)
    elif how == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
        touched = range(data.count(b"\n") + 1, data.count(b"\n") + 2)
    return Damaged(g.kind, data, how, frozenset((c.start, c.end) for c in g.cues), touched)


_EVENT_LINE = {
    "srt": lambda s: "-->" in s,
    "vtt": lambda s: "-->" in s,
    "ass": lambda s: s.startswith(("Dialogue:", "Comment:")),
}


def _check_refusal_or_accounted(case: Damaged, path: Path) -> None:
    kind, data = case.kind, case.data
    try:
        got = read(path)
    except InputError as e:
        first = str(e).split("\n", 1)[0]
        m = re.match(rf"{re.escape(str(path))}(?::(\d+))?: \S", first)
        assert m, f"message {first!r} does not start with '{path}:<line>: '"
        n_lines = data.count(b"\n") + data.count(b"\r") + 1
        assert m[1] is None or 1 <= int(m[1]) <= n_lines, f"line {m[1]} of a {n_lines}-line file"
        return
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    is_event = _EVENT_LINE.get(kind, lambda s: bool(s.strip()))
    candidates = sum(1 for ln in lines if is_event(ln.strip()))
    assert got.cues, "a file that reads has at least one cue"
    assert len(got.cues) + len(got.skipped) <= candidates, "more events than the file has"
    used = [source_line(c.source) for c in got.cues] + [line for line, _ in got.skipped]
    assert len(used) == len(set(used)), "one line gave two events"
    for c in got.cues:
        line = source_line(c.source)
        assert c.source.startswith(str(path)) and line is not None and 1 <= line <= len(lines), c
        assert c.start is None or (0 <= c.start <= c.end and math.isfinite(c.end)), c
        # Nothing is ever merged into spoken text: no timing line, no event line, no header.
        assert "-->" not in c.text and "Dialogue:" not in c.text and "[Events]" not in c.text, c
    assert [c.index for c in got.cues] == list(range(1, len(got.cues) + 1))
    # Times come from the file's own timestamps: a time that was never written can only be read from a line
    # that the damage touched (the cue's source is its timing line, or the number/identifier line above).
    for c in got.cues:
        if c.start is not None and (round(c.start * 100), round(c.end * 100)) not in case.times:
            line = source_line(c.source)
            assert line is not None and any(n in case.touched for n in (line, line + 1)), (c, case.how)


@settings(SETTINGS, max_examples=250)
@given(damaged())
# Regressions found by this test: a file with no cue at all used to end in "zip() argument 2 is longer".
@example(Damaged("srt", b"1\na\n", "delete", frozenset(), range(0)))
@example(Damaged("vtt", b"WEBVTT\n", "truncate", frozenset(), range(1, 2)))
def test_damaged_file_is_refused_with_file_line_or_fully_accounted(case: Damaged):
    with tempfile.TemporaryDirectory() as tmp:
        _check_refusal_or_accounted(case, _write(case.data, case.kind, tmp))


# --------------------------------------------------------------------------------------------------- CLI

_CLI_CASES = {
    "glued.srt": b"1\n00:00:01,000 --> 00:00:02,000\nHello.\n\n2\n00:00:03;000 => 00:00:04;000\nBroken.\n",
    "truncated.ass": (
        b"[Script Info]\nScriptType: v4.00+\n\n[Events]\nFormat: Layer, Start, End, Style, Name, MarginL, "
        b"MarginR, MarginV, Effect, Text\nDialogue: 0,0:00:01.00,0:00:02.00,Default,,0,0,0,,Hi\n"
        b"Dialogue: 0,0:00:0"
    ),
    "garbage.vtt": b"WEBVTT\n\n00:00.000 --> 00:01.000\nOne\xff\xfe\x00 two\n\n00:01.500 --> 00:02.000\nX\n",
    "swapped.srt": b"1\nHello.\n00:00:01,000 --> 00:00:02,000\n\n2\n00:00:03,000 --> 00:00:04,000\nAfter.\n",
    "inline.vtt": b"WEBVTT\n\n00:00:22.000 --> 00:00:24.000\n<00:00:23.150>So <00:00:23.625><b>safe</b>\n",
}


def test_cli_inspect_on_damaged_files_exits_0_or_2_without_traceback(tmp_path):
    for name, data in _CLI_CASES.items():
        path = tmp_path / name
        path.write_bytes(data)
        proc = subprocess.run(
            [sys.executable, "-m", "fasttts_cli", "inspect", str(path), "--voice", str(VOICE), "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=120,
        )
        assert proc.returncode in (0, 2), f"{name}: exit {proc.returncode}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr, f"{name}:\n{proc.stderr}"
        if proc.returncode == 2:
            assert str(path) in proc.stderr, f"{name}: the error names the file\n{proc.stderr}"
        else:
            json.loads(proc.stdout)
