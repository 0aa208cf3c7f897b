"""Batched autoregressive decoding and the latent pass over the exported GPT trunk (numpy + Session).

This module drives the classic trunk graph (past and present key/values as separate tensors), which
TensorRT and the CUDA session run. ONNX Runtime CPU engines get the in-place form instead
(decode_inplace.py), which has the same contract and shares `HostEmbeddings` and the sampling.

The trunk graph is a pure function of `inputs_embeds`, an attention mask and explicit past key/values;
every embedding and position lookup happens here on the host, from the `.npy` tables of the engine
folder. That reproduces the original's position quirks exactly (spec §2.6.6-2.6.7):

- generation: prefix, then the start token at mel position 0, then code k at mel position **k + 2**;
- latent pass: [prefix | start, c_0 .. c_{n-1}, stop] at mel positions 0..n+1, latent = hidden at the
  inputs [start, c_0 .. c_{n-2}] (n rows).

Batching: prefixes of different lengths are left-padded (zero vectors, attention mask 0), so the newest
token of every row sits in the last column and one mel position serves the whole batch at each step.
Each line owns a `LineDecoder` (its own sampling params and random generator), so a line's codes never
depend on its batch-mates; finished lines leave the batch, beams reorder their KV rows by parent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.backends.onnxruntime.session import Session
from fasttts_cli.backends.protocol import StepOutput
from fasttts_cli.indextts2 import generate_loop as loop

# Trunk graph IO names (export.py writes them, the runtime feeds them).
INPUTS_EMBEDS = "inputs_embeds"
ATTENTION_MASK = "attention_mask"
LOGITS = "logits"  # (B, 1, V): the last position only
HIDDEN = "hidden"  # (B, T, D): after ln_f AND final_norm


def past_names(layers: int) -> list[str]:
    return [f"past_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]


def present_names(layers: int) -> list[str]:
    return [f"present_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]


# Host-side tables in the engine folder (file name -> UnifiedVoice tensor).
TABLE_FILES = {
    "text_embedding": "gpt_text_embedding.npy",
    "text_pos": "gpt_text_pos_embedding.npy",
    "mel_embedding": "gpt_mel_embedding.npy",
    "mel_pos": "gpt_mel_pos_embedding.npy",
    "speed": "gpt_speed_emb.npy",
}

KV = list[np.ndarray]  # [k_0, v_0, k_1, v_1, ...], each (rows, heads, S, head_dim)


@dataclass(frozen=True)
class GPTTokens:
    start_text: int = 0
    stop_text: int = 1
    start_mel: int = 8192
    stop_mel: int = 8193


@dataclass
class HostEmbeddings:
    """The GPT's lookup tables, applied on the host (spec §2.6.4)."""

    text_embedding: np.ndarray  # (text_vocab, D)
    text_pos: np.ndarray  # (max_text_tokens + 2, D)
    mel_embedding: np.ndarray  # (number_mel_codes, D)
    mel_pos: np.ndarray  # (max_mel_tokens + 3, D)
    speed: np.ndarray  # (2, D)
    tokens: GPTTokens = GPTTokens()

    @staticmethod
    def load(folder: Path | str, tokens: GPTTokens = GPTTokens()) -> HostEmbeddings:
        folder = Path(folder)
        arrays = {
            k: np.load(folder / f, allow_pickle=False).astype(np.float32) for k, f in TABLE_FILES.items()
        }
        return HostEmbeddings(**arrays, tokens=tokens)

    @property
    def model_dim(self) -> int:
        return int(self.mel_embedding.shape[1])

    @property
    def max_codes(self) -> int:
        """Most codes one line can generate: code k sits at mel position k + 2 < rows of mel_pos."""
        return int(self.mel_pos.shape[0]) - 2

    @property
    def max_text_ids(self) -> int:
        return int(self.text_pos.shape[0]) - 2

    def conds_latent(self, spk_latents: np.ndarray, emovec: np.ndarray) -> np.ndarray:
        """(num_latents, D) speaker latents + (D,) emovec -> (num_latents + 2, D):
        [latents + emovec | speed_emb[1] | speed_emb[0]]."""
        lat = np.asarray(spk_latents, np.float32) + np.asarray(emovec, np.float32)[None, :]
        return np.concatenate([lat, self.speed[1:2], self.speed[0:1]], axis=0)

    def text_embeddings(self, text_ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """(L,) ids (start/stop text ids are dropped, as the original does) -> (L + 2, D)."""
        t = self.tokens
        ids = np.asarray(text_ids, dtype=np.int64).reshape(-1)
        ids = ids[(ids != t.start_text) & (ids != t.stop_text)]
        if ids.size > self.max_text_ids:
            raise ValueError(
                f"{ids.size} text tokens; this engine's text positions allow {self.max_text_ids}"
            )
        full = np.concatenate([[t.start_text], ids, [t.stop_text]])
        return self.text_embedding[full] + self.text_pos[: full.size]

    def prefix(
        self, spk_latents: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int] | np.ndarray
    ) -> np.ndarray:
        """One line's prefix (num_latents + 2 + L + 2, D) = [conds_latent | text embeddings]."""
        return np.concatenate(
            [self.conds_latent(spk_latents, emovec), self.text_embeddings(text_ids)], axis=0
        )

    def mel(self, codes: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return self.mel_embedding[codes] + self.mel_pos[positions]

    def latent_sequence(self, prefix: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """The latent pass's input for one line (spec §2.6.7): [prefix | start, c_0 .. c_{n-1}, stop] at
        mel positions 0..n+1, (P + n + 2, D); the latent is the hidden state at rows -n-2 .. -3."""
        c = np.asarray(codes, dtype=np.int64).reshape(-1)
        if c.size + 2 > self.mel_pos.shape[0]:
            raise ValueError(f"{c.size} codes exceed the engine's mel positions")
        t = self.tokens
        mel_ids = np.concatenate([[t.start_mel], c, [t.stop_mel]])
        return np.concatenate([prefix, self.mel(mel_ids, np.arange(mel_ids.size))], axis=0)


class HostPrompts(loop.LoopMethods):
    """What both ONNX trunk decoders share: the session and sizes, the embedded prefix as the prompt,
    and the one loop's generate / generate_codes / forced."""

    def __init__(self, session: Any, emb: HostEmbeddings, *, layers: int, heads: int, chunk: int) -> None:
        self.session = session
        self.emb = emb
        self.layers = layers
        self.heads = heads
        self.head_dim = emb.model_dim // heads
        self.chunk = chunk  # prefill / latent pass tokens per trunk call (bounds attention memory)
        self._past = past_names(layers)
        self._present = present_names(layers)

    @property
    def vocab(self) -> int:
        return int(self.emb.mel_embedding.shape[0])

    @property
    def max_codes(self) -> int:
        return self.emb.max_codes

    def prompt(self, spk_latents: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int]) -> np.ndarray:
        return self.prompt_for(self.emb, spk_latents, emovec, text_ids)

    @staticmethod
    def prompt_for(
        emb: HostEmbeddings, spk_latents: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int]
    ) -> np.ndarray:
        """`prompt` without a session: the embedded prefix."""
        return emb.prefix(spk_latents, emovec, text_ids)


class GPTDecoder(HostPrompts):
    """The GPT step protocol over the classic trunk Session (past and present key/values apart), with
    the teacher-forced latent pass; the one generate loop drives it."""

    def __init__(
        self, session: Session, emb: HostEmbeddings, *, layers: int, heads: int, chunk: int = 256
    ) -> None:
        super().__init__(session, emb, layers=layers, heads=heads, chunk=chunk)
        self._outputs = [LOGITS, HIDDEN, *self._present]
        self._state: _Generation | None = None

    # ----------------------------------------------------------------------------- trunk

    def empty_kv(self, rows: int) -> KV:
        z = np.zeros((rows, self.heads, 0, self.head_dim), dtype=np.float32)
        return [z] * (2 * self.layers)

    def trunk(
        self, x: np.ndarray, mask: np.ndarray, kv: KV | None = None
    ) -> tuple[np.ndarray, np.ndarray, KV]:
        """One call: x (B, T, D) new tokens, mask (B, S + T), kv past (S entries) or None.
        Returns (logits (B, V) at the last position, hidden (B, T, D), present kv (S + T entries))."""
        kv = kv if kv is not None else self.empty_kv(x.shape[0])
        feeds = {
            INPUTS_EMBEDS: x.astype(np.float32, copy=False),
            ATTENTION_MASK: mask.astype(np.int64, copy=False),
        }
        feeds.update(zip(self._past, kv, strict=True))
        out = self.session.run(self._outputs, feeds)
        return out[LOGITS][:, -1], out[HIDDEN], [out[n] for n in self._present]

    def forward(
        self, x: np.ndarray, mask: np.ndarray, kv: KV | None = None, *, keep_hidden: bool = False
    ) -> tuple[np.ndarray, np.ndarray, KV]:
        """`trunk` over any number of new tokens, in chunks of `self.chunk` (same result, less memory).
        Returns the hidden states of every new token with `keep_hidden`, else of the last chunk's."""
        t = x.shape[1]
        past = 0 if kv is None else kv[0].shape[2]
        hidden = []
        logits = h = None
        for s in range(0, t, self.chunk):
            e = min(t, s + self.chunk)
            logits, h, kv = self.trunk(x[:, s:e], mask[:, : past + e], kv)
            if keep_hidden:
                hidden.append(h)
        assert logits is not None and h is not None and kv is not None
        return logits, (np.concatenate(hidden, axis=1) if keep_hidden else h), kv

    # ----------------------------------------------------------------------------- GPTSteps

    def _prefill_inputs(self, prefixes: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Left-padded [prefix | start token at mel position 0] for every line."""
        n, d = len(prefixes), self.emb.model_dim
        pmax = max(p.shape[0] for p in prefixes)
        x = np.zeros((n, pmax + 1, d), dtype=np.float32)
        mask = np.zeros((n, pmax + 1), dtype=np.int64)
        start = self.emb.mel(np.array([self.emb.tokens.start_mel]), np.array([0]))[0]
        for i, p in enumerate(prefixes):
            x[i, pmax - p.shape[0] : pmax] = p
            x[i, pmax] = start
            mask[i, pmax - p.shape[0] :] = 1
        return x, mask

    def prefill(
        self, prompts: Sequence[np.ndarray], rows_per_prompt: Sequence[int], max_steps: int
    ) -> StepOutput:
        x, mask = self._prefill_inputs(prompts)
        logits, hidden, kv = self.forward(x, mask)
        hidden = hidden[:, -1]
        src = np.repeat(np.arange(len(prompts)), rows_per_prompt)
        if len(src) != len(prompts):  # every row of a line starts from the line's prefill row
            kv, mask, logits, hidden = [a[src] for a in kv], mask[src], logits[src], hidden[src]
        self._state = _Generation(kv, mask)
        return StepOutput(logits, hidden)

    def step(self, parents: np.ndarray, tokens: np.ndarray) -> StepOutput:
        g = self._state
        if g is None:
            raise RuntimeError("step() without a prefill")
        left = parents.size < g.mask.shape[0]
        kv, mask = _reorder(g.kv, g.mask, parents)
        if left:
            kv, mask = _trim_left_padding(kv, mask)
        # the code generated at step k is fed at mel position k + 2 (the original's quirk)
        x = self.emb.mel(tokens, np.full(tokens.shape, g.steps + 2))[:, None, :]
        mask = np.concatenate([mask, np.ones((mask.shape[0], 1), dtype=np.int64)], axis=1)
        logits, hidden, kv = self.trunk(x, mask, kv)
        g.kv, g.mask, g.steps = kv, mask, g.steps + 1
        return StepOutput(logits, hidden[:, -1])

    def end(self) -> None:
        self._state = None

    # ----------------------------------------------------------------------------- latent pass

    def latents(self, prefixes: Sequence[np.ndarray], codes: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Teacher-forced second pass (spec §2.6.7), batched; returns per line (n_i, D)."""
        seqs = [self.emb.latent_sequence(p, c) for p, c in zip(prefixes, codes, strict=True)]
        if not seqs:
            return []
        tmax = max(s.shape[0] for s in seqs)
        x = np.zeros((len(seqs), tmax, self.emb.model_dim), dtype=np.float32)
        mask = np.zeros((len(seqs), tmax), dtype=np.int64)
        for i, s in enumerate(seqs):
            x[i, tmax - s.shape[0] :] = s
            mask[i, tmax - s.shape[0] :] = 1
        _, hidden, _ = self.forward(x, mask, keep_hidden=True)
        out = []
        for i, c in enumerate(codes):
            n = int(np.asarray(c).size)
            out.append(hidden[i, tmax - n - 2 : tmax - 2].copy())
        return out


@dataclass
class _Generation:
    """The cache of the generation in progress: kv past (rows, heads, S, head_dim) and its mask."""

    kv: KV
    mask: np.ndarray
    steps: int = 0


def _reorder(kv: KV, mask: np.ndarray, idx: np.ndarray) -> tuple[KV, np.ndarray]:
    """Rows of the cache for the next step: row r takes old row idx[r].

    The cache is the largest thing on the host, so avoid copying it: nothing when idx is the identity,
    only the changed rows (in place) when no row leaves, a full gather only when lines finish.
    """
    rows = mask.shape[0]
    if idx.size == rows:
        changed = np.flatnonzero(idx != np.arange(rows))
        if changed.size == 0:
            return kv, mask
        # in place only for host numpy arrays (a device tensor, e.g. sessions_cuda's, gathers itself)
        if all(isinstance(a, np.ndarray) and a.flags.writeable for a in kv):
            src = idx[changed]
            for a in kv:
                a[changed] = a[src]  # the right side is gathered into a new array first
            return kv, mask[idx]
    return [a[idx] for a in kv], mask[idx]


def _trim_left_padding(kv: KV, mask: np.ndarray, min_columns: int = 8) -> tuple[KV, np.ndarray]:
    """Drop leading columns that no remaining row attends to (left padding of lines that finished).
    Masked keys get exactly zero attention weight, so the result is unchanged; the cache is copied once
    to save that work on every later step. Host numpy caches only."""
    first = int(np.argmax(mask.any(axis=0)))
    if first < min_columns or not all(isinstance(a, np.ndarray) for a in kv):
        return kv, mask
    return [np.ascontiguousarray(a[:, :, first:]) for a in kv], np.ascontiguousarray(mask[:, first:])
