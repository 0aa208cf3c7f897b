"""IndexTTS-2.5 after the GPT against the original's vectors: the EnhancedCodec decode intermediates (4.1),
the target length and content condition at every duration factor the vectors hold (4.2) and for the odd
n (4.3), CFM with the vectors' noise (4.4), single DiT calls (4.5), BigVGAN (5), and the whole chain from
the speaker wav to int16 samples with our modules (e2e, forced codes as the oracle forced them).
fp32 rel < 1e-4, integers exact, int16 |a - b| <= 1; every size from the vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

import torch.nn.functional as F  # noqa: E402

from fasttts_cli.nets.bigvgan import wav_to_int16  # noqa: E402
from fasttts_cli.nets.codec_enhanced import UPSAMPLE  # noqa: E402
from fasttts_cli.nets.s2mel25 import content25, prompt_condition25, target_length25  # noqa: E402
from tests.parity25 import Parity25Case, check, df_tag, need, tensor, voice_file  # noqa: E402

pytestmark = pytest.mark.parity25
CFG_RATE = 0.7  # infer_v2_5 passes inference_cfg_rate=0.7 (a constant of the original, not a size)


def _lens(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def _steps(case: Parity25Case) -> int:
    return int(case.checks["cfm_dit_calls"])  # one batched [cond, uncond] DiT call per Euler step


def _int16_close(case: Parity25Case, key: str, wav: torch.Tensor) -> None:
    pcm = wav_to_int16(wav.reshape(1, -1)).numpy().reshape(case[key].shape)
    assert pcm.dtype == np.int16
    assert int(np.abs(pcm.astype(np.int32) - case[key].astype(np.int32)).max()) <= 1, key


# ---------------------------------------------------------------------------------------- codec (4.1)


@torch.no_grad()
@pytest.mark.parity25_needs("codec_q_emb")
def test_stage_4_1_codec_decode_intermediates(parity25_case: Parity25Case, parity25_modules) -> None:
    c, codec = parity25_case, parity25_modules.codec
    codes = tensor(c, "gpt_forced_codes")[None]
    q = codec.embed(codes)
    check(c, "codec_q_emb", q)
    vocos = codec.decoder[0](q, None)
    check(c, "codec_vocos_out", vocos)
    dec = codec.decoder[1](vocos)
    check(c, "codec_dec_out", dec)
    check(c, "codec_up_in", F.interpolate(dec.transpose(1, 2), scale_factor=UPSAMPLE, mode="nearest"))
    s_infer = codec.decode(codes)
    assert s_infer.shape[1] == UPSAMPLE * codes.shape[1]
    check(c, "s2mel_S_infer", s_infer)
    # rows of different lengths padded in one batch decode like each row alone
    rows = sorted(
        [("s2mel_S_infer", codes[0]), ("odd_S_infer", tensor(c, "odd_codes"))], key=lambda r: -len(r[1])
    )
    batch = torch.stack([torch.cat([r, rows[0][1][len(r) :].flip(0)]) for _, r in rows])  # garbage padding
    both = codec.decode(batch, _lens(*(len(r) for _, r in rows)))
    for b, (key, r) in enumerate(rows):
        check(c, key, both[b : b + 1, : UPSAMPLE * len(r)])
        assert int(torch.count_nonzero(both[b, UPSAMPLE * len(r) :])) == 0  # frames past 2 n are zero


# ------------------------------------------------------------------------------- length, cond (4.2-4.3)


@torch.no_grad()
@pytest.mark.parity25_needs("s2mel_S_infer", "odd_codes")
def test_stage_4_2_and_4_3_target_length_and_cond(parity25_case: Parity25Case, parity25_modules) -> None:
    c, m = parity25_case, parity25_modules
    need(c, "s2mel_S_infer", "odd_codes")
    factors = [float(df) for df in c.main["duration_factors"]]
    assert factors
    for prefix, codes_key, s_key in (
        ("s2mel", "gpt_forced_codes", "s2mel_S_infer"),
        ("odd", "odd_codes", None),
    ):
        n = c[codes_key].shape[0]
        s_infer = m.codec.decode(tensor(c, codes_key)[None]) if s_key is None else tensor(c, s_key)
        if s_key is None:
            check(c, "odd_S_infer", s_infer)
        for df in factors:
            tag = df_tag(df)
            want_len = int(c[f"{prefix}_target_len_{tag}"])
            assert target_length25(n, df) == want_len, (prefix, df)
            cond, ylens = content25(m.s2mel, s_infer, _lens(n), df)
            assert ylens.tolist() == [want_len]
            check(c, f"{prefix}_cond_{tag}", cond)


# --------------------------------------------------------------------------------------- CFM (4.4-4.5)


@torch.no_grad()
@pytest.mark.parity25_needs("s2mel_cat_condition", "cfm_z", "cfm_out_full", "cfm_mel")
def test_stage_4_4_cfm_with_the_stored_noise(parity25_case: Parity25Case, parity25_modules) -> None:
    c, s2mel = parity25_case, parity25_modules.s2mel
    need(c, "s2mel_cat_condition", "cfm_z", "cfm_out_full", "cfm_mel")
    tm = c["refmel"].shape[-1]
    cond = content25(s2mel, tensor(c, "s2mel_S_infer"), _lens(c["gpt_forced_codes"].shape[0]), 1.0)[0]
    mu = torch.cat([tensor(c, "prompt_condition"), cond], dim=1)
    check(c, "s2mel_cat_condition", mu)
    mu = tensor(c, "s2mel_cat_condition")
    # the noise is torch.manual_seed(cfm_seed) + randn at the solver's entry
    torch.manual_seed(int(c.main["cfm_seed"]))
    z = torch.randn(c["cfm_z"].shape)
    assert torch.equal(z, tensor(c, "cfm_z"))
    out, _ = s2mel.cfm.solve(
        mu,
        _lens(mu.shape[1]),
        tensor(c, "refmel"),
        _lens(tm),
        tensor(c, "campplus_style"),
        z,
        _steps(c),
        CFG_RATE,
    )
    check(c, "cfm_out_full", out)
    check(c, "cfm_mel", out[..., tm:])


@torch.no_grad()
@pytest.mark.parity25_needs("dit_out")
def test_stage_4_5_dit_calls(parity25_case: Parity25Case, parity25_modules) -> None:
    c, est = parity25_case, parity25_modules.s2mel.cfm.estimator
    inputs = [f"dit_in_{k}" for k in ("x", "prompt_x", "x_lens", "t", "style", "cond")]
    need(c, *inputs, "dit_out")  # the first call, in the estimator's argument order
    x, prompt_x, x_lens, t0, style, cond = (tensor(c, k) for k in inputs)
    fixed = [prompt_x, x_lens]
    check(c, "dit_out", est(x, *fixed, t0, style, cond))
    steps = sorted(
        {int(k[len("dit_step") :].split("_")[0]) for k in c.keys_of("4.5") if k.startswith("dit_step")}
    )
    assert steps and max(steps) < _steps(c)
    for k in steps:
        x, t = tensor(c, f"dit_step{k}_in_x"), tensor(c, f"dit_step{k}_in_t")
        check(c, f"dit_step{k}_out", est(x, *fixed, t, style, cond))


# ------------------------------------------------------------------------------------------ BigVGAN (5)


@torch.no_grad()
@pytest.mark.parity25_needs("cfm_mel", "bigvgan_wav")
def test_stage_5_bigvgan(parity25_case: Parity25Case, parity25_modules) -> None:
    c, voc = parity25_case, parity25_modules.bigvgan
    need(c, "cfm_mel", "bigvgan_wav")
    mel = tensor(c, "cfm_mel")
    wav = voc(mel)
    assert wav.shape[-1] == voc.cfg.hop * mel.shape[-1]
    check(c, "bigvgan_wav", wav[:, 0])
    _int16_close(c, "wav_int16", wav)


# ------------------------------------------------------------------------------------------------ e2e


def _e2e_conditioning(case: Parity25Case, m, ckpt: Path) -> dict[str, torch.Tensor]:
    """Speaker wav -> spk_cond_emb, refmel, style, prompt condition, emovec: our numpy front end and nets."""
    from fasttts_cli.indextts2 import features

    cfg = yaml.safe_load((ckpt / "config.yaml").read_text(encoding="utf-8"))
    wav = voice_file(case, ckpt, case.case["speaker_wav"])
    audio = features.load_speaker_audio(wav)
    f, mask = features.w2v_bert_features(audio.audio_16k)
    spk = m.w2v_bert(torch.from_numpy(f), torch.from_numpy(mask))
    refmel = torch.from_numpy(
        features.log_mel(audio.audio_22k, features.MelParams.from_config(cfg["s2mel"]))
    )[None]
    style = m.campplus(torch.from_numpy(features.campplus_fbank(audio.audio_16k)[1])[None])
    prompt = prompt_condition25(m.s2mel, spk, _lens(spk.shape[1]), _lens(refmel.shape[-1]))
    ef, emask = features.w2v_bert_features(
        features.load_emotion_audio(voice_file(case, ckpt, case.case["emotion_wav"]))
    )
    emo = m.w2v_bert(torch.from_numpy(ef), torch.from_numpy(emask))
    emovec = m.gpt.emotion_conditioning(emo, spk, float(case.case["emo_alpha_used"])).emovec
    return {"spk": spk, "refmel": refmel, "style": style, "prompt": prompt, "emovec": emovec}


@torch.no_grad()
@pytest.mark.parity25_needs("e2e_wav_int16_df1p0")
def test_e2e_wav_at_each_duration_factor(
    parity25_case: Parity25Case, parity25_modules, parity25_checkpoint
) -> None:
    from fasttts_cli.indextts2.text_grammar import IDENTITY
    from fasttts_cli.indextts25.text import TextFrontEnd25
    from fasttts_cli.nets.release_layout25 import TOKENIZER_FILE

    c, m, ckpt = parity25_case, parity25_modules, parity25_checkpoint
    cond = _e2e_conditioning(c, m, ckpt)
    check(c, "spk_cond_emb", cond["spk"])
    check(c, "prompt_condition", cond["prompt"])
    check(c, "emovec", cond["emovec"])
    cfg = yaml.safe_load((ckpt / "config.yaml").read_text(encoding="utf-8"))
    text = TextFrontEnd25.load(ckpt / TOKENIZER_FILE, cfg, IDENTITY).process(c.main["text"], c.main["lang"])
    assert len(text.segment_ids) == 1
    prefix = m.gpt.prefix_embeddings(
        m.gpt.speaker_vector(cond["style"]), cond["emovec"], torch.tensor(text.segment_ids), text.lang_index
    )
    check(c, "gpt_prefix_emb", prefix.embeds)
    codes = tensor(c, "gpt_forced_codes")[None]
    check(c, "gpt_gen_logits", m.gpt.decode_forced(prefix, codes).logits)
    s_infer = m.codec.decode(codes)
    tm = cond["refmel"].shape[-1]
    for df in c.main["duration_factors"]:
        key = f"e2e_wav_int16_{df_tag(df)}"
        need(c, key)
        content, ylens = content25(m.s2mel, s_infer, _lens(codes.shape[1]), float(df))
        mu = torch.cat([cond["prompt"], content], dim=1)
        torch.manual_seed(int(c.main["cfm_seed"]))
        z = torch.randn(1, cond["refmel"].shape[1], mu.shape[1])
        out, _ = m.s2mel.cfm.solve(
            mu, _lens(mu.shape[1]), cond["refmel"], _lens(tm), cond["style"], z, _steps(c), CFG_RATE
        )
        wav = m.bigvgan(out[..., tm:])
        assert wav.shape[-1] == c[key].shape[-1] == m.bigvgan.cfg.hop * int(ylens[0])
        _int16_close(c, key, wav)
