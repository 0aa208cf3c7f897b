"""Batched decoding over the in-place trunk (build/gqa_trunk.py): the KV cache is written where it lies.

Same contract as `decode.GPTDecoder` (generate / generate_codes / forced / latents, one `LineDecoder` per
line, the original's positions), different cache handling:

- each layer's keys and values live in one preallocated array (rows, heads, capacity, head_dim), bound
  to the graph as both past and present, so a step writes one column instead of copying the cache;
- rows are aligned at position 0 and carry their own lengths (`seqlens_k`), so there is no left padding
  and nothing to trim when lines finish;
- the capacity grows by doubling (a copy of the used columns) when a row would pass it, so a batch of
  short lines never reserves the preset's max_tokens;
- beams reorder rows in place (only the rows whose parent changed, only the used columns).

The latent pass runs one line at a time, in chunks after the first (the kernel allows a chunk after a
past only for batch 1): its memory is bounded by the chunk, whatever the line's length.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fasttts_cli.backends.onnxruntime.session import InplaceBinding
from fasttts_cli.backends.protocol import StepOutput
from fasttts_cli.indextts2.decode import (
    HIDDEN,
    INPUTS_EMBEDS,
    LOGITS,
    GPTDecoder,
    HostEmbeddings,
    HostPrompts,
    past_names,
)

# Trunk IO names of the in-place form (build/gqa_trunk.py)
SEQLENS_K = "seqlens_k"
TOTAL_LEN = "total_sequence_length"
LAST_INDEX = "last_index"


def inplace_inputs(layers: int) -> tuple[str, ...]:
    return (INPUTS_EMBEDS, SEQLENS_K, TOTAL_LEN, LAST_INDEX, *past_names(layers))


_ALL = np.iinfo(np.int64).max  # "identical in every column": a row with itself, or a whole-row copy


class KVBuffers:
    """Per layer k and v arrays (rows, heads, capacity, head_dim) and each row's length."""

    def __init__(self, rows: int, layers: int, heads: int, head_dim: int, capacity: int) -> None:
        self.shape = (heads, head_dim)
        self.arrays = [np.zeros((rows, heads, capacity, head_dim), np.float32) for _ in range(2 * layers)]
        self.lens = np.zeros(rows, np.int64)
        # same[r, s]: leading columns that rows r and s hold identically because one was copied from
        # the other (beams share their line's prefill and every column up to their last common
        # ancestor), which a beam reorder need not copy again. Known by construction, never compared.
        self.same = _identity(rows)
        # the Session's binding of these arrays, reused while they stay the same arrays
        self.binding: InplaceBinding | None = None

    @property
    def rows(self) -> int:
        return self.arrays[0].shape[0]

    @property
    def capacity(self) -> int:
        return self.arrays[0].shape[2]

    def ensure(self, needed: int) -> None:
        """Room for `needed` columns: double the capacity (copying the used columns) until it fits."""
        cap = self.capacity
        if needed <= cap:
            return
        while cap < needed:
            cap *= 2
        used = int(self.lens.max(initial=0))
        grown = []
        for a in self.arrays:
            b = np.zeros((a.shape[0], a.shape[1], cap, a.shape[3]), np.float32)
            b[:, :, :used] = a[:, :, :used]
            grown.append(b)
        self.arrays = grown

    def wrote(self, total: np.ndarray) -> None:
        """A call wrote columns lens[r].. of every row r (each row its own values): rows agree at most
        on the columns before both of their first new ones."""
        bound = np.minimum.outer(self.lens, self.lens)
        np.fill_diagonal(bound, _ALL)
        self.same = np.minimum(self.same, bound)
        self.lens = np.asarray(total, np.int64)

    def select(self, idx: np.ndarray) -> None:
        """Row r takes old row idx[r] (a row of the same line: beams). When the count stays, in place:
        only the changed rows, only the columns where a row and its new source may differ (after their
        last common ancestor), and straight from the source row unless that row is itself overwritten
        (then through a copy). This copy is most of what a step with 3 beams costs beyond a step with 1."""
        used = int(self.lens.max(initial=0))
        if idx.size == self.rows:
            changed = np.flatnonzero(idx != np.arange(self.rows))
            if changed.size:
                src = idx[changed]
                lo = np.minimum(self.same[changed, src], used)
                if np.isin(src, changed).any():  # a source is overwritten too: through a copy
                    low = int(lo.min())
                    for a in self.arrays:
                        a[changed, :, low:used] = a[src, :, low:used]
                else:
                    for r, s, first in zip(changed.tolist(), src.tolist(), lo.tolist(), strict=True):
                        if first < used:
                            for a in self.arrays:
                                a[r, :, first:used] = a[s, :, first:used]
        else:
            self.arrays = [np.ascontiguousarray(a[idx]) for a in self.arrays]
        self.lens = self.lens[idx]
        same = self.same[np.ix_(idx, idx)]  # row r now holds what old row idx[r] held
        self.same = np.minimum(same, used)  # columns from `used` on were not copied
        np.fill_diagonal(self.same, _ALL)


def _identity(rows: int) -> np.ndarray:
    same = np.zeros((rows, rows), np.int64)
    np.fill_diagonal(same, _ALL)
    return same


class InplaceGPTDecoder(HostPrompts):
    """`GPTDecoder`'s API over the in-place trunk Session (needs `bind_inplace` and `run_bound`:
    sessions.OrtSession)."""

    def __init__(
        self,
        session: object,
        emb: HostEmbeddings,
        *,
        layers: int,
        heads: int,
        chunk: int = 256,
        headroom: int = 128,
    ) -> None:
        super().__init__(session, emb, layers=layers, heads=heads, chunk=chunk)
        self.headroom = headroom  # columns past the prefix reserved before the first growth
        self._kv: KVBuffers | None = None  # the generation in progress
        self._steps = 0

    # ----------------------------------------------------------------------------- trunk

    def trunk(
        self, x: np.ndarray, kv: KVBuffers, new_lens: np.ndarray, last: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """One call. x (B, S, D): S new tokens per row (a prompt call right-pads rows to S, then each row
        gets new_lens[b] of them; a decode call has S == 1). Updates kv in place and its lengths;
        returns (logits (B, V) at position last[b] of x, hidden (B, S, D))."""
        total = kv.lens + new_lens
        kv.ensure(int(total.max()))
        prompt = int(kv.lens.max(initial=0)) == 0
        feeds = {
            INPUTS_EMBEDS: x.astype(np.float32, copy=False),
            SEQLENS_K: (total - 1).astype(np.int32),
            TOTAL_LEN: np.array(x.shape[1] if prompt else int(total.max()), np.int32),
            LAST_INDEX: last.astype(np.int64),
        }
        bound = kv.binding
        if bound is None or not bound.holds(kv.arrays):  # new arrays (first call, growth, rows left)
            inplace = {p: (o, a) for p, o, a in zip(self._past, self._present, kv.arrays, strict=True)}
            bound = kv.binding = self.session.bind_inplace([LOGITS, HIDDEN], inplace)  # type: ignore[attr-defined]
        out = self.session.run_bound(bound, feeds)  # type: ignore[attr-defined]
        kv.wrote(total)
        return out[LOGITS], out[HIDDEN]

    # ----------------------------------------------------------------------------- GPTSteps

    def prefill(
        self, prompts: Sequence[np.ndarray], rows_per_prompt: Sequence[int], max_steps: int
    ) -> StepOutput:
        """[prefix | start token at mel position 0] per line, right-padded, each row at position 0."""
        n, d = len(prompts), self.emb.model_dim
        lens = np.array([p.shape[0] + 1 for p in prompts], np.int64)
        s = int(lens.max())
        x = np.zeros((n, s, d), np.float32)
        start = self.emb.mel(np.array([self.emb.tokens.start_mel]), np.array([0]))[0]
        for i, p in enumerate(prompts):
            x[i, : p.shape[0]] = p
            x[i, p.shape[0]] = start
        kv = KVBuffers(n, self.layers, self.heads, self.head_dim, s + self.headroom)
        logits, hidden = self.trunk(x, kv, lens, lens - 1)
        hidden = hidden[np.arange(n), lens - 1]
        src = np.repeat(np.arange(n), rows_per_prompt)
        if src.size != n:  # every row of a line starts from the line's prefill row
            kv.select(src)
            logits, hidden = logits[src], hidden[src]
        self._kv, self._steps = kv, 0
        return StepOutput(logits, hidden)

    def step(self, parents: np.ndarray, tokens: np.ndarray) -> StepOutput:
        kv = self._kv
        if kv is None:
            raise RuntimeError("step() without a prefill")
        kv.select(parents)
        # the code generated at step k is fed at mel position k + 2 (the original's quirk)
        x = self.emb.mel(tokens, np.full(tokens.shape, self._steps + 2))[:, None, :]
        ones = np.ones(tokens.size, np.int64)
        logits, hidden = self.trunk(x, kv, ones, 0 * ones)
        self._steps += 1
        return StepOutput(logits, hidden[:, 0])

    def end(self) -> None:
        self._kv = None

    # ----------------------------------------------------------------------------- latent pass

    def latents(self, prefixes: Sequence[np.ndarray], codes: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Teacher-forced second pass (spec §2.6.7), one line at a time in chunks; (n_i, D) per line."""
        out = []
        for p, c in zip(prefixes, codes, strict=True):
            c = np.asarray(c, dtype=np.int64).reshape(-1)
            seq = self.emb.latent_sequence(p, c)[None]
            kv = KVBuffers(1, self.layers, self.heads, self.head_dim, seq.shape[1])
            hidden = []
            for s in range(0, seq.shape[1], self.chunk):
                part = seq[:, s : s + self.chunk]
                n = np.array([part.shape[1]])
                _, h = self.trunk(part, kv, n, n - 1)
                hidden.append(h[0])
            full = np.concatenate(hidden, axis=0)
            out.append(full[full.shape[0] - c.size - 2 : full.shape[0] - 2].copy())
        return out


def decoder_for(
    session: object, emb: HostEmbeddings, *, layers: int, heads: int
) -> GPTDecoder | InplaceGPTDecoder:
    """The decoder for a trunk Session: in place when the graph has that form and the Session can bind
    buffers (sessions.OrtSession), else the classic one."""
    names = {i.name for i in session.inputs}  # type: ignore[attr-defined]
    if names == set(inplace_inputs(layers)) and hasattr(session, "run_bound"):
        return InplaceGPTDecoder(session, emb, layers=layers, heads=heads)
    return GPTDecoder(session, emb, layers=layers, heads=heads)  # type: ignore[arg-type]
