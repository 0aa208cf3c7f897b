"""Plan: text cleanup, batching by voice and length, --only, JSON round trip, timing forecast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.dubbing.plan import Plan, clean_text, forecast, make_plan, parse_only
from fasttts_cli.dubbing.readers import read_script
from fasttts_cli.dubbing.speakers import VoiceMap
from fasttts_cli.errors import UsageError

A, B, N = Path("alice.wav"), Path("bob.wav"), Path("narrator.wav")
VOICES = VoiceMap(default=N, named={"ALICE": A, "BOB": B})
SAMPLES = Path(__file__).parent.parent / "samples"


def words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("<i>Hello</i>, <b>world</b>!", "Hello, world!"),
        ("{\\an8}{\\i1}Top{\\i0}\\Nline\\hhere", "Top line here"),
        ("<v Bob>Hi &amp; bye</v>", "Hi & bye"),
        ("♪ La la la ♪", ""),  # sung, not said
        ("# Happy birthday #", ""),
        ("¶ la la ¶", ""),
        ("♪ la la\nWhat was that?", "What was that?"),  # an unpaired marker: the line is lyrics
        ("He hums ♪ la la ♪ badly.", "He hums badly."),
        ("We're #1! C# minor.", "We're #1! C# minor."),  # a '#' inside a word is not music
        ("- Where are you going\n- Home.", "Where are you going Home."),  # no end punctuation above
        ("- Where are you going - Home.", "Where are you going Home."),  # the same read from one line
        ("— ¿Adónde vas?\n— A casa.", "¿Adónde vas? A casa."),
        ("♪♫", ""),
        ("[door slams] Who's there?", "Who's there?"),
        ("- Hi.\n- Hello.", "Hi. Hello."),
        ("- Hi. - Hello.", "Hi. Hello."),  # dashes after lines were joined by a reader
        ("I — well — no.", "I — well — no."),
        ("A well-known fact.", "A well-known fact."),
        ("  lots   of\t\n space  ", "lots of space"),
        ("Wait... what?!", "Wait... what?!"),
        ("Cafe\u0301", "Café"),  # NFC
    ],
)
def test_clean_text(raw: str, clean: str) -> None:
    assert clean_text(raw) == clean


def _cue(i: int, start: float, text: str, speaker: str | None) -> Cue:
    return Cue(i, start, start + 1.0, text, speaker, f"f:{i}")


def _cues() -> list[Cue]:
    # token counts (words): 1:3, 2:1, 3:5, 4:2, 5:4, 6:2, 7:0 (music only)
    return [
        _cue(1, 0, "one two three", "ALICE"),
        _cue(2, 2, "one", "BOB"),
        _cue(3, 4, "a b c d e", "alice"),
        _cue(4, 6, "x y", "ALICE"),
        _cue(5, 8, "p q r s", "BOB"),
        _cue(6, 10, "m n", None),
        _cue(7, 12, "♪ ♪", "BOB"),
    ]


def test_make_plan_batches_by_voice_then_length() -> None:
    plan = make_plan(_cues(), VOICES, words, batch_size=2, max_batch_tokens=100)
    assert [ln.index for ln in plan.lines] == [1, 2, 3, 4, 5, 6]
    assert plan.skipped == (7,)
    assert [ln.voice for ln in plan.lines] == [A, B, A, A, B, N]
    assert [ln.n_tokens for ln in plan.lines] == [3, 1, 5, 2, 4, 2]
    # ALICE sorted by tokens: 4(2), 1(3), 3(5) -> [4,1], [3]; BOB: 2(1), 5(4) -> [2,5]; default: [6]
    assert [(b.index, b.voice, b.line_indices) for b in plan.batches] == [
        (1, A, (4, 1)),
        (2, A, (3,)),
        (3, B, (2, 5)),
        (4, N, (6,)),
    ]


def test_max_batch_tokens_bounds_padded_size() -> None:
    # ALICE lines with 2, 3, 5 tokens: [4,1] pads to 2*3=6 <= 7; adding line 3 would pad to 3*5=15 > 7.
    plan = make_plan(_cues(), VOICES, words, batch_size=8, max_batch_tokens=7)
    alice = [b.line_indices for b in plan.batches if b.voice == A]
    assert alice == [(4, 1), (3,)]
    # A single line longer than the cap still gets a batch of its own.
    plan = make_plan(_cues(), VOICES, words, batch_size=8, max_batch_tokens=1)
    assert [b.line_indices for b in plan.batches if b.voice == A] == [(4,), (1,), (3,)]
    padded = {b["index"]: b["padded_tokens"] for b in plan.to_json()["batches"]}
    assert padded[3] == 5


def test_only_restricts_batches_but_keeps_lines() -> None:
    plan = make_plan(_cues(), VOICES, words, only={3, 5})
    assert len(plan.lines) == 6
    assert plan.selected == (3, 5)
    assert [b.line_indices for b in plan.batches] == [(3,), (5,)]
    with pytest.raises(UsageError, match=r"--only: no cue numbered 9, 12 \(cues: 1-7\)"):
        make_plan(_cues(), VOICES, words, only={3, 9, 12})


def test_bad_batch_flags() -> None:
    with pytest.raises(UsageError, match="--batch-size 0"):
        make_plan(_cues(), VOICES, words, batch_size=0)
    with pytest.raises(UsageError, match="--max-batch-tokens 0"):
        make_plan(_cues(), VOICES, words, max_batch_tokens=0)


def test_unmapped_speaker_in_plan() -> None:
    with pytest.raises(UsageError, match=r"no voice for CAROL\. Speakers found: CAROL: 1 line, NO VOICE"):
        make_plan([_cue(1, 0, "hi", "CAROL")], VoiceMap(default=None, named={"ALICE": A}), words)


def test_untimed_cues_are_rejected() -> None:
    with pytest.raises(ValueError, match="layout_untimed"):
        make_plan([Cue(1, None, None, "hi", None, "f:1")], VOICES, words)


def test_plan_json_round_trip() -> None:
    plan = make_plan(_cues(), VOICES, words, batch_size=2, only={1, 2, 3})
    data = json.loads(json.dumps(plan.to_json()))
    assert data["lines"][0] == {
        "index": 1,
        "text": "one two three",
        "speaker": "ALICE",
        "voice": "alice.wav",
        "start": 0,
        "end": 1.0,
        "n_tokens": 3,
        "source": "f:1",
        "synthesize": True,
    }
    assert [ln["synthesize"] for ln in data["lines"]] == [True, True, True, False, False, False]
    assert Plan.from_json(data) == plan


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("3", {3}), ("3,7-9", {3, 7, 8, 9}), (" 1 , 2-2 ,5 - 6", {1, 2, 5, 6}), ("4,4,3-4", {3, 4})],
)
def test_parse_only(spec: str, expected: set[int]) -> None:
    assert parse_only(spec) == expected


@pytest.mark.parametrize("spec", ["", "a", "0", "3-1", "1,,2", "2.5", "-3"])
def test_parse_only_rejects(spec: str) -> None:
    with pytest.raises(UsageError, match="--only"):
        parse_only(spec)


@pytest.mark.parametrize("spec", ["", " ", ",", " , ", ",,,"])
def test_parse_only_refuses_a_selection_with_no_cue(spec: str) -> None:
    with pytest.raises(UsageError) as ei:
        parse_only(spec)
    assert str(ei.value) == f'--only "{spec}": empty selection; give cue numbers like 3,7-9'


def test_forecast_verdicts() -> None:
    cues = [
        Cue(1, 0.0, 2.0, "x" * 15, "ALICE", "f:1"),  # 1.0 s natural in a 2.0 s slot: fits
        Cue(2, 2.5, 3.5, "x" * 21, "BOB", "f:2"),  # 1.4 s, slot 1.0, room to 5.0-0.08: borrows
        Cue(3, 5.0, 6.0, "x" * 24, "ALICE", "f:3"),  # 1.6 s, room 6.5-0.08-5.0=1.42: speedup 1.127
        Cue(4, 6.5, 7.5, "x" * 30, "BOB", "f:4"),  # 2.0 s, room 8.0-0.08-6.5=1.42: 1.408 > 1.25 overflow
        Cue(5, 8.0, 9.0, "x" * 30, "ALICE", "f:5"),  # last: room to media_end 9.5 -> 1.5 s: 1.333 overflow
    ]
    plan = make_plan(cues, VOICES, words)
    fc = forecast(plan, chars_per_second=15.0, max_speedup=1.25, min_gap=0.08, media_end=9.5)
    assert [f["verdict"] for f in fc] == ["fits", "borrows", "speedup", "overflow", "overflow"]
    assert [f["speedup"] for f in fc] == [1.0, 1.0, pytest.approx(1.127, abs=1e-3), 1.408, 1.333]
    assert fc[1]["room"] == pytest.approx(2.42)
    # Without media_end the last line may run on.
    assert forecast(plan)[-1]["verdict"] == "borrows"


def test_forecast_on_demo_needs_one_speedup() -> None:
    plan = make_plan(read_script(SAMPLES / "demo.tsv"), VoiceMap(default=N, named={}), words)
    # Piper's draft voice speaks about 17 characters per second; the demo's cue 5 is the tight one.
    fc = forecast(plan, chars_per_second=17.0, media_end=20.0)
    tight = [f["index"] for f in fc if f["verdict"] in ("speedup", "overflow")]
    assert tight == [5]
