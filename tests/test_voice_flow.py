"""One voice-conditioning flow for every backend: `indextts2.voice.VoiceFlow` over each engine's stages.

The torch engine supplies its networks (w2v-BERT, codec, CAMPPlus, length regulator, conditioners) and
inherits the flow; on the same tiny checkpoint its conditioning equals the ONNX engine's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.indextts2.engine import IndexTTS2Engine
from fasttts_cli.indextts2.stages import EngineStages, VoiceStages
from fasttts_cli.indextts2.voice import VoiceFlow
from tests.conftest_engine import *  # noqa: F403 (fixtures)

torch = pytest.importorskip("torch", reason="the torch backend needs torch (the `build` extra)")

FLOW = ("voice_conditioning", "features", "emotion_vector", "emotion_vector_mode", "speaker_audio")


@pytest.fixture(scope="module")
def engines(tiny_checkpoint_dir: Path, tiny_engine_dir: Path):
    from fasttts_cli.indextts2.engine_torch import TorchEngine

    torch.set_num_threads(1)
    t = TorchEngine.load(tiny_checkpoint_dir, "gpu-torch-fp16", device="cpu")
    o = IndexTTS2Engine.load(tiny_engine_dir, threads=1)
    yield t, o
    o.close()


def test_both_engines_implement_the_stage_protocols(engines) -> None:
    for e in engines:
        assert isinstance(e, VoiceStages) and isinstance(e, EngineStages), type(e).__name__
        for name in FLOW:  # the flow is the shared one, not a per-backend copy
            assert getattr(type(e), name) is getattr(VoiceFlow, name), (type(e).__name__, name)


@pytest.mark.parametrize(
    ("alpha", "vector"),
    [(1.0, None), (0.6, None), (0.8, [0.0, 0.4, 0.0, 0.0, 0.0, 0.0, 0.3, 0.0])],
)
def test_torch_conditioning_equals_the_onnx_engines(engines, voice_wav, voice_wav2, alpha, vector) -> None:
    t, o = engines
    got, want = (
        e.voice_conditioning(
            e.speaker_audio(voice_wav), e.emotion_audio(voice_wav2), alpha=alpha, vector=vector
        )
        for e in (t, o)
    )
    for k, v in want.arrays().items():
        g = got.arrays()[k]
        assert g.shape == v.shape, k
        np.testing.assert_allclose(g, v, rtol=1e-4, atol=1e-4, err_msg=k)
    assert t.times.calls["w2v_bert"] >= 2 and t.times.calls["conditioners"] >= 2


def test_torch_stages_equal_the_onnx_sessions(engines, voice_wav) -> None:
    t, o = engines
    a = o.speaker_audio(voice_wav)
    spk_t, spk_o = t.w2v_bert(a.audio_16k), o.w2v_bert(a.audio_16k)
    np.testing.assert_allclose(spk_t, spk_o, rtol=1e-4, atol=1e-4)
    (codes_t, s_t), (codes_o, s_o) = t.codec_quantize(spk_o), o.codec_quantize(spk_o)
    np.testing.assert_array_equal(codes_t, codes_o)
    np.testing.assert_allclose(s_t, s_o, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(t.length_regulator(s_o, 40), o.length_regulator(s_o, 40), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(t.style(a.audio_16k), o.style(a.audio_16k), rtol=1e-4, atol=1e-4)
