"""Code sampling for the GPT stage, with the original's (HF `generate`) semantics, in numpy.

The original calls `generate(do_sample=True, num_beams=3, ...)`, i.e. HF *beam sampling*: the logits
processors (repetition penalty, temperature, top-k, top-p) act on log-probabilities with
`min_tokens_to_keep=2`, running beam scores are added, 2*num_beams candidates are drawn without
replacement from the softmax over all beams, and a beam scorer collects hypotheses that end in the stop
token (length_penalty, `early_stopping=False` heuristic). With `num_beams=1` it is plain sampling on raw
logits with `min_tokens_to_keep=1`. Greedy (argmax, repetition penalty only) exists for tests.

Every line owns its `numpy.random.Generator`, and the number of draws per step depends only on that
line's own scores, so a line's codes never depend on its batch-mates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from fasttts_cli.spec.presets import DecodeOptions

START_MEL_TOKEN = 8192
STOP_MEL_TOKEN = 8193
# generate() is fed dummy ids: prefix_len ones, then the start token; the repetition penalty sees them.
DUMMY_PREFIX_IDS = (1, START_MEL_TOKEN)
# HF initialises every beam but the first to -1e9 so the first step expands beam 0 only.
_INITIAL_OTHER_BEAM_SCORE = -1e9


@dataclass(frozen=True)
class SamplingParams(DecodeOptions):
    """A line's decoding settings as the sampler takes them: `presets.DecodeOptions` (the same fields,
    keys and checks) plus the engine's stop token."""

    stop_token: int = STOP_MEL_TOKEN

    def __post_init__(self) -> None:
        self.validate()

    @property
    def beam_mode(self) -> bool:
        return self.beams > 1

    @property
    def min_tokens_to_keep(self) -> int:
        # HF: 2 with beams (so a beam can always continue past a stop candidate), else 1.
        return 2 if self.beam_mode else 1

    @staticmethod
    def greedy(max_tokens: int = 1500, repetition_penalty: float = 10.0) -> SamplingParams:
        return SamplingParams(
            do_sample=False, beams=1, repetition_penalty=repetition_penalty, max_tokens=max_tokens
        )

    @staticmethod
    def from_options(opts: DecodeOptions, stop_token: int = STOP_MEL_TOKEN) -> SamplingParams:
        """From a preset's (or a line's) `DecodeOptions`, field by field."""
        return SamplingParams(
            **{f.name: getattr(opts, f.name) for f in fields(DecodeOptions)}, stop_token=stop_token
        )


# ---------------------------------------------------------------- logits processors (rows x vocab)


def history_mask(histories: Sequence[Iterable[int]], vocab: int) -> np.ndarray:
    """(rows, vocab) bool: which ids each row has seen. The penalty acts on the *set* of ids."""
    mask = np.zeros((len(histories), vocab), dtype=bool)
    for r, ids in enumerate(histories):
        idx = np.asarray(list(ids), dtype=np.int64)
        if idx.size:
            mask[r, idx] = True
    return mask


def log_softmax(x: np.ndarray) -> np.ndarray:
    """float32, like torch's log_softmax on float32 logits."""
    x = np.asarray(x, dtype=np.float32)
    shifted = x - np.max(x, axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def softmax(x: np.ndarray) -> np.ndarray:
    """float64 softmax; -inf entries get probability 0."""
    x64 = x.astype(np.float64)
    m = np.max(x64, axis=-1, keepdims=True)
    e = np.exp(x64 - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def apply_repetition_penalty(scores: np.ndarray, seen: np.ndarray, penalty: float) -> np.ndarray:
    """HF RepetitionPenaltyLogitsProcessor: seen ids get score*p if negative, score/p otherwise."""
    if penalty == 1.0:
        return scores
    out = np.array(scores, dtype=np.float32, copy=True)
    s = out[seen]
    out[seen] = np.where(s < 0, s * np.float32(penalty), s / np.float32(penalty))
    return out


def apply_temperature(scores: np.ndarray, temperature: float) -> np.ndarray:
    if temperature == 1.0:
        return scores
    return (scores / np.float32(temperature)).astype(np.float32)


def apply_top_k(scores: np.ndarray, top_k: int, min_tokens_to_keep: int = 1) -> np.ndarray:
    """HF TopKLogitsWarper: drop everything strictly below the k-th largest score (ties survive)."""
    if top_k <= 0:
        return scores
    k = min(max(top_k, min_tokens_to_keep), scores.shape[-1])
    kth = -np.partition(-scores, k - 1, axis=-1)[..., k - 1 : k]
    return np.where(scores < kth, np.float32(-np.inf), scores).astype(np.float32)


def apply_top_p(scores: np.ndarray, top_p: float, min_tokens_to_keep: int = 1) -> np.ndarray:
    """HF TopPLogitsWarper: sort ascending, drop the low tail whose cumulative probability <= 1 - p.

    Works on each row's finite entries only: -inf entries have probability 0, sort first and would be
    dropped anyway, so the result equals the full-vocabulary computation (after top-k that is ~k entries
    instead of the whole vocabulary).
    """
    if top_p >= 1.0:
        return scores
    out = np.array(scores, dtype=np.float32, copy=True)
    flat = out.reshape(-1, out.shape[-1])
    for row in flat:
        idx = np.flatnonzero(np.isfinite(row))
        order = idx[np.argsort(row[idx], kind="stable")]
        cum = np.cumsum(softmax(row[order]))
        remove = cum <= (1.0 - top_p)
        remove[max(0, remove.size - min_tokens_to_keep) :] = False
        row[order[remove]] = -np.inf
    return out


def process_logits(logits: np.ndarray, seen: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The scores the original draws from, for raw logits (rows, vocab) and per-row seen ids.

    Beam mode: on log-probabilities, min_tokens_to_keep 2. One beam: on raw logits, min_tokens_to_keep 1.
    Without sampling only the repetition penalty applies (HF adds the warpers only when sampling).
    """
    scores = log_softmax(logits) if params.beam_mode else np.asarray(logits, dtype=np.float32)
    scores = apply_repetition_penalty(scores, seen, params.repetition_penalty)
    if not params.do_sample:
        return scores
    keep = params.min_tokens_to_keep
    scores = apply_temperature(scores, params.temperature)
    scores = apply_top_k(scores, params.top_k, keep)
    return apply_top_p(scores, params.top_p, keep)


# ---------------------------------------------------------------- drawing


def draw_without_replacement(scores: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of `n` draws without replacement from softmax(scores) (1-D), in draw-key order.

    Uses the exponential-race form of the Gumbel trick, as torch.multinomial does without replacement:
    top-n of p / q with q ~ Exp(1). Only entries with p > 0 consume random numbers; if fewer than n have
    p > 0, the rest are filled with zero-probability entries in index order (torch fills them arbitrarily;
    such candidates carry -inf or ~-1e9 scores and never win).
    """
    fin = np.flatnonzero(np.isfinite(scores))
    p = softmax(scores[fin])
    live = fin[p > 0]
    keys = p[p > 0] / rng.exponential(size=live.size)
    chosen = live[np.argsort(-keys, kind="stable")[:n]]
    if chosen.size < n:
        rest = np.ones(scores.shape, dtype=bool)
        rest[live] = False
        chosen = np.concatenate([chosen, np.flatnonzero(rest)[: n - chosen.size]])
    return chosen


def draw_one(scores: np.ndarray, rng: np.random.Generator) -> int:
    return int(draw_without_replacement(scores, 1, rng)[0])


# ---------------------------------------------------------------- per-line decoders


@dataclass
class Decoded:
    """A line's result: codes without the stop token; `stopped` False when max_tokens cut it."""

    codes: np.ndarray  # int64 (n,)
    stopped: bool
    score: float | None = None  # beam hypothesis score (None outside beam mode)


@dataclass
class _Hypotheses:
    """HF BeamHypotheses with early_stopping=False."""

    num_beams: int
    length_penalty: float
    beams: list[tuple[float, list[int], bool]] = field(default_factory=list)
    worst_score: float = 1e9

    def add(self, tokens: list[int], sum_logprobs: float, generated_len: int, stopped: bool) -> None:
        score = sum_logprobs / (generated_len**self.length_penalty)
        if len(self.beams) < self.num_beams or score > self.worst_score:
            self.beams.append((score, tokens, stopped))
            if len(self.beams) > self.num_beams:
                ranked = sorted((s, i) for i, (s, _, _) in enumerate(self.beams))
                del self.beams[ranked[0][1]]
                self.worst_score = ranked[1][0]
            else:
                self.worst_score = min(score, self.worst_score)

    def is_done(self, best_sum_logprobs: float, generated_len: int) -> bool:
        if len(self.beams) < self.num_beams:
            return False
        return self.worst_score >= best_sum_logprobs / (generated_len**self.length_penalty)

    def best(self) -> tuple[float, list[int], bool]:
        # sorted() is stable and pop() takes the last: the same pick as HF among equal scores.
        return sorted(self.beams, key=lambda b: b[0])[-1]


class LineDecoder:
    """Sampling state of one line over `rows` KV-cache rows (num_beams, or 1).

    Each step: `parents, tokens = dec.step(logits)` with `logits` (rows, vocab) for the current rows;
    the caller reorders its KV cache rows by `parents` and feeds `tokens` next. When `dec.done`, stop
    feeding this line and read `dec.result()`.
    """

    def __init__(
        self,
        params: SamplingParams,
        rng: np.random.Generator | int | None = None,
        *,
        vocab: int = STOP_MEL_TOKEN + 1,
        prefix_ids: Iterable[int] = DUMMY_PREFIX_IDS,
    ) -> None:
        self.params = params
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.vocab = vocab
        self.rows = params.beams
        self._prefix = list(prefix_ids)
        self.seen = history_mask([self._prefix] * self.rows, vocab)
        self.tokens: list[list[int]] = [[] for _ in range(self.rows)]
        self.beam_scores = np.zeros(self.rows, dtype=np.float32)
        self.beam_scores[1:] = _INITIAL_OTHER_BEAM_SCORE
        self.hyps = _Hypotheses(self.rows, params.length_penalty)
        self.done = False
        self._result: Decoded | None = None

    @property
    def n_generated(self) -> int:
        return len(self.tokens[0])

    def step(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.done:
            raise RuntimeError("step() on a finished line")
        logits = np.asarray(logits, dtype=np.float32)
        if logits.shape != (self.rows, self.vocab):
            raise ValueError(f"logits shape {logits.shape}, expected {(self.rows, self.vocab)}")
        scores = process_logits(logits, self.seen, self.params)
        if self.params.beam_mode:
            return self._beam_step(scores)
        return self._single_step(scores)

    def _single_step(self, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tok = draw_one(scores[0], self.rng) if self.params.do_sample else int(np.argmax(scores[0]))
        parents = np.zeros(1, dtype=np.int64)
        if tok == self.params.stop_token:
            self._finish(Decoded(np.asarray(self.tokens[0], dtype=np.int64), True))
        else:
            self.tokens[0].append(tok)
            self.seen[0, tok] = True
            if len(self.tokens[0]) >= self.params.max_tokens:
                self._finish(Decoded(np.asarray(self.tokens[0], dtype=np.int64), False))
        return parents, np.asarray([tok], dtype=np.int64)

    def _beam_step(self, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nb, v, eos = self.rows, self.vocab, self.params.stop_token
        total = (scores + self.beam_scores[:, None]).reshape(-1)
        n_cand = 2 * nb  # max(2, 1 + n_eos) * num_beams with one eos id
        if self.params.do_sample:
            cand = draw_without_replacement(total, n_cand, self.rng)
            cand = cand[np.argsort(-total[cand], kind="stable")]
        else:
            cand = np.argsort(-total, kind="stable")[:n_cand]
        cur_generated = self.n_generated + 1  # the length the candidate scores belong to
        new_parents, new_tokens, new_scores = [], [], []
        for rank, flat in enumerate(cand):
            parent, tok, sc = int(flat // v), int(flat % v), float(total[flat])
            if tok == eos:
                if rank >= nb:  # a stop outside the top num_beams is not a finished hypothesis
                    continue
                self.hyps.add(list(self.tokens[parent]), sc, cur_generated, True)
            else:
                new_parents.append(parent)
                new_tokens.append(tok)
                new_scores.append(sc)
                if len(new_parents) == nb:
                    break
        parents = np.asarray(new_parents, dtype=np.int64)
        tokens = np.asarray(new_tokens, dtype=np.int64)
        self.tokens = [[*self.tokens[p], t] for p, t in zip(new_parents, new_tokens, strict=True)]
        self.seen = self.seen[parents]
        self.seen[np.arange(nb), tokens] = True
        self.beam_scores = np.asarray(new_scores, dtype=np.float32)
        best_candidate = float(total[cand].max())
        if self.hyps.is_done(best_candidate, cur_generated):
            self._finish(self._best())
        elif self.n_generated >= self.params.max_tokens:
            for b in range(nb):
                self.hyps.add(list(self.tokens[b]), float(self.beam_scores[b]), self.n_generated, False)
            self._finish(self._best())
        return parents, tokens

    def _best(self) -> Decoded:
        score, toks, stopped = self.hyps.best()
        return Decoded(np.asarray(toks, dtype=np.int64), stopped, score)

    def _finish(self, result: Decoded) -> None:
        self.done = True
        self._result = result

    def cancel(self) -> None:
        """End a one-beam line now (a streamed line nobody listens to any more): its codes so far, not
        stopped. A no-op on a finished line."""
        if not self.done:
            self._finish(Decoded(np.asarray(self.tokens[0], dtype=np.int64), False))

    def result(self) -> Decoded:
        if self._result is None:
            raise RuntimeError("result() before the line finished")
        return self._result


def seed_generator(seed: int) -> np.random.Generator:
    """The per-line generator: PCG64 seeded with the line's seed (from its cache key)."""
    return np.random.Generator(np.random.PCG64(int(seed) & ((1 << 128) - 1)))
