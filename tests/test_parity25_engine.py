"""The ONNX IndexTTS-2.5 engine's stages against the original's vectors (tools/parity25/README.md).

The engine is built (cpu-fp32) from the regenerated 2.5 parity checkpoint and cached in tests/.cache by
its digest (conftest_engine.parity25_engine_for). Each stage gets the stored inputs and must give the stored
outputs, as the v2 engine parity tests ask (rel < 1e-4, integers exact; stages that start from the
waveforms, our numpy features in front, rel < 1e-3); the end-to-end run (speaker wav -> voice, the main
text's ids -> prefix, the forced codes and the original's CFM noise -> the engine's render to F frames)
must reproduce the original's int16 samples (|a - b| <= 1) at every duration factor. Every size comes
from the vectors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.indextts25.engine import IndexTTS25Engine
from tests.conftest_engine import *  # noqa: F403 (fixtures)
from tests.parity import rel, stored_cfm_inputs, stored_front_outputs
from tests.parity25 import Parity25Case, check, df_tag, need, voice_file

pytestmark = pytest.mark.parity25
TOL = 1e-4
AUDIO_TOL = 1e-3  # from the waveforms: our numpy features in front (as test_engine_parity)
CFG_RATE = 0.7  # infer_v2_5's inference_cfg_rate (a constant of the original, not a size)


@pytest.fixture(scope="module")
def engine(parity25_engine_dir: Path) -> IndexTTS25Engine:
    e = IndexTTS25Engine.load(parity25_engine_dir, threads=1)
    yield e
    e.close()


def _steps(case: Parity25Case) -> int:
    return int(case.checks["cfm_dit_calls"])


def _factors(case: Parity25Case) -> list[float]:
    factors = [float(df) for df in case.main["duration_factors"]]
    assert factors
    return factors


def _prefix(engine: IndexTTS25Engine, case: Parity25Case) -> np.ndarray:
    """The engine's prefix from the stored speaker row and emovec and the ids infer_v2_5 hands the GPT."""
    ids = case["text_main_segment_ids"].tolist()
    return engine.prefix25(case["gpt_spk_vec"], case["emovec"][0], ids, int(case["text_main_lang_index"]))


def _int16(wav: np.ndarray) -> np.ndarray:
    """The original's conversion: clamp(32767 wav, +-32767), truncated toward zero."""
    return np.clip(32767.0 * wav.astype(np.float32), -32767.0, 32767.0).astype(np.int16)


# ---------------------------------------------------------------------------------------- voice


def test_voice_stages_from_the_stored_inputs(engine: IndexTTS25Engine, parity25_case: Parity25Case) -> None:
    c = parity25_case
    spk, style = stored_front_outputs(engine, c)
    check(c, "spk_cond_emb", spk, TOL)
    check(c, "campplus_style", style, TOL)
    check(c, "gpt_spk_vec", engine.speaker_vector(c["campplus_style"]), TOL)
    # 2.5's prompt condition: the length regulator on the continuous features, to the prompt mel's frames
    check(c, "prompt_condition", engine.length_regulator(c["spk_cond_emb"][0], c["refmel"].shape[-1]), TOL)
    alpha = float(c.case["emo_alpha_used"])
    check(c, "emovec", engine.emotion_vector(c["emo_cond_emb"][0], c["spk_cond_emb"][0], alpha), TOL)


def test_voice_stages_from_the_waveforms(
    engine: IndexTTS25Engine, parity25_case: Parity25Case, parity25_checkpoint: Path
) -> None:
    c = parity25_case
    check(c, "spk_cond_emb", engine.w2v_bert(c["audio_16k"][0]), AUDIO_TOL)
    check(c, "campplus_style", engine.style(c["audio_16k"][0]), AUDIO_TOL)
    check(c, "refmel", engine.ref_mel(c["audio_22k"][0]), AUDIO_TOL)
    # the whole voice flow from the files, as the synthesizer runs it
    speaker = engine.speaker_audio(voice_file(c, parity25_checkpoint, c.case["speaker_wav"]))
    emotion = engine.emotion_audio(voice_file(c, parity25_checkpoint, c.case["emotion_wav"]))
    v = engine.voice_conditioning(speaker, emotion, alpha=float(c.case["emo_alpha_used"]))
    check(c, "gpt_spk_vec", v.spk_latents, AUDIO_TOL)
    check(c, "emovec", v.emovec, AUDIO_TOL)
    check(c, "campplus_style", v.style, AUDIO_TOL)
    check(c, "refmel", v.ref_mel, AUDIO_TOL)
    check(c, "prompt_condition", v.prompt_condition, AUDIO_TOL)


# ---------------------------------------------------------------------------------------- GPT


def test_host_prefix_is_the_unmasked_rows(engine: IndexTTS25Engine, parity25_case: Parity25Case) -> None:
    """The original left-pads one zero, masked row per stripped id; the engine's prefix is the rest."""
    c = parity25_case
    n_pad = int(c.checks["gpt_prefix_left_pad_rows"])
    want, mask = c["gpt_prefix_emb"][0], c["gpt_attention_mask"][0]
    assert n_pad >= 1 and not mask[:n_pad].any() and mask[n_pad:].all()
    assert not want[:n_pad].any()
    got = _prefix(engine, c)
    assert got.shape == want[n_pad:].shape
    assert rel(got, want[n_pad:]) < TOL
    assert rel(got[: c["gpt_conds_latent"].shape[1]], c["gpt_conds_latent"][0]) < TOL
    assert rel(engine.lang_embedding[int(c["text_main_lang_index"])], c["gpt_lang_row"]) < TOL


def test_forced_generation_logits_through_the_step_path(
    engine: IndexTTS25Engine, parity25_case: Parity25Case
) -> None:
    """Prefill on the tight prefix, then one step per forced code (mel positions 0, 2, 3, ...): the
    logits the original's generate saw, so the left-out pad rows change nothing."""
    c = parity25_case
    codes = c["gpt_forced_codes"]
    assert c["gpt_mel_positions"].tolist() == [0, *range(2, codes.size + 2)]
    logits, _ = engine.decoder.forced(_prefix(engine, c), codes)
    assert logits.shape == c["gpt_gen_logits"].shape[1:]
    check(c, "gpt_gen_logits", logits, TOL)
    # and the same greedy choice at every step (what sampling at top_k 1 would pick)
    np.testing.assert_array_equal(logits.argmax(-1), c["gpt_gen_logits"][0].argmax(-1))


# ---------------------------------------------------------------------------------------- s2mel


@pytest.mark.parity25_needs("s2mel_S_infer", "odd_codes", "odd_S_infer")
def test_codec_decode(engine: IndexTTS25Engine, parity25_case: Parity25Case) -> None:
    c = parity25_case
    need(c, "s2mel_S_infer", "odd_codes", "odd_S_infer")  # a delta set (emotion audio) repeats no s2mel stage
    main, odd = c["gpt_forced_codes"], c["odd_codes"]
    s_infer, frames = engine.codec_decode([main])
    assert frames.tolist() == [c["s2mel_S_infer"].shape[1]]
    check(c, "s2mel_S_infer", s_infer, TOL)
    # both rows in one padded batch decode as each alone, zero past each row's frames
    both, frames = engine.codec_decode([main, odd])
    for b, key in enumerate(("s2mel_S_infer", "odd_S_infer")):
        n = c[key].shape[1]
        assert int(frames[b]) == n
        check(c, key, both[b : b + 1, :n], TOL)
        assert not both[b, n:].any()


@pytest.mark.parity25_needs("odd_codes", "s2mel_target_len_df1p0", "odd_target_len_df1p0")
def test_s2mel_content_at_each_duration_factor_and_the_odd_n(
    engine: IndexTTS25Engine, parity25_case: Parity25Case
) -> None:
    c = parity25_case
    need(c, "odd_codes", f"s2mel_target_len_{df_tag(1.0)}", f"odd_target_len_{df_tag(1.0)}")
    for prefix, codes_key in (("s2mel", "gpt_forced_codes"), ("odd", "odd_codes")):
        codes = c[codes_key]
        natural = int(c[f"{prefix}_target_len_{df_tag(1.0)}"])
        assert engine.target_lengths([codes.size]).tolist() == [natural]
        for df in _factors(c):
            tag = df_tag(df)
            frames = int(c[f"{prefix}_target_len_{tag}"])
            cond, ylens = engine.s2mel_content([], [codes], [frames])
            assert ylens.tolist() == [frames]
            check(c, f"{prefix}_cond_{tag}", cond, TOL)
        cond, ylens = engine.s2mel_content([], [codes])  # the natural length is df 1.0's
        assert ylens.tolist() == [natural]
        check(c, f"{prefix}_cond_{df_tag(1.0)}", cond, TOL)


@pytest.mark.parity25_needs("s2mel_cat_condition")
def test_cfm_with_the_stored_noise_and_the_vocoder(
    engine: IndexTTS25Engine, parity25_case: Parity25Case
) -> None:
    c = parity25_case
    tm = c["refmel"].shape[-1]
    cond, ylens = engine.s2mel_content([], [c["gpt_forced_codes"]])
    cat = np.concatenate([c["prompt_condition"][0], cond[0, : int(ylens[0])]])[None]
    check(c, "s2mel_cat_condition", cat, TOL)
    x = engine.cfm(stored_cfm_inputs(c), c["cfm_z"], steps=_steps(c), cfg_rate=CFG_RATE)
    check(c, "cfm_out_full", x, TOL)
    check(c, "cfm_mel", x[:, :, tm:], TOL)
    (wav,) = engine.vocode([c["cfm_mel"][0]])
    check(c, "bigvgan_wav", wav, TOL)
    assert int(np.abs(_int16(wav).astype(np.int32) - c["wav_int16"][0]).max()) <= 1


# ---------------------------------------------------------------------------------------- e2e


@pytest.mark.parity25_needs("e2e_wav_int16_df1p0")
def test_end_to_end_render_to_frames_at_each_duration_factor(
    parity25_engine_dir: Path, parity25_case: Parity25Case, parity25_checkpoint: Path, tmp_path: Path
) -> None:
    """Speaker wav + the main text -> int16 samples through the Synthesizer's voice preparation, the
    engine's front end and its render: the generated codes replaced by the forced ones, the CFM noise by
    the original's (torch.manual_seed(cfm_seed) randn at the solver's entry), F = the vectors' target."""
    torch = pytest.importorskip("torch")
    from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer

    c = parity25_case
    need(c, *(f"e2e_wav_int16_{df_tag(df)}" for df in _factors(c)))
    synth = IndexTTS25Synthesizer.load(parity25_engine_dir, cache_dir=tmp_path / "voices", threads=1)
    try:
        e = synth.engine
        state = synth.prepare_voice(voice_file(c, parity25_checkpoint, c.case["speaker_wav"])).state
        check(c, "gpt_spk_vec", state.spk_latents, AUDIO_TOL)
        check(c, "emovec", state.emovec, AUDIO_TOL)
        lang = e.text.check_language(c.main["lang"])
        (ids,) = e.text.segments(c.main["text"], lang, e.max_text_tokens)
        assert list(ids) == c["gpt_text_ids"][0].tolist()  # start + kept ids + stop
        prefix = e.prefix25(state.spk_latents, state.emovec, ids, e.text.lang_index(lang))
        codes = c["gpt_forced_codes"]
        tm = state.ref_mel.shape[1]
        for df in _factors(c):
            tag = df_tag(df)
            want = c[f"e2e_wav_int16_{tag}"]
            frames = int(c[f"s2mel_target_len_{tag}"])
            torch.manual_seed(int(c.main["cfm_seed"]))
            z = torch.randn(1, e.mel_params.n_mels, tm + frames).numpy()[0]
            (wav,) = e.codes_to_wavs(
                [state], [prefix], [codes], [z], steps=_steps(c), cfg_rate=CFG_RATE, frames=[frames]
            )
            assert wav.size == want.size == frames * e.hop
            assert rel(wav, want.astype(np.float32) / 32767.0) < AUDIO_TOL, tag
            assert int(np.abs(_int16(wav).astype(np.int32) - want).max()) <= 1, tag
    finally:
        synth.close()
