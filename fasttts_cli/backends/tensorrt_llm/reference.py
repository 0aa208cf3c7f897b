"""The worker's `reference` backend: the converted checkpoint in float64 numpy with an explicit KV cache.

It runs `gpt2_numpy.forward` (the math `trtllm_convert.reference_forward` defines), batched over
left-padded rows, with the input embedding of `trtllm_convert.emulate_inputs` (merged table, prompt table
per line, merged position table); the latent pass is `reference_forward` itself. It makes the protocol
and the client testable on any CPU. numpy only.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from fasttts_cli.backends.tensorrt_llm import gpt2_numpy
from fasttts_cli.backends.tensorrt_llm import trtllm_convert as tc
from fasttts_cli.backends.tensorrt_llm.protocol import (
    Channel,
    EngineError,
    Frame,
    GenState,
    Lines,
    RequestError,
    layout_from_config,
    line_inputs,
)


def read_checkpoint(ckpt_dir: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(config.json, tensors) of a converted checkpoint; EngineError when it is not one."""
    cfg_path, w_path = ckpt_dir / tc.CONFIG_FILE, ckpt_dir / tc.WEIGHTS_FILE
    if not (cfg_path.is_file() and w_path.is_file()):
        raise EngineError(
            f"{ckpt_dir}: not a converted GPT checkpoint ({tc.CONFIG_FILE} + {tc.WEIGHTS_FILE} expected)"
        )
    try:
        return json.loads(cfg_path.read_text(encoding="utf-8")), tc.read_safetensors(w_path)
    except (OSError, ValueError, KeyError, struct.error) as e:
        raise EngineError(f"{ckpt_dir}: cannot read the checkpoint: {e}") from None


class ReferenceBackend:
    """The `Backend` of the converted checkpoint (float weights: W8A16/W4A16 checkpoints hold float
    weights until `finalize`, so the reference runs them unquantized)."""

    name = "reference"

    def __init__(self, ckpt_dir: Path) -> None:
        self.config, raw = read_checkpoint(ckpt_dir)
        self.layout = layout_from_config(self.config, ckpt_dir)
        self.raw = raw
        self.w = {k: np.asarray(v, dtype=np.float64) for k, v in raw.items()}
        self.hidden_size = int(self.config["hidden_size"])
        self.tok = self.w["transformer.vocab_embedding.weight"]
        self.pos = self.w["transformer.position_embedding.weight"]
        self.gen: GenState | None = None
        self.kv: list[np.ndarray] = []
        self.mask = np.zeros((0, 0), dtype=bool)
        self.table = np.zeros((0, self.hidden_size))
        self.tasks = np.zeros(0, dtype=np.int64)

    def _forward(self, x: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """x (R, T, D) after the cached tokens, mask (R, S + T); keeps the new cache. The text rows of the
        merged head are masked: only the mel logits are computed."""
        hidden, logits, self.kv = gpt2_numpy.forward(
            self.w, self.config, x, mask=mask, past=self.kv, n_out=self.layout.n_mel
        )
        return hidden, logits

    def _embed(self, ids: np.ndarray, pos: np.ndarray, tasks: np.ndarray) -> np.ndarray:
        return tc.emulate_inputs(
            ids, self.table, pos, self.tok, self.pos, tasks=tasks, prompt_vocab_size=self.layout.n_conds
        )

    def prefill(self, lines: Lines, rows: np.ndarray, max_steps: int, chan: Channel) -> Frame | None:
        ctx = line_inputs(self.layout, lines)
        b = len(ctx)
        tmax = max(ids.size for ids, _, _ in ctx)
        ids = np.zeros((b, tmax), dtype=np.int64)  # left padding: id 0 at position 0, masked out
        pos = np.zeros((b, tmax), dtype=np.int64)
        mask = np.zeros((b, tmax), dtype=bool)
        for i, (li, lp, _) in enumerate(ctx):
            ids[i, tmax - li.size :], pos[i, tmax - li.size :], mask[i, tmax - li.size :] = li, lp, True
        self.table = tc.prompt_table(lines.conds).astype(np.float64)
        self.kv = []
        hidden, logits = self._forward(self._embed(ids, pos, np.arange(b)), mask)
        # every row of a line starts from that line's context (beams are copies until they diverge)
        src = np.repeat(np.arange(b), rows)
        self.kv = [a[src] for a in self.kv]
        self.mask = mask[src]
        self.tasks = src
        self.gen = GenState(src, max_steps)
        chan.reply({"ok": True}, {"logits": logits[src, -1], "hidden": hidden[src, -1]})
        return None

    def handle_step(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.gen is None:
            raise RequestError("step without a prefill")
        parents, tokens = self.gen.check_step(arrays, self.layout)
        self.kv = [a[parents] for a in self.kv]
        self.mask = np.concatenate([self.mask[parents], np.ones((parents.size, 1), dtype=bool)], axis=1)
        pos = np.full((tokens.size, 1), self.gen.step + 2, dtype=np.int64)  # code k at mel position k + 2
        hidden, logits = self._forward(self._embed(tokens[:, None], pos, self.tasks), self.mask)
        self.gen.step += 1
        return {"logits": logits[:, -1], "hidden": hidden[:, -1]}

    def end(self) -> None:
        self.gen, self.kv = None, []

    def latent(self, lines: Lines, codes: list[np.ndarray]) -> np.ndarray:
        self.end()
        out = []
        for b, (ids, pos, rows) in enumerate(line_inputs(self.layout, lines, codes)):
            emb = tc.emulate_inputs(ids, tc.prompt_table(lines.conds[b : b + 1]), pos, self.tok, self.pos)
            hidden, _ = tc.reference_forward(self.raw, self.config, emb)
            out.append(hidden[rows])
        return np.concatenate(out, axis=0)
