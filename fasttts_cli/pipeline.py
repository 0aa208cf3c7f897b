"""The dub job, as functions over dataclasses: script + voices (+ video) in, dubbed media + report out.

Stages (each timed in the result): read -> plan -> voices -> synthesize (cache misses only, batch by
batch, runaway guard, failure policy) -> audio (resample once to 48 kHz, level each line) -> timing ->
tempo + timeline -> mix -> loudness -> write/mux -> subtitles -> report.

The CLI is a thin shell over `run_dub`, `synth_one` and `inspect_job`; everything a flag can set is a
field of `DubOptions`, so tests and other programs drive the same code without a shell.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli import __version__
from fasttts_cli.blockio import BLOCK
from fasttts_cli.cache import (
    LineCache,
    atomic_write_json,
    atomic_write_text,
    check_hits,
    line_key,
    line_seed,
    normalize_text,
    retry_seed,
    work_dir_for,
)
from fasttts_cli.engine_select import DRAFT, TORCH, EngineSelection, select_engine
from fasttts_cli.errors import FastTTSError, InputError, MissingDependencyError, SynthesisError, UsageError
from fasttts_cli.progress import QUIET, PassProgress, Reporter, counted
from fasttts_cli.synthesizer import (
    EmotionSpec,
    Synthesizer,
    SynthRequest,
    SynthResult,
    Voice,
    synthesize_rows,
)

SR = 48000  # the delivery rate: every line is resampled to it exactly once
FAILURE_POLICIES = ("fail", "silence", "skip")
SYNTH_FAILURE_POLICIES = ("fail", "silence")
MIX_MODES = ("replace", "keep", "duck", "background")
OVERFLOW_POLICIES = ("shift", "overlap", "truncate", "fail")
VIDEO_EXTS = (".mp4", ".mkv", ".mov", ".m4v", ".webm")
AUDIO_EXTS = (".wav", ".flac", ".m4a", ".mp3", ".opus")
UNTIMED_PAUSE = 0.5  # seconds between lines of untimed input (plain text)
# Frames per block in the assembly (timeline, mix, loudness passes): bounds memory on long inputs; a
# programme shorter than this is one block. Tests lower it to exercise block edges.
ASSEMBLY_BLOCK = BLOCK


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
    name_prefix: bool = False
    strict_voices: bool = False  # a --voice NAME= that matches no speaker is an error, not a warning
    styles: str | None = None  # --styles: the ASS/SSA dialogue styles, comma-separated
    encoding: str | None = None  # --encoding: a legacy encoding to read the script in
    allow_overlap: bool = False  # --allow-overlap: overlapping cues of one voice warn instead of failing
    batch_size: int = 8
    max_batch_tokens: int = 2000
    seed: int = 0
    only: str | None = None
    dry_run: bool = False
    on_line_failure: str = "fail"
    max_retries: int = 2
    max_speedup: float = 1.25
    max_slowdown: float = 1.0
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


# ---- engine loading ------------------------------------------------------------------------------


def load_synthesizer(
    selection: EngineSelection, preset: str | None, *, cache_dir: Path | None = None
) -> Synthesizer:
    """The Synthesizer for an engine selection; heavy imports happen here and only here.
    `cache_dir`: where an engine may keep prepared voice conditioning (the job's work dir)."""
    if selection.kind == DRAFT:
        from fasttts_cli.draft import DraftSynthesizer

        return DraftSynthesizer.load(None, preset)
    if selection.kind == "indextts2":
        try:
            from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer
        except ImportError as e:
            raise MissingDependencyError(
                f"the IndexTTS-2 runtime cannot be loaded ({e})",
                hint="reinstall fasttts-cli, or use --engine draft",
            ) from None
        if cache_dir is not None:
            return IndexTTS2Synthesizer.load(selection.path, preset, cache_dir=cache_dir)
        return IndexTTS2Synthesizer.load(selection.path, preset)
    if selection.kind == TORCH:
        try:
            from fasttts_cli.torch_backend.synthesizer import TorchSynthesizer
        except ImportError as e:
            raise MissingDependencyError(
                f"the PyTorch backend cannot be loaded ({e})", hint="pip install -e '.[build]'"
            ) from None
        return TorchSynthesizer.load(selection.path, preset or "gpu-torch-fp16", cache_dir=cache_dir)
    raise MissingDependencyError(
        f"{selection.path}: engine for model {selection.kind!r} is not supported by this fasttts",
        hint="use an IndexTTS-2 engine folder or --engine draft",
    )


def token_counter(selection: EngineSelection, preset: str | None) -> tuple[Callable[[str], int], str]:
    """A token counter that loads no model (for --dry-run and inspect), and where its counts come from."""
    from fasttts_cli.draft import draft_count_tokens

    if selection.kind == DRAFT:
        return draft_count_tokens, "draft (characters)"
    if selection.kind == TORCH:
        try:
            from fasttts_cli.torch_backend.synthesizer import TorchSynthesizer

            return TorchSynthesizer.tokenizer_counter(selection.path), "checkpoint tokenizer"
        except ImportError:
            return draft_count_tokens, "estimate (characters; torch backend unavailable)"
    try:
        from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer

        hook = getattr(IndexTTS2Synthesizer, "tokenizer_counter", None)
        if hook is not None:
            return hook(selection.path), "engine tokenizer"
    except ImportError:
        pass
    return draft_count_tokens, "estimate (characters; engine tokenizer unavailable)"


# ---- validation and paths ------------------------------------------------------------------------


def validate_options(o: DubOptions) -> None:
    """Flag values that are wrong whatever the inputs; each message names its flag."""

    def need(cond: bool, msg: str, hint: str | None = None) -> None:
        if not cond:
            raise UsageError(msg, hint=hint)

    from fasttts_cli.mux import normalize_lang

    o.lang = normalize_lang(o.lang)  # "es", "es-ES", "spa" -> "spa"; UsageError naming --lang otherwise
    _timing_options(o)  # raises UsageError naming --max-speedup, --min-gap, ...
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
    need(o.mix != "background" or o.background is not None, "--mix background needs --background PATH")
    need(not o.soft_subtitles or o.video is not None, "--soft-subtitles needs --video")
    audio_only = o.output is not None and o.output.suffix.lower() in AUDIO_EXTS
    need(
        not (audio_only and o.video is not None and (o.soft_subtitles or o.mix == "keep")),
        f"-o/--output {o.output}: an audio file holds one track and no subtitles; "
        "--mix keep and --soft-subtitles need a video container (.mp4, .mkv, ...)",
    )
    need(not o.default_subtitles or o.soft_subtitles, "--default-subtitles needs --soft-subtitles")


def _timing_options(o: DubOptions, overflow: str | None = None) -> Any:
    from fasttts_cli.timing import TimingOptions

    return TimingOptions(
        max_speedup=o.max_speedup,
        max_slowdown=o.max_slowdown,
        min_gap=o.min_gap,
        max_factor_step=o.max_factor_step,
        overflow=overflow or o.overflow,
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
    from fasttts_cli.subtitles_out import subtitle_format

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
class _LineState:
    line: Any  # plan.Line
    voice: Voice | None = None
    seed: int = 0
    key: str = ""
    cached: bool = False
    # The audio itself stays in the line cache (read back when the line is placed): holding every line of a
    # feature in memory is what long inputs cannot afford.
    n_samples: int | None = None  # at the engine rate; None: no audio (failed line)
    sample_rate: int = 0
    retries: int = 0
    error: str | None = None
    n_tokens: int | None = None


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


def read_inputs(o: DubOptions, *, require_voices: bool = True) -> JobInputs:
    """Read and check every input before anything slow runs; each problem names its file or flag.
    `require_voices=False` (inspect) lets speakers without a voice through."""
    from fasttts_cli.plan import parse_only
    from fasttts_cli.probe import probe, require_video
    from fasttts_cli.readers import layout_untimed, parse_styles, read_script_full
    from fasttts_cli.speakers import check_voices, parse_voice_flags, voice_name_problems

    got = read_script_full(
        o.script,
        fmt=o.input_format,
        name_prefix=o.name_prefix,
        styles=parse_styles(o.styles),
        encoding=o.encoding,
        allow_overlap=o.allow_overlap,
    )
    cues = got.cues
    untimed = any(c.start is None or c.end is None for c in cues)
    if untimed:
        # Provisional slots for planning; after synthesis they are re-laid from the real durations.
        cues = layout_untimed(cues)
    vm = parse_voice_flags(o.voices)
    voice_warnings = voice_name_problems(cues, vm)
    if voice_warnings and o.strict_voices:
        raise UsageError(voice_warnings[0], hint="fix the name, or leave out --strict-voices to only warn")
    if require_voices:
        check_voices(cues, vm)
    only = None
    if o.only is not None:  # not `if o.only`: an empty --only "" must be refused, not mean "all lines"
        only = parse_only(o.only)
        known = {c.index for c in cues}
        missing = sorted(only - known)
        if missing:
            raise UsageError(
                f"--only {o.only}: no line {', '.join(map(str, missing[:10]))} in {o.script} "
                f"(it has lines {min(known)}-{max(known)})",
                hint="line numbers are the ones `fasttts inspect` shows",
            )
    # check_complete: a truncated video, stem or voice is refused here, not found out after synthesis.
    media = require_video(o.video, check_complete=True) if o.video is not None else None
    if o.background is not None:
        probe(o.background, check_complete=True)
    emotion_audio = o.emotion.audio if o.emotion is not None else None
    for voice in dict.fromkeys([vm.default, *vm.named.values(), emotion_audio]):
        if voice is not None:
            probe(voice, check_complete=True)
    return JobInputs(
        cues, vm, only, media, untimed, voice_warnings, got.skipped, got.warnings, got.format, got.header
    )


def _plan(
    cues: list[Any], vm: Any, counter: Callable[[str], int], o: DubOptions, only: set[int] | None = None
) -> Any:
    from fasttts_cli.plan import make_plan

    return make_plan(
        cues, vm, counter, batch_size=o.batch_size, max_batch_tokens=o.max_batch_tokens, only=only
    )


def _engine_info(selection: EngineSelection, synth: Synthesizer | None, preset: str | None) -> dict[str, Any]:
    random = engine_random_weights(selection, synth)
    d: dict[str, Any] = {
        "kind": selection.kind,
        "path": str(selection.path) if selection.path else None,
        "reason": selection.reason,
        "preset": preset,
        "random_weights": random,
    }
    if synth is not None:
        d.update(
            identity=synth.identity(),
            sample_rate=synth.sample_rate,
            clones_voice=synth.clones_voice and not random,
        )
    return d


def engine_random_weights(selection: EngineSelection, synth: Synthesizer | None = None) -> bool:
    """Whether the engine has random weights: the synthesizer says so, or its manifest does
    (`random_weights`, absent = false), or, for a checkpoint directory, its config.yaml."""
    if getattr(synth, "random_weights", False):
        return True
    if selection.path is None:
        return False
    import json

    import yaml

    from fasttts_cli.build.checkpoint import RANDOM_KEY
    from fasttts_cli.engine_folder import MANIFEST

    try:
        if selection.kind == TORCH:
            cfg = yaml.safe_load((selection.path / "config.yaml").read_text(encoding="utf-8"))
            return isinstance(cfg, dict) and cfg.get(RANDOM_KEY) is True
        raw = json.loads((selection.path / MANIFEST).read_text(encoding="utf-8"))
        return isinstance(raw, dict) and raw.get("random_weights") is True
    except (OSError, ValueError, yaml.YAMLError):
        return False  # an unreadable engine fails its own load with a clear message


def random_weights_warning(selection: EngineSelection) -> str:
    name = selection.path.name if selection.path is not None else selection.kind
    return (
        f"engine {name} has random weights: it does not clone and speaks noise (a test engine from "
        "`fasttts tiny-checkpoint`); the runaway guard is off for it, since the length of noise means nothing"
    )


def run_dub(
    o: DubOptions, rep: Reporter | None = None, *, synthesizer: Synthesizer | None = None
) -> DubResult:
    """Run the whole dub job. Raises FastTTSError subclasses (with exit codes) on failure;
    KeyboardInterrupt leaves the cache consistent (every entry is complete or absent).
    `synthesizer` overrides engine selection (tests, embedding programs)."""
    rep = rep or Reporter(verbosity=QUIET)
    validate_options(o)
    with rep.stage("read"):
        job = read_inputs(o)
    for w in job.read_warnings + job.voice_warnings:
        rep.warn(w)
    paths = resolve_outputs(o, job.script_format)
    check_writable(paths.media.parent, "-o/--output" if o.output else "--output-dir")
    check_writable(paths.work_dir, "--work-dir")
    from fasttts_cli.partials import sweep_run_leftovers
    from fasttts_cli.worklock import hold_work_dir

    # One writer per work folder for the whole run; the holder then clears what a killed run left.
    with hold_work_dir(paths.work_dir, wait=not o.no_wait, rep=rep):
        left = sweep_run_leftovers(paths.work_dir, [paths.media, paths.subtitles])
        if left:
            rep.info(f"removed {len(left)} partial file(s) an interrupted run left behind")
        return _run_in_work_dir(o, rep, job, paths, synthesizer)


def _run_in_work_dir(
    o: DubOptions, rep: Reporter, job: JobInputs, paths: OutputPaths, synthesizer: Synthesizer | None
) -> DubResult:
    """The job once the work dir is ours: plan, synthesize, assemble, write."""
    if synthesizer is not None:
        selection = EngineSelection(synthesizer.name, None, "given by the caller")
        counter, token_source = synthesizer.count_tokens, "engine"
    else:
        selection = select_engine(o.engine)
        counter, token_source = token_counter(selection, o.preset)
    with rep.stage("plan"):
        plan = _plan(job.cues, job.voices, counter, o, job.only)
    clones = synthesizer.clones_voice if synthesizer is not None else selection.kind != DRAFT
    # What the run will synthesize: a non-cloning engine's batches are regrouped (_synthesize_all), and
    # the forecast must say so.
    n_batches = len(_synthesis_batches([list(b.line_indices) for b in plan.batches], clones, o.batch_size))
    plan_json = {
        "script": str(o.script),
        "engine": selection.kind,
        "token_counts": token_source,
        "untimed": job.untimed,
        **plan.to_json(),
        "synthesis_batches": n_batches,
    }
    atomic_write_json(paths.work_dir / "plan.json", plan_json)
    rep.event("plan", lines=len(plan.lines), batches=n_batches, work_dir=str(paths.work_dir))
    if not plan.lines:
        raise InputError(o.script, "nothing to say: every cue is empty after cleanup (music, sound tags)")
    if plan.skipped:
        rep.warn(f"lines with nothing to say after cleanup are not dubbed: {_ranges(plan.skipped)}")
    if o.dry_run:
        # Nothing heavier than the tokenizer has run: no model, no voice conditioning.
        return DubResult(
            ok=True,
            outputs={"plan": str(paths.work_dir / "plan.json"), "would_write": str(paths.media)},
            warnings=rep.warnings,
            timings=rep.timings,
            report_path=None,
            work_dir=paths.work_dir,
            engine=_engine_info(selection, None, o.preset),
            lines={
                "total": len(plan.lines),
                "batches": n_batches,
                "tokens": sum(ln.n_tokens for ln in plan.lines),
                "no_speech": list(plan.skipped),
                "skipped": [s.to_json() for s in job.skipped],
            },
            dry_run=True,
            plan=plan_json,
        )

    with rep.stage("load"):
        synth = synthesizer or load_synthesizer(selection, o.preset, cache_dir=paths.work_dir / "voices")
    try:
        if selection.kind == DRAFT and o.preset:
            rep.warn(f"--preset {o.preset} is ignored by the draft voice")
        if not synth.clones_voice:
            rep.warn(
                "draft voice: the reference voices are NOT cloned; every line is spoken by the Piper "
                "'joe' voice (set --engine or $FASTTTS_ENGINE to an IndexTTS-2 engine for cloning)"
            )
        if engine_random_weights(selection, synth):
            rep.warn(random_weights_warning(selection))
        states, todo = _synthesize_all(o, rep, job, plan, counter, paths, synth)
        return _assemble(o, rep, job, plan, states, paths, selection, synth, todo)
    finally:
        if synthesizer is None:
            synth.close()


def _voice_warnings(path: Path, rep: Reporter) -> None:
    """Odd but usable references (very long, clipped): the engine accepted them, the user should know."""
    from fasttts_cli.audio import inspect_reference_voice

    try:
        for w in inspect_reference_voice(path).warnings:
            rep.warn(w)
    except FastTTSError:
        pass  # the engine's own check is authoritative; it accepted this file


def _synthesis_batches(batches: list[list[int]], clones_voice: bool, size: int) -> list[list[int]]:
    """The plan's batches as the engine gets them. A non-cloning engine ignores the reference, so batches
    split by voice only cost extra process starts (~1 s each for piper): they are regrouped into
    --batch-size chunks."""
    if clones_voice:
        return batches
    flat = [i for b in batches for i in b]
    return [flat[k : k + size] for k in range(0, len(flat), size)]


class DubInterrupted(KeyboardInterrupt):
    """Ctrl-C during synthesis; `message` says what was kept."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _synthesize_all(
    o: DubOptions,
    rep: Reporter,
    job: JobInputs,
    plan: Any,
    counter: Callable[[str], int],
    paths: OutputPaths,
    synth: Synthesizer,
) -> tuple[dict[int, _LineState], list[int]]:
    """Prepare voices, find cache misses, synthesize them batch by batch; every line ends with audio
    (from the cache or fresh) or an error allowed by the failure policy."""
    cache = LineCache(paths.work_dir / "lines")
    identity = synth.identity()
    params: dict[str, Any] = {"options": {}}  # per-line synthesis options (none yet): part of the key

    with rep.stage("voices"):
        voices: dict[Path, Voice] = {}
        for ln in plan.lines:
            if ln.voice not in voices:
                name = ln.speaker or ln.voice.stem
                voices[ln.voice] = synth.prepare_voice(ln.voice, name=name, emotion=o.emotion)
                _voice_warnings(ln.voice, rep)

    states: dict[int, _LineState] = {}
    for ln in plan.lines:
        v = voices[ln.voice]
        seed = line_seed(ln.text, v.key, o.seed)
        states[ln.index] = _LineState(ln, v, seed, line_key(ln.text, v.key, identity, params, seed))
    forced = job.only or set()
    # Every hit is verified in full before the to-do list is made (meta, .npy header and size, checksum:
    # about 1 s for a 2-hour film's 1500 lines), so a damaged entry is re-synthesized now and placement
    # never meets one.
    with rep.stage("cache"):
        hits, damaged = check_hits(cache, {i: st.key for i, st in states.items() if i not in forced})
    for i, why in damaged.items():
        st = states[i]
        rep.warn(
            f"{st.line.source}: line {i}: its cached audio ({st.key[:12]} in {cache.root}) is damaged: "
            f"{why}; removed, it will be re-synthesized"
        )
    todo = [i for i in states if i not in hits]
    if job.only:
        extra = [i for i in todo if i not in forced]
        if extra:
            rep.info(f"--only: lines {_ranges(extra)} are not cached yet and are synthesized too")
    rep.info(
        f"{len(states)} lines: {len(states) - len(todo)} cached, {len(todo)} to synthesize "
        f"({synth.name} engine; work dir {paths.work_dir})"
    )
    rep.event("cache", to_synthesize=len(todo), cached=len(states) - len(todo))

    # Re-batch just the lines to synthesize, with the plan's own rule.
    batches = [list(b.line_indices) for b in _plan(job.cues, job.voices, counter, o, set(todo)).batches]
    batches = _synthesis_batches(batches, synth.clones_voice, o.batch_size)
    try:
        with rep.stage("synthesize"):
            _synthesize(o, rep, synth, cache, states, batches, identity)
    except KeyboardInterrupt:
        done = sum(1 for i in todo if cache.has(states[i].key))
        rep.event("error", ok=False, error="interrupted", exit_code=130)
        raise DubInterrupted(
            f"interrupted: {done} of the {len(todo)} lines to synthesize are finished and cached in "
            f"{paths.work_dir}; run the same command again to resume"
        ) from None

    for i, meta in hits.items():  # the verified metas: nothing is re-read
        st = states[i]
        st.n_samples, st.sample_rate = int(meta["n_samples"]), int(meta["sample_rate"])
        st.retries, st.n_tokens = int(meta.get("retries", 0)), meta.get("n_tokens")
        st.cached = True
    return states, todo


def _synthesize(
    o: DubOptions,
    rep: Reporter,
    synth: Synthesizer,
    cache: LineCache,
    states: dict[int, _LineState],
    batches: list[list[int]],
    identity: str,
) -> None:
    rep.begin_synthesis(sum(len(b) for b in batches), len(batches))
    try:
        for bno, ids in enumerate(batches, 1):
            rep.batch_start(bno, len(ids))
            t0 = time.monotonic()
            audio_s = 0.0

            def final(
                i: int, res: SynthResult | None, retries: int, problem: str | None, secs: float
            ) -> None:
                # Cached and reported the moment the line is final, while its batch-mates are still being
                # synthesized: a bar that moves, and an interrupt that keeps every finished line.
                nonlocal audio_s
                st = states[i]
                st.retries = retries
                if problem is None and res is not None and res.audio is not None:
                    meta = {
                        "line": i,
                        "text": normalize_text(st.line.text),
                        "voice": st.voice.key if st.voice else None,
                        "identity": identity,
                        "seed": st.seed,
                        "retries": retries,
                        "n_tokens": res.n_tokens,
                        "hit_token_limit": res.hit_token_limit,
                    }
                    hit = cache.put(st.key, res.audio, res.sample_rate, meta)
                    st.n_samples, st.sample_rate, st.n_tokens = len(hit.audio), hit.sample_rate, res.n_tokens
                    audio_s += hit.duration
                else:
                    st.error = problem or "no audio"
                dur = None if st.n_samples is None else st.n_samples / st.sample_rate
                rtf = (secs / dur) if dur else None
                rep.line_done(i, cached=False, duration=dur, rtf=rtf, retries=st.retries, error=st.error)

            _synth_with_guard(o, synth, states, ids, on_final=final)
            rep.batch_done(bno, len(ids), time.monotonic() - t0, audio_s)
            for i in ids:
                st = states[i]
                if st.error is None:
                    continue
                msg = f"{st.line.source}: line {i} failed after {st.retries} retries: {st.error}"
                if o.on_line_failure == "fail":
                    raise SynthesisError(
                        msg, hint="--on-line-failure silence|skip finishes the job without it"
                    )
                rep.warn(f"{msg} ({'left silent' if o.on_line_failure == 'silence' else 'skipped'})")
    finally:
        rep.end_synthesis()


# (line, result, retries, problem, synthesis seconds over its attempts): a line's outcome once it is final
FinalLine = Callable[[int, SynthResult | None, int, str | None, float], None]


def _synth_with_guard(
    o: DubOptions,
    synth: Synthesizer,
    states: dict[int, _LineState],
    ids: list[int],
    on_final: FinalLine | None = None,
) -> dict[int, tuple[SynthResult | None, int, str | None]]:
    """Synthesize `ids`; lines that fail or look like runaways are retried with new seeds, up to
    --max-retries times, batched together. Returns (result, retries, problem) per line, and hands each
    line to `on_final` as soon as its outcome is final (as the engine reports rows: see
    `synthesizer.synthesize_rows`). A random-weight engine speaks noise of no particular length: only its
    failures count, not the runaway guard."""
    guard = None if getattr(synth, "random_weights", False) else GUARD
    out: dict[int, tuple[SynthResult | None, int, str | None]] = {}
    spent: dict[int, float] = dict.fromkeys(ids, 0.0)

    def attempt(pending: list[int], n: int) -> list[int]:
        """One engine call for `pending` (attempt n); returns the lines to try again."""
        reqs = []
        for i in pending:
            st = states[i]
            seed = st.seed if n == 0 else retry_seed(st.seed, n)
            assert st.voice is not None
            reqs.append(SynthRequest(line_id=str(i), text=st.line.text, voice=st.voice, seed=seed))
        again: list[int] = []

        def row(k: int, res: SynthResult, seconds: float) -> None:
            i = pending[k]
            spent[i] += seconds
            if not res.ok:
                problem: str | None = res.error or "no audio"
            else:
                assert res.audio is not None
                dur = len(res.audio) / res.sample_rate
                problem = (
                    None if guard is None else guard.check(states[i].line.text, dur, res.hit_token_limit)
                )
            out[i] = (res, n, problem)
            if problem is not None and n < o.max_retries:
                again.append(i)
            elif on_final is not None:
                on_final(i, res, n, problem, spent[i])

        results = synthesize_rows(synth, reqs, row)
        if len(results) != len(reqs):
            raise FastTTSError(f"{synth.name} engine returned {len(results)} results for {len(reqs)} lines")
        return sorted(again, key=pending.index)

    pending, n = list(ids), 0
    while pending:
        pending = attempt(pending, n)
        n += 1
    return out


def _assemble(
    o: DubOptions,
    rep: Reporter,
    job: JobInputs,
    plan: Any,
    states: dict[int, _LineState],
    paths: OutputPaths,
    selection: EngineSelection,
    synth: Synthesizer,
    todo: list[int],
) -> DubResult:
    """Timeline, mix, loudness and output with memory bounded by the block size, whatever the length.

    Each line's audio is read from the cache when it is placed; the timeline and the mix live in
    disk-backed arrays in the work dir (temporary names, removed at the end); the original or background
    is decoded block by block; loudness is measured, normalized and written to dub.wav in passes of
    `ASSEMBLY_BLOCK` frames. A short programme is one block, so it takes the same path."""
    from fasttts_cli.blockio import AudioFileWriter, DiskArray, export_audio
    from fasttts_cli.loudness import normalize_stream
    from fasttts_cli.timing import SlotInput, layout_sequential, retime_cues, solve_timing

    block = ASSEMBLY_BLOCK
    cache = LineCache(paths.work_dir / "lines")
    with rep.stage("audio"):
        # Lengths only: soxr's output is round(n * SR / rate) samples, and leveling keeps the length.
        lengths = {
            i: (st.n_samples if st.sample_rate == SR else round(st.n_samples * SR / st.sample_rate))
            for i, st in states.items()
            if st.n_samples is not None
        }

    with rep.stage("timing"):
        topts = _timing_options(o)
        order = [ln.index for ln in plan.lines if ln.index in lengths]
        durations = {i: lengths[i] / SR for i in order}
        if job.untimed:
            slots = layout_sequential([(i, durations[i]) for i in order], pause=UNTIMED_PAUSE)
        else:
            slots = [SlotInput(i, states[i].line.start, states[i].line.end, durations[i]) for i in order]
        media_end = job.media.duration if job.media is not None and job.media.duration > 0 else None
        timings = {t.index: t for t in solve_timing(slots, topts, media_end=media_end)}

    # Scratch arrays (timeline, mix) and open decoders are released when this block ends, error or not.
    with contextlib.ExitStack() as scratch:
        with rep.stage("tempo"):
            last_end = max((t.end for t in timings.values()), default=0.0)
            if media_end is not None:
                duration = media_end
                if last_end > media_end + 1e-3:
                    over = last_end - media_end
                    rep.warn(f"the dub runs {over:.2f} s past the end of {o.video}; the tail is cut")
            else:
                duration = last_end + 0.5
            timeline = scratch.enter_context(DiskArray(paths.work_dir, 1, prefix=".timeline-"))
            placed = _placed_lines(o, cache, states, timings)
            _render_timeline(timeline, counted(placed, len(timings), rep, "tempo", "lines"), duration)

        with rep.stage("mix"):
            mixed, keep_original, dub_layout = _mix(
                o, rep, timeline, job.media, scratch, paths.work_dir, block
            )

        with rep.stage("loudness"):
            # The normalizer's last pass writes dub.wav itself: no copy of the programme in between.
            with AudioFileWriter(paths.work_dir / "dub.wav", SR, mixed.channels) as wav:
                passes = PassProgress(mixed, SR, rep, "loudness")
                norm = normalize_stream(passes, SR, wav.write, o.loudness, o.true_peak, block=block)
            dub_wav = wav.path
            if not norm.on_target:
                rep.warn(
                    f"loudness {norm.output_lufs:.1f} LUFS misses the --loudness {o.loudness} target "
                    "by > 0.5 LU"
                )

    # Subtitles first: a soft-subtitle mux embeds them.
    with rep.stage("subtitles"):
        from fasttts_cli.subtitles_out import SubtitleEntry, format_subtitles

        cue_of = {c.index: c for c in job.cues}

        def entry(i: int, start: float, end: float) -> SubtitleEntry:
            # The cue's display text (its line breaks), not the cleaned text that was spoken.
            c = cue_of[i]
            return SubtitleEntry(start, end, c.text, c.speaker, c.style)

        entries = [entry(i, s, e) for i, s, e in retime_cues(list(timings.values()))]
        if o.on_line_failure == "silence" and not job.untimed:
            # A silent line keeps its subtitle at its original slot (untimed input has no slot to keep).
            entries += [entry(i, st.line.start, st.line.end) for i, st in states.items() if st.error]
        entries.sort(key=lambda x: x.start)
        text = format_subtitles(job.script_format, entries, header=job.subtitle_header)
        atomic_write_text(paths.subtitles, text)

    with rep.stage("write"):
        rep.stage_progress("write", 0, round(duration, 3), unit="seconds")
        if o.video is not None and paths.media.suffix.lower() in VIDEO_EXTS:
            from fasttts_cli.mux import mux

            def muxed(t: float) -> None:  # ffmpeg's -progress: seconds of the output written so far
                rep.stage_progress(
                    "write", min(round(t, 3), round(duration, 3)), round(duration, 3), unit="seconds"
                )

            notes: list[str] = []
            mux(
                o.video,
                dub_wav,
                paths.media,
                lang=o.lang,
                title=o.title or "",
                keep_original=keep_original,
                subtitles=paths.subtitles if o.soft_subtitles else None,
                default_subtitles=o.default_subtitles,
                dub_layout=dub_layout,
                warnings=notes,
                on_time=muxed,
            )
            for n in notes:
                rep.warn(n)
        else:
            from fasttts_cli.mux import default_title, normalize_lang

            title = o.title or default_title(normalize_lang(o.lang))
            export_audio(dub_wav, paths.media, block=block, lang=o.lang, title=title)
        rep.stage_progress("write", round(duration, 3), round(duration, 3), unit="seconds")

    report = _report(o, plan, states, timings, todo, selection, synth, norm, rep, skipped=job.skipped)
    report_path = atomic_write_json(paths.work_dir / "report.json", report)
    outputs = {
        ("video" if paths.media.suffix.lower() in VIDEO_EXTS else "audio"): str(paths.media),
        "subtitles": str(paths.subtitles),
        "report": str(report_path),
        "plan": str(paths.work_dir / "plan.json"),
        "dub_audio": str(dub_wav),
    }
    rep.event("done", ok=True, outputs=outputs, lines=report["summary"])
    return DubResult(
        ok=True,
        outputs=outputs,
        warnings=rep.warnings,
        timings=rep.timings,
        report_path=report_path,
        work_dir=paths.work_dir,
        engine=_engine_info(selection, synth, o.preset),
        lines=report["summary"],
    )


def _placed_lines(
    o: DubOptions, cache: LineCache, states: dict[int, _LineState], timings: dict[int, Any]
) -> Iterator[tuple[float, np.ndarray]]:
    """Each timed line's audio, read from the cache, resampled once, tempo-changed, leveled and cut as its
    timing says, one line at a time (a generator: only the line being placed is in memory)."""
    from fasttts_cli.audio import resample
    from fasttts_cli.loudness import level_line
    from fasttts_cli.tempo import change_tempo, trim_to

    for i, t in timings.items():
        st = states[i]
        hit = cache.get(st.key)
        if hit is None:
            # Verified (or written) earlier in this run, under the work dir's lock: only something outside
            # fasttts can have removed or changed it since. The next run re-synthesizes it.
            check = cache.verify(st.key)
            if check.status == "damaged":
                cache.discard(st.key)
            why = "it is gone" if check.status == "missing" else check.reason
            raise FastTTSError(
                f"line {i}: its cached audio ({st.key[:12]}) was removed or changed in {cache.root.parent} "
                f"during this run ({why}); is another program writing to that folder?",
                hint="run the same command again: the line is re-synthesized",
            )
        x = resample(hit.audio, hit.sample_rate, SR) if hit.sample_rate != SR else hit.audio
        y = np.asarray(x, dtype=np.float32)
        if abs(t.factor - 1.0) > 1e-6:
            y = change_tempo(y, SR, t.factor)
        # Levelled after the tempo change: the stretchers lower a line's loudness by 1-2.5 LU at x1.03-1.25,
        # so a line levelled first would come out quieter than its neighbours at x1.0.
        y = level_line(y, SR, target_lufs=o.loudness)
        if t.truncated:
            y = trim_to(y, SR, t.end - t.start)
        yield t.start, y


def _render_timeline(target: Any, placed: Iterable[tuple[float, np.ndarray]], duration: float) -> int:
    from fasttts_cli.mix import place_clips

    return place_clips(target, placed, duration, SR)


def _mix(
    o: DubOptions,
    rep: Reporter,
    timeline: Any,
    media: Any,
    scratch: contextlib.ExitStack,
    work: Path,
    block: int,
) -> tuple[Any, bool, str | None]:
    """Apply --mix/--background block by block into a disk-backed array. Returns it, whether mux keeps the
    original track, and the channel layout of the dub track (None: mono, nothing to relabel)."""
    from fasttts_cli.audio import AudioReader
    from fasttts_cli.blockio import DiskArray
    from fasttts_cli.mix import LAYOUTS, check_mix, mix_blocks

    streams = media.audio_streams if media is not None else []
    mode = o.mix
    if mode in ("keep", "duck") and not streams:
        rep.warn(f"{o.video} has no audio track: --mix {mode} falls back to replace")
        mode = "replace"
    background = scratch.enter_context(AudioReader(o.background, SR)) if o.background is not None else None
    if mode == "replace" and background is None:
        # The dub alone: as many channels as the original so players treat both tracks alike.
        layout = streams[0].layout if streams and streams[0].layout in LAYOUTS else "mono"
    elif streams:
        layout = streams[0].layout  # check_mix names the supported layouts if this is not one
    else:
        layout = "stereo" if background is not None and background.channels == 2 else "mono"
    bed: Any = None
    what = ""
    if background is not None:
        bed, what = background, "the background stem"
    elif mode == "duck":
        assert o.video is not None
        bed, what = scratch.enter_context(AudioReader(o.video, SR)), "the original audio"
    nch = check_mix(mode, layout, has_original=bed is not None, has_background=background is not None)
    n = timeline.n
    out = scratch.enter_context(DiskArray(work, nch, n, prefix=".mix-"))
    # The bed is cut or padded to the dub's length: the dub decides the programme's length.
    blocks = mix_blocks(
        lambda a, b: _mono_range(timeline, a, b),
        n,
        mode,
        layout,
        bed.read_exact if bed is not None else None,
        bed_what=what,
        sr=SR,
        block=block,
    )
    from fasttts_cli.blockio import block_ranges

    n_blocks = len(list(block_ranges(n, max(1, block or n))))
    if n_blocks == 0:
        rep.stage_progress("mix", 0, 0, unit="blocks")
    for k, (start, chunk) in enumerate(blocks, 1):
        out.write(start, chunk)
        rep.stage_progress("mix", k, n_blocks, unit="blocks")
    return out, mode == "keep", (None if layout == "mono" else layout)


def _mono_range(arr: Any, start: int, stop: int) -> np.ndarray:
    """Samples [start, stop) of a mono disk array, silence outside it (what the ducking look-around reads)."""
    part = arr.read(start, stop)[0]
    lead = max(0, -start)
    tail = (stop - start) - lead - part.size
    return np.pad(part, (lead, tail)) if lead or tail else part


def _report(
    o: DubOptions,
    plan: Any,
    states: dict[int, _LineState],
    timings: dict[int, Any],
    todo: list[int],
    selection: EngineSelection,
    synth: Synthesizer,
    norm: Any,
    rep: Reporter,
    *,
    skipped: Sequence[Any] = (),
) -> dict[str, Any]:
    from fasttts_cli.timing import summarize

    lines = []
    for ln in plan.lines:
        st = states[ln.index]
        t = timings.get(ln.index)
        entry: dict[str, Any] = {
            "index": ln.index,
            "source": ln.source,
            "speaker": ln.speaker,
            "text": ln.text,
            "slot": [ln.start, ln.end],
        }
        if t is not None:
            tj = t.to_json()
            entry["slot"] = tj["slot"]
            for k in (
                "natural",
                "factor",
                "start",
                "end",
                "shift",
                "overflow",
                "truncated",
                "action",
                "note",
            ):
                entry[k] = tj[k]
        else:
            entry.update(natural=None, factor=None, start=None, end=None, shift=None, overflow=None)
            entry.update(truncated=False, note="")
            entry["action"] = "silence" if o.on_line_failure == "silence" else "skipped"
        entry.update(
            cached=st.cached,
            retries=st.retries,
            seed=st.seed,
            key=st.key,
            n_tokens=st.n_tokens,
            error=st.error,
        )
        lines.append(entry)
    tsum = summarize(list(timings.values()))
    summary = {
        "total": len(states),
        "synthesized": sum(1 for i in todo if states[i].error is None),
        "cached": sum(1 for st in states.values() if st.cached),
        "failed": sum(1 for st in states.values() if st.error is not None),
        "retries": sum(st.retries for i, st in states.items() if i in todo),
        "no_speech": list(plan.skipped),
        "skipped": [s.to_json() for s in skipped],
        "sped_up": sum(1 for t in timings.values() if t.factor > 1.0 + 1e-9),
        "max_factor": tsum["max_factor"],
        "shifted": tsum["actions"].get("shifted", 0),
        "max_shift": tsum["max_shift"],
        "overflowing": tsum["overflowing"],
        "truncated": tsum["truncated"],
        "actions": {k: v for k, v in tsum["actions"].items() if v},
        "loudness_lufs": round(float(norm.output_lufs), 2),
        "true_peak_dbtp": round(float(norm.output_true_peak), 2),
        "synthesis_rtf": None if rep.synthesis_rtf is None else round(rep.synthesis_rtf, 4),
    }
    return {
        "version": 1,
        "fasttts": __version__,
        "script": str(o.script),
        "video": str(o.video) if o.video else None,
        "engine": _engine_info(selection, synth, o.preset),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(o).items()},
        "summary": summary,
        "timing": tsum,
        "warnings": list(rep.warnings),
        "lines": lines,
    }


# ---- small helpers -------------------------------------------------------------------------------


def _ranges(ids: Sequence[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7" (the --only syntax)."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


# ---- inspect and synth ---------------------------------------------------------------------------


def inspect_job(o: DubOptions) -> dict[str, Any]:
    """Cues, speakers, batches and a timing forecast, without loading any model.

    The forecast runs the real timing solver on durations guessed at `FORECAST_CPS` spoken characters
    per second (typical narration), so it shows where speed-ups and shifts are likely; real durations
    come only from synthesis."""
    from fasttts_cli.speakers import with_placeholder_voices
    from fasttts_cli.timing import SlotInput, layout_sequential, solve_timing, summarize

    validate_options(o)
    job = read_inputs(o, require_voices=False)
    selection = select_engine(o.engine)
    counter, token_source = token_counter(selection, o.preset)
    voices, stand_ins = with_placeholder_voices(job.cues, job.voices)
    plan = _plan(job.cues, voices, counter, o, job.only)
    est = {ln.index: _forecast_duration(ln.text) for ln in plan.lines}
    if job.untimed:
        slots = layout_sequential([(ln.index, est[ln.index]) for ln in plan.lines], pause=UNTIMED_PAUSE)
    else:
        slots = [SlotInput(ln.index, ln.start, ln.end, est[ln.index]) for ln in plan.lines]
    # A forecast never fails: it shows what shifting would do instead.
    topts = _timing_options(o, "shift" if o.overflow == "fail" else None)
    media_end = job.media.duration if job.media is not None and job.media.duration > 0 else None
    forecast = solve_timing(slots, topts, media_end=media_end)
    speakers: dict[str, dict[str, Any]] = {}
    for ln in plan.lines:
        voice = None if ln.voice in stand_ins else str(ln.voice)
        sp = speakers.setdefault(ln.speaker or "(none)", {"lines": 0, "voice": voice})
        sp["lines"] += 1
    return {
        "ok": True,
        "command": "inspect",
        "script": str(o.script),
        "engine": {"kind": selection.kind, "reason": selection.reason},
        "token_counts": token_source,
        "untimed": job.untimed,
        "cues": [
            {
                "index": ln.index,
                "start": ln.start,
                "end": ln.end,
                "speaker": ln.speaker,
                "text": ln.text,
                "tokens": ln.n_tokens,
                "source": ln.source,
            }
            for ln in plan.lines
        ],
        "no_speech": list(plan.skipped),
        "skipped": [s.to_json() for s in job.skipped],
        "warnings": job.read_warnings + job.voice_warnings + _unvoiced_warning(speakers),
        "speakers": speakers,
        "batches": [
            {
                "index": b.index,
                "voice": None if b.voice in stand_ins else str(b.voice),
                "lines": list(b.line_indices),
            }
            for b in plan.batches
        ],
        "forecast": {
            "chars_per_second": FORECAST_CPS,
            "lines": [t.to_json() for t in forecast],
            "summary": summarize(forecast),
        },
    }


def _unvoiced_warning(speakers: dict[str, dict[str, Any]]) -> list[str]:
    missing = [name for name, sp in speakers.items() if sp["voice"] is None]
    if not missing:
        return []
    return [
        f"no voice yet for {', '.join(missing)}: `dub` needs --voice NAME=PATH (or a default --voice PATH)"
    ]


FORECAST_CPS = 15.0


def _forecast_duration(text: str) -> float:
    return max(0.3, sum(1 for ch in text if ch.isalnum()) / FORECAST_CPS + 0.2)


@dataclass
class SynthOptions:
    text: str
    voice: Path
    output: Path
    engine: str | None = None
    preset: str | None = None
    seed: int = 0
    max_retries: int = 2
    emotion: EmotionSpec | None = None
    on_line_failure: str = "fail"  # fail | silence (skip would leave nothing to write)


def synth_one(
    so: SynthOptions, rep: Reporter | None = None, *, synthesizer: Synthesizer | None = None
) -> dict[str, Any]:
    """`fasttts synth`: one line to one audio file at the engine's own sample rate (no resampling)."""
    from fasttts_cli.mux import write_audio
    from fasttts_cli.plan import clean_text

    rep = rep or Reporter(verbosity=QUIET)
    text = clean_text(so.text)
    if not text:
        raise UsageError("synth: the text is empty")
    if so.on_line_failure not in SYNTH_FAILURE_POLICIES:
        raise UsageError(
            f"--on-line-failure must be one of {', '.join(SYNTH_FAILURE_POLICIES)} for synth "
            f"(got {so.on_line_failure!r})",
            hint="skip applies to dub only: synth has one line, skipping it would write nothing",
        )
    if so.max_retries < 0:
        raise UsageError(f"--max-retries must be >= 0 (got {so.max_retries})")
    if so.output.suffix.lower() not in AUDIO_EXTS:
        raise UsageError(f"-o/--output {so.output}: the extension must be one of {', '.join(AUDIO_EXTS)}")
    check_writable(so.output.parent if str(so.output.parent) else Path("."), "-o/--output")
    from fasttts_cli.probe import probe

    for ref in (so.voice, so.emotion.audio if so.emotion is not None else None):
        if ref is not None:
            probe(ref, check_complete=True)  # a truncated reference is refused before the model loads
    selection = select_engine(so.engine) if synthesizer is None else EngineSelection("custom", None, "given")
    with rep.stage("load"):
        synth = synthesizer or load_synthesizer(selection, so.preset)
    try:
        if not synth.clones_voice:
            rep.warn("draft voice: the reference voice is NOT cloned (Piper 'joe' voice)")
        if engine_random_weights(selection, synth):
            rep.warn(random_weights_warning(selection))
        with rep.stage("voices"):
            voice = synth.prepare_voice(so.voice, emotion=so.emotion)
        seed = line_seed(text, voice.key, so.seed)
        st = _LineState(_SynthLine(1, text), voice, seed)
        t0 = time.monotonic()

        def final(i: int, res: SynthResult | None, retries: int, problem: str | None, secs: float) -> None:
            dur = (
                len(res.audio) / res.sample_rate
                if problem is None and res and res.audio is not None
                else None
            )
            rep.line_done(
                i, cached=False, duration=dur, rtf=secs / dur if dur else None, retries=retries, error=problem
            )

        with rep.stage("synthesize"):
            res, retries, problem = _synth_with_guard(
                DubOptions(script=Path("-"), max_retries=so.max_retries), synth, {1: st}, [1], on_final=final
            )[1]
        failed = problem is not None or res is None or res.audio is None
        if failed:
            msg = f"synthesis failed after {retries} retries: {problem or 'no audio'}"
            if so.on_line_failure == "fail":
                raise SynthesisError(msg, hint="--on-line-failure silence writes silence instead")
            rep.warn(f"{msg} (left silent)")
            # as long as the text would take, so a caller placing the file keeps its timing
            sr = int(synth.sample_rate)
            audio = np.zeros(round(_forecast_duration(text) * sr), np.float32)
        else:
            assert res is not None and res.audio is not None
            audio, sr = res.audio, res.sample_rate
        dt = time.monotonic() - t0
        with rep.stage("write"):
            write_audio(so.output, audio, sr)
        dur = len(audio) / sr
        return {
            "ok": True,
            "command": "synth",
            "outputs": {"audio": str(so.output)},
            "duration": round(dur, 3),
            "sample_rate": sr,
            "seed": seed,
            "retries": retries,
            "failed": failed,
            "error": problem if failed else None,
            "rtf": round(dt / dur, 4) if dur else None,
            "engine": _engine_info(selection, synth, so.preset),
            "warnings": rep.warnings,
            "timings": rep.timings,
        }
    finally:
        if synthesizer is None:
            synth.close()


@dataclass(frozen=True)
class _SynthLine:
    index: int
    text: str
