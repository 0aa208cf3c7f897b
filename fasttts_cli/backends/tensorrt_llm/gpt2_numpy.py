"""The one numpy GPT-2 forward of the converted TensorRT-LLM checkpoint, in float64.

It is the executable definition of what the engine computes (GPT-2 blocks, ln_f, final_norm, biased head;
`trtllm_convert` docstring) and every CPU stand-in for the engine runs it: `trtllm_convert.reference_forward`
(one causal pass), the worker's `reference` backend (batched rows with a KV cache) and the fake TensorRT-LLM
engine (`tools/fakes/trtllm_runtime.py`). numpy only: it also runs inside TensorRT-LLM's environment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# Masked attention scores: finite, so a fully padded query row stays finite (its output is never read);
# exp() of it underflows to exactly 0, as exp(-inf) would.
PAD_SCORE = -1e30


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def gelu_new(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def forward(
    weights: Mapping[str, np.ndarray],
    config: Mapping[str, Any],
    x: np.ndarray,
    *,
    mask: np.ndarray | None = None,
    past: Sequence[np.ndarray] = (),
    n_out: int | None = None,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """x (R, T, D) new token embeddings after S cached ones; mask (R, S + T) keys that exist (None: all);
    past [k_0, v_0, k_1, ...] each (R, H, S, Dh), empty for a first pass. Causal within the new tokens.

    Returns (hidden after ln_f and final_norm (R, T, D), logits (R, T, n_out or the whole head),
    present [k_0, v_0, ...] each (R, H, S + T, Dh))."""

    def w(name: str) -> np.ndarray:
        return np.asarray(weights[name], dtype=np.float64)  # no copy for the reference's float64 weights

    eps = float(config["norm_epsilon"])
    heads = int(config["num_attention_heads"])
    q_scaling = float(config.get("q_scaling", 1.0))
    x = np.asarray(x, dtype=np.float64)
    r, t, d = x.shape
    dh = d // heads
    s = past[0].shape[2] if len(past) else 0
    causal = np.concatenate([np.ones((t, s), dtype=bool), np.tril(np.ones((t, t), dtype=bool))], axis=1)
    allowed = causal[None, None] if mask is None else causal[None, None] & mask[:, None, None, :]
    present = []
    for i in range(int(config["num_hidden_layers"])):
        p = f"transformer.layers.{i}"
        h = layer_norm(x, w(f"{p}.input_layernorm.weight"), w(f"{p}.input_layernorm.bias"), eps)
        qkv = h @ w(f"{p}.attention.qkv.weight").T + w(f"{p}.attention.qkv.bias")
        q, k, v = (qkv[..., j * d : (j + 1) * d].reshape(r, t, heads, dh).swapaxes(1, 2) for j in range(3))
        if s:
            k = np.concatenate([past[2 * i], k], axis=2)
            v = np.concatenate([past[2 * i + 1], v], axis=2)
        present += [k, v]
        sc = np.where(allowed, q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh) / q_scaling, PAD_SCORE)
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        a = ((sc / sc.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(r, t, d)
        x = x + a @ w(f"{p}.attention.dense.weight").T + w(f"{p}.attention.dense.bias")
        h = layer_norm(x, w(f"{p}.post_layernorm.weight"), w(f"{p}.post_layernorm.bias"), eps)
        f = gelu_new(h @ w(f"{p}.mlp.fc.weight").T + w(f"{p}.mlp.fc.bias"))
        x = x + f @ w(f"{p}.mlp.proj.weight").T + w(f"{p}.mlp.proj.bias")
    x = layer_norm(x, w("transformer.ln_f.weight"), w("transformer.ln_f.bias"), eps)
    x = layer_norm(x, w("transformer.ln_f.final_norm.weight"), w("transformer.ln_f.final_norm.bias"), eps)
    head, bias = w("lm_head.weight"), w("lm_head.bias")
    if n_out is not None:  # the merged head's text rows are masked: callers that only want mel codes
        head, bias = head[:n_out], bias[:n_out]
    return x, x @ head.T + bias, present
