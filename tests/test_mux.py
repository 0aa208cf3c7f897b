from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.audio.load import load_audio, load_audio_channels
from fasttts_cli.errors import InputError, UsageError
from fasttts_cli.media.ffmpeg import run_ffmpeg
from fasttts_cli.media.mux import container_lang, mux, normalize_lang, stream_md5, write_audio
from fasttts_cli.media.probe import parse_ffmpeg_info, probe, require_video
from fasttts_cli.partials import existing_partials

SR = 48000


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mux_media")
    f = {"video": d / "in.mp4", "dub": d / "dub.wav", "srt": d / "dub.srt", "audio_only": d / "music.m4a"}
    run_ffmpeg(
        [
            *(
                "-f",
                "lavfi",
                "-i",
                "testsrc2=s=96x54:r=25:d=1.2",
                "-f",
                "lavfi",
                "-i",
                "sine=f=220:d=1.2:r=44100",
            ),
            *(
                "-map",
                "0:v",
                "-map",
                "1:a",
                "-c:v",
                "libx264",
                "-preset",
                "ultrafast",
                "-c:a",
                "aac",
                "-ac",
                "2",
            ),
            *("-metadata:s:a:0", "language=eng", str(f["video"])),
        ],
        what="test media",
    )
    t = np.arange(SR) / SR
    write_audio(f["dub"], (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), SR)
    f["srt"].write_text("1\n00:00:00,100 --> 00:00:00,900\nHola.\n", encoding="utf-8")
    run_ffmpeg(
        ["-f", "lavfi", "-i", "sine=f=330:d=1", "-c:a", "aac", str(f["audio_only"])], what="test media"
    )
    return f


def test_mux_mp4_keep_original(media: dict[str, Path], tmp_path: Path) -> None:
    out = mux(media["video"], media["dub"], tmp_path / "ep.es.mp4", lang="es", keep_original=True,
              subtitles=media["srt"])  # fmt: skip
    info = probe(out)
    assert [v.codec for v in info.video_streams] == ["h264"]
    assert [a.codec for a in info.audio_streams] == ["aac", "aac"]
    assert [s.codec for s in info.subtitle_streams] == ["mov_text"]
    dub, orig = info.audio_streams
    assert dub.language == "spa" and dub.default and dub.title == "Dub (spa) — fasttts"
    assert orig.language == "eng" and not orig.default
    assert info.subtitle_streams[0].language == "spa"
    # video packets are bit-identical to the input's
    assert stream_md5(out, "v") == stream_md5(media["video"], "v")
    # +faststart: the index (moov) comes before the media data (mdat)
    head = out.read_bytes()
    assert head.index(b"moov") < head.index(b"mdat")
    assert not existing_partials(out)


def test_mux_mkv_replace_uses_opus_and_bibliographic_tag(media: dict[str, Path], tmp_path: Path) -> None:
    out = mux(
        media["video"],
        media["dub"],
        tmp_path / "ep.de.mkv",
        lang="de",
        title="Deutsch",
        subtitles=media["srt"],
    )
    info = probe(out)
    assert len(info.audio_streams) == 1
    a = info.audio_streams[0]
    assert (a.codec, a.language, a.title, a.default) == ("opus", "ger", "Deutsch", True)
    assert [s.codec for s in info.subtitle_streams] == ["subrip"]
    assert stream_md5(out, "v") == stream_md5(media["video"], "v")
    # the dub audio decodes back to the 440 Hz tone at 48 kHz
    x = load_audio(out)
    spec = np.abs(np.fft.rfft(x[4800:43200]))
    assert abs(np.argmax(spec) * SR / 38400 - 440) < 3


def test_mux_errors(media: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"music\.m4a: no video stream"):
        mux(media["audio_only"], media["dub"], tmp_path / "x.mp4", lang="spa")
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(InputError, match=r"file\.txt"):
        mux(media["video"], media["dub"], blocker / "out.mp4", lang="spa")
    with pytest.raises(UsageError, match=r"unsupported video container '\.avi'"):
        mux(media["video"], media["dub"], tmp_path / "x.avi", lang="spa")
    with pytest.raises(UsageError, match="--lang 'spanish'"):
        mux(media["video"], media["dub"], tmp_path / "x.mp4", lang="spanish")
    with pytest.raises(UsageError, match="overwrite the input"):
        mux(media["video"], media["dub"], media["video"], lang="spa")
    assert not list(tmp_path.glob(".*partial*"))


def test_failed_mux_leaves_nothing_behind(media: dict[str, Path], tmp_path: Path) -> None:
    bad_subs = tmp_path / "bad.srt"
    bad_subs.write_bytes(b"\x00\x01garbage" * 50)
    out = tmp_path / "out.mp4"
    with pytest.raises(Exception, match="ffmpeg failed"):
        mux(media["video"], media["dub"], out, lang="spa", subtitles=bad_subs)
    assert not out.exists() and not existing_partials(out)


@pytest.mark.parametrize(
    ("ext", "codec"),
    [("wav", "pcm_s24le"), ("flac", "flac"), ("m4a", "aac"), ("mp3", "mp3"), ("opus", "opus")],
)
def test_write_audio_formats(tmp_path: Path, ext: str, codec: str) -> None:
    t = np.arange(SR) / SR
    x = np.stack([0.3 * np.sin(2 * np.pi * 500 * t), 0.1 * np.sin(2 * np.pi * 500 * t)]).astype(np.float32)
    p = write_audio(tmp_path / f"dub.{ext}", x, SR)
    a = probe(p).audio_streams[0]
    assert (a.codec, a.channels) == (codec, 2)
    y = load_audio_channels(p, SR)
    assert y.shape[0] == 2 and abs(y.shape[1] - SR) < 3000
    if ext in ("wav", "flac"):  # lossless: 24-bit quantization only
        assert np.max(np.abs(y - x)) < 1e-6
    assert not list(tmp_path.glob(".*"))


def test_write_audio_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"\.xyz"):
        write_audio(tmp_path / "a.xyz", np.zeros(10, np.float32), SR)
    blocker = tmp_path / "f"
    blocker.write_text("x")
    with pytest.raises(InputError, match=str(blocker)):
        write_audio(blocker / "sub" / "a.wav", np.zeros(10, np.float32), SR)


def test_probe_errors(tmp_path: Path, media: dict[str, Path]) -> None:
    with pytest.raises(InputError, match=r"missing\.mp4: no such file"):
        probe(tmp_path / "missing.mp4")
    txt = tmp_path / "notes.mp4"
    txt.write_text("not a video")
    with pytest.raises(InputError, match=r"notes\.mp4: not a media file"):
        probe(txt)
    assert require_video(media["video"]).video_codec == "h264"
    info = probe(media["video"])
    assert info.duration == pytest.approx(1.2, abs=0.05)
    a = info.audio_streams[0]
    assert (a.codec, a.channels, a.layout, a.sample_rate, a.language) == ("aac", 2, "stereo", 44100, "eng")


def test_parse_ffmpeg_info_text() -> None:
    text = """Input #0, matroska,webm, from 'x.mkv':
  Duration: 01:02:03.50, start: 0.000000, bitrate: 378 kb/s
  Stream #0:0: Video: h264 (High), yuv420p(tv, bt709, progressive), 1920x1080, 23.98 fps, 1k tbn (default)
  Stream #0:1(jpn): Audio: eac3, 48000 Hz, 5.1(side), fltp, 640 kb/s (default)
    Metadata:
      title           : Surround
  Stream #0:2(eng): Audio: aac (LC), 44100 Hz, 7 channels, fltp
  Stream #0:3(und): Subtitle: ass (default) (forced)
At least one output file must be specified
"""
    info = parse_ffmpeg_info(Path("x.mkv"), text)
    assert info.duration == pytest.approx(3723.5) and info.start_time == 0.0
    assert info.video_streams[0].width == 1920 and info.video_streams[0].fps == pytest.approx(23.98)
    a, b = info.audio_streams
    assert (a.codec, a.layout, a.channels, a.language, a.title, a.default) == (
        "eac3",
        "5.1(side)",
        6,
        "jpn",
        "Surround",
        True,
    )
    assert (b.channels, b.audio_index, b.index) == (7, 1, 2)
    assert info.subtitle_streams[0].codec == "ass" and info.subtitle_streams[0].language is None


def test_language_codes() -> None:
    assert normalize_lang("es") == "spa"
    assert normalize_lang("es-ES") == "spa"
    assert normalize_lang("pt_BR") == "por"
    assert normalize_lang("ger") == "deu"
    assert normalize_lang("SPA") == "spa"
    assert container_lang("de", "matroska") == "ger"
    assert container_lang("de", "mp4") == "deu"
    assert container_lang("fr", "mov") == "fra"
    assert container_lang("haw", "mov") is None
    for bad in ("xx", "spanish", "", "e1"):
        with pytest.raises(UsageError, match="--lang"):
            normalize_lang(bad)
