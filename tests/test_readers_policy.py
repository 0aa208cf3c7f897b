"""The reading policy (README "Reading policy"): structural damage is exit 2 naming file:line and quoting the
text, untidy but readable files still read, and every event of a file is a cue or a skipped event."""

from __future__ import annotations

from pathlib import Path

import pytest

from fasttts_cli.dubbing.plan import make_plan
from fasttts_cli.dubbing.readers import parse_styles, read_script, read_script_full
from fasttts_cli.dubbing.readers_ass import classify, style_words
from fasttts_cli.dubbing.speakers import parse_voice_flags
from fasttts_cli.errors import ExitCode, InputError, UsageError

ALICE = Path(__file__).resolve().parent.parent / "samples" / "voices" / "alice.wav"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _damage(path: Path, line: int, *words: str, **kw: object) -> InputError:
    with pytest.raises(InputError) as ei:
        read_script(path, **kw)  # type: ignore[arg-type]
    err = ei.value
    assert err.exit_code == ExitCode.USAGE
    assert err.line == line, str(err)
    assert str(err).startswith(f"{path}:{line}: "), str(err)
    for w in words:
        assert w in str(err), str(err)
    return err


def _no_speech(cues: list) -> list[int]:
    plan = make_plan(cues, parse_voice_flags([str(ALICE)]), lambda t: len(t.split()))
    return list(plan.skipped)


# -------------------------------------------------------------------------------------------- SRT damage


@pytest.mark.parametrize("blank", ["\n", ""])
def test_srt_malformed_timing_line_is_never_glued_into_text(tmp_path: Path, blank: str) -> None:
    f = _write(
        tmp_path,
        "g.srt",
        f"1\n00:00:01,000 --> 00:00:02,000\nHello.\n{blank}2\n00:00:03;000 => 00:00:04;000\nBroken.\n",
    )
    _damage(f, 5 + len(blank), "malformed timing line", "'00:00:03;000 => 00:00:04;000'")


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("", 1, "no cues found"),
        ("\n\n  \n", 1, "no cues found"),
        ("Just some text\nand more\n", 1, "text before the first timing line: 'Just some text'"),
        ("1\n00:00:01,000 --> 00:00:61,000\nHi\n", 2, "'00:00:61,000' is out of range"),
        ("1\n00:61:00,000 --> 00:62:00,000\nHi\n", 2, "out of range"),
        ("1\n00:00:01,000 --> 00:00:02,0000\nHi\n", 2, "malformed timing line"),
        ("1\n00:00:01,000 --> 00:00:0x,000\nHi\n", 2, "malformed timing line"),
        ("1\n00:00:01,000 --> 00:00:02,000\nA\n\n2\nB has no timing\n\n"
         "3\n00:00:05,000 --> 00:00:06,000\nC\n", 5, "cue number 2 is not followed by a timing line"),
        ("1\n00:00:01,000 --> 00:00:02,000\nA\n\n00:00:03,000 - 00:00:04,000\nB\n", 5, "malformed timing"),
        ("1\n00:00:01,000 --> 00:00:02,000\nA\n\n2\n00.00.03 to 00.00.04\nB\n", 6, "malformed timing line"),
        ("1\n00:00:02,000 --> 00:00:01,000\nBackwards\n", 2, "ends before it starts"),
    ],
)  # fmt: skip
def test_srt_structural_damage(tmp_path: Path, text: str, line: int, words: str) -> None:
    _damage(_write(tmp_path, "d.srt", text), line, words)


# ------------------------------------------------------------------------------------- SRT untidy reads


def test_srt_multi_paragraph_text_reads_like_the_srt_library(tmp_path: Path) -> None:
    text = (
        "1\n00:00:01,000 --> 00:00:02,000\nFirst paragraph.\n\nSecond paragraph.\n\n"
        "2\n00:00:03,000 --> 00:00:04,000\nNext.\n"
    )
    cues = read_script(_write(tmp_path, "m.srt", text))
    assert [c.text for c in cues] == ["First paragraph.\nSecond paragraph.", "Next."]
    srt = pytest.importorskip("srt", reason="the srt library is only a reference here")
    assert [" ".join(s.content.split()) for s in srt.parse(text)] == [" ".join(c.text.split()) for c in cues]


def test_srt_untidy_but_readable(tmp_path: Path) -> None:
    f = _write(
        tmp_path,
        "u.srt",
        "00:00:01.000 --> 00:00:02.000 X1:100 X2:200 Y1:10 Y2:20\nNo number, dots, coordinates.\n\n"
        "  7  \n00:00:02,500->00:00:03,000\nShort arrow, spaces round the number.\n\n"
        "8\n\n00:00:04,000 --> 00:00:05,000\nA blank line after the number.\n\n"
        "9\n00:00:06,000 --> 00:00:07,000\n\n"
        "10\n00:00:08,000 --> 00:00:08,000\nZero length.\n\n"
        "\ufeff11\n00:00:09,000 --> 00:00:10,000\nA BOM from a concatenated file.\n\n"
        "12\n",
    )
    got = read_script_full(f)
    assert [(c.index, c.start, c.end, c.text) for c in got.cues] == [
        (1, 1.0, 2.0, "No number, dots, coordinates."),
        (2, 2.5, 3.0, "Short arrow, spaces round the number."),
        (3, 4.0, 5.0, "A blank line after the number."),
        (4, 6.0, 7.0, ""),
        (5, 8.0, 8.0, "Zero length."),
        (6, 9.0, 10.0, "A BOM from a concatenated file."),
    ]
    assert [c.source for c in got.cues] == [f"{f}:{n}" for n in (1, 5, 10, 14, 17, 21)]
    assert _no_speech(got.cues) == [4, 5]  # empty and zero-length: no_speech, not fatal
    assert any("cue number 12 at the end of the file" in w for w in got.warnings)


def test_srt_text_with_arrows_and_numbers_inside_a_cue_is_text(tmp_path: Path) -> None:
    f = _write(
        tmp_path,
        "t.srt",
        "1\n00:00:01,000 --> 00:00:03:000\nGo left => right\n42\n\nHe paid 1,000,000 and 2,000,000.\n",
    )
    cue = read_script(f)[0]
    assert (cue.end, cue.text) == (3.0, "Go left => right\n42\nHe paid 1,000,000 and 2,000,000.")


def test_exact_duplicates_are_one_line_and_accounted_for(tmp_path: Path) -> None:
    f = _write(
        tmp_path,
        "dup.srt",
        "1\n00:00:01,000 --> 00:00:02,000\nTwice.\n\n2\n00:00:01,000 --> 00:00:02,000\nTwice.\n\n"
        "3\n00:00:03,000 --> 00:00:04,000\nOnce.\n",
    )
    got = read_script_full(f)
    assert [c.text for c in got.cues] == ["Twice.", "Once."]
    assert [s.to_json() for s in got.skipped] == [
        {"source": f"{f}:6", "reason": "duplicate of line 2 (same text and times)"}
    ]
    assert got.n_events == 3


def test_overlap_rules_apply_only_to_cues_that_speak(tmp_path: Path) -> None:
    f = _write(
        tmp_path,
        "o.srt",
        "1\n00:00:01,000 --> 00:00:05,000\n♪ la la la ♪\n\n2\n00:00:02,000 --> 00:00:03,000\nSpoken.\n",
    )
    cues = read_script(f)  # the music cue overlaps, but has nothing to say
    assert _no_speech(cues) == [1]
    g = _write(
        tmp_path, "o2.srt", "1\n00:00:01,000 --> 00:00:05,000\nA\n\n2\n00:00:02,000 --> 00:00:03,000\nB\n"
    )
    _damage(g, 6, "overlaps the cue at line 2")


# ------------------------------------------------------------------------------------------------ WebVTT


def test_vtt_inline_timestamps_are_text_and_line_numbers_stay_right(tmp_path: Path) -> None:
    f = _write(
        tmp_path,
        "a.vtt",
        "WEBVTT\n\n"
        "00:00:20.000 --> 00:00:22.000\nBefore.\n\n"
        "00:00:23.000 --> 00:00:24.000\n<00:00:23.150>Perfectly <00:00:23.625><b>safe</b>.\n\n"
        "00:00:25.000 --> 00:00:26.000\n"
        "00:00:26.000 --> 00:00:27.000\nAfter two timing lines.\n\n"
        "NOTE a note\n\n"
        "id-5\n00:00:28.000 --> 00:00:29.000 align:start\n<v Ann>Last &amp; least.</v>\n",
    )
    got = read_script_full(f)
    assert [(c.index, c.text, c.speaker) for c in got.cues] == [
        (1, "Before.", None),
        (2, "Perfectly safe.", None),
        (3, "", None),
        (4, "After two timing lines.", None),
        (5, "Last & least.", "Ann"),
    ]
    assert [c.source for c in got.cues] == [f"{f}:{n}" for n in (3, 6, 9, 10, 16)]
    assert _no_speech(got.cues) == [3]
    assert got.skipped == []


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        ("", 1, "no cues found"),
        ("\n00:00:01.000 --> 00:00:0x.000\nBad.\n", 3, "malformed timing line '00:00:01.000 --> 00:00:0x"),
        ("\n00:00:01.000 -> 00:00:02.000\nArrow.\n", 3, "malformed timing line"),
        ("\n00:00:01.000 --> 00:00:02.000\nA\n\nStray text\n", 6, "text outside any cue: 'Stray text'"),
        ("\n00:00:01.000 --> 00:01:60.000\nA\n", 3, "out of range"),
    ],
)
def test_vtt_structural_damage(tmp_path: Path, body: str, line: int, words: str) -> None:
    _damage(_write(tmp_path, "d.vtt", "WEBVTT\n" + body), line, words)


def test_vtt_needs_its_header(tmp_path: Path) -> None:
    _damage(_write(tmp_path, "h.vtt", "00:00:01.000 --> 00:00:02.000\nA\n"), 1, "WEBVTT")
    err = _damage(_write(tmp_path, "v.srt", "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nA\n"), 1, "WEBVTT")
    assert err.hint is not None and "--format vtt" in err.hint


def test_vtt_auto_captions_lines_of_spaces(tmp_path: Path) -> None:
    f = _write(
        tmp_path,
        "yt.vtt",
        "WEBVTT\nKind: captions\nLanguage: en\n\n"
        "00:00:00.030 --> 00:00:02.270 align:start position:0%\n \nhello<00:00:00.539><c> everyone</c>\n\n"
        "00:00:02.280 --> 00:00:04.829 align:start position:0%\nhello everyone\nto<00:00:02.490><c> my</c>\n"
        "   \n2\n00:00:05.000 --> 00:00:06.000\nAn untidy blank line above.\n",
    )
    # A line of spaces opening a cue is text (W3C); one before the next cue is a blank line.
    assert [(c.text, c.source) for c in read_script(f)] == [
        ("hello everyone", f"{f}:5"),
        ("hello everyone\nto my", f"{f}:9"),
        ("An untidy blank line above.", f"{f}:14"),
    ]


def test_vtt_timing_line_right_under_the_header_is_a_cue(tmp_path: Path) -> None:
    f = _write(tmp_path, "n.vtt", "WEBVTT\nKind: captions\n00:00:01.000 --> 00:00:02.000\nFirst.\n")
    assert [(c.text, c.source) for c in read_script(f)] == [("First.", f"{f}:3")]


# --------------------------------------------------------------------------------------------------- ASS

_HEAD = """[Script Info]
ScriptType: v4.00+

[V4+ Styles]
Format: Name, Fontname, Fontsize, PrimaryColour, SecondaryColour, OutlineColour, BackColour, Bold, Italic, \
Underline, StrikeOut, ScaleX, ScaleY, Spacing, Angle, BorderStyle, Outline, Shadow, Alignment, MarginL, \
MarginR, MarginV, Encoding
Style: Default,Arial,20,&H00FFFFFF,&H000000FF,&H00000000,&H00000000,0,0,0,0,100,100,0,0,1,2,2,2,10,10,10,1
Style: Italics,Arial,20,&H00FFFFFF,&H000000FF,&H00000000,&H00000000,0,1,0,0,100,100,0,0,1,2,2,2,10,10,10,1
Style: Signs,Arial,20,&H00FFFFFF,&H000000FF,&H00000000,&H00000000,0,0,0,0,100,100,0,0,1,2,2,8,10,10,10,1
Style: OP Romaji,Arial,20,&H00FFFFFF,&H000000FF,&H00000000,&H00000000,0,0,0,0,100,100,0,0,1,2,2,8,10,10,10,1
Style: OP English,Arial,20,&H00FFFFFF,&H000000FF,&H00000000,&H00000000,0,0,0,0,100,100,0,0,1,2,2,2,10,10,10,1

[Events]
Format: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text
"""
# A fansub script's usual untidiness, one event per line (line numbers from 14).
_EVENTS = [
    "Dialogue: 0,0:00:00.00,0:00:00.00,Default,,0,0,0,,",  # 14 Aegisub's blank line: no_speech
    "Comment: this comment line has no fields at all",  # 15 comment, whatever its shape
    "Dialogue: 0,0:00:01.00,0:00:03.00,OP Romaji,,0,0,0,,{\\k20}Ko{\\k30}ko{\\k25}ro",  # 16 song (karaoke)
    "Dialogue: 0,0:00:01.00,0:00:03.00,OP English,,0,0,0,,My heart",  # 17 song (style)
    "Dialogue: 0,0:00:04.00,0:00:06.00,Default,,0,0,0,,Good morning.",  # 18 dialogue
    "Dialogue: 1,0:00:04.00,0:00:06.00,Default,,0,0,0,,Good morning.",  # 19 layered duplicate
    "Dialogue: 0,0:00:04.50,0:00:05.50,Signs,,0,0,0,,{\\pos(320,50)}Tokyo Station",  # 20 sign (style)
    "Dialogue: 0,0:00:05.00,0:00:07.00,Default,,0,0,0,,{\\an7\\pos(20,20)\\fs30}Room 204",  # 21 sign (tags)
    "Dialogue: 0,0:00:05.00,0:00:06.00,Default,,0,0,0,,{\\p1}m 0 0 l 10 0 10 10{\\p0}",  # 22 drawing
    "Dialogue: 0,0:00:06.00,0:00:08.00,Italics,Aoi,0,0,0,,{\\i1}I wonder...{\\i0}",  # 23 dialogue
    "Dialogue: 0,0:00:09.00,0:00:09.00,Default,,0,0,0,,Blink.",  # 24 zero-length: no_speech
    "Dialogue: 0,0:00:10.00,0:00:11.00,Default,,0,0,0,fx,Generated",  # 25 karaoke (effect)
    "Dialogue: 0,0:00:12.00,0:00:13.00,Default,TL Note,0,0,0,,Senpai: an upperclassman",  # 26 note (actor)
    "Dialogue:",  # 27 an empty Dialogue line
]


def _fansub(tmp_path: Path, events: list[str] | None = None) -> Path:
    return _write(tmp_path, "ep.ass", _HEAD + "\n".join(events or _EVENTS) + "\n")


def test_a_fansub_script_reads_and_every_event_is_accounted_for(tmp_path: Path) -> None:
    f = _fansub(tmp_path)
    got = read_script_full(f)
    assert [(c.index, c.start, c.speaker, c.text, c.source) for c in got.cues] == [
        (1, 0.0, None, "", f"{f}:14"),
        (2, 4.0, None, "Good morning.", f"{f}:18"),
        (3, 6.0, "Aoi", "I wonder...", f"{f}:23"),
        (4, 9.0, None, "Blink.", f"{f}:24"),
    ]
    reasons = {int(s.source.rsplit(":", 1)[1]): s.category for s in got.skipped}
    assert reasons == {
        15: "comment",
        16: "karaoke",
        17: "song",
        19: "duplicate",
        20: "sign",
        21: "sign",
        22: "drawing",
        25: "karaoke",
        26: "note",
        27: "empty",
    }
    assert got.n_events == len(_EVENTS)  # spoken + no_speech + skipped = every Dialogue/Comment line
    assert _no_speech(got.cues) == [1, 4]
    assert any("10 events left out" in w for w in got.warnings)


def test_styles_flag_picks_the_dialogue_styles(tmp_path: Path) -> None:
    f = _fansub(tmp_path)
    got = read_script_full(f, styles=parse_styles("italics, OP ENGLISH"))
    assert [c.text for c in got.cues] == ["My heart", "I wonder..."]
    assert "style 'Default' is not one of --styles" in {s.reason for s in got.skipped}
    assert got.n_events == len(_EVENTS)
    warned = read_script_full(f, styles=parse_styles("Italics,Narrator"))
    assert any("no style named narrator" in w for w in warned.warnings)
    with pytest.raises(UsageError, match="--styles"):
        parse_styles(" , ")


def test_ass_all_events_left_out_is_exit_2_with_a_hint(tmp_path: Path) -> None:
    f = _fansub(tmp_path, [_EVENTS[1], _EVENTS[6]])
    err = _damage(f, 14, "nothing to dub", "1 comment", "1 sign")
    assert err.hint is not None and "--styles" in err.hint


@pytest.mark.parametrize(
    ("event", "words"),
    [
        ("Dialogue: 0,0:00:01.00,0:00:02.00,Default", "event line has 4 fields, expected 10"),
        ("Dialogue: 0,0:00:01.00,0:00:xx.00,Default,,0,0,0,,bad time", "bad end time '0:00:xx.00'"),
        ("Dialogue: 0,0:00:01.00,0:00:61.00,Default,,0,0,0,,range", "out of range"),
    ],
)
def test_ass_damaged_dialogue_lines(tmp_path: Path, event: str, words: str) -> None:
    _damage(_fansub(tmp_path, [_EVENTS[4], event]), 15, words)


def test_ass_format_line_decides_the_fields_and_no_events_section_is_damage(tmp_path: Path) -> None:
    f = _write(
        tmp_path,
        "f.ass",
        "[Script Info]\n\n[Events]\nFormat: Start, End, Name, Text\n"
        "Dialogue: 0:00:01.00,0:00:02.00,Bo,Hi, all\n",
    )
    assert [(c.speaker, c.text) for c in read_script(f)] == [("Bo", "Hi, all")]
    g = _write(tmp_path, "g.ass", "[Script Info]\n\n[Events]\nFormat: Start, End, Text, Name\n")
    _damage(g, 4, "must end with Text")
    h = _write(tmp_path, "h.ass", "[Script Info]\nTitle: x\n")
    _damage(h, 1, "no [Events] section")


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("OPRomaji", ["op", "romaji"]),
        ("Sign_Top2", ["sign", "top", "2"]),
        ("TLNote", ["tl", "note"]),
        ("Default - Flashback", ["default", "flashback"]),
        ("OP日文", ["op", "日文"]),
    ],
)
def test_style_words(name: str, words: list[str]) -> None:
    assert style_words(name) == words


@pytest.mark.parametrize(
    ("style", "name", "effect", "text", "category"),
    [
        ("Default", "", "", "{\\an8}Top line, still dialogue.", None),
        ("Main", "", "", "{\\pos(640,650)}Positioned, nothing else: dialogue.", None),
        ("Flashback", "", "", "{\\i1}Remember?", None),
        ("Default", "Alice", "", "{\\pos(10,20)\\c&H00FF00&}A named actor speaks.", None),
        ("Default", "Ed", "", "An actor named Ed.", None),
        ("Default", "", "", "{\\move(0,0,100,100)}Sliding text", "sign"),
        ("Default", "", "", "{\\frz15}Tilted", "sign"),
        ("Typeset", "", "", "Plain", "sign"),
        ("ED-Eng", "", "", "Lyrics", "song"),
        ("Karaoke", "", "", "La", "song"),
        ("Default", "", "Banner;10", "Scrolling", "sign"),
        ("Default", "", "template line", "x", "karaoke"),
        ("Default", "", "", "{\\kf50}Sing", "karaoke"),
        ("中文注释", "", "", "注", "note"),
        ("中文", "", "", "对白", None),
    ],
)
def test_ass_default_rule(style: str, name: str, effect: str, text: str, category: str | None) -> None:
    reason, _ = classify(style, name, effect, text, None)
    assert (reason.split(" ", 1)[0] if reason else None) == category


# ------------------------------------------------------------------------------------------------ encodings


def test_legacy_encodings_read_with_the_flag_and_the_refusal_names_the_guess(tmp_path: Path) -> None:
    f = tmp_path / "fr.srt"
    f.write_bytes("1\n00:00:01,000 --> 00:00:02,000\nCafé crème, très bien, ça va.\n".encode("cp1252"))
    err = _damage(f, 3, "not valid UTF-8")
    assert err.hint is not None and "it looks like cp1252" in err.hint and "--encoding cp1252" in err.hint
    assert read_script(f, encoding="cp1252")[0].text == "Café crème, très bien, ça va."
    zh = tmp_path / "zh.srt"
    zh.write_bytes("1\n00:00:01,000 --> 00:00:02,000\n你好，世界。我们去吃饭吧。\n".encode("gb2312"))
    assert read_script(zh, encoding="gb2312")[0].text == "你好，世界。我们去吃饭吧。"
    assert read_script(f, encoding="latin-1")[0].text.startswith("Café")
    with pytest.raises(UsageError, match="--encoding klingon: unknown encoding"):
        read_script(f, encoding="klingon")
    bad = tmp_path / "bad.srt"
    bad.write_bytes(b"1\n00:00:01,000 --> 00:00:02,000\n\x81\n")
    _damage(bad, 3, "not valid cp1252", encoding="cp1252")


# ---------------------------------------------------------------------------------------------- contract

_GARBAGE = [
    "\x00\x01",
    "-->",
    "1\n-->\n",
    "WEBVTT\n\n-->\n",
    "[Events]\nDialogue: ,,,,,,,,,\n",
    "[Events]\nFormat: Text\n",
    "1\n00:00:01,000 --> 00:00:02,000\n",
    "999999999999:00:00,000 --> 999999999999:00:01,000\nbig\n",
    "{\\p1}m 0 0{\\p0}",
]


@pytest.mark.parametrize("ext", ["srt", "vtt", "ass", "tsv", "csv", "jsonl", "txt"])
@pytest.mark.parametrize("text", _GARBAGE)
def test_read_script_raises_only_input_errors(tmp_path: Path, ext: str, text: str) -> None:
    f = _write(tmp_path, f"x.{ext}", text)
    try:
        got = read_script_full(f)
    except InputError as e:
        assert str(e).startswith(f"{f}"), str(e)
        return
    assert got.n_events == len(got.cues) + len(got.skipped) and got.cues


# ------------------------------------------------------------------------------------------ CLI plumbing


def _cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, dict]:
    import json

    from fasttts_cli.cli.commands import main

    with pytest.raises(SystemExit) as ei:
        main([str(a) for a in args])
    out = capsys.readouterr().out
    return int(ei.value.code or 0), json.loads(out)


def test_dry_run_and_inspect_json_list_no_speech_and_skipped_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _fansub(tmp_path)
    code, r = _cli(capsys, "dub", f, "--voice", ALICE, "--dry-run", "--json", "--output-dir", tmp_path / "o")
    assert code == 0, r
    assert r["lines"]["no_speech"] == [1, 4]
    assert len(r["lines"]["skipped"]) == 10
    assert r["lines"]["skipped"][0] == {"source": f"{f}:15", "reason": "comment"}
    assert any("10 events left out" in w for w in r["warnings"])
    code, r = _cli(capsys, "inspect", f, "--voice", ALICE, "--json", "--styles", "Italics")
    assert code == 0, r
    assert [c["text"] for c in r["cues"]] == ["I wonder..."]
    assert len(r["skipped"]) == len(_EVENTS) - 1


def test_encoding_flag_on_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "fr.srt"
    f.write_bytes("1\n00:00:01,000 --> 00:00:02,000\nÇa va très bien.\n".encode("cp1252"))
    code, r = _cli(capsys, "inspect", f, "--voice", ALICE, "--json")
    assert (code, r["kind"]) == (2, "InputError") and "--encoding cp1252" in r["hint"]
    code, r = _cli(capsys, "inspect", f, "--voice", ALICE, "--json", "--encoding", "cp1252")
    assert code == 0 and r["cues"][0]["text"] == "Ça va très bien."
    code, r = _cli(capsys, "dub", f, "--voice", ALICE, "--json", "--dry-run", "--encoding", "nope")
    assert code == 2 and r["error"].startswith("--encoding nope")


def test_damage_is_one_error_line_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fasttts_cli.cli.commands import main

    f = _write(
        tmp_path,
        "g.srt",
        "1\n00:00:01,000 --> 00:00:02,000\nHello.\n2\n00:00:03;000 => 00:00:04;000\nBroken.\n",
    )
    with pytest.raises(SystemExit) as ei:
        main(["dub", str(f), "--voice", str(ALICE), "--dry-run", "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert ei.value.code == 2 and "Traceback" not in err
    errors = [ln for ln in err.splitlines() if ln.startswith("fasttts: error:")]
    assert errors == [f"fasttts: error: {f}:5: malformed timing line '00:00:03;000 => 00:00:04;000'"]


def test_an_unexpected_reader_failure_is_an_input_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fasttts_cli.dubbing import readers

    def broken(*args: object) -> None:
        raise ValueError("zip() argument 2 is longer than argument 1")

    monkeypatch.setitem(readers._READERS, "srt", broken)
    f = _write(tmp_path, "x.srt", "1\n00:00:01,000 --> 00:00:02,000\nHi\n")
    with pytest.raises(InputError, match=r"x\.srt: cannot read as SRT: ValueError: zip\(\)"):
        read_script(f)


def test_bilingual_overlap_names_both_styles_and_suggests_styles(tmp_path: Path) -> None:
    events = [
        "Dialogue: 0,0:00:01.00,0:00:03.00,Default,,0,0,0,,Good morning.",
        "Dialogue: 0,0:00:01.00,0:00:03.00,JP,,0,0,0,,おはよう。",
    ]
    err = _damage(_fansub(tmp_path, events), 15, "overlaps the cue at line 14")
    assert err.hint is not None and "'Default' and 'JP'" in err.hint and "--styles" in err.hint
    cues = read_script(_fansub(tmp_path, events), styles=parse_styles("default"))
    assert [c.text for c in cues] == ["Good morning."]


def test_an_srt_that_is_another_format_says_which(tmp_path: Path) -> None:
    err = _damage(_write(tmp_path, "a.srt", "[Script Info]\nTitle: x\n"), 1, "text before the first timing")
    assert err.hint is not None and "--format ass" in err.hint


def test_vtt_identifier_may_hold_arrows_and_settings_may_touch_the_end_time(tmp_path: Path) -> None:
    # W3C (vtt.js tests): the line above a "-->" line is the cue's identifier whatever it holds, and cue
    # settings may follow the end time with no space in between.
    got = read_script(
        _write(
            tmp_path,
            "w3c.vtt",
            "WEBVTT\n\n- - > -- > - -> -- <--\n00:00.000 --> 00:01.000\nArrows above.\n\n"
            "00:02.000 --> 00:03.000line:40% size:40%\nSettings touch.\n",
        )
    )
    assert [(c.start, c.end, c.text) for c in got] == [
        (0.0, 1.0, "Arrows above."),
        (2.0, 3.0, "Settings touch."),
    ]


def test_allow_overlap_turns_the_clash_into_a_warning_and_keeps_both(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "ov.srt",
        "1\n00:00:01,000 --> 00:00:03,000\nHello there.\n\n2\n00:00:02,000 --> 00:00:04,000\nAnd me.\n",
    )
    with pytest.raises(InputError, match=r"ov\.srt:6: cue overlaps") as e:
        read_script(path)
    assert "--allow-overlap" in str(e.value)
    got = read_script_full(path, allow_overlap=True)
    assert [c.text for c in got.cues] == ["Hello there.", "And me."]
    assert any("ov.srt:6: cue overlaps" in w and "--allow-overlap" in w for w in got.warnings)
