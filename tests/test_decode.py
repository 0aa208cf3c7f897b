"""Batched AR decoding and the latent pass over the exported GPT trunk (ONNX Runtime + host tables)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.backends.onnxruntime.session import OrtSession, SessionOptions
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2.sampling import LineDecoder, SamplingParams
from tests.parity import ParityCase, checkpoint_for, load_cases, parity_dir, rel

torch = pytest.importorskip("torch")


@dataclass
class Trunk:
    decoder: dec.GPTDecoder
    uv: object


_TRUNKS: dict[str, Trunk] = {}


def _trunk_for(ckpt: Path, folder: Path) -> Trunk:
    """Export the trunk of `ckpt`'s gpt.pth once per test session and open it with the host tables."""
    key = str(ckpt)
    if key not in _TRUNKS:
        import yaml

        from fasttts_cli.build.export import export_graph, gpt_host_tables, trunk_spec
        from fasttts_cli.nets.unified_voice import load_unified_voice

        torch.set_num_threads(1)
        cfg = yaml.safe_load((ckpt / "config.yaml").read_text())
        uv = load_unified_voice(ckpt / "gpt.pth", cfg["gpt"])
        folder.mkdir(parents=True, exist_ok=True)
        path = export_graph(trunk_spec(uv), folder)  # verified against PyTorch inside
        for name, arr in gpt_host_tables(uv).items():
            np.save(folder / name, arr)
        c = uv.cfg
        tokens = dec.GPTTokens(c.start_text_token, c.stop_text_token, c.start_mel_token, c.stop_mel_token)
        emb = dec.HostEmbeddings.load(folder, tokens)
        sess = OrtSession(path, SessionOptions(threads=1))
        _TRUNKS[key] = Trunk(dec.GPTDecoder(sess, emb, layers=c.layers, heads=c.heads, chunk=40), uv)
    return _TRUNKS[key]


@pytest.fixture
def parity_trunk(parity_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Trunk:
    return _trunk_for(parity_checkpoint, tmp_path_factory.mktemp("trunk"))


@pytest.fixture(scope="module")
def trunk(tmp_path_factory: pytest.TempPathFactory) -> Trunk:
    """A trunk for the non-parity tests (the first parity set's checkpoint)."""
    cases = load_cases() if parity_dir().is_dir() else []
    if not cases:
        pytest.skip(f"no parity vectors in {parity_dir()}")
    return _trunk_for(checkpoint_for(cases[0].weight_seed), tmp_path_factory.mktemp("trunk"))


# ----------------------------------------------------------------------------------------- parity


@pytest.mark.parity
def test_parity_prefix_from_host_tables(parity_case: ParityCase, parity_trunk: Trunk) -> None:
    """Stage 3.4 through the engine's .npy tables."""
    emb = parity_trunk.decoder.emb
    p = emb.prefix(parity_case["spk_latents"][0], parity_case["emovec"][0], parity_case["gpt_text_ids"][0])
    assert rel(p[None], parity_case["gpt_prefix_emb"]) < 1e-4


@pytest.mark.parity
def test_parity_generation_logits(parity_case: ParityCase, parity_trunk: Trunk) -> None:
    """Stage 3.5: teacher-forced generation path (start at mel position 0, code k at k + 2)."""
    d = parity_trunk.decoder
    prefix = parity_case["gpt_prefix_emb"][0]
    logits, hidden = d.forced(prefix, parity_case["gpt_forced_codes"])
    assert rel(logits, parity_case["gpt_gen_logits"]) < 1e-4
    assert rel(hidden, parity_case["gpt_gen_hidden"]) < 1e-4
    x, mask = d._prefill_inputs([prefix])
    _, h, _ = d.forward(x, mask, keep_hidden=True)
    assert rel(h[0], parity_case["gpt_prefill_hidden"]) < 1e-4


@pytest.mark.parity
def test_parity_latent(parity_case: ParityCase, parity_trunk: Trunk) -> None:
    """Stage 3.7: teacher-forced second pass, positions 0..n+1, hidden at [start, c_0 .. c_{n-2}]."""
    d = parity_trunk.decoder
    prefix = d.emb.prefix(
        parity_case["spk_latents"][0], parity_case["emovec"][0], parity_case["gpt_text_ids"][0]
    )
    (lat,) = d.latents([prefix], [parity_case["gpt_forced_codes"]])
    assert rel(lat[None], parity_case["gpt_latent"]) < 1e-4


# ----------------------------------------------------------------------------------------- batching


def _prefixes(t: Trunk, lengths: list[int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    emb = t.decoder.emb
    n_lat = t.uv.cfg.num_latents
    vocab = emb.text_embedding.shape[0]
    out = []
    for n in lengths:
        lat = rng.normal(size=(n_lat, emb.model_dim)).astype(np.float32)
        emo = rng.normal(size=emb.model_dim).astype(np.float32) * 0.3
        out.append(emb.prefix(lat, emo, rng.integers(2, vocab, size=n)))
    return out


def test_kv_cache_matches_full_recompute(trunk: Trunk) -> None:
    d = trunk.decoder
    (prefix,) = _prefixes(trunk, [9])
    codes = np.array([5, 77, 4000, 5, 8000])
    cached, _ = d.forced(prefix, codes)
    start = d.emb.mel(np.array([d.emb.tokens.start_mel]), np.array([0]))
    for k in range(codes.size + 1):
        mel = d.emb.mel(codes[:k], np.arange(k) + 2)
        x = np.concatenate([prefix, start, mel])[None]
        full, _, _ = d.trunk(x, np.ones((1, x.shape[1]), dtype=np.int64))
        assert rel(cached[k], full[0]) < 1e-5, k


def test_chunked_forward_equals_one_call(trunk: Trunk) -> None:
    d = trunk.decoder
    (prefix,) = _prefixes(trunk, [60])  # 60 + 36 rows > chunk 40
    x, mask = d._prefill_inputs([prefix])
    one_logits, one_h, _ = d.trunk(x, mask)
    logits, h, kv = d.forward(x, mask, keep_hidden=True)
    assert rel(logits, one_logits) < 1e-5 and rel(h, one_h) < 1e-5
    assert kv[0].shape[2] == x.shape[1]


def test_batched_greedy_equals_one_by_one(trunk: Trunk) -> None:
    d = trunk.decoder
    prefixes = _prefixes(trunk, [3, 11, 6])
    p = SamplingParams.greedy(max_tokens=10)
    batch = d.generate_codes(prefixes, p, [None] * 3)
    for pre, got in zip(prefixes, batch, strict=True):
        (alone,) = d.generate_codes([pre], p, [None])
        assert got.codes.tolist() == alone.codes.tolist()
        assert len(got.codes) == 10 and not got.stopped


@pytest.mark.parametrize("beams", [1, 3])
def test_sampling_per_line_seed_independent_of_batch(trunk: Trunk, beams: int) -> None:
    d = trunk.decoder
    prefixes = _prefixes(trunk, [4, 12, 7], seed=1)
    p = SamplingParams(beams=beams, max_tokens=8)
    seeds = [11, 22, 33]
    batch = d.generate_codes(prefixes, p, seeds)
    for i in (0, 2):
        (alone,) = d.generate_codes([prefixes[i]], p, [seeds[i]])
        assert batch[i].codes.tolist() == alone.codes.tolist()
    # the seed matters
    (other,) = d.generate_codes([prefixes[0]], p, [12])
    assert other.codes.tolist() != batch[0].codes.tolist()


def test_batched_latents_equal_alone(trunk: Trunk) -> None:
    d = trunk.decoder
    prefixes = _prefixes(trunk, [5, 14], seed=2)
    codes = [np.array([1, 2, 3, 4, 5, 6, 7]), np.array([100, 200, 300])]
    batch = d.latents(prefixes, codes)
    for pre, c, got in zip(prefixes, codes, batch, strict=True):
        (alone,) = d.latents([pre], [c])
        assert got.shape == (c.size, d.emb.model_dim)
        assert rel(got, alone) < 1e-5


# ----------------------------------------------------------------------------------------- loop logic


class _ScriptedTrunk:
    """A fake Session: logits depend only on the row's last input embedding (its value at column 0 is
    the code fed, via a one-hot-ish mel table), so the loop's bookkeeping can be checked exactly."""

    def __init__(self, layers: int, script: dict[int, int], vocab: int = 8194) -> None:
        self.layers, self.script, self.vocab = layers, script, vocab
        self.inputs: list = []
        self.outputs: list = []

    def run(self, outputs, feeds):
        x = feeds[dec.INPUTS_EMBEDS]
        b, t, _ = x.shape
        last = np.rint(x[:, -1, 0]).astype(int)
        logits = np.zeros((b, 1, self.vocab), dtype=np.float32)
        for r in range(b):
            logits[r, 0, self.script.get(int(last[r]), 7)] = 10.0
        out = {dec.LOGITS: logits, dec.HIDDEN: x.copy()}
        for name_p, name_n in zip(dec.past_names(self.layers), dec.present_names(self.layers), strict=True):
            past = feeds[name_p]
            new = np.zeros((b, past.shape[1], t, past.shape[3]), dtype=np.float32)
            out[name_n] = np.concatenate([past, new], axis=2)
        return {k: out[k] for k in outputs}


def _scripted_decoder(script: dict[int, int]) -> dec.GPTDecoder:
    d, v = 4, 8194
    mel = np.zeros((v, d), dtype=np.float32)
    mel[:, 0] = np.arange(v)  # column 0 carries the code id
    emb = dec.HostEmbeddings(
        text_embedding=np.zeros((10, d), np.float32),
        text_pos=np.zeros((20, d), np.float32),
        mel_embedding=mel,
        mel_pos=np.zeros((40, d), np.float32),
        speed=np.zeros((2, d), np.float32),
    )
    return dec.GPTDecoder(_ScriptedTrunk(2, script), emb, layers=2, heads=1)


def test_per_row_stop_and_max_tokens() -> None:
    # start(8192) -> 10 -> 11 -> stop; line 1 is cut after one code and leaves the batch first
    d = _scripted_decoder({8192: 10, 10: 11, 11: 8193})
    a = np.zeros((3, 4), np.float32)
    res = d.generate(
        [a, a[:1]],
        [LineDecoder(SamplingParams.greedy(6, 1.0)), LineDecoder(SamplingParams.greedy(1, 1.0))],
    )
    assert res[0].codes.tolist() == [10, 11] and res[0].stopped
    assert res[1].codes.tolist() == [10] and not res[1].stopped


def test_max_tokens_cuts_line_and_rejects_too_many() -> None:
    d = _scripted_decoder({8192: 7})
    (r,) = d.generate([np.zeros((2, 4), np.float32)], [LineDecoder(SamplingParams.greedy(5, 1.0))])
    assert r.codes.tolist() == [7] * 5 and not r.stopped
    with pytest.raises(ValueError, match="mel positions"):
        d.generate([np.zeros((2, 4), np.float32)], [LineDecoder(SamplingParams.greedy(39, 1.0))])


@pytest.mark.parametrize("idx", [[0, 1, 2], [1, 0, 0], [2, 2, 1], [2, 0], [1]])
def test_reorder_kv_rows(idx: list[int]) -> None:
    rng = np.random.default_rng(0)
    kv = [rng.normal(size=(3, 2, 4, 5)).astype(np.float32) for _ in range(4)]
    want = [a[idx].copy() for a in kv]
    mask = np.arange(3 * 6).reshape(3, 6)
    frozen = [a.copy() for a in kv]
    frozen[1].flags.writeable = False  # read-only buffers must take the copying path
    for arrays in (kv, frozen):
        got, m = dec._reorder(arrays, mask, np.asarray(idx))
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
        assert np.array_equal(m, mask[idx])


# ----------------------------------------------------------------------------------------- sessions


def test_ort_session_interface(trunk: Trunk, monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttts_cli.backends.onnxruntime.session import Session, open_session
    from fasttts_cli.errors import MissingDependencyError

    sess = trunk.decoder.session
    assert isinstance(sess, Session)
    names = {i.name for i in sess.inputs}
    assert {dec.INPUTS_EMBEDS, dec.ATTENTION_MASK, *dec.past_names(trunk.uv.cfg.layers)} == names
    emb_info = next(i for i in sess.inputs if i.name == dec.INPUTS_EMBEDS)
    assert emb_info.dtype == "float32" and emb_info.shape[-1] == trunk.uv.cfg.model_dim
    d = trunk.decoder
    x = np.zeros((1, 2, d.emb.model_dim), np.float64)  # cast to the graph's float32
    feeds = {dec.INPUTS_EMBEDS: x, dec.ATTENTION_MASK: np.ones((1, 2), np.int32)}
    feeds.update(zip(dec.past_names(d.layers), d.empty_kv(1), strict=True))
    out = sess.run([dec.LOGITS], feeds)
    assert list(out) == [dec.LOGITS] and out[dec.LOGITS].shape == (1, 1, d.emb.mel_embedding.shape[0])
    with pytest.raises(ValueError, match="missing inputs"):
        sess.run(None, {dec.INPUTS_EMBEDS: x})
    monkeypatch.setenv("FASTTTS_THREADS", "3")
    assert SessionOptions().resolved_threads() == 3 and SessionOptions(threads=1).resolved_threads() == 1
    # unset: an explicit count (never onnxruntime's 0, which pins threads), the CPUs we may use
    monkeypatch.delenv("FASTTTS_THREADS")
    assert SessionOptions().resolved_threads() == len(os.sched_getaffinity(0))
    with pytest.raises(MissingDependencyError, match="torch"):
        open_session("x.onnx", "torch")


def test_finished_long_line_frees_its_padding(trunk: Trunk) -> None:
    """A long-prefix line that stops first leaves left padding nobody attends to; trimming it keeps the
    other lines' codes exactly as when they run alone."""
    d = trunk.decoder
    prefixes = _prefixes(trunk, [40, 2, 5], seed=3)
    params = [SamplingParams.greedy(2), SamplingParams.greedy(7), SamplingParams.greedy(7)]
    batch = d.generate(prefixes, [LineDecoder(p) for p in params])
    for pre, p, got in zip(prefixes, params, batch, strict=True):
        (alone,) = d.generate([pre], [LineDecoder(p)])
        assert got.codes.tolist() == alone.codes.tolist()
    kv = [np.zeros((2, 1, 12, 3), np.float32)]
    mask = np.zeros((2, 12), np.int64)
    mask[0, 9:] = mask[1, 10:] = 1
    kv2, m2 = dec._trim_left_padding(kv, mask)
    assert m2.shape == (2, 3) and kv2[0].shape == (2, 1, 3, 3) and m2[0].all()


def test_decode_options_from_preset() -> None:
    from fasttts_cli.spec.presets import load_preset

    p = SamplingParams.from_options(load_preset("cpu-fp32").decode)
    assert (p.beams, p.top_k, p.top_p, p.temperature, p.repetition_penalty) == (3, 30, 0.8, 0.8, 10.0)
    assert p.min_tokens_to_keep == 2 and SamplingParams(beams=1).min_tokens_to_keep == 1
