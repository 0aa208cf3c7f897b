"""The GPT-2 trunk for ONNX Runtime's CPU provider with the KV cache updated in place.

The classic trunk graph (`TrunkGraph`) takes past keys/values and returns them concatenated with the new
ones: every decode step copies the whole cache (11% of an int8 step, more with 3 beams). This form
attends with ONNX Runtime's `com.microsoft.GroupQueryAttention` (kv heads = heads, so plain multi-head
attention) over a preallocated cache: the runtime binds each layer's past and present to the same buffer
and the kernel writes the new entries at each row's own length, so nothing is copied.

Rows are right-aligned to position 0 (no left padding): `seqlens_k[b]` = the row's total length - 1.
- prompt call (new tokens S == total_sequence_length): rows right-padded to S, causal;
- decode call (S == 1): row b writes at seqlens_k[b] and attends to 0..seqlens_k[b];
- a chunked prompt after a past (S > 1) is allowed for batch 1 only (the kernel's rule).
`last_index[b]` picks the position whose logits are computed (the row's last real token), so a prompt
call does not run the head over every position. The hidden states after both LayerNorms come back for
every position (the latent pass reads them).

GroupQueryAttention is a contrib op of ONNX Runtime: TensorRT cannot parse it, so TensorRT and CUDA
presets keep the classic trunk. Head size must be a multiple of 8 (the CPU kernel's rule).

Since this graph is for ONNX Runtime only, it also uses the contrib ops that replace chains of small
element-wise nodes: GroupQueryAttention takes the packed QKV (no Slice nodes), FastGelu takes the c_fc
bias, and SkipLayerNormalization does bias + residual add + the next LayerNorm in one node (1085 nodes
become 244 in an int8 trunk; a decode step measured 0-4% faster). The eager forward of each computes the
same function in PyTorch, which export verification compares.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# IO names (decode.py's names where they are the same)
SEQLENS_K = "seqlens_k"
TOTAL_LEN = "total_sequence_length"
LAST_INDEX = "last_index"


class _GQA(torch.autograd.Function):
    """Eager: the kernel's semantics in PyTorch (so export verification compares like with like);
    exported: one GroupQueryAttention node."""

    @staticmethod
    def forward(ctx, qkv, past_k, past_v, seqlens_k, total_len, heads: int):  # type: ignore[override]
        q, k, v = qkv.chunk(3, dim=-1)
        b, s, d = q.shape
        dh = d // heads
        total = torch.as_tensor(total_len).reshape(()).long()
        cap = max(int(past_k.shape[2]), int(total))
        pk = torch.zeros(b, heads, cap, dh, dtype=q.dtype)
        pv = torch.zeros_like(pk)
        pk[:, :, : past_k.shape[2]] = past_k
        pv[:, :, : past_v.shape[2]] = past_v
        out = torch.zeros_like(q)
        qh = q.view(b, s, heads, dh).transpose(1, 2)
        kh = k.view(b, s, heads, dh).transpose(1, 2)
        vh = v.view(b, s, heads, dh).transpose(1, 2)
        prompt = s == int(total)
        for r in range(b):
            n = int(seqlens_k[r]) + 1  # the row's total length
            new = n if prompt else s  # prompt rows are right-padded to s
            start = n - new
            pk[r, :, start:n] = kh[r, :, :new]
            pv[r, :, start:n] = vh[r, :, :new]
            if prompt and new < s:  # the kernel also writes the padded tail; its values are never read
                pk[r, :, n:s] = kh[r, :, new:]
                pv[r, :, n:s] = vh[r, :, new:]
            scores = qh[r, :, :new] @ pk[r, :, :n].transpose(-1, -2) / math.sqrt(dh)
            causal = torch.arange(n)[None, :] <= (torch.arange(new) + start)[:, None]
            scores = scores.masked_fill(~causal, float("-inf"))
            o = torch.softmax(scores, dim=-1) @ pv[r, :, :n]
            out[r, :new] = o.transpose(0, 1).reshape(new, d)
        return out, pk, pv

    @staticmethod
    def symbolic(g, qkv, past_k, past_v, seqlens_k, total_len, heads: int):  # type: ignore[no-untyped-def]
        from torch.onnx import symbolic_helper

        absent = symbolic_helper._optional_input_placeholder_tensor(g)
        return g.op(
            "com.microsoft::GroupQueryAttention",
            qkv,  # packed: key and value inputs left empty
            absent,
            absent,
            past_k,
            past_v,
            seqlens_k,
            total_len,
            num_heads_i=heads,
            kv_num_heads_i=heads,
            outputs=3,
        )


class _FastGelu(torch.autograd.Function):
    """gelu_new (tanh form) of x + bias."""

    @staticmethod
    def forward(ctx, x, bias):  # type: ignore[override]
        return F.gelu(x + bias, approximate="tanh")

    @staticmethod
    def symbolic(g, x, bias):  # type: ignore[no-untyped-def]
        return g.op("com.microsoft::FastGelu", x, bias)


class _SkipLayerNorm(torch.autograd.Function):
    """(LayerNorm(x + skip + bias), x + skip + bias): the residual stream and the next block's input."""

    @staticmethod
    def forward(ctx, x, skip, gamma, beta, bias, eps: float):  # type: ignore[override]
        total = x + skip + bias
        return F.layer_norm(total, (total.shape[-1],), gamma, beta, eps), total

    @staticmethod
    def symbolic(g, x, skip, gamma, beta, bias, eps: float):  # type: ignore[no-untyped-def]
        out = g.op(
            "com.microsoft::SkipLayerNormalization", x, skip, gamma, beta, bias, epsilon_f=eps, outputs=4
        )
        return out[0], out[3]  # outputs 1, 2 (mean, inverse std) are training outputs, left unread


def _matmul(x: torch.Tensor, conv: nn.Module) -> torch.Tensor:
    """A Conv1D without its bias (the fused op that follows adds it)."""
    return torch.matmul(x, conv.weight)


def _skip_ln(
    x: torch.Tensor, skip: torch.Tensor, ln: nn.LayerNorm, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return _SkipLayerNorm.apply(x, skip, ln.weight, ln.bias, bias, ln.eps)


class GqaTrunkGraph(nn.Module):
    """forward(inputs_embeds (B,S,D), seqlens_k (B,) int32, total_sequence_length () int32,
    last_index (B,) int64, k_0, v_0, ..., k_{L-1}, v_{L-1} (B,H,P,Dh))
    -> (logits (B, V) at last_index, hidden (B, S, D) after ln_f and final_norm, present k/v per layer).
    """

    def __init__(self, uv: nn.Module) -> None:
        super().__init__()
        self.uv = uv
        self.heads = int(uv.cfg.heads)

    def forward(self, inputs_embeds, seqlens_k, total_len, last_index, *past):
        # GPT-2 blocks regrouped around the fused ops: x is the residual stream, h the LayerNorm of it
        # that the next sub-block reads; each SkipLayerNorm closes one sub-block and opens the next.
        blocks = list(self.uv.gpt.h)
        x = inputs_embeds
        h = blocks[0].ln_1(x)
        present = []
        for i, block in enumerate(blocks):
            attn, mlp = block.attn, block.mlp
            qkv = attn.c_attn(h)
            a, pk, pv = _GQA.apply(qkv, past[2 * i], past[2 * i + 1], seqlens_k, total_len, self.heads)
            h, x = _skip_ln(_matmul(a, attn.c_proj), x, block.ln_2, attn.c_proj.bias)
            m = _FastGelu.apply(_matmul(h, mlp.c_fc), mlp.c_fc.bias)
            ln = blocks[i + 1].ln_1 if i + 1 < len(blocks) else self.uv.gpt.ln_f
            h, x = _skip_ln(_matmul(m, mlp.c_proj), x, ln, mlp.c_proj.bias)
            present += [pk, pv]
        hidden = self.uv.final_norm(h)
        rows = torch.arange(hidden.shape[0])
        # (B, 1, D) keeps the head a MatMul (a 2-D input exports as Gemm, which the weight-only
        # quantizer does not take: the head would stay fp32 in int8/int4 engines)
        logits = self.uv.mel_head(hidden[rows, last_index].unsqueeze(1))[:, 0]
        return (logits, hidden, *present)
