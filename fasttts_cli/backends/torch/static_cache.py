"""A preallocated KV cache and the GPT-2 trunk over UnifiedVoice's own weights, with SDPA attention.

`UnifiedVoice.trunk` concatenates past and new keys every call and builds its masked softmax by hand;
that is right for export and reference, but it reallocates the cache each token and cannot be captured
as a CUDA graph. This is the same computation (same modules, same weights, LayerNorms, `gelu_new`, both
final norms) arranged for a static cache:

- one cache for (rows x columns) allocated once: k, v (L, R, H, T, Dh) and `valid` (R, T) bool (the
  column holds a real token of that row). New tokens of a call are written at columns `cols` of rows
  [0, b) with `index_copy_`, so a decode step has fixed shapes and fixed addresses (graph-capturable);
- attention reads columns [0, kv_len) through `F.scaled_dot_product_attention` with a boolean mask
  `valid & causal`, plus the query's own column: a left-padding query then attends to itself instead of
  to nothing, so every value stays finite (an all-masked row would give NaN in SDPA, and NaN keys would
  leak through masking into real rows).

Rows are left-padded (as in `UnifiedVoice.prefix_embeddings`), so the newest token of every row sits in
the same column and one column index serves the whole batch at each step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fasttts_cli.nets.unified_voice import UnifiedVoice


@dataclass
class StaticKVCache:
    k: torch.Tensor  # (L, R, H, T, Dh)
    v: torch.Tensor  # (L, R, H, T, Dh)
    valid: torch.Tensor  # (R, T) bool

    @classmethod
    def allocate(
        cls,
        layers: int,
        rows: int,
        heads: int,
        length: int,
        head_dim: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> StaticKVCache:
        # zeros, not empty: uninitialised memory may hold NaN bit patterns, and a masked NaN key still
        # poisons SDPA (NaN + -inf = NaN); written columns are always finite.
        shape = (layers, rows, heads, length, head_dim)
        return cls(
            torch.zeros(shape, dtype=dtype, device=device),
            torch.zeros(shape, dtype=dtype, device=device),
            torch.zeros((rows, length), dtype=torch.bool, device=device),
        )

    @classmethod
    def for_model(
        cls, uv: UnifiedVoice, rows: int, length: int, *, dtype: torch.dtype, device: torch.device | str
    ) -> StaticKVCache:
        c = uv.cfg
        return cls.allocate(c.layers, rows, c.heads, length, c.head_dim, dtype=dtype, device=device)

    @property
    def rows(self) -> int:
        return int(self.k.shape[1])

    @property
    def length(self) -> int:
        return int(self.k.shape[3])

    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size() + self.valid.numel()

    def reset(self) -> None:
        """Forget every row (k/v keep stale but finite values: masked, never read as real)."""
        self.valid.zero_()

    def select_rows(self, index: torch.Tensor, upto: int) -> None:
        """Rows [0, len(index)) <- rows `index` (beam reorder, finished-row compaction), columns [0, upto).

        Gathers into a temporary first, so an index that reads a row it also overwrites is safe.
        """
        n = int(index.shape[0])
        idx = index.to(self.k.device, torch.long)
        self.k[:, :n, :, :upto] = self.k[:, :, :, :upto].index_select(1, idx)
        self.v[:, :n, :, :upto] = self.v[:, :, :, :upto].index_select(1, idx)
        self.valid[:n, :upto] = self.valid[:, :upto].index_select(0, idx)


def attention_mask(valid: torch.Tensor, cols: torch.Tensor, kv_len: int) -> torch.Tensor:
    """(b, 1, T, kv_len) bool: key column j is visible to the query at column cols[q] when the key is a real
    token of the row at or before the query, or is the query's own column."""
    kcol = torch.arange(kv_len, device=cols.device)
    causal = kcol[None, :] <= cols[:, None]  # (T, kv)
    own = kcol[None, :] == cols[:, None]
    return ((valid[:, None, :kv_len] & causal[None]) | own[None])[:, None]


def _blocks(
    uv: UnifiedVoice,
    x: torch.Tensor,
    mask: torch.Tensor,
    cache: StaticKVCache | None,
    cols: torch.Tensor | None,
    kv_len: int,
) -> torch.Tensor:
    b, t, d = x.shape
    heads = uv.cfg.heads
    for layer, block in enumerate(uv.gpt.h):
        h = block.ln_1(x)
        q, k, v = block.attn.c_attn(h).split(d, dim=-1)
        q = q.view(b, t, heads, -1).transpose(1, 2)
        k = k.view(b, t, heads, -1).transpose(1, 2)
        v = v.view(b, t, heads, -1).transpose(1, 2)
        if cache is not None:
            assert cols is not None
            ck, cv = cache.k[layer, :b], cache.v[layer, :b]
            ck.index_copy_(2, cols, k.to(ck.dtype))
            cv.index_copy_(2, cols, v.to(cv.dtype))
            k, v = ck[:, :, :kv_len], cv[:, :, :kv_len]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + block.attn.c_proj(a.transpose(1, 2).reshape(b, t, d))
        x = x + block.mlp(block.ln_2(x))
    return uv.final_norm(uv.gpt.ln_f(x))


def trunk_cached(
    uv: UnifiedVoice,
    x: torch.Tensor,
    cache: StaticKVCache,
    cols: torch.Tensor,
    kv_len: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """New tokens x (b, T, D) of rows [0, b) at columns `cols` (T,) long; keys read from [0, kv_len).

    The caller marks the new columns in `cache.valid` first (real tokens True, left padding False).
    Returns (logits (b, V) of the last new token, hidden (b, T, D) after ln_f and final_norm).
    """
    mask = attention_mask(cache.valid[: x.shape[0]], cols, kv_len)
    hidden = _blocks(uv, x, mask, cache, cols, kv_len)
    return uv.mel_head(hidden[:, -1]), hidden


def trunk_full(uv: UnifiedVoice, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """No cache: x (b, T, D) with valid (b, T) bool (left padding False) -> hidden (b, T, D)."""
    t = x.shape[1]
    cols = torch.arange(t, device=x.device)
    return _blocks(uv, x, attention_mask(valid.to(torch.bool), cols, t), None, None, t)
