"""The worker's side of the client <-> worker protocol: framing, request parsing, per-generation row
bookkeeping and the `Backend` seam both backends implement (wire format:
`fasttts_cli/backends/tensorrt_llm/trtllm_worker.py`).

numpy only (plus the numpy-only converter): it runs inside TensorRT-LLM's own Python environment.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np

from fasttts_cli.backends.tensorrt_llm import trtllm_convert as tc
from fasttts_cli.backends.tensorrt_llm.names import ENGINE_FILE  # noqa: F401  (re-exported)

PROTOCOL = 1
MAGIC = b"FTW1"
_HEAD = struct.Struct("<4sI")
Frame = tuple[dict[str, Any], dict[str, np.ndarray]]  # (header without "arrays", arrays by name)
MAX_HEADER = 1 << 20  # a header is a few hundred bytes; anything bigger is a desynchronised stream

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


def take_array(arrays: Mapping[str, np.ndarray], name: str, kind: str, ndim: int) -> np.ndarray:
    if name not in arrays:
        raise RequestError(f"missing array {name!r}")
    a = arrays[name]
    if a.ndim != ndim or a.dtype.kind not in kind:
        raise RequestError(f"array {name!r}: {a.ndim}-D {a.dtype}, expected {ndim}-D of kind {kind!r}")
    return a


def split_by_lengths(flat: np.ndarray, lens: np.ndarray, what: str) -> list[np.ndarray]:
    if np.any(lens < 0) or int(lens.sum()) != flat.size:
        raise RequestError(f"{what} lengths {lens.tolist()} do not add up to {flat.size}")
    return [a.astype(np.int64) for a in np.split(flat, np.cumsum(lens)[:-1])]


def parse_lines(arrays: Mapping[str, np.ndarray], layout: tc.MergedLayout, hidden: int) -> Lines:
    conds = take_array(arrays, "conds", "f", 3).astype(np.float32)
    lens = take_array(arrays, "text_lens", "iu", 1)
    if conds.shape[1:] != (layout.n_conds, hidden):
        raise RequestError(f"conds {conds.shape}: expected (B, {layout.n_conds}, {hidden})")
    if lens.size != conds.shape[0] or lens.size == 0:
        raise RequestError(f"{lens.size} text lengths for {conds.shape[0]} lines (need >= 1 line)")
    texts = split_by_lengths(take_array(arrays, "text_ids", "iu", 1), lens, "text")
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
        parents = take_array(arrays, "parents", "iu", 1).astype(np.int64)
        tokens = take_array(arrays, "tokens", "iu", 1).astype(np.int64)
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
    try:  # text_in_prompt: absent in GPTs converted before IndexTTS-2.5 (0 = text ids through the table)
        return tc.MergedLayout(
            **{k: int(sec[k]) for k in keys}, text_in_prompt=int(sec.get("text_in_prompt", 0))
        )
    except (KeyError, TypeError, ValueError) as e:
        raise EngineError(f"{where}: bad 'indextts2' section in config.json: {e}") from None


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
