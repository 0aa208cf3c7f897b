"""The HTTP side of `fasttts serve` (FastAPI/Starlette): routes, auth, and turning a job's events into a
response. The engine side is `worker.EngineWorker`; this module never touches the synthesizer.

A streamed answer (wav/pcm, or SSE) starts only once the first audio is out, so a line that fails before
it still answers a proper 500 with the reason; a line failing after that ends the stream early (the
status was sent). A client that hangs up (or whose stream is dropped) marks its job cancelled: a waiting
job is skipped, a running one stops at the GPT's next step, and nothing else is disturbed.
"""

# No `from __future__ import annotations` here: FastAPI reads the routes' annotations (Request) at run
# time, and they are imported inside make_app.
import asyncio
import base64
import contextlib
import hmac
import json
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.audio.wavstream import pcm16, wav_header
from fasttts_cli.serve.metrics import Metrics
from fasttts_cli.serve.speech import MODELS, ApiError, Speech, parse_speech
from fasttts_cli.serve.worker import DONE, EngineWorker, Job

MEDIA = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
}
POLL_S = 0.1  # how often a waiting request checks that its client is still there


def make_app(
    worker: EngineWorker,
    metrics: Metrics,
    *,
    api_key: str | None,
    max_input_chars: int,
    engine: dict[str, Any],
) -> Any:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            # uvicorn has waited for the responses in flight (SIGTERM: no new connections, then this)
            await asyncio.get_running_loop().run_in_executor(None, worker.stop)

    app = FastAPI(title="fasttts", lifespan=lifespan)
    sr = int(worker.synth.sample_rate)

    def error(e: ApiError) -> Any:
        headers = {"Retry-After": "1"} if e.status == 429 else None
        return JSONResponse(e.body(), status_code=e.status, headers=headers)

    def authorized(request: Request) -> bool:
        given = request.headers.get("authorization", "").encode()
        return api_key is None or hmac.compare_digest(given, f"Bearer {api_key}".encode())

    @app.middleware("http")
    async def auth(request: Request, call_next: Any) -> Any:
        if request.url.path != "/health" and not authorized(request):
            return error(
                ApiError(401, "a bearer token is required (Authorization: Bearer KEY)", None, "auth_error")
            )
        return await call_next(request)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "engine": engine, "queue_depth": worker.depth, "in_flight": worker.in_flight}

    @app.get("/metrics")
    async def prometheus() -> Any:
        return PlainTextResponse(metrics.text(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fasttts"} for m in MODELS]
        return {"object": "list", "data": data}

    @app.post("/v1/audio/speech")
    async def speech(request: Request) -> Any:
        try:
            s = parse_speech(await request.body(), set(worker.voices), max_input_chars)
        except ApiError as e:
            return error(e)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Any] = asyncio.Queue()
        job = Job(s, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev))
        try:
            worker.submit(job)
        except ApiError as e:
            return error(e)
        try:
            first = await _next(events, request, job)
        except asyncio.CancelledError:
            job.cancelled = True
            raise
        if first is None:  # the client left while waiting
            return Response(status_code=499)
        if isinstance(first, ApiError):
            return error(first)
        if not s.streamed:
            audio = [first] if first is not DONE else []
            while (ev := await _next(events, request, job)) is not DONE:
                if ev is None:
                    return Response(status_code=499)
                if isinstance(ev, ApiError):
                    return error(ev)
                audio.append(ev)
            whole = np.concatenate(audio) if audio else np.zeros(0, np.float32)
            body = await loop.run_in_executor(None, _whole, s, whole, sr)  # ffmpeg: off the event loop
            return Response(body, media_type=MEDIA[s.response_format], headers={"X-Sample-Rate": str(sr)})
        gen = _sse(first, events, job, s) if s.stream_format == "sse" else _audio(first, events, job, s, sr)
        media = "text/event-stream" if s.stream_format == "sse" else MEDIA[s.response_format]
        return StreamingResponse(gen, media_type=media, headers={"X-Sample-Rate": str(sr)})

    return app


async def _next(events: asyncio.Queue[Any], request: Any, job: Job) -> Any:
    """The job's next event; None (and the job cancelled) once the client has gone."""
    while True:
        try:
            return await asyncio.wait_for(events.get(), POLL_S)
        except TimeoutError:
            if await request.is_disconnected():
                job.cancelled = True
                return None


async def _events(first: Any, events: asyncio.Queue[Any], job: Job) -> AsyncIterator[np.ndarray]:
    """Audio events from `first` on; an error after the status was sent ends the stream early."""
    ev = first
    try:
        while ev is not DONE:
            if isinstance(ev, ApiError):
                raise RuntimeError(f"the line failed while streaming: {ev.message}")
            yield ev
            ev = await events.get()
    finally:
        if ev is not DONE:
            job.cancelled = True  # the client left (or the stream broke): free the engine's rows


async def _audio(
    first: Any, events: asyncio.Queue[Any], job: Job, s: Speech, sr: int
) -> AsyncIterator[bytes]:
    if s.response_format == "wav":
        yield wav_header(sr)
    async for a in _events(first, events, job):
        yield pcm16(a)


async def _sse(first: Any, events: asyncio.Queue[Any], job: Job, s: Speech) -> AsyncIterator[bytes]:
    """OpenAI's speech SSE: `speech.audio.delta` events with base64 PCM, then `speech.audio.done`."""
    n = 0
    async for a in _events(first, events, job):
        n += a.size
        delta = {"type": "speech.audio.delta", "audio": base64.b64encode(pcm16(a)).decode("ascii")}
        yield f"data: {json.dumps(delta)}\n\n".encode()
    usage = {"input_tokens": len(s.input), "output_tokens": n, "total_tokens": len(s.input) + n}
    yield f"data: {json.dumps({'type': 'speech.audio.done', 'usage': usage})}\n\n".encode()


def _whole(s: Speech, audio: np.ndarray, sr: int) -> bytes:
    """A whole line in the asked format (`speed` as a tempo change, pitch kept)."""
    if s.speed != 1.0 and audio.size:
        from fasttts_cli.audio.tempo import change_tempo

        audio = change_tempo(audio, sr, s.speed)
    if s.response_format == "pcm":
        return pcm16(audio)
    if s.response_format == "wav":
        data = pcm16(audio)
        return wav_header(sr, len(data)) + data
    from fasttts_cli.media.mux import write_audio

    fd, name = tempfile.mkstemp(prefix="fasttts-serve-", suffix=f".{s.response_format}")
    os.close(fd)
    path = Path(name)
    try:
        write_audio(path, audio, sr)
        return path.read_bytes()
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
