"""`fasttts serve`: load the engine once, find the voices, start the engine thread and the HTTP server.

SIGTERM or Ctrl-C: uvicorn stops listening at once, waits for the responses in flight to finish (up to
`--shutdown-timeout` seconds), then the engine thread finishes what it holds and the process exits 0.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttts_cli.errors import InputError, MissingDependencyError, UsageError

API_KEY_ENV = "FASTTTS_API_KEY"
VOICE_EXTS = (".wav", ".flac", ".mp3", ".m4a", ".ogg", ".opus")


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    engine: str | None = None
    preset: str | None = None
    voices: Path | None = None  # --voices DIR: every audio file, named by its stem
    cast: Path | None = None  # --cast FILE: the cast's speakers by name
    api_key: str | None = None  # else FASTTTS_API_KEY
    lang: str = "und"
    max_queue: int = 64
    max_batch: int = 0  # 0: the engine preset's limits.max_batch (8 for the draft voice)
    batch_wait_ms: float = 10.0
    max_input_chars: int = 4096
    shutdown_timeout: float = 60.0


def find_voices(voices: Path | None, cast: Path | None) -> dict[str, Path]:
    """name -> reference audio from the voices folder and the cast file; UsageError when there is none."""
    found: dict[str, Path] = {}
    if voices is not None:
        if not voices.is_dir():
            raise InputError(voices, "--voices: not a folder")
        for p in sorted(voices.iterdir()):
            if p.suffix.lower() in VOICE_EXTS and p.is_file():
                found[p.stem] = p.resolve()
    if cast is not None:
        from fasttts_cli.casting.castfile import read_cast

        for entry in read_cast(cast):
            found[entry.name] = entry.reference
    if not found:
        raise UsageError(
            "serve: no voices",
            hint=f"--voices DIR (audio files {', '.join(VOICE_EXTS)}, named by stem) or --cast cast.toml",
        )
    return found


def serve(o: ServeOptions, warn: Any = None) -> dict[str, Any]:
    """Run the server until SIGTERM / Ctrl-C; returns a summary of what it served."""
    try:
        import uvicorn
    except ImportError:
        raise MissingDependencyError(
            "fasttts serve needs FastAPI and uvicorn", hint="pip install 'fasttts[serve]'"
        ) from None
    from fasttts_cli.app.engine_load import engine_info, load_synthesizer
    from fasttts_cli.serve.http import make_app
    from fasttts_cli.serve.metrics import Metrics
    from fasttts_cli.serve.worker import EngineWorker
    from fasttts_cli.synth.engine_select import select_engine

    if not 0 < o.port < 65536:
        raise UsageError(f"--port {o.port}: must be 1-65535")
    if o.max_queue < 1 or o.max_batch < 0 or o.batch_wait_ms < 0 or o.max_input_chars < 1:
        raise UsageError(
            "--max-queue and --max-input-chars must be >= 1, --max-batch and --batch-wait-ms >= 0"
        )
    voices = find_voices(o.voices, o.cast)
    key = o.api_key or os.environ.get(API_KEY_ENV) or None
    say = warn or (lambda m: print(f"fasttts: warning: {m}", file=sys.stderr))
    if key is None and not _loopback(o.host):
        say(
            f"--host {o.host} is not loopback and no --api-key (or {API_KEY_ENV}) is set: "
            "anyone who can reach it can use it"
        )
    selection = select_engine(o.engine)
    synth = load_synthesizer(selection, o.preset)
    try:
        preset = getattr(getattr(synth, "engine", None), "preset", None)
        batch = o.max_batch or (int(preset.limits.max_batch) if preset is not None else 8)
        metrics = Metrics()
        worker = EngineWorker(
            synth,
            voices,
            metrics,
            max_queue=o.max_queue,
            max_batch=batch,
            batch_wait_ms=o.batch_wait_ms,
            lang=o.lang,
        )
        app = make_app(
            worker,
            metrics,
            api_key=key,
            max_input_chars=o.max_input_chars,
            engine=engine_info(selection, synth, o.preset),
        )
        config = uvicorn.Config(
            app,
            host=o.host,
            port=o.port,
            log_level="warning",
            timeout_graceful_shutdown=int(o.shutdown_timeout),
            lifespan="on",
        )
        print(f"fasttts serve: {len(voices)} voices on http://{o.host}:{o.port}", file=sys.stderr, flush=True)
        _run_until_stopped(uvicorn.Server(config))
    finally:
        synth.close()
    return {
        "ok": True,
        "command": "serve",
        "served": metrics.value("requests_total"),
        "errors": metrics.value("errors_total"),
        "rejected": metrics.value("rejected_total"),
    }


def _run_until_stopped(server: Any) -> None:
    """uvicorn's run; SIGTERM is its graceful stop, after which uvicorn raises the signal again for the
    handler it found: that handler is a no-op here, so a served-out SIGTERM exits 0 (Ctrl-C stays 130)."""
    previous = None
    with contextlib.suppress(ValueError):  # not the main thread (an embedding program): leave signals be
        previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
