"""The GPT stage of IndexTTS-2 as a worker process: a TensorRT-LLM engine (or its numpy reference) driven
one step at a time over stdin/stdout, so that sampling stays on OUR side (`indextts2/sampling.py`).

Why a process: TensorRT-LLM 1.2 lives in its own Python 3.12 environment ($FASTTTS_TRTLLM_PYTHON) with
its own torch and numpy, so our runtime cannot import it. This module imports only numpy, the standard
library and `fasttts_cli.build.trtllm_convert` (numpy only) at module level, and runs there as
``python -m fasttts_cli.trtllm_worker ENGINE_DIR`` or as a script path.

Backends
--------
- ``trtllm``: an engine built by ``trtllm_convert.py build`` (``IndexTTS2GPTForCausalLM``), run through
  TensorRT-LLM's Python ``GenerationSession``. NOT yet run anywhere (no GPU where it was written); the
  GPU acceptance script is its first check.
- ``reference``: the converted checkpoint (``config.json`` + ``rank0.safetensors``) in float64 numpy with
  an explicit KV cache, computing what `trtllm_convert.reference_forward` defines. It makes the protocol
  and the client testable on any CPU.
``auto`` picks ``trtllm`` when the folder holds ``rank0.engine``, else ``reference``.

What the GPT sees (trtllm_convert's four adaptations): line b's context is
``[fake ids vocab+j for its conditioning rows | merged text ids | start_mel]`` with positions
``[zero row | text positions | mel 0]``; its prompt table holds the conditioning rows (task b); code k is
fed at mel position k + 2; the latent pass is a second, teacher-forced context pass at mel positions
0..n+1. Rows: a line may own several rows (beams); every row of line b is a copy of b's context, and a
step may make row r continue from any row of the SAME line (``parents``), as `GPTDecoder` reorders its
KV cache. All rows advance together; rows of finished lines are fed a dummy token (parent = itself) and
their output is ignored (TensorRT-LLM's Python runtime keeps a static batch, so this costs nothing extra
there).

Framing (both directions)
-------------------------
::

    frame   := MAGIC "FTW1" | u32 LE header_len | header | blob_0 | blob_1 | ...
    header  := UTF-8 JSON object; "arrays": [[name, nbytes], ...] lists the blobs in order
    blob_i  := np.save() bytes of one array (allow_pickle=False on read)

Requests carry ``"op"``; responses carry ``"ok"`` (true, or false with ``"error"`` and ``"kind"``:
``request`` for a bad request and ``internal`` for a failure while serving it (the worker carries on
after both), ``engine`` for an engine that cannot be loaded (first frame; the worker exits 3),
``protocol`` for bytes that are not a frame (the worker exits 2)). The worker speaks first: a ``ready``
frame (backend, layout, hidden size) or an error frame. Operations:

- ``prefill``  arrays conds (B, n_conds, D) f32, text_ids (sum L_b,) i64, text_lens (B,) i64, rows (B,)
  i64; field max_steps. Starts a generation over sum(rows) rows; returns logits (R, n_mel) f32 at the
  start token and hidden (R, D) f32 (after ln_f and final_norm).
- ``step``     arrays parents (R,) i64, tokens (R,) i64: row r continues from row parents[r] and is fed
  tokens[r] (the code of this step, at mel position step + 2). Returns logits and hidden as above.
- ``end``      ends the generation (optional: prefill, latent and close end it too).
- ``latent``   arrays conds, text_ids, text_lens, codes (sum n_b,) i64, code_lens (B,) i64: the
  teacher-forced pass; returns hidden (sum n_b, D) f32, line b's n_b rows in order.
- ``close``    answers ok and exits 0 (so does end of input).

Anything the library prints goes to stderr: the worker keeps the real stdout for frames only.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import struct
import sys
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np

if __package__ in (None, ""):  # run as a script path: make the package next to this file importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fasttts_cli.build import trtllm_convert as tc  # numpy only

PROTOCOL = 1
MAGIC = b"FTW1"
_HEAD = struct.Struct("<4sI")
Frame = tuple[dict[str, Any], dict[str, np.ndarray]]  # (header without "arrays", arrays by name)
MAX_HEADER = 1 << 20  # a header is a few hundred bytes; anything bigger is a desynchronised stream
ENGINE_FILE = "rank0.engine"


# ------------------------------------------------------------------------------------------ framing


class FrameError(ValueError):
    """The byte stream is not a valid frame (the two sides are out of step; not recoverable)."""


def encode_frame(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None) -> bytes:
    blobs = []
    index = []
    for name, a in (arrays or {}).items():
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
        blobs.append(buf.getvalue())
        index.append([name, len(blobs[-1])])
    head = json.dumps({**header, "arrays": index}, separators=(",", ":")).encode("utf-8")
    return b"".join([_HEAD.pack(MAGIC, len(head)), head, *blobs])


def write_frame(
    stream: BinaryIO, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None
) -> None:
    stream.write(encode_frame(header, arrays))
    stream.flush()


def _read_exact(stream: BinaryIO, n: int, what: str) -> bytes:
    parts = []
    left = n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise FrameError(f"stream ended inside a frame ({what}: {n - left} of {n} bytes)")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_frame(stream: BinaryIO) -> Frame | None:
    """One frame, or None at a clean end of stream (between frames)."""
    first = stream.read(_HEAD.size)
    if not first:
        return None
    if len(first) < _HEAD.size:
        first += _read_exact(stream, _HEAD.size - len(first), "frame head")
    magic, n = _HEAD.unpack(first)
    if magic != MAGIC:
        raise FrameError(f"bad frame magic {magic!r} (expected {MAGIC!r}): not a worker frame")
    if n > MAX_HEADER:
        raise FrameError(f"frame header of {n} bytes exceeds {MAX_HEADER}")
    try:
        header = json.loads(_read_exact(stream, n, "header"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FrameError(f"frame header is not JSON: {e}") from None
    if not isinstance(header, dict) or not isinstance(header.get("arrays", []), list):
        raise FrameError("frame header must be a JSON object with an 'arrays' list")
    arrays = {}
    for item in header.pop("arrays", []):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], int) and item[1] >= 0):
            raise FrameError(f"bad array entry {item!r} in the frame header")
        blob = _read_exact(stream, item[1], f"array {item[0]!r}")
        try:
            arrays[str(item[0])] = np.load(io.BytesIO(blob), allow_pickle=False)
        except ValueError as e:
            raise FrameError(f"array {item[0]!r} is not a .npy blob: {e}") from None
    return header, arrays


# ------------------------------------------------------------------------------------------ requests


class RequestError(ValueError):
    """A well-formed frame with a bad request (wrong op, shapes, ids); the worker carries on."""


class EngineError(RuntimeError):
    """The engine folder cannot be used; reported in the first frame, then the worker exits."""


@dataclass(frozen=True)
class Lines:
    """Decoded line inputs of a prefill or latent request."""

    conds: np.ndarray  # (B, n_conds, D) float32
    texts: list[np.ndarray]  # B x (L_b,) int64


def _array(arrays: Mapping[str, np.ndarray], name: str, kind: str, ndim: int) -> np.ndarray:
    if name not in arrays:
        raise RequestError(f"missing array {name!r}")
    a = arrays[name]
    if a.ndim != ndim or a.dtype.kind not in kind:
        raise RequestError(f"array {name!r}: {a.ndim}-D {a.dtype}, expected {ndim}-D of kind {kind!r}")
    return a


def _split(flat: np.ndarray, lens: np.ndarray, what: str) -> list[np.ndarray]:
    if np.any(lens < 0) or int(lens.sum()) != flat.size:
        raise RequestError(f"{what} lengths {lens.tolist()} do not add up to {flat.size}")
    return [a.astype(np.int64) for a in np.split(flat, np.cumsum(lens)[:-1])]


def parse_lines(arrays: Mapping[str, np.ndarray], layout: tc.MergedLayout, hidden: int) -> Lines:
    conds = _array(arrays, "conds", "f", 3).astype(np.float32)
    lens = _array(arrays, "text_lens", "iu", 1)
    if conds.shape[1:] != (layout.n_conds, hidden):
        raise RequestError(f"conds {conds.shape}: expected (B, {layout.n_conds}, {hidden})")
    if lens.size != conds.shape[0] or lens.size == 0:
        raise RequestError(f"{lens.size} text lengths for {conds.shape[0]} lines (need >= 1 line)")
    texts = _split(_array(arrays, "text_ids", "iu", 1), lens, "text")
    for t in texts:
        if t.size and (t.min() < 0 or t.max() >= layout.text_vocab):
            raise RequestError(f"text ids outside [0, {layout.text_vocab})")
    return Lines(conds, texts)


def line_inputs(
    layout: tc.MergedLayout, lines: Lines, codes: Sequence[np.ndarray] | None = None
) -> list[tuple[np.ndarray, np.ndarray, slice | None]]:
    """Per line (merged ids, position ids, latent rows): the generation context [prefix | start] or,
    with codes, the latent pass. ValueError from the layout (too many tokens) becomes a RequestError."""
    out = []
    try:
        for b, text in enumerate(lines.texts):
            if codes is None:
                ids, pos = layout.generation_inputs(text)
                out.append((ids, pos, None))
            else:
                c = codes[b]
                if c.size and (c.min() < 0 or c.max() >= layout.n_mel):
                    raise RequestError(f"line {b}: codes outside [0, {layout.n_mel})")
                if c.size + 2 > layout.mel_pos_rows:
                    raise RequestError(
                        f"line {b}: {c.size} codes exceed the {layout.mel_pos_rows} mel positions"
                    )
                out.append(layout.latent_inputs(text, c))
    except ValueError as e:
        if isinstance(e, RequestError):
            raise
        raise RequestError(str(e)) from None
    return out


@dataclass
class GenState:
    """Bookkeeping of one generation shared by the backends: which line owns each row, and how many
    codes have been fed (the next code goes to mel position step + 2)."""

    line_of_row: np.ndarray  # (R,) int64
    max_steps: int
    step: int = 0

    def check_step(self, arrays: Mapping[str, np.ndarray], layout: tc.MergedLayout) -> tuple[np.ndarray, ...]:
        parents = _array(arrays, "parents", "iu", 1).astype(np.int64)
        tokens = _array(arrays, "tokens", "iu", 1).astype(np.int64)
        rows = self.line_of_row.size
        if parents.size != rows or tokens.size != rows:
            raise RequestError(
                f"parents {parents.size} / tokens {tokens.size}: this generation has {rows} rows"
            )
        if parents.min() < 0 or parents.max() >= rows:
            raise RequestError(f"parent rows outside [0, {rows})")
        if np.any(self.line_of_row[parents] != self.line_of_row):
            raise RequestError("a row may only continue from a row of its own line")
        if tokens.min() < 0 or tokens.max() >= layout.n_mel:
            raise RequestError(f"tokens outside the mel codes [0, {layout.n_mel})")
        if self.step >= self.max_steps:  # prefill bounds max_steps by the mel positions
            raise RequestError(f"step {self.step + 1} exceeds this generation's {self.max_steps} steps")
        return parents, tokens


class Backend(Protocol):
    layout: tc.MergedLayout
    hidden_size: int
    name: str

    def prefill(self, lines: Lines, rows: np.ndarray, max_steps: int, chan: Channel) -> Frame | None:
        """Start a generation and answer it (the trtllm backend also answers its steps, and returns the
        first request that is not one); returns that request, or None."""

    def handle_step(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def end(self) -> None: ...

    def latent(self, lines: Lines, codes: list[np.ndarray]) -> np.ndarray: ...


# ------------------------------------------------------------------------------------------ reference

_PAD_SCORE = -1e30  # masked attention scores: finite, so fully padded query rows stay finite


class ReferenceBackend:
    """The converted checkpoint in float64 numpy with a KV cache: exactly the math of
    `trtllm_convert.reference_forward` (GPT-2 blocks, ln_f, final_norm, biased head), batched over
    left-padded rows, with the input embedding built by `trtllm_convert.emulate_inputs` (merged table,
    prompt table per line, merged position table). The latent pass calls `reference_forward` itself."""

    name = "reference"

    def __init__(self, ckpt_dir: Path) -> None:
        cfg_path, w_path = ckpt_dir / tc.CONFIG_FILE, ckpt_dir / tc.WEIGHTS_FILE
        if not (cfg_path.is_file() and w_path.is_file()):
            raise EngineError(
                f"{ckpt_dir}: not a converted GPT checkpoint ({tc.CONFIG_FILE} + {tc.WEIGHTS_FILE} expected)"
            )
        try:
            self.config = json.loads(cfg_path.read_text(encoding="utf-8"))
            raw = tc.read_safetensors(w_path)
        except (OSError, ValueError, KeyError, struct.error) as e:
            raise EngineError(f"{ckpt_dir}: cannot read the checkpoint: {e}") from None
        # W8A16/W4A16 checkpoints hold float weights until `finalize`: the reference runs them unquantized
        self.layout = layout_from_config(self.config, ckpt_dir)
        self.w = {k: np.asarray(v, dtype=np.float64) for k, v in raw.items()}
        self.raw = raw
        self.hidden_size = int(self.config["hidden_size"])
        self.layers = int(self.config["num_hidden_layers"])
        self.heads = int(self.config["num_attention_heads"])
        self.eps = float(self.config["norm_epsilon"])
        self.tok = raw["transformer.vocab_embedding.weight"].astype(np.float64)
        self.pos = raw["transformer.position_embedding.weight"].astype(np.float64)
        self.gen: GenState | None = None
        self.kv: list[np.ndarray] = []
        self.mask = np.zeros((0, 0), dtype=bool)
        self.table = np.zeros((0, self.hidden_size))
        self.tasks = np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------------ math

    def _forward(self, x: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """x (R, T, D) new tokens after the cached ones, mask (R, S + T) keys that exist; appends to
        self.kv. Returns (hidden after both norms (R, T, D), mel logits (R, T, n_mel))."""
        r, t, d = x.shape
        heads, dh = self.heads, d // self.heads
        s = mask.shape[1] - t
        causal = np.concatenate([np.ones((t, s), dtype=bool), np.tril(np.ones((t, t), dtype=bool))], axis=1)
        allowed = causal[None, None] & mask[:, None, None, :]  # (R, 1, T, S + T)
        w = self.w
        new_kv = []
        for i in range(self.layers):
            p = f"transformer.layers.{i}"
            h = tc.layer_norm(x, w[f"{p}.input_layernorm.weight"], w[f"{p}.input_layernorm.bias"], self.eps)
            qkv = h @ w[f"{p}.attention.qkv.weight"].T + w[f"{p}.attention.qkv.bias"]
            q, k, v = (
                qkv[..., j * d : (j + 1) * d].reshape(r, t, heads, dh).transpose(0, 2, 1, 3) for j in range(3)
            )
            if self.kv:
                k = np.concatenate([self.kv[2 * i], k], axis=2)
                v = np.concatenate([self.kv[2 * i + 1], v], axis=2)
            new_kv += [k, v]
            sc = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh) / float(self.config.get("q_scaling", 1.0))
            sc = np.where(allowed, sc, _PAD_SCORE)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            a = (sc / sc.sum(-1, keepdims=True)) @ v
            a = a.transpose(0, 2, 1, 3).reshape(r, t, d)
            x = x + a @ w[f"{p}.attention.dense.weight"].T + w[f"{p}.attention.dense.bias"]
            h = tc.layer_norm(x, w[f"{p}.post_layernorm.weight"], w[f"{p}.post_layernorm.bias"], self.eps)
            f = tc.gelu_new(h @ w[f"{p}.mlp.fc.weight"].T + w[f"{p}.mlp.fc.bias"])
            x = x + f @ w[f"{p}.mlp.proj.weight"].T + w[f"{p}.mlp.proj.bias"]
        self.kv = new_kv
        x = tc.layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], self.eps)
        x = tc.layer_norm(
            x, w["transformer.ln_f.final_norm.weight"], w["transformer.ln_f.final_norm.bias"], self.eps
        )
        n_mel = self.layout.n_mel  # the text rows of the merged head are masked: never returned
        logits = x @ w["lm_head.weight"][:n_mel].T + w["lm_head.bias"][:n_mel]
        return x, logits

    def _embed(self, ids: np.ndarray, pos: np.ndarray, tasks: np.ndarray) -> np.ndarray:
        return tc.emulate_inputs(
            ids, self.table, pos, self.tok, self.pos, tasks=tasks, prompt_vocab_size=self.layout.n_conds
        )

    # ------------------------------------------------------------------ protocol

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


def layout_from_config(config: Mapping[str, Any], where: Path) -> tc.MergedLayout:
    """Our `indextts2` section: at the top of a converted checkpoint's config.json, or under
    `pretrained_config` in the config.json trtllm-build writes next to the engine."""
    sec = config.get("indextts2") or config.get("pretrained_config", {}).get("indextts2")
    if not isinstance(sec, Mapping):
        raise EngineError(
            f"{where}: config.json has no 'indextts2' section: not built from trtllm_convert's checkpoint"
        )
    keys = ("n_mel", "text_vocab", "mel_pos_rows", "text_pos_rows", "n_conds")
    keys += ("start_mel", "stop_mel", "start_text", "stop_text")
    try:
        return tc.MergedLayout(**{k: int(sec[k]) for k in keys})
    except (KeyError, TypeError, ValueError) as e:
        raise EngineError(f"{where}: bad 'indextts2' section in config.json: {e}") from None


# ------------------------------------------------------------------------------------------ TensorRT-LLM


class _Handoff(Exception):  # control flow, not an error
    """Unwinds TensorRT-LLM's decode loop when the client sends something other than a step."""

    def __init__(self, frame: Frame | None) -> None:
        super().__init__("handoff")
        self.frame = frame


class TrtllmBackend:  # pragma: no cover - needs tensorrt_llm on a GPU; NOT yet run
    """The engine through TensorRT-LLM 1.2's Python runtime, `tensorrt_llm.runtime.GenerationSession`.

    NOT yet run: written without a GPU or TensorRT-LLM. What it relies on (read in NVIDIA/TensorRT-LLM
    `tensorrt_llm/runtime/generation.py`, `runtime/model_runner.py`, `builder.py`; the engine-backend
    runtime that 1.2 still ships and later releases delete):
    - `Engine.from_dir(dir, rank)` and `model_runner._engine_config_to_model_config(engine.config)` give
      the serialized engine and the `ModelConfig` that `GenerationSession(model_config, engine_buffer,
      mapping, debug_mode=True)` takes (debug_mode skips the strict IO-name check that our extra output
      `last_hidden_state` would fail).
    - `decode(input_ids, context_lengths, sampling_config, prompt_embedding_table=, tasks=,
      prompt_vocab_size=, logits_processor=)`: the loop calls `handle_per_step` per step; the logits
      processor is called with (step, ids, logits (rows, vocab_padded)) after the engine ran that step and
      before the decoder samples; its return value replaces the logits.
    - `_prepare_context_inputs(...)` / `_prepare_generation_inputs(..., step=s)` return the dicts whose
      'position_ids' feed the engine; the latter is called at the end of step s to prepare step s + 1,
      whose input is the token decoded at step s (code s), so its position is s + 2 (our convention).
    - `_get_context_shape_buffer` / `_get_next_step_shape_buffer` return the name -> RuntimeTensor
      bindings; we add 'last_hidden_state' there. Contiguous KV caches are `self.buffer[
      'present_key_value_<i>']` (rows first), so a parent reorder is an in-place row gather.

    How our sampling stays ours: decoding runs greedy (top_k 1) and the logits processor (1) sends the
    step's logits and hidden to the client, (2) reads the next request: for a step it reorders the KV
    rows by `parents` and returns logits that make `tokens` the argmax, so TensorRT-LLM feeds exactly
    our codes; anything else unwinds the loop (`_Handoff`) and is handled after it. Build requirements:
    `--gpt_attention_plugin` on, `--remove_input_padding enable`, `--paged_kv_cache disable` (a paged
    cache cannot be reordered by a row gather), `--max_beam_width 1` is enough (beams are batch rows
    here), `--max_batch_size` >= lines x beams, prompt table >= rows x n_conds.
    """

    name = "trtllm"

    def __init__(self, engine_dir: Path) -> None:
        try:
            import torch
            from tensorrt_llm.builder import Engine
            from tensorrt_llm.runtime import SamplingConfig
            from tensorrt_llm.runtime.model_runner import _engine_config_to_model_config
        except ImportError as e:
            raise EngineError(f"tensorrt_llm is not importable in {sys.executable}: {e}") from None
        self.torch = torch
        self.SamplingConfig = SamplingConfig
        try:
            engine = Engine.from_dir(str(engine_dir), rank=0)
        except Exception as e:
            raise EngineError(f"{engine_dir}: TensorRT-LLM cannot load the engine: {e}") from None
        pretrained = engine.config.pretrained_config
        cfg = pretrained.to_dict() if hasattr(pretrained, "to_dict") else dict(vars(pretrained))
        try:
            self.layout = layout_from_config({"pretrained_config": cfg}, engine_dir)
        except EngineError:  # PretrainedConfig may not carry our extra section: read the file itself
            raw = json.loads((engine_dir / tc.CONFIG_FILE).read_text(encoding="utf-8"))
            self.layout = layout_from_config(raw, engine_dir)
        self.hidden_size = int(cfg["hidden_size"])
        # debug_mode=True only while constructing: it skips the check of the engine's IO names against the
        # stock list, which our extra output `last_hidden_state` fails; left on, it would dump every step
        session = _session_class()(
            _engine_config_to_model_config(engine.config), engine.engine, pretrained.mapping, debug_mode=True
        )
        session.debug_mode = False
        for flag, want, hint in (
            ("use_gpt_attention_plugin", True, "--gpt_attention_plugin auto"),
            ("remove_input_padding", True, "--remove_input_padding enable"),
            ("paged_kv_cache", False, "--paged_kv_cache disable"),
        ):
            if bool(getattr(session, flag)) != want:
                raise EngineError(f"{engine_dir}: this runtime needs an engine built with {hint}")
        session.hidden_size_ = self.hidden_size
        self.session = session
        self.vocab = int(cfg["vocab_size"])
        self.gen: GenState | None = None
        self.chan: Channel | None = None
        self._capture: dict[str, Any] = {}

    # the logits processor: one call per engine step, inside TensorRT-LLM's decode loop
    def _on_step(self, step: int, _ids: Any, logits: Any) -> Any:
        torch = self.torch
        s = self.session
        if self._capture.get("latent"):  # one context pass: keep every position's hidden state
            self._capture["hidden"] = s.hidden_context.detach().float().cpu().numpy()
            raise _Handoff(None)
        assert self.gen is not None and self.chan is not None
        n_mel = self.layout.n_mel
        if step == 0:  # context: the hidden buffer is packed [tokens, D]; each row's last token
            last = torch.cumsum(s.context_lengths_host, 0) - 1
            hid = s.hidden_context[last.to(s.hidden_context.device)]
        else:
            hid = s.hidden_step
        self.chan.reply(
            {"ok": True},
            {
                "logits": logits[:, :n_mel].detach().float().cpu().numpy(),
                "hidden": hid.detach().float().cpu().numpy(),
            },
        )
        while True:
            frame = self.chan.read()
            if frame is None or frame[0].get("op") != "step":
                raise _Handoff(frame)
            try:
                parents, tokens = self.gen.check_step(frame[1], self.layout)
            except RequestError as e:
                self.chan.reply_error(str(e), "request")
                continue
            break
        idx = torch.as_tensor(parents, device=logits.device)
        if not np.array_equal(parents, np.arange(parents.size)):
            for key, buf in s.buffer.items():
                if key.startswith("present_key_value"):
                    buf.copy_(buf.index_select(0, idx))  # in place: the engine's bindings stay valid
        self.gen.step += 1
        forced = torch.full_like(logits, -1e4)  # greedy decoding then picks exactly our tokens
        forced[
            torch.arange(tokens.size, device=logits.device), torch.as_tensor(tokens, device=logits.device)
        ] = 0
        return forced

    def _decode(
        self, lines: Lines, per_row: list[tuple[np.ndarray, np.ndarray]], tasks: np.ndarray, steps: int
    ) -> None:
        torch = self.torch
        s = self.session
        ids = torch.as_tensor(np.concatenate([i for i, _ in per_row]).astype(np.int32), device="cuda")
        lens = np.array([i.size for i, _ in per_row], dtype=np.int32)
        s.context_positions = torch.as_tensor(
            np.concatenate([p for _, p in per_row]).astype(np.int32), device="cuda"
        )
        s.context_lengths_host = torch.as_tensor(lens.astype(np.int64))
        s.total_tokens = int(lens.sum())
        table = torch.as_tensor(tc.prompt_table(lines.conds), device="cuda").to(s.dtype_torch)
        # end id: the last merged (text) id, whose head bias is MASKED_LOGIT: never our token
        scfg = self.SamplingConfig(end_id=self.vocab - 1, pad_id=self.vocab - 1, top_k=1, num_beams=1)
        s.setup(len(per_row), int(lens.max()), steps + 1, beam_width=1)
        # tasks: one per row (its line's block of the table); decode expands them per token itself
        s.decode(
            ids,
            torch.as_tensor(lens, device="cuda"),
            scfg,
            prompt_embedding_table=table,
            tasks=torch.as_tensor(tasks.astype(np.int32), device="cuda"),
            prompt_vocab_size=torch.tensor([self.layout.n_conds], dtype=torch.int32, device="cuda"),
            logits_processor=self._on_step,
        )

    def prefill(self, lines: Lines, rows: np.ndarray, max_steps: int, chan: Channel) -> Frame | None:
        ctx = line_inputs(self.layout, lines)
        src = np.repeat(np.arange(len(ctx)), rows)
        self.gen, self.chan, self._capture = GenState(src, max_steps), chan, {}
        try:
            self._decode(lines, [(ctx[b][0], ctx[b][1]) for b in src], src, max_steps)
        except _Handoff as h:
            self.gen = None
            return h.frame
        self.gen = None
        return chan.read()  # the loop ran out of steps: the next request is handled by the main loop

    def handle_step(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise RequestError("step without a running generation (prefill first, and stay within max_steps)")

    def end(self) -> None:
        self.gen = None

    def latent(self, lines: Lines, codes: list[np.ndarray]) -> np.ndarray:
        ctx = line_inputs(self.layout, lines, codes)
        self.gen, self._capture = GenState(np.arange(len(ctx)), 0), {"latent": True}
        with contextlib.suppress(_Handoff):  # raised on purpose after the context pass
            self._decode(lines, [(i, p) for i, p, _ in ctx], np.arange(len(ctx)), 0)
        hidden = self._capture.pop("hidden")
        self.gen = None
        out, start = [], 0
        for ids, _, rows in ctx:
            assert rows is not None
            out.append(hidden[start + rows.start : start + rows.stop])
            start += ids.size
        return np.concatenate(out, axis=0)


def _session_class() -> type:  # pragma: no cover - needs tensorrt_llm on a GPU; NOT yet run
    """GenerationSession with our position ids and the `last_hidden_state` output bound."""
    import torch
    from tensorrt_llm.runtime import GenerationSession
    from tensorrt_llm.runtime.generation import RuntimeTensor

    class IndexTTS2Session(GenerationSession):  # type: ignore[misc, valid-type]
        context_positions: Any = None
        context_lengths_host: Any = None
        total_tokens = 0
        hidden_size_ = 0
        hidden_context: Any = None
        hidden_step: Any = None

        @property
        def dtype_torch(self) -> Any:
            return self._tensor_dtype("last_hidden_state")

        def _prepare_context_inputs(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            ret = super()._prepare_context_inputs(*args, **kwargs)
            ret["position_ids"] = self.context_positions  # [zero row | text | mel 0], packed
            return ret

        def _prepare_generation_inputs(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            ret = super()._prepare_generation_inputs(*args, **kwargs)
            old = ret["position_ids"]  # (rows,) with remove_input_padding
            ret["position_ids"] = torch.full_like(old, int(kwargs["step"]) + 2)  # code s at mel s + 2
            return ret

        def _get_context_shape_buffer(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            tensors = super()._get_context_shape_buffer(*args, **kwargs)
            self.hidden_context = torch.empty(
                (self.total_tokens, self.hidden_size_), dtype=self.dtype_torch, device=self.device
            )
            tensors["last_hidden_state"] = RuntimeTensor.from_torch("last_hidden_state", self.hidden_context)
            return tensors

        def _get_next_step_shape_buffer(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            tensors = super()._get_next_step_shape_buffer(*args, **kwargs)
            rows = int(self.context_lengths_host.numel())
            if self.hidden_step is None or self.hidden_step.shape[0] != rows:
                self.hidden_step = torch.empty(
                    (rows, self.hidden_size_), dtype=self.dtype_torch, device=self.device
                )
            tensors["last_hidden_state"] = RuntimeTensor.from_torch("last_hidden_state", self.hidden_step)
            return tensors

    return IndexTTS2Session


# ------------------------------------------------------------------------------------------ serving


class Channel:
    """Frames in from `rd`, frames out to `wr`."""

    def __init__(self, rd: BinaryIO, wr: BinaryIO) -> None:
        self.rd, self.wr = rd, wr

    def read(self) -> Frame | None:
        return read_frame(self.rd)

    def reply(self, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None) -> None:
        out = {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in (arrays or {}).items()}
        write_frame(self.wr, header, out)

    def reply_error(self, message: str, kind: str) -> None:
        write_frame(self.wr, {"ok": False, "error": message, "kind": kind})


def open_backend(engine_dir: Path, backend: str) -> Backend:
    if not engine_dir.is_dir():
        raise EngineError(f"{engine_dir}: no such engine folder")
    if backend == "auto":
        backend = "trtllm" if (engine_dir / ENGINE_FILE).is_file() else "reference"
    if backend == "reference":
        return ReferenceBackend(engine_dir)
    if backend == "trtllm":  # pragma: no cover - needs tensorrt_llm on a GPU
        return TrtllmBackend(engine_dir)
    raise EngineError(f"unknown backend {backend!r}; allowed: auto, trtllm, reference")


def _dispatch(
    backend: Backend, chan: Channel, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
) -> Frame | bool | None:
    """Handle one request; returns the next frame when the backend already read it, True to exit."""
    op = header.get("op")
    lay, d = backend.layout, backend.hidden_size
    if op == "prefill":
        lines = parse_lines(arrays, lay, d)
        rows = _array(arrays, "rows", "iu", 1).astype(np.int64)
        if rows.size != len(lines.texts) or rows.min() < 1:
            raise RequestError(f"rows {rows.tolist()}: one count >= 1 per line expected")
        steps = header.get("max_steps")
        if not isinstance(steps, int) or not 0 <= steps <= lay.mel_pos_rows - 2:
            raise RequestError(f"max_steps {steps!r}: an int in [0, {lay.mel_pos_rows - 2}] expected")
        backend.end()
        return backend.prefill(lines, rows, steps, chan)  # the trtllm backend answers steps inside it
    if op == "step":
        chan.reply({"ok": True}, backend.handle_step(arrays))
    elif op == "end":
        backend.end()
        chan.reply({"ok": True})
    elif op == "latent":
        lines = parse_lines(arrays, lay, d)
        codes = _split(_array(arrays, "codes", "iu", 1), _array(arrays, "code_lens", "iu", 1), "code")
        if len(codes) != len(lines.texts):
            raise RequestError(f"{len(codes)} code lengths for {len(lines.texts)} lines")
        backend.end()
        chan.reply({"ok": True}, {"hidden": backend.latent(lines, codes)})
    elif op == "close":
        chan.reply({"ok": True})
        return True
    else:
        raise RequestError(f"unknown op {op!r}; allowed: prefill, step, end, latent, close")
    return None


def serve(backend: Backend, chan: Channel) -> int:
    chan.reply(
        {
            "ok": True,
            "op": "ready",
            "protocol": PROTOCOL,
            "backend": backend.name,
            "hidden_size": backend.hidden_size,
            "layout": backend.layout.to_json(),
        }
    )
    frame: Frame | bool | None = None
    while True:
        try:
            if frame is None:
                frame = chan.read()
            if frame is None or frame is True:
                return 0
            assert not isinstance(frame, bool)
            header, arrays = frame
            frame = None
            frame = _dispatch(backend, chan, header, arrays)
        except FrameError as e:
            chan.reply_error(str(e), "protocol")
            return 2  # the stream is out of step: nothing after this can be trusted
        except RequestError as e:
            chan.reply_error(str(e), "request")
            frame = None
        except Exception as e:  # keep serving: the client decides whether to go on
            traceback.print_exc(file=sys.stderr)
            chan.reply_error(f"{type(e).__name__}: {e}", "internal")
            frame = None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m fasttts_cli.trtllm_worker", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "engine_dir", type=Path, help="trtllm-build output, or a converted checkpoint (reference)"
    )
    ap.add_argument("--backend", choices=["auto", "trtllm", "reference"], default="auto")
    a = ap.parse_args(argv)
    # frames only on the real stdout; whatever a library prints (TensorRT-LLM does) goes to stderr
    frames_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    chan = Channel(sys.stdin.buffer, frames_out)
    try:
        backend = open_backend(a.engine_dir, a.backend)
    except EngineError as e:
        chan.reply_error(str(e), "engine")
        return 3
    return serve(backend, chan)


if __name__ == "__main__":
    sys.exit(main())
