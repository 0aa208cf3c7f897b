"""The GPT stage on TensorRT-LLM, from our runtime's side: a client of
`fasttts_cli.backends.tensorrt_llm.trtllm_worker`.

TensorRT-LLM lives in its own Python environment ($FASTTTS_TRTLLM_PYTHON), so the engine runs in a worker
process and this module talks to it over pipes (framing: `trtllm_worker` docstring). The sampling stays
here, in the one generate loop (generate_loop.py) that drives every backend's GPT; the worker only turns
(parents, tokens) into the next logits. So `TrtllmGPT.generate` / `latents` return what
`GPTDecoder.generate` / `latents` return (`Decoded` per line; (n, D) latents per line), and with the
numpy `reference` backend they equal the ONNX trunk's results within float tolerance.

The difference at the seam: the worker wants a line as its conditioning rows and text ids (the engine
looks the text up in its merged table and takes the rows through the prompt table), not as the prefix
embedding `HostEmbeddings.prefix` builds; `LinePrompt.from_voice` makes one from the same inputs.
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.backends.protocol import StepOutput
from fasttts_cli.backends.tensorrt_llm import trtllm_convert as tc
from fasttts_cli.backends.tensorrt_llm.trtllm_worker import (
    ENGINE_FILE,
    PROTOCOL,
    FrameError,
    encode_frame,
    read_frame,
)
from fasttts_cli.errors import EngineMismatchError, MissingDependencyError, SynthesisError
from fasttts_cli.indextts2 import generate_loop as loop
from fasttts_cli.indextts2.decode import HostEmbeddings

TRTLLM_PYTHON_ENV = "FASTTTS_TRTLLM_PYTHON"  # same name as gpu_stack.TRTLLM_PYTHON_ENV
TRTLLM_BACKEND_ENV = "FASTTTS_TRTLLM_BACKEND"
BACKENDS = ("auto", "trtllm", "reference")
# An engine folder's GPT on TensorRT-LLM (build/trtllm_build.py writes it): the manifest component and
# folder, the converted checkpoint (float weights; the reference backend runs it) and the built engine.
GPT_TRTLLM = "gpt_trtllm"
CHECKPOINT_DIR = "checkpoint"
ENGINE_DIR = "engine"
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent  # the folder holding fasttts_cli/


@dataclass(frozen=True)
class LinePrompt:
    """One line as the TensorRT-LLM GPT takes it."""

    conds: np.ndarray  # (n_conds, D) float32: speaker latents + emovec, speed_emb[1], speed_emb[0]
    text_ids: np.ndarray  # (L,) int64 text token ids (start/stop ids are dropped by the layout)
    prefix_rows: int | None = None  # IndexTTS-2.5: conds hold the whole prefix, these rows of it

    def __len__(self) -> int:
        """Rows of the prefix this line stands for (as `len` of `HostEmbeddings.prefix`'s array)."""
        if self.prefix_rows is not None:
            return self.prefix_rows
        return int(self.conds.shape[0]) + int(self.text_ids.size) + 2

    @staticmethod
    def from_prefix(prefix: np.ndarray, text_ids: Sequence[int] | np.ndarray, n_conds: int) -> LinePrompt:
        """IndexTTS-2.5's line: its host-made prefix (P, D) as prompt rows, zero-padded to the GPT's
        n_conds, for a GPT converted with `text_in_prompt` (trtllm_convert.MergedLayout)."""
        p = np.asarray(prefix, np.float32)
        if p.shape[0] > n_conds:
            raise ValueError(f"a {p.shape[0]}-row prefix exceeds the GPT's {n_conds} prompt rows")
        conds = np.zeros((n_conds, p.shape[1]), np.float32)
        conds[: p.shape[0]] = p
        return LinePrompt(conds, np.asarray(text_ids, dtype=np.int64).reshape(-1), int(p.shape[0]))

    @staticmethod
    def from_voice(
        spk_latents: np.ndarray, emovec: np.ndarray, speed: np.ndarray, text_ids: Sequence[int] | np.ndarray
    ) -> LinePrompt:
        """The same inputs `HostEmbeddings.prefix(spk_latents, emovec, text_ids)` takes; `speed` is the
        engine's speed_emb table (2, D)."""
        return LinePrompt(
            tc.conds_rows(spk_latents, emovec, speed), np.asarray(text_ids, dtype=np.int64).reshape(-1)
        )


@dataclass(frozen=True)
class WorkerInfo:
    """What the worker reported when it started."""

    backend: str
    hidden_size: int
    layout: tc.MergedLayout
    engine_dir: Path
    python: str

    @property
    def max_codes(self) -> int:
        """Most codes a line can get: code k sits at mel position k + 2 (as HostEmbeddings.max_codes)."""
        return self.layout.mel_pos_rows - 2


def backend_choice() -> str:
    """$FASTTTS_TRTLLM_BACKEND (auto by default): which worker backend runs the GPT. `reference` is the
    numpy float64 definition of the engine's math: slow, for checking a conversion and for CPU tests."""
    v = os.environ.get(TRTLLM_BACKEND_ENV, "auto").strip() or "auto"
    if v not in BACKENDS:
        raise MissingDependencyError(
            f"${TRTLLM_BACKEND_ENV} = {v!r} is not a GPT worker backend",
            hint=f"allowed: {', '.join(BACKENDS)}",
        )
    return v


def worker_dir(gpt_dir: Path) -> tuple[Path, str]:
    """(folder, backend) the worker loads for an engine folder's `gpt_trtllm/`: the built engine, or the
    converted checkpoint when $FASTTTS_TRTLLM_BACKEND is `reference`."""
    choice = backend_choice()
    if choice == "reference":
        return gpt_dir / CHECKPOINT_DIR, "reference"
    engine = gpt_dir / ENGINE_DIR
    if not (engine / ENGINE_FILE).is_file():
        raise EngineMismatchError(
            f"{engine / ENGINE_FILE}: this engine folder holds the GPT's TensorRT-LLM checkpoint but no "
            "built TensorRT-LLM engine",
            hint=f"rebuild it with ${TRTLLM_PYTHON_ENV} set (README: TensorRT-LLM), or set "
            f"{TRTLLM_BACKEND_ENV}=reference to run the numpy reference GPT (slow)",
        )
    return engine, "trtllm"


def worker_python(backend: str, python: str | None = None) -> str:
    """The interpreter that runs the worker: explicit; else this one for the numpy reference backend;
    else $FASTTTS_TRTLLM_PYTHON (TensorRT-LLM's own environment, which the trtllm backend needs)."""
    if python:
        return python
    if backend == "reference":
        return sys.executable
    env = os.environ.get(TRTLLM_PYTHON_ENV)
    if env:
        return env
    raise MissingDependencyError(
        f"the TensorRT-LLM GPT runs in TensorRT-LLM's own Python environment, and ${TRTLLM_PYTHON_ENV} "
        "is not set",
        hint=f"export {TRTLLM_PYTHON_ENV}=/path/to/trtllm-env/bin/python (Python 3.12 with tensorrt-llm 1.2)",
    )


class WorkerClient:
    """One worker process and its pipes: requests and responses, one at a time."""

    def __init__(
        self,
        engine_dir: Path | str,
        *,
        backend: str = "auto",
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        stderr_lines: int = 40,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r}; allowed: {', '.join(BACKENDS)}")
        self.engine_dir = Path(engine_dir)
        want = "reference" if backend == "auto" and not (self.engine_dir / ENGINE_FILE).is_file() else backend
        self.python = worker_python(want, python)
        self._stderr: collections.deque[str] = collections.deque(maxlen=stderr_lines)
        run_env = dict(os.environ if env is None else env)
        # the worker imports fasttts_cli.backends.tensorrt_llm.trtllm_worker and its trtllm_convert
        # (numpy only) from this
        # checkout: TensorRT-LLM's environment need not have fasttts installed
        run_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_PACKAGE_ROOT), run_env.get("PYTHONPATH")) if p
        )
        cmd = [
            self.python,
            "-m",
            "fasttts_cli.backends.tensorrt_llm.trtllm_worker",
            str(self.engine_dir),
            "--backend",
            backend,
        ]
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=run_env
            )
        except OSError as e:
            raise MissingDependencyError(
                f"cannot start the GPT worker with {self.python}: {e.strerror or e}",
                hint=f"check ${TRTLLM_PYTHON_ENV}" if want != "reference" else None,
            ) from None
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        header, _ = self._receive("start")
        if not header.get("ok"):
            self._wait()
            cls = EngineMismatchError if header.get("kind") == "engine" else SynthesisError
            raise cls(f"GPT worker: {header.get('error')}{self._tail()}")
        if header.get("protocol") != PROTOCOL:
            self.close()
            raise EngineMismatchError(
                f"GPT worker speaks protocol {header.get('protocol')}, this runtime {PROTOCOL}",
                hint="run the worker from the same fasttts checkout",
            )
        lay = header["layout"]
        self.info = WorkerInfo(
            backend=str(header["backend"]),
            hidden_size=int(header["hidden_size"]),
            layout=tc.MergedLayout(**{f.name: int(lay[f.name]) for f in fields(tc.MergedLayout)}),
            engine_dir=self.engine_dir,
            python=self.python,
        )

    # ------------------------------------------------------------------ pipes

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self._stderr.append(raw.decode("utf-8", "replace").rstrip())

    def _wait(self, timeout: float = 10.0) -> int | None:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._drain.join(timeout=2.0)
        return code

    def _tail(self) -> str:
        lines = [ln for ln in self._stderr if ln.strip()]
        return ("\n  worker stderr (last lines):\n    " + "\n    ".join(lines)) if lines else ""

    def _dead(self, what: str, detail: str = "") -> SynthesisError:
        code = self._wait(5.0)
        status = f"exited with code {code}" if code is not None else "stopped answering (killed)"
        if code is None:  # out of step with us: nothing it says can be trusted any more
            self.proc.kill()
            self._wait()
        return SynthesisError(
            f"GPT worker ({self.python}, {self.engine_dir}) {status} during {what}{detail}{self._tail()}"
        )

    def _receive(self, what: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        assert self.proc.stdout is not None
        try:
            frame = read_frame(self.proc.stdout)
        except FrameError as e:
            raise self._dead(what, f" (bad frame: {e})") from None
        if frame is None:
            raise self._dead(what)
        return frame

    def request(
        self, op: str, arrays: Mapping[str, np.ndarray] | None = None, **fields: Any
    ) -> dict[str, np.ndarray]:
        """Send one request and return the response's arrays; an error response raises SynthesisError."""
        if self.proc.poll() is not None:
            raise self._dead(op)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(encode_frame({"op": op, **fields}, arrays))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._dead(op) from None
        header, out = self._receive(op)
        if not header.get("ok"):
            detail = self._tail() if header.get("kind") != "request" else ""
            raise SynthesisError(f"GPT worker refused {op!r}: {header.get('error')}{detail}")
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(SynthesisError):  # closing anyway: a dead worker is fine here
                self.request("close")
            if self._wait(10.0) is None:
                self.proc.kill()
                self._wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()

    def __enter__(self) -> WorkerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lines(prompts: Sequence[LinePrompt]) -> dict[str, np.ndarray]:
    return {
        "conds": np.stack([np.asarray(p.conds, dtype=np.float32) for p in prompts]),
        "text_ids": np.concatenate([np.asarray(p.text_ids, dtype=np.int64).reshape(-1) for p in prompts]),
        "text_lens": np.array([np.asarray(p.text_ids).size for p in prompts], dtype=np.int64),
    }


class TrtllmGPT(loop.LoopMethods):
    """The GPT step protocol (backends/protocol.GPTSteps) over the worker; `generate_loop` drives it.

    The worker runs TensorRT-LLM's static batch: rows never leave it. When lines finish, the loop asks
    for fewer rows; this client keeps the finished rows in the worker's batch (fed their own row and the
    stop code; their outputs are dropped) and hands the loop the rows it asked for.
    """

    def __init__(
        self,
        engine_dir: Path | str,
        *,
        backend: str = "auto",
        python: str | None = None,
        emb: HostEmbeddings | None = None,
    ) -> None:
        self.worker = WorkerClient(engine_dir, backend=backend, python=python)
        self.info = self.worker.info
        self.layout = self.info.layout
        self.emb = emb  # for `prompt`: the engine folder's speed table and text positions
        self._line_of: np.ndarray | None = None  # the line of every worker row (a generation is open)
        self._live = np.zeros(0, np.int64)  # the worker row of every row the loop sees

    def close(self) -> None:
        self.worker.close()

    def __enter__(self) -> TrtllmGPT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ GPTSteps

    @property
    def vocab(self) -> int:
        return self.layout.n_mel

    @property
    def max_codes(self) -> int:
        return self.info.max_codes

    def prompt(self, spk_latents: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int]) -> LinePrompt:
        if self.emb is None:
            raise RuntimeError("TrtllmGPT.prompt needs the engine folder's host tables (emb=)")
        return self.prompt_for(self.emb, spk_latents, emovec, text_ids)

    @staticmethod
    def prompt_for(
        emb: HostEmbeddings, spk_latents: np.ndarray, emovec: np.ndarray, text_ids: Sequence[int]
    ) -> LinePrompt:
        """`prompt` without a worker (an engine makes prompts before it starts one)."""
        emb.text_embeddings(text_ids)  # the same length check as the ONNX path
        return LinePrompt.from_voice(spk_latents, emovec, emb.speed, text_ids)

    def prefill(self, prompts: Sequence[LinePrompt], rows: Sequence[int], max_steps: int) -> StepOutput:
        """Context pass; line i gets rows[i] identical rows. At most `max_steps` steps may follow."""
        arrays = _lines(prompts)
        arrays["rows"] = np.asarray(rows, dtype=np.int64)
        out = self.worker.request("prefill", arrays, max_steps=int(max_steps))
        self._line_of = np.repeat(np.arange(len(prompts)), rows)
        self._live = np.arange(self._line_of.size)
        return StepOutput(out["logits"], out["hidden"])

    def step(self, parents: np.ndarray, tokens: np.ndarray) -> StepOutput:
        """Row r continues from row parents[r] (same line) and is fed tokens[r]; fewer rows than the
        last step's when lines finished (their worker rows stay, see the class docstring)."""
        parents = np.asarray(parents, dtype=np.int64)
        tokens = np.asarray(tokens, dtype=np.int64)
        live = self._next_rows(parents)
        if live is None:  # all rows, or rows the worker must judge (its errors name what is wrong)
            out = self.worker.request("step", {"parents": parents, "tokens": tokens})
            return StepOutput(out["logits"], out["hidden"])
        full_parents = np.arange(self._line_of.size, dtype=np.int64)  # type: ignore[union-attr]
        full_tokens = np.full(full_parents.size, self.layout.stop_mel, dtype=np.int64)
        full_parents[live] = self._live[parents]
        full_tokens[live] = tokens
        out = self.worker.request("step", {"parents": full_parents, "tokens": full_tokens})
        self._live = live
        return StepOutput(out["logits"][live], out["hidden"][live])

    def _next_rows(self, parents: np.ndarray) -> np.ndarray | None:
        """The worker rows of the next rows when some lines have left, else None (pass through)."""
        line_of = self._line_of
        if line_of is None or (parents.size == line_of.size and self._live.size == line_of.size):
            return None
        if parents.size and (parents.min() < 0 or parents.max() >= self._live.size):
            return None
        kept = np.unique(line_of[self._live[parents]])
        live = np.flatnonzero(np.isin(line_of, kept))
        return live if live.size == parents.size else None

    def end(self) -> None:
        if self.worker.proc.poll() is None:
            self.worker.request("end")
        self._line_of = None

    def latents(self, prompts: Sequence[LinePrompt], codes: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The teacher-forced second pass (mel positions 0..n+1); (n_i, D) per line."""
        if len(prompts) != len(codes):
            raise ValueError("one code array per prompt")
        if not prompts:
            return []
        cs = [np.asarray(c, dtype=np.int64).reshape(-1) for c in codes]
        arrays = _lines(prompts)
        arrays["codes"] = np.concatenate(cs)
        arrays["code_lens"] = np.array([c.size for c in cs], dtype=np.int64)
        hidden = self.worker.request("latent", arrays)["hidden"]
        return [h.copy() for h in np.split(hidden, np.cumsum([c.size for c in cs])[:-1])]


def open_worker(
    path: Path, options: Any, *, emb: HostEmbeddings | None = None, n_conds: int | None = None
) -> TrtllmGPT:
    """The GPT on TensorRT-LLM: a worker process over the engine folder's `gpt_trtllm/` (options unused:
    the worker sizes itself from its engine), the registry's one way to open it. `emb`: the engine
    folder's host tables (for `prompt`), and with `n_conds` (its conditioning rows) what the worker's
    layout must match: a GPT built from another checkpoint than the tables is refused, its worker stopped.
    """
    folder, backend = worker_dir(path)
    gpt = TrtllmGPT(folder, backend=backend, emb=emb)
    lay = gpt.layout
    want_mel = lay.n_mel if emb is None else int(emb.mel_embedding.shape[0])
    want_conds = lay.n_conds if n_conds is None else n_conds
    if (lay.n_mel, lay.n_conds) != (want_mel, want_conds):
        gpt.close()
        raise EngineMismatchError(
            f"{folder}: the TensorRT-LLM GPT has {lay.n_mel} mel codes and {lay.n_conds} conditioning rows; "
            f"this engine folder's tables have {want_mel} and {want_conds}",
            hint="rebuild the engine folder with one `fasttts build`",
        )
    return gpt
