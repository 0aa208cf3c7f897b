"""Readers and text decoding against files with known contents (tests/data/inputs, samples/)."""

from __future__ import annotations

import codecs
import io
from pathlib import Path

import pytest

from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.dubbing.readers import (
    detect_format,
    layout_untimed,
    parse_time,
    read_script,
    split_name_prefix,
)
from fasttts_cli.dubbing.textio import read_text
from fasttts_cli.errors import ExitCode, InputError, UsageError

DATA = Path(__file__).parent / "data" / "inputs"
SAMPLES = Path(__file__).parent.parent / "samples"


def _view(cues: list[Cue]) -> list[tuple]:
    return [(c.index, c.start, c.end, c.speaker, c.text) for c in cues]


# ------------------------------------------------------------------------------------------------ encodings


@pytest.mark.parametrize("name", ["utf8_bom.srt", "utf16le_bom.srt", "utf16be_bom.srt"])
def test_bom_encodings_decode_to_the_same_cues(name: str) -> None:
    cues = read_script(DATA / name)
    assert _view(cues) == [
        (1, 1.0, 2.5, None, "Café, señor."),
        (2, 3.0, 4.25, None, "Grüße aus Köln!"),
    ]
    assert cues[1].source == f"{DATA / name}:6"


def test_read_text_strips_bom_and_crlf() -> None:
    text = read_text(DATA / "utf16le_bom.srt")
    assert text.startswith("1\n00:00:01,000")
    assert "\r" not in text and "\ufeff" not in text


def test_cp1252_is_an_error_with_offset_line_and_hint() -> None:
    with pytest.raises(InputError) as ei:
        read_script(DATA / "cp1252.srt")
    err = ei.value
    msg = str(err)
    assert "cp1252.srt:3:" in msg  # é of "Café" is on line 3
    assert "byte 35" in msg and "e9" in msg
    assert "UTF-8" in err.hint
    assert err.exit_code == ExitCode.USAGE


def test_binary_and_utf16_without_bom_are_errors(tmp_path: Path) -> None:
    raw = tmp_path / "raw.srt"
    raw.write_bytes("1\n00:00:01,000 --> 00:00:02,000\nHi\n".encode("utf-16-le"))  # no BOM
    with pytest.raises(InputError, match=r"raw.srt:1: contains NUL"):
        read_script(raw)
    blob = tmp_path / "blob.srt"
    blob.write_bytes(bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0xFF, 0x00]))
    with pytest.raises(InputError, match=r"blob.srt:1: not valid UTF-8 text at byte 0"):
        read_script(blob)
    u32 = tmp_path / "u32.txt"
    u32.write_bytes(codecs.BOM_UTF32_LE + "hello".encode("utf-32-le"))
    with pytest.raises(InputError, match="UTF-32"):
        read_script(u32)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope.srt: file not found"):
        read_script(tmp_path / "nope.srt")
    with pytest.raises(InputError, match="is a directory"):
        read_text(tmp_path)


# ------------------------------------------------------------------------------------------------- SRT/VTT


def test_vtt_keeps_voice_spans_as_speakers() -> None:
    cues = read_script(DATA / "speakers.vtt")
    assert _view(cues) == [
        (1, 1.0, 2.5, "Alice", "Hello, Bob & friends."),  # <i> stripped, entity decoded, id/STYLE ignored
        (2, 3.0, 5.0, "Bob Smith", "Hi Alice.\nHow are you?"),  # <v.loud ...> class, line break kept
        (3, 5.5, 7.0, "Alice", "I'm fine. Good."),  # several voices: first one, all text kept
        (4, 8.0, 9.0, None, "No voice here."),  # <c> and karaoke timestamp tags removed
    ]
    # NOTE block text must not leak into cue 1; line numbers point at the timing lines.
    assert [c.source.rsplit(":", 1)[1] for c in cues] == ["9", "16", "20", "24"]


def test_srt_strips_tags_and_positions(tmp_path: Path) -> None:
    f = tmp_path / "t.srt"
    f.write_text(
        "1\n00:00:01,000 --> 00:00:02,000\n{\\an8}<i>Top</i> <font color='red'>line</font>\n\n"
        "7\n00:00:02,500 --> 00:00:04,000\n- Hi.\n- Hello.\n",
        encoding="utf-8",
    )
    cues = read_script(f)
    assert _view(cues) == [(1, 1.0, 2.0, None, "Top line"), (2, 2.5, 4.0, None, "- Hi.\n- Hello.")]


def test_srt_number_as_last_text_line_and_missing_blank_lines(tmp_path: Path) -> None:
    f = tmp_path / "n.srt"
    f.write_text(
        "1\n00:00:01,000 --> 00:00:02,000\nThe answer is\n42\n\n"
        "2\n00:00:03,000 --> 00:00:04,000\nNo blank line follows.\n"
        "3\n00:00:05,000 --> 00:00:06,000\nLast.\n",
        encoding="utf-8",
    )
    assert _view(read_script(f)) == [
        (1, 1.0, 2.0, None, "The answer is\n42"),  # pysubs2 alone would drop the "42"
        (2, 3.0, 4.0, None, "No blank line follows."),
        (3, 5.0, 6.0, None, "Last."),
    ]


def test_stdin_needs_a_format(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"1\n00:00:01,000 --> 00:00:02,000\nFrom a pipe.\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert _view(read_script(Path("-"), fmt="srt")) == [(1, 1.0, 2.0, None, "From a pipe.")]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"hello")))
    with pytest.raises(InputError, match="standard input"):
        read_script(Path("-"))


def test_srt_name_prefix(tmp_path: Path) -> None:
    f = tmp_path / "p.srt"
    f.write_text("1\n00:00:01,000 --> 00:00:02,000\nBOB: Hey.\n", encoding="utf-8")
    assert read_script(f)[0].speaker is None
    cue = read_script(f, name_prefix=True)[0]
    assert (cue.speaker, cue.text) == ("BOB", "Hey.")


# -------------------------------------------------------------------------------------------------- ASS


def test_ass_name_comment_override_tags_and_drawing() -> None:
    cues = read_script(DATA / "tags.ass")
    # Comment skipped, pure drawing skipped, events sorted by start, Name stripped, tags and \N \h gone.
    assert _view(cues) == [
        (1, 1.0, 3.0, "Alice", "Hello, world."),
        (2, 4.0, 5.5, "Bob", "Second line,\nsplit here."),
        (3, 6.0, 7.0, None, "Nobody's line, with, commas."),
    ]
    assert [c.source.rsplit(":", 1)[1] for c in cues] == ["13", "12", "15"]


# ---------------------------------------------------------------------------------------- TSV/CSV/JSONL


def test_tsv_time_formats_and_literal_quotes() -> None:
    assert _view(read_script(DATA / "script.tsv")) == [
        (1, 1.5, 3.25, "ALICE", '"Quoted," she said.'),
        (2, 3.5, 5.0, "Bob", "Plain seconds."),
        (3, 65.25, 66.0, None, "No speaker, MM:SS.mmm times."),
        (4, 3600.0, 3601.0, "ALICE", "An hour in."),
    ]


def test_csv_any_column_order_quoted_fields_extra_columns() -> None:
    cues = read_script(DATA / "script.csv")
    assert _view(cues) == [
        (1, 1.0, 2.0, "ALICE", "Hello, Bob."),
        (2, 2.5, 4.0, "BOB", 'Two\nlines "quoted".'),
        (3, 5.0, 6.0, None, "Unnamed."),
    ]
    # The multi-line row starts on line 3; the next row on line 5.
    assert [c.source.rsplit(":", 1)[1] for c in cues] == ["2", "3", "5"]


def test_jsonl_numbers_strings_and_null_speaker() -> None:
    assert _view(read_script(DATA / "script.jsonl")) == [
        (1, 1.0, 2.5, "ALICE", "Hi."),
        (2, 3.0, 4.0, None, "Narration."),
        (3, 4.5, 6.0, None, "No speaker key."),
    ]


def test_untimed_tsv_script(tmp_path: Path) -> None:
    f = tmp_path / "s.tsv"
    f.write_text("speaker\ttext\nALICE\tOne.\nBOB\tTwo.\n", encoding="utf-8")
    assert _view(read_script(f)) == [(1, None, None, "ALICE", "One."), (2, None, None, "BOB", "Two.")]


def test_txt_one_cue_per_line_with_name_prefixes() -> None:
    cues = read_script(DATA / "names.txt", name_prefix=True)
    assert [(c.speaker, c.text) for c in cues] == [
        ("ALICE", "Hello there."),
        (None, "Note: 5:30"),
        ("Dr. Who", "Fantastic!"),
        (None, "see: lowercase is not a name"),
        (None, "http://example.com is a link"),
        (None, "Just a line."),
    ]
    assert all(c.start is None and c.end is None for c in cues)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ALICE: Hi.", ("ALICE", "Hi.")),
        ("Mary Jane: Yes!", ("Mary Jane", "Yes!")),
        ("Note: 5:30", (None, "Note: 5:30")),
        ("At 10:30: we go", (None, "At 10:30: we go")),
        ("Agent 007: Hi", (None, "Agent 007: Hi")),
        ("One two three four: too many words", (None, "One two three four: too many words")),
        ("NARRATOR:", (None, "NARRATOR:")),
        ("李雷：你好", ("李雷", "你好")),
    ],
)
def test_split_name_prefix(text: str, expected: tuple) -> None:
    assert split_name_prefix(text) == expected


# --------------------------------------------------------------------------------------------- malformed


@pytest.mark.parametrize(
    ("name", "line", "words"),
    [
        ("bad_timestamp.srt", 6, "malformed timing line"),
        ("end_before_start.srt", 6, "ends before it starts"),
        ("out_of_order.srt", 6, "before the cue at line 2"),
        ("bad_time.tsv", 3, "bad start time '3,5'"),
        ("missing_text.csv", 1, "no 'text' column"),
        ("no_header.tsv", 1, "header row"),
        ("bad_json.jsonl", 2, "not valid JSON"),
        ("bad_event.ass", 7, "bad end time"),
    ],
)
def test_malformed_inputs_name_file_and_line(name: str, line: int, words: str) -> None:
    with pytest.raises(InputError) as ei:
        read_script(DATA / name)
    assert ei.value.line == line
    assert str(ei.value).startswith(f"{DATA / name}:{line}: ")
    assert words in str(ei.value)


def test_tsv_row_with_wrong_field_count(tmp_path: Path) -> None:
    f = tmp_path / "x.tsv"
    f.write_text("start\tend\ttext\n1\t2\tok\n3\t4\tbad\ttab\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"x.tsv:3: row has 4 fields, the header has 3 \(a tab"):
        read_script(f)


def test_csv_unterminated_quote(tmp_path: Path) -> None:
    f = tmp_path / "q.csv"
    f.write_text('start,end,text\n1,2,"never closed\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"q\.csv:2: malformed CSV"):
        read_script(f)


def test_overlap_same_speaker_names_both_cues() -> None:
    with pytest.raises(InputError) as ei:
        read_script(DATA / "overlap_same.tsv")
    msg = str(ei.value)
    assert ei.value.line == 4  # the later cue
    assert "line 2" in msg  # the cue it clashes with (ALICE, case-insensitive match with "alice")
    assert "00:00:01.000 --> 00:00:03.000" in msg and "00:00:02.500 --> 00:00:03.500" in msg


def test_overlap_allowed_for_different_speakers() -> None:
    cues = read_script(DATA / "overlap_different.tsv")
    assert [(c.start, c.end, c.speaker) for c in cues] == [
        (1.0, 3.0, "ALICE"),
        (2.0, 4.0, "BOB"),
        (3.5, 5.0, "ALICE"),
    ]


def test_overlap_without_speakers_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "o.srt"
    f.write_text(
        "1\n00:00:01,000 --> 00:00:03,000\nA\n\n2\n00:00:02,000 --> 00:00:04,000\nB\n", encoding="utf-8"
    )
    with pytest.raises(InputError, match=r"o\.srt:6: cue overlaps the cue at line 2"):
        read_script(f)


def test_tiny_overlap_is_clipped() -> None:
    cues = read_script(DATA / "overlap_tiny.srt")
    assert [(c.start, c.end) for c in cues] == [(1.0, 3.0), (3.0, 4.0)]


# ------------------------------------------------------------------------------------------ time, layout


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("12.5", 12.5),
        ("00:00:12,500", 12.5),
        ("01:02:03.004", 3723.004),
        ("02:03.5", 123.5),
        ("75:00.000", 4500.0),
        (3, 3.0),
        (0.25, 0.25),
    ],
)
def test_parse_time(value: object, seconds: float) -> None:
    assert parse_time(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value", ["12,5", "-1", "1:60:00.0", "00:00:61.0", "abc", "", True, None, float("nan")]
)
def test_parse_time_rejects(value: object) -> None:
    with pytest.raises(ValueError):
        parse_time(value)


def test_layout_untimed() -> None:
    cues = [
        Cue(1, None, None, "x" * 28, None, "f:1"),  # 28 chars / 14 cps = 2.0 s
        Cue(2, None, None, "short", None, "f:2"),  # below min_duration: 1.0 s
        Cue(3, None, None, "y" * 21, None, "f:3"),  # 1.5 s
    ]
    out = layout_untimed(cues, chars_per_second=14.0, gap=0.4, start=1.0)
    assert [(c.start, c.end) for c in out] == [(1.0, 3.0), (3.4, 4.4), (4.8, 6.3)]
    assert [c.text for c in out] == [c.text for c in cues]


def test_detect_format() -> None:
    assert detect_format(Path("a.SRT")) == "srt"
    assert detect_format(Path("a.webvtt")) == "vtt"
    assert detect_format(Path("a.txt"), "WebVTT") == "vtt"
    assert detect_format(Path("subs"), None, "WEBVTT\n\n00:01.000 --> 00:02.000\nhi") == "vtt"
    assert detect_format(Path("subs"), None, "1\n00:00:01,000 --> 00:00:02,000\nhi\n") == "srt"
    with pytest.raises(InputError, match="cannot tell the file format"):
        detect_format(Path("subs.xyz"), None, "hello")
    with pytest.raises(UsageError, match="--format docx"):
        detect_format(Path("a.srt"), "docx")


# ---------------------------------------------------------------------------------------------- samples


def test_samples_hold_the_same_cues_in_every_format() -> None:
    srt = read_script(SAMPLES / "demo.srt")
    texts = [" ".join(c.text.split()) for c in srt]  # the TSV writes line breaks as spaces
    times = [(c.start, c.end) for c in srt]
    assert len(srt) == 7 and srt[-1].end <= 20.0
    assert all(1.5 <= e - s <= 3.5 for s, e in times)
    assert all(c.speaker is None for c in srt)  # the SRT carries no speakers: use it with one --voice
    for ext in ("vtt", "ass", "tsv"):
        cues = read_script(SAMPLES / f"demo.{ext}")
        assert [" ".join(c.text.split()) for c in cues] == texts, ext
        assert [(c.start, c.end) for c in cues] == times, ext
        assert [c.speaker for c in cues] == ["ALICE", "BOB"] * 3 + ["ALICE"], ext
    txt = read_script(SAMPLES / "demo.txt")
    assert [c.text for c in txt] == texts and all(c.start is None for c in txt)
