"""The torch backend on CPU tensors: static cache + SDPA trunk, sampling/beams vs the numpy runtime,
decode loop, latent pass, batched CFM and vocoder, graph bookkeeping. CUDA-only checks skip without CUDA."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fasttts_cli.backends.torch.graphs import GraphRunner, bucket, round_up, row_buckets  # noqa: E402
from fasttts_cli.backends.torch.s2mel import (  # noqa: E402
    S2MelSettings,
    TorchS2Mel,
    TorchVocoder,
    half_with_fp32_norms,
)
from fasttts_cli.backends.torch.static_cache import StaticKVCache, trunk_cached, trunk_full  # noqa: E402
from fasttts_cli.indextts2 import decode as dec  # noqa: E402
from fasttts_cli.indextts2.decode_torch import DecodeSettings, TorchGPT  # noqa: E402
from fasttts_cli.indextts2.sampling import LineDecoder, SamplingParams, history_mask, process_logits  # noqa: E402
from fasttts_cli.indextts2.sampling_torch import RowParams, process_scores  # noqa: E402
from fasttts_cli.nets.random_modules import random_bigvgan, random_s2mel, random_unified_voice  # noqa: E402

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(
    not CUDA, reason="CUDA graphs and half-precision GPU kernels need a CUDA device"
)
V = 8194


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def uv():
    m = random_unified_voice("tiny", 0)
    with torch.no_grad():  # peaky logits and a reachable stop token, so lines stop at different steps
        m.mel_head.weight.mul_(40)
        m.mel_head.bias[8193] += 21.0
    return m


class _TrunkSession:
    """uv.trunk behind the runtime's Session interface: the numpy GPTDecoder drives our reference model."""

    def __init__(self, uv) -> None:
        self.uv = uv

    def run(self, outputs, feeds):
        n = self.uv.cfg.layers
        past = tuple(
            (torch.from_numpy(feeds[f"past_key_{i}"]), torch.from_numpy(feeds[f"past_value_{i}"]))
            for i in range(n)
        )
        with torch.no_grad():
            lg, h, pres = self.uv.trunk(
                torch.from_numpy(feeds["inputs_embeds"]),
                torch.from_numpy(feeds["attention_mask"]),
                past,
                logits_for="last",
            )
        out = {"logits": lg.numpy(), "hidden": h.numpy()}
        for i, (k, v) in enumerate(pres):
            out[f"present_key_{i}"], out[f"present_value_{i}"] = k.numpy(), v.numpy()
        return out


def _host(uv) -> dec.HostEmbeddings:
    t = uv.host_tables()
    return dec.HostEmbeddings(
        *(t[k].numpy() for k in ("text_embedding", "text_pos", "mel_embedding", "mel_pos", "speed_emb"))
    )


def _prefixes(uv, lengths=(5, 9, 3), seed=0) -> list[np.ndarray]:
    emb, rng, d = _host(uv), np.random.default_rng(seed), uv.cfg.model_dim
    out = []
    for n in lengths:
        lat = (rng.standard_normal((uv.cfg.num_latents, d)) * 0.02).astype(np.float32)
        ev = (rng.standard_normal(d) * 0.02).astype(np.float32)
        out.append(emb.prefix(lat, ev, rng.integers(2, 50, size=n)))
    return out


# ------------------------------------------------------------------------------------ trunk + cache


def test_trunk_cached_equals_uv_trunk_prefill_and_steps(uv) -> None:
    g = torch.Generator().manual_seed(0)
    b, p, lens = 3, 7, [7, 4, 5]
    x = torch.randn(b, p, 64, generator=g)
    mask = torch.zeros(b, p, dtype=torch.long)
    for i, n in enumerate(lens):
        mask[i, p - n :] = 1
        x[i, : p - n] = 0
    ref_logits, ref_h, past = uv.trunk(x, mask, logits_for="all")
    cache = StaticKVCache.for_model(uv, 4, 32, dtype=torch.float32, device="cpu")
    cache.k.fill_(1e4)  # stale garbage in unused columns must not matter
    cache.valid[:b, :p] = mask.bool()
    logits, h = trunk_cached(uv, x, cache, torch.arange(p), p)
    for i, n in enumerate(lens):
        torch.testing.assert_close(h[i, p - n :], ref_h[i, p - n :], rtol=0, atol=2e-5)
    torch.testing.assert_close(logits, ref_logits[:, -1], rtol=0, atol=2e-5)
    assert torch.isfinite(h).all()  # left-padding queries attend to themselves instead of nothing
    for step in range(3):
        xs = torch.randn(b, 1, 64, generator=g)
        mask = torch.cat([mask, torch.ones(b, 1, dtype=torch.long)], 1)
        rl, rh, past = uv.trunk(xs, mask, past, logits_for="last")
        cache.valid[:b, p + step] = True
        lg, hs = trunk_cached(uv, xs, cache, torch.tensor([p + step]), 32)
        torch.testing.assert_close(lg, rl[:, 0], rtol=0, atol=2e-5)
        torch.testing.assert_close(hs, rh, rtol=0, atol=2e-5)


def test_trunk_full_equals_uv_trunk(uv) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 64, generator=g)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    _, ref_h, _ = uv.trunk(x, mask, logits_for="none")
    h = trunk_full(uv, x, mask.bool())
    torch.testing.assert_close(h[0, 2:], ref_h[0, 2:], rtol=0, atol=2e-5)
    torch.testing.assert_close(h[1], ref_h[1], rtol=0, atol=2e-5)


def test_select_rows_gathers_before_writing() -> None:
    c = StaticKVCache.allocate(1, 3, 1, 4, 1)
    c.k[0, :, 0, :, 0] = torch.tensor([[0.0, 1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23]])
    c.valid[:] = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
    c.select_rows(torch.tensor([2, 0, 0]), upto=2)
    assert c.k[0, :, 0, :2, 0].tolist() == [[20, 21], [0, 1], [0, 1]]
    assert c.k[0, 0, 0, 2:, 0].tolist() == [2, 3]  # columns past `upto` untouched
    assert c.valid[:, :2].tolist() == [[True, False], [True, True], [True, True]]


# ------------------------------------------------------------------------------------ processors


@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("do_sample", [True, False])
def test_process_scores_equal_numpy(beams: int, do_sample: bool) -> None:
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((4, V)) * 3).astype(np.float32)
    logits[1, :40] = 7.0  # ties at the top-k boundary survive
    hist = [[1, 8192, 5, 9], [1, 8192], [1, 8192, 3, *range(100, 140)], [1, 8192, 7]]
    seen = history_mask(hist, V)
    params = [
        SamplingParams(beams=beams, do_sample=do_sample),
        SamplingParams(beams=beams, do_sample=do_sample, top_k=5, top_p=0.95, temperature=1.3),
        SamplingParams(beams=beams, do_sample=do_sample, top_k=0, top_p=1.0, repetition_penalty=1.0),
        SamplingParams(beams=beams, do_sample=do_sample, top_k=1, top_p=0.2, repetition_penalty=2.0),
    ]
    rp = RowParams.build(params, 1, "cpu")
    got = process_scores(
        torch.from_numpy(logits), torch.from_numpy(seen), rp, beam_mode=beams > 1, do_sample=do_sample
    ).numpy()
    for r, p in enumerate(params):
        want = process_logits(logits[r : r + 1], seen[r : r + 1], p)[0]
        assert np.array_equal(np.isinf(got[r]), np.isinf(want)), f"row {r}: different tokens removed"
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[r][fin], want[fin], rtol=1e-6, atol=1e-6)
    assert np.isfinite(got).sum(axis=1)[3] == (2 if beams > 1 and do_sample else (1 if do_sample else V))


# ------------------------------------------------------------------------------------ decoding


def _numpy_reference(uv, prefixes, params, seeds):
    ref = dec.GPTDecoder(_TrunkSession(uv), _host(uv), layers=uv.cfg.layers, heads=uv.cfg.heads)
    return ref.generate(
        prefixes, [LineDecoder(p, np.random.default_rng(s)) for p, s in zip(params, seeds, strict=True)]
    )


@pytest.mark.parametrize(("beams", "do_sample"), [(1, True), (1, False), (3, True), (3, False)])
def test_generate_equals_numpy_runtime(uv, beams: int, do_sample: bool) -> None:
    prefixes = _prefixes(uv, (5, 9, 3, 4))
    params = [
        SamplingParams(beams=beams, do_sample=do_sample, max_tokens=25),
        SamplingParams(beams=beams, do_sample=do_sample, max_tokens=25, top_k=8, temperature=1.1),
        SamplingParams(beams=beams, do_sample=do_sample, max_tokens=12),
        SamplingParams(beams=beams, do_sample=do_sample, max_tokens=2),
    ]
    seeds = [11, 12, 13, 14]
    want = _numpy_reference(uv, prefixes, params, seeds)
    tg = TorchGPT(copy.deepcopy(uv), settings=DecodeSettings(max_lines=4))
    got = tg.generate(prefixes, params, [np.random.default_rng(s) for s in seeds])
    for w, g in zip(want, got, strict=True):
        assert np.array_equal(w.codes, g.codes)
        assert w.stopped == g.stopped
        if beams > 1:
            assert g.score == pytest.approx(w.score, rel=1e-5)
    assert {w.stopped for w in want} == {True, False}  # both endings exercised: stop token, max_tokens


def test_generate_batch_equals_single_and_seeds_matter(uv) -> None:
    prefixes = _prefixes(uv, (5, 9, 3, 6))
    tg = TorchGPT(copy.deepcopy(uv), settings=DecodeSettings(max_lines=4))
    for beams in (1, 3):
        p = SamplingParams(beams=beams, max_tokens=20, temperature=1.5, top_k=50, top_p=0.95)
        batch = tg.generate(prefixes, [p] * 4, [7, 8, 9, 10])
        for i in (0, 2):
            single = tg.generate([prefixes[i]], [p], [7 + i])[0]
            assert np.array_equal(single.codes, batch[i].codes)
        again = tg.generate(prefixes, [p] * 4, [7, 8, 9, 10])
        assert all(np.array_equal(a.codes, b.codes) for a, b in zip(batch, again, strict=True))
        other = tg.generate(prefixes, [p] * 4, [70, 80, 90, 100])
        assert any(not np.array_equal(a.codes, b.codes) for a, b in zip(batch, other, strict=True))


def test_generate_ignore_stop_forces_length_and_mixed_groups(uv) -> None:
    tg = TorchGPT(copy.deepcopy(uv), settings=DecodeSettings(max_lines=2))
    params = [
        SamplingParams(beams=1, max_tokens=17),
        SamplingParams(beams=3, max_tokens=9),
        SamplingParams(beams=1, max_tokens=11, do_sample=False),
    ]
    out = tg.generate(_prefixes(uv), params, [1, 2, 3], ignore_stop=True)
    assert [len(o.codes) for o in out] == [17, 9, 11]
    assert all(8193 not in o.codes and not o.stopped for o in out)


def test_forced_equals_uv_decode_forced(uv) -> None:
    prefix = _prefixes(uv, (6,))[0]
    codes = np.array([5, 99, 8000, 3, 3, 17], np.int64)
    ref = uv.decode_forced(_as_prefix(uv, prefix), torch.from_numpy(codes)[None])
    tg = TorchGPT(copy.deepcopy(uv))
    logits, hidden = tg.forced(prefix, codes)
    torch.testing.assert_close(logits, ref.logits[0], rtol=0, atol=5e-5)
    torch.testing.assert_close(hidden, ref.hidden[0], rtol=0, atol=2e-5)


def _as_prefix(uv, prefix: np.ndarray):
    from fasttts_cli.nets.unified_voice import Prefix

    x = torch.from_numpy(prefix)[None]
    mask = torch.ones(1, x.shape[1], dtype=torch.long)
    return Prefix(x, mask, mask.sum(1))


def test_latents_equal_uv_latent_batched(uv) -> None:
    rng = np.random.default_rng(3)
    d = uv.cfg.model_dim
    lat = torch.from_numpy((rng.standard_normal((2, uv.cfg.num_latents, d)) * 0.02).astype(np.float32))
    ev = torch.from_numpy((rng.standard_normal((2, d)) * 0.02).astype(np.float32))
    ids = [rng.integers(2, 50, size=7), rng.integers(2, 50, size=4)]
    codes = [rng.integers(0, 8192, size=9), rng.integers(0, 8192, size=5)]
    emb = _host(uv)
    prefixes = [emb.prefix(lat[i].numpy(), ev[i].numpy(), ids[i]) for i in range(2)]
    tg = TorchGPT(copy.deepcopy(uv))
    got = tg.latents(prefixes, codes)
    for i in range(2):
        want = uv.latent(
            lat[i : i + 1], ev[i : i + 1], torch.from_numpy(ids[i])[None], torch.from_numpy(codes[i])[None]
        )
        torch.testing.assert_close(got[i], want[0], rtol=0, atol=2e-5)


# ------------------------------------------------------------------------------------ s2mel + vocoder


@pytest.fixture(scope="module")
def s2mel():
    return random_s2mel("tiny", 1)


def _cfm_inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x_lens, p_lens = torch.tensor([50, 41, 22]), torch.tensor([20, 15, 10])
    mu = torch.randn(3, 50, 32, generator=g)
    for i in range(3):
        mu[i, x_lens[i] :] = 0
    return (
        mu,
        x_lens,
        torch.randn(3, 80, 20, generator=g),
        p_lens,
        torch.randn(3, 192, generator=g),
        torch.randn(3, 80, 50, generator=g),
    )


def test_cfm_equals_build_solve_per_row(s2mel) -> None:
    # the reference: the build module's solve on each row alone (the original runs one row at a time)
    mu, x_lens, prompt, p_lens, style, z = _cfm_inputs()
    ts = TorchS2Mel(copy.deepcopy(s2mel), settings=S2MelSettings(frames_step=64))  # row 2 < half the bucket
    out = ts.cfm(mu, x_lens, prompt, p_lens, style, z, steps=4)
    for i in range(3):
        n = int(x_lens[i])
        r = slice(i, i + 1)
        ref, _ = s2mel.cfm.solve(mu[r, :n], x_lens[r], prompt[r], p_lens[r], style[r], z[r, :, :n], n_steps=4)
        torch.testing.assert_close(out[i, :, :n], ref[0], rtol=0, atol=1e-5)
        assert float(out[i, :, : int(p_lens[i])].abs().max()) == 0.0  # prompt region stays zero


def test_cfm_bf16_autocast_close_and_norms_fp32(s2mel) -> None:
    mu, x_lens, prompt, p_lens, style, z = _cfm_inputs(1)
    ref = TorchS2Mel(copy.deepcopy(s2mel)).cfm(mu, x_lens, prompt, p_lens, style, z, steps=4)
    tb = TorchS2Mel(copy.deepcopy(s2mel), dtype=torch.bfloat16)
    out = tb.cfm(mu, x_lens, prompt, p_lens, style, z, steps=4)
    assert tb.estimator.transformer.norm.norm.weight.dtype == torch.float32
    assert tb.estimator.transformer.layers[0].attention.wqkv.weight.dtype == torch.bfloat16
    for i in range(3):
        n = int(x_lens[i])
        rel = float((out[i, :, :n] - ref[i, :, :n]).norm() / ref[i, :, :n].norm())
        assert 0 < rel < 5e-3


def test_half_with_fp32_norms_casts_inputs() -> None:
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    half_with_fp32_norms(m, torch.bfloat16)
    assert m[0].weight.dtype == torch.bfloat16 and m[1].weight.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(torch.randn(2, 4))
    assert y.dtype == torch.float32


def test_vocoder_rows_equal_bigvgan_alone() -> None:
    v = random_bigvgan("tiny")
    tv = TorchVocoder(copy.deepcopy(v), settings=S2MelSettings(vocoder_frames_step=16))
    g = torch.Generator().manual_seed(2)
    mels = [torch.randn(80, n, generator=g) for n in (10, 7, 3)]
    wavs = tv(mels)
    for m, w in zip(mels, wavs, strict=True):
        ref = v(m[None])[0, 0]
        assert w.shape == ref.shape == (m.shape[1] * v.cfg.hop,)
        torch.testing.assert_close(w, ref, rtol=0, atol=1e-5)


# ------------------------------------------------------------------------------------ graphs, presets


def test_buckets() -> None:
    assert row_buckets(16) == (1, 2, 3, 4, 6, 8, 12, 16, 24, 48)
    assert row_buckets(16, (1,)) == (1, 2, 4, 8, 16)
    assert bucket(5, row_buckets(16)) == 6 and bucket(1, (1, 2)) == 1
    with pytest.raises(ValueError):
        bucket(49, row_buckets(16))
    assert round_up(257, 256) == 512 and round_up(256, 256) == 256 and round_up(700, 256, 600) == 600


def test_graph_runner_eager_fallback_on_cpu() -> None:
    r = GraphRunner(enabled=True)
    calls = []
    r.run("k", lambda: calls.append(1))
    r.run("k", lambda: calls.append(1))
    assert calls == [1, 1] and (r.enabled is CUDA)


def test_graph_runner_for_device_follows_use_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    # None: graphs on CUDA only; an explicit setting wins on any device (all three stage drivers use this)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("FASTTTS_TORCH_GRAPHS", raising=False)
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert GraphRunner.for_device(None, cuda).enabled and not GraphRunner.for_device(None, cpu).enabled
    assert not GraphRunner.for_device(False, cuda).enabled and GraphRunner.for_device(True, cpu).enabled


def test_presets_and_precision_mapping() -> None:
    import dataclasses

    from fasttts_cli.errors import UsageError
    from fasttts_cli.indextts2.engine_torch import check_torch_preset, precision_dtype
    from fasttts_cli.spec.presets import ComponentSpec, load_preset

    for name, dt in (("gpu-torch-fp16", torch.float16), ("gpu-torch-bf16", torch.bfloat16)):
        p = load_preset(name)
        check_torch_preset(p)
        assert precision_dtype(p, "gpt") == dt and precision_dtype(p, "dit") == dt
        assert precision_dtype(p, "vocoder") == torch.float32
    with pytest.raises(UsageError, match="not on the torch backend"):
        check_torch_preset(load_preset("cpu-fp32"))
    with pytest.raises(UsageError, match="cache_level"):
        check_torch_preset(p.with_run_keys(s2mel={"cache_level": "T2"}))
    bad = dataclasses.replace(p, components={"gpt": ComponentSpec("torch", "int8")})
    with pytest.raises(UsageError, match="int8"):
        precision_dtype(bad, "gpt")


# ------------------------------------------------------------------------------------ CUDA only


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_decode_equals_eager(uv) -> None:
    prefixes = _prefixes(uv, (5, 9, 3, 6))
    p = SamplingParams(beams=3, max_tokens=30)
    eager = TorchGPT(copy.deepcopy(uv), device="cuda", settings=DecodeSettings(max_lines=4, use_graphs=False))
    graph = TorchGPT(copy.deepcopy(uv), device="cuda", settings=DecodeSettings(max_lines=4, use_graphs=True))
    a = eager.generate(prefixes, [p] * 4, [1, 2, 3, 4])
    b = graph.generate(prefixes, [p] * 4, [1, 2, 3, 4])
    assert graph.graphs.captures > 0
    assert all(np.array_equal(x.codes, y.codes) for x, y in zip(a, b, strict=True))


@pytest.mark.gpu
@needs_cuda
def test_cuda_fp16_forced_close_to_fp32(uv) -> None:
    prefix, codes = _prefixes(uv, (6,))[0], np.arange(10, 30)
    _, h32 = TorchGPT(copy.deepcopy(uv), device="cuda").forced(prefix, codes)
    _, h16 = TorchGPT(copy.deepcopy(uv), dtype=torch.float16, device="cuda").forced(prefix, codes)
    assert float((h16 - h32).norm() / h32.norm()) < 5e-3


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_cfm_and_vocoder_equal_eager(s2mel) -> None:
    inputs = [t.cuda() for t in _cfm_inputs(2)]
    a = TorchS2Mel(copy.deepcopy(s2mel), device="cuda", settings=S2MelSettings(use_graphs=False)).cfm(
        *inputs, steps=4
    )
    b = TorchS2Mel(copy.deepcopy(s2mel), device="cuda", settings=S2MelSettings(use_graphs=True)).cfm(
        *inputs, steps=4
    )
    torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    v = random_bigvgan("tiny")
    mels = [torch.randn(80, n, device="cuda") for n in (10, 7)]
    wa = TorchVocoder(copy.deepcopy(v), device="cuda", settings=S2MelSettings(use_graphs=False))(mels)
    wb = TorchVocoder(copy.deepcopy(v), device="cuda", settings=S2MelSettings(use_graphs=True))(mels)
    for x, y in zip(wa, wb, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-5)
