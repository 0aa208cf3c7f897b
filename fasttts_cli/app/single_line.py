"""`fasttts synth`: one line to one audio file at the engine's own sample rate."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.app.engine_load import (
    engine_info,
    engine_random_weights,
    load_synthesizer,
    random_weights_warning,
)
from fasttts_cli.app.inspection import forecast_duration
from fasttts_cli.app.job import AUDIO_EXTS, SYNTH_FAILURE_POLICIES, LineState, check_writable
from fasttts_cli.app.progress import QUIET, Reporter
from fasttts_cli.app.rendering import render_one
from fasttts_cli.app.synthesis import seed_of, synth_with_guard
from fasttts_cli.dubbing.cache import line_seed
from fasttts_cli.errors import SynthesisError, UsageError
from fasttts_cli.synth.engine_select import EngineSelection, select_engine
from fasttts_cli.synth.languages import spoken_language
from fasttts_cli.synth.synthesizer import (
    EmotionSpec,
    LinePlan,
    Synthesizer,
    SynthRequest,
    SynthResult,
    Voice,
    renders_to_length,
)


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
    duration: float | None = None  # --duration: render to this length (seconds); None: natural
    lang: str = "und"  # --lang: the text's language
    max_render_speedup: float = 1.25
    max_render_slowdown: float = 1.25
    stream: bool = False  # --stream: audio written as it is made (app.stream_line)
    pcm: bool = False  # --pcm: with --stream, raw 16-bit PCM instead of a streaming WAV


def synth_one(
    so: SynthOptions, rep: Reporter | None = None, *, synthesizer: Synthesizer | None = None
) -> dict[str, Any]:
    """`fasttts synth`: one line to one audio file at the engine's own sample rate (no resampling)."""
    from fasttts_cli.media.mux import write_audio

    rep = rep or Reporter(verbosity=QUIET)
    if so.stream:
        from fasttts_cli.app.stream_line import stream_one

        return stream_one(so, rep, synthesizer=synthesizer)
    if so.pcm:
        raise UsageError(
            "--pcm: only with --stream (a whole line is written in the format of -o's extension)"
        )
    text = checked_text(so)
    if so.output.suffix.lower() not in AUDIO_EXTS:
        raise UsageError(f"-o/--output {so.output}: the extension must be one of {', '.join(AUDIO_EXTS)}")
    check_writable(so.output.parent if str(so.output.parent) else Path("."), "-o/--output")
    selection, synth = open_line_engine(so, rep, synthesizer)
    try:
        voice, lang, seed = line_voice(so, synth, rep, text)
        st = LineState(_SynthLine(1, text), voice, seed, lang=lang)
        t0 = time.monotonic()

        def final(i: int, res: LinePlan | None, retries: int, problem: str | None, secs: float) -> None:
            dur = res.natural if problem is None and res is not None and res.ok else None
            rep.line_done(
                i, cached=False, duration=dur, rtf=secs / dur if dur else None, retries=retries, error=problem
            )

        with rep.stage("synthesize"):
            res, retries, problem = synth_with_guard(so.max_retries, synth, {1: st}, [1], on_final=final)[1]
        natural = None
        if problem is None and res is not None and res.ok:
            natural = res.natural
            with rep.stage("render"):
                out = _render(so, synth, st, res, seed_of(seed, retries))
            problem = out.error if not out.ok else None
        failed = problem is not None or natural is None
        if failed:
            msg = f"synthesis failed after {retries} retries: {problem or 'no audio'}"
            if so.on_line_failure == "fail":
                raise SynthesisError(msg, hint="--on-line-failure silence writes silence instead")
            rep.warn(f"{msg} (left silent)")
            # as long as the text would take, so a caller placing the file keeps its timing
            sr = int(synth.sample_rate)
            audio = np.zeros(round(forecast_duration(text) * sr), np.float32)
        else:
            assert out.audio is not None
            audio, sr = out.audio, out.sample_rate
        dt = time.monotonic() - t0
        with rep.stage("write"):
            write_audio(so.output, audio, sr)
        dur = len(audio) / sr
        return synth_result(
            so,
            selection,
            synth,
            rep,
            duration=round(dur, 3),
            natural=None if natural is None else round(natural, 3),
            samples=len(audio),
            sample_rate=sr,
            seed=seed,
            retries=retries,
            failed=failed,
            error=problem if failed else None,
            rtf=round(dt / dur, 4) if dur else None,
        )
    finally:
        if synthesizer is None:
            synth.close()


def synth_result(
    so: SynthOptions, selection: EngineSelection, synth: Synthesizer, rep: Reporter, **fields: Any
) -> dict[str, Any]:
    """synth's --json object: the line's own `fields` between the command's keys and the engine's."""
    head = {"ok": True, "command": "synth", "outputs": {"audio": str(so.output)}}
    tail = {
        "engine": engine_info(selection, synth, so.preset),
        "warnings": rep.warnings,
        "timings": rep.timings,
    }
    return head | fields | tail


def line_voice(
    so: SynthOptions, synth: Synthesizer, rep: Reporter, text: str
) -> tuple[Voice, str | None, int]:
    """(the prepared voice, the language the line is spoken in, the line's seed)."""
    lang = spoken_language(synth, so.lang)
    with rep.stage("voices"):
        voice = synth.prepare_voice(so.voice, emotion=so.emotion)
    return voice, lang, line_seed(text, voice.key, so.seed)


def checked_text(so: SynthOptions) -> str:
    """The line's text, cleaned; UsageError (exit 2) for what synth cannot do, before any model loads."""
    from fasttts_cli.dubbing.plan import clean_text
    from fasttts_cli.dubbing.timing import TimingOptions

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
    if so.duration is not None and not (math.isfinite(so.duration) and so.duration > 0):
        raise UsageError(f"--duration must be a positive number of seconds (got {so.duration})")
    # the render caps' checks and messages are the timing solver's
    TimingOptions(max_render_speedup=so.max_render_speedup, max_render_slowdown=so.max_render_slowdown)
    return text


def open_line_engine(
    so: SynthOptions, rep: Reporter, synthesizer: Synthesizer | None
) -> tuple[EngineSelection, Synthesizer]:
    """The references checked whole, then the engine loaded (or the given one), its warnings made."""
    from fasttts_cli.media.probe import probe

    for ref in (so.voice, so.emotion.audio if so.emotion is not None else None):
        if ref is not None:
            probe(ref, check_complete=True)  # a truncated reference is refused before the model loads
    selection = select_engine(so.engine) if synthesizer is None else EngineSelection("custom", None, "given")
    with rep.stage("load"):
        synth = synthesizer or load_synthesizer(selection, so.preset)
    if not synth.clones_voice:
        rep.warn("draft voice: the reference voice is NOT cloned (Piper 'joe' voice)")
    if engine_random_weights(selection, synth):
        rep.warn(random_weights_warning(selection))
    return selection, synth


def _render(so: SynthOptions, synth: Synthesizer, st: LineState, plan: LinePlan, seed: int) -> SynthResult:
    """The plan rendered at its natural length, or at --duration (whole frames of the engine's hop)."""
    frames = None
    if so.duration is not None:
        lo, hi = plan.natural / so.max_render_speedup, plan.natural * so.max_render_slowdown
        if not lo - 1e-9 <= so.duration <= hi + 1e-9:
            raise UsageError(
                f"--duration {so.duration:g}: outside the render bounds of this line, whose natural duration "
                f"is {plan.natural:.3f} s: {lo:.3f}-{hi:.3f} s (--max-render-speedup "
                f"{so.max_render_speedup:g}, --max-render-slowdown {so.max_render_slowdown:g})",
                hint="give a duration within the bounds, or widen them",
            )
        if not renders_to_length(synth):
            raise UsageError(
                f"--duration: the {synth.name} engine cannot render a line to a length",
                hint="rebuild the engine with `fasttts build` (an engine built before this release lacks it)",
            )
        frames = max(1, round(so.duration * plan.sample_rate / int(synth.hop)))  # type: ignore[attr-defined]
    assert st.voice is not None
    req = SynthRequest("1", st.line.text, st.voice, seed, lang=st.lang)
    return render_one(synth, req, plan, frames)


@dataclass(frozen=True)
class _SynthLine:
    index: int
    text: str
