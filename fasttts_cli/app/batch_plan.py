"""`fasttts batch`'s pre-pass: read and plan every job of one engine, collect the plan-cache misses of all of
them, batch them across jobs (same voice, similar length), plan the batches through a Pool, and write
each outcome into its job's `plans/` cache with the entry a single `dub` writes. The jobs then run as
single dubs that find their lines planned and only render and assemble.

Keys, seeds and entries come from synthesis.py's own functions (`key_params`, `prepare_voices`,
`line_states`, `plan_meta`), so an entry is the one `dub` would have written; a line's plan depends on its
task only (text, voice, seed, language), never on its batch-mates or its job."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fasttts_cli.app.fleet import LineOutcome, LineTask, Pool
from fasttts_cli.app.job import (
    DubOptions,
    LineState,
    check_writable,
    plan_job,
    resolve_outputs,
    validate_options,
)
from fasttts_cli.app.progress import QUIET, Reporter
from fasttts_cli.app.synthesis import key_params, line_states, plan_meta, prepare_voices, seed_of
from fasttts_cli.app.takes import choose_takes
from fasttts_cli.dubbing.cache import LineCache, check_hits
from fasttts_cli.dubbing.plan import pack
from fasttts_cli.errors import FastTTSError
from fasttts_cli.synth.synthesizer import Synthesizer


@dataclass
class JobPlan:
    """One job read and planned: its line states (keys), its plan cache and what it still misses."""

    index: int  # the job's place in the manifest
    options: DubOptions
    rep: Reporter  # the job's own reporter
    states: dict[int, LineState]
    cache: LineCache
    work_dir: Any
    misses: list[int]  # lines to plan (not cached, not forced by --only: the job re-plans those itself)
    planned: set[str] = field(default_factory=set)  # keys the pre-pass planned and cached


def plan_one(index: int, o: DubOptions, rep: Reporter, synth: Synthesizer) -> JobPlan | None:
    """Read and plan a job as `run_dub` would (raising the same errors); None when there is nothing to
    plan ahead (a dry run, a script with nothing to say: the job itself reports it; a cast cut from the
    video, or --emotion-from-line: the job plans its own lines)."""
    from fasttts_cli.app.pipeline import read_inputs

    validate_options(o)
    inputs = read_inputs(o)
    paths = resolve_outputs(o, inputs.script_format)
    check_writable(paths.media.parent, "-o/--output" if o.output else "--output-dir")
    check_writable(paths.work_dir, "--work-dir")
    if o.dry_run or o.emotion_from_line or (inputs.cast is not None and inputs.cast.pending):
        # References or emotion clips cut from the video are made in the job's own run (under its
        # work-folder lock): such a job plans its own lines there.
        return None
    plan = plan_job(inputs.cues, inputs.voices, synth.count_tokens, o, inputs.only)
    if not plan.lines:
        return None
    lang, params = key_params(synth, o)
    # The job's own run prepares (from the engine's voice cache) and warns about its voices again:
    # warnings here would be reported twice.
    voices = prepare_voices(o, Reporter(verbosity=QUIET), inputs, plan, synth)
    states = line_states(o, inputs, plan, synth, voices, lang, params)
    cache = LineCache(paths.work_dir / "plans")
    # Each line on the take the job will use (a new one for --retake); the job's own run remembers it.
    choose_takes(Reporter(verbosity=QUIET), inputs, states, cache, paths.work_dir, synth.identity(), params)
    forced = inputs.only or set()
    jp = JobPlan(index, o, rep, states, cache, paths.work_dir, [i for i in states if i not in forced])
    recheck_misses(jp)
    return jp


def recheck_misses(jp: JobPlan) -> list[int]:
    """The job's misses read again from its plan cache (under its lock): those planned since are hits."""
    hits, damaged = check_hits(jp.cache, {i: jp.states[i].key for i in jp.misses})
    for i, why in damaged.items():
        jp.rep.warn(
            f"{jp.states[i].line.source}: line {i}: its cached plan ({jp.states[i].key[:12]} in "
            f"{jp.cache.root}) is damaged: {why}; removed, it will be re-synthesized"
        )
    jp.misses = [i for i in jp.misses if i not in hits]
    return jp.misses


def task_of(jp: JobPlan, i: int) -> LineTask:
    """Line i of a job as a self-contained task. Its files go by absolute path: a worker process or a
    Ray actor may run in another folder (or on another machine with the same shared paths)."""
    st = jp.states[i]
    assert st.voice is not None
    emotion = st.voice.emotion  # what the voice was prepared with: the key's emotion
    if emotion.audio is not None:
        emotion = replace(emotion, audio=Path(emotion.audio).resolve())
    return LineTask(
        st.key,
        st.line.text,
        st.voice.path.resolve(),
        st.voice.name,
        emotion,
        st.seed,
        st.lang,
        f"{st.line.source}: line {i}",
    )


@dataclass(frozen=True)
class _Entry:
    task: LineTask
    n_tokens: int
    order: tuple[int, int]  # (job, line): a stable order for ties


def cross_job_batches(jobs: Sequence[JobPlan], clones_voice: bool) -> dict[int, list[list[LineTask]]]:
    """The misses of every job as batches, per --max-retries value: one task per distinct key (two jobs
    with the same line plan it once), grouped by voice (any voice for an engine that does not clone) and
    the jobs' batching flags, sorted by token length and cut by the plan's own rule (`plan.pack`)."""
    groups: dict[tuple[Any, ...], list[_Entry]] = {}
    seen: set[str] = set()
    for jp in jobs:
        o = jp.options
        for i in jp.misses:
            st = jp.states[i]
            if st.key in seen:
                continue
            seen.add(st.key)
            assert st.voice is not None
            voice = st.voice.key if clones_voice else ""
            g = (o.max_retries, voice, o.batch_size, o.max_batch_tokens)
            groups.setdefault(g, []).append(_Entry(task_of(jp, i), st.line.n_tokens, (jp.index, i)))
    out: dict[int, list[list[LineTask]]] = {}
    for (retries, _voice, size, budget), entries in groups.items():
        entries.sort(key=lambda e: (e.n_tokens, e.order))
        for chunk in pack(entries, lambda e: e.n_tokens, size, budget):
            out.setdefault(retries, []).append([e.task for e in chunk])
    return out


def run_prepass(
    jobs: Sequence[JobPlan],
    pool: Pool,
    synth: Synthesizer,
    rep: Reporter,
    on_line: Callable[[JobPlan, int, LineOutcome], None],
    on_fail: Callable[[JobPlan, FastTTSError], None],
) -> dict[str, int]:
    """Plan every job's misses through `pool`, each outcome cached in its jobs' caches the moment it is
    final (so an interrupt keeps every finished line). A job whose work folder is held by another run
    (with --no-wait) goes to `on_fail` and is left out. Returns counts for the summary."""
    from fasttts_cli.dubbing.worklock import hold_work_dir

    identity = synth.identity()
    if pool.identity() != identity:
        raise FastTTSError(
            f"the pool's engines ({pool.identity()[:16]}) are not the driver's ({identity[:16]})",
            hint="every worker must load the same engine folder and preset",
        )
    # Each job's work folder is ours while its lines are planned, as in a single dub.
    with contextlib.ExitStack() as locks:
        held: list[JobPlan] = []
        for jp in jobs:
            if not jp.misses:
                continue
            try:
                locks.enter_context(hold_work_dir(jp.work_dir, wait=not jp.options.no_wait, rep=jp.rep))
            except FastTTSError as e:
                on_fail(jp, e)
                continue
            # The misses were found before the lock was ours: a run that held it (another batch on the
            # same manifest, a dub) may have planned them since. Only what is still missing is planned,
            # as a single dub does after it takes the lock; its entries are never rewritten.
            still = recheck_misses(jp)
            if still:
                held.append(jp)
        by_key: dict[str, list[tuple[JobPlan, int]]] = {}
        for jp in held:
            for i in jp.misses:
                by_key.setdefault(jp.states[i].key, []).append((jp, i))
        batches = cross_job_batches(held, synth.clones_voice)
        n_batches = sum(len(b) for b in batches.values())
        rep.event(
            "batch_plan", jobs=len(held), to_synthesize=len(by_key), batches=n_batches, workers=pool.workers
        )

        def final(out: LineOutcome) -> None:
            for jp, i in by_key.get(out.key, ()):
                st = jp.states[i]
                if out.ok:
                    assert out.plan is not None and out.plan.payload is not None
                    seed = seed_of(st.seed, out.retries)
                    meta = plan_meta(st, identity, out.plan, out.retries, seed)
                    jp.cache.put(st.key, out.plan.payload, out.plan.sample_rate, meta)
                    jp.planned.add(st.key)
                on_line(jp, i, out)

        for retries, group in batches.items():
            pool.run(group, retries, final)
    return {"to_synthesize": len(by_key), "batches": n_batches}
