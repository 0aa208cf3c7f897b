"""The IndexTTS-2 engine and Synthesizer on our tiny checkpoint (built once per test session).

Checks: synthesized length = 256 * floor(1.72 n) per segment + 200 ms gaps at 22.05 kHz; batched ==
one-by-one (deterministic stages within 1e-5, sampled codes identical with per-line seeds); the voice
cache; mismatched engines refused with the mismatch named; per-line errors; lazy loading.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.errors import EngineMismatchError, UsageError
from fasttts_cli.indextts2.engine import (
    GPT_TRUNK,
    IndexTTS2Engine,
    VoiceConditioning,
    euler_times,
    frames_for,
    noise_generator,
    segment_seed_generator,
)
from fasttts_cli.indextts2.sampling import SamplingParams
from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer, line_options
from fasttts_cli.synth.synthesizer import EmotionSpec, Synthesizer, SynthRequest
from tests.conftest_engine import *  # noqa: F403 (fixtures)

FAST = {"max_tokens": 9, "steps": 3}  # keep every line short: seconds for the whole file
LONG_TEXT = (
    "The quick brown fox jumps over the lazy dog near the river bank today. "
    "A second sentence follows here, long enough that the text needs two segments to be spoken. "
    "And a third one closes the paragraph with some more words for the tokenizer to count."
)


@pytest.fixture(scope="module")
def synth(tiny_engine_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> IndexTTS2Synthesizer:
    s = IndexTTS2Synthesizer.load(tiny_engine_dir, cache_dir=tmp_path_factory.mktemp("voice-cache"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def voice(synth: IndexTTS2Synthesizer, voice_wav: Path):
    return synth.prepare_voice(voice_wav)


def _req(voice, text: str, seed: int, line_id: str = "1", **opts) -> SynthRequest:
    return SynthRequest(line_id=line_id, text=text, voice=voice, seed=seed, options={**FAST, **opts})


def _segment_codes(synth: IndexTTS2Synthesizer, voice, text: str, seed: int, **opts) -> list[np.ndarray]:
    """Each segment's codes, generated alone through the stage API."""
    e = synth.engine
    lo = line_options(e.preset, {**FAST, **opts})
    params = lo.sampling(e.tokens.stop_mel, e.max_codes)
    out = []
    for k, ids in enumerate(e.text.segments(text)):
        prefix = e.prefix(voice.state.spk_latents, voice.state.emovec, ids)
        (d,) = e.generate([prefix], params, [segment_seed_generator(seed, k)])
        out.append(d.codes)
    return out


def test_load_is_lazy_and_counts_tokens(tiny_engine_dir: Path) -> None:
    s = IndexTTS2Synthesizer.load(tiny_engine_dir)
    assert isinstance(s, Synthesizer)
    assert s.name == "indextts2" and s.clones_voice and s.sample_rate == 22050
    assert s.engine.sessions.opened == {}  # nothing opened for planning
    n = s.count_tokens("Hello world, this is a test.")
    assert n == len(s.engine.text.tokenize("Hello world, this is a test.")) and n > 5
    assert s.engine.sessions.opened == {}
    counter = IndexTTS2Synthesizer.tokenizer_counter(tiny_engine_dir)
    assert counter("Hello world, this is a test.") == n
    ident = s.identity()
    assert s.engine.manifest.identity() in ident and '"beams": 3' in ident
    other = IndexTTS2Synthesizer.load(tiny_engine_dir, s.engine.preset.with_run_keys(decode={"beams": 1}))
    assert other.identity() != ident


def test_synth_length_per_segment_and_gaps(synth: IndexTTS2Synthesizer, voice, tmp_path: Path) -> None:
    seed = 1234
    (res,) = synth.synthesize([_req(voice, LONG_TEXT, seed)])
    assert res.ok, res.error
    codes = _segment_codes(synth, voice, LONG_TEXT, seed)
    assert len(codes) >= 2, "the text should need several segments"
    ns = [c.size for c in codes]
    expected = sum(256 * frames_for(n) for n in ns) + 4410 * (len(ns) - 1)
    assert res.audio is not None and res.audio.dtype == np.float32
    assert res.audio.size == expected
    assert res.n_tokens == sum(ns)
    assert res.hit_token_limit == any(n == FAST["max_tokens"] for n in ns)
    # the 200 ms gaps are silent
    first = 256 * frames_for(ns[0])
    assert np.all(res.audio[first : first + 4410] == 0)
    assert np.abs(res.audio[:first]).max() > 0
    out = tmp_path / "out.wav"
    sf.write(str(out), res.audio, res.sample_rate)
    info = sf.info(str(out))
    assert info.samplerate == 22050 and info.frames == expected


@pytest.mark.parametrize("beams", [1, 3])
def test_batched_equals_one_by_one(synth: IndexTTS2Synthesizer, voice, voice_wav2: Path, beams: int) -> None:
    v2 = synth.prepare_voice(voice_wav2)
    reqs = [
        _req(voice, "Hello there, my friend.", 11, "a", beams=beams),
        _req(v2, LONG_TEXT, 22, "b", beams=beams),
        _req(voice, "Short one.", 33, "c", beams=beams, max_tokens=5),
        _req(v2, "Hello there, my friend.", 44, "d", beams=beams, steps=2),
    ]
    together = synth.synthesize(reqs)
    alone = [synth.synthesize([r])[0] for r in reqs]
    for t, a in zip(together, alone, strict=True):
        assert t.ok and a.ok, (t.error, a.error)
        assert t.line_id == a.line_id and t.n_tokens == a.n_tokens
        assert t.audio.shape == a.audio.shape
        np.testing.assert_allclose(t.audio, a.audio, rtol=0, atol=1e-5)
    # order of the requests in the batch does not matter either
    rev = synth.synthesize(reqs[::-1])[::-1]
    for t, r in zip(together, rev, strict=True):
        np.testing.assert_allclose(t.audio, r.audio, rtol=0, atol=1e-5)


def test_sampled_codes_depend_only_on_the_line_seed(synth: IndexTTS2Synthesizer, voice) -> None:
    e = synth.engine
    params = SamplingParams(beams=3, max_tokens=12, stop_token=e.tokens.stop_mel)
    texts = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [14]]
    prefixes = [e.prefix(voice.state.spk_latents, voice.state.emovec, t) for t in texts]
    seeds = [3, 4, 5]
    batch = e.generate(prefixes, params, [segment_seed_generator(s, 0) for s in seeds])
    for p, s, b in zip(prefixes, seeds, batch, strict=True):
        (one,) = e.generate([p], params, [segment_seed_generator(s, 0)])
        np.testing.assert_array_equal(b.codes, one.codes)
    other = e.generate([prefixes[0]], params, [segment_seed_generator(99, 0)])[0]
    assert not np.array_equal(other.codes, batch[0].codes)


def test_deterministic_stages_batched_equal_single(
    synth: IndexTTS2Synthesizer, voice, voice_wav2: Path
) -> None:
    e = synth.engine
    v2 = synth.prepare_voice(voice_wav2).state
    v1 = voice.state
    rng = np.random.default_rng(0)
    codes = [rng.integers(0, 8192, n) for n in (7, 12, 3)]
    vs = [v1, v2, v1]
    prefixes = [
        e.prefix(v.spk_latents, v.emovec, ids)
        for v, ids in zip(vs, ([5, 6], [7, 8, 9, 10], [11]), strict=True)
    ]
    lat_b = e.latent(prefixes, codes)
    cond_b, ylens_b = e.s2mel_content(lat_b, codes)
    np.testing.assert_array_equal(ylens_b, [frames_for(c.size) for c in codes])
    preset = e.preset
    wav_by: dict[int, list[np.ndarray]] = {}
    try:
        # 0: one s2mel/vocoder call for the batch (rows padded); 2: two calls; 1 (the CPU presets): three
        for rows in (0, 2, 1):
            e.preset = replace(preset, s2mel=replace(preset.s2mel, rows_per_call=rows))
            before = e.times.calls.get("vocoder", 0)
            noise = [noise_generator(i, 0) for i in range(3)]
            wav_by[rows] = e.codes_to_wavs(vs, prefixes, codes, noise, steps=3)
            assert e.times.calls["vocoder"] - before == {0: 1, 2: 2, 1: 3}[rows]
    finally:
        e.preset = preset
    for rows in (2, 1):
        for a, b in zip(wav_by[0], wav_by[rows], strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    wav_b = wav_by[0]
    for i in range(3):
        (lat_1,) = e.latent([prefixes[i]], [codes[i]])
        np.testing.assert_allclose(lat_b[i], lat_1, rtol=0, atol=1e-5)
        cond_1, _ = e.s2mel_content([lat_1], [codes[i]])
        np.testing.assert_allclose(cond_b[i, : ylens_b[i]], cond_1[0], rtol=0, atol=1e-5)
        assert np.all(cond_b[i, ylens_b[i] :] == 0)
        (wav_1,) = e.codes_to_wavs([vs[i]], [prefixes[i]], [codes[i]], [noise_generator(i, 0)], steps=3)
        assert wav_1.size == 256 * frames_for(codes[i].size)
        np.testing.assert_allclose(wav_b[i], wav_1, rtol=0, atol=1e-5)
    # the vocoder alone, rows of different lengths
    mels = [rng.standard_normal((80, n)).astype(np.float32) for n in (9, 4)]
    both = e.vocode(mels)
    for m, w in zip(mels, both, strict=True):
        np.testing.assert_allclose(w, e.vocode([m])[0], rtol=0, atol=1e-5)


def test_cfm_start_noise_is_injectable(synth: IndexTTS2Synthesizer, voice) -> None:
    e = synth.engine
    v = voice.state
    rng = np.random.default_rng(1)
    codes = [rng.integers(0, 8192, 6)]
    prefix = [e.prefix(v.spk_latents, v.emovec, [5, 6])]
    tm = v.ref_mel.shape[1]
    z = rng.standard_normal((80, tm + frames_for(6))).astype(np.float32)
    a = e.codes_to_wavs([v], prefix, codes, [z], steps=2)[0]
    b = e.codes_to_wavs([v], prefix, codes, [z.copy()], steps=2)[0]
    c = e.codes_to_wavs([v], prefix, codes, [z * 0.5], steps=2)[0]
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-4


def test_voice_cache_hit_on_second_prepare(tiny_engine_dir: Path, voice_wav: Path, tmp_path: Path) -> None:
    s = IndexTTS2Synthesizer.load(tiny_engine_dir, cache_dir=tmp_path / "c")
    v1 = s.prepare_voice(voice_wav)
    assert s.last_voice_cached is False
    files = list((tmp_path / "c").rglob("*.npz"))
    assert len(files) == 1 and not list((tmp_path / "c").rglob("*.tmp"))
    s2 = IndexTTS2Synthesizer.load(tiny_engine_dir, cache_dir=tmp_path / "c")
    v2 = s2.prepare_voice(voice_wav)
    assert s2.last_voice_cached is True
    assert s2.engine.sessions.opened == {}  # a cached voice needs no model at all
    for k in VoiceConditioning.FIELDS:
        np.testing.assert_array_equal(getattr(v1.state, k), getattr(v2.state, k))
    assert v1.key == v2.key
    # another emotion spec is another entry
    s2.prepare_voice(voice_wav, emotion=EmotionSpec(alpha=0.5))
    assert s2.last_voice_cached is False
    assert len(list((tmp_path / "c").rglob("*.npz"))) == 2
    # a damaged entry is a miss, then repaired
    files[0].write_bytes(b"garbage")
    s2.prepare_voice(voice_wav)
    assert s2.last_voice_cached is False
    s2.prepare_voice(voice_wav)
    assert s2.last_voice_cached is True


def test_emotion_modes_change_the_emovec(
    synth: IndexTTS2Synthesizer, voice, voice_wav: Path, voice_wav2: Path
) -> None:
    base = voice.state.emovec
    by_audio = synth.prepare_voice(voice_wav, emotion=EmotionSpec(audio=voice_wav2, alpha=0.6)).state
    by_vector = synth.prepare_voice(voice_wav, emotion=EmotionSpec(vector=(0.5, 0, 0, 0, 0, 0, 0, 0.2))).state
    half = synth.prepare_voice(voice_wav, emotion=EmotionSpec(audio=voice_wav2, alpha=0.3)).state
    full = synth.prepare_voice(voice_wav, emotion=EmotionSpec(audio=voice_wav2, alpha=1.0)).state
    for other in (by_audio, by_vector):
        assert np.abs(other.emovec - base).max() > 1e-4
        np.testing.assert_array_equal(other.spk_latents, voice.state.spk_latents)
    # alpha blends linearly between the speaker's own emovec and the emotion reference's
    e = synth.engine
    spk = e.w2v_bert(e.speaker_audio(voice_wav).audio_16k)
    b = e.emovec_of(spk)
    np.testing.assert_allclose(half.emovec, b + 0.3 * (full.emovec - b), rtol=0, atol=1e-4)
    with pytest.raises(UsageError, match="emotion-vector"):
        synth.prepare_voice(voice_wav, emotion=EmotionSpec(vector=(1.0, 2.0)))


def test_per_line_errors_do_not_sink_the_batch(synth: IndexTTS2Synthesizer, voice) -> None:
    reqs = [
        _req(voice, "Hello there.", 1, "ok"),
        _req(voice, "   ", 2, "empty"),
        _req(voice, "Hello there.", 3, "badopt", bogus=1),
        _req(voice, "Hello there.", 4, "badval", top_k="many"),
    ]
    res = synth.synthesize(reqs)
    assert [r.line_id for r in res] == ["ok", "empty", "badopt", "badval"]
    assert res[0].ok
    assert "no speakable tokens" in res[1].error
    assert "bogus" in res[2].error and "allowed" in res[2].error
    assert "top_k" in res[3].error
    ok_alone = synth.synthesize(reqs[:1])[0]
    np.testing.assert_allclose(res[0].audio, ok_alone.audio, rtol=0, atol=1e-5)


def test_euler_times_match_torch_linspace() -> None:
    import torch

    for steps in (1, 3, 10, 25, 32):
        want = torch.linspace(0, 1, steps + 1).numpy()
        np.testing.assert_array_equal(euler_times(steps), want)
    sway = euler_times(8, "sway")
    assert sway[0] == 0 and abs(sway[-1] - 1) < 1e-6 and np.all(np.diff(sway) > 0)
    assert sway[1] < euler_times(8)[1]  # denser near t = 0


# --------------------------------------------------------------------------------- mismatched engines


def _copy_engine(src: Path, dst: Path) -> Path:
    """A cheap copy: symlinks for the component files, a real manifest to edit."""
    dst.mkdir()
    for p in src.iterdir():
        if p.name != "manifest.json":
            (dst / p.name).symlink_to(p.resolve())
    shutil.copyfile(src / "manifest.json", dst / "manifest.json")
    return dst


def _edit(folder: Path, fn) -> None:
    m = json.loads((folder / "manifest.json").read_text())
    fn(m)
    (folder / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(model_id="indextts3"), "indextts3"),
        (lambda m: m.update(format_version=99), "format_version"),
        (lambda m: m.update(model_version="2.5"), "model_version '2.5'"),
        (lambda m: m["components"].pop("dit_cfg_step"), "component 'dit_cfg_step' is missing"),
        (lambda m: m["components"]["gpt_trunk"].update(backend="tensorrt-llm"), "backend 'tensorrt-llm'"),
        (lambda m: m["components"]["bigvgan"]["inputs"].pop("lengths"), "'bigvgan' inputs"),
        (lambda m: m["files"].pop("emo_matrix"), "'emo_matrix'"),
        (lambda m: m["config"]["gpt"].pop("heads"), "config.gpt.heads"),
        (lambda m: m["preset_build_keys"]["limits"].update(max_batch=64), "limits"),
    ],
)
def test_mismatched_engine_is_refused(tiny_engine_dir: Path, tmp_path: Path, edit, message: str) -> None:
    eng = _copy_engine(tiny_engine_dir, tmp_path / "eng")
    _edit(eng, edit)
    with pytest.raises(EngineMismatchError) as err:
        IndexTTS2Synthesizer.load(eng)
    assert message in str(err.value)


def test_runtime_preset_may_change_run_keys_only(tiny_engine_dir: Path) -> None:
    from fasttts_cli.spec.presets import load_preset

    p = load_preset("cpu-fp32")
    eng = IndexTTS2Engine.load(tiny_engine_dir, p.with_run_keys(decode={"beams": 1}, s2mel={"steps": 4}))
    assert eng.preset.decode.beams == 1 and eng.preset.s2mel.steps == 4
    from dataclasses import replace

    from fasttts_cli.spec.presets import Limits

    with pytest.raises(EngineMismatchError, match=r"build-time keys: limits\.max_batch") as ei:
        IndexTTS2Engine.load(tiny_engine_dir, replace(p, limits=Limits(max_batch=2)))
    # same preset name, different keys: the preset file changed since the build
    assert "changed since this engine was built" in (ei.value.hint or "")


def test_session_io_mismatch_is_named(tiny_engine_dir: Path, tmp_path: Path) -> None:
    """A component file whose graph does not have the IO the manifest promises is refused on open."""
    eng = _copy_engine(tiny_engine_dir, tmp_path / "eng")
    _edit(eng, lambda m: m["components"]["campplus"].update(file="codec_vq2emb.onnx"))
    e = IndexTTS2Engine.load(eng)
    with pytest.raises(EngineMismatchError, match="component 'campplus' has inputs"):
        e.session("campplus")


def _stops_spinning(session: object) -> bool:
    opts = session._sess.get_session_options()  # type: ignore[attr-defined]
    try:
        return opts.get_session_config_entry("session.force_spinning_stop") == "1"
    except RuntimeError:  # never set: onnxruntime's default, workers spin after a run
        return False


def test_only_the_trunk_keeps_its_workers_spinning(tiny_engine_dir: Path) -> None:
    """Sessions that alternate stop their workers after each run (else they take the cores from the
    next session); the trunk, run back to back per token, keeps spinning."""
    e = IndexTTS2Engine.load(tiny_engine_dir)
    e.open_all()
    spinning = {name for name, s in e.sessions.opened.items() if not _stops_spinning(s)}
    assert spinning == {GPT_TRUNK} and len(e.sessions.opened) > 5


def _threads(session: object) -> int:
    return int(session._sess.get_session_options().intra_op_num_threads)  # type: ignore[attr-defined]


@pytest.mark.parametrize("alpha", [1.0, 0.6])
def test_voice_chains_side_by_side_match_one_after_the_other(
    tiny_engine_dir: Path, voice_wav: Path, voice_wav2: Path, alpha: float
) -> None:
    """On >= 2 CPU threads the speaker and emotion chains of a voice run concurrently, each of their
    sessions on half the threads; the conditioning is that of the sequential path (1 thread)."""
    side = IndexTTS2Engine.load(tiny_engine_dir, threads=2)
    alone = IndexTTS2Engine.load(tiny_engine_dir, threads=1)
    assert side.voice_chains_side_by_side and not alone.voice_chains_side_by_side
    got, want = (
        e.voice_conditioning(e.speaker_audio(voice_wav), e.emotion_audio(voice_wav2), alpha=alpha)
        for e in (side, alone)
    )
    for k, v in want.arrays().items():
        np.testing.assert_allclose(got.arrays()[k], v, rtol=1e-5, atol=1e-6, err_msg=k)
    assert side.times.calls["w2v_bert"] == 2
    side.open_all()
    halves = {"w2v_bert", "speaker_conditioner", "emotion_conditioner"}
    opened = side.sessions.opened
    assert {n: _threads(s) for n, s in opened.items() if n in halves} == dict.fromkeys(halves, 1)
    assert all(_threads(s) == 2 for n, s in opened.items() if n not in halves)
    side.close()
    assert side._voice_side is None
