"""The dub job, as functions over dataclasses: script + voices (+ video) in, dubbed media + report out.

Stages (each timed in the result): read -> plan -> voices -> synthesize (the plan phase: plan-cache misses
only, batch by batch, runaway guard, failure policy) -> timing (on natural lengths: each line's target) ->
render (render-cache misses only, each line to its target) -> tempo (DSP only for what rendering left,
then level each line) + timeline -> mix -> loudness -> subtitles -> write/mux -> report.

This module reads the inputs and runs the stages in order under the work folder's lock; the stages live
in synthesis.py and assembly.py, the job's data (options, paths, guard, validation) in job.py, engine
loading in engine_load.py. Everything a flag can set is a field of `job.DubOptions`, so tests and other
programs drive the same code without a shell (`fasttts inspect`: inspection.py; `fasttts synth`:
single_line.py).
"""

from __future__ import annotations

from pathlib import Path

from fasttts_cli.app.assembly import assemble
from fasttts_cli.app.cast_voices import build_job_cast, cast_json, draft_notice, line_emotions
from fasttts_cli.app.engine_load import (
    engine_info,
    engine_random_weights,
    load_synthesizer,
    random_weights_warning,
    token_counter,
)
from fasttts_cli.app.job import (
    DubOptions,
    DubResult,
    JobInputs,
    OutputPaths,
    check_writable,
    format_ranges,
    plan_job,
    resolve_outputs,
    validate_options,
)
from fasttts_cli.app.progress import QUIET, Reporter
from fasttts_cli.app.rendering import fit_lines, render_all
from fasttts_cli.app.synthesis import synthesis_batches, synthesize_all
from fasttts_cli.dubbing.cache import atomic_write_json
from fasttts_cli.errors import InputError, UsageError
from fasttts_cli.synth.engine_select import DRAFT, EngineSelection, select_engine
from fasttts_cli.synth.synthesizer import Synthesizer


def read_inputs(o: DubOptions, *, require_voices: bool = True) -> JobInputs:
    """Read and check every input before anything slow runs; each problem names its file or flag.
    `require_voices=False` (inspect) lets speakers without a voice through."""
    from fasttts_cli.app.cast_voices import check_sources, is_placeholder, resolve_voices
    from fasttts_cli.dubbing.plan import parse_only
    from fasttts_cli.dubbing.readers import layout_untimed, parse_styles, read_script_full
    from fasttts_cli.dubbing.speakers import check_voices, parse_voice_flags, voice_name_problems
    from fasttts_cli.dubbing.takes import parse_take
    from fasttts_cli.media.probe import probe, require_video

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
    vm, cast = resolve_voices(o, cues, parse_voice_flags(o.voices), untimed)
    voice_warnings = voice_name_problems(cues, vm)
    if voice_warnings and o.strict_voices:
        raise UsageError(voice_warnings[0], hint="fix the name, or leave out --strict-voices to only warn")
    if require_voices:
        check_voices(cues, vm)
    known = {c.index for c in cues}
    only = None
    if o.only is not None:  # not `if o.only`: an empty --only "" must be refused, not mean "all lines"
        only = _known_lines("--only", o.only, parse_only(o.only), known, o.script)
    retake = set() if o.retake is None else parse_only(o.retake, "--retake")
    _known_lines("--retake", o.retake or "", retake, known, o.script)
    take = parse_take(o.take or [])
    _known_lines("--take", ",".join(o.take or []), set(take), known, o.script)
    # check_complete: a truncated video, stem or voice is refused here, not found out after synthesis.
    media = require_video(o.video, check_complete=True) if o.video is not None else None
    if o.background is not None:
        probe(o.background, check_complete=True)
    check_sources(o, media, untimed, vm)
    if o.separate:
        from fasttts_cli.app.separation import locate_model

        locate_model(o.separation_model)  # exit 3 naming the fetch command, before anything slow
    emotion_audio = o.emotion.audio if o.emotion is not None else None
    for voice in dict.fromkeys([vm.default, *vm.named.values(), emotion_audio]):
        if voice is not None and not is_placeholder(voice):
            probe(voice, check_complete=True)
    if o.emotion is not None and o.emotion.audio is not None and o.emotion.audio_sha256 is None:
        from dataclasses import replace

        from fasttts_cli.spec.engine_folder import file_sha256

        # The lines' keys name the --emotion-audio content, not its path: an edited clip re-synthesizes.
        o.emotion = replace(o.emotion, audio_sha256=file_sha256(o.emotion.audio))
    return JobInputs(
        cues,
        vm,
        only,
        media,
        untimed,
        voice_warnings,
        got.skipped,
        got.warnings + cast.warnings,
        got.format,
        got.header,
        cast,
        retake=retake,
        take=take,
    )


def _known_lines(flag: str, spec: str, lines: set[int], known: set[int], script: Path) -> set[int]:
    """`lines` when every one is a line of the script; else exit 2 naming the flag and the missing lines."""
    missing = sorted(lines - known)
    if missing:
        raise UsageError(
            f"{flag} {spec}: no line {', '.join(map(str, missing[:10]))} in {script} "
            f"(it has lines {min(known)}-{max(known)})",
            hint="line numbers are the ones `fasttts inspect` shows",
        )
    return lines


def run_dub(
    o: DubOptions,
    rep: Reporter | None = None,
    *,
    synthesizer: Synthesizer | None = None,
    planned: frozenset[str] = frozenset(),
) -> DubResult:
    """Run the whole dub job. Raises FastTTSError subclasses (with exit codes) on failure;
    KeyboardInterrupt leaves the cache consistent (every entry is complete or absent).
    `synthesizer` overrides engine selection (tests, embedding programs, `fasttts batch`); `planned`: the
    plan-cache keys the caller planned for this job just before (reported as synthesized, not cached)."""
    rep = rep or Reporter(verbosity=QUIET)
    validate_options(o)
    with rep.stage("read"):
        job = read_inputs(o)
    for w in job.read_warnings + job.voice_warnings:
        rep.warn(w)
    paths = resolve_outputs(o, job.script_format)
    check_writable(paths.media.parent, "-o/--output" if o.output else "--output-dir")
    check_writable(paths.work_dir, "--work-dir")
    from fasttts_cli.dubbing.worklock import hold_work_dir
    from fasttts_cli.partials import sweep_run_leftovers

    # One writer per work folder for the whole run; the holder then clears what a killed run left.
    with hold_work_dir(paths.work_dir, wait=not o.no_wait, rep=rep):
        from fasttts_cli.app.review.page import page_for

        left = sweep_run_leftovers(paths.work_dir, [paths.media, paths.subtitles, page_for(paths.media)])
        if left:
            rep.info(f"removed {len(left)} partial file(s) an interrupted run left behind")
        return _run_in_work_dir(o, rep, job, paths, synthesizer, planned)


def _run_in_work_dir(
    o: DubOptions,
    rep: Reporter,
    job: JobInputs,
    paths: OutputPaths,
    synthesizer: Synthesizer | None,
    planned: frozenset[str],
) -> DubResult:
    """The job once the work dir is ours: plan, synthesize, assemble, write."""
    if synthesizer is not None:
        selection = EngineSelection(synthesizer.name, None, "given by the caller")
        counter, token_source = synthesizer.count_tokens, "engine"
    else:
        selection = select_engine(o.engine)
        counter, token_source = token_counter(selection, o.preset)
    from fasttts_cli.app.separation import apply_to_job

    o, job = apply_to_job(o, rep, job, paths.work_dir)  # --separate (a dry run: stems already cached only)
    job = build_job_cast(job, rep, paths.work_dir, keep_source=o.emotion_from_line and not o.dry_run)
    with rep.stage("plan"):
        plan = plan_job(job.cues, job.voices, counter, o, job.only)
    clones = synthesizer.clones_voice if synthesizer is not None else selection.kind != DRAFT
    # What the run will synthesize: a non-cloning engine's batches are regrouped (synthesize_all), and
    # the forecast must say so.
    n_batches = len(synthesis_batches([list(b.line_indices) for b in plan.batches], clones, o.batch_size))
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
        rep.warn(f"lines with nothing to say after cleanup are not dubbed: {format_ranges(plan.skipped)}")
    if o.dry_run:
        # Nothing heavier than the tokenizer has run: no model, no voice conditioning.
        return DubResult(
            ok=True,
            outputs={"plan": str(paths.work_dir / "plan.json"), "would_write": str(paths.media)},
            warnings=rep.warnings,
            timings=rep.timings,
            report_path=None,
            work_dir=paths.work_dir,
            engine=engine_info(selection, None, o.preset),
            lines={
                "total": len(plan.lines),
                "batches": n_batches,
                "tokens": sum(ln.n_tokens for ln in plan.lines),
                "no_speech": list(plan.skipped),
                "skipped": [s.to_json() for s in job.skipped],
            },
            dry_run=True,
            plan=plan_json,
            cast=cast_json(job.cast),
            separation=job.separation,
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
            notice = draft_notice(job)
            if notice:
                rep.warn(notice)
        if engine_random_weights(selection, synth):
            rep.warn(random_weights_warning(selection))
        job.emotions = line_emotions(o, rep, job, paths.work_dir)
        states, todo = synthesize_all(o, rep, job, plan, counter, paths, synth, planned)
        with rep.stage("timing"):
            timings = fit_lines(o, rep, job, plan, states, synth)
        render_all(o, rep, job, states, timings, synth, paths)
        return assemble(o, rep, job, plan, states, paths, selection, synth, todo, timings)
    finally:
        if synthesizer is None:
            synth.close()
