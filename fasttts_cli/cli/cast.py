"""`fasttts cast VIDEO SUBS`: who speaks when (speaker labels for unlabeled subtitles, and a cast file)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from fasttts_cli.app.progress import Reporter
from fasttts_cli.cli.shared import (
    EXIT_CODES_HELP,
    EncodingOpt,
    EngineOpt,
    FormatOpt,
    Job,
    PresetOpt,
    StylesOpt,
    command,
)


@command("cast", progress=True, epilog=EXIT_CODES_HELP)
def cast(
    video: Annotated[Path, typer.Argument(help="The video (or audio) the subtitles are timed to.")],
    subtitles: Annotated[Path, typer.Argument(help="Timed subtitles: .srt .vtt .ass .ssa .tsv .csv .jsonl.")],
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help="Write the subtitles labeled SPEAKER_1..N (.ass .ssa .vtt .tsv .csv) and "
            "<FILE stem>.cast.toml beside it.",
        ),
    ] = None,
    speakers: Annotated[
        int | None, typer.Option("--speakers", metavar="N", help="Force N speakers (default: found).")
    ] = None,
    engine: EngineOpt = None,
    preset: PresetOpt = None,
    input_format: FormatOpt = None,
    encoding: EncodingOpt = None,
    styles: StylesOpt = None,
    separate: Annotated[
        bool,
        typer.Option(
            "--separate",
            help="Embed and cut references from the separated dialogue stem (Demucs), not the mix.",
        ),
    ] = False,
    separation_model: Annotated[
        Path | None,
        typer.Option("--separation-model", metavar="DIR", help="Demucs model folder (see fasttts dub)."),
    ] = None,
) -> Job:
    """Tell who speaks each cue: embed each cue's audio, cluster the voices, label the cues."""
    from fasttts_cli.app.cast_job import CastOptions, run_cast

    opts = CastOptions(
        video,
        subtitles,
        output,
        speakers,
        engine,
        preset,
        input_format,
        encoding,
        styles,
        separate,
        separation_model,
    )

    def body(rep: Reporter) -> dict[str, Any]:
        return run_cast(opts, rep)

    def human(r: dict[str, Any]) -> None:
        from fasttts_cli.cli.tables import Column, print_table

        rows = [
            (str(c["index"]), f"{c['start']:.2f}", c["speaker"], f"{c['confidence']:+.3f}", c["text"])
            for c in r["cues"]
        ]
        cols = [Column("#", right=True), Column("start", right=True), Column("speaker")]
        print_table([*cols, Column("confidence", right=True), Column("text", wrap=True)], rows)
        counts = ", ".join(f"{k} ({v['cues']} cues)" for k, v in r["cast"].items())
        print(f"{r['speakers']} speakers by {r['encoder']}: {counts}; {r['rule']}")
        if r["outputs"]["subtitles"]:
            print(f"wrote {r['outputs']['subtitles']}; cast {r['outputs']['cast'] or '(none)'}")

    return body, human
