"""Tempo change through ffmpeg: duration, pitch, the atempo fallback, trimming."""

from __future__ import annotations

import numpy as np
import pytest

from fasttts_cli.audio.tempo import atempo_chain, change_tempo, trim_to
from fasttts_cli.media.ffmpeg import ffmpeg_filters

SR = 24000


def tone(freq: float = 220.0, seconds: float = 2.0, sr: int = SR) -> np.ndarray:
    t = np.arange(round(seconds * sr)) / sr
    # A few harmonics and a slow amplitude wobble, so it is closer to a voiced vowel than a pure sine.
    x = sum(np.sin(2 * np.pi * freq * k * t) / k for k in (1, 2, 3)) * (0.6 + 0.2 * np.sin(2 * np.pi * 3 * t))
    return (0.3 * x).astype(np.float32)


def dominant_hz(x: np.ndarray, sr: int = SR) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spec) * sr / len(x))


METHODS = ["atempo"] + (["rubberband"] if "rubberband" in ffmpeg_filters() else [])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("factor", [0.8, 1.1, 1.25, 1.6])
def test_duration_and_pitch(method: str, factor: float) -> None:
    x = tone()
    y = change_tempo(x, SR, factor, method=method)
    assert y.dtype == np.float32 and y.ndim == 1
    assert abs(len(y) - len(x) / factor) <= 0.01 * len(x) / factor
    assert dominant_hz(y) == pytest.approx(220.0, rel=0.03)
    # Not silence, not clipped, not a copy of the input.
    rms_in, rms_out = np.sqrt(np.mean(x**2)), np.sqrt(np.mean(y**2))
    assert 0.5 * rms_in < rms_out < 2.0 * rms_in
    assert np.max(np.abs(y)) < 1.0


@pytest.mark.parametrize("method", METHODS)
def test_timing_of_a_burst_is_scaled(method: str) -> None:
    # Tone only between 0.5 s and 1.5 s: at 1.25x it should sit at 0.4..1.2 s (stretcher smear allowed).
    x = tone(seconds=2.0)
    n = len(x)
    x[: n // 4] = 0.0
    x[3 * n // 4 :] = 0.0
    y = change_tempo(x, SR, 1.25, method=method)
    loud = np.flatnonzero(np.abs(y) > 0.05)
    assert loud[0] / SR == pytest.approx(0.4, abs=0.03)
    assert loud[-1] / SR == pytest.approx(1.2, abs=0.03)


def test_factor_one_is_untouched() -> None:
    x = tone(seconds=0.5)
    assert change_tempo(x, SR, 1.0) is x


def test_auto_uses_rubberband_when_present() -> None:
    if "rubberband" not in ffmpeg_filters():
        pytest.skip("this ffmpeg has no rubberband filter")
    x = tone(seconds=1.0)
    auto = change_tempo(x, SR, 1.2)
    assert np.array_equal(auto, change_tempo(x, SR, 1.2, method="rubberband"))
    assert not np.array_equal(auto, change_tempo(x, SR, 1.2, method="atempo"))


def test_atempo_chain_stages_within_range() -> None:
    assert atempo_chain(1.25) == "atempo=1.25000000"
    assert atempo_chain(2.0) == "atempo=2.00000000"
    stages = [float(s.split("=")[1]) for s in atempo_chain(3.0).split(",")]
    assert len(stages) == 2 and all(0.5 <= s <= 2.0 for s in stages)
    assert np.prod(stages) == pytest.approx(3.0)
    stages = [float(s.split("=")[1]) for s in atempo_chain(0.2).split(",")]
    assert len(stages) == 3 and all(0.5 <= s <= 2.0 for s in stages)
    assert np.prod(stages) == pytest.approx(0.2)


def test_large_factor_through_atempo_chain() -> None:
    x = tone(seconds=3.0)
    y = change_tempo(x, SR, 3.0, method="atempo")
    assert len(y) == len(x) // 3
    assert dominant_hz(y) == pytest.approx(220.0, rel=0.03)


def test_tiny_clip_and_bad_arguments() -> None:
    x = tone(seconds=0.05)  # 1200 samples, below the stretchers' window
    assert len(change_tempo(x, SR, 1.25)) == 960
    assert len(change_tempo(x, SR, 0.8)) == 1500
    assert len(change_tempo(np.zeros(0, np.float32), SR, 1.25)) == 0
    with pytest.raises(ValueError):
        change_tempo(x, SR, 0.0)
    with pytest.raises(ValueError):
        change_tempo(x, SR, 1.2, method="sox")
    with pytest.raises(ValueError):
        change_tempo(np.zeros((2, 5000), np.float32), SR, 1.2)


def test_trim_to_fades_out() -> None:
    x = np.ones(SR, dtype=np.float32)
    y = trim_to(x, SR, 0.5, fade_ms=10)
    assert len(y) == SR // 2
    k = round(0.010 * SR)
    assert np.all(y[: len(y) - k] == 1.0)
    assert y[-1] == 0.0 and np.all(np.diff(y[-k:]) < 0)
    assert x[-1] == 1.0  # input untouched
    assert trim_to(x, SR, 2.0) is x
