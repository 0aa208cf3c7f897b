"""`fasttts serve`: one warm engine behind an OpenAI-compatible speech endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from fasttts_cli.app.progress import Reporter
from fasttts_cli.cli.shared import EXIT_CODES_HELP, EngineOpt, Job, PresetOpt, command


@command("serve", epilog=EXIT_CODES_HELP)
def serve(
    voices: Annotated[
        Path | None,
        typer.Option("--voices", metavar="DIR", help="Reference voices: every audio file, by stem."),
    ] = None,
    cast: Annotated[
        Path | None, typer.Option("--cast", metavar="FILE", help="A cast file's speakers as voices.")
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8000,
    engine: EngineOpt = None,
    preset: PresetOpt = None,
    api_key: Annotated[
        str | None, typer.Option("--api-key", help="Require this bearer token (else $FASTTTS_API_KEY).")
    ] = None,
    lang: Annotated[str, typer.Option("--lang", help="Default language of the input (ISO 639).")] = "und",
    max_queue: Annotated[int, typer.Option("--max-queue", help="Waiting requests before 429.")] = 64,
    max_batch: Annotated[
        int, typer.Option("--max-batch", help="Requests per engine batch (0: the preset's).")
    ] = 0,
    batch_wait_ms: Annotated[
        float, typer.Option("--batch-wait-ms", help="How long a batch waits for more requests.")
    ] = 10.0,
    max_input_chars: Annotated[int, typer.Option("--max-input-chars")] = 4096,
    shutdown_timeout: Annotated[
        float, typer.Option("--shutdown-timeout", help="Seconds SIGTERM waits for requests in flight.")
    ] = 60.0,
) -> Job:
    """Serve speech over HTTP: POST /v1/audio/speech (OpenAI's), /v1/models, /health, /metrics."""
    from fasttts_cli.serve.run import ServeOptions
    from fasttts_cli.serve.run import serve as run_serve

    o = ServeOptions(
        host,
        port,
        engine,
        preset,
        voices,
        cast,
        api_key,
        lang,
        max_queue,
        max_batch,
        batch_wait_ms,
        max_input_chars,
        shutdown_timeout,
    )

    def body(rep: Reporter) -> dict[str, Any]:
        return run_serve(o, rep.warn)

    def human(r: dict[str, Any]) -> None:
        print(f"served {r['served']:g} requests ({r['errors']:g} errors, {r['rejected']:g} rejected)")

    return body, human
