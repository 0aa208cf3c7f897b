"""The per-line cache: keys, seeds, atomic writes, interruption safety."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.dubbing.cache import (
    LineCache,
    atomic_write,
    atomic_write_json,
    audio_checksum,
    check_hits,
    line_key,
    line_seed,
    normalize_text,
    retry_seed,
    work_dir_for,
)
from fasttts_cli.partials import parse_partial

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


# ---- verification: a damaged entry is never served --------------------------------------------------


def _entry(tmp_path, n: int = 1000):
    cache = LineCache(tmp_path / "lines")
    key = line_key("Hi.", VOICE, "id", {}, 3)
    audio = np.sin(np.arange(n, dtype=np.float32) / 7).astype(np.float32)
    cache.put(key, audio, 24000, {"retries": 0})
    npy, meta = cache._paths(key)
    return cache, key, audio, npy, meta


def test_put_records_checksum_shape_and_dtype(tmp_path):
    cache, key, audio, _, meta = _entry(tmp_path)
    m = json.loads(meta.read_text())
    assert m["dtype"] == "float32" and m["shape"] == [1000] and m["n_samples"] == 1000
    assert m["audio_sha256"] == audio_checksum(audio) and len(m["audio_sha256"]) == 64
    check = cache.verify(key)
    assert check.ok and check.meta == m


def _truncate(npy, meta):
    npy.write_bytes(npy.read_bytes()[:-100])


def _garbage_npy(npy, meta):
    npy.write_bytes(b"\x00garbage" * 500)


def _npy_missing(npy, meta):
    npy.unlink()


def _garbage_meta(npy, meta):
    meta.write_bytes(b"{not json\xff")


def _meta_not_object(npy, meta):
    meta.write_text("[1, 2]")


def _meta_missing_key(npy, meta):
    m = json.loads(meta.read_text())
    del m["n_samples"]
    meta.write_text(json.dumps(m))


def _other_samples_same_length(npy, meta):
    # A perfectly valid .npy of the right length and dtype: only the checksum can tell.
    np.save(npy, np.zeros(1000, dtype=np.float32))


def _wrong_dtype(npy, meta):
    np.save(npy, np.zeros(1000, dtype=np.float64))


def _wrong_length(npy, meta):
    np.save(npy, np.zeros(999, dtype=np.float32))


def _huge_header(npy, meta):
    # A header claiming 2**40 samples: rejected from the header, nothing that size is allocated.
    buf = npy.read_bytes()
    npy.write_bytes(buf.replace(b"(1000,)", b"(1099511627776,)".ljust(7)))
    m = json.loads(meta.read_text())
    m["n_samples"] = 2**40
    meta.write_text(json.dumps(m))


@pytest.mark.parametrize(
    "damage,reason",
    [
        (_truncate, "truncated"),
        (_garbage_npy, "not a readable .npy"),
        (_npy_missing, "audio file is missing"),
        (_garbage_meta, "meta file is unreadable"),
        (_meta_not_object, "not a JSON object"),
        (_meta_missing_key, "n_samples"),
        (_other_samples_same_length, "checksum"),
        (_wrong_dtype, "not float32 mono"),
        (_wrong_length, "999 samples"),
        (_huge_header, "truncated"),
    ],
)
def test_damaged_entry_is_reported_and_never_served(tmp_path, damage, reason):
    cache, key, _, npy, meta = _entry(tmp_path)
    damage(npy, meta)
    check = cache.verify(key)
    assert check.status == "damaged" and reason in check.reason, check
    assert cache.get(key) is None
    hits, damaged = check_hits(cache, {7: key})
    assert hits == {} and list(damaged) == [7] and reason in damaged[7]
    assert not npy.exists() and not meta.exists()  # removed: re-synthesized like a miss
    assert cache.verify(key).status == "missing"


def test_entry_from_before_the_checksum_is_checked_then_adopted(tmp_path):
    cache, key, audio, npy, meta = _entry(tmp_path)
    m = json.loads(meta.read_text())
    for k in ("audio_sha256", "dtype", "shape"):
        del m[k]
    meta.write_text(json.dumps(m))  # an entry as fasttts wrote it before the checksum existed
    check = cache.verify(key)
    assert check.ok and check.meta["audio_sha256"] == audio_checksum(audio)
    assert json.loads(meta.read_text())["audio_sha256"] == audio_checksum(audio)  # recorded
    np.save(npy, np.zeros(1000, dtype=np.float32))  # later damage is now caught
    assert cache.verify(key).status == "damaged"


def test_put_over_a_damaged_entry_replaces_it(tmp_path):
    cache, key, audio, npy, meta = _entry(tmp_path)
    _garbage_meta(npy, meta)
    cache.put(key, audio * 0.5, 24000, {})
    hit = cache.get(key)
    assert hit is not None and np.array_equal(hit.audio, audio * 0.5)


def test_atomic_write_uses_unique_partial_names(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append(Path(src).name)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    atomic_write_json(tmp_path / "plan.json", {"v": 1})
    atomic_write_json(tmp_path / "plan.json", {"v": 2})
    assert len(set(seen)) == 2
    for name in seen:
        assert parse_partial(name) == ("plan", os.getpid()) and name.endswith(".partial.json")
