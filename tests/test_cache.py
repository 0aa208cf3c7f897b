"""The per-line cache: keys, seeds, atomic writes, interruption safety."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from fasttts_cli.cache import (
    LineCache,
    atomic_write,
    atomic_write_json,
    line_key,
    line_seed,
    normalize_text,
    retry_seed,
    work_dir_for,
)

VOICE = "abc123|audio=None|vector=None|alpha=1.0"


def test_normalize_text_collapses_whitespace_keeps_case_and_punctuation():
    assert normalize_text("  Hello,\n  world!\t") == "Hello, world!"
    assert normalize_text("Hello") != normalize_text("hello")
    # NFC: a decomposed é equals the composed one.
    assert normalize_text("cafe\u0301") == normalize_text("caf\u00e9")


def test_seed_depends_on_text_voice_and_base_seed_only():
    s = line_seed("Hello there.", VOICE, 0)
    assert s == line_seed("Hello  there.", VOICE, 0)  # same normalized text
    assert 0 <= s < 2**31
    assert s != line_seed("Hello there!", VOICE, 0)
    assert s != line_seed("Hello there.", VOICE.replace("abc", "abd"), 0)
    assert s != line_seed("Hello there.", VOICE, 1)
    assert len({retry_seed(s, a) for a in (1, 2, 3)} | {s}) == 4


def test_key_changes_with_every_component():
    base = line_key("Hi.", VOICE, "draft|v1", {"options": {}}, 7)
    assert base == line_key(" Hi. ", VOICE, "draft|v1", {"options": {}}, 7)
    variants = [
        line_key("Hi!", VOICE, "draft|v1", {"options": {}}, 7),
        line_key("Hi.", VOICE + "x", "draft|v1", {"options": {}}, 7),
        line_key("Hi.", VOICE, "draft|v2", {"options": {}}, 7),
        line_key("Hi.", VOICE, "draft|v1", {"options": {"length_scale": 1.1}}, 7),
        line_key("Hi.", VOICE, "draft|v1", {"options": {}}, 8),
    ]
    assert len(set(variants) | {base}) == 6
    assert len(base) == 64


def test_put_get_roundtrip(tmp_path):
    cache = LineCache(tmp_path / "lines")
    key = line_key("Hi.", VOICE, "id", {}, 1)
    assert cache.get(key) is None and not cache.has(key)
    audio = np.linspace(-0.5, 0.5, 2205, dtype=np.float32)
    cache.put(key, audio, 22050, {"n_tokens": 12, "hit_token_limit": False, "retries": 1})
    hit = cache.get(key)
    assert hit is not None and cache.has(key)
    np.testing.assert_array_equal(hit.audio, audio)
    assert hit.sample_rate == 22050
    assert hit.duration == pytest.approx(0.1)
    assert hit.meta["n_tokens"] == 12 and hit.meta["retries"] == 1
    assert hit.meta["duration"] == pytest.approx(0.1)
    assert cache.keys() == [key]
    # No temp files are left behind.
    assert [p.name for p in (tmp_path / "lines").rglob(".*")] == []


def test_entry_without_meta_is_a_miss(tmp_path):
    """The meta file is written last: audio alone (a crash between the two writes) is not a hit."""
    cache = LineCache(tmp_path)
    key = "ab" + "0" * 62
    npy, _ = cache._paths(key)
    npy.parent.mkdir(parents=True)
    np.save(npy, np.zeros(10, dtype=np.float32))
    assert cache.get(key) is None and not cache.has(key)


def test_damaged_entry_is_a_miss(tmp_path):
    cache = LineCache(tmp_path)
    key = "cd" + "1" * 62
    cache.put(key, np.ones(100, dtype=np.float32), 16000, {})
    npy, meta = cache._paths(key)
    npy.write_bytes(b"not a numpy file")
    assert cache.get(key) is None
    cache.put(key, np.ones(100, dtype=np.float32), 16000, {})
    m = json.loads(meta.read_text())
    m["n_samples"] = 99  # audio and meta disagree
    meta.write_text(json.dumps(m))
    assert cache.get(key) is None


def test_atomic_write_interrupted_leaves_old_file(tmp_path):
    target = tmp_path / "plan.json"
    atomic_write_json(target, {"v": 1})

    def boom(f):
        f.write(b'{"v": 2, "half')
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, boom)
    assert json.loads(target.read_text()) == {"v": 1}
    assert sorted(os.listdir(tmp_path)) == ["plan.json"]


def test_work_dir_naming(tmp_path):
    assert work_dir_for("demo", tmp_path) == tmp_path / "demo.fasttts"
    assert work_dir_for("demo", tmp_path, tmp_path / "w") == tmp_path / "w"
