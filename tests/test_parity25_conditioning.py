"""IndexTTS-2.5 against the original's vectors: the strict loader, the audio front end and the conditioning
(stages 1.1-1.10), and the text ids of stage 2 (tools/parity25/README.md).

Each stage gets the stored inputs and must give the stored outputs (fp32 rel < 1e-4, integers exact). Every
size comes from the vectors and the checkpoint's config; the checkpoint is regenerated (conftest).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

from fasttts_cli.indextts2 import features  # noqa: E402
from fasttts_cli.nets.codec_enhanced import ENCODER_SIDE  # noqa: E402
from fasttts_cli.nets.release_layout25 import TOKENIZER_FILE  # noqa: E402
from fasttts_cli.nets.s2mel25 import S2MEL25_EXTRAS, prompt_condition25  # noqa: E402
from fasttts_cli.nets.weights import torch_load  # noqa: E402
from tests.parity import rel  # noqa: E402
from tests.parity25 import Parity25Case, check, need, tensor, voice_file  # noqa: E402

pytestmark = pytest.mark.parity25
HAS_FUGASHI = importlib.util.find_spec("fugashi") is not None
# what a 2.5 gpt.pth may carry besides the model's weights (the v2 rules)
GPT_EXTRAS = ("inference_model.", "gpt.wte.", "gpt.wpe.")


def _lens(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def _config(ckpt: Path) -> dict:
    return yaml.safe_load((ckpt / "config.yaml").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------- loader


def _folded(sd: dict, key: str) -> torch.Tensor:
    """The weight a weight-norm pair (key = ..._g) stands for, g * v / |v| (norm over all but dim 0)."""
    g, v = sd[key].float(), sd[key[:-1] + "v"].float()
    return g * v / v.norm(dim=tuple(range(1, v.dim())), keepdim=True)


def _assert_loaded(label: str, module: torch.nn.Module, file_state: dict, extras: tuple[str, ...]) -> None:
    ours = module.state_dict()
    assert set(ours) | set(extras) == set(file_state) and not set(ours) & set(extras), label
    for k, v in ours.items():
        if k.endswith("weight_g"):  # our pairs may split the same weight differently
            assert rel(_folded(ours, k), _folded(file_state, k)) < 1e-6, f"{label}: {k[:-2]}"
        elif not k.endswith("weight_v"):
            assert torch.equal(v, file_state[k].to(v.dtype)), f"{label}: {k}"


@torch.no_grad()
@pytest.mark.parity25_needs("s2mel_S_infer")
def test_loader_is_strict_with_known_extras_only(parity25_case: Parity25Case, parity25_modules) -> None:
    m = parity25_modules
    ckpt = m.paths.gpt.parent
    detail = parity25_case.checks["weights_loaded_detail"]
    extras = m.known_extras
    assert all(
        k.startswith(GPT_EXTRAS) or k.endswith((".attn.bias", ".attn.masked_bias")) for k in extras["gpt"]
    )
    assert all(k.startswith(tuple(f"net/{p}/" for p in S2MEL25_EXTRAS)) for k in extras["s2mel"])
    assert all(k.startswith(ENCODER_SIDE) for k in extras["codec"])

    gpt_file = torch_load(ckpt / "gpt.pth")
    assert len(gpt_file) == detail["gpt.pth"]["compared"]  # the original loaded every one of these
    _assert_loaded("gpt.pth", m.gpt, gpt_file, extras["gpt"])
    codec_file = torch_load(m.paths.codec)["model"]
    assert len(codec_file) == detail["codec.pth"]["compared"]
    _assert_loaded("codec.pth", m.codec, codec_file, extras["codec"])
    net = torch_load(m.paths.s2mel)["net"]
    for part in ("cfm", "length_regulator"):
        assert len(net[part]) == detail[f"s2mel.pth:{part}"]["compared"]
        _assert_loaded(f"s2mel.pth:{part}", getattr(m.s2mel, part), net[part], ())
    assert not extras["s2mel"] and "gpt_layer" not in dict(m.s2mel.named_children())

    # sizes: what the vectors hold is what the config made
    assert m.gpt.cfg.model_dim == parity25_case["gpt_spk_vec"].shape[-1]
    assert m.gpt.cfg.style_dim == parity25_case["campplus_style"].shape[-1]
    assert m.gpt.cfg.number_mel_codes == parity25_case["gpt_gen_logits"].shape[-1]
    assert np.array_equal(m.w2v_mean, parity25_case["w2v_stat_mean"])
    assert np.allclose(np.sqrt(m.w2v_var), parity25_case["w2v_stat_std"], rtol=1e-6, atol=0)
    need(parity25_case, "s2mel_S_infer")  # a delta set (an emotion case) does not repeat the s2mel side
    assert m.codec.sizes.hidden_size == parity25_case["s2mel_S_infer"].shape[-1]


# ------------------------------------------------------------------------------------- audio (numpy)


def test_stage_1_1_speaker_audio(parity25_case: Parity25Case, parity25_checkpoint: Path) -> None:
    c = parity25_case
    need(c, "audio_native", "audio_native_sr", "audio_22k", "audio_16k")
    path = voice_file(c, parity25_checkpoint, c.case["speaker_wav"])
    # 2.5's _load_and_cut_audio is librosa.load(path) with its default sr: soxr to 22.05 kHz, as v2
    sr = int(c["audio_native_sr"])
    assert sr == features.SR_MEL
    x, file_sr = features.load_audio_native(path)
    check(c, "audio_native", features.resample_soxr(x, file_sr, sr)[: c["audio_native"].shape[-1]])
    audio = features.load_speaker_audio(path)
    check(c, "audio_22k", audio.audio_22k)
    check(c, "audio_16k", audio.audio_16k)
    check(c, "audio_16k", features.resample_sinc(c["audio_native"][0], sr, features.SR_W2V), 1e-5)


def test_stage_1_2_and_1_9_w2v_features(parity25_case: Parity25Case) -> None:
    c = parity25_case
    for audio, feats, mask in (
        ("audio_16k", "w2v_input_features", "w2v_attention_mask"),
        ("audio_emo_16k", "w2v_emo_input_features", "w2v_emo_attention_mask"),
    ):
        need(c, audio, feats, mask)
        f, m = features.w2v_bert_features(c[audio][0])
        check(c, feats, f)
        np.testing.assert_array_equal(m, c[mask])


def test_stage_1_5_prompt_mel(parity25_case: Parity25Case, parity25_checkpoint: Path) -> None:
    c = parity25_case
    need(c, "audio_22k", "refmel")
    params = features.MelParams.from_config(_config(parity25_checkpoint)["s2mel"])
    check(c, "refmel", features.log_mel(c["audio_22k"][0], params))


def test_stage_1_6_campplus_fbank(parity25_case: Parity25Case) -> None:
    c = parity25_case
    need(c, "audio_16k")
    raw, cmn = features.campplus_fbank(c["audio_16k"][0])
    check(c, "campplus_fbank_raw", raw)
    check(c, "campplus_fbank", cmn)


def test_stage_1_8_emotion_audio(parity25_case: Parity25Case, parity25_checkpoint: Path) -> None:
    c = parity25_case
    # the main case has no emotion audio of its own: the speaker's is read again at 16 kHz
    path = voice_file(c, parity25_checkpoint, c.case["emotion_wav"])
    check(c, "audio_emo_16k", features.load_emotion_audio(path))


# ------------------------------------------------------------------------------------ torch stages


@torch.no_grad()
def test_stage_1_3_and_1_10_w2v_bert(parity25_case: Parity25Case, parity25_modules) -> None:
    c, w2v = parity25_case, parity25_modules.w2v_bert
    f, m = tensor(c, "w2v_input_features"), tensor(c, "w2v_attention_mask")
    check(c, "w2v_hidden17_raw", w2v.hidden(f, m)[1])
    check(c, "w2v_stat_mean", w2v.mean)
    check(c, "w2v_stat_std", w2v.std)
    check(c, "spk_cond_emb", w2v(f, m))
    check(c, "emo_cond_emb", w2v(tensor(c, "w2v_emo_input_features"), tensor(c, "w2v_emo_attention_mask")))


@torch.no_grad()
def test_stage_1_6_campplus_style(parity25_case: Parity25Case, parity25_modules) -> None:
    c = parity25_case
    check(c, "campplus_style", parity25_modules.campplus(tensor(c, "campplus_fbank")[None]))


@torch.no_grad()
def test_stage_1_7_prompt_condition(parity25_case: Parity25Case, parity25_modules) -> None:
    c = parity25_case
    spk = tensor(c, "spk_cond_emb")
    mel_frames = c["refmel"].shape[-1]
    got = prompt_condition25(parity25_modules.s2mel, spk, _lens(spk.shape[1]), _lens(mel_frames))
    check(c, "prompt_condition", got)


# ------------------------------------------------------------------------------------ text (stage 2)


def _text_cases(case: Parity25Case) -> list[str]:
    return list(case.case["text_cases"])


def test_stage_2_text_ids(parity25_case: Parity25Case, parity25_checkpoint: Path) -> None:
    """Our 2.5 front end (identity normaliser, as the oracle's stub) gives the ids the GPT embedded."""
    from fasttts_cli.indextts2.text_grammar import IDENTITY
    from fasttts_cli.indextts25.text import TextFrontEnd25

    c = parity25_case
    fe = TextFrontEnd25.load(parity25_checkpoint / TOKENIZER_FILE, _config(parity25_checkpoint), IDENTITY)
    ran = 0
    for name in _text_cases(c):
        spec = c.case["text_cases"][name]
        if spec["lang"] == "ja" and not HAS_FUGASHI:
            continue
        got = fe.process(spec["text"], spec["lang"])
        p = f"text_{name}_"
        assert got.segments == [str(s) for s in c[p + "segments"]], name
        assert [len(s) for s in got.segment_ids] == c[p + "segment_lengths"].tolist(), name
        assert [i for s in got.segment_ids for i in s] == c[p + "segment_ids"].tolist(), name
        assert [i for s in got.gpt_ids for i in s] == c[p + "gpt_ids"].tolist(), name
        assert [len(s) for s in got.gpt_ids] == c[p + "gpt_lengths"].tolist(), name
        assert got.lang_index == int(c[p + "lang_index"]), name
        ran += 1
    assert ran > 0
