"""The in-place trunk (build/gqa_trunk.py, ONNX Runtime's GroupQueryAttention) and its decoder
(decode_inplace.py) give what the classic trunk and `GPTDecoder` give on the same tiny weights: the same
sampled codes (1 and 3 beams, lines finishing at different steps, the cache growing past its first
capacity), the same latents (whole and chunked) and the same teacher-forced path; the buffers are
really written in place."""

from __future__ import annotations

import numpy as np
import pytest

from fasttts_cli.indextts2.decode_inplace import KVBuffers
from fasttts_cli.indextts2.sampling import LineDecoder, SamplingParams
from tests.tiny_trunks import TinyTrunks, tiny_trunks


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> TinyTrunks:
    return tiny_trunks(tmp_path_factory.mktemp("inplace"))


def test_trunk_uses_the_fused_ops(pair: TinyTrunks) -> None:
    """One node per fused chain: packed QKV into the attention (no Slice), FastGelu with the c_fc bias,
    SkipLayerNormalization for bias + residual + LayerNorm (two per block); the float graph keeps only
    the c_attn and head bias Adds, which the weight-only quantizer folds into MatMulNBits."""
    onnx = pytest.importorskip("onnx")
    from fasttts_cli.build.quantize import count_ops

    ops = count_ops(onnx.load(str(pair.graph)))
    layers = pair.inplace.layers
    assert ops["GroupQueryAttention"] == ops["FastGelu"] == layers
    assert ops["SkipLayerNormalization"] == 2 * layers
    assert ops["LayerNormalization"] == 2  # the first block's ln_1 and final_norm
    assert "Slice" not in ops and "Tanh" not in ops
    assert ops["Add"] <= layers + 2


def _prefixes(p: TinyTrunks, lens: list[int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    d = p.emb.model_dim
    return [
        p.emb.prefix(
            rng.normal(size=(p.n_latents, d)).astype(np.float32),
            (0.3 * rng.normal(size=d)).astype(np.float32),
            rng.integers(2, p.emb.text_embedding.shape[0], size=n),
        )
        for n in lens
    ]


@pytest.mark.parametrize("beams", [1, 3])
def test_sampled_codes_equal_the_classic_decoder(pair: TinyTrunks, beams: int) -> None:
    prefixes = _prefixes(pair, [5, 17, 9, 2])
    params = [
        SamplingParams(beams=beams, top_k=30, top_p=0.8, temperature=0.8, max_tokens=m)
        for m in (20, 35, 7, 28)
    ]
    want = pair.classic.generate(prefixes, [LineDecoder(q, 100 + i) for i, q in enumerate(params)])
    got = pair.inplace.generate(prefixes, [LineDecoder(q, 100 + i) for i, q in enumerate(params)])
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g.codes, w.codes)
    assert len({w.codes.size for w in want}) > 1  # lines left the batch at different steps


def test_latents_and_forced_path_equal_the_classic_decoder(pair: TinyTrunks) -> None:
    prefixes = _prefixes(pair, [4, 12, 8], seed=1)
    rng = np.random.default_rng(2)
    codes = [rng.integers(0, 8000, size=n) for n in (30, 3, 17)]
    want = pair.classic.latents(prefixes, codes)
    for chunk in (256, 7):  # one call per line, and chunks after a past
        pair.inplace.chunk = chunk
        got = pair.inplace.latents(prefixes, codes)
        for w, g in zip(want, got, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    pair.inplace.chunk = 256
    wl, wh = pair.classic.forced(prefixes[1], codes[0])
    gl, gh = pair.inplace.forced(prefixes[1], codes[0])
    np.testing.assert_allclose(gl, wl, rtol=0, atol=1e-4)
    np.testing.assert_allclose(gh, wh, rtol=0, atol=1e-5)


def test_cache_is_written_in_place_and_grows(pair: TinyTrunks) -> None:
    d = pair.inplace
    kv = KVBuffers(2, d.layers, d.heads, d.head_dim, 4)
    x = np.random.default_rng(3).normal(size=(2, 3, pair.emb.model_dim)).astype(np.float32)
    first = kv.arrays[0]
    d.trunk(x, kv, np.array([3, 2]), np.array([2, 1]))
    assert kv.arrays[0] is first and np.abs(first[0, :, :3]).max() > 0  # written where it lies
    assert kv.lens.tolist() == [3, 2]
    one = np.ones(2, np.int64)
    for _ in range(3):
        d.trunk(x[:, :1], kv, one, 0 * one)
    assert kv.capacity == 8 and kv.lens.tolist() == [6, 5]
    np.testing.assert_array_equal(kv.arrays[0][0, :, :3], first[0, :, :3])  # kept across the growth
    rows = [kv.arrays[1][r, :, :6].copy() for r in (0, 1)]
    kv.select(np.array([1, 0]))  # a swap: through a copy
    assert kv.lens.tolist() == [5, 6]
    np.testing.assert_array_equal(kv.arrays[1][0, :, :5], rows[1][:, :5])
    np.testing.assert_array_equal(kv.arrays[1][1, :, :6], rows[0])
    kv.same[0, 1] = kv.same[1, 0] = 2  # columns both rows hold identically are not copied
    kv.arrays[1][1, :, :2] = -7.0
    kv.select(np.array([1, 1]))  # straight from the source row
    assert kv.lens.tolist() == [6, 6]
    np.testing.assert_array_equal(kv.arrays[1][0, :, 2:6], rows[0][:, 2:6])
    assert not (kv.arrays[1][0, :, :2] == -7.0).any()


def test_binding_is_reused_until_the_arrays_change(pair: TinyTrunks) -> None:
    """Each step rebinds only its small inputs; the cache arrays are bound again only when they are
    replaced (growth, rows leaving), and a step after that sees the new arrays."""
    d = pair.inplace
    kv = KVBuffers(2, d.layers, d.heads, d.head_dim, 4)
    x = np.random.default_rng(5).normal(size=(2, 3, pair.emb.model_dim)).astype(np.float32)
    one = np.ones(2, np.int64)
    d.trunk(x, kv, np.array([3, 3]), np.array([2, 2]))
    first = kv.binding
    assert first is not None and first.holds(kv.arrays)
    d.trunk(x[:, :1], kv, one, 0 * one)  # 4 columns: still fits
    assert kv.binding is first
    kv.select(np.array([1, 1]))  # rows change in place: same arrays, same binding
    d.trunk(x[:, :1], kv, one, 0 * one)  # 5 columns: the cache grows
    assert kv.binding is not first and kv.binding.holds(kv.arrays) and kv.capacity == 8
    # the step after the growth wrote into the new arrays, where the graph reads them next
    assert np.abs(kv.arrays[0][:, :, 4]).max() > 0
    kv.select(np.array([0]))  # a row leaves: new arrays, bound at the next step
    logits, _ = d.trunk(x[:1, :1], kv, one[:1], 0 * one[:1])
    assert kv.binding.holds(kv.arrays) and logits.shape[0] == 1


def test_reorder_copies_only_after_the_last_common_ancestor(pair: TinyTrunks) -> None:
    """A row that takes another's history copies only the columns written since they last held the
    same values (by construction: a copy), not the whole generated part."""
    d = pair.inplace
    kv = KVBuffers(3, d.layers, d.heads, d.head_dim, 16)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(3, 3, pair.emb.model_dim)).astype(np.float32)
    one = np.ones(3, np.int64)
    d.trunk(x, kv, np.array([3, 3, 3]), np.array([2, 2, 2]))
    kv.select(np.array([0, 0, 0]))  # every beam starts from row 0's history
    np.testing.assert_array_equal(kv.arrays[0][1, :, :3], kv.arrays[0][0, :, :3])
    assert kv.same[1, 0] == 3
    d.trunk(rng.normal(size=(3, 1, pair.emb.model_dim)).astype(np.float32), kv, one, 0 * one)
    assert kv.same[1, 0] == 3 and kv.lens.tolist() == [4, 4, 4]  # column 3 was each row's own
    kv.arrays[0][1, :, 1] = -7.0  # a marker where rows 0 and 1 already agree
    kv.select(np.array([0, 0, 2]))  # row 1 takes row 0's history: only column 3 moves
    np.testing.assert_array_equal(kv.arrays[0][1, :, 3], kv.arrays[0][0, :, 3])
    assert (kv.arrays[0][1, :, 1] == -7.0).all()
    assert kv.same[1, 0] == 4 and kv.same[2, 0] == 3
