"""Row reports from the real engines (tiny IndexTTS-2 engine, piper) and build's per-component callback."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer
from fasttts_cli.synth.synthesizer import SynthRequest, Voice
from tests.conftest_engine import *  # noqa: F403 (fixtures)

FAST = {"max_tokens": 9, "steps": 3}


@pytest.fixture(scope="module")
def synth(tiny_engine_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> IndexTTS2Synthesizer:
    s = IndexTTS2Synthesizer.load(tiny_engine_dir, cache_dir=tmp_path_factory.mktemp("voice-cache"))
    yield s
    s.close()


def _logged(synth: IndexTTS2Synthesizer, monkeypatch: pytest.MonkeyPatch, log: list[str]) -> None:
    e = synth.engine
    real = e.codes_to_wavs

    def codes_to_wavs(voices, *a, **kw):
        log.append(f"s2mel {len(voices)}")
        return real(voices, *a, **kw)

    monkeypatch.setattr(e, "codes_to_wavs", codes_to_wavs)


@pytest.mark.parametrize("rows_per_call", [1, 0])
def test_indextts2_reports_each_line_when_its_audio_is_out(
    synth: IndexTTS2Synthesizer, voice_wav: Path, monkeypatch: pytest.MonkeyPatch, rows_per_call: int
) -> None:
    p = synth.engine.preset
    monkeypatch.setattr(
        synth.engine, "preset", replace(p, s2mel=replace(p.s2mel, rows_per_call=rows_per_call))
    )
    v = synth.prepare_voice(voice_wav)
    reqs = [
        SynthRequest(str(k), t, v, seed=k, options=FAST)
        for k, t in enumerate(["Hello there.", "   ", "Another line.", "A third one."])
    ]
    log: list[str] = []
    _logged(synth, monkeypatch, log)
    got: dict[int, object] = {}

    def on_result(k, res):
        log.append(f"row {k}")
        got[k] = res

    out = synth.synthesize(reqs, on_result=on_result)
    assert log[0] == "row 1"  # the line with nothing to say fails before any model runs
    assert sorted(got) == [0, 1, 2, 3] and all(got[k] is out[k] for k in got)
    assert not out[1].ok and all(out[k].ok for k in (0, 2, 3))
    if rows_per_call == 1:  # a CPU preset: s2mel line by line, each line out right after its call
        assert sorted(log[2::2]) == ["row 0", "row 2", "row 3"]
        assert log[1:] == [x for k in log[2::2] for x in ("s2mel 1", k)]
    else:  # the whole batch in one s2mel call: the three lines come out together after it
        assert log[1:] == ["s2mel 3", "row 0", "row 2", "row 3"]
    # the same audio as without a callback
    again = synth.synthesize(reqs)
    for a, b in zip(out, again, strict=True):
        assert (a.audio is None) == (b.audio is None)
        if a.audio is not None:
            np.testing.assert_allclose(a.audio, b.audio, rtol=0, atol=1e-5)


@pytest.mark.skipif(
    importlib.util.find_spec("piper") is None, reason="the draft voice (piper-tts) is not installed"
)
def test_draft_reports_each_line_as_piper_writes_it() -> None:
    from fasttts_cli.synth.draft import DraftSynthesizer

    s = DraftSynthesizer(deterministic=True)
    v = Voice("x", Path("x.wav"), "0")
    texts = ["Hello there.", "", "A second line, somewhat longer than the first.", "Third."]
    reqs = [SynthRequest(str(k), t, v, 0) for k, t in enumerate(texts)]
    seen: list[int] = []
    out = s.synthesize(reqs, on_result=lambda k, r: seen.append(k))
    assert seen == [1, 0, 2, 3]  # the empty line at once, then in piper's (input) order
    assert [r.ok for r in out] == [True, False, True, True]
    alone = s.synthesize([reqs[2]])[0]
    np.testing.assert_array_equal(alone.audio, out[2].audio)


def test_build_reports_each_component(tiny_checkpoint_dir: Path, tmp_path: Path) -> None:
    from fasttts_cli.build.export import build_engine

    seen = []
    build_engine(
        tiny_checkpoint_dir,
        "cpu-fp32",
        tmp_path / "engine",
        components=["campplus", "codec_vq2emb"],
        on_component=seen.append,
    )
    assert [(c.index, c.total) for c in seen] == [(1, 2), (2, 2)]
    assert {c.name for c in seen} == {"campplus", "codec_vq2emb"} and all(c.seconds > 0 for c in seen)


def test_build_says_where_the_engine_went_once(
    tiny_checkpoint_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fasttts_cli.cli.commands import main

    with pytest.raises(SystemExit) as ei:
        main(["build", "--checkpoint", str(tiny_checkpoint_dir), "--out", str(tmp_path / "e")])
    assert ei.value.code == 0
    got = capsys.readouterr()
    assert (got.out + got.err).count("engine written to") == 1, got
