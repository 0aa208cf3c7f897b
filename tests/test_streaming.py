"""Streaming in the engine seam (indextts2.streaming, stream_lines): a streamed line against the same codes
rendered whole, the cross-fade, cancellation, batches, and 2.5.

Tolerance (stated in README "Streaming"): with one chunk covering the line the stream IS the whole
rendering (max |diff| < 1e-5); chunked on the tiny random-weight engine (first 12, then 40 codes, 24 of
context, 4 of cross-fade) the difference measured 6.0 % of the whole line's RMS away from the joins and 8.1 %
at them; the test allows 15 % and 20 %. IndexTTS-2.5's tiny engine (first 8, then 20 codes) measured 5.3 %
overall; allowed 25 %. A random DiT attends over the whole line with no learned
locality, so a trained engine should sit closer; benchmarks/serve_bench.py --distance measures one.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.indextts2.engine import noise_generator, segment_seed_generator
from fasttts_cli.indextts2.line_options import line_options
from fasttts_cli.indextts2.streaming import hann_fade, stream_noise, whole_rendering
from fasttts_cli.synth.synthesizer import SynthRequest, stream_rows
from tests.conftest_engine import *  # noqa: F403
from tests.test_draft import needs_piper

TEXT = "Hello there, this is a streamed line."
PRESET = Path(__file__).resolve().parent.parent / "presets" / "cpu-fp32.toml"


def stream_preset(tmp: Path, max_tokens: int = 120, steps: int = 25, **stream: int) -> Path:
    """cpu-fp32 with fewer codes per line (and CFM steps) and the given [stream] keys."""
    text = PRESET.read_text().replace("max_tokens = 1500", f"max_tokens = {max_tokens}")
    text = text.replace("steps = 25", f"steps = {steps}")
    keys = {"first_chunk_codes": 12, "chunk_codes": 40, "context_codes": 24, "overlap_codes": 4, **stream}
    text += "\n[stream]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items())
    p = tmp / "stream.toml"
    p.write_text(text)
    return p


def load(engine_dir: Path, preset: Path, cls: type | None = None):
    from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer

    return (cls or IndexTTS2Synthesizer).load(engine_dir, preset, threads=1)


def reference(s, req: SynthRequest) -> tuple[np.ndarray, np.ndarray]:
    """(codes, whole rendering with the stream's noise) of a one-segment line, as the stream says it."""
    e = s.engine
    seg = s._line_segments([req])[0][0][0]
    params = line_options(e.preset, {"beams": 1}).sampling(e.tokens.stop_mel, e.max_codes)
    codes = e.generate([seg.prefix], [params], [segment_seed_generator(seg.seed, 0)])[0].codes
    whole = whole_rendering(e, seg.voice, seg.prefix, codes, noise_generator(seg.seed, 0), seg.s2mel)
    return codes, whole


def streamed(s, reqs: list[SynthRequest], cancelled=None):
    chunks: dict[int, list[np.ndarray]] = {}
    res = stream_rows(s, reqs, lambda k, a: chunks.setdefault(k, []).append(a), cancelled)
    return res, chunks


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0


def test_hann_fades_sum_to_one_and_stream_noise_keeps_its_first_columns() -> None:
    fin, fout = hann_fade(37)
    assert np.allclose(fin + fout, 1.0) and fin[0] < 0.01 and fin[-1] > 0.99
    a = stream_noise(np.random.default_rng(3), 4, 10)
    b = stream_noise(np.random.default_rng(3), 4, 25)
    assert np.array_equal(a, b[:, :10])


def test_one_chunk_is_the_whole_rendering(tiny_engine_dir: Path, voice_wav: Path, tmp_path: Path) -> None:
    s = load(tiny_engine_dir, stream_preset(tmp_path, first_chunk_codes=500))
    req = SynthRequest("1", TEXT, s.prepare_voice(voice_wav), 7)
    (res,), chunks = streamed(s, [req])
    codes, whole = reference(s, req)
    assert res.ok and len(chunks[0]) == 1 and res.n_tokens == codes.size
    assert res.audio.shape == whole.shape
    assert np.abs(res.audio - whole).max() < 1e-5


def test_chunks_join_within_the_stated_tolerance(
    tiny_engine_dir: Path, voice_wav: Path, tmp_path: Path
) -> None:
    s = load(tiny_engine_dir, stream_preset(tmp_path))
    req = SynthRequest("1", TEXT, s.prepare_voice(voice_wav), 7)
    (res,), chunks = streamed(s, [req])
    codes, whole = reference(s, req)
    assert res.ok and codes.size == 120 and len(chunks[0]) == 4  # at 12, 52, 92 codes, then the end
    assert np.array_equal(np.concatenate(chunks[0]), res.audio)
    assert res.audio.shape == whole.shape == (int(s.engine.target_lengths([120])[0]) * s.hop,)
    assert len(chunks[0][0]) < len(res.audio) / 4  # the first chunk is small: audio leaves early
    joins = np.zeros(whole.size, bool)
    hop, f = s.hop, lambda n: int(s.engine.target_lengths([n])[0])
    for c in (12, 52, 92):
        joins[(f(c) - 2 * f(4)) * hop : (f(c) + 4) * hop] = True
    diff = res.audio - whole
    assert rms(diff[~joins]) < 0.15 * rms(whole[~joins])
    assert rms(diff[joins]) < 0.20 * rms(whole[joins])


def test_a_batch_streams_each_line_as_alone_and_a_cancelled_line_stops(
    tiny_engine_dir: Path, voice_wav: Path, tmp_path: Path
) -> None:
    s = load(tiny_engine_dir, stream_preset(tmp_path, max_tokens=60, steps=4))
    v = s.prepare_voice(voice_wav)
    reqs = [SynthRequest(str(k), TEXT, v, 7 + k) for k in range(3)]
    alone, _ = streamed(s, [reqs[1]])
    chunks: dict[int, list[np.ndarray]] = {}
    res = stream_rows(
        s,
        reqs,
        lambda k, a: chunks.setdefault(k, []).append(a),
        lambda k: k == 2 and len(chunks.get(2, [])) >= 1,
    )
    assert res[1].ok and np.abs(res[1].audio - alone[0].audio).max() < 1e-4
    for r in res[:2]:
        assert r.ok and r.audio.size == int(s.engine.target_lengths([r.n_tokens])[0]) * s.hop
    assert res[2].n_tokens is None or res[2].n_tokens < 60  # stopped after its first chunk
    assert len(chunks[2]) == 1


def test_beams_from_the_preset_stream_after_the_gpt(
    tiny_engine_dir: Path, voice_wav: Path, tmp_path: Path
) -> None:
    s = load(tiny_engine_dir, stream_preset(tmp_path, max_tokens=60, steps=4, beams=0))
    assert s.engine.preset.decode.beams == 3
    (res,), chunks = streamed(s, [SynthRequest("1", TEXT, s.prepare_voice(voice_wav), 7)])
    assert res.ok and len(chunks[0]) == 3 and res.audio.size == int(s.engine.target_lengths([60])[0]) * s.hop


def test_indextts25_streams(engine25_dir: Path, voice_wav: Path, tmp_path: Path) -> None:
    from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer

    s = load(
        engine25_dir,
        stream_preset(tmp_path, max_tokens=60, first_chunk_codes=8, chunk_codes=20),
        IndexTTS25Synthesizer,
    )
    req = SynthRequest("1", TEXT, s.prepare_voice(voice_wav), 7, lang="en")
    (res,), chunks = streamed(s, [req])
    _, whole = reference(s, req)
    assert res.ok and len(chunks[0]) >= 3 and res.audio.shape == whole.shape
    assert rms(res.audio - whole) < 0.25 * rms(whole)


@pytest.mark.parametrize("bad", [{"overlap_codes": 30}, {"context_codes": 2}, {"chunk_codes": 0}])
def test_a_bad_stream_table_is_refused_naming_it(tmp_path: Path, bad: dict[str, int]) -> None:
    from fasttts_cli.errors import InputError
    from fasttts_cli.spec.presets import load_preset

    with pytest.raises(InputError, match="stream"):
        load_preset(stream_preset(tmp_path, **bad))


def _synth_cli(*args: str, engine: Path, preset: Path, voice: Path) -> subprocess.CompletedProcess[bytes]:
    cmd = [sys.executable, "-m", "fasttts_cli", "synth", TEXT, "--voice", str(voice), "--engine", str(engine)]
    return subprocess.run(
        [*cmd, "--preset", str(preset), "--stream", *args], capture_output=True, timeout=300
    )


def test_synth_stream_to_a_pipe_and_to_a_growing_file(
    tiny_engine_dir: Path, voice_wav: Path, tmp_path: Path
) -> None:
    preset = stream_preset(tmp_path, max_tokens=60, steps=4)
    kw = {"engine": tiny_engine_dir, "preset": preset, "voice": voice_wav}
    piped = _synth_cli("-o", "-", **kw)  # stdout is a pipe: the streaming header stays
    assert piped.returncode == 0, piped.stderr.decode()
    head, data = piped.stdout[:44], piped.stdout[44:]
    assert head[:4] == b"RIFF" and struct.unpack("<I", head[40:44])[0] == 0xFFFFFFFF
    out = tmp_path / "line.wav"
    done = _synth_cli("-o", str(out), "--json", **kw)
    assert done.returncode == 0, done.stderr.decode()
    r = json.loads(done.stdout)
    audio, sr = sf.read(out, dtype="int16")  # the header was finalized: an ordinary WAV
    assert r["stream"] and r["samples"] == audio.size == len(data) // 2 and sr == r["sample_rate"]
    assert r["first_audio_s"] > 0 and r["rtf"] > 0
    assert np.array_equal(audio, np.frombuffer(data, "<i2"))  # the same line both ways

    from fasttts_cli.app.single_line import SynthOptions, synth_one
    from fasttts_cli.errors import UsageError

    so = SynthOptions(TEXT, voice_wav, Path("-"), engine=str(tiny_engine_dir), stream=True, duration=1.0)
    with pytest.raises(UsageError, match="--duration with --stream"):
        synth_one(so)
    with pytest.raises(UsageError, match=r"x\.flac"):
        synth_one(SynthOptions(TEXT, voice_wav, tmp_path / "x.flac", stream=True))


@needs_piper
def test_the_draft_voice_streams_what_piper_gives(voice_wav: Path) -> None:
    from fasttts_cli.synth.draft import DraftSynthesizer

    s = DraftSynthesizer(deterministic=True)
    reqs = [
        SynthRequest(
            "1",
            "Hello there. This second sentence is longer than the first one.",
            s.prepare_voice(voice_wav),
            1,
        )
    ]
    (res,), chunks = streamed(s, reqs)
    whole = s.synthesize(reqs)[0]
    assert res.ok and len(chunks[0]) > 1 and np.array_equal(res.audio, whole.audio)


def test_the_torch_backend_streams_through_the_same_seam(tiny_checkpoint_dir: Path, voice_wav: Path) -> None:
    """The PyTorch engine (CPU tensors, fp32, 4 CFM steps): its latents are torch tensors, sliced per window;
    the chunks join within the ONNX engine's tolerance."""
    import dataclasses

    pytest.importorskip("torch")
    from fasttts_cli.indextts2.synthesizer_torch import TorchSynthesizer
    from fasttts_cli.spec.presets import ComponentSpec, StreamOptions, load_preset

    p = load_preset("gpu-torch-fp16")
    p = dataclasses.replace(
        p,
        components={k: ComponentSpec("torch", "fp32") for k in p.components},
        decode=dataclasses.replace(p.decode, max_tokens=60),
        s2mel=dataclasses.replace(p.s2mel, steps=4),
    )
    s = TorchSynthesizer.load(tiny_checkpoint_dir, p, device="cpu")
    req = SynthRequest("1", TEXT, s.prepare_voice(voice_wav), 7)
    codes, whole = reference(s, req)
    s.engine.preset = dataclasses.replace(p, stream=StreamOptions(first_chunk_codes=12, chunk_codes=40))
    (res,), got = streamed(s, [req])
    assert res.ok and res.n_tokens == codes.size and len(got[0]) == 3 and res.audio.shape == whole.shape
    assert rms(res.audio - whole) < 0.2 * rms(whole)
