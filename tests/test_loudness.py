from __future__ import annotations

import numpy as np
import pytest

from fasttts_cli.audio.limiter import limit
from fasttts_cli.audio.loudness import level_line, normalize_loudness, normalize_report
from fasttts_cli.audio.loudness_meter import integrated_loudness, line_loudness, measure_loudness, true_peak

SR = 48000


def tone(freq: float, seconds: float, amp: float, phase: float = 0.0) -> np.ndarray:
    t = np.arange(round(seconds * SR)) / SR
    return (amp * np.sin(2 * np.pi * freq * t + phase)).astype(np.float32)


def speechish(seconds: float, seed: int = 0, amp: float = 0.05) -> np.ndarray:
    """Noise bursts (syllables) with pauses: loudness gating and crest factor like speech."""
    rng = np.random.default_rng(seed)
    n = round(seconds * SR)
    env = (np.sin(2 * np.pi * 3.0 * np.arange(n) / SR) > 0.2).astype(np.float32)
    return (amp * rng.standard_normal(n) * env).astype(np.float32)


def test_bs1770_reference_tone() -> None:
    # BS.1770: a 997 Hz sine at -20 dBFS peak, one channel, reads -23.0 LUFS (0 dBFS sine = -3.01 LUFS)
    lufs, tp = measure_loudness(tone(997, 5.0, 0.1), SR)
    assert lufs == pytest.approx(-23.0, abs=0.1)
    assert tp == pytest.approx(-20.0, abs=0.05)


def test_channels_add_power_and_lfe_is_ignored() -> None:
    mono = tone(997, 5.0, 0.1)
    stereo = np.stack([mono, mono])
    assert integrated_loudness(stereo, SR) == pytest.approx(-23.0 + 3.01, abs=0.1)
    six = np.zeros((6, mono.size), dtype=np.float32)
    six[2] = mono  # FC only
    assert integrated_loudness(six, SR) == pytest.approx(-23.0, abs=0.1)
    six_lfe = six.copy()
    six_lfe[3] = 0.5 * mono  # LFE is not part of BS.1770 loudness
    assert integrated_loudness(six_lfe, SR) == pytest.approx(-23.0, abs=0.1)


def test_true_peak_sees_inter_sample_peaks() -> None:
    # fs/4 sine at 45 degrees: every sample sits at 0.707 of the waveform's real peak.
    x = tone(SR / 4, 1.0, 0.5, phase=np.pi / 4)
    sample_peak = 20 * np.log10(np.max(np.abs(x)))
    assert sample_peak == pytest.approx(20 * np.log10(0.5) - 3.01, abs=0.05)
    assert true_peak(x, SR) == pytest.approx(20 * np.log10(0.5), abs=0.2)


def test_short_or_silent_measures_minus_inf() -> None:
    assert integrated_loudness(tone(440, 0.3, 0.1), SR) == float("-inf")
    assert integrated_loudness(np.zeros(SR, dtype=np.float32), SR) == float("-inf")


@pytest.mark.parametrize("target", [-23.0, -16.0])
def test_normalize_speechish_hits_target(target: float) -> None:
    y = normalize_loudness(speechish(6.0), SR, target_lufs=target, max_true_peak=-1.0)
    lufs, tp = measure_loudness(y, SR)
    assert abs(lufs - target) <= 0.5
    assert tp <= -1.0
    assert y.dtype == np.float32


def test_normalize_limits_a_loud_peaky_signal() -> None:
    # Quiet bed with full-scale clicks: gain to target would put the clicks ~15 dB over the ceiling.
    x = speechish(5.0, seed=3, amp=0.01)
    x[:: SR // 3] += 0.9
    y, rep = normalize_report(x, SR, target_lufs=-16.0, max_true_peak=-1.0)
    lufs, tp = measure_loudness(y, SR)
    assert rep.limited and rep.max_reduction_db > 6.0
    assert abs(lufs - (-16.0)) <= 0.5
    assert tp <= -1.0
    assert rep.on_target and rep.output_true_peak == pytest.approx(tp, abs=1e-6)


def test_normalize_multichannel_keeps_balance() -> None:
    left = speechish(4.0, seed=5)
    st = np.stack([left, 0.5 * left])
    y = normalize_loudness(st, SR, -23.0, -1.0)
    lufs, tp = measure_loudness(y, SR)
    assert abs(lufs + 23.0) <= 0.5 and tp <= -1.0
    assert np.max(np.abs(y[1])) / np.max(np.abs(y[0])) == pytest.approx(0.5, rel=0.01)


def test_normalize_silence_is_left_alone() -> None:
    z = np.zeros(SR, dtype=np.float32)
    y = normalize_loudness(z, SR)
    assert np.array_equal(y, z)


def test_limiter_holds_ceiling_and_leaves_quiet_parts() -> None:
    x = tone(200, 2.0, 0.1)
    x[SR // 2 : SR // 2 + 480] *= 10.0  # a 10 ms burst to 0 dBFS
    y = limit(x, SR, -3.0)
    assert true_peak(y, SR) <= -3.0 + 0.05
    # far from the burst (release has finished) the signal is untouched
    assert np.allclose(y[int(1.5 * SR) :], x[int(1.5 * SR) :], atol=1e-6)
    assert np.allclose(y[: SR // 4], x[: SR // 4], atol=1e-6)


def test_level_line_evens_out_lines() -> None:
    loud, quiet = speechish(2.0, seed=1, amp=0.2), speechish(2.0, seed=2, amp=0.01)
    a, b = level_line(loud, SR, -23.0), level_line(quiet, SR, -23.0)
    assert integrated_loudness(a, SR) == pytest.approx(-23.0, abs=0.3)
    assert integrated_loudness(b, SR) == pytest.approx(-23.0, abs=0.3)


def test_level_line_short_line_falls_back_to_rms() -> None:
    short = np.concatenate([np.zeros(2400, np.float32), tone(997, 0.25, 0.02), np.zeros(2400, np.float32)])
    assert integrated_loudness(short, SR) == float("-inf")  # too short for a gating block
    assert line_loudness(short, SR) == pytest.approx(-23.0 - 14.0, abs=0.3)  # 0.02 = 0.1 - 14 dB
    y = level_line(short, SR, -23.0)
    assert line_loudness(y, SR) == pytest.approx(-23.0, abs=0.3)
    # a long line of the same tone lands at the same level: lines sound even
    long = level_line(tone(997, 2.0, 0.3), SR, -23.0)
    assert np.max(np.abs(y)) == pytest.approx(np.max(np.abs(long)), rel=0.05)


def test_level_line_silence_and_gain_cap() -> None:
    z = np.zeros(SR, dtype=np.float32)
    assert np.array_equal(level_line(z, SR), z)
    faint = tone(997, 1.0, 2e-3)  # -57 LUFS: capped at +30 dB rather than raised 34 dB
    y = level_line(faint, SR, -23.0)
    assert np.max(np.abs(y)) == pytest.approx(2e-3 * 10 ** (30 / 20), rel=0.01)
    hum = tone(997, 1.0, 1e-4)  # never above -60 dBFS: treated as silence, not blown up into noise
    assert np.array_equal(level_line(hum, SR), hum)
