"""The assembly stages of the dub job: timing, tempo and timeline, mix, loudness, subtitles, write/mux and
the report, with memory bounded by the block size whatever the programme's length."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli import __version__
from fasttts_cli.app.cast_voices import add_cast_report
from fasttts_cli.app.engine_load import engine_info
from fasttts_cli.app.job import (
    SR,
    VIDEO_EXTS,
    DubOptions,
    DubResult,
    JobInputs,
    LineState,
    OutputPaths,
)
from fasttts_cli.app.progress import PassProgress, Reporter, counted
from fasttts_cli.audio.blockio import BLOCK
from fasttts_cli.dubbing.cache import LineCache, atomic_write_json, atomic_write_text
from fasttts_cli.errors import FastTTSError
from fasttts_cli.synth.engine_select import EngineSelection
from fasttts_cli.synth.synthesizer import Synthesizer

# Frames per block in the assembly (timeline, mix, loudness passes): bounds memory on long inputs; a
# programme shorter than this is one block. Tests lower it to exercise block edges.
ASSEMBLY_BLOCK = BLOCK


def assemble(
    o: DubOptions,
    rep: Reporter,
    job: JobInputs,
    plan: Any,
    states: dict[int, LineState],
    paths: OutputPaths,
    selection: EngineSelection,
    synth: Synthesizer,
    todo: list[int],
    timings: dict[int, Any],
) -> DubResult:
    """Timeline, mix, loudness and output with memory bounded by the block size, whatever the length.

    `timings`: each line's `timing.LineTiming` (rendering.fit_lines). Each line's rendered audio is read
    from the cache when it is placed; the timeline and the mix live in
    disk-backed arrays in the work dir (temporary names, removed at the end); the original or background
    is decoded block by block; loudness is measured, normalized and written to dub.wav in passes of
    `ASSEMBLY_BLOCK` frames. A short programme is one block, so it takes the same path."""
    from fasttts_cli.audio.blockio import AudioFileWriter, DiskArray, export_audio
    from fasttts_cli.audio.loudness import normalize_stream
    from fasttts_cli.dubbing.timing import retime_cues

    block = ASSEMBLY_BLOCK
    cache = LineCache(paths.work_dir / "lines")
    # Lines that failed to render have no place on the timeline (the failure policy said what to do).
    timings = {i: t for i, t in timings.items() if states[i].error is None}
    media_end = job.media.duration if job.media is not None and job.media.duration > 0 else None

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
        from fasttts_cli.dubbing.subtitles_out import SubtitleEntry, format_subtitles

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
            from fasttts_cli.media.mux import mux

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
            from fasttts_cli.media.mux import default_title, normalize_lang

            title = o.title or default_title(normalize_lang(o.lang))
            export_audio(dub_wav, paths.media, block=block, lang=o.lang, title=title)
        rep.stage_progress("write", round(duration, 3), round(duration, 3), unit="seconds")

    report = _report(o, plan, states, timings, todo, selection, synth, norm, rep, skipped=job.skipped)
    add_cast_report(report, job, plan.lines)
    if job.separation is not None:
        report["separation"] = job.separation
    from fasttts_cli.app.review import write_review
    from fasttts_cli.app.review.page import page_for, run_record

    report.update(run_record(o.command, paths.media, paths.subtitles))
    report_path = atomic_write_json(paths.work_dir / "report.json", report)
    with rep.stage("review"):
        page = write_review(paths.work_dir, report, page_for(paths.media), rep.warn)
    outputs = {
        ("video" if paths.media.suffix.lower() in VIDEO_EXTS else "audio"): str(paths.media),
        "subtitles": str(paths.subtitles),
        "report": str(report_path),
        "plan": str(paths.work_dir / "plan.json"),
        "dub_audio": str(dub_wav),
        "review": str(page.path),
    }
    if report["cast"] is not None:
        outputs["cast"] = report["cast"]["file"]
    rep.event("done", ok=True, outputs=outputs, lines=report["summary"])
    return DubResult(
        ok=True,
        outputs=outputs,
        warnings=rep.warnings,
        timings=rep.timings,
        report_path=report_path,
        work_dir=paths.work_dir,
        engine=engine_info(selection, synth, o.preset),
        lines=report["summary"],
        cast=report["cast"],
        separation=job.separation,
    )


def _placed_lines(
    o: DubOptions, cache: LineCache, states: dict[int, LineState], timings: dict[int, Any]
) -> Iterator[tuple[float, np.ndarray]]:
    """Each timed line's audio, read from the cache, resampled once, tempo-changed, leveled and cut as its
    timing says, one line at a time (a generator: only the line being placed is in memory)."""
    from fasttts_cli.audio.load import resample
    from fasttts_cli.audio.loudness import level_line
    from fasttts_cli.audio.tempo import change_tempo, trim_to

    for i, t in timings.items():
        st = states[i]
        hit = cache.get(st.render_key)
        if hit is None:
            # Verified (or written) earlier in this run, under the work dir's lock: only something outside
            # fasttts can have removed or changed it since. The next run re-synthesizes it.
            check = cache.verify(st.render_key)
            if check.status == "damaged":
                cache.discard(st.render_key)
            why = "it is gone" if check.status == "missing" else check.reason
            raise FastTTSError(
                f"line {i}: its cached audio ({st.render_key[:12]}) was removed or changed in "
                f"{cache.root.parent} during this run ({why}); is another program writing to that folder?",
                hint="run the same command again: the line is re-synthesized",
            )
        x = resample(hit.audio, hit.sample_rate, SR) if hit.sample_rate != SR else hit.audio
        y = np.asarray(x, dtype=np.float32)
        if abs(t.stretch_factor - 1.0) > 1e-6:
            y = change_tempo(y, SR, t.stretch_factor)
        elif t.frames is not None:
            # Rendered to its target: exact at the engine's rate, so only the resampler's rounding is cut
            # or padded (at most a sample or two), and the line lands on its target to the sample.
            y = _exact(y, round(t.target * SR))
        # Levelled after the tempo change: the stretchers lower a line's loudness by 1-2.5 LU at x1.03-1.25,
        # so a line levelled first would come out quieter than its neighbours at x1.0.
        y = level_line(y, SR, target_lufs=o.loudness)
        if t.truncated:
            y = trim_to(y, SR, t.end - t.start)
        yield t.start, y


def _exact(y: np.ndarray, n: int) -> np.ndarray:
    return y[:n] if len(y) >= n else np.pad(y, (0, n - len(y)))


def _render_timeline(target: Any, placed: Iterable[tuple[float, np.ndarray]], duration: float) -> int:
    from fasttts_cli.audio.mix import place_clips

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
    from fasttts_cli.audio.blockio import DiskArray
    from fasttts_cli.audio.load import AudioReader
    from fasttts_cli.audio.mix import LAYOUTS, check_mix, mix_blocks

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
    from fasttts_cli.audio.blockio import block_ranges

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
    states: dict[int, LineState],
    timings: dict[int, Any],
    todo: list[int],
    selection: EngineSelection,
    synth: Synthesizer,
    norm: Any,
    rep: Reporter,
    *,
    skipped: Sequence[Any] = (),
) -> dict[str, Any]:
    from fasttts_cli.dubbing.timing import summarize

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
                "target",
                "render_factor",
                "stretch_factor",
                "frames",
                "duration",
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
            entry.update(target=None, render_factor=None, stretch_factor=None, frames=None, duration=None)
            entry.update(truncated=False, note="")
            entry["action"] = "silence" if o.on_line_failure == "silence" else "skipped"
        entry.update(
            residual=round(st.residual, 4),
            rendered=st.rendered,
            render_key=st.render_key or None,
            cached=st.cached,
            retries=st.retries,
            seed=st.seed,
            take=st.take,
            takes=list(st.takes),
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
        "rendered": sum(1 for st in states.values() if st.rendered),
        "failed": sum(1 for st in states.values() if st.error is not None),
        "retries": sum(st.retries for i, st in states.items() if i in todo),
        "retaken": sorted(i for i, st in states.items() if st.retaken),
        "chosen_takes": {str(i): st.take for i, st in sorted(states.items()) if st.take != 1},
        "no_speech": list(plan.skipped),
        "skipped": [s.to_json() for s in skipped],
        "sped_up": sum(1 for t in timings.values() if t.factor > 1.0 + 1e-9),
        "max_factor": tsum["max_factor"],
        "shifted": tsum["actions"].get("shifted", 0),
        "max_shift": tsum["max_shift"],
        "overflowing": tsum["overflowing"],
        "truncated": tsum["truncated"],
        "actions": {k: v for k, v in tsum["actions"].items() if v},
        "fit": o.fit,
        "rendered_to_fit": tsum["rendered_to_fit"],
        "stretched": tsum["stretched"],
        "max_stretch": tsum["max_stretch"],
        "max_residual": round(
            max((st.residual for st in states.values()), key=lambda r: abs(r - 1.0), default=1.0), 4
        ),
        "loudness_lufs": round(float(norm.output_lufs), 2),
        "true_peak_dbtp": round(float(norm.output_true_peak), 2),
        "synthesis_rtf": None if rep.synthesis_rtf is None else round(rep.synthesis_rtf, 4),
    }
    return {
        "version": 1,
        "fasttts": __version__,
        "script": str(o.script),
        "video": str(o.video) if o.video else None,
        "engine": engine_info(selection, synth, o.preset),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(o).items()},
        "summary": summary,
        "timing": tsum,
        "warnings": list(rep.warnings),
        "lines": lines,
    }
