from __future__ import annotations

import numpy as np
import pytest

from fasttts_cli.indextts2.sampling import (
    LineDecoder,
    SamplingParams,
    apply_top_k,
    apply_top_p,
    history_mask,
    process_logits,
)
from tests.parity import ParityCase, rel

V = 8194
EOS = 8193


def _check_scores(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    inf_ours, inf_ref = np.isneginf(ours), np.isneginf(ref)
    bad_rows = sorted(set(np.nonzero(inf_ours != inf_ref)[0].tolist()))
    assert not bad_rows, f"{what}: -inf positions differ in rows {bad_rows}"
    fin = ~inf_ref
    assert np.isfinite(ref[fin]).all()
    assert rel(ours[fin], ref[fin]) < 1e-4, what


@pytest.mark.parity
def test_parity_logits_processors(parity_case: ParityCase) -> None:
    """Stage 3.6: row k sees the dummy ids + start token + forced codes c_0..c_{k-1}."""
    logits = parity_case["gpt_gen_logits"]
    prefix = parity_case["gpt_gen_input_ids"][0].tolist()
    codes = parity_case["gpt_forced_codes"].tolist()
    seen = history_mask([prefix + codes[:k] for k in range(logits.shape[0])], logits.shape[1])
    beam = process_logits(logits, seen, SamplingParams(beams=3))
    sample = process_logits(logits, seen, SamplingParams(beams=1))
    _check_scores(beam, parity_case["gpt_proc_beam_scores"], "beam scores")
    _check_scores(sample, parity_case["gpt_proc_sample_scores"], "sample scores")


def test_repetition_penalty_sign_rule_and_prefix_ids() -> None:
    logits = np.array([[2.0, -2.0, 1.0, -1.0]], dtype=np.float32)
    seen = history_mask([[0, 1]], 4)
    out = process_logits(logits, seen, SamplingParams(beams=1, do_sample=False, repetition_penalty=10))
    np.testing.assert_allclose(out, [[0.2, -20.0, 1.0, -1.0]], rtol=1e-6)


def test_top_k_keeps_ties_and_min_keep() -> None:
    s = np.array([[3.0, 1.0, 2.0, 2.0, 0.0]], dtype=np.float32)
    assert np.isfinite(apply_top_k(s, 2)).sum() == 3  # the tie at the k-th value survives
    assert np.isfinite(apply_top_k(s[:, :2], 1, min_tokens_to_keep=2)).sum() == 2
    assert np.isfinite(apply_top_k(s[:, :2], 1)).sum() == 1


def test_top_p_cut() -> None:
    s = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], dtype=np.float32))
    kept = np.isfinite(apply_top_p(s, 0.8))[0]
    # cumulative from the low end: .05, .20 (<= .2 removed), .50 -> tokens 0,1 kept
    assert kept.tolist() == [True, True, False, False]
    kept2 = np.isfinite(apply_top_p(s, 0.01, min_tokens_to_keep=2))[0]
    assert kept2.tolist() == [True, True, False, False]


def _toy_logits(rng: np.random.Generator, rows: int) -> np.ndarray:
    x = rng.normal(size=(rows, V)).astype(np.float32) * 3
    x[:, EOS] = -5
    return x


def _run(params: SamplingParams, seed: int, steps_logits: list[np.ndarray]) -> LineDecoder:
    dec = LineDecoder(params, seed)
    for lg in steps_logits:
        if dec.done:
            break
        dec.step(lg[: dec.rows])
    return dec


@pytest.mark.parametrize("beams", [1, 3])
def test_sampling_deterministic_per_seed(beams: int) -> None:
    rng = np.random.default_rng(5)
    steps = [_toy_logits(rng, 3) for _ in range(12)]
    p = SamplingParams(beams=beams, max_tokens=12)
    a = _run(p, 123, steps)
    b = _run(p, 123, steps)
    c = _run(p, 124, steps)
    assert a.done and b.done
    np.testing.assert_array_equal(a.result().codes, b.result().codes)
    assert not np.array_equal(a.result().codes, c.result().codes)
    assert len(a.result().codes) == 12 and not a.result().stopped


def test_sampling_draws_only_kept_tokens() -> None:
    rng = np.random.default_rng(0)
    lg = _toy_logits(rng, 1)
    p = SamplingParams(beams=1)
    allowed = np.isfinite(process_logits(lg, history_mask([[1, 8192]], V), p))[0]
    for seed in range(30):
        dec = LineDecoder(p, seed)
        _, tok = dec.step(lg)
        assert allowed[tok[0]]


def test_sampling_frequencies_follow_probabilities() -> None:
    lg = np.full((1, V), -30.0, dtype=np.float32)
    lg[0, [10, 20]] = [np.log(0.75), np.log(0.25)]
    p = SamplingParams(beams=1, temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0)
    rng = np.random.default_rng(9)
    n10 = sum(int(LineDecoder(p, rng).step(lg)[1][0] == 10) for _ in range(2000))
    assert abs(n10 / 2000 - 0.75) < 0.04


def test_greedy_is_argmax_with_penalty_and_stops() -> None:
    lg1 = np.zeros((1, V), dtype=np.float32)
    lg1[0, 7] = 5.0
    lg1[0, 9] = 1.0
    dec = LineDecoder(SamplingParams.greedy(max_tokens=10), None)
    assert dec.step(lg1)[1].tolist() == [7]
    # 7 is now penalised: 5/10 = 0.5 < 1.0
    assert dec.step(lg1)[1].tolist() == [9]
    lg2 = lg1.copy()
    lg2[0, EOS] = 50.0
    dec.step(lg2)
    assert dec.done
    r = dec.result()
    assert r.codes.tolist() == [7, 9] and r.stopped


def test_beam_first_step_expands_beam_zero_only() -> None:
    rng = np.random.default_rng(1)
    lg = np.repeat(_toy_logits(rng, 1), 3, axis=0)
    dec = LineDecoder(SamplingParams(beams=3), 0)
    parents, toks = dec.step(lg)
    assert parents.tolist() == [0, 0, 0]
    assert len(set(toks.tolist())) == 3
    # beam scores are the processed log-probs of the chosen tokens, sorted descending
    proc = process_logits(lg[:1], history_mask([[1, 8192]], V), SamplingParams(beams=3))[0]
    np.testing.assert_allclose(dec.beam_scores, proc[toks], rtol=1e-6)
    assert np.all(np.diff(dec.beam_scores) <= 0)


def test_beam_bookkeeping_parents_and_tokens() -> None:
    """Deterministic beam search (no sampling) against a brute-force reference on a tiny tree."""
    rng = np.random.default_rng(3)
    params = SamplingParams(beams=3, do_sample=False, repetition_penalty=1.0, max_tokens=4)
    table = rng.normal(size=(5, V)).astype(np.float32)
    table[:, EOS] = -50

    def logits_for(tokens: list[int]) -> np.ndarray:
        return table[len(tokens)] + 0.01 * np.float32(sum(tokens) % 7)

    dec = LineDecoder(params, 0)
    seqs: list[list[int]] = [[] for _ in range(3)]
    while not dec.done:
        lg = np.stack([logits_for(s) for s in seqs])
        parents, toks = dec.step(lg)
        seqs = [[*seqs[p], int(t)] for p, t in zip(parents, toks, strict=True)]
        assert seqs == dec.tokens
    best = dec.result()
    assert not best.stopped and len(best.codes) == 4

    # brute force: expand the 3 best partial sequences by log-prob sum at each depth
    def lp(tokens: list[int]) -> np.ndarray:
        x = logits_for(tokens).astype(np.float64)
        return x - x.max() - np.log(np.exp(x - x.max()).sum())

    beams = [([], 0.0)]
    for _ in range(4):
        cand = []
        for toks_, sc in beams:
            row = lp(toks_)
            top = np.argsort(-row)[:6]
            cand += [([*toks_, int(t)], sc + row[t]) for t in top if t != EOS]
        beams = sorted(cand, key=lambda c: -c[1])[:3]
    assert best.codes.tolist() == beams[0][0]
    assert best.score == pytest.approx(beams[0][1], rel=1e-5)


def test_beam_stop_finishes_hypotheses_and_early_stop() -> None:
    """Once 3 hypotheses ended in the stop token and none running can beat them, the line is done."""
    params = SamplingParams(beams=3, do_sample=False, repetition_penalty=1.0, max_tokens=50)
    base = np.full(V, -20.0, dtype=np.float32)
    base[[100, 101, 102, 103]] = [0.0, -0.1, -0.2, -0.3]
    stop = base.copy()
    stop[EOS] = 5.0  # the stop token dominates from step 2 on
    dec = LineDecoder(params, 0)
    steps = 0
    while not dec.done:
        lg = np.stack([base if steps == 0 else stop] * 3)
        dec.step(lg)
        steps += 1
    r = dec.result()
    assert r.stopped
    assert len(r.codes) == 1 and r.codes[0] == 100
    assert len(dec.hyps.beams) == 3
    # step 2 ends 3 hypotheses, but the best candidate (a stop) still beats the worst one; step 3 cannot
    assert steps == 3


def test_beam_sampling_deterministic_and_seed_dependent() -> None:
    rng = np.random.default_rng(11)
    steps = [np.repeat(_toy_logits(rng, 1), 3, axis=0) for _ in range(8)]
    p = SamplingParams(beams=3, max_tokens=8)
    outs = {s: _run(p, s, steps).result().codes.tolist() for s in (1, 1, 2, 3)}
    assert len(outs) == 3
    assert _run(p, 1, steps).result().codes.tolist() == outs[1]
