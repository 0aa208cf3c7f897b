"""The `fasttts` command line: a thin Typer shell over pipeline.py (dub), inspection.py (inspect),
single_line.py (synth) and doctor.py.

Conventions (README, "Exit codes"): stdout carries only results (with --json: exactly one JSON object,
also on failure); logs, warnings and progress go to stderr. Errors are one line,
`fasttts: error: ...` (plus a hint line), never a traceback unless -v is given.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from fasttts_cli import __version__
from fasttts_cli.errors import ExitCode, FastTTSError, UsageError
from fasttts_cli.progress import NORMAL, QUIET, VERBOSE, Reporter, setup_logging

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 runtime failure (synthesis, ffmpeg, timing --overflow fail); "
    "2 usage or bad input (flag, file, subtitle line, voice); 3 missing dependency, engine or model file; "
    "130 interrupted (Ctrl-C / SIGTERM; finished lines stay cached)."
)

app = typer.Typer(
    name="fasttts",
    help="Batch dubbing from subtitles or scripts with a cloned voice (IndexTTS-2), or the Piper draft "
    "voice when no engine is configured. fasttts does not translate: it speaks the text it is given.\n\n"
    + EXIT_CODES_HELP,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version_cb(value: bool) -> None:
    if value:
        print(f"fasttts {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version_cb, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    pass


# ---- shared option types -------------------------------------------------------------------------

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON object on stdout (logs stay on stderr).")
]
JsonlOpt = Annotated[
    str | None,
    typer.Option("--progress-jsonl", metavar="FILE", help="Write progress events as JSON Lines; - = stderr."),
]
QuietOpt = Annotated[bool, typer.Option("-q", "--quiet", help="Only errors on stderr.")]
VerboseOpt = Annotated[
    int, typer.Option("-v", "--verbose", count=True, help="More detail; tracebacks on errors.")
]
EngineOpt = Annotated[
    str | None,
    typer.Option(
        "--engine",
        metavar="NAME|PATH",
        help="Engine folder, a name under engines/, or 'draft'. "
        "Default: $FASTTTS_ENGINE, else the draft voice.",
    ),
]
PresetOpt = Annotated[str | None, typer.Option("--preset", help="Run-time preset name or .toml path.")]
StylesOpt = Annotated[
    str | None,
    typer.Option("--styles", metavar="A,B", help="ASS/SSA: the dialogue styles to dub (case-insensitive)."),
]
EncodingOpt = Annotated[
    str | None,
    typer.Option("--encoding", metavar="NAME", help="Read the script in this encoding (cp1252, gb18030...)."),
]
FormatOpt = Annotated[
    str | None, typer.Option("--format", help="Input format if the extension is not enough.")
]
NamePrefixOpt = Annotated[bool, typer.Option("--name-prefix", help="Read 'Name: text' prefixes as speakers.")]
BatchSizeOpt = Annotated[int, typer.Option("--batch-size", help="Lines per synthesis batch.")]
MaxBatchTokensOpt = Annotated[int, typer.Option("--max-batch-tokens", help="Padded tokens per batch.")]
MinGapOpt = Annotated[float, typer.Option("--min-gap", help="Seconds kept between lines.")]
StrictVoicesOpt = Annotated[
    bool,
    typer.Option("--strict-voices", help="A --voice NAME= that matches no speaker is an error (exit 2)."),
]
AllowOverlapOpt = Annotated[
    bool,
    typer.Option(
        "--allow-overlap", help="Overlapping cues without distinct named speakers: warn and speak both."
    ),
]

EmotionAudioOpt = Annotated[
    Path | None,
    typer.Option(
        "--emotion-audio", metavar="WAV", help="Emotion reference (default: the speaker's own audio)."
    ),
]
EmotionVectorOpt = Annotated[
    str | None,
    typer.Option(
        "--emotion-vector",
        metavar="8 VALUES",
        help="happy,angry,sad,afraid,disgusted,melancholic,surprised,calm weights in [0, 1].",
    ),
]
EmotionAlphaOpt = Annotated[
    float, typer.Option("--emotion-alpha", help="Strength of the emotion reference or vector (0..1).")
]


def _emotion(audio: Path | None, vector: str | None, alpha: float) -> Any:
    """The EmotionSpec of the three --emotion-* flags; None when they are all at their defaults."""
    from fasttts_cli.synthesizer import EmotionSpec

    if audio is None and vector is None and alpha == 1.0:
        return None
    if audio is not None and not audio.is_file():
        raise UsageError(f"--emotion-audio {audio}: file not found")
    if audio is not None and vector is not None:
        raise UsageError("--emotion-audio and --emotion-vector: give one of them, not both")
    if not 0.0 <= alpha <= 1.0:
        raise UsageError(f"--emotion-alpha {alpha}: must be between 0 and 1")
    vec = None
    if vector is not None:
        try:
            vec = tuple(float(v) for v in vector.split(","))
        except ValueError:
            vec = ()
        if len(vec) != 8 or any(not 0.0 <= v <= 1.0 for v in vec):
            raise UsageError(
                f"--emotion-vector {vector!r}: expected 8 comma-separated values in [0, 1]",
                hint="order: happy,angry,sad,afraid,disgusted,melancholic,surprised,calm",
            )
    return EmotionSpec(audio=audio, vector=vec, alpha=alpha)


def _verbosity(quiet: bool, verbose: int) -> int:
    return QUIET if quiet else (NORMAL if verbose == 0 else VERBOSE)


def _execute(
    json_out: bool,
    verbosity: int,
    jsonl: str | None,
    command: str,
    body: Callable[[Reporter], dict[str, Any]],
    human: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Run one command body with the error contract: returns the exit code."""
    setup_logging(verbosity)
    rep: Reporter | None = None
    try:
        try:
            rep = Reporter(verbosity=verbosity, jsonl=jsonl)
        except OSError as e:
            raise UsageError(f"--progress-jsonl {jsonl}: cannot open: {e.strerror or e}") from None
        rep.event("start", command=command, version=__version__)
        result = body(rep)
        code = int(result.pop("_exit_code", 0))
        if json_out:
            _emit_json(result)
        elif human is not None and verbosity >= NORMAL:
            human(result)
        return code
    except FastTTSError as e:
        return _fail(json_out, rep, command, e.message, e.hint, int(e.exit_code), type(e).__name__, verbosity)
    except OSError as e:
        # Disk full, permissions, a folder vanishing mid-run: name the file that failed (for a copy that
        # ran out of space, the destination, not the source), no traceback.
        from fasttts_cli.partials import os_error_message

        msg = os_error_message(e)
        return _fail(json_out, rep, command, msg, None, int(ExitCode.RUNTIME), "io", verbosity)
    except KeyboardInterrupt as e:
        msg = getattr(e, "message", None) or "interrupted"
        return _fail(json_out, rep, command, msg, None, int(ExitCode.INTERRUPTED), "interrupted", verbosity)
    except Exception as e:  # the contract: no traceback unless -v
        if verbosity >= VERBOSE:
            traceback.print_exc(file=sys.stderr)
        msg = f"internal error: {type(e).__name__}: {e}"
        hint = None if verbosity >= VERBOSE else "run again with -v for the traceback"
        return _fail(json_out, rep, command, msg, hint, int(ExitCode.RUNTIME), "internal", verbosity)
    finally:
        if rep is not None:
            rep.close()


def _fail(
    json_out: bool,
    rep: Reporter | None,
    command: str,
    message: str,
    hint: str | None,
    code: int,
    kind: str,
    verbosity: int,
) -> int:
    print(f"fasttts: error: {message}", file=sys.stderr)
    if hint:
        print(f"  hint: {hint}", file=sys.stderr)
    if rep is not None:
        rep.event("error", ok=False, error=message, exit_code=code)
    if json_out:
        _emit_json(
            {
                "ok": False,
                "command": command,
                "error": message,
                "hint": hint,
                "kind": kind,
                "exit_code": code,
                "warnings": rep.warnings if rep is not None else [],
            }
        )
    return code


def _emit_json(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


# ---- dub -----------------------------------------------------------------------------------------


@app.command(epilog=EXIT_CODES_HELP)
def dub(
    script: Annotated[
        Path,
        typer.Argument(help="Subtitles or script: .srt .vtt .ass .ssa .txt .tsv .csv .jsonl; - = stdin."),
    ],
    voice: Annotated[
        list[str] | None,
        typer.Option(
            "--voice",
            metavar="[NAME=]PATH",
            help="Reference voice: PATH (default) or NAME=PATH per speaker; repeat.",
        ),
    ] = None,
    video: Annotated[
        Path | None, typer.Option("--video", help="Video to dub; without it, audio only.")
    ] = None,
    lang: Annotated[
        str, typer.Option("--lang", help="ISO 639-2 code of the dub language (eng, spa, ...).")
    ] = "und",
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Output file (default <stem>.<lang>.<ext>).")
    ] = None,
    output_dir: Annotated[
        Path | None, typer.Option("--output-dir", help="Folder for outputs (default: next to the input).")
    ] = None,
    work_dir: Annotated[
        Path | None,
        typer.Option("--work-dir", help="Cache/work folder (default <stem>.fasttts/ by the output)."),
    ] = None,
    engine: EngineOpt = None,
    preset: PresetOpt = None,
    input_format: FormatOpt = None,
    name_prefix: NamePrefixOpt = False,
    strict_voices: StrictVoicesOpt = False,
    styles: StylesOpt = None,
    encoding: EncodingOpt = None,
    allow_overlap: AllowOverlapOpt = False,
    batch_size: BatchSizeOpt = 8,
    max_batch_tokens: MaxBatchTokensOpt = 2000,
    seed: Annotated[
        int, typer.Option("--seed", help="Base seed; each line's seed derives from it, its text and voice.")
    ] = 0,
    only: Annotated[
        str | None, typer.Option("--only", metavar="3,7-9", help="Re-render just these lines (forced).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check inputs and write the plan; load no model.")
    ] = False,
    on_line_failure: Annotated[str, typer.Option("--on-line-failure", help="fail | silence | skip")] = "fail",
    max_retries: Annotated[
        int, typer.Option("--max-retries", help="Re-syntheses of an implausible line.")
    ] = 2,
    max_speedup: Annotated[
        float, typer.Option("--max-speedup", help="Tempo cap (1.25 = 25% faster).")
    ] = 1.25,
    max_slowdown: Annotated[
        float, typer.Option("--max-slowdown", help="Slow-down cap (1.0 = never slow down).")
    ] = 1.0,
    min_gap: MinGapOpt = 0.08,
    max_factor_step: Annotated[
        float, typer.Option("--max-factor-step", help="Max tempo difference of neighbours.")
    ] = 0.1,
    overflow: Annotated[str, typer.Option("--overflow", help="shift | overlap | truncate | fail")] = "shift",
    mix: Annotated[str, typer.Option("--mix", help="replace | keep | duck | background")] = "replace",
    background: Annotated[
        Path | None, typer.Option("--background", help="Music-and-effects stem under the dub.")
    ] = None,
    loudness: Annotated[float, typer.Option("--loudness", help="Integrated loudness target, LUFS.")] = -23.0,
    true_peak: Annotated[float, typer.Option("--true-peak", help="True-peak ceiling, dBTP.")] = -1.0,
    soft_subtitles: Annotated[
        bool, typer.Option("--soft-subtitles", help="Embed the re-timed subtitles.")
    ] = False,
    default_subtitles: Annotated[
        bool, typer.Option("--default-subtitles", help="Mark the soft-subtitle track default (shown).")
    ] = False,
    title: Annotated[str | None, typer.Option("--title", help="Dub track title.")] = None,
    no_wait: Annotated[
        bool,
        typer.Option("--no-wait", help="If another run holds the work folder, exit 2 instead of waiting."),
    ] = False,
    emotion_audio: EmotionAudioOpt = None,
    emotion_vector: EmotionVectorOpt = None,
    emotion_alpha: EmotionAlphaOpt = 1.0,
    json_out: JsonOpt = False,
    progress_jsonl: JsonlOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = 0,
) -> int:
    """Dub a subtitle/script file: synthesize every line, fit it to its slot, mix, mux."""
    from fasttts_cli.pipeline import DubOptions, run_dub

    opts = DubOptions(
        script=script,
        voices=list(voice or []),
        video=video,
        lang=lang,
        output=output,
        output_dir=output_dir,
        work_dir=work_dir,
        engine=engine,
        preset=preset,
        input_format=input_format,
        name_prefix=name_prefix,
        strict_voices=strict_voices,
        styles=styles,
        encoding=encoding,
        allow_overlap=allow_overlap,
        batch_size=batch_size,
        max_batch_tokens=max_batch_tokens,
        seed=seed,
        only=only,
        dry_run=dry_run,
        on_line_failure=on_line_failure,
        max_retries=max_retries,
        max_speedup=max_speedup,
        max_slowdown=max_slowdown,
        min_gap=min_gap,
        max_factor_step=max_factor_step,
        overflow=overflow,
        mix=mix,
        background=background,
        loudness=loudness,
        true_peak=true_peak,
        soft_subtitles=soft_subtitles,
        default_subtitles=default_subtitles,
        title=title,
        no_wait=no_wait,
    )

    def body(rep: Reporter) -> dict[str, Any]:
        opts.emotion = _emotion(emotion_audio, emotion_vector, emotion_alpha)
        return run_dub(opts, rep).to_json()

    def human(r: dict[str, Any]) -> None:
        if r.get("dry_run"):
            ln = r["lines"]
            print(f"dry run: {ln['total']} lines in {ln['batches']} batches; plan: {r['outputs']['plan']}")
            print(f"would write: {r['outputs']['would_write']}")
            return
        s = r["lines"]
        main = r["outputs"].get("video") or r["outputs"].get("audio")
        print(f"wrote {main}")
        print(f"subtitles {r['outputs']['subtitles']}; report {r['report']}")
        print(
            f"{s['total']} lines: {s['synthesized']} synthesized, {s['cached']} cached, "
            f"{s['failed']} failed, {s['retries']} retries; {s['sped_up']} sped up "
            f"(max {s['max_factor']}x), {s['shifted']} shifted; "
            f"{s['loudness_lufs']} LUFS, {s['true_peak_dbtp']} dBTP"
        )

    return _execute(json_out, _verbosity(quiet, verbose), progress_jsonl, "dub", body, human)


# ---- synth ---------------------------------------------------------------------------------------


@app.command(epilog=EXIT_CODES_HELP)
def synth(
    text: Annotated[str, typer.Argument(help="The text to speak; - reads it from stdin.")],
    voice: Annotated[Path, typer.Option("--voice", help="Reference voice audio.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Output audio: .wav, .flac or .m4a.")],
    engine: EngineOpt = None,
    preset: PresetOpt = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    on_line_failure: Annotated[
        str, typer.Option("--on-line-failure", help="fail | silence (write silence of the text's length)")
    ] = "fail",
    max_retries: Annotated[
        int, typer.Option("--max-retries", help="Re-syntheses of an implausible line.")
    ] = 2,
    emotion_audio: EmotionAudioOpt = None,
    emotion_vector: EmotionVectorOpt = None,
    emotion_alpha: EmotionAlphaOpt = 1.0,
    json_out: JsonOpt = False,
    progress_jsonl: JsonlOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = 0,
) -> int:
    """Speak one line in a reference voice, to an audio file at the engine's sample rate."""
    from fasttts_cli.single_line import SynthOptions, synth_one

    def body(rep: Reporter) -> dict[str, Any]:
        t = sys.stdin.read() if text == "-" else text
        emotion = _emotion(emotion_audio, emotion_vector, emotion_alpha)
        so = SynthOptions(
            t,
            voice,
            output,
            engine=engine,
            preset=preset,
            seed=seed,
            max_retries=max_retries,
            emotion=emotion,
            on_line_failure=on_line_failure,
        )
        return synth_one(so, rep)

    def human(r: dict[str, Any]) -> None:
        silent = " of silence: synthesis failed" if r.get("failed") else ""
        print(f"wrote {r['outputs']['audio']} ({r['duration']:.2f} s{silent} at {r['sample_rate']} Hz)")

    return _execute(json_out, _verbosity(quiet, verbose), progress_jsonl, "synth", body, human)


# ---- inspect -------------------------------------------------------------------------------------


@app.command(epilog=EXIT_CODES_HELP)
def inspect(
    script: Annotated[Path, typer.Argument(help="Subtitles or script file; - = stdin.")],
    voice: Annotated[
        list[str] | None,
        typer.Option(
            "--voice", metavar="[NAME=]PATH", help="Voices as for dub (optional here: shows who has none)."
        ),
    ] = None,
    video: Annotated[
        Path | None, typer.Option("--video", help="The video: the forecast stops at its end.")
    ] = None,
    engine: EngineOpt = None,
    input_format: FormatOpt = None,
    name_prefix: NamePrefixOpt = False,
    strict_voices: StrictVoicesOpt = False,
    styles: StylesOpt = None,
    encoding: EncodingOpt = None,
    allow_overlap: AllowOverlapOpt = False,
    batch_size: BatchSizeOpt = 8,
    max_batch_tokens: MaxBatchTokensOpt = 2000,
    max_speedup: Annotated[
        float, typer.Option("--max-speedup", help="Tempo cap for the forecast (as for dub).")
    ] = 1.25,
    min_gap: MinGapOpt = 0.08,
    only: Annotated[
        str | None, typer.Option("--only", metavar="3,7-9", help="Batch just these lines, as dub would.")
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = 0,
) -> int:
    """Show cues, speakers, batches and a timing forecast (no model is loaded)."""
    from fasttts_cli.inspection import inspect_job
    from fasttts_cli.job import DubOptions

    opts = DubOptions(
        script=script,
        voices=list(voice or []),
        video=video,
        engine=engine,
        input_format=input_format,
        name_prefix=name_prefix,
        strict_voices=strict_voices,
        styles=styles,
        encoding=encoding,
        allow_overlap=allow_overlap,
        batch_size=batch_size,
        max_batch_tokens=max_batch_tokens,
        max_speedup=max_speedup,
        min_gap=min_gap,
        only=only,
    )
    return _execute(
        json_out, _verbosity(quiet, verbose), None, "inspect", lambda rep: inspect_job(opts), _print_inspect
    )


def _print_inspect(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(soft_wrap=True)
    fc = {t["index"]: t for t in r["forecast"]["lines"]}
    t = Table(title=f"{r['script']}: {len(r['cues'])} lines (engine: {r['engine']['kind']})")
    for col in ("#", "start", "end", "speaker", "tokens", "est. s", "factor", "action", "text"):
        t.add_column(col)
    for c in r["cues"]:
        f = fc.get(c["index"], {})
        t.add_row(
            str(c["index"]),
            f"{c['start']:.2f}",
            f"{c['end']:.2f}",
            c["speaker"] or "",
            str(c["tokens"]),
            f"{f.get('natural', 0):.2f}",
            f"{f.get('factor', 1):.2f}",
            f.get("action", ""),
            c["text"],
        )
    con.print(t)
    sp = ", ".join(
        f"{k} ({v['lines']} lines -> {v['voice'] or 'no voice yet'})" for k, v in r["speakers"].items()
    )
    con.print(f"speakers: {sp}")
    for b in r["batches"]:
        con.print(f"batch {b['index']}: voice {b['voice'] or '(none yet)'}, lines {b['lines']}")
    s = r["forecast"]["summary"]
    con.print(
        f"forecast at {r['forecast']['chars_per_second']} chars/s: max factor {s['max_factor']}, "
        f"{s['actions'].get('shifted', 0)} shifted, {s['overflowing']} overflowing"
    )
    for w in r.get("warnings", []):
        con.print(f"warning: {w}", style="yellow")


# ---- presets -------------------------------------------------------------------------------------


@app.command()
def presets(json_out: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = 0) -> int:
    """List the precision presets and what each needs."""

    def body(rep: Reporter) -> dict[str, Any]:
        return list_presets()

    def human(r: dict[str, Any]) -> None:
        from rich.console import Console
        from rich.table import Table

        t = Table(title="presets (build with: fasttts build --preset NAME)")
        for col in ("name", "needs", "here", "description"):
            t.add_column(col)
        for p in r["presets"]:
            here = _HERE[bool(p.get("can_build")), bool(p.get("can_run"))]
            t.add_row(p["name"], p["needs"], here, p["description"])
        con = Console(soft_wrap=True)
        con.print(t)
        for p in r["presets"]:
            for m in p.get("missing", []):
                con.print(f"{p['name']}: missing {m}", markup=False, highlight=False)

    return _execute(json_out, _verbosity(quiet, verbose), None, "presets", body, human)


# Building (torch + onnx) and running (the runtime, the GPU) need different things: say which holds.
_HERE = {
    (True, True): "build+run",
    (True, False): "build only",
    (False, True): "run only",
    (False, False): "no",
}


def list_presets() -> dict[str, Any]:
    from fasttts_cli.gpu_stack import detect
    from fasttts_cli.presets import available_presets, parse_preset

    stack = detect()
    out = []
    for name, path in sorted(available_presets().items()):
        try:
            p = parse_preset(path)
        except FastTTSError as e:
            out.append({"name": name, "file": str(path), "error": e.message, "needs": "?", "description": ""})
            continue
        backends = sorted({c.backend for c in p.components.values()})
        out.append(
            {
                "name": p.name,
                "file": str(path),
                "description": p.description,
                "backends": backends,
                "precisions": sorted({c.precision for c in p.components.values()}),
                "needs": _needs(backends),
                **_status(p, stack),
                "decode": p.run_keys()["decode"],
                "s2mel": p.run_keys()["s2mel"],
            }
        )
    return {"ok": True, "command": "presets", "presets": out}


def _status(preset: Any, stack: Any) -> dict[str, Any]:
    from fasttts_cli.gpu_stack import preset_status

    try:
        st = preset_status(preset, stack)
    except FastTTSError as e:
        return {"can_build": False, "can_run": False, "missing": [e.message]}
    return {"can_build": st.can_build, "can_run": st.can_run, "missing": list(st.missing)}


def _needs(backends: list[str]) -> str:
    need = {
        "onnxruntime-cpu": "CPU (onnxruntime)",
        "onnxruntime-cuda": "NVIDIA GPU + onnxruntime-gpu",
        "tensorrt": "NVIDIA GPU + TensorRT (extra `gpu`)",
        "tensorrt-llm": "NVIDIA GPU + TensorRT-LLM (extra `trtllm`)",
        "torch": "PyTorch (extra `build`)",
    }
    return "; ".join(need.get(b, b) for b in backends) or "-"


# ---- doctor --------------------------------------------------------------------------------------


@app.command()
def doctor(json_out: JsonOpt = False, quiet: QuietOpt = False, verbose: VerboseOpt = 0) -> int:
    """Check ffmpeg, engines, runtimes and the GPU stack; say what is missing and the licences in use."""
    from fasttts_cli.doctor import run_doctor

    def body(rep: Reporter) -> dict[str, Any]:
        r = run_doctor()
        r["_exit_code"] = 0 if r["ok"] else int(ExitCode.MISSING)
        return r

    def human(r: dict[str, Any]) -> None:
        mark = {"ok": "ok ", "missing": "MISSING", "warn": "warn", "info": "-- "}
        for c in r["checks"]:
            print(f"[{mark.get(c['status'], c['status']):>7}] {c['name']}: {c['detail']}")
            if c["fix"] and c["status"] != "ok":
                print(f"          fix: {c['fix']}")
        print("licences of the models in use:")
        for kind, rows in r["licences"].items():
            for row in rows:
                print(f"  [{kind}] {row['model']}: {row['licence']}")
        for p in r["problems"]:
            print(f"problem: {p}")

    return _execute(json_out, _verbosity(quiet, verbose), None, "doctor", body, human)


# ---- engine building -----------------------------------------------------------------------------


def _missing_build_extra(e: ImportError) -> FastTTSError:
    from fasttts_cli.errors import MissingDependencyError

    return MissingDependencyError(
        f"the build side needs the `build` extra ({e.name or e})",
        hint="pip install -e '.[build]'  (torch==2.13.0, onnx, safetensors, transformers)",
    )


@app.command()
def build(
    checkpoint: Annotated[
        Path,
        typer.Option(
            "--checkpoint",
            metavar="DIR",
            help="IndexTTS-2 checkpoint: the official folder (as `fasttts download` writes it), the "
            "plain release folder, or the Hugging Face cache (a snapshot, models--IndexTeam--IndexTTS-2, "
            "or the hub folder). Auxiliary models are also looked for in $HF_HUB_CACHE / $HF_HOME/hub.",
        ),
    ],
    preset: Annotated[
        str, typer.Option("--preset", metavar="NAME|FILE", help="Preset to build.")
    ] = "cpu-fp32",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Engine folder (default engines/<checkpoint>-<preset>; from a HF cache: "
            "engines/IndexTTS-2-<preset>).",
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing engine folder.")
    ] = False,
    w2v_bert: Annotated[
        Path | None,
        typer.Option("--w2v-bert", metavar="DIR", help="w2v-BERT 2.0 folder (default hf_cache/)."),
    ] = None,
    codec: Annotated[
        Path | None, typer.Option("--codec", metavar="FILE", help="semantic_codec_model.safetensors.")
    ] = None,
    campplus: Annotated[
        Path | None, typer.Option("--campplus", metavar="FILE", help="campplus_cn_common.bin.")
    ] = None,
    bigvgan: Annotated[
        Path | None,
        typer.Option("--bigvgan", metavar="DIR", help="BigVGAN folder (config.json + generator)."),
    ] = None,
    json_out: JsonOpt = False,
    progress_jsonl: JsonlOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = 0,
) -> int:
    """Export an engine folder (ONNX per component, tokenizer, tables, manifest) from a checkpoint."""

    def body(rep: Reporter) -> dict[str, Any]:
        import time

        try:
            from fasttts_cli.build.checkpoint import CheckpointPaths
            from fasttts_cli.build.export import build_engine
        except ImportError as e:
            raise _missing_build_extra(e) from None
        if not checkpoint.is_dir():
            raise UsageError(
                f"--checkpoint {checkpoint}: not a directory",
                hint="fetch the release with `fasttts download DIR`, then build with --checkpoint DIR",
            )
        t0 = time.perf_counter()
        paths = CheckpointPaths(
            checkpoint, w2v_bert=w2v_bert, codec=codec, campplus=campplus, bigvgan=bigvgan
        )
        target = out if out is not None else _hub_default_out(checkpoint, preset)

        def say(msg: str) -> None:
            rep.info(msg)
            rep.event("stage", name=msg)

        def built(c: Any) -> None:  # build.export.ComponentBuilt
            rep.build_component(c.name, c.index, c.total, c.seconds)

        folder = build_engine(paths, preset, target, overwrite=overwrite, progress=say, on_component=built)
        return {
            "ok": True,
            "command": "build",
            "engine": str(folder),
            "preset": preset,
            "seconds": round(time.perf_counter() - t0, 2),
        }

    def human(r: dict[str, Any]) -> None:
        print(f"engine written to {r['engine']} ({r['seconds']} s); use it with --engine {r['engine']}")

    return _execute(json_out, _verbosity(quiet, verbose), progress_jsonl, "build", body, human)


def _hub_default_out(checkpoint: Path, preset: str) -> Path | None:
    """engines/IndexTTS-2-<preset> for a Hugging Face cache layout, whose folder names (a revision hash,
    `hub`) say nothing; None (the builder's own default) for the other layouts."""
    from fasttts_cli.build.release_layout import HUB_KINDS, find_layout
    from fasttts_cli.engine_select import engines_root

    if find_layout(checkpoint).kind not in HUB_KINDS:
        return None
    name = Path(preset).stem if preset.endswith(".toml") else preset
    return engines_root() / f"IndexTTS-2-{name}"


@app.command()
def download(
    out_dir: Annotated[
        Path, typer.Argument(metavar="DIR", help="Checkpoint folder to fill (new or partial).")
    ],
    model: Annotated[str, typer.Option("--model", help="Model to fetch.")] = "indextts2",
    with_qwen: Annotated[
        bool,
        typer.Option(
            "--with-qwen", help="Also fetch qwen0.6bemo4-merge/ (emotion from text; fasttts does not use it)."
        ),
    ] = False,
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", metavar="DIR", help="Hugging Face cache (default: huggingface_hub's)."),
    ] = None,
    revision: Annotated[
        str | None, typer.Option("--revision", help="Revision of IndexTeam/IndexTTS-2 (default main).")
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = 0,
) -> int:
    """Fetch the public IndexTTS-2 release (5 Hugging Face repositories) into the layout `build` reads."""
    from fasttts_cli.download import download_release

    def body(rep: Reporter) -> dict[str, Any]:
        r = download_release(
            out_dir,
            model=model,
            with_qwen=with_qwen,
            cache_dir=cache_dir,
            revision=revision,
            progress=rep.info,
            progress_bars=not quiet and not json_out,
        )
        return r.to_json()

    def human(r: dict[str, Any]) -> None:
        print(
            f"checkpoint in {r['checkpoint']}: {r['fetched']} files fetched, {r['present']} already there "
            f"({r['bytes'] / 1e9:.2f} GB); next: fasttts build --checkpoint {r['checkpoint']}"
        )

    return _execute(json_out, _verbosity(quiet, verbose), None, "download", body, human)


@app.command("tiny-checkpoint")
def tiny_checkpoint(
    out_dir: Annotated[Path, typer.Argument(metavar="DIR", help="Folder to create (must be new or empty).")],
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random weights.")] = 0,
    full: Annotated[
        bool, typer.Option("--full", help="The release's full sizes instead of tiny ones (several GB).")
    ] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = 0,
) -> int:
    """Write a random-weight checkpoint in the official IndexTTS-2 layout (tiny by default, for tests)."""

    def body(rep: Reporter) -> dict[str, Any]:
        try:
            from fasttts_cli.build.tiny import FULL, TINY, write_tiny_checkpoint
        except ImportError as e:
            raise _missing_build_extra(e) from None
        folder = write_tiny_checkpoint(out_dir, seed=seed, sizes=FULL if full else TINY)
        size = sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())
        return {
            "ok": True,
            "command": "tiny-checkpoint",
            "checkpoint": str(folder),
            "bytes": size,
            "seed": seed,
        }

    def human(r: dict[str, Any]) -> None:
        print(f"checkpoint written to {r['checkpoint']} ({r['bytes'] / 1e6:.1f} MB)")

    return _execute(json_out, _verbosity(quiet, verbose), None, "tiny-checkpoint", body, human)


@app.command()
def bench(
    engine: Annotated[
        Path | None, typer.Option("--engine", metavar="DIR", help="Engine folder to time.")
    ] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option("--checkpoint", metavar="DIR", help="The engine's checkpoint, for the eager side."),
    ] = None,
    random_weights: Annotated[
        bool, typer.Option("--random-weights", help="Full-size random checkpoint + engine in a temp folder.")
    ] = False,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset", metavar="NAME|FILE", help="Default: the engine's own (cpu-fp32 when random)."
        ),
    ] = None,
    tokens: Annotated[int, typer.Option("--tokens", help="Generated tokens per line (forced).")] = 100,
    batch: Annotated[str, typer.Option("--batch", metavar="1,4,8", help="Batch sizes.")] = "1,4,8",
    beams: Annotated[str, typer.Option("--beams", metavar="1,3", help="Beam counts.")] = "1,3",
    steps_timed: Annotated[
        int, typer.Option("--steps-timed", help="CFM steps run per measurement (scaled to the preset's).")
    ] = 2,
    threads: Annotated[int | None, typer.Option("--threads", help="CPU threads (default: all).")] = None,
    no_eager: Annotated[bool, typer.Option("--no-eager", help="Skip the PyTorch eager side.")] = False,
    rounds: Annotated[
        int, typer.Option("--rounds", help="Time ours then eager this many times; report medians.")
    ] = 1,
    work_dir: Annotated[
        Path | None, typer.Option("--work-dir", metavar="DIR", help="Keep the random checkpoint/engine here.")
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = 0,
) -> int:
    """Per-stage times, RTF and lines/s: our runtime vs the PyTorch eager modules, same weights, one run."""

    def ints(flag: str, value: str) -> tuple[int, ...]:
        try:
            out = tuple(int(v) for v in value.split(",") if v.strip())
        except ValueError:
            out = ()
        if not out or min(out) < 1:
            raise UsageError(f"{flag} {value!r}: expected positive integers such as 1,4,8")
        return out

    def body(rep: Reporter) -> dict[str, Any]:
        try:
            from fasttts_cli.bench import BenchOptions, format_table, run_bench, to_json
        except ImportError as e:
            raise _missing_build_extra(e) from None
        if not random_weights and engine is None:
            raise UsageError("bench: give --engine DIR or --random-weights")
        opts = BenchOptions(
            engine=engine,
            checkpoint=checkpoint,
            random_weights=random_weights,
            preset=preset,
            tokens=tokens,
            batches=ints("--batch", batch),
            beams=ints("--beams", beams),
            s2mel_steps_timed=steps_timed,
            eager=not no_eager,
            threads=threads,
            work_dir=work_dir,
            rounds=rounds,
        )
        result = run_bench(opts, progress=rep.info)
        table = format_table(result)
        # numpy scalars and int keys: bench's own encoder makes the result plain JSON
        return {"ok": True, "command": "bench", **json.loads(to_json(result)), "_table": table}

    def human(r: dict[str, Any]) -> None:
        print(r["_table"])

    def body_json(rep: Reporter) -> dict[str, Any]:
        r = body(rep)
        if json_out:
            r.pop("_table", None)
        return r

    return _execute(json_out, _verbosity(quiet, verbose), None, "bench", body_json, human)


@app.command()
def calibrate(
    engine: Annotated[Path, typer.Option("--engine", metavar="DIR", help="Engine folder to calibrate.")],
    voice: Annotated[
        list[Path], typer.Option("--voice", metavar="REF", help="A reference voice (repeat: a few of yours).")
    ],
    text: Annotated[list[str], typer.Option("--text", help="A calibration line (repeat: a few of yours).")],
    level: Annotated[
        list[str] | None, typer.Option("--level", metavar="T1..T6", help="Levels to calibrate (default all).")
    ] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            metavar="DIR",
            help="The engine's checkpoint (needed once, to export the DiT pieces).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the calibration noise and codes.")] = 0,
    max_codes: Annotated[
        int | None, typer.Option("--max-codes", help="Cap each line's codes (faster calibration).")
    ] = None,
    max_trials: Annotated[
        int | None,
        typer.Option("--max-trials", help="Cap the trials per pass (untried modules stay computed)."),
    ] = None,
    threads: Annotated[int | None, typer.Option("--threads", help="CPU threads (default: all).")] = None,
    json_out: JsonOpt = False,
    progress_jsonl: JsonlOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = 0,
) -> int:
    """Calibrate the s2mel cache (DiTReducio-style step and CFG-branch skipping) into an engine folder."""

    def body(rep: Reporter) -> dict[str, Any]:
        from fasttts_cli.engine_folder import read_manifest
        from fasttts_cli.errors import EngineMismatchError, MissingDependencyError
        from fasttts_cli.s2mel_cache.calibrate import calibrate as run_calibration
        from fasttts_cli.s2mel_cache.piecewise_ort import PIECES_DIR
        from fasttts_cli.s2mel_cache.policy import LEVELS

        levels = list(level or [k for k in LEVELS if k != "T0"])
        for lv in levels:
            if lv not in LEVELS or lv == "T0":
                raise UsageError(
                    f"--level {lv}: unknown", hint=f"choose from {', '.join(k for k in LEVELS if k != 'T0')}"
                )
        for v in voice:
            if not v.is_file():
                raise UsageError(f"--voice {v}: file not found")
        manifest = read_manifest(engine, expect_model="indextts2")
        if not (engine / PIECES_DIR).is_dir():
            if checkpoint is None:
                raise MissingDependencyError(
                    f"{engine}: has no {PIECES_DIR}/ (the DiT exported in pieces)",
                    hint="pass --checkpoint DIR (the engine's own checkpoint) once to export them",
                )
            try:
                from fasttts_cli.build.checkpoint import CheckpointPaths, load_checkpoint
                from fasttts_cli.s2mel_cache.export_pieces import export_pieces_into_engine
            except ImportError as e:
                raise _missing_build_extra(e) from None
            rep.info(f"loading {checkpoint}")
            m = load_checkpoint(CheckpointPaths(checkpoint))
            if m.digest() != manifest.checkpoint_digest:
                raise EngineMismatchError(
                    f"--checkpoint {checkpoint}: not the checkpoint {engine} was built from (digest differs)"
                )
            rep.info(f"exporting the DiT pieces into {engine / PIECES_DIR}")
            export_pieces_into_engine(engine, m.s2mel.cfm.estimator)
        extra = {} if max_trials is None else {"max_trials": max_trials}
        ps = run_calibration(
            engine,
            voice,
            text,
            levels,
            seed=seed,
            threads=threads,
            max_codes=max_codes,
            progress=rep.info,
            **extra,
        )
        rows = {
            k: {"threshold": p.threshold, "kept": round(p.kept_fraction(), 4), "error": p.error}
            for k, p in sorted(ps.levels.items())
        }
        return {"ok": True, "command": "calibrate", "engine": str(engine), "levels": rows}

    def human(r: dict[str, Any]) -> None:
        print(
            f"s2mel cache policy written into {r['engine']}; pick a level with s2mel.cache_level in a preset"
        )
        for k, row in r["levels"].items():
            err = "-" if row["error"] is None else f"{row['error']:.4f}"
            print(f"  {k}: threshold {row['threshold']:.4f}, modules kept {row['kept']:.3f}, error {err}")

    return _execute(json_out, _verbosity(quiet, verbose), progress_jsonl, "calibrate", body, human)


# ---- entry point ---------------------------------------------------------------------------------


def _sigterm(signum: int, frame: Any) -> None:
    # Treat a polite kill like Ctrl-C: unwind through the same cleanup (temp files removed, cache consistent).
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """Console script entry: `fasttts`."""
    args = _hoist_global_flags(list(sys.argv[1:] if argv is None else argv))
    json_out = "--json" in args
    if argv is None:  # the console script, not an embedding program or a test
        with contextlib.suppress(ValueError):  # ValueError: not the main thread
            signal.signal(signal.SIGTERM, _sigterm)
    cmd = _command_of(args)
    try:
        rv = app(args=args, prog_name="fasttts", standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except _NO_ARGS as e:
        # Bare `fasttts`: the help text, not an error message.
        print(e.format_message(), file=sys.stderr)
        code = int(ExitCode.USAGE)
    except _ABORT:
        code = _fail(json_out, None, cmd, "interrupted", None, 130, "interrupted", NORMAL)
    except _CLICK_ERRORS as e:
        msg, hint = e.format_message(), _usage_hint(e)
        code = _fail(json_out, None, cmd, msg, hint, int(ExitCode.USAGE), "usage", NORMAL)
    except _EXIT as e:
        code = int(getattr(e, "exit_code", 0) or 0)
    sys.exit(code)


def _exc(attr: str) -> tuple[type[BaseException], ...]:
    """The same exception from click and from typer's vendored copy of click (typer >= 0.2x)."""
    found: list[type[BaseException]] = []
    for mod in ("click.exceptions", "typer._click.exceptions", "typer.exceptions", "typer"):
        try:
            m = __import__(mod, fromlist=[attr])
        except ImportError:
            continue
        if isinstance(getattr(m, attr, None), type):
            found.append(getattr(m, attr))
    return tuple(dict.fromkeys(found))


_NO_ARGS = _exc("NoArgsIsHelpError")
_ABORT = _exc("Abort")
_CLICK_ERRORS = _exc("ClickException")
_EXIT = _exc("Exit")


def _command_of(args: list[str]) -> str:
    return next((a for a in args if not a.startswith("-")), "")


# Flags every command takes, accepted before the command name too (`fasttts --json doctor`): scripts put
# them where they put them for git or docker.
_GLOBAL_FLAGS = frozenset({"--json", "-q", "--quiet", "-v", "-vv", "-vvv", "--verbose"})


def _hoist_global_flags(args: list[str]) -> list[str]:
    """Move the global flags written before the command name to just after it."""
    cmd = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
    if cmd is None:
        return args
    lead = args[:cmd]
    if not lead or any(a not in _GLOBAL_FLAGS for a in lead):
        return args  # --version / --help / unknown flags: click reports them as before
    return [args[cmd], *lead, *args[cmd + 1 :]]


def _usage_hint(e: Exception) -> str | None:
    ctx = getattr(e, "ctx", None)
    if ctx is not None:
        return f"see `{ctx.command_path} --help`"
    return "see `fasttts --help`"


if __name__ == "__main__":
    main()
