"""The `fasttts` command line: a thin Typer shell over pipeline.py (dub), inspection.py (inspect) and
single_line.py (synth); the engine commands are in cli_engines.py and cli_bench.py, and what every command
shares (the app, option types, the error contract) in cli_shared.py.

Conventions (README, "Exit codes"): stdout carries only results (with --json: exactly one JSON object,
also on failure); logs, warnings and progress go to stderr. Errors are one line,
`fasttts: error: ...` (plus a hint line), never a traceback unless -v is given.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any

import typer

from fasttts_cli.app.job import AUDIO_EXTS, FAILURE_POLICIES, MIX_MODES, SYNTH_FAILURE_POLICIES
from fasttts_cli.app.progress import NORMAL, Reporter

# ---- dub -----------------------------------------------------------------------------------------
from fasttts_cli.cli.shared import (
    EXIT_CODES_HELP,
    EmotionAlphaOpt,
    EmotionAudioOpt,
    EmotionVectorOpt,
    EngineOpt,
    Job,
    MaxRenderSlowdownOpt,
    MaxRenderSpeedupOpt,
    Output,
    PresetOpt,
    ScriptFlags,
    TimingFlags,
    app,
    choices,
    command,
    dub_options,
    emotion_spec,
    fail,
    options_from,
)
from fasttts_cli.errors import ExitCode, UsageError

# dub and synth take the same --max-retries flag (each keeps its own default).
MaxRetriesOpt = Annotated[int, typer.Option("--max-retries", help="Re-syntheses of an implausible line.")]
# The cast from the video (README, "A cast from the video").
_CAST_HELP = "Reuse a cast.toml: the speakers it names take its references."
CastOpt = Annotated[Path | None, typer.Option("--cast", metavar="CAST.toml", help=_CAST_HELP)]
_STEM_HELP = "Dialogue-only stem: from-video references and line emotion are cut from it."
DialogueStemOpt = Annotated[Path | None, typer.Option("--dialogue-stem", help=_STEM_HELP)]
_FROM_LINE_HELP = "Each line's emotion from its own cue audio in the source."
EmotionFromLineOpt = Annotated[bool, typer.Option("--emotion-from-line", help=_FROM_LINE_HELP)]
_SEPARATE_HELP = (
    "Separate the video's audio (Demucs htdemucs): music and effects under the dub (--mix background, "
    "the default with it), dialogue as the from-video and emotion source."
)
SeparateOpt = Annotated[bool, typer.Option("--separate", help=_SEPARATE_HELP)]
_SEP_MODEL_HELP = (
    "Demucs model folder (default $FASTTTS_SEPARATION_MODEL, else fasttts download --separation's)."
)
SeparationModelOpt = Annotated[
    Path | None, typer.Option("--separation-model", metavar="DIR", help=_SEP_MODEL_HELP)
]


@command("dub", progress=True, epilog=EXIT_CODES_HELP)
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
            help="Reference voice: PATH (default) or NAME=PATH per speaker; repeat. from-video (or "
            "NAME=from-video): cut from the video's audio (a file of that name: ./from-video).",
        ),
    ] = None,
    video: Annotated[
        Path | None, typer.Option("--video", help="Video to dub; without it, audio only.")
    ] = None,
    lang: Annotated[
        str,
        typer.Option(
            "--lang",
            metavar="CODE",
            help="The script's language: the engine speaks it and the dub track is tagged with it. "
            "ISO 639-2 (spa; ger is read as deu), ISO 639-1 (es) or a tag (es-ES, pt_BR: the region "
            "is dropped); und: the engine decides.",
        ),
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
    *,
    reading: ScriptFlags,
    seed: Annotated[
        int, typer.Option("--seed", help="Base seed; each line's seed derives from it, its text and voice.")
    ] = 0,
    only: Annotated[
        str | None, typer.Option("--only", metavar="3,7-9", help="Re-render just these lines (forced).")
    ] = None,
    retake: Annotated[
        str | None,
        typer.Option(
            "--retake", metavar="3,7-9", help="A new take (a new seed) of these lines; old takes stay."
        ),
    ] = None,
    take: Annotated[
        list[str] | None,
        typer.Option(
            "--take", metavar="LINE=TAKE", help="Put a line on one of its takes: 7=1 (repeat, or 7=1,9=2)."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check inputs and write the plan; load no model.")
    ] = False,
    on_line_failure: Annotated[
        str,
        typer.Option(
            "--on-line-failure",
            metavar=choices(FAILURE_POLICIES),
            help="A line that cannot be synthesized: fail the run, put silence in its place, or skip it.",
        ),
    ] = "fail",
    max_retries: MaxRetriesOpt = 2,
    timing: TimingFlags,
    mix: Annotated[
        str | None,
        typer.Option(
            "--mix",
            metavar=choices(MIX_MODES),
            help="The dub alone, beside the original track, over it ducked, or over --background "
            "(default replace; background with --separate).",
        ),
    ] = None,
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
    title: Annotated[
        str | None,
        typer.Option("--title", metavar="TEXT", help="Dub track title (default: Dub (<lang>) — fasttts)."),
    ] = None,
    no_wait: Annotated[
        bool,
        typer.Option("--no-wait", help="If another run holds the work folder, exit 2 instead of waiting."),
    ] = False,
    emotion_audio: EmotionAudioOpt = None,
    emotion_vector: EmotionVectorOpt = None,
    emotion_alpha: EmotionAlphaOpt = 1.0,
    emotion_from_line: EmotionFromLineOpt = False,
    cast: CastOpt = None,
    dialogue_stem: DialogueStemOpt = None,
    separate: SeparateOpt = False,
    separation_model: SeparationModelOpt = None,
) -> Job:
    """Dub a subtitle/script file: synthesize every line, fit it to its slot, mix, mux."""
    params = dict(locals(), **reading, **timing)  # the flags, named as DubOptions' fields
    from fasttts_cli.app.pipeline import run_dub

    def body(rep: Reporter) -> dict[str, Any]:
        opts = dub_options(params)
        opts.command = INVOKED.get()  # report.json keeps it: the review page's retake command
        return run_dub(opts, rep).to_json()

    def human(r: dict[str, Any]) -> None:
        if r.get("cast"):
            print(f"cast {r['cast']['file']}: {', '.join(r['cast']['speakers'])}")
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
            f"{s['failed']} failed, {s['retries']} retries; {s['rendered_to_fit']} rendered to fit, "
            f"{s['stretched']} tempo-stretched (max {s['max_stretch']}x), {s['shifted']} shifted; "
            f"{s['loudness_lufs']} LUFS, {s['true_peak_dbtp']} dBTP"
        )
        if s.get("retaken"):
            new = [f"line {i} take {s['chosen_takes'][str(i)]}" for i in s["retaken"]]
            print(f"new takes: {', '.join(new)}")

    return body, human


# ---- synth ---------------------------------------------------------------------------------------


@command("synth", progress=True, epilog=EXIT_CODES_HELP)
def synth(
    text: Annotated[str, typer.Argument(help="The text to speak; - reads it from stdin.")],
    voice: Annotated[Path, typer.Option("--voice", help="Reference voice audio.")],
    output: Annotated[
        Path,
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help=f"Output audio: {' '.join(AUDIO_EXTS)}; with --stream, - is stdout.",
        ),
    ],
    engine: EngineOpt = None,
    preset: PresetOpt = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the line (with its text and voice).")] = 0,
    lang: Annotated[
        str,
        typer.Option(
            "--lang",
            metavar="CODE",
            help="The text's language: ISO 639-1 (es), ISO 639-2 (spa) or a tag (es-ES); und: the engine "
            "decides.",
        ),
    ] = "und",
    on_line_failure: Annotated[
        str,
        typer.Option(
            "--on-line-failure",
            metavar=choices(SYNTH_FAILURE_POLICIES),
            help="fail, or write silence of the text's length.",
        ),
    ] = "fail",
    max_retries: MaxRetriesOpt = 2,
    duration: Annotated[
        float | None,
        typer.Option("--duration", help="Render the line to this many seconds (within the render bounds)."),
    ] = None,
    max_render_speedup: MaxRenderSpeedupOpt = 1.25,
    max_render_slowdown: MaxRenderSlowdownOpt = 1.25,
    emotion_audio: EmotionAudioOpt = None,
    emotion_vector: EmotionVectorOpt = None,
    emotion_alpha: EmotionAlphaOpt = 1.0,
    stream: Annotated[
        bool, typer.Option("--stream", help="Write audio as it is made (-o - or a growing .wav).")
    ] = False,
    pcm: Annotated[bool, typer.Option("--pcm", help="With --stream: raw 16-bit PCM, no WAV header.")] = False,
    *,
    ui: Output,
) -> Job:
    """Speak one line in a reference voice, to an audio file at the engine's sample rate."""
    from fasttts_cli.app.single_line import SynthOptions, synth_one

    to_stdout = stream and str(output) == "-"

    def body(rep: Reporter) -> dict[str, Any]:
        if to_stdout and ui.json:
            raise UsageError("--json with --stream -o -: stdout carries the audio", hint="write -o FILE.wav")
        t = sys.stdin.read() if text == "-" else text
        emotion = emotion_spec(emotion_audio, emotion_vector, emotion_alpha)
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
            duration=duration,
            lang=lang,
            max_render_speedup=max_render_speedup,
            max_render_slowdown=max_render_slowdown,
            stream=stream,
            pcm=pcm,
        )
        return synth_one(so, rep)

    def human(r: dict[str, Any]) -> None:
        silent = " of silence: synthesis failed" if r.get("failed") else ""
        first = f", first audio after {r['first_audio_s']:.2f} s" if r.get("first_audio_s") else ""
        print(
            f"wrote {r['outputs']['audio']} ({r['duration']:.2f} s{silent} at {r['sample_rate']} Hz{first})",
            file=sys.stderr if to_stdout else sys.stdout,  # stdout carries the audio
        )

    return body, human


# ---- inspect -------------------------------------------------------------------------------------


@command("inspect", epilog=EXIT_CODES_HELP)
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
    *,
    reading: ScriptFlags,
    timing: TimingFlags,
    only: Annotated[
        str | None, typer.Option("--only", metavar="3,7-9", help="Batch just these lines, as dub would.")
    ] = None,
) -> Job:
    """Show cues, speakers, batches and a timing forecast (no model is loaded)."""
    params = dict(locals(), **reading, **timing)  # the flags, named as DubOptions' fields
    from fasttts_cli.app.inspection import inspect_job
    from fasttts_cli.app.job import DubOptions

    opts = options_from(DubOptions, params, voices=list(voice or []))
    return lambda rep: inspect_job(opts), _print_inspect


def _print_inspect(r: dict[str, Any]) -> None:
    from fasttts_cli.cli.tables import Column, print_table, print_wrapped

    fc = {t["index"]: t for t in r["forecast"]["lines"]}
    rows = []
    for c in r["cues"]:
        f = fc.get(c["index"], {})
        rows.append(
            (
                str(c["index"]),
                f"{c['start']:.2f}",
                f"{c['end']:.2f}",
                c["speaker"] or "",
                str(c["tokens"]),
                f"{f.get('natural', 0):.2f}",
                f"{f.get('render_factor', 1):.2f}",
                f"{f.get('stretch_factor', 1):.2f}",
                f.get("action", ""),
                c["text"],
            )
        )
    heads = ("#", "start", "end", "speaker", "tokens", "est. s", "render", "stretch", "action")
    cols = [Column(h, right=h not in ("speaker", "action")) for h in heads] + [Column("text", wrap=True)]
    title = f"{r['script']}: {len(r['cues'])} lines (engine: {r['engine']['kind']})"
    print_table(cols, rows, title=title)
    sp = ", ".join(
        f"{k} ({v['lines']} lines -> {v['voice'] or 'no voice yet'})" for k, v in r["speakers"].items()
    )
    print_wrapped("speakers: ", sp)
    for b in r["batches"]:
        print_wrapped(f"batch {b['index']}: ", f"voice {b['voice'] or '(none yet)'}, lines {b['lines']}")
    s = r["forecast"]["summary"]
    print_wrapped(
        f"forecast at {r['forecast']['chars_per_second']} chars/s: max factor {s['max_factor']}, "
        f"{s['actions'].get('shifted', 0)} shifted, {s['overflowing']} overflowing"
    )
    for w in r.get("warnings", []):
        print_wrapped("warning: ", w)


# The command line `main` was given (after `fasttts`): `dub` records it for the review page's retake
# command. None when a program calls the Typer app directly.
INVOKED: ContextVar[list[str] | None] = ContextVar("fasttts_invoked", default=None)

# The other commands register themselves on the shared app; imported after dub, synth and inspect so that
# `fasttts --help` lists the main job first.
# isort: off
from fasttts_cli.cli import engines as cli_engines  # noqa: E402, F401
from fasttts_cli.cli import bench as cli_bench  # noqa: E402, F401
from fasttts_cli.cli import cast as cli_cast  # noqa: E402, F401
from fasttts_cli.cli import batch as cli_batch  # noqa: E402, F401
from fasttts_cli.cli import review as cli_review  # noqa: E402, F401
from fasttts_cli.cli import serve as cli_serve  # noqa: E402, F401
# isort: on

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
    invoked = INVOKED.set(args)
    try:
        rv = app(args=args, prog_name="fasttts", standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except _NO_ARGS as e:
        # Bare `fasttts`: the help text, not an error message.
        print(e.format_message(), file=sys.stderr)
        code = int(ExitCode.USAGE)
    except _ABORT:
        code = fail(json_out, None, cmd, "interrupted", None, 130, "interrupted", NORMAL)
    except _CLICK_ERRORS as e:
        msg, hint = e.format_message(), _usage_hint(e)
        code = fail(json_out, None, cmd, msg, hint, int(ExitCode.USAGE), "usage", NORMAL)
    except _EXIT as e:
        code = int(getattr(e, "exit_code", 0) or 0)
    finally:
        INVOKED.reset(invoked)
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
