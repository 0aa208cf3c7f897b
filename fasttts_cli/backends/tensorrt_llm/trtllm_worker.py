"""The GPT stage of IndexTTS-2 as a worker process: a TensorRT-LLM engine (or its numpy reference) driven
one step at a time over stdin/stdout, so that sampling stays on OUR side (`indextts2/sampling.py`).

Why a process: TensorRT-LLM 1.2 lives in its own Python 3.12 environment ($FASTTTS_TRTLLM_PYTHON) with
its own torch and numpy, so our runtime cannot import it. This module imports only numpy, the standard
library and numpy-only fasttts modules (`backends/tensorrt_llm/`, `trtllm_convert.py`) at module
level, and runs there as
``python -m fasttts_cli.backends.tensorrt_llm.trtllm_worker ENGINE_DIR`` or as a script path. It is
the entry point; the jobs live in `backends/tensorrt_llm/`: `protocol.py` (framing, requests, the
`Backend` seam), `reference.py`, `session.py` (the TensorRT-LLM driver), `worker.py` (serving).

Backends
--------
- ``trtllm``: an engine built by ``trtllm_convert.py build`` (``IndexTTS2GPTForCausalLM``), run through
  TensorRT-LLM's Python ``GenerationSession`` (`backends/tensorrt_llm/session.py`). CI runs it against the
  fake library (`tools/fakes/trtllm.py`); on a GPU, ``python -m fasttts_cli.tools.accept_trtllm`` checks
  it against the reference.
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
import os
import sys
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script path: make the package next to this file importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent.parent))

# the protocol's names, for the client (indextts2/gpt_trtllm.py) and the tests
from fasttts_cli.backends.tensorrt_llm.names import ENGINE_FILE
from fasttts_cli.backends.tensorrt_llm.protocol import (
    _HEAD,
    MAGIC,
    PROTOCOL,
    Channel,
    EngineError,
    FrameError,
    RequestError,
    encode_frame,
    read_frame,
    write_frame,
)
from fasttts_cli.backends.tensorrt_llm.worker import open_backend, serve

__all__ = [
    "ENGINE_FILE",
    "MAGIC",
    "PROTOCOL",
    "_HEAD",
    "Channel",
    "EngineError",
    "FrameError",
    "RequestError",
    "encode_frame",
    "main",
    "open_backend",
    "read_frame",
    "serve",
    "write_frame",
]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m fasttts_cli.backends.tensorrt_llm.trtllm_worker",
        description=(__doc__ or "").split("\n")[0],
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
