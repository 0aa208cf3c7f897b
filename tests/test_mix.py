from __future__ import annotations

import numpy as np
import pytest

from fasttts_cli.audio.mix import DuckOptions, duck_gain, mix_tracks, render_timeline, timeline_overrun
from fasttts_cli.errors import UsageError

SR = 48000


def test_render_timeline_places_and_sums() -> None:
    a = np.ones(100, dtype=np.float32)
    b = np.full(50, 2.0, dtype=np.float32)
    out = render_timeline([(0.001, a), (0.002, b)], 0.01, SR)  # 48 and 96 samples in
    assert out.dtype == np.float32 and out.size == 480
    assert out[47] == 0 and out[48] == 1 and out[95] == 1
    assert out[96] == 3 and out[145] == 3 and out[146] == 1 and out[148] == 0


def test_render_timeline_grows_to_fit() -> None:
    clip = np.ones(SR, dtype=np.float32)
    clips = [(1.5, clip)]
    out = render_timeline(clips, 2.0, SR)
    assert out.size == int(2.5 * SR)
    assert out[-1] == 1.0
    assert timeline_overrun(clips, 2.0, SR) == pytest.approx(0.5)
    assert timeline_overrun([(0.0, clip)], 2.0, SR) == 0.0
    with pytest.raises(ValueError):
        render_timeline([(-0.1, clip)], 2.0, SR)


def _dub_and_original(seconds: float = 4.0) -> tuple[np.ndarray, np.ndarray]:
    n = int(seconds * SR)
    t = np.arange(n) / SR
    dub = np.zeros(n, dtype=np.float32)
    dub[SR : 2 * SR] = (0.3 * np.sin(2 * np.pi * 300 * t[SR : 2 * SR])).astype(np.float32)
    original = (0.1 * np.sin(2 * np.pi * 50 * t)).astype(np.float32)
    return dub, original


def test_duck_gain_envelope() -> None:
    dub, _ = _dub_and_original()
    g = duck_gain(dub, SR, dub.size, DuckOptions(depth_db=-12.0, attack_s=0.05, release_s=0.3, hold_s=0.15))
    depth = 10 ** (-12 / 20)
    assert g[int(0.5 * SR)] == pytest.approx(1.0)
    assert g[int(0.94 * SR)] == pytest.approx(1.0, abs=0.01)  # before the 50 ms attack ramp
    assert g[int(1.0 * SR)] == pytest.approx(depth, rel=0.05)  # fully down when the dub starts
    assert g[int(1.5 * SR)] == pytest.approx(depth, rel=1e-3)
    assert g[int(2.1 * SR)] == pytest.approx(depth, rel=0.05)  # hold
    assert depth < g[int(2.3 * SR)] < 1.0  # releasing
    assert g[int(2.5 * SR)] == pytest.approx(1.0, abs=1e-3)  # released after hold + release
    assert np.all(np.diff(g[int(0.9 * SR) : int(1.0 * SR)]) <= 1e-6)  # monotone ramp down


def test_duck_mode_attenuates_original_only_while_dub_speaks() -> None:
    dub, original = _dub_and_original()
    out = mix_tracks(dub, "duck", original[None, :], "mono")
    assert out.shape == (1, dub.size) and out.dtype == np.float32
    bed = out[0] - dub  # what is left of the original

    def ratio(a: float, b: float) -> float:
        seg = slice(int(a * SR), int(b * SR))
        return float(np.sqrt(np.mean(bed[seg] ** 2)) / np.sqrt(np.mean(original[seg] ** 2)))

    assert ratio(0.2, 0.8) == pytest.approx(1.0, rel=1e-3)
    assert 20 * np.log10(ratio(1.2, 1.8)) == pytest.approx(-12.0, abs=0.1)
    assert ratio(3.0, 3.8) == pytest.approx(1.0, rel=1e-3)
    # the dub itself is summed at unity: no amix-style -6 dB
    seg = slice(int(1.2 * SR), int(1.8 * SR))
    assert np.allclose(out[0, seg] - bed[seg], dub[seg])


@pytest.mark.parametrize("mode", ["replace", "keep"])
def test_replace_and_keep_are_dub_only(mode: str) -> None:
    dub, original = _dub_and_original()
    out = mix_tracks(dub, mode, np.stack([original, original]), "stereo")
    assert out.shape == (2, dub.size)
    assert np.array_equal(out[0], dub) and np.array_equal(out[1], dub)


def test_stereo_duck_puts_dub_in_both_channels() -> None:
    dub, original = _dub_and_original()
    orig = np.stack([original, -original])
    out = mix_tracks(dub, "duck", orig, "stereo")
    g = duck_gain(dub, SR, dub.size)
    assert np.allclose(out[0], dub + original * g, atol=1e-6)
    assert np.allclose(out[1], dub - original * g, atol=1e-6)


def test_five_one_dub_goes_to_centre() -> None:
    dub, original = _dub_and_original()
    orig = np.stack([original * (c + 1) for c in range(6)])
    rep = mix_tracks(dub, "replace", orig, "5.1")
    assert rep.shape == (6, dub.size)
    assert np.array_equal(rep[2], dub)
    assert not np.any(rep[[0, 1, 3, 4, 5]])
    duck = mix_tracks(dub, "duck", orig, "5.1(side)")
    g = duck_gain(dub, SR, dub.size)
    for c in (0, 1, 3, 4, 5):  # the other channels keep the original untouched
        assert np.array_equal(duck[c], orig[c])
    assert np.allclose(duck[2], dub + orig[2] * g, atol=1e-6)
    everything = mix_tracks(dub, "duck", orig, "5.1", duck=DuckOptions(surround_all=True))
    assert np.allclose(everything[0], orig[0] * g, atol=1e-6)


def test_background_mode_mixes_stem_at_unity() -> None:
    dub, original = _dub_and_original()
    bg = np.stack([original, 0.5 * original])
    out = mix_tracks(dub, "background", None, "stereo", bg)
    assert np.allclose(out[0], dub + original) and np.allclose(out[1], dub + 0.5 * original)
    # a background in duck mode replaces the original as the bed and is ducked
    ducked = mix_tracks(dub, "duck", np.zeros_like(bg), "stereo", bg)
    assert np.allclose(ducked[0], dub + original * duck_gain(dub, SR, dub.size), atol=1e-6)


def test_lengths_are_padded_to_the_longest() -> None:
    dub = np.ones(100, dtype=np.float32)
    orig = np.ones((1, 300), dtype=np.float32)
    out = mix_tracks(dub, "duck", orig, "mono")
    assert out.shape == (1, 300)


def test_errors_are_usage_errors() -> None:
    dub, _ = _dub_and_original(1.0)
    with pytest.raises(UsageError, match=r"'7\.1' is not supported.*mono, stereo, 5\.1"):
        mix_tracks(dub, "replace", None, "7.1")
    with pytest.raises(UsageError, match="--mix blend"):
        mix_tracks(dub, "blend", None, "mono")
    with pytest.raises(UsageError, match="no audio track"):
        mix_tracks(dub, "duck", None, "stereo")
    with pytest.raises(UsageError, match="--background"):
        mix_tracks(dub, "background", None, "stereo")
    with pytest.raises(UsageError, match="3 channels"):
        mix_tracks(dub, "duck", np.zeros((3, 10), np.float32), "stereo")
