"""--emotion-from-line on the tiny IndexTTS-2 engine: each line's own cue audio conditions its emotion (two
lines of one speaker get different emotion vectors over the same timbre), and a re-run synthesizes
nothing (the per-line emotion reference is part of each line's cache key)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fasttts_cli.app.job import DubOptions
from fasttts_cli.app.pipeline import run_dub
from fasttts_cli.dubbing.speakers import FROM_VIDEO
from tests.conftest_engine import *  # noqa: F403 (fixtures: tiny_engine_dir)
from tests.test_cast_dub import CUES, _episode


def test_emotion_from_line_conditions_each_line_on_the_tiny_engine(
    tiny_engine_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer

    ep = _episode(tmp_path / "ep")
    script = tmp_path / "two.tsv"  # speaker A's two solo lines: enough speech for a cast, two deliveries
    rows = [f"{s}\t{e}\t{spk}\t{txt}" for s, e, spk, txt, _ in (CUES[0], CUES[4])]
    script.write_text("start\tend\tspeaker\ttext\n" + "\n".join(rows) + "\n", encoding="utf-8")
    o = DubOptions(
        script=script,
        voices=[FROM_VIDEO],
        video=ep["video"],
        emotion_from_line=True,
        output_dir=tmp_path / "out",
        work_dir=tmp_path / "work",
    )
    synth = IndexTTS2Synthesizer.load(tiny_engine_dir, "cpu-fp32", cache_dir=tmp_path / "voices")
    prepared: list[Any] = []
    prepare = synth.prepare_voice

    def spy(path: Path, **kw: Any) -> Any:
        prepared.append(prepare(path, **kw))
        return prepared[-1]

    monkeypatch.setattr(synth, "prepare_voice", spy)
    try:
        first = run_dub(o, synthesizer=synth)
        assert first.lines["synthesized"] == 2 and first.lines["emotion_from_line"] == 2
        a, b = prepared
        assert a.path == b.path == tmp_path / "work" / "cast" / "A.wav"  # one timbre reference
        assert a.emotion.audio != b.emotion.audio  # ... and each line's own cue
        assert np.allclose(a.state.spk_latents, b.state.spk_latents)
        assert not np.allclose(a.state.emovec, b.state.emovec, atol=1e-5)
        again = run_dub(o, synthesizer=synth)
        assert again.lines["synthesized"] == 0 and again.lines["cached"] == 2
    finally:
        synth.close()


@pytest.mark.parametrize(("model", "alpha"), [("2", 1.0), ("2", 0.6), ("2.5", 0.6)])
def test_a_clip_over_a_prepared_speaker_equals_the_whole_voice_flow(
    request: pytest.FixtureRequest, tmp_path: Path, model: str, alpha: float
) -> None:
    """prepare_voice with an emotion clip conditions the speaker once and adds the clip's emotion chain
    alone (indextts2/clip_emotion.py): the result equals voice_conditioning(speaker, clip) field by field,
    and the clip's cache entry is its (D,) vector, not a whole voice."""
    from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer
    from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer
    from fasttts_cli.synth.synthesizer import EmotionSpec

    cls = IndexTTS2Synthesizer if model == "2" else IndexTTS25Synthesizer
    folder = request.getfixturevalue("tiny_engine_dir" if model == "2" else "engine25_dir")
    speaker = write_test_voice(tmp_path / "spk.wav", 3.0, f0=140.0, seed=1)  # noqa: F405
    clip = write_test_voice(tmp_path / "clip.wav", 1.5, f0=260.0, seed=2)  # noqa: F405
    synth = cls.load(folder, "cpu-fp32", cache_dir=tmp_path / "voices")
    try:
        got = synth.prepare_voice(speaker, emotion=EmotionSpec(audio=clip, alpha=alpha)).state
        e = synth.engine
        want = e.voice_conditioning(e.speaker_audio(speaker), e.emotion_audio(clip), alpha=alpha)
        for k in want.FIELDS:
            np.testing.assert_allclose(getattr(got, k), getattr(want, k), rtol=1e-5, atol=1e-6, err_msg=k)
        again = synth.prepare_voice(speaker, emotion=EmotionSpec(audio=clip, alpha=alpha))
        assert synth.last_voice_cached and np.array_equal(again.state.emovec, got.emovec)
        sizes = sorted(p.stat().st_size for p in (tmp_path / "voices").rglob("*.npz"))
        assert sizes[0] < sizes[-1] / 4  # the clip's entry: one vector
    finally:
        synth.close()
