"""The one engine thread: a bounded queue of jobs, batched as they come, each job's audio handed back as made.

Batching: the thread takes the first waiting job, then collects whatever else arrives within
`batch_wait_ms` (up to `max_batch` jobs) and streams them as one engine batch (`synth.stream_rows`: one
GPT batch for the lines' segments, each line's chunks rendered as its codes come). A job that arrives
while a batch generates waits for the next batch: there is no continuous batching (joining a running
GPT batch at its next step), because the GPT step protocol (backends.protocol) prefills a batch once
and every backend's KV cache is sized at prefill; a line's own chunks still leave as they are made.

Jobs whose response is not streamed (flac/mp3/opus, speed) are synthesized whole in one batch
(`synth.whole_rows`: the line exactly as `fasttts synth` makes it, no chunk joins); a duration goes through
plan + render to that length, alone. A voice's conditioning is prepared once per (voice, emotion) and
kept. A job whose client left is skipped if it has not started, and its GPT rows stop at
the next step if it has (`cancelled`). A failing line fails its own job only.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.serve.metrics import Metrics
from fasttts_cli.serve.speech import ApiError, Speech
from fasttts_cli.synth.synthesizer import (
    EmotionSpec,
    RenderRequest,
    SynthRequest,
    Voice,
    plan_rows,
    render_rows,
    stream_rows,
    whole_rows,
)

DONE = None  # the last event of a job


@dataclass(eq=False)
class Job:
    """One request's work: `events` receives audio arrays as made, then an ApiError or DONE."""

    speech: Speech
    deliver: Callable[[Any], None]  # thread-safe: hands an event to the request's side
    cancelled: bool = False
    started: float = field(default_factory=time.monotonic)
    first_audio: float | None = None
    samples: int = 0


class EngineWorker:
    """Owns the synthesizer; `submit` from any thread (ApiError 429 when the queue is full)."""

    def __init__(
        self,
        synth: Any,
        voices: dict[str, Path],
        metrics: Metrics,
        *,
        max_queue: int = 64,
        max_batch: int = 8,
        batch_wait_ms: float = 10.0,
        lang: str | None = None,
    ) -> None:
        self.synth = synth
        self.voices = voices
        self.metrics = metrics
        self.max_batch = max(1, max_batch)
        self.batch_wait = max(0.0, batch_wait_ms) / 1000.0
        self.lang = lang
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=max(1, max_queue))
        self._prepared: dict[tuple[str, str], Voice] = {}
        self._thread = threading.Thread(target=self._run, name="fasttts-engine", daemon=True)
        self.in_flight = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finish what is queued and running, then end the thread."""
        self._queue.put(None)
        self._thread.join()

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def submit(self, job: Job) -> None:
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            self.metrics.count("rejected_total")
            raise ApiError(
                429, "the server's queue is full: retry in a moment", None, "rate_limit_error"
            ) from None
        self.metrics.gauge("queue_depth", self.depth)

    # ------------------------------------------------------------------------------- the thread

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            deadline = time.monotonic() + self.batch_wait
            while len(batch) < self.max_batch:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    stopping = True
                    break
                batch.append(nxt)
            self.metrics.gauge("queue_depth", self.depth)
            live = [j for j in batch if not j.cancelled]
            if len(live) < len(batch):  # their clients left while they waited
                self.metrics.count("cancelled_total", len(batch) - len(live))
            self.in_flight = len(live)
            self.metrics.gauge("in_flight", self.in_flight)
            try:
                self._serve(live)
            except BaseException as e:  # never leave a client waiting, whatever broke
                for j in live:
                    j.deliver(ApiError(500, f"{type(e).__name__}: {e}"))
            finally:
                self.in_flight = 0
                self.metrics.gauge("in_flight", 0)

    def _serve(self, jobs: list[Job]) -> None:
        streamed, whole, alone = [], [], []
        for j in jobs:
            try:
                req = self._request(j.speech)
            except ApiError as e:
                self._fail(j, e)
                continue
            except Exception as e:
                self._fail(j, ApiError(400, str(e), "voice"))
                continue
            s = j.speech
            (alone if s.duration is not None else streamed if s.streamed else whole).append((j, req))
        if streamed:
            self._stream([j for j, _ in streamed], [r for _, r in streamed], stream_rows)
        if whole:
            self._stream([j for j, _ in whole], [r for _, r in whole], whole_rows)
        for j, req in alone:
            self._render_to_length(j, req)

    def _stream(self, jobs: list[Job], reqs: list[SynthRequest], rows: Callable[..., list[Any]]) -> None:
        """`rows` (stream_rows, or whole_rows) over the batch, each job's audio handed on as it comes."""
        t0 = time.monotonic()

        def on_audio(k: int, a: np.ndarray) -> None:
            j = jobs[k]
            if j.cancelled:
                return
            if j.first_audio is None:
                j.first_audio = time.monotonic() - j.started
                self.metrics.observe("first_audio_seconds", j.first_audio)
            j.samples += a.size
            j.deliver(a)

        results = rows(self.synth, reqs, on_audio, lambda k: jobs[k].cancelled)
        wall = time.monotonic() - t0
        for j, res in zip(jobs, results, strict=True):
            self._finish(j, res, wall)

    def _render_to_length(self, j: Job, req: SynthRequest) -> None:
        t0 = time.monotonic()
        synth = self.synth
        hop = int(getattr(synth, "hop", 0) or 0)
        if not hop or not getattr(synth, "renders_to_length", False):
            self._fail(
                j, ApiError(400, f"the {synth.name} engine cannot render a line to a length", "duration")
            )
            return
        plan = plan_rows(synth, [req], lambda *_: None)[0]
        frames = max(1, round(float(j.speech.duration or 0) * synth.sample_rate / hop))
        res = render_rows(synth, [RenderRequest(req, plan, frames)], lambda *_: None)[0]
        if res.ok and not j.cancelled:
            j.first_audio = time.monotonic() - j.started
            self.metrics.observe("first_audio_seconds", j.first_audio)
            j.samples = int(res.audio.size)
            j.deliver(np.asarray(res.audio, np.float32))
        self._finish(j, res, time.monotonic() - t0)

    def _finish(self, j: Job, res: Any, wall: float) -> None:
        if j.cancelled:
            self.metrics.count("cancelled_total")
            return
        if not res.ok:
            self._fail(j, ApiError(500, f"the line failed: {res.error}"))
            return
        seconds = j.samples / self.synth.sample_rate
        if seconds:
            self.metrics.observe("rtf", wall / seconds)
        self.metrics.count("requests_total")
        j.deliver(DONE)

    def _fail(self, j: Job, e: ApiError) -> None:
        self.metrics.count("errors_total")
        j.deliver(e)

    def _request(self, s: Speech) -> SynthRequest:
        from fasttts_cli.dubbing.cache import line_seed
        from fasttts_cli.dubbing.plan import clean_text
        from fasttts_cli.synth.languages import spoken_language

        text = clean_text(s.input)
        if not text:
            raise ApiError(400, "input has nothing to speak", "input")
        voice = self._voice(s)
        try:
            lang = spoken_language(self.synth, s.language or self.lang or "und", flag="language")
        except Exception as e:
            raise ApiError(400, str(e), "language") from None
        seed = s.seed if s.seed is not None else line_seed(text, voice.key, 0)
        return SynthRequest("1", text, voice, int(seed), lang=lang)

    def _voice(self, s: Speech) -> Voice:
        """The voice's prepared conditioning, made once per (voice, emotion) and kept."""
        emotion = (
            EmotionSpec(vector=s.emotion, alpha=s.emotion_alpha)
            if s.emotion or s.emotion_alpha != 1.0
            else None
        )
        key = (s.voice, emotion.key() if emotion else "")
        if key not in self._prepared:
            self._prepared[key] = self.synth.prepare_voice(
                self.voices[s.voice], name=s.voice, emotion=emotion
            )
            self.metrics.count("voices_prepared_total")
        return self._prepared[key]
