"""Parity of the audio front end, w2v-BERT, codec, CAMPPlus and emotion-vector mode (stages 1.1-1.10, 3.3).

Each stage gets the stored inputs and must reproduce the stored outputs of the original (rel < 1e-4 for
floats, exact for integers). The numpy stages need only the vectors; the torch modules load the parity
checkpoint with our strict loaders.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import yaml

from fasttts_cli.indextts2 import emotion, features
from tests.parity import ParityCase, rel

pytestmark = pytest.mark.parity
TOL = 1e-4


def _config(ckpt: Path) -> dict:
    return yaml.safe_load((ckpt / "config.yaml").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------- numpy stages


def test_stage_1_1_speaker_audio(parity_case: ParityCase) -> None:
    path = parity_case.spec / parity_case.case["speaker_wav"]
    native, sr = features.load_audio_native(path)
    assert sr == int(parity_case["audio_native_sr"])
    assert rel(native, parity_case["audio_native"]) < TOL
    audio = features.load_speaker_audio(path)
    assert audio.audio_22k.shape == parity_case["audio_22k"].shape[1:]
    assert rel(audio.audio_22k, parity_case["audio_22k"][0]) < TOL  # soxr HQ, as librosa
    # the torchaudio sinc resampler on the stored 22 kHz input (stage-local) and on ours (end to end)
    a16 = features.resample_sinc(parity_case["audio_22k"][0], 22050, 16000)
    assert a16.shape == parity_case["audio_16k"].shape[1:]
    assert rel(a16, parity_case["audio_16k"][0]) < 1e-5
    assert rel(audio.audio_16k, parity_case["audio_16k"][0]) < TOL


def test_stage_1_2_w2v_features(parity_case: ParityCase) -> None:
    feats, mask = features.w2v_bert_features(parity_case["audio_16k"][0])
    assert feats.dtype == np.float32 and feats.shape == parity_case["w2v_input_features"].shape
    assert rel(feats, parity_case["w2v_input_features"]) < TOL
    np.testing.assert_array_equal(mask, parity_case["w2v_attention_mask"])


def test_stage_1_5_prompt_mel(parity_case: ParityCase) -> None:
    cfg = yaml.safe_load((parity_case.spec / "config.yaml").read_text(encoding="utf-8"))
    mel = features.log_mel(parity_case["audio_22k"][0], features.MelParams.from_config(cfg["s2mel"]))
    assert mel.shape == parity_case["refmel"].shape[1:]
    assert rel(mel, parity_case["refmel"][0]) < TOL


def test_stage_1_6_campplus_fbank(parity_case: ParityCase) -> None:
    raw, cmn = features.campplus_fbank(parity_case["audio_16k"][0])
    assert rel(raw, parity_case["campplus_fbank_raw"]) < TOL
    assert rel(cmn, parity_case["campplus_fbank"]) < TOL


def test_stage_1_8_emotion_audio(parity_case: ParityCase) -> None:
    audio = features.load_emotion_audio(parity_case.spec / parity_case.case["emotion_wav"])
    assert audio.shape == parity_case["audio_emo_16k"].shape[1:]
    assert rel(audio, parity_case["audio_emo_16k"][0]) < TOL


def test_stage_1_9_emotion_features(parity_case: ParityCase) -> None:
    feats, mask = features.w2v_bert_features(parity_case["audio_emo_16k"][0])
    assert rel(feats, parity_case["w2v_emo_input_features"]) < TOL
    np.testing.assert_array_equal(mask, parity_case["w2v_emo_attention_mask"])


def test_w2v_features_batch_pads_like_the_extractor(parity_case: ParityCase) -> None:
    # batching two utterances pads the shorter with 1.0 and masks it; its valid part is unchanged
    long, short = parity_case["audio_16k"][0], parity_case["audio_16k"][0][:20000]
    feats, mask = features.w2v_bert_features([long, short])
    one, one_mask = features.w2v_bert_features(short)
    t = one.shape[1]
    np.testing.assert_array_equal(feats[1, :t], one[0])
    np.testing.assert_array_equal(mask[1, :t], one_mask[0])
    assert not mask[1, t:].any() and np.all(feats[1, t:] == 1.0)


# ------------------------------------------------------------------------------------- torch stages


@functools.cache
def _w2v(ckpt: Path):
    from fasttts_cli.nets.w2v_bert import load_w2v_bert

    return load_w2v_bert(ckpt / "hf_cache" / "w2v-bert-2.0", ckpt / _config(ckpt)["w2v_stat"])


@functools.cache
def _codec(ckpt: Path):
    from fasttts_cli.nets.codec import load_codec

    return load_codec(ckpt / "hf_cache" / "semantic_codec_model.safetensors", _config(ckpt)["semantic_codec"])


@functools.cache
def _campplus(ckpt: Path):
    from fasttts_cli.nets.campplus import load_campplus

    return load_campplus(ckpt / "hf_cache" / "campplus_cn_common.bin")


def _torch():
    import torch

    torch.set_num_threads(1)
    return torch


def test_stage_1_3_w2v_bert(parity_case: ParityCase, parity_checkpoint: Path) -> None:
    torch = _torch()
    model = _w2v(parity_checkpoint)
    f = torch.from_numpy(parity_case["w2v_input_features"])
    m = torch.from_numpy(parity_case["w2v_attention_mask"])
    with torch.no_grad():
        h0, h17 = model.hidden(f, m)
        emb = model(f, m)
    assert rel(h0, parity_case["w2v_hidden0"]) < TOL
    assert rel(h17, parity_case["w2v_hidden17_raw"]) < TOL
    assert rel(model.mean, parity_case["w2v_stat_mean"]) < TOL
    assert rel(model.std, parity_case["w2v_stat_std"]) < TOL
    assert rel(emb, parity_case["spk_cond_emb"]) < TOL


def test_stage_1_10_w2v_bert_emotion(parity_case: ParityCase, parity_checkpoint: Path) -> None:
    torch = _torch()
    model = _w2v(parity_checkpoint)
    with torch.no_grad():
        emb = model(
            torch.from_numpy(parity_case["w2v_emo_input_features"]),
            torch.from_numpy(parity_case["w2v_emo_attention_mask"]),
        )
    assert rel(emb, parity_case["emo_cond_emb"]) < TOL


def test_w2v_bert_padded_batch_equals_single(parity_case: ParityCase, parity_checkpoint: Path) -> None:
    torch = _torch()
    model = _w2v(parity_checkpoint)
    audio = parity_case["audio_16k"][0]
    feats, mask = features.w2v_bert_features([audio, audio[:24000]])
    one, one_mask = features.w2v_bert_features(audio[:24000])
    with torch.no_grad():
        batch = model(torch.from_numpy(feats), torch.from_numpy(mask)).numpy()
        single = model(torch.from_numpy(one), torch.from_numpy(one_mask)).numpy()
    t = one.shape[1]
    assert np.abs(batch[1, :t] - single[0]).max() < 1e-4
    assert rel(batch[0:1], parity_case["spk_cond_emb"]) < TOL


def test_stage_1_4_codec_quantize(parity_case: ParityCase, parity_checkpoint: Path) -> None:
    torch = _torch()
    codec = _codec(parity_checkpoint)
    with torch.no_grad():
        z_e, idx, s_ref = codec.quantize(torch.from_numpy(parity_case["spk_cond_emb"]))
        emb = codec.vq2emb(torch.from_numpy(parity_case["gpt_forced_codes"])[None])
    assert rel(z_e, parity_case["codec_ref_z_e"]) < TOL
    np.testing.assert_array_equal(idx.numpy(), parity_case["codec_ref_indices"])
    assert rel(s_ref, parity_case["codec_S_ref"]) < TOL
    assert rel(emb, parity_case["s2mel_vq2emb"]) < TOL  # the vq2emb half of stage 4.1


def test_codec_padded_batch_equals_single(parity_case: ParityCase, parity_checkpoint: Path) -> None:
    torch = _torch()
    codec = _codec(parity_checkpoint)
    x = torch.from_numpy(parity_case["spk_cond_emb"])
    t = x.shape[1]
    batch = torch.full((2, t, x.shape[2]), 3.0)  # junk in the padding must not leak into valid frames
    batch[0], batch[1, : t // 2] = x[0], x[0, : t // 2]
    mask = torch.zeros(2, t, dtype=torch.int64)
    mask[0], mask[1, : t // 2] = 1, 1
    with torch.no_grad():
        _, idx, s = codec.quantize(batch, mask)
        _, idx1, s1 = codec.quantize(x[:, : t // 2])
        codes = torch.from_numpy(parity_case["gpt_forced_codes"])
        e2 = codec.vq2emb(torch.stack([codes, codes.flip(0)]))
        e1 = codec.vq2emb(codes.flip(0)[None])
    np.testing.assert_array_equal(idx[1, : t // 2].numpy(), idx1[0].numpy())
    assert (s[1, : t // 2] - s1[0]).abs().max().item() < 1e-5
    np.testing.assert_array_equal(idx[0].numpy(), parity_case["codec_ref_indices"][0])
    assert (e2[1] - e1[0]).abs().max().item() < 1e-6


def test_stage_1_6_campplus(parity_case: ParityCase, parity_checkpoint: Path) -> None:
    torch = _torch()
    model = _campplus(parity_checkpoint)
    with torch.no_grad():
        style = model(torch.from_numpy(parity_case["campplus_fbank"])[None])
    assert rel(style, parity_case["campplus_style"]) < TOL


def test_stage_3_3_emotion_vector_mode(parity_case: ParityCase, parity_checkpoint: Path) -> None:
    torch = _torch()
    cfg = _config(parity_checkpoint)
    mats = emotion.EmotionMatrices(
        torch.load(parity_checkpoint / cfg["spk_matrix"], weights_only=True).numpy(),
        torch.load(parity_checkpoint / cfg["emo_matrix"], weights_only=True).numpy(),
        tuple(cfg["emo_num"]),
    )
    proto, mat_vec, emovec = emotion.emotion_vector_mode(
        parity_case["campplus_style"], parity_case["emo_vec_weights"], parity_case["emovec"], mats
    )
    np.testing.assert_array_equal(proto, parity_case["emo_vec_proto_index"])
    assert rel(mat_vec, parity_case["emo_vec_mat"]) < TOL
    assert rel(emovec, parity_case["emo_vec_emovec"]) < TOL


def test_emotion_alpha_blend(parity_case: ParityCase) -> None:
    out = emotion.blend_emovec(
        parity_case["emovec_base"], parity_case["emovec_emo"], parity_case.case["emo_alpha_used"]
    )
    assert rel(out, parity_case["emovec"]) < TOL
