"""Speaker -> voice mapping: --voice flags, case-insensitive names, errors that list what was found."""

from __future__ import annotations

from pathlib import Path

import pytest

from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.dubbing.readers import read_script
from fasttts_cli.dubbing.speakers import VoiceMap, check_voices, parse_voice_flags, unused_voices
from fasttts_cli.errors import InputError, UsageError

DATA = Path(__file__).parent / "data" / "inputs"


@pytest.fixture
def wavs(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name in ("alice", "bob", "narrator", "a=b"):
        p = tmp_path / f"{name}.wav"
        p.write_bytes(b"RIFF")  # existence is all parse_voice_flags checks; audio checks live in audio.py
        out[name] = p
    return out


def test_parse_voice_flags(wavs: dict[str, Path]) -> None:
    vm = parse_voice_flags([f"ALICE={wavs['alice']}", f" Bob = {wavs['bob']}", str(wavs["narrator"])])
    assert vm.default == wavs["narrator"]
    assert vm.named == {"ALICE": wavs["alice"], "Bob": wavs["bob"]}
    assert vm.resolve(" alice ") == wavs["alice"]
    assert vm.resolve("BOB") == wavs["bob"]
    assert vm.resolve("Carol") == wavs["narrator"]  # falls back to the default voice
    assert vm.resolve(None) == wavs["narrator"]


def test_existing_path_with_equals_sign_is_a_path(wavs: dict[str, Path]) -> None:
    vm = parse_voice_flags([str(wavs["a=b"])])
    assert vm.default == wavs["a=b"] and vm.named == {}


def test_missing_voice_file_names_the_flag(wavs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(InputError) as ei:
        parse_voice_flags([f"ALICE={tmp_path / 'missing.wav'}"])
    assert str(ei.value).startswith(f"--voice ALICE={tmp_path / 'missing.wav'}: ")
    assert "not found" in str(ei.value)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["=x.wav"], "name before '=' is empty"),
        (["ALICE="], "no file given"),
        (["{n}", "{n}"], "default voice was already given"),
        (["ALICE={a}", "alice={b}"], "already has a voice"),
    ],
)
def test_bad_voice_flags(flags: list[str], words: str, wavs: dict[str, Path]) -> None:
    values = [f.format(n=wavs["narrator"], a=wavs["alice"], b=wavs["bob"]) for f in flags]
    with pytest.raises(UsageError, match=words):
        parse_voice_flags(values)


def test_unmapped_speakers_error_lists_every_speaker(wavs: dict[str, Path]) -> None:
    cues = read_script(DATA / "speakers.tsv")  # ALICE, Bob, Carol, (none), carol
    vm = parse_voice_flags([f"alice={wavs['alice']}", f"BOB={wavs['bob']}"])
    with pytest.raises(UsageError) as ei:
        check_voices(cues, vm)
    msg = str(ei.value)
    assert msg.startswith("no voice for Carol, (lines without a speaker). Speakers found: ")
    assert f"ALICE: 1 line, voice {wavs['alice']}" in msg
    assert f"Bob: 1 line, voice {wavs['bob']}" in msg
    assert "Carol: 2 lines, NO VOICE" in msg  # "Carol" and "carol" are one speaker
    assert "(no speaker): 1 line, NO VOICE" in msg
    assert "--voice NAME=PATH" in ei.value.hint


def test_default_voice_covers_everyone(wavs: dict[str, Path]) -> None:
    cues = read_script(DATA / "speakers.tsv")
    vm = parse_voice_flags([f"ALICE={wavs['alice']}", f"Dave={wavs['bob']}", str(wavs["narrator"])])
    check_voices(cues, vm)  # no error
    assert unused_voices(cues, vm) == ["Dave"]


def test_resolve_error_without_default() -> None:
    vm = VoiceMap(default=None, named={"ALICE": Path("a.wav")})
    with pytest.raises(UsageError, match="no voice for speaker 'Bob' \\(named voices given: ALICE\\)"):
        vm.resolve("Bob")
    with pytest.raises(UsageError, match="lines without a speaker"):
        vm.resolve(None)


def test_check_voices_without_speakers_needs_default() -> None:
    cues = [Cue(1, 0.0, 1.0, "Hi", None, "f:1")]
    with pytest.raises(UsageError, match="no voice for \\(lines without a speaker\\)"):
        check_voices(cues, VoiceMap(default=None, named={}))
    check_voices(cues, VoiceMap(default=Path("n.wav"), named={}))
