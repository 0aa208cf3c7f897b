"""Long-form assembly: streaming loudness equals pyloudnorm, block-wise mix/duck/limit/normalize equal the
one-block (in-memory) results, disk-backed arrays and block decoding round-trip, the pipeline gives the same
dub whatever the block size, and a 10-minute programme assembles with memory far below its own size."""

from __future__ import annotations

import json
import os
import stat
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyloudnorm
import pytest
import soundfile as sf

from fasttts_cli.app import assembly, pipeline
from fasttts_cli.audio.blockio import AudioFileWriter, DiskArray, MemArray, export_audio
from fasttts_cli.audio.limiter import LimiterStream, limiter_gain
from fasttts_cli.audio.load import AudioReader, load_audio_channels
from fasttts_cli.audio.loudness import ArraySource, normalize_report, normalize_stream
from fasttts_cli.audio.loudness_meter import LoudnessMeter, TruePeakMeter, integrated_loudness, true_peak
from fasttts_cli.audio.mix import (
    DuckOptions,
    array_reader,
    duck_gain,
    duck_gain_range,
    mix_blocks,
    mix_tracks,
    place_clips,
    render_timeline,
)
from fasttts_cli.dubbing.cache import atomic_write_json, atomic_write_text
from fasttts_cli.media.ffmpeg import run_ffmpeg
from fasttts_cli.synth.synthesizer import EmotionSpec, SynthRequest, SynthResult, Voice

SR = 48000


def speechish(seconds: float, seed: int = 0, amp: float = 0.05, rate: float = 3.0) -> np.ndarray:
    """Noise bursts with pauses: the gates matter, as with speech."""
    rng = np.random.default_rng(seed)
    n = round(seconds * SR)
    env = (np.sin(2 * np.pi * rate * np.arange(n) / SR) > 0.2).astype(np.float32)
    return (amp * rng.standard_normal(n) * env).astype(np.float32)


def chunks(x: np.ndarray, block: int) -> list[np.ndarray]:
    x = np.atleast_2d(x)
    return [x[:, s : s + block] for s in range(0, x.shape[1], block)]


def pyln(x: np.ndarray) -> float:
    """pyloudnorm's integrated loudness of `(channels, n)` audio in ffmpeg channel order."""
    ch = np.atleast_2d(x)
    if ch.shape[0] == 6:
        ch = ch[[0, 1, 2, 4, 5]]
    return float(pyloudnorm.Meter(SR).integrated_loudness(ch.T.astype(np.float64)))


# ---- streaming loudness -------------------------------------------------------------------------------


def _signals() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    quiet_then_loud = np.concatenate([speechish(3.0, 1, amp=0.002), speechish(4.0, 2, amp=0.2)])
    five_one = (0.05 * rng.standard_normal((6, round(3.33 * SR)))).astype(np.float32)
    five_one[3] *= 8.0  # a loud LFE must not count
    return {
        "speechish": speechish(6.3),
        "tone_odd_length": (0.1 * np.sin(2 * np.pi * 997 * np.arange(round(2.4731 * SR)) / SR)).astype(
            np.float32
        ),
        "stereo": np.stack([speechish(5.05, 3), speechish(5.05, 4, amp=0.02)]),
        "five_one": five_one,
        "gated_quiet_part": quiet_then_loud,  # the relative gate drops the quiet first part
        "just_over_one_block": speechish(0.46, 5),  # pyloudnorm's partial last block
    }


@pytest.mark.parametrize("name", list(_signals()))
@pytest.mark.parametrize("block", [1000, 48000, None])
def test_streaming_loudness_equals_pyloudnorm(name: str, block: int | None) -> None:
    x = _signals()[name]
    ch = np.atleast_2d(x)
    meter = LoudnessMeter(SR, ch.shape[0])
    for part in chunks(ch, block or ch.shape[1]):
        meter.add(part)
    ref = pyln(ch)
    assert np.isfinite(ref)
    assert meter.integrated() == pytest.approx(ref, abs=0.01)
    assert integrated_loudness(x, SR) == pytest.approx(ref, abs=0.01)


def test_streaming_loudness_edge_cases() -> None:
    assert integrated_loudness(np.zeros(3 * SR, np.float32), SR) == float("-inf")
    assert integrated_loudness(speechish(0.39), SR) == float("-inf")  # shorter than one gating block
    tone = (0.1 * np.sin(2 * np.pi * 997 * np.arange(5 * SR) / SR)).astype(np.float32)
    assert integrated_loudness(tone, SR) == pytest.approx(-23.0, abs=0.1)  # the BS.1770 reference point


def test_streaming_true_peak_equals_one_shot() -> None:
    x = np.stack([speechish(3.0, 1), speechish(3.0, 2)])
    x[1, 40000] = 0.9  # one inter-sample-peaky click
    whole = true_peak(x, SR)
    for block in (777, 4096, 100000):
        m = TruePeakMeter(SR, 2)
        parts = chunks(x, block)
        for k, part in enumerate(parts):
            m.add(part, last=k == len(parts) - 1)
        assert m.dbtp() == pytest.approx(whole, abs=1e-6)


# ---- block-wise limiter, mix, duck, normalization ------------------------------------------------------


def _peaky(seconds: float = 5.0) -> np.ndarray:
    x = speechish(seconds, seed=3, amp=0.01)
    x[:: SR // 3] += 0.9
    return x


@pytest.mark.parametrize("block", [1000, 4096, 100003])
def test_blockwise_limiter_equals_in_memory(block: int) -> None:
    x = _peaky() * np.float32(8.0)
    g_ref = limiter_gain(x, SR, -1.1)
    lim = LimiterStream(SR, 1, -1.1)
    ys, gs = [], []
    parts = chunks(x, block)
    for k, part in enumerate(parts):
        y, g = lim.push(part, last=k == len(parts) - 1)
        ys.append(y)
        gs.append(g)
    g = np.concatenate(gs)
    assert g.shape == g_ref.shape and g_ref.min() < 0.2  # it really limits
    assert np.max(np.abs(g - g_ref)) < 1e-6
    assert np.max(np.abs(np.concatenate(ys, axis=1)[0] - x * g_ref.astype(np.float32))) < 1e-6


def _dub_and_original(seconds: float = 7.3, channels: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    n = round(seconds * SR)
    dub = np.zeros(n, np.float32)
    for a, b in ((0.5, 1.2), (1.5, 1.6), (3.0, 5.1), (6.9, 7.3)):  # the last runs to the very end
        dub[int(a * SR) : int(b * SR)] = 0.2 * rng.standard_normal(int(b * SR) - int(a * SR))
    return dub, (0.1 * rng.standard_normal((channels, n))).astype(np.float32)


@pytest.mark.parametrize("block", [997, 4800, 30011])
def test_blockwise_duck_gain_equals_whole(block: int) -> None:
    dub, _ = _dub_and_original()
    n = dub.size
    for opts in (DuckOptions(), DuckOptions(hold_s=0.4, release_s=1.0, attack_s=0.2)):
        whole = duck_gain(dub, SR, n, opts)
        assert whole.min() < 0.3 and whole.max() == 1.0
        read = array_reader(dub)
        parts = [duck_gain_range(read, SR, n, s, min(n, s + block), opts) for s in range(0, n, block)]
        assert np.max(np.abs(np.concatenate(parts) - whole)) < 1e-6


@pytest.mark.parametrize(("layout", "channels"), [("mono", 1), ("stereo", 2), ("5.1", 6)])
@pytest.mark.parametrize("mode", ["replace", "duck"])
def test_blockwise_mix_equals_in_memory(layout: str, channels: int, mode: str) -> None:
    dub, orig = _dub_and_original(channels=channels)
    whole = mix_tracks(dub, mode, orig, layout)
    pos = [0]

    def bed(m: int) -> np.ndarray:
        part = orig[:, pos[0] : pos[0] + m]
        pos[0] += m
        return part

    blocks = list(
        mix_blocks(array_reader(dub), dub.size, mode, layout, bed if mode == "duck" else None, block=10007)
    )
    assert len(blocks) > 30
    out = np.concatenate([b for _, b in blocks], axis=1)
    assert out.shape == whole.shape
    assert np.max(np.abs(out - whole)) < 1e-6
    if mode == "duck":  # and the bed really is ducked under the dub
        assert np.max(np.abs(out - place_dub_like(dub, whole.shape[0], layout) - orig)) > 0.01


def place_dub_like(dub: np.ndarray, nch: int, layout: str) -> np.ndarray:
    out = np.zeros((nch, dub.size), np.float32)
    if nch == 6:
        out[2] = dub
    else:
        out[:] = dub
    return out


@pytest.mark.parametrize("target", [-23.0, -16.0])
def test_blockwise_normalize_equals_in_memory(target: float) -> None:
    for x in (_peaky(), np.stack([speechish(4.0, 5), 0.5 * speechish(4.0, 6)])):
        y_ref, rep_ref = normalize_report(x, SR, target, -1.0)
        parts: list[np.ndarray] = []
        rep = normalize_stream(ArraySource(x), SR, parts.append, target, -1.0, block=3001)
        y = np.concatenate(parts, axis=1).reshape(y_ref.shape)
        assert np.max(np.abs(y - y_ref)) < 1e-6
        assert rep.output_lufs == pytest.approx(rep_ref.output_lufs, abs=1e-6)
        assert rep.output_true_peak == pytest.approx(rep_ref.output_true_peak, abs=1e-6)
        assert rep.limited == rep_ref.limited and abs(rep.output_lufs - target) <= 0.5
        assert rep.output_true_peak <= -1.0


# ---- storage and decoding ------------------------------------------------------------------------------


def test_disk_array_matches_mem_array_and_cleans_up(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    clips = [
        (rng.uniform(0, 2.0), rng.standard_normal(rng.integers(100, 30000)).astype(np.float32))
        for _ in range(20)
    ]
    clips.append((2.5, np.ones(SR, np.float32)))  # grows past the duration
    with DiskArray(tmp_path, 1, prefix=".t-") as disk:
        n = place_clips(disk, iter(clips), 3.0, SR)
        assert n == round(3.5 * SR)
        assert np.array_equal(disk.read(0, n)[0], render_timeline(clips, 3.0, SR))
        assert disk.read(n - 5, n + 50).shape == (1, 5)  # clipped at the end
        path = disk.path
        assert path.is_file() and path.name.startswith(".t-")
    assert not path.exists()
    with DiskArray(tmp_path, 6, 10) as six:
        block = rng.standard_normal((6, 7)).astype(np.float32)
        six.write(5, block)
        assert six.n == 12 and np.array_equal(six.read(5, 12), block)
        assert not np.any(six.read(0, 5))  # never written: silence
    mem = MemArray(2)
    mem.write(3, np.ones((2, 4), np.float32))
    assert mem.n == 7 and mem.read(0, 7).sum() == 8


def test_audio_reader_equals_whole_decode(tmp_path: Path) -> None:
    wav = tmp_path / "x.wav"
    sf.write(wav, np.random.default_rng(2).uniform(-0.5, 0.5, (30000, 2)), 44100, subtype="PCM_16")
    m4a = tmp_path / "x.m4a"
    run_ffmpeg(["-i", str(wav), "-c:a", "aac", str(m4a)], what="test media")
    for path in (wav, m4a):  # libsndfile and the ffmpeg pipe, both resampled 44.1 -> 48 kHz
        whole = load_audio_channels(path, SR)
        with AudioReader(path, SR) as r:
            assert r.channels == 2
            parts = []
            while (b := r.read(1234)).shape[1]:
                parts.append(b)
        got = np.concatenate(parts, axis=1)
        assert got.shape == whole.shape and np.max(np.abs(got - whole)) < 1e-6
    with AudioReader(wav, SR) as r:
        assert r.read_exact(10**6).shape == (2, 10**6)  # silence past the end


def test_block_writer_and_export(tmp_path: Path) -> None:
    x = np.random.default_rng(3).uniform(-0.9, 0.9, (2, 50000)).astype(np.float32)
    with AudioFileWriter(tmp_path / "d.wav", SR, 2) as w:
        for part in chunks(x, 7000):
            w.write(part)
    assert not list(tmp_path.glob(".*partial*"))
    ref = tmp_path / "ref.wav"
    sf.write(ref, x.T, SR, subtype="PCM_24")
    assert (tmp_path / "d.wav").read_bytes() == ref.read_bytes()  # the same file as one write
    export_audio(tmp_path / "d.wav", tmp_path / "out.flac", block=4096)
    a, _ = sf.read(tmp_path / "out.flac", dtype="float32")
    b, _ = sf.read(ref, dtype="float32")
    assert np.array_equal(a, b)
    export_audio(tmp_path / "d.wav", tmp_path / "out.m4a")
    m4a = load_audio_channels(tmp_path / "out.m4a", SR)
    assert m4a.shape[0] == 2 and abs(m4a.shape[1] - x.shape[1]) < 2048  # AAC priming/padding


def test_atomic_writes_get_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        p = atomic_write_json(tmp_path / "report.json", {"a": 1})
        q = atomic_write_text(tmp_path / "x.srt", "1\n")
        assert stat.S_IMODE(p.stat().st_mode) == 0o644 and stat.S_IMODE(q.stat().st_mode) == 0o644
        os.umask(0o027)
        r = atomic_write_text(tmp_path / "y.srt", "1\n")
        assert stat.S_IMODE(r.stat().st_mode) == 0o640
    finally:
        os.umask(old)


# ---- the pipeline --------------------------------------------------------------------------------------

ENGINE_SR = 24000


class ToneSynth:
    """A 180 Hz tone, 0.07 s per character, at 24 kHz (so every line is resampled)."""

    name = "tone"
    sample_rate = ENGINE_SR
    clones_voice = True

    def identity(self) -> str:
        return "tone-1"

    def count_tokens(self, text: str) -> int:
        return len(text)

    def prepare_voice(
        self, path: Path, *, name: str | None = None, emotion: EmotionSpec | None = None
    ) -> Voice:
        return Voice(name or path.stem, path, audio_sha256="0" * 8, emotion=emotion or EmotionSpec())

    def synthesize(self, requests: Sequence[SynthRequest]) -> list[SynthResult]:
        out = []
        for r in requests:
            t = np.arange(int(0.07 * len(r.text) * ENGINE_SR)) / ENGINE_SR
            audio = (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(
                np.float32
            )
            out.append(SynthResult(r.line_id, audio, ENGINE_SR, n_tokens=len(r.text)))
        return out

    def close(self) -> None:
        pass


def _script(path: Path, n_lines: int, spacing: float) -> Path:
    rows = ["start\tend\tspeaker\ttext"]
    for k in range(n_lines):
        s = 0.7 + k * spacing
        rows.append(f"{s:.3f}\t{s + 2.5:.3f}\tA\tLine number {k + 1} says this.")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _make_video(path: Path, seconds: float) -> Path:
    """A tiny video whose stereo audio is a tone (left) and noise (right), as the original track."""
    audio = (
        f"sine=f=220:r={SR}:d={seconds},volume=0.2[l];anoisesrc=d={seconds}:r={SR}:a=0.05:c=pink[r];"
        "[l][r]join=inputs=2:channel_layout=stereo[a]"
    )
    args = ["-f", "lavfi", "-i", f"color=c=gray:s=16x16:r=1:d={seconds}", "-filter_complex", audio]
    args += ["-map", "0:v", "-map", "[a]", "-c:v", "mpeg4", "-c:a", "pcm_s16le", "-shortest", str(path)]
    run_ffmpeg(args, what="test video")
    return path


def _job(tmp_path: Path, script: Path, video: Path, out: str) -> pipeline.DubOptions:
    voice = tmp_path / "v.wav"
    if not voice.exists():
        sf.write(voice, np.zeros(10, np.float32), 16000)
    return pipeline.DubOptions(
        script=script, voices=[str(voice)], video=video, mix="duck", lang="eng", output_dir=tmp_path / out
    )


def test_pipeline_result_does_not_depend_on_block_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    video = _make_video(tmp_path / "v.mkv", 12.0)
    script = _script(tmp_path / "s.tsv", 4, 2.8)
    res_one = pipeline.run_dub(_job(tmp_path, script, video, "one"), synthesizer=ToneSynth())
    monkeypatch.setattr(assembly, "ASSEMBLY_BLOCK", 5003)  # about 115 blocks, edges everywhere
    res_many = pipeline.run_dub(_job(tmp_path, script, video, "many"), synthesizer=ToneSynth())
    a, _ = sf.read(res_one.outputs["dub_audio"], dtype="float32")
    b, _ = sf.read(res_many.outputs["dub_audio"], dtype="float32")
    assert a.shape == b.shape == (12 * SR, 2)
    assert np.max(np.abs(a - b)) <= 2.0 / 2**23  # 24-bit output: at most a rounding step apart
    rep = json.loads(Path(res_many.report_path).read_text())["summary"]
    assert abs(rep["loudness_lufs"] + 23.0) <= 0.5 and rep["true_peak_dbtp"] <= -1.0
    for res in (res_one, res_many):  # scratch arrays removed, outputs readable by others
        assert not [p.name for p in res.work_dir.iterdir() if p.name.startswith((".timeline-", ".mix-"))]
        assert stat.S_IMODE(Path(res.report_path).stat().st_mode) & 0o044 == 0o044


@pytest.mark.slow
def test_ten_minute_programme_assembles_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seconds = 600.0
    video = _make_video(tmp_path / "long.mkv", seconds)
    script = _script(tmp_path / "long.tsv", 12, 48.0)  # sparse lines over 10 minutes
    monkeypatch.setattr(assembly, "ASSEMBLY_BLOCK", SR)  # one-second blocks
    o = _job(tmp_path, script, video, "out")
    tracemalloc.start()
    try:
        res = pipeline.run_dub(o, synthesizer=ToneSynth())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    timeline_bytes = int(seconds * SR) * 4  # one mono float32 copy: 115 MB
    mix_bytes = 2 * timeline_bytes  # the stereo original or mix: 230 MB
    assert peak < timeline_bytes / 10, f"peak traced memory {peak / 1e6:.1f} MB"
    info = sf.info(res.outputs["dub_audio"])
    assert info.frames == int(seconds * SR) and info.channels == 2
    summary = json.loads(Path(res.report_path).read_text())["summary"]
    assert abs(summary["loudness_lufs"] + 23.0) <= 0.5 and summary["true_peak_dbtp"] <= -1.0
    # The ducked original is there under the dub, and the dub on top of it.
    y, _ = sf.read(res.outputs["dub_audio"], dtype="float32", start=int(300 * SR), frames=SR)
    assert np.sqrt(np.mean(y**2)) > 1e-3
    assert peak < mix_bytes / 20
