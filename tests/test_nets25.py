"""IndexTTS-2.5 nets (delta §3-§5): the campplus-mode prefix, the GPT forward, EnhancedCodec.decode, the
s2mel glue and its target length, the random 2.5 modules and the tiny tiktoken rank file."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from fasttts_cli.build.tiny import ensure_tiny_checkpoint  # noqa: E402
from fasttts_cli.nets import random_model as rm  # noqa: E402
from fasttts_cli.nets.checkpoint25 import IndexTTS25Modules, load_checkpoint25  # noqa: E402
from fasttts_cli.nets.s2mel25 import content25, prompt_condition25, target_length25  # noqa: E402
from fasttts_cli.nets.tiktoken_ranks import (  # noqa: E402
    TINY_WORDS,
    TOKENIZER_FILE,
    gpt2_byte_order,
    read_tiktoken,
    tiny_ranks,
)
from tests.parity import CACHE  # noqa: E402

EN, ZH = 0, 1  # lang_to_token order (delta §2.1)


@pytest.fixture(scope="module")
def m25() -> IndexTTS25Modules:
    return load_checkpoint25(ensure_tiny_checkpoint(CACHE / "tiny25-ckpt-seed0", seed=0, model="indextts2.5"))


def _inputs(m: IndexTTS25Modules, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    style = torch.randn(1, m.gpt.cfg.style_dim, generator=g)
    emovec = torch.randn(1, m.gpt.cfg.model_dim, generator=g)
    return style, emovec


# -------------------------------------------------------------------------------------------- GPT


def test_prefix_has_l_plus_5_rows_two_zero_slots_and_the_language_row(m25: IndexTTS25Modules) -> None:
    gpt, c = m25.gpt, m25.gpt.cfg
    style, emovec = _inputs(m25)
    ids = torch.tensor([[0, 57, 300, 0, 1, 9, 1]])  # 0/1 are stripped wherever they occur (the `!` quirk)
    kept = torch.tensor([57, 300, 9])
    big_l = kept.numel()
    with torch.no_grad():
        spk = gpt.speaker_vector(style)
        p_en = gpt.prefix_embeddings(spk, emovec, ids, EN)
        p_zh = gpt.prefix_embeddings(spk, emovec, ids, torch.tensor([ZH]))
    # the original's width: every stripped id is a masked zero row on the left
    n_pad = ids.shape[1] - big_l
    assert p_en.embeds.shape == (1, ids.shape[1] + 5, c.model_dim) and c.n_conds == 3
    assert p_en.mask[0].tolist() == [0] * n_pad + [1] * (big_l + 5) and int(p_en.lengths[0]) == big_l + 5
    assert torch.count_nonzero(p_en.embeds[0, :n_pad]) == 0
    e = p_en.embeds[0, n_pad:]
    assert torch.equal(e[0], (gpt.spk_emb_proj(style) + emovec)[0])
    assert torch.count_nonzero(e[1:3]) == 0  # the two slots v2 filled with speed_emb
    full = torch.cat([torch.tensor([c.start_text_token]), kept, torch.tensor([c.stop_text_token])])
    with torch.no_grad():
        want = gpt.text_embedding(full) + gpt.text_pos_embedding.emb(torch.arange(big_l + 2))
        want = want + gpt.lang_embedding.weight[EN]
    assert torch.equal(e[3:], want)
    # the language row is in every text row (start and stop included) and nowhere else
    diff = p_zh.embeds[0, n_pad:] - e
    assert torch.count_nonzero(diff[:3]) == 0
    lang_delta = gpt.lang_embedding.weight[ZH] - gpt.lang_embedding.weight[EN]
    assert torch.allclose(diff[3:], lang_delta.expand(big_l + 2, -1), atol=1e-6)


def test_batched_prefix_rows_equal_the_rows_alone(m25: IndexTTS25Modules) -> None:
    gpt = m25.gpt
    style, emovec = _inputs(m25)
    style2, emovec2 = _inputs(m25, seed=1)
    with torch.no_grad():
        spk = gpt.speaker_vector(torch.cat([style, style2]))
        both = gpt.prefix_embeddings(
            spk, torch.cat([emovec, emovec2]), torch.tensor([[5, 6, 7], [8, 1, 1]]), torch.tensor([EN, ZH])
        )
        second = gpt.prefix_embeddings(gpt.speaker_vector(style2), emovec2, torch.tensor([[8]]), ZH)
    assert both.embeds.shape[1] == 8 and both.lengths.tolist() == [8, 6]
    # (the batch-2 Linear may round differently from batch 1 in the last bit)
    assert torch.allclose(both.embeds[1, 2:], second.embeds[0], atol=1e-6)
    assert torch.count_nonzero(both.embeds[1, :2]) == 0


def test_gpt_forward_on_the_tiny_model_is_finite(m25: IndexTTS25Modules) -> None:
    gpt, c = m25.gpt, m25.gpt.cfg
    style, emovec = _inputs(m25)
    codes = torch.tensor([[3, 17, 4095, 8191, 0]])
    with torch.no_grad():
        prefix = gpt.prefix_embeddings(gpt.speaker_vector(style), emovec, torch.tensor([[40, 41, 42]]), EN)
        out = gpt.decode_forced(prefix, codes)
    assert out.logits.shape == (1, codes.shape[1] + 1, c.number_mel_codes)
    assert out.prefill_hidden.shape == (1, 3 + 5 + 1, c.model_dim)
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.hidden).all()
    assert out.logits.std() > 0


# -------------------------------------------------------------------------------------------- codec


@pytest.mark.parametrize("n", [1, 6, 7])
def test_codec_decode_is_2n_frames_at_the_content_width(m25: IndexTTS25Modules, n: int) -> None:
    codec = m25.codec
    codes = torch.randint(0, codec.sizes.codebook_size, (1, n), generator=torch.Generator().manual_seed(n))
    with torch.no_grad():
        s = codec.decode(codes)
        # by hand: raw codebook rows -> out_project -> Vocos decoder -> Linear -> each frame twice -> up
        q = codec.vq.out_project(codec.vq.codebook.weight[codes[0]].t()[None])
        h = codec.decoder[1](codec.decoder[0](q)).transpose(1, 2)
        want = codec.up(torch.repeat_interleave(h, 2, dim=2)).transpose(1, 2)
    assert s.shape == (1, 2 * n, m25.w2v_bert.mean.shape[0]) and torch.isfinite(s).all()
    assert torch.allclose(s, want, atol=1e-6)


def test_codec_decode_batched_rows_equal_the_rows_alone(m25: IndexTTS25Modules) -> None:
    codec = m25.codec
    a = torch.tensor([[5, 900, 17, 4000, 3]])
    b = torch.tensor([[77, 8191]])
    with torch.no_grad():
        both = codec.decode(torch.cat([a, F.pad(b, (0, 3), value=0)]), torch.tensor([5, 2]))
        alone = codec.decode(b)
        first = codec.decode(a)
    assert torch.allclose(both[1, :4], alone[0], atol=1e-5) and torch.count_nonzero(both[1, 4:]) == 0
    assert torch.allclose(both[0], first[0], atol=1e-5)


# -------------------------------------------------------------------------------------------- s2mel


def test_target_length_is_the_originals_double_expression() -> None:
    # by hand: int(((2n) * 1.72) * df) in float64
    assert target_length25(20) == 68  # 68.8
    assert target_length25(25) == 86  # 50 * 1.72 rounds to exactly 86.0
    assert target_length25(7) == 24  # 24.08 (odd n)
    assert target_length25(20, 1.37) == 94  # 68.8 * 1.37 = 94.256
    assert target_length25(7, 1.37) == 32  # 24.08 * 1.37 = 32.9896
    assert target_length25(101, 1.37) == 475  # 347.44 * 1.37 = 475.9928
    # where dtype and order matter: 750 * 1.72 = 1290.0, times the double 0.7 (just under 0.7) is the
    # double just under 903, so 902 (float32 or exact decimals give 903); and 2500 * 1.72 * 0.63 = 2709
    # left to right, while 2500 * (1.72 * 0.63) is 2708
    assert target_length25(375, 0.7) == 902
    assert target_length25(1250, 0.63) == 2709


def test_s2mel_glue_shapes(m25: IndexTTS25Modules) -> None:
    s2mel, width = m25.s2mel, m25.w2v_bert.mean.shape[0]
    channels = s2mel.length_regulator.content_in_proj.weight.shape[0]
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        s_infer = m25.codec.decode(torch.tensor([[1, 2, 3, 4, 5, 6, 7]]))
        cond, ylens = content25(s2mel, s_infer, torch.tensor([7]), 1.37)
        prompt = prompt_condition25(
            s2mel, torch.randn(1, 50, width, generator=g), torch.tensor([50]), torch.tensor([86])
        )
    assert ylens.tolist() == [target_length25(7, 1.37)] and cond.shape == (1, 32, channels)
    assert prompt.shape == (1, 86, channels) and torch.isfinite(cond).all() and torch.isfinite(prompt).all()
    with pytest.raises(ValueError, match="gpt_layer"):
        s2mel.content(s_infer, s_infer, torch.tensor([7]))


# -------------------------------------------------------------------------------------------- random


def test_random_25_modules_have_no_constant_tensor_and_follow_the_seed() -> None:
    gpt = rm.random_gpt25(rm.generator(0))
    codec = rm.random_codec25(rm.generator(0))
    for module in (gpt, codec):
        for name, t in module.state_dict().items():
            if t.numel() > 1 and t.is_floating_point():
                assert t.std() > 0, name  # LN affines, ConvNeXt gamma, biases: all perturbed
    assert {"down.weight", "encoder.1.weight", "quantizer.quantizers.0.in_project.weight_g"} <= set(
        codec.state_dict()
    )
    gamma = codec.decoder[0].convnext[0].gamma.detach()
    assert not torch.allclose(gamma, torch.full_like(gamma, float(gamma.mean())))
    again = rm.random_gpt25(rm.generator(0)).state_dict()
    other = rm.random_gpt25(rm.generator(1)).state_dict()
    sd = gpt.state_dict()
    assert all(torch.equal(sd[k], again[k]) for k in sd)
    assert not torch.equal(sd["lang_embedding.weight"], other["lang_embedding.weight"])


# -------------------------------------------------------------------------------------------- tokenizer


def test_tiny_rank_file_byte_order_and_reachable_merges(m25: IndexTTS25Modules) -> None:
    ranks = read_tiktoken(m25.tokenizer)
    assert ranks == tiny_ranks() and m25.tokenizer.name == TOKENIZER_FILE
    assert ranks[0] == b"!" and ranks[1] == b'"' and ranks[220] == b" " and ranks[255] == bytes([173])
    assert sorted(ranks[:256]) == [bytes([b]) for b in range(256)] and len(gpt2_byte_order()) == 256
    rank = {t: r for r, t in enumerate(ranks)}
    for t, r in rank.items():
        if len(t) > 1:  # the merge of two lower-ranked tokens
            assert any(rank.get(t[:i], r) < r and rank.get(t[i:], r) < r for i in range(1, len(t))), t
    line = (m25.tokenizer).read_text(encoding="ascii").splitlines()[0]
    assert line == f"{base64.b64encode(b'!').decode()} 0"


def test_tiny_words_are_single_tokens_under_tiktoken(m25: IndexTTS25Modules) -> None:
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    ranks = load_tiktoken_bpe(str(m25.tokenizer))
    enc = tiktoken.Encoding("tiny", pat_str=pat, mergeable_ranks=ranks, special_tokens={})
    for word in TINY_WORDS:
        assert len(enc.encode(word)) == 1 and len(enc.encode(" " + word)) == 1, word
    assert enc.encode("hello!") == [ranks[b"hello"], 0]  # the stand-alone `!` is id 0
    assert enc.encode("你好世界") == [ranks[c.encode()] for c in "你好世界"]


def test_read_tiktoken_names_the_bad_line(tmp_path: Path) -> None:
    from fasttts_cli.errors import InputError

    bad = tmp_path / "x.tiktoken"
    bad.write_text("IQ== 0\nnot-base64! 1\n", encoding="ascii")
    with pytest.raises(InputError, match="line 2"):
        read_tiktoken(bad)
    bad.write_text("IQ== 0\nIg== 2\n", encoding="ascii")
    with pytest.raises(InputError, match="ranks are not"):
        read_tiktoken(bad)
