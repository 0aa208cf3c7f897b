"""Timing before rendering, then the render phase of the dub job.

The timing solver runs on the natural lengths the plan phase measured and gives every line a target
(`dubbing.timing`: borrowed silence, then the model's render factor within --max-render-speedup/slowdown,
then DSP tempo within --max-speedup); each line is then rendered to its target (`lines/`, keyed by the
line's key and its target frames), so a re-timed line is rendered again from its cached plan and never
re-planned. Render batches group lines of similar target length (less padding in each engine call)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fasttts_cli.app.job import UNTIMED_PAUSE, DubOptions, JobInputs, LineState, OutputPaths, timing_options
from fasttts_cli.app.progress import Reporter
from fasttts_cli.app.synthesis import DubInterrupted
from fasttts_cli.dubbing.cache import LineCache, check_hits, normalize_text, render_key
from fasttts_cli.errors import SynthesisError
from fasttts_cli.synth.synthesizer import (
    LinePlan,
    RenderRequest,
    Synthesizer,
    SynthRequest,
    SynthResult,
    render_rows,
    renders_to_length,
)


def fit_lines(
    o: DubOptions, rep: Reporter, job: JobInputs, plan: Any, states: dict[int, LineState], synth: Synthesizer
) -> dict[int, Any]:
    """Every planned line's timing (`timing.LineTiming`), from natural lengths; sets each line's target."""
    from dataclasses import replace

    from fasttts_cli.dubbing.timing import SlotInput, layout_sequential, solve_timing

    topts = timing_options(o)
    if topts.model and not renders_to_length(synth):
        rep.warn(
            f"the {synth.name} engine cannot render a line to a length: lines are fitted by tempo change "
            "(--fit stretch)"
            + (
                "; rebuild the engine with `fasttts build` for --fit model"
                if synth.name == "indextts2"
                else ""
            )
        )
        topts = replace(topts, fit="stretch")
    order = [ln.index for ln in plan.lines if states[ln.index].natural_samples is not None]
    natural = {i: states[i].natural_samples / states[i].sample_rate for i in order}  # type: ignore[operator]
    if job.untimed:
        slots = layout_sequential([(i, natural[i]) for i in order], pause=UNTIMED_PAUSE)
    else:
        slots = [SlotInput(i, states[i].line.start, states[i].line.end, natural[i]) for i in order]
    media_end = job.media.duration if job.media is not None and job.media.duration > 0 else None
    hop = int(getattr(synth, "hop", 0) or 0)
    rates = {states[i].sample_rate for i in order}
    # One frame grid for the whole job (one engine): its render frames per second.
    frame_rate = rates.pop() / hop if hop > 0 and len(rates) == 1 else None
    timings = {t.index: t for t in solve_timing(slots, topts, media_end=media_end, frame_rate=frame_rate)}
    for i, t in timings.items():
        states[i].frames = t.frames
        states[i].render_key = render_key(states[i].key, t.frames)
    return timings


def render_all(
    o: DubOptions,
    rep: Reporter,
    job: JobInputs,
    states: dict[int, LineState],
    timings: dict[int, Any],
    synth: Synthesizer,
    paths: OutputPaths,
) -> list[int]:
    """Render every timed line to its target (cache hits are verified, not rendered); returns the lines
    rendered now. A line that fails to render follows --on-line-failure like a line that fails to plan."""
    plans = LineCache(paths.work_dir / "plans")
    cache = LineCache(paths.work_dir / "lines")
    forced = job.only or set()
    with rep.stage("cache"):
        hits, damaged = check_hits(
            cache, {i: states[i].render_key for i in timings if i not in forced and states[i].cached}
        )
    for i, why in damaged.items():
        st = states[i]
        rep.warn(
            f"{st.line.source}: line {i}: its cached audio ({st.render_key[:12]} in {cache.root}) is "
            f"damaged: {why}; removed, it will be rendered again"
        )
    for i, meta in hits.items():
        st = states[i]
        st.n_samples, st.residual = int(meta["n_samples"]), float(meta.get("residual", 1.0))
    todo = [i for i in timings if i not in hits]
    # Similar target lengths together; the order of lines does not change any line's audio.
    todo.sort(key=lambda i: timings[i].natural if timings[i].target is None else timings[i].target)
    rep.event("render", to_render=len(todo), cached=len(hits))
    run = _Renderer(o, rep, synth, states, plans, cache, len(todo))
    try:
        with rep.stage("render"):
            rep.stage_progress("render", 0, len(todo), unit="lines")
            size = max(1, o.batch_size)
            for lo in range(0, len(todo), size):
                run.batch(todo[lo : lo + size])
    except KeyboardInterrupt:
        rep.event("error", ok=False, error="interrupted", exit_code=130)
        raise DubInterrupted(
            f"interrupted while rendering: every line is planned and {run.done} of the {len(todo)} lines "
            f"to render are finished, all cached in {paths.work_dir}; run the same command again to resume"
        ) from None
    return todo


def render_one(synth: Synthesizer, request: SynthRequest, plan: LinePlan, frames: int | None) -> SynthResult:
    """One line rendered to `frames` (None: its natural length), for `fasttts synth`."""
    (out,) = render_rows(synth, [RenderRequest(request, plan, frames)], lambda k, r, s: None)
    return out


@dataclass
class _Renderer:
    """The render stage's state across batches: where plans come from, where renders go, the count."""

    o: DubOptions
    rep: Reporter
    synth: Synthesizer
    states: dict[int, LineState]
    plans: LineCache
    cache: LineCache
    total: int
    done: int = 0

    def batch(self, ids: list[int]) -> None:
        items = [_render_request(self.states[i], self.plans) for i in ids]
        t0 = time.monotonic()

        def row(k: int, res: SynthResult, seconds: float) -> None:
            # Cached the moment it is ready: an interrupt keeps every rendered line.
            _store(self.o, self.rep, self.cache, self.states[ids[k]], res)
            self.done += 1
            self.rep.stage_progress("render", self.done, self.total, unit="lines")

        results = render_rows(self.synth, items, row)
        if len(results) != len(items):
            raise SynthesisError(f"{self.synth.name} engine rendered {len(results)} lines of {len(items)}")
        self.rep.debug(f"rendered {len(ids)} lines in {time.monotonic() - t0:.2f} s")


def _render_request(st: LineState, plans: LineCache) -> RenderRequest:
    hit = plans.get(st.key)
    if hit is None:
        # Verified or written earlier in this run under the work dir's lock: only something outside
        # fasttts can have removed it since.
        raise SynthesisError(
            f"line {st.line.index}: its cached plan ({st.key[:12]}) was removed or changed in "
            f"{plans.root.parent} during this run; is another program writing to that folder?",
            hint="run the same command again: the line is planned again",
        )
    assert st.voice is not None
    m = hit.meta
    plan = LinePlan(
        str(st.line.index),
        hit.sample_rate,
        int(m["natural_samples"]),
        hit.audio,
        dict(m.get("info") or {}),
        n_tokens=m.get("n_tokens"),
        hit_token_limit=bool(m.get("hit_token_limit", False)),
    )
    req = SynthRequest(str(st.line.index), st.line.text, st.voice, st.plan_seed, lang=st.lang)
    return RenderRequest(req, plan, st.frames)


def _store(o: DubOptions, rep: Reporter, cache: LineCache, st: LineState, res: SynthResult) -> None:
    """Cache a rendered line the moment it is ready, or apply the failure policy to it."""
    i = st.line.index
    if res.ok:
        assert res.audio is not None
        meta = {
            "line": i,
            "text": normalize_text(st.line.text),
            "plan_key": st.key,
            "frames": st.frames,
            "residual": float(res.residual),
            "n_tokens": st.n_tokens,
        }
        hit = cache.put(st.render_key, res.audio, res.sample_rate, meta)
        st.n_samples, st.sample_rate, st.residual = len(hit.audio), hit.sample_rate, float(res.residual)
        st.rendered = True
        return
    st.error = res.error or "no audio"
    msg = f"{st.line.source}: line {i} failed to render: {st.error}"
    if o.on_line_failure == "fail":
        raise SynthesisError(msg, hint="--on-line-failure silence|skip finishes the job without it")
    rep.warn(f"{msg} ({'left silent' if o.on_line_failure == 'silence' else 'skipped'})")
