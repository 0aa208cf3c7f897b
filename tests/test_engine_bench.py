"""`fasttts bench` on the tiny engine: the measurements exist, have the right shape and the forced token
count holds (speed itself is never asserted)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.errors import UsageError
from fasttts_cli.indextts2.engine import NoStopDecoder, frames_for
from fasttts_cli.indextts2.sampling import SamplingParams
from fasttts_cli.tools.bench import BenchOptions, format_table, run_bench, to_json
from tests.conftest_engine import *  # noqa: F403 (fixtures)


def test_no_stop_decoder_generates_exactly_n() -> None:
    rng = np.random.default_rng(0)
    for beams in (1, 3):
        d = NoStopDecoder(SamplingParams(beams=beams, max_tokens=6), 0, vocab=8194)
        while not d.done:
            logits = rng.standard_normal((d.rows, 8194)).astype(np.float32)
            logits[:, 8193] = 50.0  # the stop token would win every draw
            d.step(logits)
        res = d.result()
        assert res.codes.size == 6 and not res.stopped and 8193 not in res.codes


def test_median_of_runs() -> None:
    from fasttts_cli.tools.bench import median_of_runs

    runs = [
        {"tokens": 4, "s": 1.0, "ms": {1: 10.0, 3: 30.0}, "name": "a", "ok": True},
        {"tokens": 4, "s": 3.0, "ms": {1: 12.0, 3: 20.0}, "name": "b", "ok": False},
        {"tokens": 4, "s": 2.0, "ms": {1: 11.0, 3: 90.0}, "name": "c", "ok": False},
    ]
    got = median_of_runs(runs)
    assert got == {"tokens": 4, "s": 2.0, "ms": {1: 11.0, 3: 30.0}, "name": "a", "ok": True}
    assert isinstance(got["tokens"], int)
    assert median_of_runs([{"n": 2}, {"n": 3}]) == {"n": 2.5}


def test_rounds_must_be_positive(tiny_engine_dir: Path) -> None:
    with pytest.raises(UsageError, match="--rounds 0"):
        run_bench(BenchOptions(engine=tiny_engine_dir, rounds=0))


@pytest.mark.slow
def test_bench_on_tiny_engine(tiny_engine_dir: Path, tiny_checkpoint_dir: Path, tmp_path: Path) -> None:
    opts = BenchOptions(
        engine=tiny_engine_dir,
        checkpoint=tiny_checkpoint_dir,
        tokens=4,
        batches=(1, 2),
        beams=(1, 3),
        s2mel_steps_timed=1,
        ref_seconds=1.5,
        threads=1,
        rounds=2,
        work_dir=tmp_path / "not" / "yet",  # created on demand
    )
    r = run_bench(opts)
    assert (tmp_path / "not" / "yet" / "bench-voice.wav").is_file()
    ours, eager = r["ours"], r["eager"]
    assert set(ours["batches"]) == {1, 2}
    for b, row in ours["batches"].items():
        assert np.isclose(row["audio_s"], b * 256 * frames_for(4) / 22050)
        # a difference of two short timings on a tiny model: finite, but its sign is noise
        assert set(row["ms_per_token"]) == {1, 3} and all(
            np.isfinite(v) for v in row["ms_per_token"].values()
        )
        assert row["rtf"][3] == row["batch_s"][3] / row["audio_s"]
        assert row["s2mel_s"] > row["s2mel_step_s"] * 24
    assert np.isclose(eager["audio_s"], 256 * frames_for(4) / 22050)
    assert eager["voice_prep_s"] > 0 and ours["voice_prep_s"] > 0
    assert eager["w2v_layers_run"] >= 17  # every layer the checkpoint's config has, as the original
    assert eager["peak_rss_mb"] >= ours["peak_rss_mb"] > 0
    table = format_table(r)
    for label in (
        "voice prep, first",
        "ms/token, 3 beams",
        "s2mel per step",
        "RTF, 1 beam",
        "lines/s",
        "peak RSS",
    ):
        assert label in table
    assert '"ours"' in to_json(r)
    assert "median of 2 rounds" in table


def test_bench_on_tiny_engine25(engine25_dir: Path, checkpoint25_dir: Path, tmp_path: Path) -> None:
    """IndexTTS-2.5: no latent pass, a codec_decode stage, 25 Hz codes (2n * 1.72 mel frames a line), and
    the decode cost per second of audio, on both sides: ours (the engine) and eager (the 2.5 PyTorch
    modules of its checkpoint, one line at a time)."""
    tokens = 4
    opts = BenchOptions(
        engine=engine25_dir,
        checkpoint=checkpoint25_dir,
        tokens=tokens,
        batches=(1, 2),
        beams=(1, 3),
        s2mel_steps_timed=1,
        ref_seconds=1.5,
        threads=1,
        work_dir=tmp_path,
    )
    r = run_bench(opts)
    ours, eager = r["ours"], r["eager"]
    assert ours["model"] == eager["model"] == "indextts2.5" and "note" not in r
    assert set(ours["batches"]) == {1, 2}
    frames = int(2 * tokens * 1.72)  # the length regulator's target: int(2n * 1.72)

    def check_row(row: dict, b: int) -> None:
        assert np.isclose(row["audio_s"], b * 256 * frames / 22050)
        assert row["latent_s"] is None
        # timed on its own (it also runs inside the content stage); no ordering of two timings is asserted:
        # on a loaded CI core a sub-millisecond stage can time either way
        assert row["codec_decode_s"] > 0 and row["s2mel_content_s"] > 0
        assert row["s2mel_step_s"] > 0 and row["vocoder_s"] > 0 and row["prefill_s"] > 0
        assert row["cfm_frames"] > frames  # the prompt's frames come first
        assert np.isclose(row["codes_per_audio_s"], tokens * 22050 / (256 * frames))  # 25 Hz, truncated
        for k in (1, 3):
            assert np.isfinite(row["ms_per_token"][k])
            assert np.isclose(row["ms_per_audio_s"][k], row["ms_per_token"][k] * row["codes_per_audio_s"] / b)
            assert row["generate_s"][k] > 0
        total = row["generate_s"][1] + row["s2mel_s"] + row["vocoder_s"]
        assert np.isclose(row["batch_s"][1], total)

    for b, row in ours["batches"].items():
        check_row(row, b)
    check_row(eager, 1)
    assert eager["tokens"] == tokens and eager["w2v_passes"] == 3  # the speaker twice, as infer_v2_5
    assert eager["w2v_layers_run"] >= 17 and eager["voice_prep_s"] > 0 and eager["load_s"] > 0
    assert eager["cfm_frames"] == ours["batches"][1]["cfm_frames"]  # the same prompt and line on both sides
    assert eager["peak_rss_mb"] >= ours["peak_rss_mb"] > 0
    table = format_table(json.loads(to_json(r)))
    for label in ("codec decode", "ms/audio s, 3 beams", "model indextts2.5", "eager (1 line)", "3 passes"):
        assert label in table
    latent = next(ln for ln in table.splitlines() if ln.startswith("latent pass"))
    assert latent.split()[-3:] == ["-", "-", "-"]
    codec = next(ln for ln in table.splitlines() if ln.startswith("codec decode"))
    assert "-" not in codec.split()[-3:]
    assert next(ln for ln in table.splitlines() if ln.startswith("speed-up vs eager, 1 beam"))
    with pytest.raises(UsageError, match=r"is an indextts2\.5 engine"):
        run_bench(replace(opts, model="indextts2"))
    no_ckpt = run_bench(replace(opts, checkpoint=None, batches=(1,), beams=(1,)))
    assert no_ckpt["eager"] is None and "--checkpoint" in no_ckpt["note"]


def test_random_weights_checks_model_and_work_dir(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--model 'indextts3'"):
        run_bench(BenchOptions(random_weights=True, model="indextts3", work_dir=tmp_path))
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "manifest.json").write_text("{}")
    (tmp_path / "build.json").write_text(json.dumps({"engine": "x", "checkpoint": "y"}))  # before "model"
    with pytest.raises(UsageError, match=r"holds a random indextts2 engine, not indextts2\.5"):
        run_bench(BenchOptions(random_weights=True, model="indextts2.5", work_dir=tmp_path))


def test_bench_compare_summarizes_alternating_runs(tmp_path: Path) -> None:
    """tools/bench_compare.py: the figures it reads from `fasttts bench --json`, median and spread per
    side, B/A, and that a child really imports fasttts_cli from the tree it is given."""
    from fasttts_cli.tools import bench_compare as bc

    def result(ms: float) -> dict:
        row = {
            "prefill_s": 0.1,
            "ms_per_token": {"1": ms, "3": 2 * ms},
            "latent_s": 0.2,
            "batch_s": {"1": 1.0},
        }
        return {"ours": {"load_s": 1.0, "voice_prep_s": 0.5, "batches": {"1": row}}, "eager": None}

    runs = [bc.flatten(result(ms)) for ms in (10.0, 14.0, 12.0)]
    assert runs[0]["ours b=1 ms_per_token[3]"] == 20.0 and "ours voice_prep_s" in runs[0]
    s = bc.summarize(runs)
    assert s["ours b=1 ms_per_token[1]"] == (12.0, pytest.approx(4.0 / 12.0), 10.0)
    assert s["ours b=1 prefill_s"] == (0.1, 0.0, 0.1)
    other = [bc.flatten(result(ms)) for ms in (6.0, 7.0, 6.5)]
    del other[0]["ours b=1 latent_s"], other[1]["ours b=1 latent_s"], other[2]["ours b=1 latent_s"]
    table = bc.format_comparison(s, bc.summarize(other))
    line = next(ln for ln in table.splitlines() if ln.startswith("ours b=1 ms_per_token[1]"))
    assert line.split()[-2:] == ["0.542", "0.600"] and "33.3%" in line  # medians 6.5/12, minimums 6/10
    assert "only in A: ours b=1 latent_s" in table
    repo = Path(__file__).resolve().parent.parent
    bc.Tree("A", repo).check_imported_from(tmp_path)
    with pytest.raises(RuntimeError, match="not from"):
        bc.Tree("B", tmp_path).check_imported_from(tmp_path)
    assert bc.main([str(repo), str(repo), "--rounds", "2"]) == 2
