"""IndexTTS-2 renders a planned line to an exact length (issue 19): plan (the GPT's codes) + render.

On the tiny engine: render(frames=F) gives exactly F * hop samples for one- and multi-segment lines;
rows rendered together at different targets equal each rendered alone; the natural render equals
synthesize and the stage API's codes_to_wavs (the pre-change path); a plan survives its JSON round trip;
an engine folder built before s2mel_content took its target frames renders only the natural length.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.indextts2.components import S2MEL_CONTENT
from fasttts_cli.indextts2.engine import noise_generator
from fasttts_cli.indextts2.line_plan import SegmentCodes, split_target
from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer
from fasttts_cli.synth.synthesizer import LinePlan, RenderRequest, SynthRequest
from tests.conftest_engine import *  # noqa: F403 (fixtures)

FAST = {"max_tokens": 12, "steps": 3}
SHORT = "Hello there, my friend."
LONG_TEXT = (
    "The quick brown fox jumps over the lazy dog near the river bank today. "
    "A second sentence follows here, long enough that the text needs two segments to be spoken. "
    "And a third one closes the paragraph with some more words for the tokenizer to count."
)


def _open(engine_dir: Path, cache: Path, **s2mel) -> IndexTTS2Synthesizer:
    s = IndexTTS2Synthesizer.load(engine_dir, cache_dir=cache)
    if s2mel:
        s.engine.preset = s.engine.preset.with_run_keys(s2mel=s2mel)
    return s


@pytest.fixture(scope="module")
def synth(tiny_engine_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> IndexTTS2Synthesizer:
    s = _open(tiny_engine_dir, tmp_path_factory.mktemp("voice-cache"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def batched(tiny_engine_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> IndexTTS2Synthesizer:
    """Every s2mel row of a call in one batch (rows_per_call 0), so batch-mates share padding."""
    s = _open(tiny_engine_dir, tmp_path_factory.mktemp("voice-cache-b"), rows_per_call=0)
    yield s
    s.close()


@pytest.fixture(scope="module")
def voice(synth: IndexTTS2Synthesizer, voice_wav: Path):
    return synth.prepare_voice(voice_wav)


def _req(voice, text: str, seed: int, line_id: str = "1", **opts) -> SynthRequest:
    return SynthRequest(line_id=line_id, text=text, voice=voice, seed=seed, options={**FAST, **opts})


def _targets(natural_samples: int, hop: int) -> list[int]:
    """Several frame counts inside +-25% of the natural length, the ends included."""
    f0 = natural_samples / hop
    return sorted({int(np.ceil(0.75 * f0)), int(0.9 * f0), round(f0), int(1.1 * f0), int(1.25 * f0)})


def test_plan_info_and_natural_length(synth: IndexTTS2Synthesizer, voice) -> None:
    assert synth.hop == synth.engine.hop == 256 and synth.renders_to_length
    reqs = [_req(voice, SHORT, 5, "a"), _req(voice, LONG_TEXT, 6, "b"), _req(voice, "   ", 7, "c")]
    seen: list[int] = []
    plans = synth.plan(reqs, on_result=lambda k, p: seen.append(k))
    assert sorted(seen) == [0, 1, 2]  # each line reported once
    a, b, bad = plans
    assert not bad.ok and "no speakable tokens" in (bad.error or "")
    assert len(b.info["segments"]) >= 2, "the long text should need several segments"
    for p, r in zip((a, b), reqs[:2], strict=True):
        assert p.ok and p.payload is not None and p.payload.dtype == np.int32
        assert sum(p.info["segments"]) == p.payload.size == p.n_tokens
        assert json.loads(json.dumps(p.info)) == p.info  # stored as it is in a cache meta file
        assert p.hit_token_limit == (not all(p.info["stopped"]))
        (res,) = synth.synthesize([r])
        assert res.ok and res.audio is not None and res.audio.size == p.natural_samples


def test_natural_render_equals_synthesize_and_codes_to_wavs(synth: IndexTTS2Synthesizer, voice) -> None:
    r = _req(voice, SHORT, 31)
    (plan,) = synth.plan([r])
    # the plan as the plan cache gives it back: payload from its array, info from JSON
    stored = LinePlan(
        plan.line_id,
        plan.sample_rate,
        plan.natural_samples,
        np.array(plan.payload),
        json.loads(json.dumps(plan.info)),
        n_tokens=plan.n_tokens,
        hit_token_limit=plan.hit_token_limit,
    )
    (got,) = synth.render([RenderRequest(r, stored)])
    (syn,) = synth.synthesize([r])
    np.testing.assert_array_equal(got.audio, syn.audio)
    assert (got.n_tokens, got.hit_token_limit) == (syn.n_tokens, syn.hit_token_limit)
    # the pre-change path: the stage API from the same codes, prefix and noise generator
    e = synth.engine
    (ids,) = e.text.segments(SHORT)
    prefix = e.prefix(voice.state.spk_latents, voice.state.emovec, ids)
    (codes,) = SegmentCodes.unpack(plan.payload, plan.info).codes
    (want,) = e.codes_to_wavs([voice.state], [prefix], [codes], [noise_generator(31, 0)], steps=3)
    np.testing.assert_array_equal(got.audio, want)


@pytest.mark.parametrize("text", [SHORT, LONG_TEXT], ids=["one-segment", "segments"])
def test_render_to_exact_length(synth: IndexTTS2Synthesizer, voice, text: str) -> None:
    r = _req(voice, text, 77)
    (plan,) = synth.plan([r])
    targets = _targets(plan.natural_samples, synth.hop)
    assert len(targets) >= 4
    out = synth.render([RenderRequest(r, plan, f) for f in targets])
    for f, res in zip(targets, out, strict=True):
        assert res.ok, res.error
        assert res.audio is not None and res.audio.dtype == np.float32
        assert res.audio.size == f * synth.hop, (f, res.audio.size)
        assert np.abs(res.audio).max() > 0
        assert res.n_tokens == plan.n_tokens
    counts = plan.info["segments"]
    if len(counts) > 1:  # the gaps stay silent where the split puts them
        natural = [int(x) for x in synth.engine.target_lengths(counts)]
        for f, res in zip(targets, out, strict=True):
            split = split_target(f, natural, synth.hop, round(0.2 * synth.sample_rate))
            first = split.frames[0] * synth.hop
            assert np.all(res.audio[first : first + split.gaps[0]] == 0)
            assert res.audio[first - synth.hop : first].any()


def test_batched_targets_equal_one_by_one(batched: IndexTTS2Synthesizer, voice_wav: Path, voice_wav2) -> None:
    v1, v2 = batched.prepare_voice(voice_wav), batched.prepare_voice(voice_wav2)
    reqs = [_req(v1, SHORT, 1, "a"), _req(v2, LONG_TEXT, 2, "b"), _req(v2, "Short one.", 3, "c")]
    plans = batched.plan(reqs)
    hop = batched.hop
    frames = [round(0.8 * plans[0].natural_samples / hop), None, round(1.2 * plans[2].natural_samples / hop)]
    items = [RenderRequest(r, p, f) for r, p, f in zip(reqs, plans, frames, strict=True)]
    seen: list[int] = []
    together = batched.render(items, on_result=lambda k, res: seen.append(k))
    assert sorted(seen) == [0, 1, 2]
    alone = [batched.render([it])[0] for it in items]
    for t, a, it in zip(together, alone, items, strict=True):
        assert t.ok and a.ok, (t.error, a.error)
        want = it.plan.natural_samples if it.frames is None else it.frames * hop
        assert t.audio.size == a.audio.size == want
        np.testing.assert_allclose(t.audio, a.audio, rtol=0, atol=1e-5)
    rev = batched.render(items[::-1])[::-1]
    for t, r in zip(together, rev, strict=True):
        np.testing.assert_allclose(t.audio, r.audio, rtol=0, atol=1e-5)


def test_a_target_too_short_for_the_gaps_fails_that_line(synth: IndexTTS2Synthesizer, voice) -> None:
    reqs = [_req(voice, LONG_TEXT, 9, "long"), _req(voice, SHORT, 10, "short")]
    plans = synth.plan(reqs)
    k, hop = len(plans[0].info["segments"]), synth.hop
    short = ((k - 1) * round(0.2 * synth.sample_rate) + k * hop) // hop - 1  # one frame under the minimum
    bad, ok = synth.render([RenderRequest(reqs[0], plans[0], short), RenderRequest(reqs[1], plans[1], 10)])
    assert not bad.ok and "too short" in (bad.error or "")
    assert ok.ok and ok.audio.size == 10 * synth.hop
    # a failed plan renders to its own error
    failed = LinePlan("x", synth.sample_rate, error="segment 1 of 1: no codes")
    (res,) = synth.render([RenderRequest(reqs[1], failed, 10)])
    assert res.error == "segment 1 of 1: no codes"
    # a plan that does not fit the line's text (re-planned text) is refused, not rendered
    (res,) = synth.render([RenderRequest(reqs[0], plans[1])])
    assert not res.ok and "segments" in (res.error or "")


class _FixedLengthContent:
    """s2mel_content as engines built before it took its target frames: no `ylens` input, floor(1.72 n)
    inside, `ylens` an output (emulated over the current graph at the natural target)."""

    def __init__(self, inner, engine) -> None:
        self.inner, self.engine = inner, engine

    @property
    def inputs(self):
        return [i for i in self.inner.inputs if i.name != "ylens"]

    @property
    def outputs(self):
        return self.inner.outputs

    def run(self, outputs, feeds):
        assert "ylens" not in feeds, "the runtime fed an input the old graph does not have"
        ylens = self.engine.target_lengths(feeds["code_lens"])
        return {"cond": self.inner.run(["cond"], {**feeds, "ylens": ylens})["cond"], "ylens": ylens}


def test_an_engine_built_before_render_to_length(tiny_engine_dir: Path, tmp_path: Path, voice_wav) -> None:
    s = _open(tiny_engine_dir, tmp_path)
    try:
        e = s.engine
        e.sessions._open[S2MEL_CONTENT] = _FixedLengthContent(e.session(S2MEL_CONTENT), e)
        assert not s.renders_to_length
        v = s.prepare_voice(voice_wav)
        r = _req(v, SHORT, 4)
        (plan,) = s.plan([r])
        natural, fitted = s.render([RenderRequest(r, plan), RenderRequest(r, plan, 20)])
        assert natural.ok and natural.audio.size == plan.natural_samples
        assert not fitted.ok and "fasttts build" in (fitted.error or "")
        (syn,) = s.synthesize([r])
        np.testing.assert_array_equal(syn.audio, natural.audio)
    finally:
        s.close()
    # a fresh engine of the same folder renders to the length, the same natural audio
    s = _open(tiny_engine_dir, tmp_path)
    try:
        (res,) = s.synthesize([_req(s.prepare_voice(voice_wav), SHORT, 4)])
        np.testing.assert_array_equal(res.audio, natural.audio)
    finally:
        s.close()


def test_torch_backend_renders_to_length(tiny_checkpoint_dir: Path, voice_wav: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="the torch backend needs torch")
    from fasttts_cli.indextts2.synthesizer_torch import TorchSynthesizer

    torch.set_num_threads(1)
    # bf16: on the CPU, fp16 autocast makes a padded row differ from the row alone by ~1e-3 at the
    # natural length too (not a render matter); bf16 keeps batch == alone within 1e-6
    s = TorchSynthesizer.load(tiny_checkpoint_dir, "gpu-torch-bf16", device="cpu", cache_dir=tmp_path)
    assert s.renders_to_length and s.hop == 256
    v = s.prepare_voice(voice_wav)
    reqs = [_req(v, SHORT, 8, "a"), _req(v, "Short one.", 9, "b")]
    plans = s.plan(reqs)
    (syn,) = s.synthesize(reqs[:1])
    (nat,) = s.render([RenderRequest(reqs[0], plans[0])])
    np.testing.assert_array_equal(nat.audio, syn.audio)
    assert nat.audio.size == plans[0].natural_samples
    f0, f1 = (round(k * p.natural_samples / s.hop) for k, p in zip((0.8, 1.2), plans, strict=True))
    items = [RenderRequest(reqs[0], plans[0], f0), RenderRequest(reqs[1], plans[1], f1)]
    together = s.render(items)
    assert [r.audio.size for r in together] == [f0 * s.hop, f1 * s.hop]
    for t, it in zip(together, items, strict=True):
        np.testing.assert_allclose(t.audio, s.render([it])[0].audio, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("frames", "natural"), [(40, [15]), (80, [15, 30, 20]), (39, [15, 15, 15]), (60, [1, 50]), (100, [3, 3])]
)
def test_split_target_is_exact_and_proportional(frames: int, natural: list[int]) -> None:
    hop, gap = 256, 4410
    split = split_target(frames, natural, hop, gap)
    assert split.samples(hop) == frames * hop
    assert len(split.frames) == len(natural) and min(split.frames) >= 1
    assert split.gaps[:-1] == [gap] * (len(natural) - 2) if len(natural) > 1 else split.gaps == []
    if split.gaps:
        assert gap <= split.gaps[-1] < gap + hop  # the remainder (< one frame) goes into the last gap
    budget = sum(split.frames)
    for f, n in zip(split.frames, natural, strict=True):  # within one frame of the exact share
        assert abs(f - budget * n / sum(natural)) < 1 or f == 1


def test_split_target_refuses_a_target_shorter_than_its_gaps() -> None:
    with pytest.raises(ValueError, match="too short for 3 segments"):
        split_target(36, [15, 15, 15], 256, 4410)  # 2 gaps (8820) + 3 frames (768) need 38 frames
    assert split_target(38, [15, 15, 15], 256, 4410).frames == [1, 1, 1]


def test_segment_codes_round_trip() -> None:
    got = SegmentCodes([np.array([3, 4, 5]), np.array([7])], [True, False])
    info = json.loads(json.dumps(got.info()))
    back = SegmentCodes.unpack(got.payload(), info)
    assert [c.tolist() for c in back.codes] == [[3, 4, 5], [7]] and back.stopped == [True, False]
    with pytest.raises(ValueError, match="do not fit"):
        SegmentCodes.unpack(got.payload()[:3], info)


def test_cli_synth_duration_is_exact_on_the_tiny_engine(tiny_engine_dir: Path, voice_wav, tmp_path, capsys):
    """`fasttts synth --duration D` returns exactly round(D * 22050 / 256) * 256 samples, for D inside the
    render bounds of the line's natural duration; outside them it is exit 2 naming both."""
    import soundfile as sf

    from fasttts_cli.cli.commands import main

    def synth(*extra: str) -> tuple[int, dict]:
        out = tmp_path / "line.wav"
        args = ["synth", SHORT, "--voice", str(voice_wav), "-o", str(out), "--engine", str(tiny_engine_dir)]
        with pytest.raises(SystemExit) as ei:
            main([*args, "--json", *extra])
        return int(ei.value.code), json.loads(capsys.readouterr().out)

    code, natural = synth()
    assert code == 0 and natural["natural"] == natural["duration"]
    sr = natural["sample_rate"]
    for ratio in (0.85, 1.2):
        d = round(natural["natural"] * ratio, 3)
        code, r = synth("--duration", str(d))
        assert code == 0, r
        assert r["samples"] == round(d * sr / 256) * 256 == sf.info(str(tmp_path / "line.wav")).frames
        assert r["natural"] == natural["natural"]  # the same plan (seed), rendered to another length
    code, r = synth("--duration", str(round(natural["natural"] * 2.0, 3)))
    assert code == 2 and not r["ok"] and "outside the render bounds" in r["error"]
