"""`indextts2`: the IndexTTS-2 engine behind the dubbing pipeline's Synthesizer protocol.

Per request: text -> segments (<= 120 tokens, the original's split), each segment -> codes -> latent ->
s2mel -> BigVGAN, segments joined with 200 ms of silence, float32 at 22.05 kHz. Segments of every request
in a call are batched together (up to the preset's `limits.max_batch` per GPT batch); each segment owns
its random generators, derived from the request's seed and the segment's index, for the sampler and the
CFM start noise, so a line's audio never depends on its batch-mates (batch == single, which the pipeline's
per-line cache relies on). A failure is caught per line: a failing batch is re-run line by line.

Two phases (synth.synthesizer's contract): `plan` runs the GPT and keeps each line's codes (its natural
length follows from them: floor(1.72 n) frames per segment); `render` runs the latent pass, s2mel and
the vocoder from those codes, at the natural length or at exactly `frames * hop` samples, which the
length regulator reaches by speaking the same content slower or faster (line_plan splits the target over
the segments). `synthesize` is plan + render at the natural length. An engine folder built before s2mel
took its target frames renders the natural length only (`renders_to_length` False).

Run-time settings come from the preset (`decode`, `s2mel` tables); `SynthRequest.options` may override
them per line with the same names (`beams`, `top_k`, `top_p`, `temperature`, `repetition_penalty`,
`length_penalty`, `max_tokens`, `do_sample`, `steps`, `cfg_rate`, `schedule`).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Self

import numpy as np

from fasttts_cli import __version__
from fasttts_cli.errors import EngineMismatchError, InputError, UsageError
from fasttts_cli.indextts2.clip_emotion import with_clip_emotion
from fasttts_cli.indextts2.engine import (
    MODEL_ID,
    IndexTTS2Engine,
    VoiceConditioning,
    load_text_front_end,
    noise_generator,
    segment_seed_generator,
)
from fasttts_cli.indextts2.line_options import line_options
from fasttts_cli.indextts2.line_plan import SegmentCodes, SegmentSplit, natural_split, split_target
from fasttts_cli.indextts2.sampling import SamplingParams
from fasttts_cli.indextts2.stream_lines import LineStreaming
from fasttts_cli.indextts2.voice_cache import VoiceCache, voice_key
from fasttts_cli.spec.engine_folder import file_sha256, read_manifest
from fasttts_cli.spec.presets import Preset, S2MelOptions
from fasttts_cli.synth import synthesizer as contract  # the Synthesizer contract's types

# Bump whenever this runtime's output for the same engine and preset could change (part of identity()).
ENGINE_CODE_REV = 1
SEGMENT_GAP_S = 0.2  # the original's interval_silence (200 ms)
N_EMOTIONS = 8
RANDOM_MAX_TOKENS = 500  # codes per segment for random-weight engines (above the tiny checkpoint's 401)


@dataclass
class _Segment:
    """One segment of one request: the unit that is batched."""

    req: int
    index: int
    prefix: np.ndarray
    voice: VoiceConditioning
    params: SamplingParams
    s2mel: S2MelOptions
    seed: int
    codes: np.ndarray | None = None
    stopped: bool = True
    frames: int = 0  # render: the segment's target mel frames (its natural ones at the natural length)
    fixed: bool = False  # render: `frames` is a target the engine must be told (not the natural length)
    wav: np.ndarray | None = None
    error: str | None = None


class IndexTTS2Synthesizer(LineStreaming):
    """Synthesizer for an IndexTTS-2 engine folder (see the module docstring; `stream`: stream_lines)."""

    name = "indextts2"
    engine_class: type[IndexTTS2Engine] = IndexTTS2Engine  # what `load` opens the folder with
    code_tag = "indextts2"  # names this runtime's code in identity() (a subclass's model has its own)
    clones_voice = True
    languages = ("zh", "en")  # IndexTTS-2 speaks Chinese and English and tells them apart by itself
    needs_language = False
    reports_rows = True  # synthesize(..., on_result=) reports each line as its audio is ready

    def __init__(self, engine: IndexTTS2Engine, cache: VoiceCache | None = None) -> None:
        self.engine = engine
        if self.random_weights:
            # Random weights rarely pick the stop code: every segment would run to max_tokens (a full-size
            # random engine took 11 minutes on "Hi there." at 1500). Capped, it is a test engine again; the
            # cap is a run key, so identity() and the line cache see it.
            d = engine.preset.decode
            if d.max_tokens > RANDOM_MAX_TOKENS:
                engine.preset = replace(engine.preset, decode=replace(d, max_tokens=RANDOM_MAX_TOKENS))
        self.cache = cache if cache is not None else VoiceCache()
        self.sample_rate = engine.sample_rate
        self.hop = int(engine.hop)  # samples per mel frame: render(frames=F) makes F * hop samples
        self.last_voice_cached: bool | None = None  # whether the last prepare_voice was a cache hit

    @classmethod
    def load(
        cls,
        path: Path | str,
        preset: Preset | str | Path | None = None,
        *,
        threads: int | None = None,
        cache_dir: Path | str | None = None,
    ) -> Self:
        """Reads the manifest and checks the preset; no model session opens until it is needed."""
        engine = cls.engine_class.load(path, preset, threads)
        return cls(engine, VoiceCache(cache_dir) if cache_dir is not None else None)

    @classmethod
    def tokenizer_counter(cls, path: Path | str) -> Callable[[str], int]:
        """count_tokens from the engine's tokenizer alone (for --dry-run and inspect)."""
        folder = Path(path)
        manifest = read_manifest(folder, expect_model=MODEL_ID)
        return load_text_front_end(folder, manifest).count_tokens

    @property
    def preset_name(self) -> str:
        """The preset the engine runs (the flag's, else the engine's own), as `--json` reports it."""
        return str(self.engine.preset.name)

    @property
    def random_weights(self) -> bool:
        """Built from a random-weight checkpoint (manifest `random_weights`): speaks noise, clones nothing."""
        manifest = getattr(self.engine, "manifest", None)
        if manifest is not None:
            return bool(manifest.random_weights)
        # the PyTorch backend runs from the checkpoint itself, whose config.yaml says it
        return bool(getattr(getattr(self.engine, "modules", None), "random_weights", False))

    # ------------------------------------------------------------------------------- protocol

    def identity(self) -> str:
        p = self.engine.preset
        run = json.dumps(p.run_keys(), sort_keys=True)
        limits = json.dumps(asdict(p.limits), sort_keys=True)
        return (
            f"{self.engine.identity()}|run={run}|limits={limits}"
            f"|code=fasttts-{__version__}.{self.code_tag}-{ENGINE_CODE_REV}"
        )

    def count_tokens(self, text: str) -> int:
        return self.engine.text.count_tokens(text)

    def prepare_voice(
        self, path: Path, *, name: str | None = None, emotion: contract.EmotionSpec | None = None
    ) -> contract.Voice:
        from fasttts_cli.audio.load import check_reference_voice

        path = Path(path)
        spec = emotion or contract.EmotionSpec()
        check_reference_voice(path)
        emo_sha = None
        if spec.audio is not None:
            check_reference_voice(Path(spec.audio))
            emo_sha = file_sha256(spec.audio)
        vector = _check_vector(spec.vector)
        if not math.isfinite(spec.alpha):
            raise UsageError(f"--emotion-alpha {spec.alpha}: must be a number")
        sha = file_sha256(path)
        extra = {"max_ref_seconds": self.engine.preset.limits.max_ref_seconds, "code": ENGINE_CODE_REV}
        if spec.audio is not None and vector is None:
            # Only the emovec depends on an emotion clip: the speaker's own conditioning once, then the clip's
            # emotion chain alone (clip_emotion.py; one clip per line with --emotion-from-line).
            clip = (Path(spec.audio), emo_sha or "", spec.alpha)
            own = self._conditioning(path, sha, None, None, 1.0, extra)
            cond, self.last_voice_cached = with_clip_emotion(
                self.engine, self.cache, own, (path, sha), clip, extra
            )
        else:
            emo = (Path(spec.audio), emo_sha or "") if spec.audio is not None else None
            cond = self._conditioning(path, sha, emo, vector, spec.alpha, extra)
        return contract.Voice(name=name or path.stem, path=path, audio_sha256=sha, emotion=spec, state=cond)

    def _conditioning(
        self,
        path: Path,
        sha: str,
        emotion: tuple[Path, str] | None,
        vector: tuple[float, ...] | None,
        alpha: float,
        extra: dict[str, Any],
    ) -> VoiceConditioning:
        """A whole voice's conditioning from the voice cache, or computed and cached."""
        ident = self.engine.identity()
        emo_sha = emotion[1] if emotion is not None else None
        key = voice_key(sha, ident, emotion_audio_sha256=emo_sha, vector=vector, alpha=alpha, extra=extra)
        hit = self.cache.get(key)
        cond = None
        if hit is not None:
            try:
                cond = VoiceConditioning.from_arrays(hit)
            except KeyError:
                cond = None
        self.last_voice_cached = cond is not None
        if cond is None:
            e = self.engine
            speaker = e.speaker_audio(path)
            emo16 = e.emotion_audio(emotion[0] if emotion is not None else path)
            with e.times.time("voice"):
                cond = e.voice_conditioning(speaker, emo16, alpha=alpha, vector=vector)
            self.cache.put(key, cond.arrays())
        return cond

    def synthesize(
        self, requests: Sequence[contract.SynthRequest], on_result: contract.ResultCallback | None = None
    ) -> list[contract.SynthResult]:
        """As the protocol says: plan, then render at the natural length. `on_result(k, result)` as each
        request's audio is ready: when the last of its segments is out of the vocoder (s2mel runs
        `s2mel.rows_per_call` lines a call, so a CPU preset reports line by line, a GPU preset by engine
        batch)."""
        plans = self.plan(requests)
        return self.render(
            [contract.RenderRequest(r, p) for r, p in zip(requests, plans, strict=True)], on_result
        )

    # ------------------------------------------------------------------------------- two phases

    @property
    def renders_to_length(self) -> bool:
        """False for an engine folder built before s2mel took its target frames (rebuild it)."""
        return bool(self.engine.renders_to_length)

    def plan(
        self,
        requests: Sequence[contract.SynthRequest],
        on_result: Callable[[int, contract.LinePlan], None] | None = None,
    ) -> list[contract.LinePlan]:
        """Phase one (see synth.synthesizer): every segment's codes from the GPT, batched as
        `limits.max_batch` segments a call (similar prefix lengths together), per-segment generators; a
        failing batch is re-run segment by segment. `on_result(k, plan)` as each line's codes are out."""
        e = self.engine
        mine, errors = self._line_segments(requests)
        done: dict[int, contract.LinePlan] = {}

        plan_of = lambda i: self._plan(requests[i], mine[i], errors.get(i))  # noqa: E731
        settle = functools.partial(_deliver_ready, mine, errors, done, _generated, plan_of, on_result)

        settle()  # lines that failed before any model ran
        segs = [s for parts in mine.values() for s in parts]
        # Similar prefix lengths together: less padding in each GPT batch (results do not depend on it).
        order = sorted(segs, key=lambda s: (s.params.beams, len(s.prefix)))
        size = max(1, int(e.preset.limits.max_batch))
        for start in range(0, len(order), size):
            self._generate_guarded(order[start : start + size])
            settle()
        return [done[i] for i in range(len(requests))]

    def render(
        self, items: Sequence[contract.RenderRequest], on_result: contract.ResultCallback | None = None
    ) -> list[contract.SynthResult]:
        """Phase two: latent pass, s2mel and vocoder from each plan's codes (prefixes rebuilt from the
        request's text and voice), at the natural length (`frames=None`) or at exactly `frames * hop`
        samples (`line_plan.split_target` over the segments). Rows of similar target frames share a call
        (less padding); no row depends on its batch-mates; a failing call is re-run row by row.
        `on_result(k, result)` as each line's last segment is out of the vocoder."""
        e = self.engine
        requests = [it.request for it in items]
        mine, errors = self._line_segments(requests)
        splits: dict[int, SegmentSplit] = {}
        for i, it in enumerate(items):
            if not it.plan.ok:  # the plan phase's own message, as it is
                errors[i] = it.plan.error or "the line has no plan"
            elif i not in errors:
                try:
                    splits[i] = self._fit(it, mine[i])
                except Exception as ex:
                    errors[i] = _message(ex)
        done: dict[int, contract.SynthResult] = {}

        result_of = lambda i: self._result(requests[i], mine[i], errors.get(i), splits.get(i))  # noqa: E731
        settle = functools.partial(_deliver_ready, mine, errors, done, _rendered, result_of, on_result)

        settle()
        groups: dict[tuple[int, float, str, str], list[_Segment]] = {}
        for i, parts in mine.items():
            for s in parts if i not in errors else []:
                key = (s.s2mel.steps, s.s2mel.cfg_rate, s.s2mel.schedule, s.s2mel.cache_level)
                groups.setdefault(key, []).append(s)
        cap = max(1, int(e.preset.limits.max_batch))
        for run, group in groups.items():
            group.sort(key=lambda s: (s.frames, s.req, s.index))
            size = e.s2mel_rows(min(len(group), cap)) if hasattr(e, "s2mel_rows") else min(len(group), cap)
            for lo in range(0, len(group), size):
                self._render_guarded(group[lo : lo + size], run)
                settle()
        return [done[i] for i in range(len(items))]

    def close(self) -> None:
        self.engine.close()

    # ------------------------------------------------------------------------------- internals

    def _line_segments(
        self, requests: Sequence[contract.SynthRequest]
    ) -> tuple[dict[int, list[_Segment]], dict[int, str]]:
        """Each request's segments (prefixes from its text and voice), and the requests that failed."""
        mine: dict[int, list[_Segment]] = {i: [] for i in range(len(requests))}
        errors: dict[int, str] = {}
        for i, r in enumerate(requests):
            try:
                mine[i] = self._segments(i, r)
            except Exception as ex:  # one bad line must not sink its batch
                errors[i] = _message(ex)
        return mine, errors

    def _plan(self, r: contract.SynthRequest, mine: list[_Segment], error: str | None) -> contract.LinePlan:
        error = error or _segment_error(mine)
        if error is not None:
            return contract.LinePlan(r.line_id, self.sample_rate, error=error)
        got = SegmentCodes([s.codes for s in mine], [s.stopped for s in mine])  # type: ignore[misc]
        split = natural_split(self._natural_frames(got.codes), self._gap)
        return contract.LinePlan(
            r.line_id,
            self.sample_rate,
            natural_samples=split.samples(self.hop),
            payload=got.payload(),
            info=got.info(),
            n_tokens=int(sum(c.size for c in got.codes)),
            hit_token_limit=not all(got.stopped),
        )

    def _fit(self, item: contract.RenderRequest, mine: list[_Segment]) -> SegmentSplit:
        """Give a line's segments their plan's codes and target frames; ValueError says why it cannot."""
        plan = item.plan
        got = SegmentCodes.unpack(plan.payload, plan.info)  # type: ignore[arg-type]
        if len(got.codes) != len(mine):
            raise ValueError(
                f"the plan has {len(got.codes)} segments, the line's text {len(mine)}: plan it again"
            )
        natural = self._natural_frames(got.codes)
        if item.frames is None:
            split = natural_split(natural, self._gap)
        elif not self.renders_to_length:
            raise EngineMismatchError(
                "this engine folder was built before IndexTTS-2 could render a line to a length: rebuild "
                "it with `fasttts build --checkpoint DIR --preset PRESET`"
            )
        else:
            split = split_target(item.frames, natural, self.hop, self._gap)
        for s, c, stopped, f in zip(mine, got.codes, got.stopped, split.frames, strict=True):
            s.codes, s.stopped, s.frames, s.fixed = c, stopped, f, item.frames is not None
        return split

    def _natural_frames(self, codes: Sequence[np.ndarray]) -> list[int]:
        return [int(f) for f in self.engine.target_lengths([c.size for c in codes])]

    @property
    def _gap(self) -> int:
        return round(SEGMENT_GAP_S * self.sample_rate)

    def _result(
        self,
        r: contract.SynthRequest,
        mine: list[_Segment],
        error: str | None,
        split: SegmentSplit | None,
    ) -> contract.SynthResult:
        """A request's result from its segments (in index order), joined by the split's gaps."""
        error = error or _segment_error(mine)
        if error is not None or split is None:
            return contract.SynthResult(r.line_id, None, self.sample_rate, error=error or "no audio")
        parts: list[np.ndarray] = []
        for k, s in enumerate(sorted(mine, key=lambda s: s.index)):
            if k:
                parts.append(np.zeros(split.gaps[k - 1], np.float32))
            assert s.wav is not None
            parts.append(s.wav)
        return contract.SynthResult(
            r.line_id,
            np.concatenate(parts).astype(np.float32),
            self.sample_rate,
            n_tokens=int(sum(s.codes.size for s in mine if s.codes is not None)),
            hit_token_limit=any(not s.stopped for s in mine),
        )

    def _segments(self, i: int, r: contract.SynthRequest) -> list[_Segment]:
        e = self.engine
        cond = r.voice.state
        if not isinstance(cond, VoiceConditioning):
            # a Voice not prepared by this engine (or rebuilt without state): prepare it now
            cond = self.prepare_voice(r.voice.path, name=r.voice.name, emotion=r.voice.emotion).state
        opts = line_options(e.preset, r.options)
        params = opts.sampling(e.tokens.stop_mel, e.max_codes)
        ids = e.text.segments(r.text)
        ids = [s for s in ids if s]
        if not ids:
            raise ValueError("the text has no speakable tokens")
        return [
            _Segment(i, k, e.prefix(cond.spk_latents, cond.emovec, s), cond, params, opts.s2mel, int(r.seed))
            for k, s in enumerate(ids)
        ]

    def _generate_guarded(self, batch: list[_Segment]) -> None:
        """The GPT for a batch of segments; if the call fails, segment by segment to find the failing one."""
        try:
            decoded = self.engine.generate(
                [s.prefix for s in batch],
                [s.params for s in batch],
                [segment_seed_generator(s.seed, s.index) for s in batch],
            )
        except Exception as ex:
            if len(batch) == 1:
                batch[0].error = _message(ex)
                return
            for s in batch:
                self._generate_guarded([s])
            return
        for s, d in zip(batch, decoded, strict=True):
            s.codes, s.stopped = d.codes, d.stopped
            if d.codes.size == 0:
                s.error = "the model generated no speech codes (stop token first)"

    def _render_guarded(self, batch: list[_Segment], run: tuple[int, float, str, str]) -> None:
        """Latent pass, s2mel and vocoder for a batch of segments (in the engine's own s2mel grouping,
        so lines are ready as each call ends); if the call fails, segment by segment."""
        steps, cfg_rate, schedule, cache_level = run
        frames = [s.frames if s.fixed else None for s in batch]
        try:
            wavs = self.engine.codes_to_wavs(
                [s.voice for s in batch],
                [s.prefix for s in batch],
                [s.codes for s in batch],  # type: ignore[misc]
                [noise_generator(s.seed, s.index) for s in batch],
                steps=steps,
                cfg_rate=cfg_rate,
                schedule=schedule,
                cache_level=cache_level,
                frames=frames if any(f is not None for f in frames) else None,
            )
        except Exception as ex:
            if len(batch) == 1:
                batch[0].error = _message(ex)
                return
            for s in batch:
                self._render_guarded([s], run)
            return
        for s, w in zip(batch, wavs, strict=True):
            s.wav = w


def _generated(s: _Segment) -> bool:
    return s.error is not None or s.codes is not None


def _rendered(s: _Segment) -> bool:
    return s.error is not None or s.wav is not None


def _segment_error(mine: list[_Segment]) -> str | None:
    """The first failing segment of a line, named, or None."""
    for s in sorted(mine, key=lambda s: s.index):
        if s.error is not None:
            return f"segment {s.index + 1} of {len(mine)}: {s.error}"
    return None


def _deliver_ready(
    mine: Mapping[int, list[_Segment]],
    errors: Mapping[int, str],
    done: dict[int, Any],
    ready: Callable[[_Segment], bool],
    make: Callable[[int], Any],
    on_result: Callable[[int, Any], None] | None,
) -> None:
    """Make and report each line not yet done that failed, or whose segments are all `ready`."""
    for i, parts in mine.items():
        if i not in done and (i in errors or all(ready(s) for s in parts)):
            done[i] = make(i)
            contract.deliver(on_result, i, done[i])


def _check_vector(vector: Sequence[float] | None) -> tuple[float, ...] | None:
    if vector is None:
        return None
    vals = tuple(float(x) for x in vector)
    if len(vals) != N_EMOTIONS or not all(math.isfinite(x) for x in vals):
        raise UsageError(
            f"--emotion-vector: {N_EMOTIONS} numbers expected (happy, angry, sad, afraid, disgusted, "
            f"melancholic, surprised, calm), got {list(vector)}"
        )
    return vals


def _message(ex: BaseException) -> str:
    if isinstance(ex, InputError | UsageError):
        return str(ex)
    return f"{type(ex).__name__}: {ex}"
