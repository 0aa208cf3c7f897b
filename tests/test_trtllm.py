"""TensorRT-LLM GPT checkpoint conversion (numpy, no GPU): tensor names/shapes/dtypes, config.json, the
merged ids / prompt table / position arrays, and the equivalence test on the parity checkpoint: the
host-side emulation of TensorRT-LLM's input construction gives UnifiedVoice's prefix and mel embeddings,
and a GPT-2 trunk run from the converted checkpoint reproduces the generation logits and the latent."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.backends.tensorrt_llm import trtllm_convert as tc
from tests.parity import ParityCase, checkpoint_for, rel

TOL = 1e-4


# ------------------------------------------------------------------------------- pure layout


def _layout() -> tc.MergedLayout:
    return tc.MergedLayout(
        n_mel=10, text_vocab=6, mel_pos_rows=8, text_pos_rows=5, n_conds=3, start_mel=8, stop_mel=9
    )


def test_layout_ids_and_positions() -> None:
    lay = _layout()
    assert (lay.vocab_size, lay.zero_position, lay.max_position_embeddings) == (16, 13, 14)
    ids, pos = lay.generation_inputs([0, 4, 5, 1], codes=[3, 7])  # start/stop text ids dropped
    np.testing.assert_array_equal(ids, [16, 17, 18, 10 + 0, 10 + 4, 10 + 5, 10 + 1, 8, 3, 7])
    np.testing.assert_array_equal(pos, [13, 13, 13, 8, 9, 10, 11, 0, 2, 3])
    assert lay.generation_position(1) == 2  # code 0 (fed at step 1) sits at position 2
    ids, pos, rows = lay.latent_inputs([4, 5], [3, 7])
    np.testing.assert_array_equal(ids[-4:], [8, 3, 7, 9])
    np.testing.assert_array_equal(pos[-4:], [0, 1, 2, 3])  # latent pass: 0..n+1
    assert rows == slice(7, 9)
    with pytest.raises(ValueError, match="text positions"):
        lay.prefix([2, 3, 4, 5])


def test_emulate_inputs_with_tasks() -> None:
    lay = _layout()
    rng = np.random.default_rng(0)
    tok = rng.standard_normal((lay.vocab_size, 4)).astype(np.float32)
    ptab = np.concatenate([rng.standard_normal((lay.max_position_embeddings - 1, 4)), np.zeros((1, 4))])
    conds = rng.standard_normal((2, lay.n_conds, 4)).astype(np.float32)
    table = tc.prompt_table(conds)
    ids, pos = lay.generation_inputs([4, 5])
    both = tc.emulate_inputs(
        np.stack([ids, ids]),
        table,
        np.stack([pos, pos]),
        tok,
        ptab,
        tasks=[0, 1],
        prompt_vocab_size=lay.n_conds,
    )
    for b in range(2):
        np.testing.assert_allclose(both[b, : lay.n_conds], conds[b], rtol=0, atol=0)  # zero position row
        one = tc.emulate_inputs(ids, conds[b], pos, tok, ptab)
        np.testing.assert_array_equal(both[b], one)
    np.testing.assert_allclose(both[0, lay.n_conds], tok[10 + 0] + ptab[8])
    with pytest.raises(ValueError, match="past the prompt table"):
        tc.emulate_inputs(ids, conds[0], pos, tok, ptab, tasks=1, prompt_vocab_size=lay.n_conds)


def test_safetensors_roundtrip(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(1)
    t = {"a.weight": rng.standard_normal((3, 5)).astype(np.float32), "b": np.arange(4, dtype=np.int8)}
    for dtype, tol in (("float32", 0), ("float16", 1e-3), ("bfloat16", 8e-3)):
        p = tmp_path / f"{dtype}.safetensors"
        tc.write_safetensors(p, t, dtype=dtype)
        back = tc.read_safetensors(p)
        assert np.abs(back["a.weight"].astype(np.float32) - t["a.weight"]).max() <= tol * 4
        np.testing.assert_array_equal(back["b"], t["b"])
        if dtype != "bfloat16":  # the reference reader has no numpy bfloat16
            ref = st.load_file(str(p))
            np.testing.assert_array_equal(ref["a.weight"], back["a.weight"])
            assert ref["a.weight"].dtype == np.dtype(dtype)


# ------------------------------------------------------------------------------- parity checkpoint

_STATE: dict[Path, tuple[dict[str, np.ndarray], dict]] = {}


def _state(case: ParityCase) -> tuple[dict[str, np.ndarray], dict]:
    pytest.importorskip("torch")
    yaml = pytest.importorskip("yaml")
    ckpt = checkpoint_for(case.weight_seed)
    if ckpt not in _STATE:
        gpt_cfg = yaml.safe_load((ckpt / "config.yaml").read_text(encoding="utf-8"))["gpt"]
        _STATE[ckpt] = (tc.state_from_gpt_pth(ckpt / "gpt.pth"), gpt_cfg)
    return _STATE[ckpt]


def _convert(case: ParityCase, out: Path, precision: str = "fp32"):
    state, gcfg = _state(case)
    n_conds = tc.n_conds_from_state(state)
    assert n_conds == int(gcfg.get("condition_num_latent", 32)) + 2
    tc.write_checkpoint(out, state, heads=int(gcfg["heads"]), n_conds=n_conds, precision=precision)
    cfg = json.loads((out / tc.CONFIG_FILE).read_text(encoding="utf-8"))
    return state, gcfg, cfg, tc.read_safetensors(out / tc.WEIGHTS_FILE)


@pytest.mark.parity
def test_checkpoint_names_shapes_dtypes(parity_case: ParityCase, tmp_path: Path) -> None:
    state, gcfg, cfg, w = _convert(parity_case, tmp_path / "fp16", precision="fp16")
    d, layers, heads = int(gcfg["model_dim"]), int(gcfg["layers"]), int(gcfg["heads"])
    n_mel = state["mel_embedding.weight"].shape[0]
    v_text = state["text_embedding.weight"].shape[0]
    mel_rows = state["mel_pos_embedding.emb.weight"].shape[0]
    text_rows = state["text_pos_embedding.emb.weight"].shape[0]
    inner = state["gpt.h.0.mlp.c_fc.weight"].shape[1]
    want = {
        "transformer.vocab_embedding.weight": (n_mel + v_text, d),
        "transformer.position_embedding.weight": (mel_rows + text_rows + 1, d),
        "transformer.ln_f.weight": (d,),
        "transformer.ln_f.bias": (d,),
        "transformer.ln_f.final_norm.weight": (d,),
        "transformer.ln_f.final_norm.bias": (d,),
        "lm_head.weight": (n_mel + v_text, d),
        "lm_head.bias": (n_mel + v_text,),
    }
    for i in range(layers):
        p = f"transformer.layers.{i}"
        want.update(
            {
                f"{p}.input_layernorm.weight": (d,),
                f"{p}.input_layernorm.bias": (d,),
                f"{p}.attention.qkv.weight": (3 * d, d),
                f"{p}.attention.qkv.bias": (3 * d,),
                f"{p}.attention.dense.weight": (d, d),
                f"{p}.attention.dense.bias": (d,),
                f"{p}.post_layernorm.weight": (d,),
                f"{p}.post_layernorm.bias": (d,),
                f"{p}.mlp.fc.weight": (inner, d),
                f"{p}.mlp.fc.bias": (inner,),
                f"{p}.mlp.proj.weight": (d, inner),
                f"{p}.mlp.proj.bias": (d,),
            }
        )
    assert {k: tuple(v.shape) for k, v in w.items()} == want
    assert all(v.dtype == np.float16 for v in w.values())
    assert np.all(w["transformer.position_embedding.weight"][-1] == 0)  # the conditioning rows' position
    # text ids can never be sampled: zero head rows, a large negative (fp16-finite) bias
    assert np.all(w["lm_head.weight"][n_mel:] == 0) and np.all(w["lm_head.bias"][n_mel:] == tc.MASKED_LOGIT)
    np.testing.assert_allclose(
        w["transformer.layers.0.attention.qkv.weight"].astype(np.float32),
        state["gpt.h.0.attn.c_attn.weight"].T,
        rtol=1e-3,
        atol=1e-3,
    )
    assert cfg["architecture"] == "IndexTTS2GPTForCausalLM" and cfg["gpt_variant"] == "gpt2"
    assert (cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"]) == (n_mel + v_text, d, layers)
    assert (cfg["num_attention_heads"], cfg["intermediate_size"]) == (heads, inner)
    assert cfg["max_position_embeddings"] == mel_rows + text_rows + 1
    assert cfg["hidden_act"] == "gelu_new" and cfg["position_embedding_type"] == "learned_absolute"
    assert cfg["dtype"] == "float16" and cfg["quantization"]["quant_algo"] is None
    ix = cfg["indextts2"]
    assert ix["output_vocab_size"] == n_mel and ix["prompt_vocab_size"] == tc.n_conds_from_state(state)
    assert ix["final_norm"] and ix["lm_head_bias"]
    for prec, algo in (("w8a16", "W8A16"), ("w4a16", "W4A16"), ("bf16", None)):
        c = tc.make_config(
            tc.layout_from_state(state, n_conds=34),
            hidden_size=d,
            layers=layers,
            heads=heads,
            intermediate_size=inner,
            precision=prec,
        )
        assert c["quantization"]["quant_algo"] == algo
        assert c["indextts2"]["weights_finalized"] is (algo is None)


@pytest.mark.parity
def test_equivalence_with_unified_voice(parity_case: ParityCase, tmp_path: Path) -> None:
    state, gcfg, cfg, w = _convert(parity_case, tmp_path / "fp32")
    lay = tc.MergedLayout(
        **{
            k: cfg["indextts2"][k]
            for k in (
                "n_mel",
                "text_vocab",
                "mel_pos_rows",
                "text_pos_rows",
                "n_conds",
                "start_mel",
                "stop_mel",
                "start_text",
                "stop_text",
            )
        }
    )
    tok, pos_tab = w["transformer.vocab_embedding.weight"], w["transformer.position_embedding.weight"]
    text_ids = parity_case["gpt_text_ids"][0]
    codes = parity_case["gpt_forced_codes"]
    n = codes.size

    # conditioning rows from the stage-3.4 inputs equal the original's conds latent
    conds = tc.conds_rows(parity_case["spk_latents"][0], parity_case["emovec"][0], state["speed_emb.weight"])
    assert rel(conds, parity_case["gpt_conds_latent"][0]) < 1e-6

    # generation path: prefix, start@0, code k at k+2 -> one causal pass gives every step's logits
    ids, pos = lay.generation_inputs(text_ids, codes)
    emb = tc.emulate_inputs(ids, tc.prompt_table(conds[None]), pos, tok, pos_tab)
    p = parity_case["gpt_prefix_emb"].shape[1]
    assert ids.size == p + 1 + n
    assert rel(emb[:p], parity_case["gpt_prefix_emb"][0]) < 1e-6
    mel = state["mel_embedding.weight"]
    mpos = state["mel_pos_embedding.emb.weight"]
    np.testing.assert_allclose(emb[p], mel[lay.start_mel] + mpos[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(emb[p + 1 :], mel[codes] + mpos[np.arange(n) + 2], rtol=1e-6, atol=1e-6)
    hidden, logits = tc.reference_forward(w, cfg, emb)
    n_mel = cfg["indextts2"]["output_vocab_size"]
    assert logits.shape[1] == cfg["vocab_size"] and logits[:, n_mel:].max() < tc.MASKED_LOGIT / 2
    logits = logits[:, :n_mel]
    assert rel(logits[p:], parity_case["gpt_gen_logits"]) < TOL
    assert rel(hidden[p:], parity_case["gpt_gen_hidden"]) < TOL

    # latent pass: second teacher-forced pass at mel positions 0..n+1
    lids, lpos, rows = lay.latent_inputs(text_ids, codes)
    lemb = tc.emulate_inputs(lids, tc.prompt_table(conds[None]), lpos, tok, pos_tab)
    lat_hidden, _ = tc.reference_forward(w, cfg, lemb)
    latent = lat_hidden[rows]
    assert rel(latent, parity_case["gpt_latent"][0]) < TOL
    # reusing generation hidden states as the latent is an approximation, not the latent
    approx = hidden[p : p + n]
    assert rel(approx, parity_case["gpt_latent"][0]) > 1e-2

    # the same embeddings through UnifiedVoice's own trunk (torch) give the same logits
    torch = pytest.importorskip("torch")
    from fasttts_cli.nets.unified_voice import load_unified_voice

    uv = load_unified_voice(checkpoint_for(parity_case.weight_seed) / "gpt.pth", gcfg)
    x = torch.from_numpy(emb.astype(np.float32))[None]
    with torch.no_grad():
        uv_logits, _, _ = uv.trunk(x, torch.ones(1, x.shape[1], dtype=torch.long), logits_for="all")
    assert rel(uv_logits[0, p:].numpy(), parity_case["gpt_gen_logits"]) < TOL


@pytest.mark.parity
@pytest.mark.slow
def test_weight_only_error_estimate(parity_case: ParityCase, tmp_path: Path) -> None:
    """Per-channel W8A16 / W4A16 rounding of the GEMMs (emulated on the CPU): logits error vs fp32."""
    state, _, cfg, w = _convert(parity_case, tmp_path / "fp32")
    lay = tc.layout_from_state(state, n_conds=cfg["indextts2"]["n_conds"])
    conds = parity_case["gpt_conds_latent"][0]
    ids, pos = lay.generation_inputs(parity_case["gpt_text_ids"][0], parity_case["gpt_forced_codes"])
    emb = tc.emulate_inputs(
        ids, conds, pos, w["transformer.vocab_embedding.weight"], w["transformer.position_embedding.weight"]
    )
    p = parity_case["gpt_prefix_emb"].shape[1]
    ref = parity_case["gpt_gen_logits"]
    errs = {}
    for bits in (8, 4):
        q = {
            k: (tc.emulate_weight_only(v, bits) if k.endswith(tc._WEIGHT_ONLY_SUFFIXES) else v)
            for k, v in w.items()
        }
        _, logits = tc.reference_forward(q, cfg, emb)
        errs[bits] = rel(logits[p:, : ref.shape[1]], ref)
    print("emulated weight-only logits rel error:", errs)
    assert 0 < errs[8] < 0.02 and errs[8] < errs[4] < 0.3
