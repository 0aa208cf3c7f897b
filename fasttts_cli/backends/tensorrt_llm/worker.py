"""The worker's serving loop: open a backend for an engine folder, answer the ready frame, then one
request after another until `close` or end of input
(protocol: `fasttts_cli/backends/tensorrt_llm/trtllm_worker.py`)."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.backends.tensorrt_llm.names import ENGINE_FILE
from fasttts_cli.backends.tensorrt_llm.protocol import (
    PROTOCOL,
    Backend,
    Channel,
    EngineError,
    Frame,
    FrameError,
    RequestError,
    parse_lines,
    split_by_lengths,
    take_array,
)
from fasttts_cli.backends.tensorrt_llm.reference import ReferenceBackend


def open_backend(engine_dir: Path, backend: str) -> Backend:
    if not engine_dir.is_dir():
        raise EngineError(f"{engine_dir}: no such engine folder")
    if backend == "auto":
        backend = "trtllm" if (engine_dir / ENGINE_FILE).is_file() else "reference"
    if backend == "reference":
        return ReferenceBackend(engine_dir)
    if backend == "trtllm":  # tensorrt_llm (or the fake of it) is imported only here
        from fasttts_cli.backends.tensorrt_llm.session import TrtllmBackend

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
        rows = take_array(arrays, "rows", "iu", 1).astype(np.int64)
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
        codes = split_by_lengths(
            take_array(arrays, "codes", "iu", 1), take_array(arrays, "code_lens", "iu", 1), "code"
        )
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
