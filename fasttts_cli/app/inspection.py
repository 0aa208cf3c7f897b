"""`fasttts inspect`: cues, speakers, batches and a timing forecast, without loading any model."""

from __future__ import annotations

from typing import Any

# ---- inspect and synth ---------------------------------------------------------------------------
from fasttts_cli.app.engine_load import token_counter
from fasttts_cli.app.job import UNTIMED_PAUSE, DubOptions, plan_job, timing_options, validate_options
from fasttts_cli.app.pipeline import read_inputs
from fasttts_cli.synth.engine_select import select_engine


def inspect_job(o: DubOptions) -> dict[str, Any]:
    """Cues, speakers, batches and a timing forecast, without loading any model.

    The forecast runs the real timing solver on durations guessed at `FORECAST_CPS` spoken characters
    per second (typical narration), so it shows where speed-ups and shifts are likely, and how each
    would be split between the model's render and DSP tempo (--fit); real durations come only from
    synthesis."""
    from fasttts_cli.dubbing.speakers import with_placeholder_voices
    from fasttts_cli.dubbing.timing import SlotInput, layout_sequential, solve_timing, summarize

    validate_options(o)
    job = read_inputs(o, require_voices=False)
    selection = select_engine(o.engine)
    counter, token_source = token_counter(selection, o.preset)
    voices, stand_ins = with_placeholder_voices(job.cues, job.voices)
    plan = plan_job(job.cues, voices, counter, o, job.only)
    est = {ln.index: forecast_duration(ln.text) for ln in plan.lines}
    if job.untimed:
        slots = layout_sequential([(ln.index, est[ln.index]) for ln in plan.lines], pause=UNTIMED_PAUSE)
    else:
        slots = [SlotInput(ln.index, ln.start, ln.end, est[ln.index]) for ln in plan.lines]
    # A forecast never fails: it shows what shifting would do instead.
    topts = timing_options(o, "shift" if o.overflow == "fail" else None)
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


def forecast_duration(text: str) -> float:
    return max(0.3, sum(1 for ch in text if ch.isalnum()) / FORECAST_CPS + 0.2)
