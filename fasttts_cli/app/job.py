"""The dub job's data: options (everything a flag can set), results, output paths, the runaway-line guard,
validation, and the per-line state the stages share. Pure data and checks: no stage runs here."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttts_cli.dubbing.cache import work_dir_for
from fasttts_cli.errors import UsageError
from fasttts_cli.synth.synthesizer import EmotionSpec, Voice

SR = 48000  # the delivery rate: every line is resampled to it exactly once
FAILURE_POLICIES = ("fail", "silence", "skip")
SYNTH_FAILURE_POLICIES = ("fail", "silence")
MIX_MODES = ("replace", "keep", "duck", "background")
OVERFLOW_POLICIES = ("shift", "overlap", "truncate", "fail")
VIDEO_EXTS = (".mp4", ".mkv", ".mov", ".m4v", ".webm")
AUDIO_EXTS = (".wav", ".flac", ".m4a", ".mp3", ".opus")
UNTIMED_PAUSE = 0.5  # seconds between lines of untimed input (plain text)


# ---- options and results -------------------------------------------------------------------------


@dataclass
class DubOptions:
    """Every flag of `fasttts dub`. Paths are as the user gave them."""

    script: Path
    voices: list[str] = field(default_factory=list)  # "--voice PATH" / "--voice NAME=PATH"
    video: Path | None = None
    lang: str = "und"  # ISO 639-2 code of the dub (fasttts does not translate: the script's language)
    output: Path | None = None
    output_dir: Path | None = None
    work_dir: Path | None = None
    engine: str | None = None
    preset: str | None = None
    input_format: str | None = None
    emotion: EmotionSpec | None = None  # --emotion-audio / --emotion-vector / --emotion-alpha, every voice
    emotion_from_line: bool = False  # each line's own cue audio is its emotion reference
    cast: Path | None = None  # --cast: a cast.toml whose references the speakers it names take
    dialogue_stem: Path | None = None  # references and per-line emotion from this stem, not the video
    separate: bool = False  # --separate: dialogue and music-and-effects stems separated from the video
    separation_model: Path | None = None  # --separation-model: the Demucs model folder
    name_prefix: bool = False
    strict_voices: bool = False  # a --voice NAME= that matches no speaker is an error, not a warning
    styles: str | None = None  # --styles: the ASS/SSA dialogue styles, comma-separated
    encoding: str | None = None  # --encoding: a legacy encoding to read the script in
    allow_overlap: bool = False  # --allow-overlap: overlapping cues of one voice warn instead of failing
    batch_size: int = 8
    max_batch_tokens: int = 2000
    seed: int = 0
    only: str | None = None
    retake: str | None = None  # --retake 3,7-9: a new take for these lines
    take: list[str] | None = None  # --take 7=1 (repeatable, or 7=1,9=2): put lines back on a take
    dry_run: bool = False
    on_line_failure: str = "fail"
    max_retries: int = 2
    max_speedup: float = 1.25  # DSP tempo cap (after the model's own render)
    max_slowdown: float = 1.0
    fit: str = "model"  # model: the engine renders each line to its target; stretch: DSP tempo only
    max_render_speedup: float = 1.25
    max_render_slowdown: float = 1.25
    min_gap: float = 0.08
    max_factor_step: float = 0.1
    overflow: str = "shift"
    mix: str = "replace"
    background: Path | None = None
    loudness: float = -23.0
    true_peak: float = -1.0
    soft_subtitles: bool = False  # also embed the re-timed subtitles as a soft track
    default_subtitles: bool = False  # mark that track default (players show it); off by default
    title: str | None = None  # dub track title; default "<Language> (dub)"
    no_wait: bool = False  # another run holds the work dir: exit 2 at once instead of waiting
    # The command line after `fasttts` (`dub ...`) when the dub came from the command line: report.json
    # records it with the folder it ran in, and the review page's retake command starts from it.
    command: list[str] | None = None


@dataclass
class DubResult:
    ok: bool
    outputs: dict[str, str]
    warnings: list[str]
    timings: dict[str, float]
    report_path: Path | None
    work_dir: Path
    engine: dict[str, Any]
    lines: dict[str, Any]  # summary counts
    dry_run: bool = False
    plan: dict[str, Any] | None = None
    cast: dict[str, Any] | None = None  # the cast used (cast_voices.cast_json), when there is one
    separation: dict[str, Any] | None = None  # --separate's stems (separation.stems.Stems.to_json)

    def to_json(self) -> dict[str, Any]:
        d = {
            "ok": self.ok,
            "command": "dub",
            "dry_run": self.dry_run,
            "outputs": self.outputs,
            "report": str(self.report_path) if self.report_path else None,
            "work_dir": str(self.work_dir),
            "warnings": self.warnings,
            "timings": self.timings,
            "engine": self.engine,
            "lines": self.lines,
        }
        if self.plan is not None:
            d["plan"] = self.plan
        if self.cast is not None:
            d["cast"] = self.cast
        if self.separation is not None:
            d["separation"] = self.separation
        return d


# ---- runaway-line guard --------------------------------------------------------------------------


@dataclass(frozen=True)
class GuardBand:
    """Plausible speech length for a text: between `min_s_per_char` and `max_s_per_char` seconds per
    spoken character (letters and digits), plus `slack` seconds for breaths and trailing silence.
    Natural speech runs at 0.05-0.10 s per character in alphabetic scripts and up to ~0.3 in CJK; audio
    far outside the band is a truncated, silent or looping generation."""

    min_s_per_char: float = 0.02
    max_s_per_char: float = 0.35
    slack: float = 1.0

    def check(self, text: str, duration: float, hit_token_limit: bool) -> str | None:
        if hit_token_limit:
            return "generation hit the token limit"
        n = max(1, sum(1 for ch in text if ch.isalnum()))
        lo, hi = self.min_s_per_char * n, self.max_s_per_char * n + self.slack
        if duration < lo:
            return (
                f"audio too short for its text ({duration:.2f} s for {n} characters, expected >= {lo:.2f} s)"
            )
        if duration > hi:
            return (
                f"audio too long for its text ({duration:.2f} s for {n} characters, expected <= {hi:.2f} s)"
            )
        return None


GUARD = GuardBand()


# ---- validation and paths ------------------------------------------------------------------------


def validate_options(o: DubOptions) -> None:
    """Flag values that are wrong whatever the inputs; each message names its flag."""

    def need(cond: bool, msg: str, hint: str | None = None) -> None:
        if not cond:
            raise UsageError(msg, hint=hint)

    from fasttts_cli.media.mux import normalize_lang

    o.lang = normalize_lang(o.lang)  # "es", "es-ES", "spa" -> "spa"; UsageError naming --lang otherwise
    timing_options(o)  # raises UsageError naming --max-speedup, --min-gap, ...
    need(o.batch_size >= 1, f"--batch-size must be >= 1 (got {o.batch_size})")
    need(o.max_batch_tokens >= 1, f"--max-batch-tokens must be >= 1 (got {o.max_batch_tokens})")
    need(o.max_retries >= 0, f"--max-retries must be >= 0 (got {o.max_retries})")
    need(
        o.on_line_failure in FAILURE_POLICIES,
        f"--on-line-failure must be one of {', '.join(FAILURE_POLICIES)} (got {o.on_line_failure!r})",
    )
    need(o.mix in MIX_MODES, f"--mix must be one of {', '.join(MIX_MODES)} (got {o.mix!r})")
    need(
        o.overflow in OVERFLOW_POLICIES,
        f"--overflow must be one of {', '.join(OVERFLOW_POLICIES)} (got {o.overflow!r})",
    )
    need(
        math.isfinite(o.loudness) and -70.0 <= o.loudness <= -5.0,
        f"--loudness must be between -70 and -5 LUFS (got {o.loudness})",
    )
    need(
        math.isfinite(o.true_peak) and -20.0 <= o.true_peak <= 0.0,
        f"--true-peak must be between -20 and 0 dBTP (got {o.true_peak})",
    )
    need(
        o.mix not in ("keep", "duck") or o.video is not None,
        f"--mix {o.mix} needs --video (there is no original audio to keep or duck)",
    )
    need(
        o.mix != "background" or o.background is not None or o.separate,
        "--mix background needs --background PATH (or --separate, which makes it from the video)",
    )
    from fasttts_cli.app.separation import check_options

    check_options(o)  # --separate's own combinations
    need(not o.soft_subtitles or o.video is not None, "--soft-subtitles needs --video")
    audio_only = o.output is not None and o.output.suffix.lower() in AUDIO_EXTS
    need(
        not (audio_only and o.video is not None and (o.soft_subtitles or o.mix == "keep")),
        f"-o/--output {o.output}: an audio file holds one track and no subtitles; "
        "--mix keep and --soft-subtitles need a video container (.mp4, .mkv, ...)",
    )
    need(not o.default_subtitles or o.soft_subtitles, "--default-subtitles needs --soft-subtitles")
    need(
        not o.emotion_from_line
        or o.emotion is None
        or (o.emotion.audio is None and o.emotion.vector is None),
        "--emotion-from-line and --emotion-audio/--emotion-vector: give one of them, not both",
        hint="--emotion-alpha sets how strongly each line's own audio steers its emotion",
    )
    need(
        not o.emotion_from_line or o.video is not None or o.dialogue_stem is not None,
        "--emotion-from-line needs --video (or --dialogue-stem): each line's emotion is cut from its audio",
    )


def timing_options(o: DubOptions, overflow: str | None = None) -> Any:
    from fasttts_cli.dubbing.timing import TimingOptions

    return TimingOptions(
        max_speedup=o.max_speedup,
        max_slowdown=o.max_slowdown,
        min_gap=o.min_gap,
        max_factor_step=o.max_factor_step,
        overflow=overflow or o.overflow,
        fit=o.fit,
        max_render_speedup=o.max_render_speedup,
        max_render_slowdown=o.max_render_slowdown,
    )


@dataclass(frozen=True)
class OutputPaths:
    media: Path  # the dubbed video, or the audio file when there is no video
    subtitles: Path  # re-timed subtitles
    work_dir: Path
    stem: str


def resolve_outputs(o: DubOptions, script_format: str | None = None) -> OutputPaths:
    """`<stem>.<lang>.<ext>` in --output-dir or next to the input, unless -o names the file. The subtitles
    take the script's own format (SRT, VTT, ASS, SSA; SRT for TXT and tables)."""
    from fasttts_cli.dubbing.subtitles_out import subtitle_format

    src = o.video if o.video is not None else o.script
    stem = src.stem if str(src) != "-" else "stdin"
    if o.output is not None:
        media = o.output
        # With --video, an audio extension writes the dub alone (timed to the video, mixed per --mix).
        exts = VIDEO_EXTS + AUDIO_EXTS if o.video is not None else AUDIO_EXTS
        if media.suffix.lower() not in exts:
            kind = (
                "a video container or an audio file"
                if o.video is not None
                else "an audio file (no --video given)"
            )
            raise UsageError(
                f"-o/--output {media}: the extension must name {kind}: {', '.join(exts)}",
            )
    else:
        out_dir = (
            o.output_dir if o.output_dir is not None else (src.parent if str(src) != "-" else Path.cwd())
        )
        ext = o.video.suffix.lower() if o.video is not None else ".wav"
        if o.video is not None and ext not in VIDEO_EXTS:
            ext = ".mkv"  # an unusual container: Matroska takes any codec we write
        media = out_dir / f"{stem}.{o.lang}{ext}"
    subtitles = media.with_suffix("." + subtitle_format(script_format))
    work = work_dir_for(stem, media.parent, o.work_dir)
    inputs = {p.resolve() for p in (o.script, o.video, o.background) if p is not None and str(p) != "-"}
    for p in (media, subtitles):
        if p.resolve() in inputs:
            raise UsageError(f"output {p} would overwrite an input file", hint="pass -o or --output-dir")
    return OutputPaths(media, subtitles, work, stem)


def check_writable(folder: Path, flag: str) -> None:
    """Fail before any synthesis if the outputs cannot be written (finished work must not be lost)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".fasttts-write-test-", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise UsageError(f"{flag}: cannot write to {folder}: {e.strerror or e}") from None


# ---- the job -------------------------------------------------------------------------------------


@dataclass
class LineState:
    line: Any  # plan.Line
    voice: Voice | None = None
    seed: int = 0
    key: str = ""
    lang: str | None = None  # ISO 639-1 code the line is spoken in (None: the engine decides)
    cached: bool = False  # the plan came from the cache (the GPT did not run for it)
    # The audio itself stays in the line cache (read back when the line is placed): holding every line of a
    # feature in memory is what long inputs cannot afford.
    n_samples: int | None = None  # rendered, at the engine rate; None: no audio (failed line)
    sample_rate: int = 0
    retries: int = 0
    error: str | None = None
    n_tokens: int | None = None
    # The plan phase (plans/ under `key`): the natural length, and the seed of the attempt that was kept
    # (a render draws its noise from the same seed as its plan).
    natural_samples: int | None = None
    plan_seed: int = 0
    # The render phase (lines/ under `render_key`): the target in frames (None: natural) and the draft
    # voice's residual correction.
    frames: int | None = None
    render_key: str = ""
    rendered: bool = False  # rendered in this run (False: the render cache had it)
    residual: float = 1.0
    # Takes (app/takes.py): the take this line is on (its `seed` and `key` are that take's), the takes
    # its text/voice/emotion has in the plan cache, and whether this run gave it a new one (--retake).
    take: int = 1
    takes: list[int] = field(default_factory=list)
    retaken: bool = False


@dataclass
class JobInputs:
    cues: list[Any]  # with provisional slots when the input was untimed
    voices: Any  # speakers.VoiceMap
    only: set[int] | None
    media: Any  # probe.MediaInfo of --video, or None
    untimed: bool  # plain text: slots come from the synthesized durations
    voice_warnings: list[str] = field(default_factory=list)  # --voice NAME= that matches no speaker
    skipped: list[Any] = field(default_factory=list)  # readers.SkippedEvent: events that are not cues
    read_warnings: list[str] = field(default_factory=list)  # untidy things the reader met
    script_format: str = ""  # what the reader read it as: the re-timed subtitles are written the same way
    subtitle_header: str | None = None  # ASS/SSA: the script's header and styles, for those subtitles
    cast: Any = None  # cast_voices.CastState: --cast, --voice from-video, --emotion-from-line
    emotions: dict[int, EmotionSpec] = field(default_factory=dict)  # line -> its own emotion reference
    separation: dict[str, Any] | None = None  # --separate: the stems used (Stems.to_json)
    retake: set[int] = field(default_factory=set)  # --retake: lines to give a new take
    take: dict[int, int] = field(default_factory=dict)  # --take: line -> the take to put it on


def plan_job(
    cues: list[Any], vm: Any, counter: Callable[[str], int], o: DubOptions, only: set[int] | None = None
) -> Any:
    from fasttts_cli.dubbing.plan import make_plan

    return make_plan(
        cues, vm, counter, batch_size=o.batch_size, max_batch_tokens=o.max_batch_tokens, only=only
    )


# ---- small helpers -------------------------------------------------------------------------------


def format_ranges(ids: Sequence[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7" (the --only syntax)."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
