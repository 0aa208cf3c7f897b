from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.audio.load import (
    check_reference_voice,
    inspect_reference_voice,
    load_audio,
    load_audio_channels,
    peak_dbfs,
    resample,
    rms_dbfs,
)
from fasttts_cli.errors import InputError
from fasttts_cli.media.ffmpeg import run_ffmpeg


def tone(freq: float, seconds: float, sr: int, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * sr)) / sr
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def dominant_freq(x: np.ndarray, sr: int) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.argmax(spec) * sr / x.size)


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("audio_media")
    files = {}
    # Stereo 44.1 kHz MP3/M4A (decoded by ffmpeg), left 440 Hz, right 880 Hz.
    lavfi = "sine=f=440:d=1:r=44100[l];sine=f=880:d=1:r=44100[r];[l][r]join=inputs=2:channel_layout=stereo"
    for ext, codec in (("mp3", "libmp3lame"), ("m4a", "aac")):
        files[ext] = d / f"tone.{ext}"
        run_ffmpeg(["-filter_complex", lavfi, "-c:a", codec, str(files[ext])], what="test media")
    files["mp4"] = d / "clip.mp4"
    run_ffmpeg(
        [
            *(
                "-f",
                "lavfi",
                "-i",
                "testsrc2=s=64x36:r=10:d=1",
                "-f",
                "lavfi",
                "-i",
                "sine=f=1000:d=1:r=48000",
            ),
            *("-c:v", "libx264", "-c:a", "aac", "-shortest", str(files["mp4"])),
        ],
        what="test media",
    )
    files["video_only"] = d / "silent_video.mp4"
    run_ffmpeg(
        ["-f", "lavfi", "-i", "testsrc2=s=64x36:r=10:d=1", "-c:v", "libx264", str(files["video_only"])],
        what="t",
    )
    return files


def test_load_wav_resamples_and_mixes_down(tmp_path: Path) -> None:
    left, right = tone(300, 1.0, 24000, 0.5), tone(300, 1.0, 24000, 0.3)
    p = tmp_path / "st.wav"
    sf.write(p, np.stack([left, right], axis=1), 24000, subtype="PCM_16")
    x = load_audio(p)
    assert x.dtype == np.float32 and x.ndim == 1
    assert x.size == 48000
    assert abs(dominant_freq(x, 48000) - 300) < 2
    # mono mixdown is the channel mean: peak (0.5 + 0.3) / 2
    assert peak_dbfs(x[1000:-1000]) == pytest.approx(20 * np.log10(0.4), abs=0.1)


def test_load_audio_channels_keeps_channels(media: dict[str, Path]) -> None:
    x = load_audio_channels(media["m4a"], 48000)
    assert x.shape[0] == 2
    assert abs(x.shape[1] - 48000) < 3000  # AAC priming/padding adds a little
    mid = slice(4800, 40000)
    assert abs(dominant_freq(x[0, mid], 48000) - 440) < 3
    assert abs(dominant_freq(x[1, mid], 48000) - 880) < 3


@pytest.mark.parametrize("ext", ["mp3", "m4a", "mp4"])
def test_load_audio_through_ffmpeg(media: dict[str, Path], ext: str) -> None:
    x = load_audio(media[ext], 48000)
    assert x.ndim == 1 and x.dtype == np.float32
    assert abs(x.size - 48000) < 3000
    expected = 1000 if ext == "mp4" else 440  # mono mix of 440+880: 440 Hz and 880 Hz at equal level
    f = dominant_freq(x[4800:40000], 48000)
    assert abs(f - expected) < 3 or (ext != "mp4" and abs(f - 880) < 3)


def test_resample_shapes_and_frequency() -> None:
    x = tone(1000, 1.0, 24000)
    y = resample(x, 24000, 48000)
    assert y.size == 48000 and y.dtype == np.float32
    assert abs(dominant_freq(y, 48000) - 1000) < 2
    st = np.stack([x, 0.5 * x])
    z = resample(st, 24000, 16000)
    assert z.shape == (2, 16000)
    assert np.max(np.abs(z[1, 1000:-1000])) == pytest.approx(0.25, abs=0.01)
    assert resample(x, 24000, 24000) is not x  # a copy, never the caller's buffer


def test_level_helpers() -> None:
    x = tone(1000, 1.0, 48000, 0.5)
    assert peak_dbfs(x) == pytest.approx(-6.02, abs=0.01)
    assert rms_dbfs(x) == pytest.approx(-9.03, abs=0.02)
    assert rms_dbfs(np.zeros(10)) == float("-inf")


def _write(path: Path, x: np.ndarray, sr: int = 24000) -> Path:
    sf.write(path, x, sr, subtype="PCM_16")
    return path


def test_reference_voice_ok(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    env = np.abs(np.sin(np.arange(48000) / 2000))
    speechish = (0.1 * rng.standard_normal(48000) * env).astype(np.float32)
    p = _write(tmp_path / "ref.wav", speechish)
    assert check_reference_voice(p) == pytest.approx(2.0, abs=0.01)
    assert inspect_reference_voice(p).warnings == []


def test_reference_voice_too_short(tmp_path: Path) -> None:
    p = _write(tmp_path / "short.wav", tone(200, 0.5, 24000))
    with pytest.raises(InputError, match=r"short\.wav: reference voice is too short \(0\.50 s"):
        check_reference_voice(p)


def test_reference_voice_silent(tmp_path: Path) -> None:
    p = _write(tmp_path / "quiet.wav", tone(200, 2.0, 24000, amp=0.0005))  # about -69 dBFS RMS
    with pytest.raises(InputError, match=r"quiet\.wav: reference voice is silent"):
        check_reference_voice(p)


def test_reference_voice_missing_and_corrupt(tmp_path: Path, media: dict[str, Path]) -> None:
    with pytest.raises(InputError, match=r"nope\.wav: no such file"):
        check_reference_voice(tmp_path / "nope.wav")
    bad = tmp_path / "bad.wav"
    bad.write_text("this is not audio\n" * 20)
    with pytest.raises(InputError, match=r"bad\.wav: not a media file"):
        check_reference_voice(bad)
    with pytest.raises(InputError, match=r"silent_video\.mp4: no audio stream"):
        check_reference_voice(media["video_only"])


def test_reference_voice_long_is_a_warning(tmp_path: Path) -> None:
    p = _write(tmp_path / "long.wav", tone(200, 31.0, 8000, 0.3), sr=8000)
    check = inspect_reference_voice(p)
    assert check.duration == pytest.approx(31.0, abs=0.01)
    assert len(check.warnings) == 1 and "long (31.0 s)" in check.warnings[0]
