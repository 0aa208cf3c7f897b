"""The cast core: solo spans exclude every other speaker's cues, references are 3-12 s and cast.toml
round-trips; too little clean speech is exit 2 naming the speaker and the seconds found."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.casting.build import build_cast, write_work_cast
from fasttts_cli.casting.castfile import read_cast
from fasttts_cli.casting.spans import merge, solo_spans, subtract
from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.errors import ExitCode, UsageError

SR = 24000


def _source(tmp_path):
    """30 s: alternating A (140 Hz) and B (220 Hz) voiced tones over a noise bed, plus one A cue that
    overlaps B."""
    t = np.arange(30 * SR) / SR
    x = 0.01 * np.random.default_rng(0).standard_normal(len(t))
    cues = []
    for i in range(6):
        s, e = i * 5 + 0.5, i * 5 + 4.0
        spk, f = ("A", 140) if i % 2 == 0 else ("B", 220)
        m = (t >= s) & (t < e)
        x[m] += 0.3 * np.sin(2 * np.pi * f * t[m]) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t[m]))
        cues.append(Cue(i + 1, s, e, "hi", spk, f"x:{i + 1}"))
    cues.append(Cue(7, 3.5, 6.0, "overlap", "A", "x:7"))
    path = tmp_path / "src.wav"
    sf.write(path, x.astype(np.float32), SR)
    return path, cues


def test_subtract():
    assert subtract([(0, 10)], [(2, 3), (5, 6)]) == [(0, 2), (3, 5), (6, 10)]
    assert subtract([(0, 1)], [(0, 1)]) == []


def test_cast_spans_inside_own_cues_outside_others(tmp_path):
    src, cues = _source(tmp_path)
    assert solo_spans(cues, "B")[0] == (6.0, 9.0)  # 5.5-6.0 is under A's overlapping cue
    entries = build_cast(cues, ["A", "B"], src, tmp_path)
    back = {e.name: e for e in read_cast(write_work_cast(tmp_path, entries))}
    for name, e in back.items():
        own = merge((c.start, c.end) for c in cues if c.speaker == name)  # inside the union of its cues
        other = [(c.start, c.end) for c in cues if c.speaker != name]
        for a, b in e.spans:
            assert any(s <= a and b <= t for s, t in own)
            assert all(b <= s or a >= t for s, t in other)
        dur = sf.info(str(e.reference)).duration
        assert 3.0 <= dur <= 12.0
        assert e.seconds == pytest.approx(sum(b - a for a, b in e.spans), abs=1e-3)


def test_too_little_clean_speech_is_exit_2(tmp_path):
    src, cues = _source(tmp_path)
    short = [c for c in cues if c.speaker != "B"] + [Cue(9, 6.0, 7.5, "x", "B", "x:9")]
    with pytest.raises(UsageError) as e:
        build_cast(short, ["B"], src, tmp_path)
    assert e.value.exit_code == ExitCode.USAGE
    assert "'B'" in str(e.value) and " s of clean speech" in str(e.value)
