"""Truncated media is refused before synthesis: each cut file is exit 2 naming it; intact files pass."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.errors import InputError
from fasttts_cli.media import intact
from fasttts_cli.media.ffmpeg import ffmpeg_path, run_ffmpeg
from fasttts_cli.media.probe import probe, require_video
from tests.test_cli import ALICE, SAMPLES, one_error_line, run

DEMO = SAMPLES / "demo.mp4"
needs_demo = pytest.mark.skipif(not DEMO.is_file() or not ALICE.is_file(), reason="samples not generated yet")
FRACTIONS = (0.1, 0.5, 0.9)


def _has_encoder(name: str) -> bool:
    import subprocess

    out = subprocess.run([ffmpeg_path(), "-hide_banner", "-encoders"], capture_output=True, text=True)
    return any(line.split()[1:2] == [name] for line in out.stdout.splitlines() if line.strip())


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo video's streams in the containers a user brings: all 20 s long."""
    d = tmp_path_factory.mktemp("media")
    src = str(DEMO)
    made = {"mp4": DEMO}  # faststart (index first): the user's reproducer is this file cut in half
    recipes = {
        "mkv": ["-i", src, "-map", "0", "-c", "copy"],
        "m4a": ["-i", src, "-vn", "-c:a", "copy", "-movflags", "+faststart"],
        "wav": ["-i", src, "-vn", "-c:a", "pcm_s16le"],
        "moovend.mp4": ["-i", src, "-map", "0", "-c", "copy"],  # index written last
    }
    if _has_encoder("libmp3lame"):
        recipes["mp3"] = ["-i", src, "-vn", "-c:a", "libmp3lame", "-b:a", "128k"]
    for ext, args in recipes.items():
        out = d / f"demo.{ext}"
        run_ffmpeg([*args, str(out)], what=f"making {out.name}")
        made[ext] = out
    return made


def _cut(src: Path, fraction: float, dest: Path) -> Path:
    data = src.read_bytes()
    dest.write_bytes(data[: int(len(data) * fraction)])
    return dest


# -- pure parts ------------------------------------------------------------------------------------------


def test_parse_framecrc_takes_each_streams_last_packet_end() -> None:
    text = "\n".join(
        [
            "#tb 0: 1/12800",
            "#tb 1: 1/48000",
            "0,      -1024,          0,      512,     5161, 0xc0c99e4e",
            "1,      -1024,      -1024,     1024,      180, 0x3e8549b8, F=0x5, S=1",
            "0,     124416,     124928,      512,      853, 0xec28b0d6, F=0x2",  # reordered: not the max pts
            "0,     124928,     124416,      512,      853, 0xec28b0d6",
            "1,     959488,     959488,      512,      239, 0x53bc6b6d",
            "2,          0,     999999,        1,        1, 0x0",  # no #tb line: not a stream we mapped
        ]
    )
    ends = intact.parse_framecrc(text.splitlines())
    assert ends == {0: pytest.approx((124928 + 512) / 12800), 1: pytest.approx(20.0)}


def test_tolerance_is_half_a_second_or_half_a_percent() -> None:
    assert intact.tolerance(10.0) == 0.5
    assert intact.tolerance(100.0) == 0.5
    assert intact.tolerance(7200.0) == pytest.approx(36.0)


def _wav(path: Path, seconds: float, sr: int = 16000) -> Path:
    sf.write(path, np.zeros(int(seconds * sr), dtype=np.float32), sr, subtype="PCM_16")
    return path


def test_wav_lengths_reads_the_header_and_the_bytes(tmp_path: Path) -> None:
    whole = _wav(tmp_path / "a.wav", 4.0)
    assert intact.wav_lengths(whole) == (pytest.approx(4.0), pytest.approx(4.0))
    cut = _cut(whole, 0.5, tmp_path / "cut.wav")
    announced, held = intact.wav_lengths(cut)
    assert announced == pytest.approx(4.0) and held == pytest.approx(2.0, abs=0.01)
    assert intact.wav_lengths(DEMO) is None  # not a WAV


def test_wav_written_to_a_pipe_announces_nothing(tmp_path: Path) -> None:
    # Writers that cannot seek back leave 0xFFFFFFFF as the data size: no length to fall short of.
    p = _wav(tmp_path / "s.wav", 1.0)
    data = bytearray(p.read_bytes())
    at = data.index(b"data")
    data[at + 4 : at + 8] = struct.pack("<I", 0xFFFFFFFF)
    p.write_bytes(bytes(data))
    assert intact.wav_lengths(p) is None
    probe(p, check_complete=True)


# -- intact files pass, cut files are refused --------------------------------------------------------------


@needs_demo
@pytest.mark.parametrize("kind", ["mp4", "mkv", "m4a", "wav", "moovend.mp4", "mp3"])
def test_intact_files_pass(media: dict[str, Path], kind: str) -> None:
    if kind not in media:
        pytest.skip(f"this ffmpeg cannot make a {kind} file")
    info = probe(media[kind], check_complete=True)
    assert info.duration == pytest.approx(20.0, abs=0.05)


@needs_demo
def test_the_sample_voices_pass() -> None:
    for voice in sorted((SAMPLES / "voices").glob("*.wav")):
        probe(voice, check_complete=True)


@needs_demo
@pytest.mark.parametrize("fraction", FRACTIONS)
@pytest.mark.parametrize("kind", ["mp4", "mkv", "m4a", "wav", "mp3"])
def test_cut_files_are_refused_naming_the_file(
    media: dict[str, Path], tmp_path: Path, kind: str, fraction: float
) -> None:
    if kind not in media:
        pytest.skip(f"this ffmpeg cannot make a {kind} file")
    cut = _cut(media[kind], fraction, tmp_path / f"cut.{kind}")
    probe(cut)  # without the check it reads as a (shorter) media file: the silent acceptance of the issue
    with pytest.raises(InputError) as ei:
        probe(cut, check_complete=True)
    msg = str(ei.value)
    assert msg.startswith(f"{cut}: truncated or corrupt: ")
    # It says how far the data goes, close to the fraction of the bytes that is left.
    end = float(re.search(r" ends? at (\d+\.\d\d) s but ", msg)[1])
    assert end == pytest.approx(20.0 * fraction, abs=1.5)
    assert ei.value.exit_code == 2


@needs_demo
def test_half_of_the_demo_video_says_where_its_streams_end(tmp_path: Path) -> None:
    cut = _cut(DEMO, 0.5, tmp_path / "half.mp4")
    with pytest.raises(InputError, match=r"the streams end at 9\.\d\d s but the container says 20\.00 s"):
        require_video(cut, check_complete=True)


@needs_demo
def test_an_mp4_cut_just_after_its_index_has_no_packet(tmp_path: Path) -> None:
    data = DEMO.read_bytes()
    cut = tmp_path / "head.mp4"
    cut.write_bytes(data[: data.index(b"mdat") + 100])  # the header and index, hardly any data
    with pytest.raises(InputError, match=r"head\.mp4: truncated or corrupt: no stream has any packet but"):
        probe(cut, check_complete=True)


@needs_demo
@pytest.mark.parametrize("fraction", FRACTIONS)
def test_mp4_with_its_index_at_the_end_cut_is_refused(
    media: dict[str, Path], tmp_path: Path, fraction: float
) -> None:
    cut = _cut(media["moovend.mp4"], fraction, tmp_path / "cut.mp4")
    with pytest.raises(InputError) as ei:
        probe(cut)  # no index at all: even the plain probe refuses it, and says why
    assert str(ei.value).startswith(f"{cut}: truncated or corrupt: ")
    assert "moov atom not found" in str(ei.value)


@needs_demo
def test_a_stream_that_stops_early_is_named(tmp_path: Path) -> None:
    # Picture for 8 s, sound for all 20 s: the container runs on past the video.
    out = tmp_path / "short_video.mkv"
    run_ffmpeg(
        ["-t", "8", "-i", str(DEMO), "-i", str(DEMO), "-map", "0:v", "-map", "1:a", "-c", "copy", str(out)],
        what="making a file whose video stops early",
    )
    short = r"its video stream 0:0 ends at [78]\.\d\d s but the container says 20\.0\d s"
    with pytest.raises(InputError, match=short):
        probe(out, check_complete=True)


@needs_demo
def test_an_intact_file_is_checked_from_its_last_seconds_only(
    media: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # What keeps the check cheap on a 2-hour film: one read, starting near the end.
    calls: list[float | None] = []
    real = intact._read_ends

    def spy(path, streams, since):
        calls.append(since)
        return real(path, streams, since)

    monkeypatch.setattr(intact, "_read_ends", spy)
    probe(media["mkv"], check_complete=True)
    assert len(calls) == 1 and calls[0] is not None and calls[0] > 15.0


@needs_demo
def test_a_cut_file_is_looked_at_further_back_not_read_whole(
    media: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An MP4 seeks through its index, here to data that is not there: the first window holds no packet.
    cut = _cut(media["mp4"], 0.75, tmp_path / "cut.mp4")  # about 15 of 20 s
    calls: list[float | None] = []
    real = intact._read_ends

    def spy(path, streams, since):
        calls.append(since)
        return real(path, streams, since)

    monkeypatch.setattr(intact, "_read_ends", spy)
    with pytest.raises(InputError, match=r"the streams end at 1[45]\.\d\d s"):
        probe(cut, check_complete=True)
    # The last 3.5 s hold nothing; the next window, four times as long, finds the end without reading it all.
    assert len(calls) == 2 and None not in calls and calls[1] < calls[0]


# -- through the CLI: exit 2 from `dub --dry-run`, before any synthesis -----------------------------------


@needs_demo
@pytest.mark.parametrize(
    ("flag", "kind"),
    [("--video", "mp4"), ("--video", "mkv"), ("--background", "mkv"), ("--voice", "wav"), ("--voice", "m4a")],
)
def test_dry_run_refuses_a_cut_input(
    capsys, media: dict[str, Path], tmp_path: Path, flag: str, kind: str
) -> None:
    cut = _cut(media[kind], 0.5, tmp_path / f"cut.{kind}")
    voice = [] if flag == "--voice" else ["--voice", str(ALICE)]
    args = ["dub", SAMPLES / "demo.srt", *voice, flag, cut, "--dry-run", "-o", tmp_path / "out.mp4"]
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert str(cut) in line and "truncated or corrupt" in line


@needs_demo
def test_dry_run_accepts_the_intact_inputs(capsys, media: dict[str, Path], tmp_path: Path) -> None:
    args = ["dub", SAMPLES / "demo.srt", "--voice", media["wav"], "--video", media["mkv"]]
    args += ["--background", media["m4a"], "--dry-run", "-o", tmp_path / "out.mp4"]
    code, _, err = run(capsys, *args)
    assert code == 0, err


@needs_demo
def test_dry_run_refuses_a_cut_emotion_reference(capsys, media: dict[str, Path], tmp_path: Path) -> None:
    cut = _cut(media["m4a"], 0.5, tmp_path / "angry.m4a")
    args = ["dub", SAMPLES / "demo.srt", "--voice", ALICE, "--emotion-audio", cut, "--dry-run"]
    code, _, err = run(capsys, *args, "-o", tmp_path / "out.wav")
    assert code == 2 and str(cut) in one_error_line(err) and "truncated" in err


@needs_demo
def test_synth_refuses_a_cut_voice_before_loading_a_model(capsys, media: dict[str, Path], tmp_path) -> None:
    cut = _cut(media["wav"], 0.5, tmp_path / "voice.wav")
    code, out, err = run(capsys, "synth", "Hello there.", "--voice", cut, "-o", tmp_path / "x.wav")
    assert code == 2 and out == "" and not (tmp_path / "x.wav").exists()
    assert str(cut) in one_error_line(err) and "truncated" in err
