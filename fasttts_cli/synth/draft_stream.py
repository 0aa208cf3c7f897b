"""`stream` of the draft voice: what piper gives, as it gives it.

`piper --output-raw` synthesizes a text sentence by sentence and writes each sentence's 16-bit PCM to
stdout as soon as it is made (with the voice's sentence silence between), so a streamed draft line's
first audio is its first sentence. One piper process per line (a raw stream has no line boundaries),
up to RENDER_PROCESSES at once; the pieces are handed on as they are read. The audio is what the
batched `synthesize` makes of the same text (piper's WAV output is the same sentences), up to the
voice's own sampling noise.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fasttts_cli.synth.synthesizer import AudioCallback, SynthRequest, SynthResult, deliver

READ_BYTES = 8192  # a pipe read: ~0.19 s of 22.05 kHz audio


class DraftStreaming:
    """The draft voice's `stream` (a mixin of DraftSynthesizer)."""

    sample_rate: int
    command: Callable[..., list[str]]

    def stream(
        self,
        requests: Sequence[SynthRequest],
        on_audio: AudioCallback,
        *,
        cancelled: Callable[[int], bool] | None = None,
    ) -> list[SynthResult]:
        """As the Synthesizer contract's `stream` says (synth.synthesizer); `length_scale` options
        are honoured as in `synthesize`."""
        from fasttts_cli.synth.draft import RENDER_PROCESSES, _piper_text

        lock = threading.Lock()
        gone = cancelled or (lambda k: False)

        def emit(k: int, a: np.ndarray) -> None:
            with lock:
                deliver(on_audio, k, a)

        def one(k: int) -> SynthResult:
            r = requests[k]
            text = _piper_text(r.text)
            if not text:
                return SynthResult(r.line_id, None, self.sample_rate, error="empty text")
            ls = r.options.get("length_scale")
            pieces, error = self._raw(
                text, None if ls is None else float(ls), lambda a: emit(k, a), lambda: gone(k)
            )
            if error is None and not pieces:
                error = "piper produced no audio"
            if error is not None:
                return SynthResult(r.line_id, None, self.sample_rate, error=error)
            return SynthResult(r.line_id, np.concatenate(pieces), self.sample_rate)

        workers = max(1, min(len(requests), RENDER_PROCESSES))
        with ThreadPoolExecutor(workers, thread_name_prefix="fasttts-piper-stream") as pool:
            return list(pool.map(one, range(len(requests))))

    def _raw(
        self,
        text: str,
        length_scale: float | None,
        emit: Callable[[np.ndarray], None],
        gone: Callable[[], bool],
    ) -> tuple[list[np.ndarray], str | None]:
        """One piper process with --output-raw; (the pieces handed on, an error or None)."""
        from fasttts_cli.synth.draft import reap

        env = dict(os.environ, PYTHONIOENCODING="utf-8")
        proc = subprocess.Popen(
            [*self.command(length_scale), "--output-raw"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        timer = threading.Timer(60 + len(text) / 5, proc.kill)
        timer.start()
        err: list[bytes] = []
        drain = threading.Thread(target=lambda: err.append(proc.stderr.read() if proc.stderr else b""))
        drain.start()
        pieces: list[np.ndarray] = []
        odd = b""  # a read may end inside a sample
        try:
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(text.encode("utf-8") + b"\n")
                proc.stdin.close()
            except OSError:
                pass  # piper died early: its exit status says why
            while data := proc.stdout.read1(READ_BYTES):  # type: ignore[attr-defined]
                if gone():
                    proc.kill()
                    return pieces, "cancelled"
                data, odd = odd + data, b""
                if len(data) % 2:
                    data, odd = data[:-1], data[-1:]
                a = (np.frombuffer(data, "<i2").astype(np.float32) / 32768.0).copy()
                pieces.append(a)
                emit(a)
            proc.wait()
        finally:
            reap(proc, timer)
            drain.join()
        if proc.returncode != 0:
            tail = b"".join(err).decode("utf-8", "replace").strip().splitlines()[-3:]
            return pieces, "piper failed: " + (" | ".join(tail) or f"exit {proc.returncode}")
        return pieces, None
