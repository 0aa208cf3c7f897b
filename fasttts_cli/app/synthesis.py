"""The plan phase of the dub job: prepare voices, verify the plan cache, plan the misses (IndexTTS-2: run
the GPT; the draft voice: speak the line at its natural pace) batch by batch with the runaway guard and the
failure policy; each plan is cached (`plans/`) the moment it is final. The natural lengths then go to the
timing solver, and rendering.py renders each line to its target."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fasttts_cli.app.job import GUARD, DubOptions, JobInputs, LineState, OutputPaths, format_ranges, plan_job
from fasttts_cli.app.progress import Reporter
from fasttts_cli.app.takes import choose_takes, keep_takes
from fasttts_cli.dubbing.cache import LineCache, check_hits, line_key, line_seed, normalize_text, retry_seed
from fasttts_cli.errors import FastTTSError, SynthesisError
from fasttts_cli.synth.synthesizer import EmotionSpec, LinePlan, Synthesizer, SynthRequest, Voice, plan_rows


def _voice_warnings(path: Path, rep: Reporter) -> None:
    """Odd but usable references (very long, clipped): the engine accepted them, the user should know."""
    from fasttts_cli.audio.load import inspect_reference_voice

    try:
        for w in inspect_reference_voice(path).warnings:
            rep.warn(w)
    except FastTTSError:
        pass  # the engine's own check is authoritative; it accepted this file


def synthesis_batches(batches: list[list[int]], clones_voice: bool, size: int) -> list[list[int]]:
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


def key_params(synth: Synthesizer, o: DubOptions) -> tuple[str | None, dict[str, Any]]:
    """The language the lines are spoken in, and the per-line synthesis parameters that go into every
    line's cache key (exit 2 before any voice is prepared if the model cannot speak --lang)."""
    from fasttts_cli.synth.languages import spoken_language

    lang = spoken_language(synth, o.lang)
    params: dict[str, Any] = {"options": {}}  # per-line synthesis options (none yet): part of the key
    if lang is not None:
        params["lang"] = lang
    return lang, params


VoiceKey = tuple[Path, EmotionSpec | None]


def prepare_voices(
    o: DubOptions, rep: Reporter, job: JobInputs, plan: Any, synth: Synthesizer
) -> dict[VoiceKey, Voice]:
    """One prepared voice per (reference, emotion): a line with its own emotion reference
    (--emotion-from-line, `job.emotions`) has a voice of its own, whose key then carries that reference.
    The engine caches the conditioning on disk."""
    voices: dict[VoiceKey, Voice] = {}
    checked: set[Path] = set()
    for ln in plan.lines:
        spec = job.emotions.get(ln.index, o.emotion)
        if (ln.voice, spec) not in voices:
            name = ln.speaker or ln.voice.stem
            voices[ln.voice, spec] = synth.prepare_voice(ln.voice, name=name, emotion=spec)
            if ln.voice not in checked:
                checked.add(ln.voice)
                _voice_warnings(ln.voice, rep)
    return voices


def line_states(
    o: DubOptions,
    job: JobInputs,
    plan: Any,
    synth: Synthesizer,
    voices: dict[VoiceKey, Voice],
    lang: str | None,
    params: Any,
) -> dict[int, LineState]:
    """Every planned line's voice, seed and plan-cache key: the one rule for a line's key, used by a
    single dub and by `fasttts batch`'s pre-pass alike (so the pre-pass fills exactly the entries the
    job then finds)."""
    identity = synth.identity()
    states: dict[int, LineState] = {}
    for ln in plan.lines:
        v = voices[ln.voice, job.emotions.get(ln.index, o.emotion)]
        seed = line_seed(ln.text, v.key, o.seed)
        states[ln.index] = LineState(ln, v, seed, line_key(ln.text, v.key, identity, params, seed), lang)
    return states


def synthesize_all(
    o: DubOptions,
    rep: Reporter,
    job: JobInputs,
    plan: Any,
    counter: Callable[[str], int],
    paths: OutputPaths,
    synth: Synthesizer,
    planned: frozenset[str] = frozenset(),
) -> tuple[dict[int, LineState], list[int]]:
    """Prepare voices, find plan-cache misses, plan them batch by batch; every line ends with a plan
    (from the cache or fresh) or an error allowed by the failure policy. `planned`: keys this run has
    already planned and cached (`fasttts batch`'s pre-pass): found in the cache, they are reported as
    synthesized, not cached, as a single dub would report them."""
    cache = LineCache(paths.work_dir / "plans")
    identity = synth.identity()
    lang, params = key_params(synth, o)
    with rep.stage("voices"):
        voices = prepare_voices(o, rep, job, plan, synth)
    states = line_states(o, job, plan, synth, voices, lang, params)
    takes = choose_takes(rep, job, states, cache, paths.work_dir, identity, params, planned)
    forced = job.only or set()
    # Every hit is verified in full before the to-do list is made (meta, .npy header and size, checksum:
    # about 1 s for a 2-hour film's 1500 lines), so a damaged entry is re-synthesized now and placement
    # never meets one.
    with rep.stage("cache"):
        hits, damaged = check_hits(cache, {i: st.key for i, st in states.items() if i not in forced})
    for i, why in damaged.items():
        st = states[i]
        rep.warn(
            f"{st.line.source}: line {i}: its cached plan ({st.key[:12]} in {cache.root}) is damaged: "
            f"{why}; removed, it will be re-synthesized"
        )
    todo = [i for i in states if i not in hits]
    fresh = {i for i in hits if states[i].key in planned}  # planned by this run before the job started
    if job.only:
        extra = [i for i in todo if i not in forced]
        if extra:
            rep.info(f"--only: lines {format_ranges(extra)} are not cached yet and are synthesized too")
    pre = f", {len(fresh)} planned ahead by the batch" if fresh else ""
    rep.info(
        f"{len(states)} lines: {len(states) - len(todo) - len(fresh)} cached{pre}, {len(todo)} to "
        f"synthesize ({synth.name} engine; work dir {paths.work_dir})"
    )
    rep.event("cache", to_synthesize=len(todo), cached=len(states) - len(todo))
    for i, meta in hits.items():  # the verified metas: nothing is re-read
        st = states[i]
        st.natural_samples, st.sample_rate = int(meta["natural_samples"]), int(meta["sample_rate"])
        st.retries, st.n_tokens = int(meta.get("retries", 0)), meta.get("n_tokens")
        st.plan_seed = int(meta.get("plan_seed", st.seed))
        st.cached = i not in fresh
        if st.cached:  # final already: its line_done now (a line planned ahead had its own)
            dur = st.natural_samples / st.sample_rate if st.sample_rate else None
            rep.line_done(i, cached=True, duration=dur, rtf=None, retries=st.retries)

    # Re-batch just the lines to synthesize, with the plan's own rule.
    batches = [list(b.line_indices) for b in plan_job(job.cues, job.voices, counter, o, set(todo)).batches]
    batches = synthesis_batches(batches, synth.clones_voice, o.batch_size)
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
    finally:
        keep_takes(rep, takes, states, cache, paths.work_dir)

    synthesized = fresh | set(todo)
    return states, [i for i in states if i in synthesized]


def plan_meta(st: LineState, identity: str, plan: LinePlan, retries: int, seed: int) -> dict[str, Any]:
    """What a plan entry records besides its payload (the verification fields are the cache's own)."""
    return {
        "line": st.line.index,
        "text": normalize_text(st.line.text),
        "voice": st.voice.key if st.voice else None,
        "identity": identity,
        "seed": st.seed,
        "take": st.take,
        "plan_seed": seed,
        "retries": retries,
        "natural_samples": int(plan.natural_samples),
        "info": plan.info,
        "n_tokens": plan.n_tokens,
        "hit_token_limit": plan.hit_token_limit,
    }


def _synthesize(
    o: DubOptions,
    rep: Reporter,
    synth: Synthesizer,
    cache: LineCache,
    states: dict[int, LineState],
    batches: list[list[int]],
    identity: str,
) -> None:
    rep.begin_synthesis(sum(len(b) for b in batches), len(batches))
    try:
        for bno, ids in enumerate(batches, 1):
            rep.batch_start(bno, len(ids))
            t0 = time.monotonic()
            audio_s = 0.0

            def final(i: int, res: LinePlan | None, retries: int, problem: str | None, secs: float) -> None:
                # Cached and reported the moment the line is final, while its batch-mates are still being
                # planned: a bar that moves, and an interrupt that keeps every finished line.
                nonlocal audio_s
                st = states[i]
                st.retries = retries
                if problem is None and res is not None and res.payload is not None:
                    seed = seed_of(st.seed, retries)
                    cache.put(
                        st.key, res.payload, res.sample_rate, plan_meta(st, identity, res, retries, seed)
                    )
                    st.natural_samples, st.sample_rate, st.n_tokens = (
                        res.natural_samples,
                        res.sample_rate,
                        res.n_tokens,
                    )
                    st.plan_seed = seed
                    audio_s += res.natural
                else:
                    st.error = problem or "no audio"
                dur = None if st.natural_samples is None else st.natural_samples / st.sample_rate
                rtf = (secs / dur) if dur else None
                rep.line_done(i, cached=False, duration=dur, rtf=rtf, retries=st.retries, error=st.error)

            synth_with_guard(o.max_retries, synth, states, ids, on_final=final)
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


# (line, plan, retries, problem, synthesis seconds over its attempts): a line's outcome once it is final
FinalLine = Callable[[int, LinePlan | None, int, str | None, float], None]


def seed_of(seed: int, attempt: int) -> int:
    """The seed of a line's attempt n (0: its own)."""
    return seed if attempt == 0 else retry_seed(seed, attempt)


def synth_with_guard(
    max_retries: int,
    synth: Synthesizer,
    states: dict[int, LineState],
    ids: list[int],
    on_final: FinalLine | None = None,
) -> dict[int, tuple[LinePlan | None, int, str | None]]:
    """Plan `ids`; lines that fail or look like runaways (by their natural length) are retried with new
    seeds, up to --max-retries times, batched together. Returns (plan, retries, problem) per line, and
    hands each line to `on_final` as soon as its outcome is final (as the engine reports rows: see
    `synthesizer.plan_rows`). A random-weight engine speaks noise of no particular length: only its
    failures count, not the runaway guard."""
    guard = None if getattr(synth, "random_weights", False) else GUARD
    out: dict[int, tuple[LinePlan | None, int, str | None]] = {}
    spent: dict[int, float] = dict.fromkeys(ids, 0.0)

    def attempt(pending: list[int], n: int) -> list[int]:
        """One engine call for `pending` (attempt n); returns the lines to try again."""
        reqs = []
        for i in pending:
            st = states[i]
            seed = seed_of(st.seed, n)
            assert st.voice is not None
            reqs.append(SynthRequest(str(i), st.line.text, st.voice, seed, lang=st.lang))
        again: list[int] = []

        def row(k: int, res: LinePlan, seconds: float) -> None:
            i = pending[k]
            spent[i] += seconds
            if not res.ok:
                problem: str | None = res.error or "no audio"
            else:
                problem = (
                    None
                    if guard is None
                    else guard.check(states[i].line.text, res.natural, res.hit_token_limit)
                )
            out[i] = (res, n, problem)
            if problem is not None and n < max_retries:
                again.append(i)
            elif on_final is not None:
                on_final(i, res, n, problem, spent[i])

        results = plan_rows(synth, reqs, row)
        if len(results) != len(reqs):
            raise FastTTSError(f"{synth.name} engine returned {len(results)} results for {len(reqs)} lines")
        return sorted(again, key=pending.index)

    pending, n = list(ids), 0
    while pending:
        pending = attempt(pending, n)
        n += 1
    return out
