"""The one generate loop: sampling and beam / row bookkeeping over any `GPTSteps` backend.

Every backend (ONNX Runtime full-KV and in-place trunks, the TensorRT-LLM worker client, torch) only
prefills and steps rows (backends/protocol.py); this module decides which rows continue and what they
are fed. Each line owns a `LineDecoder` (its own sampling params and random generator), so a line's
codes never depend on its batch-mates; a finished line's rows leave the batch; beams reorder by parent.

Streaming (`indextts2.streaming`): a line may have a tap, `tap(code)`, called as each of its codes is
drawn (between two GPT steps, so the tap may run other stages, the latent pass included: every backend's
latent pass has its own buffers). Only one-beam lines are tapped: a beam's codes are provisional until
its line ends. A tap returning False ends its line at once (its listener left).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fasttts_cli.backends.protocol import GPTSteps
from fasttts_cli.indextts2.sampling import Decoded, LineDecoder, SamplingParams

# A streamed line's tap: the code just drawn -> False to end the line now, anything else to go on.
CodeTap = Callable[[int], bool | None]


class LineRows:
    """The batch rows of each line while lines finish: a line's beams sit in consecutive rows, each line
    samples from its own rows with its own LineDecoder, and a finished line's rows leave."""

    def __init__(
        self,
        decoders: Sequence[LineDecoder],
        max_codes: int,
        taps: Sequence[CodeTap | None] | None = None,
    ) -> None:
        for d in decoders:
            if d.params.max_tokens > max_codes:
                raise ValueError(
                    f"max_tokens {d.params.max_tokens} exceeds the {max_codes} mel positions of this engine"
                )
        self.decoders = decoders
        self.taps = list(taps) if taps is not None else [None] * len(decoders)
        rows = [d.rows for d in decoders]
        self.src = np.repeat(np.arange(len(decoders)), rows)  # the prefill row of every beam row
        self.offsets = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
        self.active = list(range(len(decoders)))

    def step(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Every active line samples from its rows of `logits` (rows, V). Returns (parents, tokens) for
        the next step: row r continues old row parents[r] and is fed tokens[r]; None once all are done."""
        index, tokens, still = [], [], []
        row = 0
        for li in self.active:
            dec, o = self.decoders[li], self.offsets[li]
            had = dec.n_generated
            parents, toks = dec.step(logits[o : o + dec.rows])
            tap = self.taps[li]
            if tap is not None and dec.rows == 1 and dec.n_generated > had and tap(int(toks[0])) is False:
                dec.cancel()
            if not dec.done:
                index.append(o + parents)
                tokens.append(toks)
                still.append(li)
                self.offsets[li] = row
                row += dec.rows
        self.active = still
        if not still:
            return None
        return np.concatenate(index), np.concatenate(tokens)


class NoStopDecoder(LineDecoder):
    """A LineDecoder that never picks the stop token: with max_tokens N it generates exactly N codes.
    For timing (bench `--tokens N`), never for real synthesis."""

    def step(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits = np.array(logits, dtype=np.float32, copy=True)
        logits[:, self.params.stop_token] = -np.inf
        return super().step(logits)


def line_decoders(
    prompts: Sequence[Any],
    params: SamplingParams | Sequence[SamplingParams],
    generators: Sequence[np.random.Generator | int | None],
    *,
    vocab: int,
    start_mel: int,
    ignore_stop: bool = False,
) -> list[LineDecoder]:
    """One LineDecoder per line as every engine makes them: the line's params and generator, the
    engine's mel vocabulary, and the dummy ids the original's generate() is fed (repetition penalty)."""
    if isinstance(params, SamplingParams):
        params = [params] * len(prompts)
    if not (len(params) == len(generators) == len(prompts)):
        raise ValueError("one params and one generator per prefix")
    cls = NoStopDecoder if ignore_stop else LineDecoder
    prefix_ids = (1, start_mel)
    return [cls(p, g, vocab=vocab, prefix_ids=prefix_ids) for p, g in zip(params, generators, strict=True)]


def generate(
    gpt: GPTSteps,
    prompts: Sequence[Any],
    decoders: Sequence[LineDecoder],
    taps: Sequence[CodeTap | None] | None = None,
) -> list[Decoded]:
    """Sample codes for every line at once: prompts[i] made by `gpt.prompt`, decoders[i] the line's
    params and generator (its `rows` = beams), taps[i] its streaming tap (module docstring). One Decoded
    per line (codes without the stop token)."""
    if len(prompts) != len(decoders):
        raise ValueError("one decoder per prompt")
    if not prompts:
        return []
    for d in decoders:
        if d.vocab != gpt.vocab:
            raise ValueError(f"decoder vocab {d.vocab}; this GPT has {gpt.vocab} mel codes")
    lines = LineRows(decoders, gpt.max_codes, taps)
    out = gpt.prefill(prompts, [d.rows for d in decoders], max(d.params.max_tokens for d in decoders))
    try:
        while (nxt := lines.step(out.logits)) is not None:
            out = gpt.step(*nxt)
    finally:
        gpt.end()
    return [d.result() for d in decoders]


def generate_codes(
    gpt: GPTSteps, prompts: Sequence[Any], params: SamplingParams, seeds: Sequence[int | None]
) -> list[Decoded]:
    """`generate` with one LineDecoder per line from `params` and a per-line seed."""
    return generate(gpt, prompts, [LineDecoder(params, s, vocab=gpt.vocab) for s in seeds])


def forced(gpt: GPTSteps, prompt: Any, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The generation path under teacher forcing (stage 3.5) for one line: (logits (n+1, V), hidden
    (n+1, D)); row k follows [prefix, start@0, c_0@2 .. c_{k-1}@k+1]."""
    codes = np.asarray(codes, dtype=np.int64).reshape(-1)
    out = gpt.prefill([prompt], [1], codes.size)
    logits, hidden = [out.logits[0]], [out.hidden[0]]
    one = np.zeros(1, dtype=np.int64)
    try:
        for c in codes:
            out = gpt.step(one, c[None])
            logits.append(out.logits[0])
            hidden.append(out.hidden[0])
    finally:
        gpt.end()
    return np.stack(logits), np.stack(hidden)


class LoopMethods:
    """`generate` / `generate_codes` / `forced` on a GPTSteps backend itself, through the one loop (for
    callers that hold a backend: tests, the bench, the worker client's own checks)."""

    def generate(self, prompts: Sequence[Any], decoders: Sequence[LineDecoder]) -> list[Decoded]:
        return generate(self, prompts, decoders)  # type: ignore[arg-type]

    def generate_codes(
        self, prompts: Sequence[Any], params: SamplingParams, seeds: Sequence[int | None]
    ) -> list[Decoded]:
        return generate_codes(self, prompts, params, seeds)  # type: ignore[arg-type]

    def forced(self, prompt: Any, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return forced(self, prompt, codes)  # type: ignore[arg-type]
