"""The fake TensorRT-LLM engine's one step: what a GPT engine built with the GPT attention plugin, packed
input and a contiguous KV cache computes, on the CPU, with the package's one numpy GPT-2
(`backends/tensorrt_llm/gpt2_numpy.py`).

It reads and writes only the tensors bound to the context it runs (as an engine does): context requests
(host_request_types 0) take packed `input_ids` / `position_ids` / per-token `tasks`, write every row's
K/V at positions [0, len) of `present_key_value_<i>` and the logits of each row's last token; generation
requests (1) take one token per row, attend to the row's first `sequence_length - 1` cached positions and
write the new K/V at `sequence_length - 1`. Ids >= vocab_size index the prompt table (prompt tuning:
row task * prompt_vocab_size + id - vocab_size). `last_hidden_state` gets the hidden states when the
engine has that output.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fasttts_cli.backends.tensorrt_llm import gpt2_numpy


def _embed(
    s: Any, ids: np.ndarray, pos: np.ndarray, tasks: np.ndarray, bound: dict[str, torch.Tensor]
) -> np.ndarray:
    w = s.weights
    tok, ptab = w["transformer.vocab_embedding.weight"], w["transformer.position_embedding.weight"]
    vocab = tok.shape[0]
    fake = ids >= vocab
    out = tok[np.where(fake, 0, ids)]
    if fake.any():
        table = bound["prompt_embedding_table"].double().numpy()
        pvs = int(bound["prompt_vocab_size"].reshape(-1)[0])
        out = np.where(fake[:, None], table[np.where(fake, tasks * pvs + ids - vocab, 0)], out)
    return out + ptab[pos]


def _caches(s: Any, bound: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    return [bound[f"present_key_value_{i}"] for i in range(s.num_layers)]


def run_engine(s: Any, bound: dict[str, torch.Tensor]) -> None:
    """One `execute_async_v3` of the fake engine on the tensors bound in a context."""
    ids = bound["input_ids"].reshape(-1).long().numpy()
    pos = bound["position_ids"].reshape(-1).long().numpy()
    caches = _caches(s, bound)
    logits_out, hidden_out = bound["logits"], bound.get("last_hidden_state")
    context = int(bound["host_request_types"].reshape(-1)[0]) == 0
    if context:
        lens = bound["host_context_lengths"].reshape(-1).long().numpy()
        rows = np.split(np.arange(ids.size), np.cumsum(lens)[:-1])
        tasks = (
            bound["tasks"].reshape(-1).long().numpy() if "tasks" in bound else np.zeros(ids.size, np.int64)
        )
    else:
        rows = [np.array([r]) for r in range(ids.size)]
        seq = bound["sequence_length"].reshape(-1).long().numpy()
        tasks = (
            bound["tasks"].reshape(-1).long().numpy() if "tasks" in bound else np.zeros(ids.size, np.int64)
        )
    for r, at in enumerate(rows):
        x = _embed(s, ids[at], pos[at], tasks[at], bound)[None]
        start = 0 if context else int(seq[r]) - 1  # where this row's new tokens go in its cache
        past = [c[r, j, :, :start].double().numpy()[None] for c in caches for j in (0, 1)]
        hidden, logits, present = gpt2_numpy.forward(s.weights, s.config, x, past=past)
        for i, c in enumerate(caches):
            for j in (0, 1):
                new = present[2 * i + j][0, :, start:]
                c[r, j, :, start : start + new.shape[1]] = torch.from_numpy(new).to(c.dtype)
        logits_out[r, : logits.shape[-1]] = torch.from_numpy(logits[0, -1]).to(logits_out.dtype)
        if hidden_out is not None:
            dst = at if context else np.array([r])
            hidden_out[torch.as_tensor(dst)] = torch.from_numpy(hidden[0]).to(hidden_out.dtype)
