"""The original's code sampling (HF `generate` semantics) on tensors, for a batch of lines at once.

Same semantics as `fasttts_cli.indextts2.sampling` (the numpy reference; the tests hold them equal):
repetition penalty on the set of seen ids (dummy prefix ids included), temperature, top-k (ties survive),
top-p (stable ascending sort, cumulative float64 probability), on log-probabilities with
min_tokens_to_keep 2 in beam mode and on raw logits with 1 otherwise; draws without replacement by the
exponential race (top-n of p / q, q ~ Exp(1)); HF's beam scorer with `early_stopping=False`.

Where the random numbers come from is a `NoiseSource`:
- `DeviceNoise` (default): a counter-based hash of (line seed, step, candidate index), computed on the
  device with integer ops. No generator state, no host round trip, and a line's draws depend only on
  its own seed, so batch == single holds exactly and the step can live inside a CUDA graph.
- `NumpyNoise`: the numpy runtime's own stream (each line's `numpy.random.Generator`, `exponential`
  over the live entries in index order). With it this sampler picks exactly the codes the numpy
  `LineDecoder` picks for the same logits; it costs a host round trip per step (tests, cross-checks).

Lines in one `BatchSampler` share `num_beams` and `do_sample` (the engine groups lines by them); the
other settings may differ per line (per-row tensors).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from fasttts_cli.indextts2.sampling import (
    DUMMY_PREFIX_IDS,
    STOP_MEL_TOKEN,
    Decoded,
    SamplingParams,
    _Hypotheses,  # the numpy runtime's HF beam-hypotheses bookkeeping: shared, so both agree exactly
)

_OTHER_BEAM_SCORE = -1e9
NEG_INF = float("-inf")


# ------------------------------------------------------------------------------------ row parameters


@dataclass
class RowParams:
    """Per-row sampling settings as device tensors (rows = lines x beams)."""

    temperature: torch.Tensor  # (R,) float32
    top_k: torch.Tensor  # (R,) int64
    top_p: torch.Tensor  # (R,) float64
    penalty: torch.Tensor  # (R,) float32

    @classmethod
    def build(
        cls, params: Sequence[SamplingParams], rows_per_line: int, device: torch.device | str
    ) -> RowParams:
        def col(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(np.repeat(values, rows_per_line), dtype=dtype, device=device)

        return cls(
            col([p.temperature for p in params], torch.float32),
            col([p.top_k for p in params], torch.int64),
            col([p.top_p for p in params], torch.float64),
            col([p.repetition_penalty for p in params], torch.float32),
        )

    def select(self, index: torch.Tensor) -> RowParams:
        return RowParams(
            *(t.index_select(0, index) for t in (self.temperature, self.top_k, self.top_p, self.penalty))
        )


# ------------------------------------------------------------------------------------ processors


def apply_repetition_penalty(scores: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    pen = penalty[:, None]
    return torch.where(seen, torch.where(scores < 0, scores * pen, scores / pen), scores)


def apply_top_k(scores: torch.Tensor, top_k: torch.Tensor, keep: int) -> torch.Tensor:
    """Drop everything strictly below each row's k-th largest score; rows with top_k <= 0 untouched."""
    v = scores.shape[-1]
    k = top_k.clamp(min=keep).clamp(max=v)
    kth = torch.sort(scores, dim=-1, descending=True).values.gather(1, (k - 1)[:, None])
    kth = torch.where((top_k > 0)[:, None], kth, torch.full_like(kth, NEG_INF))
    return scores.masked_fill(scores < kth, NEG_INF)


def apply_top_p(scores: torch.Tensor, top_p: torch.Tensor, keep: int) -> torch.Tensor:
    """Drop the low tail whose cumulative probability (ascending, float64) is <= 1 - p; rows with
    top_p >= 1 untouched; the `keep` best always survive."""
    srt, order = torch.sort(scores, dim=-1, stable=True)
    cum = torch.softmax(srt.double(), dim=-1).cumsum(dim=-1)
    remove = cum <= (1.0 - top_p)[:, None]
    remove[:, -keep:] = False
    remove &= (top_p < 1.0)[:, None]
    mask = torch.zeros_like(remove).scatter(1, order, remove)
    return scores.masked_fill(mask, NEG_INF)


def process_scores(
    logits: torch.Tensor, seen: torch.Tensor, rp: RowParams, *, beam_mode: bool, do_sample: bool
) -> torch.Tensor:
    """(R, V) float32 scores the original draws from (see `indextts2.sampling.process_logits`)."""
    logits = logits.float()
    scores = torch.log_softmax(logits.double(), dim=-1).float() if beam_mode else logits
    scores = apply_repetition_penalty(scores, seen, rp.penalty)
    if not do_sample:
        return scores
    keep = 2 if beam_mode else 1
    scores = scores / rp.temperature[:, None]
    scores = apply_top_k(scores, rp.top_k, keep)
    return apply_top_p(scores, rp.top_p, keep)


# ------------------------------------------------------------------------------------ noise


class NoiseSource(Protocol):
    def exponential(self, p: torch.Tensor, lines: Sequence[int], step: int) -> torch.Tensor:
        """Exp(1) draws (n, N) float64 for rows of probabilities p (n, N) of `lines` at `step`."""
        ...


_M32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    # (x * c) mod 2^32 for x < 2^32 in int64 without overflow: split c into 16-bit halves.
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & _M32


def _fmix32(x: torch.Tensor) -> torch.Tensor:
    """murmur3's 32-bit finaliser on non-negative int64 values < 2^32."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x85EBCA6B)
    x = x ^ (x >> 13)
    x = _mul32(x, 0xC2B2AE35)
    return x ^ (x >> 16)


def _fmix32_int(x: int) -> int:
    """`_fmix32` on a Python int (no tensor, so no host-to-device copy per step)."""
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & _M32
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & _M32
    return x ^ (x >> 16)


def hash_uniform(seeds: torch.Tensor, step: int | torch.Tensor, n: int) -> torch.Tensor:
    """(len(seeds), n) float64 uniforms in (0, 1), 53 bits, a pure function of (seed, step, index)."""
    s = seeds.to(torch.int64)[:, None]
    base = _fmix32((s & _M32) ^ _fmix32(((s >> 32) & 0x7FFFFFFF) ^ 0x9E3779B9))
    if isinstance(step, torch.Tensor):
        base = _fmix32(base ^ _fmix32((step.to(torch.int64) & _M32) ^ 0x632BE5AB))
    else:
        base = _fmix32(base ^ _fmix32_int((int(step) & _M32) ^ 0x632BE5AB))
    idx = torch.arange(n, device=seeds.device, dtype=torch.int64)[None, :]
    a = _fmix32(base ^ _fmix32(2 * idx))
    b = _fmix32(base ^ _fmix32(2 * idx + 1))
    bits = (a >> 5) * (1 << 26) + (b >> 6)  # 27 + 26 = 53 bits
    return (bits.double() + 0.5) * (1.0 / (1 << 53))


class DeviceNoise:
    """Counter-based draws keyed by each line's seed (see the module docstring)."""

    def __init__(self, seeds: Sequence[int], device: torch.device | str) -> None:
        self.seeds = torch.tensor(
            [int(s) & 0x7FFFFFFFFFFFFFFF for s in seeds], dtype=torch.int64, device=device
        )
        self._index: tuple[tuple[int, ...], torch.Tensor] | None = None

    def _rows(self, lines: Sequence[int]) -> torch.Tensor:
        key = tuple(lines)
        if self._index is None or self._index[0] != key:
            self._index = (key, torch.tensor(key, dtype=torch.long, device=self.seeds.device))
        return self._index[1]

    def exponential(self, p: torch.Tensor, lines: Sequence[int], step: int) -> torch.Tensor:
        u = hash_uniform(self.seeds.index_select(0, self._rows(lines)), step, p.shape[-1])
        return -torch.log(u)


class NumpyNoise:
    """Each line's numpy generator, drawn exactly as the numpy runtime draws (live entries, index order)."""

    def __init__(self, generators: Sequence[np.random.Generator]) -> None:
        self.generators = list(generators)

    def exponential(self, p: torch.Tensor, lines: Sequence[int], step: int) -> torch.Tensor:
        ph = p.detach().cpu().numpy()
        q = np.full(ph.shape, np.inf)
        for r, line in enumerate(lines):
            live = np.flatnonzero(ph[r] > 0)
            q[r, live] = self.generators[line].exponential(size=live.size)
        return torch.from_numpy(q).to(p.device)


def race_keys(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Exponential-race keys p / q (-1 where p == 0: such entries never win over a live one)."""
    return torch.where(p > 0, p / q, torch.full_like(p, -1.0))


# ------------------------------------------------------------------------------------ batch sampler


@dataclass
class StepOut:
    """What the decode loop does after one sampling step.

    rows: the source row of each next row (reorder the KV cache rows by it), or None when the row layout
    did not change; tokens (R_next,) the codes to feed next (device); finished: line ids that left."""

    rows: torch.Tensor | None
    tokens: torch.Tensor
    finished: list[int]


class BatchSampler:
    """Sampling state of several lines, `num_beams` rows each, on one device.

    Row layout: the k-th line in `self.lines` owns rows [k*nb, (k+1)*nb). One beam: codes, stop flags and
    lengths stay on the device and nothing is synchronised per step (`sync` every few steps drops
    finished lines); beams: the candidates (2*nb per line) go to the host for HF's beam scorer.
    """

    def __init__(
        self,
        params: Sequence[SamplingParams],
        noise: NoiseSource,
        *,
        vocab: int,
        device: torch.device | str,
        prefix_ids: Sequence[int] = DUMMY_PREFIX_IDS,
        ignore_stop: bool = False,
    ) -> None:
        if not params:
            raise ValueError("no lines")
        nb, ds = params[0].num_beams, params[0].do_sample
        if any(p.num_beams != nb or p.do_sample != ds for p in params):
            raise ValueError("lines of one BatchSampler must share num_beams and do_sample")
        self.params = list(params)
        self.nb, self.do_sample, self.beam_mode = nb, ds, nb > 1
        self.noise = noise
        self.vocab = vocab
        self.device = torch.device(device)
        self.ignore_stop = ignore_stop
        self.stop = params[0].stop_token
        if any(p.stop_token != self.stop for p in params):
            raise ValueError("lines of one BatchSampler must share the stop token")
        n = len(params)
        self.lines: list[int] = list(range(n))
        self.rp = RowParams.build(params, nb, self.device)
        rows = n * nb
        self.seen = torch.zeros((rows, vocab), dtype=torch.bool, device=self.device)
        self.seen[:, torch.tensor(list(prefix_ids), dtype=torch.long)] = True
        scores = np.zeros((n, nb), np.float32)
        scores[:, 1:] = _OTHER_BEAM_SCORE
        self.beam_scores = torch.from_numpy(scores.reshape(-1)).to(self.device)
        self.step_no = 0
        self.results: dict[int, Decoded] = {}
        if self.beam_mode:
            self.tokens: list[list[list[int]]] = [[[] for _ in range(nb)] for _ in range(n)]
            self.hyps = [_Hypotheses(nb, p.length_penalty) for p in params]
        else:
            longest = max(p.max_tokens for p in params)
            self.codes = torch.zeros((n, longest), dtype=torch.long, device=self.device)
            self.n_gen = torch.zeros(n, dtype=torch.long, device=self.device)
            self.done = torch.zeros(n, dtype=torch.bool, device=self.device)
            self.stopped = torch.zeros(n, dtype=torch.bool, device=self.device)
            self.max_tokens = torch.tensor(
                [p.max_tokens for p in params], dtype=torch.long, device=self.device
            )

    @property
    def rows(self) -> int:
        return len(self.lines) * self.nb

    @property
    def finished(self) -> bool:
        return not self.lines

    # -------------------------------------------------------------------------- one step

    def step(self, logits: torch.Tensor) -> StepOut:
        """logits (rows, V) for the current rows (any float dtype)."""
        if logits.shape != (self.rows, self.vocab):
            raise ValueError(f"logits shape {tuple(logits.shape)}, expected {(self.rows, self.vocab)}")
        logits = logits.float()
        if self.ignore_stop:
            logits = logits.clone()
            logits[:, self.stop] = NEG_INF
        scores = process_scores(
            logits, self.seen, self.rp, beam_mode=self.beam_mode, do_sample=self.do_sample
        )
        out = self._beam_step(scores) if self.beam_mode else self._single_step(scores)
        self.step_no += 1
        return out

    def _single_step(self, scores: torch.Tensor) -> StepOut:
        if self.do_sample:
            p = torch.softmax(scores.double(), dim=-1)
            keys = race_keys(p, self.noise.exponential(p, self.lines, self.step_no))
            tok = keys.argmax(dim=-1)
        else:
            tok = scores.argmax(dim=-1)
        live = ~self.done
        is_stop = (tok == self.stop) & live
        ok = live & ~is_stop
        rows = torch.arange(tok.shape[0], device=tok.device)
        col = self.n_gen.clamp(max=self.codes.shape[1] - 1)
        self.codes[rows, col] = torch.where(ok, tok, self.codes[rows, col])
        self.seen[rows, tok] = self.seen[rows, tok] | ok
        self.n_gen += ok.long()
        self.stopped |= is_stop
        self.done |= is_stop | (self.n_gen >= self.max_tokens)
        return StepOut(None, tok, [])

    def sync(self) -> StepOut | None:
        """One beam: move finished lines to `results` (host sync). Returns the new row layout, or None
        when no line finished. Beam mode finishes lines inside `step`."""
        if self.beam_mode:
            return None
        done = self.done.cpu().numpy()
        if not done.any():
            return None
        n_gen = self.n_gen.cpu().numpy()
        stopped = self.stopped.cpu().numpy()
        keep = np.flatnonzero(~done)
        finished = []
        for r in np.flatnonzero(done):
            line = self.lines[r]
            codes = self.codes[r, : int(n_gen[r])].cpu().numpy().astype(np.int64)
            self.results[line] = Decoded(codes, bool(stopped[r]))
            finished.append(line)
        idx = torch.from_numpy(keep).to(self.device)
        self.lines = [self.lines[r] for r in keep]
        self.codes, self.n_gen, self.done = self.codes[idx], self.n_gen[idx], self.done[idx]
        self.stopped, self.max_tokens = self.stopped[idx], self.max_tokens[idx]
        self.seen, self.rp, self.beam_scores = self.seen[idx], self.rp.select(idx), self.beam_scores[idx]
        return StepOut(idx, torch.empty(0, dtype=torch.long, device=self.device), finished)

    def _beam_step(self, scores: torch.Tensor) -> StepOut:
        nb, v, n = self.nb, self.vocab, len(self.lines)
        total = (scores + self.beam_scores[:, None]).reshape(n, nb * v)
        n_cand = 2 * nb
        if self.do_sample:
            p = torch.softmax(total.double(), dim=-1)
            keys = race_keys(p, self.noise.exponential(p, self.lines, self.step_no))
            cand = torch.sort(keys, dim=-1, descending=True, stable=True).indices[:, :n_cand]
            ctot = total.gather(1, cand)
            order = torch.sort(ctot, dim=-1, descending=True, stable=True).indices
            cand, ctot = cand.gather(1, order), ctot.gather(1, order)
        else:
            ctot, cand = torch.sort(total, dim=-1, descending=True, stable=True)
            ctot, cand = ctot[:, :n_cand], cand[:, :n_cand]
        cand_h, ctot_h = cand.cpu().numpy(), ctot.cpu().numpy()
        src_rows: list[int] = []
        next_tokens: list[int] = []
        next_scores: list[float] = []
        still: list[int] = []
        finished: list[int] = []
        for k, line in enumerate(self.lines):
            prm, hyps, toks = self.params[line], self.hyps[line], self.tokens[line]
            cur_generated = len(toks[0]) + 1
            parents, new_toks, new_sc = [], [], []
            for rank in range(n_cand):
                flat = int(cand_h[k, rank])
                parent, tok, sc = flat // v, flat % v, float(ctot_h[k, rank])
                if tok == self.stop:
                    if rank >= nb:
                        continue
                    hyps.add(list(toks[parent]), sc, cur_generated, True)
                else:
                    parents.append(parent)
                    new_toks.append(tok)
                    new_sc.append(sc)
                    if len(parents) == nb:
                        break
            toks = [[*toks[p], t] for p, t in zip(parents, new_toks, strict=True)]
            self.tokens[line] = toks
            best_candidate = float(ctot_h[k].max())
            scores32 = np.asarray(new_sc, np.float32)
            if hyps.is_done(best_candidate, cur_generated):
                self._finish_beams(line)
                finished.append(line)
            elif len(toks[0]) >= prm.max_tokens:
                for b in range(nb):
                    hyps.add(list(toks[b]), float(scores32[b]), len(toks[0]), False)
                self._finish_beams(line)
                finished.append(line)
            else:
                still.append(line)
                src_rows += [k * nb + p for p in parents]
                next_tokens += new_toks
                next_scores += scores32.tolist()
        self.lines = still
        idx = torch.tensor(src_rows, dtype=torch.long, device=self.device)
        tok_t = torch.tensor(next_tokens, dtype=torch.long, device=self.device)
        self.seen = self.seen.index_select(0, idx)
        if len(still):
            self.seen[torch.arange(idx.shape[0], device=self.device), tok_t] = True
        self.rp = self.rp.select(idx)
        self.beam_scores = torch.tensor(next_scores, dtype=torch.float32, device=self.device)
        return StepOut(idx, tok_t, finished)

    def _finish_beams(self, line: int) -> None:
        score, toks, stopped = self.hyps[line].best()
        self.results[line] = Decoded(np.asarray(toks, dtype=np.int64), stopped, score)

    def decoded(self) -> list[Decoded]:
        missing = [i for i in range(len(self.params)) if i not in self.results]
        if missing:
            raise RuntimeError(f"lines {missing} have not finished")
        return [self.results[i] for i in range(len(self.params))]


def default_vocab() -> int:
    return STOP_MEL_TOKEN + 1
