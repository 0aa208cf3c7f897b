"""What every `fasttts` command shares: the Typer app, the option types, and the error contract (`execute`:
one line per error, the documented exit code, exactly one JSON object on stdout with --json)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import sys
import traceback
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from fasttts_cli import __version__
from fasttts_cli.app.job import OVERFLOW_POLICIES
from fasttts_cli.app.progress import NORMAL, QUIET, VERBOSE, Reporter, setup_logging
from fasttts_cli.errors import ExitCode, FastTTSError, UsageError

T = TypeVar("T")

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


def choices(values: tuple[str, ...]) -> str:
    """A metavar listing a flag's values, as click writes a choice: `[shift|overlap|truncate|fail]`."""
    return "[" + "|".join(values) + "]"


# dubbing.timing.FIT_MODES and dubbing.readers.FORMATS, written out so that every command's help does not
# import the readers and the solver (tests/test_terminal_output.py holds them equal).
FIT_MODES = ("model", "stretch")
INPUT_FORMATS = ("srt", "vtt", "ass", "ssa", "txt", "tsv", "csv", "jsonl")


class _Command(typer.core.TyperCommand):
    """A command whose help names its arguments as usage lines always have: `fasttts dub [OPTIONS]
    SCRIPT` and `SCRIPT  Subtitles or ...` (typer writes `{script}` and `script <path>`, which read as a
    template's placeholder and a type, not as what to type)."""

    def __init__(self, *args: Any, params: list[Any] | None = None, **kw: Any) -> None:
        for p in params or []:
            if isinstance(p, typer.core.TyperArgument):
                p.metavar = p.metavar or (p.name or "").upper()
                # the help text says what the argument is; typer's `<path>` / `<str>` would repeat it badly
                p.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
        super().__init__(*args, params=params, **kw)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for p in self.get_params(ctx):
            if isinstance(p, typer.core.TyperArgument):
                pieces.append(p.metavar if p.required else f"[{p.metavar}]")
            else:
                pieces.extend(p.get_usage_pieces(ctx))
        return pieces


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
PresetOpt = Annotated[
    str | None, typer.Option("--preset", metavar="NAME|FILE", help="Run-time preset name or .toml path.")
]
StylesOpt = Annotated[
    str | None,
    typer.Option("--styles", metavar="A,B", help="ASS/SSA: the dialogue styles to dub (case-insensitive)."),
]
EncodingOpt = Annotated[
    str | None,
    typer.Option("--encoding", metavar="NAME", help="Read the script in this encoding (cp1252, gb18030...)."),
]
FormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format",
        metavar=choices(INPUT_FORMATS),
        help="Input format if the extension is not enough.",
    ),
]
NamePrefixOpt = Annotated[bool, typer.Option("--name-prefix", help="Read 'Name: text' prefixes as speakers.")]
BatchSizeOpt = Annotated[int, typer.Option("--batch-size", help="Lines per synthesis batch.")]
MaxBatchTokensOpt = Annotated[int, typer.Option("--max-batch-tokens", help="Padded tokens per batch.")]
MinGapOpt = Annotated[float, typer.Option("--min-gap", help="Seconds kept between lines.")]
MaxSpeedupOpt = Annotated[
    float, typer.Option("--max-speedup", help="DSP tempo cap after rendering (1.25 = 25% faster).")
]
MaxSlowdownOpt = Annotated[
    float, typer.Option("--max-slowdown", help="DSP slow-down cap (1.0 = never slow down).")
]
MaxFactorStepOpt = Annotated[
    float, typer.Option("--max-factor-step", help="Max tempo difference of neighbours.")
]
OverflowOpt = Annotated[
    str,
    typer.Option(
        "--overflow",
        metavar=choices(OVERFLOW_POLICIES),
        help="A line that does not fit its slot: shift the next ones, overlap them, truncate it, or fail.",
    ),
]
FitOpt = Annotated[
    str,
    typer.Option(
        "--fit",
        metavar=choices(FIT_MODES),
        help="model: the engine renders each line to its slot; stretch: tempo change only.",
    ),
]
MaxRenderSpeedupOpt = Annotated[
    float, typer.Option("--max-render-speedup", help="Most the model speaks a line faster (1.25 = 25%).")
]
MaxRenderSlowdownOpt = Annotated[
    float,
    typer.Option("--max-render-slowdown", help="Most the model speaks a line slower (with --max-slowdown)."),
]
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


# The flags every command ends with, in this order (--progress-jsonl only where the command reports progress).
_OUTPUT_FLAGS: tuple[tuple[str, Any, Any], ...] = (
    ("json_out", JsonOpt, False),
    ("progress_jsonl", JsonlOpt, None),
    ("quiet", QuietOpt, False),
    ("verbose", VerboseOpt, 0),
)


@dataclass(frozen=True)
class FlagGroup:
    """Flags that several commands declare alike, as (parameter name, option type, default). A parameter
    annotated `Annotated[dict[str, Any], group]` stands for them at its place in the command's flags; the
    command receives their values as that one dict."""

    flags: tuple[tuple[str, Any, Any], ...]


# How dub and inspect read a script and cut it into batches.
ScriptFlags = Annotated[
    dict[str, Any],
    FlagGroup(
        (
            ("input_format", FormatOpt, None),
            ("name_prefix", NamePrefixOpt, False),
            ("strict_voices", StrictVoicesOpt, False),
            ("styles", StylesOpt, None),
            ("encoding", EncodingOpt, None),
            ("allow_overlap", AllowOverlapOpt, False),
            ("batch_size", BatchSizeOpt, 8),
            ("max_batch_tokens", MaxBatchTokensOpt, 2000),
        )
    ),
]


# How dub fits lines to their slots, and inspect forecasts it (DubOptions' timing fields).
TimingFlags = Annotated[
    dict[str, Any],
    FlagGroup(
        (
            ("max_speedup", MaxSpeedupOpt, 1.25),
            ("max_slowdown", MaxSlowdownOpt, 1.0),
            ("fit", FitOpt, "model"),
            ("max_render_speedup", MaxRenderSpeedupOpt, 1.25),
            ("max_render_slowdown", MaxRenderSlowdownOpt, 1.25),
            ("min_gap", MinGapOpt, 0.08),
            ("max_factor_step", MaxFactorStepOpt, 0.1),
            ("overflow", OverflowOpt, "shift"),
        )
    ),
]


@dataclass(frozen=True)
class Output:
    """A command's output flags: --json, --progress-jsonl, -q, -v."""

    json: bool
    jsonl: str | None
    quiet: bool
    verbose: int

    @property
    def verbosity(self) -> int:
        return verbosity(self.quiet, self.verbose)


Human = Callable[[dict[str, Any]], None] | None
Job = tuple[Callable[[Reporter], dict[str, Any]], Human]


def _flag_params(flags: tuple[tuple[str, Any, Any], ...]) -> list[inspect.Parameter]:
    return [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a) for n, a, d in flags
    ]


def _group_of(annotation: Any) -> FlagGroup | None:
    if typing.get_origin(annotation) is not Annotated:
        return None
    return next((m for m in typing.get_args(annotation)[1:] if isinstance(m, FlagGroup)), None)


def command(
    name: str,
    *,
    progress: bool = False,
    epilog: str | None = None,
    context_settings: dict[str, Any] | None = None,
) -> Callable[[Callable[..., Job]], Callable[..., int]]:
    """Register `fn` as the command `name`: its own flags (a FlagGroup parameter expanded in place), then
    the output flags (one declaration for every command); `fn` returns a (body, human) pair, run under
    `execute`, the error contract. `fn` gets the output flags as `ui: Output` if it has such a parameter."""

    def register(fn: Callable[..., Job]) -> Callable[..., int]:
        hints = typing.get_type_hints(fn, include_extras=True)  # fn's module resolves its own annotations
        wants_ui = "ui" in hints
        params: list[inspect.Parameter] = []
        groups: dict[str, FlagGroup] = {}
        for p in inspect.signature(fn).parameters.values():
            group = _group_of(hints[p.name])
            if group is not None:
                groups[p.name] = group
                params += _flag_params(group.flags)
            elif p.name != "ui":
                # keyword-only: Typer calls with keywords, and a group may stand between defaulted flags
                params.append(p.replace(annotation=hints[p.name], kind=inspect.Parameter.KEYWORD_ONLY))
        params += _flag_params(tuple(f for f in _OUTPUT_FLAGS if progress or f[0] != "progress_jsonl"))

        @functools.wraps(fn)
        def run(**kw: Any) -> int:
            ui = Output(
                kw.pop("json_out"), kw.pop("progress_jsonl", None), kw.pop("quiet"), kw.pop("verbose")
            )
            for pname, group in groups.items():
                kw[pname] = {n: kw.pop(n) for n, _, _ in group.flags}
            body, human = fn(**kw, ui=ui) if wants_ui else fn(**kw)
            return execute(ui.json, ui.verbosity, ui.jsonl, name, body, human)

        run.__signature__ = inspect.Signature(params, return_annotation=int)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params} | {"return": int}
        app.command(name, cls=_Command, epilog=epilog, context_settings=context_settings)(run)
        return run

    return register


def options_from(cls: type[T], params: Mapping[str, Any], **given: Any) -> T:
    """The dataclass `cls` from a command's parameters: each flag whose name is a field sets that field,
    so the commands that share DubOptions do not each list the mapping (other parameters are ignored)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in params.items() if k in names and k not in given}, **given)


def dub_options(params: Mapping[str, Any], *, check_files: bool = True) -> Any:
    """`fasttts dub`'s DubOptions from its parameters by name: dub itself, and each row of `fasttts batch`
    (`check_files=False`: a job's missing --emotion-audio fails that job when it runs, not the manifest)."""
    from fasttts_cli.app.job import DubOptions

    opts = options_from(DubOptions, params, voices=list(params.get("voice") or []))
    if opts.mix is None:  # --mix not given: --separate's music-and-effects stem goes under the dub
        opts.mix = "background" if opts.separate else "replace"
    opts.emotion = emotion_spec(
        params.get("emotion_audio"),
        params.get("emotion_vector"),
        params.get("emotion_alpha", 1.0),
        check_file=check_files,
    )
    return opts


def emotion_spec(audio: Path | None, vector: str | None, alpha: float, *, check_file: bool = True) -> Any:
    """The EmotionSpec of the three --emotion-* flags; None when they are all at their defaults."""
    from fasttts_cli.synth.synthesizer import EmotionSpec

    if audio is None and vector is None and alpha == 1.0:
        return None
    if check_file and audio is not None and not audio.is_file():
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


def verbosity(quiet: bool, verbose: int) -> int:
    return QUIET if quiet else (NORMAL if verbose == 0 else VERBOSE)


def execute(
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
            emit_json(result)
        elif human is not None and verbosity >= NORMAL:
            human(result)
        return code
    except FastTTSError as e:
        return fail(json_out, rep, command, e.message, e.hint, int(e.exit_code), type(e).__name__, verbosity)
    except OSError as e:
        # Disk full, permissions, a folder vanishing mid-run: name the file that failed (for a copy that
        # ran out of space, the destination, not the source), no traceback.
        from fasttts_cli.partials import os_error_message

        msg = os_error_message(e)
        return fail(json_out, rep, command, msg, None, int(ExitCode.RUNTIME), "io", verbosity)
    except KeyboardInterrupt as e:
        msg = getattr(e, "message", None) or "interrupted"
        return fail(json_out, rep, command, msg, None, int(ExitCode.INTERRUPTED), "interrupted", verbosity)
    except Exception as e:  # the contract: no traceback unless -v
        if verbosity >= VERBOSE:
            traceback.print_exc(file=sys.stderr)
        msg = f"internal error: {type(e).__name__}: {e}"
        hint = None if verbosity >= VERBOSE else "run again with -v for the traceback"
        return fail(json_out, rep, command, msg, hint, int(ExitCode.RUNTIME), "internal", verbosity)
    finally:
        if rep is not None:
            rep.close()


def fail(
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
        emit_json(
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


def emit_json(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


@contextlib.contextmanager
def build_extra() -> Iterator[None]:
    """Around imports of the build side: an ImportError becomes the missing-`build`-extra error (exit 3)."""
    from fasttts_cli.errors import MissingDependencyError

    try:
        yield
    except ImportError as e:
        raise MissingDependencyError(
            f"the build side needs the `build` extra ({e.name or e})",
            hint="pip install -e '.[build]'  (torch==2.13.0, onnx, safetensors, transformers)",
        ) from None
