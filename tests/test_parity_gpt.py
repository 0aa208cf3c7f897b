"""UnifiedVoice (GPT) vs the original IndexTTS-2, stage by stage (stages 3.1, 3.2, 3.4, 3.5, 3.7), plus the
properties the batched runtime relies on: KV-cache decoding == full recomputation, left-padded / length-
masked batch rows == each row alone, the trunk and conditioners export to ONNX, strict loading."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

from fasttts_cli.nets.unified_voice import (  # noqa: E402
    EmotionConditionerGraph,
    Prefix,
    SpeakerConditionerGraph,
    TrunkGraph,
    UnifiedVoice,
    UnifiedVoiceConfig,
    load_unified_voice,
)
from fasttts_cli.nets.weights import CheckpointKeyError  # noqa: E402
from tests.parity import ParityCase, rel  # noqa: E402

TOL = 1e-4  # parity README: fp32 stage outputs
BATCH_TOL = 1e-5  # batched vs one-by-one, deterministic stages

_MODELS: dict[Path, UnifiedVoice] = {}


@pytest.fixture
def uv(parity_checkpoint: Path) -> UnifiedVoice:
    torch.set_num_threads(1)
    if parity_checkpoint not in _MODELS:
        cfg = yaml.safe_load((parity_checkpoint / "config.yaml").read_text(encoding="utf-8"))
        _MODELS[parity_checkpoint] = load_unified_voice(parity_checkpoint / "gpt.pth", cfg["gpt"])
    return _MODELS[parity_checkpoint]


def _t(case: ParityCase, key: str) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(case[key]))


def _check(name: str, got: torch.Tensor, case: ParityCase, key: str | None = None, tol: float = TOL) -> None:
    key = key or name
    r = rel(got.detach().numpy(), case[key])
    assert r < tol, f"{case.name}: {key} rel {r:.3g} >= {tol}"


@pytest.mark.parity
@torch.no_grad()
def test_stage_3_1_emotion_conditioner(uv: UnifiedVoice, parity_case: ParityCase) -> None:
    alpha = float(parity_case.case["emo_alpha_used"])
    ec = uv.emotion_conditioning(_t(parity_case, "emo_cond_emb"), _t(parity_case, "spk_cond_emb"), alpha)
    for key in (
        "emo_conformer_out",
        "emo_perceiver_out",
        "emo_emovec_layer_out",
        "emovec_emo",
        "emo_base_conformer_out",
        "emovec_base",
        "emovec",
    ):
        _check(key, getattr(ec, key), parity_case)
    np.testing.assert_array_equal(ec.emo_conformer_mask.long().numpy(), parity_case["emo_conformer_mask"])
    # without a speaker the vector is the emotion chain alone
    _check("emovec_emo", uv.emotion_conditioning(_t(parity_case, "emo_cond_emb")).emovec, parity_case)
    _check("emovec_base", uv.emovec_of(_t(parity_case, "spk_cond_emb")), parity_case)


@pytest.mark.parity
@torch.no_grad()
def test_stage_3_2_speaker_conditioner(uv: UnifiedVoice, parity_case: ParityCase) -> None:
    sc = uv.speaker_conditioning(_t(parity_case, "spk_cond_emb"))
    _check("spk_conformer_out", sc.conformer_out, parity_case)
    _check("spk_latents", sc.latents, parity_case)
    np.testing.assert_array_equal(sc.conformer_mask.long().numpy(), parity_case["spk_conformer_mask"])
    _check("spk_latents", uv.speaker_latents(_t(parity_case, "spk_cond_emb")), parity_case)


@pytest.mark.parity
@torch.no_grad()
def test_stage_3_4_prefix(uv: UnifiedVoice, parity_case: ParityCase) -> None:
    spk, emo, ids = _t(parity_case, "spk_latents"), _t(parity_case, "emovec"), _t(parity_case, "gpt_text_ids")
    _check("gpt_conds_latent", uv.conds_latent(spk, emo), parity_case)
    _check("gpt_text_emb", uv.text_embeddings(ids[0])[None], parity_case)
    prefix = uv.prefix_embeddings(spk, emo, ids)
    _check("gpt_prefix_emb", prefix.embeds, parity_case)
    assert prefix.mask.tolist() == [[1] * parity_case["gpt_prefix_emb"].shape[1]]


@pytest.mark.parity
@torch.no_grad()
def test_stage_3_4_prefix_from_host_tables(uv: UnifiedVoice, parity_case: ParityCase) -> None:
    # What the numpy runtime does around the exported trunk: plain table lookups.
    tab = {k: v.numpy() for k, v in uv.host_tables().items()}
    ids = np.concatenate([[0], parity_case["gpt_text_ids"][0], [1]])
    conds = parity_case["spk_latents"][0] + parity_case["emovec"]
    text = tab["text_embedding"][ids] + tab["text_pos"][: len(ids)]
    prefix = np.concatenate([conds, tab["speed_emb"][[1, 0]], text])
    assert rel(prefix, parity_case["gpt_prefix_emb"][0]) < TOL


def _stored_prefix(case: ParityCase) -> Prefix:
    emb = _t(case, "gpt_prefix_emb")
    mask = torch.ones(emb.shape[:2], dtype=torch.long)
    return Prefix(emb, mask, mask.sum(1))


@pytest.mark.parity
@torch.no_grad()
def test_stage_3_5_generation_path(uv: UnifiedVoice, parity_case: ParityCase) -> None:
    codes = _t(parity_case, "gpt_forced_codes")[None]
    fd = uv.decode_forced(_stored_prefix(parity_case), codes)
    _check("gpt_prefill_hidden", fd.prefill_hidden[0], parity_case)
    _check("gpt_gen_hidden", fd.hidden[0], parity_case)
    _check("gpt_gen_logits", fd.logits[0], parity_case)

    # Full recomputation without a cache, same inputs and positions (start@0, code k @ k+2).
    n = codes.shape[1]
    mel_ids = torch.cat([torch.tensor([[uv.cfg.start_mel_token]]), codes], dim=1)
    pos = torch.cat([torch.tensor([[0]]), torch.arange(2, n + 2)[None]], dim=1)
    x = torch.cat([_t(parity_case, "gpt_prefix_emb"), uv.mel_input_embedding(mel_ids, pos)], dim=1)
    logits, hidden, present = uv.trunk(x, torch.ones(x.shape[:2], dtype=torch.long))
    p = parity_case["gpt_prefix_emb"].shape[1]
    full = logits[0, p:]
    assert rel(fd.logits[0].numpy(), full.numpy()) < BATCH_TOL
    assert rel(fd.hidden[0].numpy(), hidden[0, p:].numpy()) < BATCH_TOL
    _check("gpt_gen_logits", full, parity_case)
    # The cache after the last step holds every position but the last forced code's successor.
    for (k_c, v_c), (k_f, v_f) in zip(fd.past_kv, present, strict=True):
        assert k_c.shape == k_f.shape == (1, uv.cfg.heads, p + n + 1, uv.cfg.head_dim)
        assert rel(k_c.numpy(), k_f.numpy()) < BATCH_TOL and rel(v_c.numpy(), v_f.numpy()) < BATCH_TOL


@pytest.mark.parity
@torch.no_grad()
def test_stage_3_5_stacked_cache_layout(uv: UnifiedVoice, parity_case: ParityCase) -> None:
    prefix = _stored_prefix(parity_case)
    codes = _t(parity_case, "gpt_forced_codes")[None, :3]
    x = torch.cat(
        [
            prefix.embeds,
            uv.mel_input_embedding(torch.tensor([[uv.cfg.start_mel_token]]), torch.tensor([[0]])),
        ],
        dim=1,
    )
    mask = torch.ones(x.shape[:2], dtype=torch.long)
    logits, _, past = uv.trunk(x, mask, uv.empty_kv(1, stacked=True), logits_for="last")
    assert past.shape == (uv.cfg.layers, 2, 1, uv.cfg.heads, x.shape[1], uv.cfg.head_dim)
    rows = [logits[0, 0]]
    for k in range(codes.shape[1]):
        step = uv.mel_input_embedding(codes[:, k : k + 1], torch.tensor([[k + 2]]))
        mask = torch.cat([mask, torch.ones(1, 1, dtype=torch.long)], dim=1)
        logits, _, past = uv.trunk(step, mask, past, logits_for="last")
        rows.append(logits[0, 0])
    r = rel(torch.stack(rows).numpy(), parity_case["gpt_gen_logits"][: codes.shape[1] + 1])
    assert r < TOL, r


@pytest.mark.parity
@torch.no_grad()
def test_stage_3_7_latent(uv: UnifiedVoice, parity_case: ParityCase) -> None:
    lat = uv.latent(
        _t(parity_case, "spk_latents"),
        _t(parity_case, "emovec"),
        _t(parity_case, "gpt_text_ids"),
        _t(parity_case, "gpt_forced_codes")[None],
    )
    _check("gpt_latent", lat, parity_case)


def _rows_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return rel(a.numpy(), b.numpy())


@pytest.mark.parity
@torch.no_grad()
def test_batched_left_padded_prefixes_match_single(uv: UnifiedVoice, parity_case: ParityCase) -> None:
    spk, emo, ids = _t(parity_case, "spk_latents"), _t(parity_case, "emovec"), _t(parity_case, "gpt_text_ids")
    codes = _t(parity_case, "gpt_forced_codes")[:6]
    short = ids[0, :11]
    # Two rows of different prefix lengths, different emovecs and code histories; the short one is padded
    # on the left with the stop id (dropped, as the original drops start/stop ids) and by length.
    batch_ids = torch.stack([ids[0], torch.cat([short, torch.ones(ids.shape[1] - 11, dtype=torch.long)])])
    batch_emo = torch.cat([emo, 0.5 * emo])
    batch_codes = torch.stack([codes, codes.flip(0)])
    prefix = uv.prefix_embeddings(spk, batch_emo, batch_ids, torch.tensor([ids.shape[1], 11]))
    assert prefix.lengths.tolist() == [uv.cfg.n_conds + ids.shape[1] + 2, uv.cfg.n_conds + 13]
    assert prefix.mask[1, : ids.shape[1] - 11].sum() == 0
    both = uv.decode_forced(prefix, batch_codes)
    alone = [
        uv.decode_forced(uv.prefix_embeddings(spk, emo, ids), codes[None]),
        uv.decode_forced(uv.prefix_embeddings(spk, 0.5 * emo, short[None]), codes.flip(0)[None]),
    ]
    for b, one in enumerate(alone):
        assert _rows_rel(both.logits[b], one.logits[0]) < BATCH_TOL
        assert _rows_rel(both.hidden[b], one.hidden[0]) < BATCH_TOL
        p1 = one.prefill_hidden.shape[1]
        assert _rows_rel(both.prefill_hidden[b, -p1:], one.prefill_hidden[0]) < BATCH_TOL
    assert _rows_rel(alone[0].logits[0], _t(parity_case, "gpt_gen_logits")[:7]) < TOL
    assert torch.isfinite(both.prefill_hidden).all()  # padded rows stay finite (no NaN in the cache)


@pytest.mark.parity
@torch.no_grad()
def test_batched_latent_with_code_and_text_lengths(uv: UnifiedVoice, parity_case: ParityCase) -> None:
    spk, emo, ids = _t(parity_case, "spk_latents"), _t(parity_case, "emovec"), _t(parity_case, "gpt_text_ids")
    codes = _t(parity_case, "gpt_forced_codes")
    n2 = 9
    batch_codes = torch.stack(
        [codes, torch.cat([codes[:n2].flip(0), torch.zeros(len(codes) - n2, dtype=torch.long)])]
    )
    lat = uv.latent(
        spk,
        torch.cat([emo, -emo]),
        torch.cat([ids, ids]),
        batch_codes,
        code_lengths=torch.tensor([len(codes), n2]),
        text_lengths=torch.tensor([ids.shape[1], 17]),
    )
    one = uv.latent(spk, emo, ids, codes[None])
    two = uv.latent(spk, -emo, ids[:, :17], codes[:n2].flip(0)[None])
    assert _rows_rel(lat[0], one[0]) < BATCH_TOL
    assert _rows_rel(lat[1, :n2], two[0]) < BATCH_TOL
    assert lat[1, n2:].abs().max() == 0
    _check("gpt_latent", lat[:1], parity_case)


@pytest.mark.parity
@torch.no_grad()
def test_batched_conditioners_with_lengths_match_single(uv: UnifiedVoice, parity_case: ParityCase) -> None:
    spk, emo = _t(parity_case, "spk_cond_emb"), _t(parity_case, "emo_cond_emb")
    t2 = 77
    padded = torch.zeros_like(spk)
    padded[:, :t2] = emo[:, :t2]
    feats = torch.cat([spk, padded])
    lengths = torch.tensor([spk.shape[1], t2])
    lat = uv.speaker_latents(feats, lengths)
    assert _rows_rel(lat[0], uv.speaker_latents(spk)[0]) < BATCH_TOL
    assert _rows_rel(lat[1], uv.speaker_latents(emo[:, :t2])[0]) < BATCH_TOL
    vec = uv.emovec_of(feats, lengths)
    assert _rows_rel(vec[0], uv.emovec_of(spk)[0]) < BATCH_TOL
    assert _rows_rel(vec[1], uv.emovec_of(emo[:, :t2])[0]) < BATCH_TOL
    # Per-row alpha: row 0 default mode (alpha 1), row 1 blended.
    alpha = torch.tensor([1.0, 0.3])
    mixed = uv.emotion_conditioning(torch.cat([emo, emo]), torch.cat([spk, spk]), alpha).emovec
    base, e = uv.emovec_of(spk)[0], uv.emovec_of(emo)[0]
    assert _rows_rel(mixed[1], base + 0.3 * (e - base)) < BATCH_TOL
    _check("emovec_base", uv.emovec_of(spk), parity_case)


# --------------------------------------------------------------------------- tiny random model (no vectors)

_TINY_MOD = dict(
    output_size=16, linear_units=24, attention_heads=2, num_blocks=2, input_layer="conv2d2", perceiver_mult=2
)
TINY_GPT = dict(
    model_dim=64,
    layers=3,
    heads=4,
    max_mel_tokens=40,
    max_text_tokens=20,
    number_text_tokens=30,
    number_mel_codes=52,
    start_mel_token=50,
    stop_mel_token=51,
    condition_module=_TINY_MOD,
    emo_condition_module={**_TINY_MOD, "attention_heads": 4, "output_size": 24},
)


def _tiny(seed: int = 0) -> UnifiedVoice:
    torch.set_num_threads(1)
    uv = UnifiedVoice(UnifiedVoiceConfig.from_gpt_section(TINY_GPT, cond_input_size=20)).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in uv.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return uv


def test_tiny_sizes_follow_config() -> None:
    uv = _tiny()
    sd = uv.state_dict()
    assert sd["gpt.h.2.attn.c_attn.weight"].shape == (64, 192)  # Conv1D (in, out)
    assert "gpt.h.3.ln_1.weight" not in sd
    assert sd["mel_pos_embedding.emb.weight"].shape == (40 + 3, 64)
    assert sd["text_pos_embedding.emb.weight"].shape == (22, 64)
    assert sd["text_embedding.weight"].shape == sd["text_head.weight"].shape == (31, 64)
    assert sd["conditioning_encoder.embed.out.0.weight"].shape == (16, 16 * 9)
    assert sd["emo_conditioning_encoder.encoders.1.self_attn.pos_bias_u"].shape == (4, 6)
    assert sd["perceiver_encoder.latents"].shape == (32, 64)
    assert sd["emo_perceiver_encoder.latents"].shape == (1, 20)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the legacy (TorchScript) exporter
@torch.no_grad()
def test_trunk_exports_with_dynamic_axes() -> None:
    ort = pytest.importorskip("onnxruntime")
    uv = _tiny()
    c = uv.cfg
    graph = TrunkGraph(uv, kv_layout="per_layer", logits_for="last").eval()
    kv_in = [f"past_{kv}_{i}" for i in range(c.layers) for kv in "kv"]
    kv_out = [f"present_{kv}_{i}" for i in range(c.layers) for kv in "kv"]
    dyn = {
        "inputs_embeds": {0: "b", 1: "t"},
        "attention_mask": {0: "b", 1: "total"},
        "logits": {0: "b"},
        "hidden": {0: "b", 1: "t"},
    }
    dyn.update({n: {0: "b", 2: "past"} for n in kv_in})
    dyn.update({n: {0: "b", 2: "total"} for n in kv_out})

    def inputs(b: int, t: int, tp: int, pad: int) -> list[torch.Tensor]:
        mask = torch.ones(b, tp + t, dtype=torch.long)
        mask[0, :pad] = 0
        past = [torch.randn(b, c.heads, tp, c.head_dim) for _ in kv_in]
        return [torch.randn(b, t, c.model_dim), mask, *past]

    buf = io.BytesIO()
    torch.onnx.export(
        graph,
        tuple(inputs(2, 3, 4, 1)),
        buf,
        input_names=["inputs_embeds", "attention_mask", *kv_in],
        output_names=["logits", "hidden", *kv_out],
        dynamic_axes=dyn,
        opset_version=17,
        dynamo=False,
    )
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    for b, t, tp, pad in [(3, 1, 9, 4), (1, 5, 0, 0), (2, 6, 0, 2)]:
        args = inputs(b, t, tp, pad)
        got = sess.run(
            None,
            {n: a.numpy() for n, a in zip(["inputs_embeds", "attention_mask", *kv_in], args, strict=True)},
        )
        ref = graph(*args)
        for g_, r_ in zip(got, ref, strict=True):
            assert g_.shape == tuple(r_.shape)
            assert rel(g_, r_.numpy()) < 1e-5


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@torch.no_grad()
def test_conditioners_export_with_lengths() -> None:
    ort = pytest.importorskip("onnxruntime")
    uv = _tiny(1)
    for graph in (SpeakerConditionerGraph(uv).eval(), EmotionConditionerGraph(uv).eval()):
        buf = io.BytesIO()
        torch.onnx.export(
            graph,
            (torch.randn(2, 30, 20), torch.tensor([30, 21])),
            buf,
            input_names=["feats", "lengths"],
            output_names=["out"],
            dynamic_axes={"feats": {0: "b", 1: "t"}, "lengths": {0: "b"}, "out": {0: "b"}},
            opset_version=17,
            dynamo=False,
        )
        sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
        feats, lens = torch.randn(3, 41, 20), torch.tensor([41, 19, 33])
        got = sess.run(None, {"feats": feats.numpy(), "lengths": lens.numpy()})[0]
        assert rel(got, graph(feats, lens).numpy()) < 1e-5


def _save_tiny(tmp_path: Path, state: dict, name: str = "gpt.pth") -> Path:
    path = tmp_path / name
    torch.save(state, path)
    return path


def test_loader_accepts_flat_wrapped_and_ignored_keys(tmp_path: Path) -> None:
    uv = _tiny(2)
    state = uv.state_dict()
    extra = {
        "inference_model.lm_head.1.weight": torch.zeros(1),
        "gpt.wte.weight": torch.zeros(1),
        "gpt.h.0.attn.bias": torch.zeros(1),
        "gpt.h.0.attn.masked_bias": torch.zeros(()),
    }
    for i, obj in enumerate([state, {"model": {**state, **extra}}]):
        loaded = load_unified_voice(_save_tiny(tmp_path, obj, f"g{i}.pth"), TINY_GPT, cond_input_size=20)
        x = torch.randn(1, 4, 64)
        m = torch.ones(1, 4, dtype=torch.long)
        with torch.no_grad():
            assert torch.equal(loaded.trunk(x, m)[0], uv.trunk(x, m)[0])


def test_loader_errors_name_file_and_key(tmp_path: Path) -> None:
    state = _tiny(3).state_dict()
    missing = {k: v for k, v in state.items() if k != "gpt.h.1.mlp.c_fc.bias"}
    with pytest.raises(CheckpointKeyError, match=r"gpt\.pth.*missing key gpt\.h\.1\.mlp\.c_fc\.bias"):
        load_unified_voice(_save_tiny(tmp_path, missing), TINY_GPT, cond_input_size=20)
    with pytest.raises(CheckpointKeyError, match=r"unexpected key gpt\.h\.3\.ln_1\.weight"):
        load_unified_voice(
            _save_tiny(tmp_path, {**state, "gpt.h.3.ln_1.weight": torch.ones(64)}),
            TINY_GPT,
            cond_input_size=20,
        )
    # A config that disagrees with the tensors: the message names the key and both shapes.
    with pytest.raises(CheckpointKeyError, match=r"mel_pos_embedding\.emb\.weight has shape"):
        load_unified_voice(
            _save_tiny(tmp_path, state), {**TINY_GPT, "max_mel_tokens": 41}, cond_input_size=20
        )
