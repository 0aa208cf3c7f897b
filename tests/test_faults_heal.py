"""A cache that heals: a damaged entry is reported, removed and re-synthesized, never used, never fatal."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.app import assembly, pipeline
from fasttts_cli.app.pipeline import DubOptions, run_dub
from fasttts_cli.app.progress import QUIET, Reporter
from fasttts_cli.cli.commands import main
from fasttts_cli.dubbing.cache import LineCache, audio_checksum, check_hits
from fasttts_cli.errors import FastTTSError
from tests.test_pipeline import FakeSynth, make_job

LINE2 = "Second line, a bit longer."


@pytest.fixture()
def job(tmp_path: Path) -> DubOptions:
    return make_job(tmp_path)


def _entry_of(res, index: int, layer: str = "plans") -> tuple[Path, Path]:
    """A line's entry in the plan cache (under its key) or the render cache (under its render key)."""
    report = json.loads(Path(res.report_path).read_text())
    field = "key" if layer == "plans" else "render_key"
    key = next(ln[field] for ln in report["lines"] if ln["index"] == index)
    return LineCache(res.work_dir / layer)._paths(key)


def _texts(fake: FakeSynth) -> list[str]:
    return [r.text for call in fake.calls for r in call]


def _truncate(npy: Path, meta: Path) -> None:
    npy.write_bytes(npy.read_bytes()[: npy.stat().st_size // 2])


def _garbage_npy(npy: Path, meta: Path) -> None:
    npy.write_bytes(b"\x93NUMPY garbage" * 100)


def _garbage_meta(npy: Path, meta: Path) -> None:
    meta.write_text("{ this is not json")


def _meta_missing_key(npy: Path, meta: Path) -> None:
    m = json.loads(meta.read_text())
    del m["sample_rate"]
    meta.write_text(json.dumps(m))


def _checksum_mismatch(npy: Path, meta: Path) -> None:
    a = np.load(npy)
    np.save(npy, (a * 0.5).astype(np.float32))  # valid .npy, same shape and dtype, other samples


@pytest.mark.parametrize(
    "damage,reason",
    [
        (_truncate, "truncated"),
        (_garbage_npy, "not a readable .npy"),
        (_garbage_meta, "meta file is unreadable"),
        (_meta_missing_key, "sample_rate"),
        (_checksum_mismatch, "checksum"),
    ],
)
def test_rerun_after_corruption_resynthesizes_exactly_that_line(job, tmp_path, damage, reason):
    first = run_dub(job, synthesizer=FakeSynth())
    npy, meta = _entry_of(first, 2)
    damage(npy, meta)

    events = tmp_path / "events.jsonl"
    rep = Reporter(verbosity=QUIET, jsonl=str(events))
    fake = FakeSynth()
    res = run_dub(job, rep, synthesizer=fake)
    rep.close()
    assert res.ok and _texts(fake) == [LINE2]
    assert res.lines["synthesized"] == 1 and res.lines["cached"] == 2
    warn = [w for w in res.warnings if "damaged" in w]
    assert len(warn) == 1 and "ep.tsv:3: line 2" in warn[0] and reason in warn[0]
    assert "re-synthesized" in warn[0]
    report = json.loads(Path(res.report_path).read_text())
    assert warn[0] in report["warnings"]
    assert [ln["cached"] for ln in report["lines"]] == [True, False, True]
    evs = [json.loads(x) for x in events.read_text().splitlines()]
    assert any(e["event"] == "warning" and e["message"] == warn[0] for e in evs)
    # The entry is whole again: a third run synthesizes nothing and warns about nothing.
    assert LineCache(res.work_dir / "plans").verify(report["lines"][1]["key"]).ok
    third = run_dub(job, synthesizer=(fake3 := FakeSynth()))
    assert fake3.calls == [] and not [w for w in third.warnings if "damaged" in w]


@pytest.mark.parametrize(
    "damage,reason",
    [(_truncate, "truncated"), (_garbage_meta, "meta file is unreadable"), (_checksum_mismatch, "checksum")],
)
def test_a_damaged_render_is_rendered_again_from_its_plan(job, damage, reason):
    first = run_dub(job, synthesizer=FakeSynth())
    damage(*_entry_of(first, 2, "lines"))
    fake = FakeSynth()
    res = run_dub(job, synthesizer=fake)
    assert res.ok and fake.calls == []  # the plan is intact: nothing is synthesized again
    assert res.lines["synthesized"] == 0 and res.lines["rendered"] == 1
    warn = [w for w in res.warnings if "damaged" in w]
    assert len(warn) == 1 and "line 2" in warn[0] and reason in warn[0] and "rendered again" in warn[0]
    report = json.loads(Path(res.report_path).read_text())
    assert [ln["rendered"] for ln in report["lines"]] == [False, True, False]
    assert LineCache(res.work_dir / "lines").verify(report["lines"][1]["render_key"]).ok


def test_cli_rerun_after_corruption_exits_0_with_a_json_warning(job, monkeypatch, capsys):
    res = run_dub(job, synthesizer=FakeSynth())
    _truncate(*_entry_of(res, 3))
    fake = FakeSynth()
    monkeypatch.setattr(pipeline, "load_synthesizer", lambda *a, **k: fake)
    args = ["dub", str(job.script), "--lang", "eng", "--output-dir", str(job.output_dir), "--json"]
    args += [f"--voice={v}" for v in job.voices]
    with pytest.raises(SystemExit) as ei:
        main(args)
    out, err = capsys.readouterr()
    assert ei.value.code == 0, err
    obj = json.loads(out)
    assert obj["ok"] and obj["lines"]["synthesized"] == 1 and _texts(fake) == ["Third one."]
    assert any("line 3" in w and "damaged" in w for w in obj["warnings"])
    assert "Traceback" not in err and "vanished" not in err


def test_entry_removed_during_the_run_is_a_clear_error_naming_the_work_dir(job, monkeypatch):
    run_dub(job, synthesizer=FakeSynth())
    real = assembly._render_timeline

    def meddle(target, placed, duration):
        # Something outside fasttts deletes the cache while this run is placing lines.
        for p in (job.output_dir / "ep.fasttts" / "lines").rglob("*.npy"):
            p.unlink()
        return real(target, placed, duration)

    monkeypatch.setattr(assembly, "_render_timeline", meddle)
    with pytest.raises(FastTTSError, match=r"line 1: its cached audio .* was removed or changed in") as ei:
        run_dub(job, synthesizer=FakeSynth())
    assert str(job.output_dir / "ep.fasttts") in ei.value.message and "run the same command" in str(ei.value)
    monkeypatch.setattr(assembly, "_render_timeline", real)
    fake = FakeSynth()
    res = run_dub(job, synthesizer=fake)  # the next run heals it
    # Every plan is intact, so the next run renders the three lines again and synthesizes nothing.
    assert res.ok and fake.calls == [] and res.lines["rendered"] == 3


def test_verifying_a_feature_length_cache_is_cheap(tmp_path):
    """~1500 lines of a 2-hour film, 4 s each at 24 kHz (580 MB of float32): every hit is read and hashed
    before synthesis. Bound it generously for a shared CI core; the measured figure goes in the README."""
    cache = LineCache(tmp_path / "lines")
    audio = np.random.default_rng(0).uniform(-0.5, 0.5, 24000 * 4).astype(np.float32)
    keys = {}
    n = 300  # a fifth of the film, scaled up below: keeps the test's disk use at ~115 MB
    for i in range(n):
        key = f"{i:064x}"
        cache.put(key, audio, 24000, {})
        keys[i] = key
    t0 = time.perf_counter()
    hits, damaged = check_hits(cache, keys)
    dt = time.perf_counter() - t0
    assert len(hits) == n and not damaged
    assert all(m["audio_sha256"] == audio_checksum(audio) for m in hits.values())
    per_film = dt * 1500 / n
    assert per_film < 30.0, f"verifying 1500 lines would take {per_film:.1f} s"
