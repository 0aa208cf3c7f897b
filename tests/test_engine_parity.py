"""The engine's ONNX stages against the original implementation's vectors (tools/parity2/README.md).

The engine is built (export.py, cpu-fp32) from the regenerated parity checkpoint and cached in
tests/.cache. Each stage gets the stored inputs and must match the stored outputs (rel < 1e-4, integers
exact); the end-to-end run (reference audio -> features -> conditioning -> prefix, then the forced codes
and the stored CFM noise through the latent pass, s2mel and BigVGAN) must reproduce `bigvgan_wav` within
rel 1e-3. Runs for every vector set in $FASTTTS_PARITY_DIR.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.indextts2.engine import IndexTTS2Engine, euler_times
from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer
from fasttts_cli.synth.synthesizer import EmotionSpec
from tests.conftest_engine import *  # noqa: F403 (fixtures)
from tests.parity import ParityCase, rel, stored_cfm_inputs, stored_front_outputs

pytestmark = pytest.mark.parity
TOL = 1e-4


@pytest.fixture
def engine(parity_engine_dir: Path) -> IndexTTS2Engine:
    return IndexTTS2Engine.load(parity_engine_dir)


def test_audio_front_stages(engine: IndexTTS2Engine, parity_case: ParityCase) -> None:
    v = parity_case
    out, style = stored_front_outputs(engine, v)
    assert rel(out, v["spk_cond_emb"]) < TOL
    idx, s_ref = engine.codec_quantize(v["spk_cond_emb"][0])
    np.testing.assert_array_equal(idx, v["codec_ref_indices"][0])
    assert rel(s_ref, v["codec_S_ref"][0]) < TOL
    assert rel(style, v["campplus_style"]) < TOL
    prompt = engine.length_regulator(v["codec_S_ref"][0], v["refmel"].shape[-1])
    assert rel(prompt, v["prompt_condition"][0]) < TOL
    # the same stages from the waveforms (our numpy features in front)
    assert rel(engine.w2v_bert(v["audio_16k"][0]), v["spk_cond_emb"][0]) < 1e-3
    assert rel(engine.style(v["audio_16k"][0]), v["campplus_style"][0]) < 1e-3
    assert rel(engine.ref_mel(v["audio_22k"][0]), v["refmel"][0]) < 1e-3


def test_conditioning_and_prefix(engine: IndexTTS2Engine, parity_case: ParityCase) -> None:
    v = parity_case
    lat = engine.speaker_conditioning(v["spk_cond_emb"][0])
    assert rel(lat, v["spk_latents"][0]) < TOL
    alpha = float(v.case["emo_alpha_used"])
    emovec = engine.emotion_vector(v["emo_cond_emb"][0], v["spk_cond_emb"][0], alpha)
    assert rel(emovec, v["emovec"][0]) < TOL
    mixed = engine.emotion_vector_mode(v["campplus_style"][0], v["emo_vec_weights"], v["emovec"][0])
    assert rel(mixed, v["emo_vec_emovec"][0]) < TOL
    prefix = engine.prefix(v["spk_latents"][0], v["emovec"][0], v["gpt_text_ids"][0])
    assert rel(prefix, v["gpt_prefix_emb"][0]) < TOL


def test_latent_s2mel_cfm_vocoder(engine: IndexTTS2Engine, parity_case: ParityCase) -> None:
    v = parity_case
    codes = v["gpt_forced_codes"]
    (latent,) = engine.latent([v["gpt_prefix_emb"][0]], [codes])
    assert rel(latent, v["gpt_latent"][0]) < TOL
    cond, ylens = engine.s2mel_content([v["gpt_latent"][0]], [codes])
    np.testing.assert_array_equal(ylens, v["s2mel_target_len"])
    assert rel(cond, v["s2mel_cond"]) < TOL
    tm = v["refmel"].shape[-1]
    np.testing.assert_array_equal(euler_times(25), v["cfm_t_span"])
    x = engine.cfm(stored_cfm_inputs(v), v["cfm_z"], steps=25, cfg_rate=float(v["cfm_inference_cfg_rate"]))
    assert rel(x, v["cfm_out_full"]) < TOL
    assert rel(x[:, :, tm:], v["cfm_mel"]) < TOL
    (wav,) = engine.vocode([v["cfm_mel"][0]])
    assert rel(wav, v["bigvgan_wav"][0, 0]) < TOL


def test_end_to_end_with_forced_codes_and_noise(
    parity_engine_dir: Path,
    parity_case: ParityCase,
    tmp_path: Path,
) -> None:
    """Reference audio + text ids -> waveform through the Synthesizer's voice preparation and the engine,
    with the generated codes replaced by the forced ones and the CFM noise by cfm_z."""
    v = parity_case
    c = v.case
    synth = IndexTTS2Synthesizer.load(parity_engine_dir, cache_dir=tmp_path / "voices")
    spk = v.spec / c["speaker_wav"]
    emo_wav = v.spec / c["emotion_wav"]
    spec = EmotionSpec(audio=None if emo_wav == spk else emo_wav, alpha=float(c["emo_alpha_used"]))
    voice = synth.prepare_voice(spk, emotion=spec)
    state = voice.state
    e = synth.engine
    assert rel(state.spk_latents, v["spk_latents"][0]) < 1e-3
    assert rel(state.emovec, v["emovec"][0]) < 1e-3
    prefix = e.prefix(state.spk_latents, state.emovec, v["gpt_text_ids"][0])
    (wav,) = e.codes_to_wavs(
        [state], [prefix], [v["gpt_forced_codes"]], [v["cfm_z"][0]], steps=25, cfg_rate=0.7
    )
    want = v["bigvgan_wav"][0, 0]
    assert wav.shape == want.shape
    assert rel(wav, want) < 1e-3
