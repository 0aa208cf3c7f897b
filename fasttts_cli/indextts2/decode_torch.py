"""Batched AR decoding, forced decoding and the latent pass on UnifiedVoice's weights, on one device.

Generation (spec §2.6.6): prefill [prefix | start token at mel position 0] for every row (left-padded),
then one token per step, code k fed at mel position k + 2, all rows in one column of a preallocated
`StaticKVCache`. The decode step (mel embedding lookup + 24 blocks + both norms + mel_head) is one
function of static buffers, captured as a CUDA graph per (rows bucket, attended-length bucket) and
replayed. The one generate loop (indextts2/generate_loop.py) drives it through the GPT step protocol and
samples on the host with the numpy runtime's sampler, so this backend picks the numpy runtime's codes
for the same logits. Beams reorder cache rows by parent.

Latent pass (spec §2.6.7), as the original runs it: a second, teacher-forced pass over
[prefix | start, c_0 .. c_{n-1}, stop] at mel positions 0..n+1, batched with left padding; the latent is
the hidden state at [start, c_0 .. c_{n-2}]. (The generation-time hidden states sit at positions k + 2,
so reusing them would only approximate it; this backend does not offer that shortcut.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fasttts_cli.backends.protocol import StepOutput
from fasttts_cli.backends.torch.graphs import GraphRunner, bucket, round_up, row_buckets
from fasttts_cli.backends.torch.static_cache import StaticKVCache, trunk_cached, trunk_full
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2 import generate_loop as loop
from fasttts_cli.indextts2.sampling import Decoded, LineDecoder, SamplingParams
from fasttts_cli.nets.unified_voice import UnifiedVoice

PrefixLike = torch.Tensor | np.ndarray


@dataclass(frozen=True)
class DecodeSettings:
    max_lines: int = 16  # lines per GPT batch (rows = lines x beams)
    max_beams: int = 3
    length_step: int = 256  # attended-length bucket of the decode graphs
    use_graphs: bool | None = None  # None: on CUDA


class TorchGPT:
    """Drives UnifiedVoice's trunk with a static cache (see the module docstring).

    `uv` is moved to `device` in place (the caller hands over a module it owns); the parts the decode
    step and the latent pass run (GPT-2 blocks, ln_f, final_norm, mel_head, mel embedding and positions)
    are cast to `dtype`, the conditioners and text tables stay fp32 (they run once per voice / prefix).
    """

    def __init__(
        self,
        uv: UnifiedVoice,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        settings: DecodeSettings = DecodeSettings(),
    ) -> None:
        self.device = torch.device(device)
        self.dtype = dtype
        self.uv = uv.to(device=self.device).eval().requires_grad_(False)
        for part in (uv.gpt, uv.final_norm, uv.mel_head, uv.mel_embedding, uv.mel_pos_embedding):
            part.to(dtype)
        self.cfg = uv.cfg
        self.settings = settings
        self.graphs = GraphRunner.for_device(settings.use_graphs, self.device)
        self.max_rows = settings.max_lines * settings.max_beams
        self.buckets = row_buckets(settings.max_lines, tuple(sorted({1, settings.max_beams})))
        c = self.cfg
        dev = self.device
        self.tok_buf = torch.zeros(self.max_rows, dtype=torch.long, device=dev)
        self.col_buf = torch.zeros(1, dtype=torch.long, device=dev)
        self.pos_buf = torch.zeros(1, dtype=torch.long, device=dev)
        self.logits_buf = torch.zeros(self.max_rows, c.number_mel_codes, dtype=torch.float32, device=dev)
        self.hidden_buf = torch.zeros(self.max_rows, c.model_dim, dtype=torch.float32, device=dev)
        self.cache: StaticKVCache | None = None
        self._emb: dec.HostEmbeddings | None = None
        self._col: int | None = None  # the generation in progress: its next cache column, steps, rows
        self._steps = self._n = 0

    # ------------------------------------------------------------------------------- cache

    @property
    def max_codes(self) -> int:
        """Most codes a line can have: code k sits at mel position k + 2 < rows of the position table."""
        return self.cfg.mel_pos_rows - 2

    def ensure_cache(self, length: int, rows: int) -> StaticKVCache:
        """A cache of >= rows (a bucket) x >= length columns (a length step). It only grows, and growing
        drops the captured graphs (they point at the old buffers); steady state reuses one allocation."""
        length = round_up(length, self.settings.length_step)
        rows = bucket(rows, self.buckets)
        if self.cache is None or self.cache.length < length or self.cache.rows < rows:
            if self.cache is not None:
                length, rows = max(length, self.cache.length), max(rows, self.cache.rows)
            self.cache = None
            self.graphs.clear()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self.cache = StaticKVCache.for_model(self.uv, rows, length, dtype=self.dtype, device=self.device)
        return self.cache

    # ------------------------------------------------------------------------------- steps

    def _prefix_batch(self, prefixes: Sequence[PrefixLike]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded [prefix | start@0] (n, Pmax+1, D) in the compute dtype, and valid (n, Pmax+1)."""
        c, dev = self.cfg, self.device
        rows = [torch.as_tensor(p, dtype=torch.float32).to(dev) for p in prefixes]
        pmax = max(r.shape[0] for r in rows)
        x = torch.zeros(len(rows), pmax + 1, c.model_dim, dtype=torch.float32, device=dev)
        valid = torch.zeros(len(rows), pmax + 1, dtype=torch.bool, device=dev)
        start = torch.tensor([c.start_mel_token], device=dev)
        start_emb = self.uv.mel_input_embedding(start[None], torch.zeros_like(start)[None])[0, 0].float()
        for i, r in enumerate(rows):
            x[i, pmax - r.shape[0] : pmax] = r
            valid[i, pmax - r.shape[0] :] = True
        x[:, pmax] = start_emb
        return x.to(self.dtype), valid

    def _prefill(
        self, prefixes: Sequence[PrefixLike], extra: int, rows: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Prefill rows [0, n); returns (logits (n, V), hidden at the start token (n, D), next column)."""
        x, valid = self._prefix_batch(prefixes)
        n, t = valid.shape
        if n > self.max_rows:
            raise ValueError(f"{n} rows exceed this decoder's {self.max_rows}")
        cache = self.ensure_cache(t + extra, max(n, rows or n))
        cache.reset()
        cache.valid[:n, :t] = valid
        cols = torch.arange(t, device=self.device)
        logits, hidden = trunk_cached(self.uv, x, cache, cols, t)
        return logits.float(), hidden[:, -1].float(), t

    def _decode_body(self, b: int, kv: int) -> None:
        uv = self.uv
        x = uv.mel_embedding(self.tok_buf[:b])[:, None] + uv.mel_pos_embedding.emb(self.pos_buf)[None]
        assert self.cache is not None
        self.cache.valid[:b].index_fill_(1, self.col_buf, True)
        logits, hidden = trunk_cached(uv, x, self.cache, self.col_buf, kv)
        self.logits_buf[:b].copy_(logits.float())
        self.hidden_buf[:b].copy_(hidden[:, -1].float())

    def decode_step(self, tokens: torch.Tensor, col: int, mel_pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed tokens (rows,) at cache column `col` and mel position `mel_pos`; rows [0, rows) of the cache.
        Returns views (logits (rows, V), hidden (rows, D)) of the static output buffers."""
        assert self.cache is not None
        rows = int(tokens.shape[0])
        b = bucket(rows, self.buckets)
        kv = round_up(col + 1, self.settings.length_step, self.cache.length)
        self.tok_buf[:rows].copy_(tokens)
        self.col_buf.fill_(col)
        self.pos_buf.fill_(mel_pos)
        self.graphs.run(("decode", b, kv), lambda: self._decode_body(b, kv))
        return self.logits_buf[:rows], self.hidden_buf[:rows]

    # ------------------------------------------------------------------------------- GPTSteps

    @property
    def vocab(self) -> int:
        return int(self.cfg.number_mel_codes)

    @property
    def embeddings(self) -> dec.HostEmbeddings:
        """The GPT's lookup tables on the host (float32), as an engine folder ships them."""
        if self._emb is None:
            t = self.uv.host_tables()
            c = self.cfg
            self._emb = dec.HostEmbeddings(
                *(
                    t[k].cpu().numpy()
                    for k in ("text_embedding", "text_pos", "mel_embedding", "mel_pos", "speed_emb")
                ),
                tokens=dec.GPTTokens(
                    c.start_text_token, c.stop_text_token, c.start_mel_token, c.stop_mel_token
                ),
            )
        return self._emb

    def prompt(self, spk_latents: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int]) -> np.ndarray:
        return self.embeddings.prefix(spk_latents, emovec, text_ids)

    @torch.inference_mode()
    def prefill(
        self, prompts: Sequence[PrefixLike], rows_per_prompt: Sequence[int], max_steps: int
    ) -> StepOutput:
        rows = int(sum(rows_per_prompt))
        logits, hidden, col = self._prefill(prompts, max_steps + 1, rows)
        if rows != len(prompts):  # every row of a line starts from the line's prefill row
            src = torch.from_numpy(np.repeat(np.arange(len(prompts)), rows_per_prompt)).to(self.device)
            self.cache.select_rows(src, col)  # type: ignore[union-attr]
            logits, hidden = logits.index_select(0, src), hidden.index_select(0, src)
        self._col, self._steps, self._n = col, 0, rows
        return _host(logits, hidden)

    @torch.inference_mode()
    def step(self, parents: np.ndarray, tokens: np.ndarray) -> StepOutput:
        if self._col is None:
            raise RuntimeError("step() without a prefill")
        parents = np.asarray(parents, dtype=np.int64)
        if parents.size != self._n or (parents != np.arange(parents.size)).any():
            self.cache.select_rows(torch.from_numpy(parents).to(self.device), self._col)  # type: ignore[union-attr]
        tok = torch.from_numpy(np.asarray(tokens, dtype=np.int64)).to(self.device)
        # the code generated at step k is fed at mel position k + 2 (the original's quirk)
        logits, hidden = self.decode_step(tok, self._col, self._steps + 2)
        self._col, self._steps, self._n = self._col + 1, self._steps + 1, parents.size
        return _host(logits, hidden)

    def end(self) -> None:
        self._col = None

    def decode(
        self,
        prefixes: Sequence[PrefixLike],
        decoders: Sequence[LineDecoder],
        taps: Sequence[loop.CodeTap | None] | None = None,
    ) -> list[Decoded]:
        """The one generate loop over this decoder, `max_lines` lines at a time (taps: streaming)."""
        out: list[Decoded] = []
        n = self.settings.max_lines
        for s in range(0, len(prefixes), n):
            part = None if taps is None else taps[s : s + n]
            out += loop.generate(self, prefixes[s : s + n], decoders[s : s + n], part)
        return out

    def generate(
        self,
        prefixes: Sequence[PrefixLike],
        params: Sequence[SamplingParams],
        seeds: Sequence[int | np.random.Generator],
        *,
        ignore_stop: bool = False,
        prefix_ids: Sequence[int] | None = None,
    ) -> list[Decoded]:
        """Codes per line: seeds are each line's numpy Generator (or its seed), drawn as the numpy runtime
        draws them, so the codes equal its codes for the same logits. ignore_stop (timing only): the
        stop token is never picked."""
        for p in params:
            if p.beams > self.settings.max_beams:
                raise ValueError(f"{p.beams} beams; this decoder was sized for {self.settings.max_beams}")
        start = self.cfg.start_mel_token if prefix_ids is None else prefix_ids[-1]
        decoders = loop.line_decoders(
            prefixes, params, seeds, vocab=self.vocab, start_mel=start, ignore_stop=ignore_stop
        )
        return self.decode(prefixes, decoders)

    def forced(
        self, prefix: PrefixLike, codes: np.ndarray | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Stage 3.5 on the decode path (static cache, graphs on CUDA): logits (n+1, V) and hidden (n+1, D)
        of [prefix, start@0, c_0@2 .. c_{k-1}@k+1] for k = 0..n, float32 (generate_loop.forced)."""
        logits, hidden = loop.forced(self, prefix, np.asarray(codes, np.int64))
        return torch.from_numpy(logits), torch.from_numpy(hidden)

    # ------------------------------------------------------------------------------- latent pass

    @torch.inference_mode()
    def latents(
        self, prefixes: Sequence[PrefixLike], codes: Sequence[np.ndarray | torch.Tensor]
    ) -> list[torch.Tensor]:
        """Stage 3.7, batched: (n_i, D) float32 per line (see the module docstring)."""
        c, dev = self.cfg, self.device
        seqs = []
        for p, cd in zip(prefixes, codes, strict=True):
            ids = torch.as_tensor(np.asarray(cd, np.int64).reshape(-1)).to(dev)
            if ids.numel() + 2 > c.mel_pos_rows:
                raise ValueError(f"{ids.numel()} codes exceed the model's mel positions")
            mel_ids = torch.cat(
                [ids.new_tensor([c.start_mel_token]), ids, ids.new_tensor([c.stop_mel_token])]
            )
            pos = torch.arange(mel_ids.numel(), device=dev)
            mel = self.uv.mel_input_embedding(mel_ids[None], pos[None])[0].to(self.dtype)
            seqs.append(torch.cat([torch.as_tensor(p, dtype=torch.float32).to(dev).to(self.dtype), mel], 0))
        if not seqs:
            return []
        tmax = max(s.shape[0] for s in seqs)
        x = torch.zeros(len(seqs), tmax, c.model_dim, dtype=self.dtype, device=dev)
        valid = torch.zeros(len(seqs), tmax, dtype=torch.bool, device=dev)
        for i, s in enumerate(seqs):
            x[i, tmax - s.shape[0] :] = s
            valid[i, tmax - s.shape[0] :] = True
        hidden = trunk_full(self.uv, x, valid)
        out = []
        for i, cd in enumerate(codes):
            n = int(np.asarray(cd).size)
            out.append(hidden[i, tmax - n - 2 : tmax - 2].float())
        return out


def _host(logits: torch.Tensor, hidden: torch.Tensor) -> StepOutput:
    """The step's outputs as host copies (the decode step's buffers are overwritten by the next one)."""
    return StepOutput(logits.float().cpu().numpy().copy(), hidden.float().cpu().numpy().copy())
