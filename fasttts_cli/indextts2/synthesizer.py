"""`indextts2`: the IndexTTS-2 engine behind the dubbing pipeline's Synthesizer protocol.

Per request: text -> segments (<= 120 tokens, the original's split), each segment -> codes -> latent ->
s2mel -> BigVGAN, segments joined with 200 ms of silence, float32 at 22.05 kHz. Segments of every request
in a call are batched together (up to the preset's `limits.max_batch` per GPT batch); each segment owns
its random generators, derived from the request's seed and the segment's index, for the sampler and the
CFM start noise, so a line's audio never depends on its batch-mates (batch == single, which the pipeline's
per-line cache relies on). A failure is caught per line: a failing batch is re-run line by line.

Run-time settings come from the preset (`decode`, `s2mel` tables); `SynthRequest.options` may override
them per line with the same names (`beams`, `top_k`, `top_p`, `temperature`, `repetition_penalty`,
`length_penalty`, `max_tokens`, `do_sample`, `steps`, `cfg_rate`, `schedule`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli import __version__
from fasttts_cli.errors import InputError, UsageError
from fasttts_cli.indextts2.engine import (
    MODEL_ID,
    IndexTTS2Engine,
    VoiceConditioning,
    load_text_front_end,
    noise_generator,
    segment_seed_generator,
)
from fasttts_cli.indextts2.sampling import SamplingParams
from fasttts_cli.indextts2.voice_cache import VoiceCache, voice_key
from fasttts_cli.spec.engine_folder import file_sha256, read_manifest
from fasttts_cli.spec.presets import DecodeOptions, Preset, S2MelOptions, coerce_value
from fasttts_cli.synth import synthesizer as contract  # the Synthesizer contract's types

# Bump whenever this runtime's output for the same engine and preset could change (part of identity()).
ENGINE_CODE_REV = 1
SEGMENT_GAP_S = 0.2  # the original's interval_silence (200 ms)
N_EMOTIONS = 8
RANDOM_MAX_TOKENS = 500  # codes per segment for random-weight engines (above the tiny checkpoint's 401)

_ALIASES = {
    "num_beams": "beams",
    "max_mel_tokens": "max_tokens",
    "diffusion_steps": "steps",
    "s2mel_steps": "steps",
    "inference_cfg_rate": "cfg_rate",
}
_DECODE_KEYS = {f.name for f in fields(DecodeOptions)}
_S2MEL_KEYS = {"steps", "cfg_rate", "schedule"}


@dataclass(frozen=True)
class LineOptions:
    """The effective run-time settings of one line."""

    decode: DecodeOptions
    s2mel: S2MelOptions

    def sampling(self, stop_token: int, max_codes: int) -> SamplingParams:
        p = SamplingParams.from_options(self.decode, stop_token)
        return replace(p, max_tokens=min(p.max_tokens, max_codes))


def line_options(preset: Preset, overrides: Mapping[str, Any]) -> LineOptions:
    """The preset's run keys with a request's overrides; ValueError names a bad key or value."""
    dec: dict[str, Any] = {}
    s2: dict[str, Any] = {}
    for raw_key, value in overrides.items():
        key = _ALIASES.get(raw_key, raw_key)
        if key in _S2MEL_KEYS:
            target, default = s2, getattr(preset.s2mel, key)
        elif key in _DECODE_KEYS:
            target, default = dec, getattr(preset.decode, key)
        else:
            allowed = sorted(_DECODE_KEYS | _S2MEL_KEYS)
            raise ValueError(f"unknown synthesis option {raw_key!r} (allowed: {', '.join(allowed)})")
        try:
            target[key] = coerce_value(value, default)
        except ValueError as e:
            raise ValueError(f"option {raw_key} {e}") from None
    opts = LineOptions(replace(preset.decode, **dec), replace(preset.s2mel, **s2))
    opts.decode.validate()
    s = opts.s2mel
    if s.steps < 1:
        raise ValueError(f"steps must be >= 1, got {s.steps}")
    if s.schedule not in ("uniform", "sway"):
        raise ValueError(f"schedule must be uniform or sway, got {s.schedule!r}")
    return opts


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
    wav: np.ndarray | None = None
    error: str | None = None


class IndexTTS2Synthesizer:
    """Synthesizer for an IndexTTS-2 engine folder (see the module docstring)."""

    name = "indextts2"
    clones_voice = True
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
        self.last_voice_cached: bool | None = None  # whether the last prepare_voice was a cache hit

    @classmethod
    def load(
        cls,
        path: Path | str,
        preset: Preset | str | Path | None = None,
        *,
        threads: int | None = None,
        cache_dir: Path | str | None = None,
    ) -> IndexTTS2Synthesizer:
        """Reads the manifest and checks the preset; no model session opens until it is needed."""
        engine = IndexTTS2Engine.load(path, preset, threads)
        return cls(engine, VoiceCache(cache_dir) if cache_dir is not None else None)

    @classmethod
    def tokenizer_counter(cls, path: Path | str) -> Callable[[str], int]:
        """count_tokens from the engine's tokenizer alone (for --dry-run and inspect)."""
        folder = Path(path)
        manifest = read_manifest(folder, expect_model=MODEL_ID)
        return load_text_front_end(folder, manifest).count_tokens

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
            f"|code=fasttts-{__version__}.indextts2-{ENGINE_CODE_REV}"
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
        lim = self.engine.preset.limits
        key = voice_key(
            sha,
            self.engine.identity(),
            emotion_audio_sha256=emo_sha,
            vector=vector,
            alpha=spec.alpha,
            extra={"max_ref_seconds": lim.max_ref_seconds, "code": ENGINE_CODE_REV},
        )
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
            emo16 = e.emotion_audio(spec.audio if spec.audio is not None else path)
            with e.times.time("voice"):
                cond = e.voice_conditioning(speaker, emo16, alpha=spec.alpha, vector=vector)
            self.cache.put(key, cond.arrays())
        return contract.Voice(name=name or path.stem, path=path, audio_sha256=sha, emotion=spec, state=cond)

    def synthesize(
        self, requests: Sequence[contract.SynthRequest], on_result: contract.ResultCallback | None = None
    ) -> list[contract.SynthResult]:
        """As the protocol says; `on_result(k, result)` as each request's audio is ready: when the last
        of its segments is out of the vocoder (s2mel runs `s2mel.rows_per_call` lines a call, so a CPU
        preset reports line by line, a GPU preset by engine batch)."""
        e = self.engine
        errors: dict[int, str] = {}
        segs: list[_Segment] = []
        for i, r in enumerate(requests):
            try:
                segs += self._segments(i, r)
            except Exception as ex:  # one bad line must not sink its batch
                errors[i] = _message(ex)
        mine: dict[int, list[_Segment]] = {i: [] for i in range(len(requests))}
        for s in segs:
            mine[s.req].append(s)
        done: dict[int, contract.SynthResult] = {}

        def settle(final: bool) -> None:
            # Deliver each request whose segments all have audio (or, once its batch is settled, an error).
            for i, r in enumerate(requests):
                if i in done:
                    continue
                parts = mine[i]
                if (
                    i in errors
                    or all(s.wav is not None for s in parts)
                    or (final and all(s.wav is not None or s.error is not None for s in parts))
                ):
                    done[i] = self._result(r, parts, errors.get(i))
                    contract.deliver(on_result, i, done[i])

        settle(False)  # lines that failed before any model ran
        # Similar prefix lengths together: less padding in each GPT batch (results do not depend on it).
        order = sorted(segs, key=lambda s: (s.params.beams, len(s.prefix)))
        size = max(1, int(e.preset.limits.max_batch))
        for start in range(0, len(order), size):
            self._run_guarded(order[start : start + size], lambda: settle(False))
            settle(True)
        return [
            done[i] if i in done else self._result(r, mine[i], errors.get(i)) for i, r in enumerate(requests)
        ]

    def _result(
        self, r: contract.SynthRequest, mine: list[_Segment], error: str | None
    ) -> contract.SynthResult:
        """A request's result from its segments (in index order), joined with the segment gap."""
        mine = sorted(mine, key=lambda s: s.index)
        if error is None:
            bad = [s for s in mine if s.error is not None or s.wav is None]
            if bad:
                error = f"segment {bad[0].index + 1} of {len(mine)}: {bad[0].error or 'no audio'}"
        if error is not None:
            return contract.SynthResult(r.line_id, None, self.sample_rate, error=error)
        gap = np.zeros(round(SEGMENT_GAP_S * self.sample_rate), np.float32)
        parts: list[np.ndarray] = []
        for k, s in enumerate(mine):
            if k:
                parts.append(gap)
            assert s.wav is not None
            parts.append(s.wav)
        return contract.SynthResult(
            r.line_id,
            np.concatenate(parts).astype(np.float32),
            self.sample_rate,
            n_tokens=int(sum(s.codes.size for s in mine if s.codes is not None)),
            hit_token_limit=any(not s.stopped for s in mine),
        )

    def close(self) -> None:
        self.engine.close()

    # ------------------------------------------------------------------------------- internals

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

    def _run_guarded(self, batch: list[_Segment], ready: Callable[[], None]) -> None:
        """Run a batch; if it fails, run its segments one by one to find the failing line (a segment
        whose audio came out before the failure keeps it). `ready` is called as audio comes out."""
        try:
            self._run(batch, ready)
        except Exception as ex:
            if len(batch) == 1:
                batch[0].error = _message(ex)
                return
            for s in batch:
                if s.wav is not None:
                    continue
                s.error, s.codes = None, None
                self._run_guarded([s], ready)

    def _run(self, batch: list[_Segment], ready: Callable[[], None]) -> None:
        e = self.engine
        decoded = e.generate(
            [s.prefix for s in batch],
            [s.params for s in batch],
            [segment_seed_generator(s.seed, s.index) for s in batch],
        )
        todo = []
        for s, d in zip(batch, decoded, strict=True):
            s.codes, s.stopped = d.codes, d.stopped
            if d.codes.size == 0:
                s.error = "the model generated no speech codes (stop token first)"
            else:
                todo.append(s)
        groups: dict[tuple[int, float, str, str], list[_Segment]] = {}
        for s in todo:
            key = (s.s2mel.steps, s.s2mel.cfg_rate, s.s2mel.schedule, s.s2mel.cache_level)
            groups.setdefault(key, []).append(s)
        for (steps, cfg_rate, schedule, cache_level), group in groups.items():
            # In the engine's own s2mel grouping (rows_per_call), so lines are ready as each call ends; every
            # stage is per row, so the grouping changes only the time (test_deterministic_stages_...).
            size = e.s2mel_rows(len(group)) if hasattr(e, "s2mel_rows") else len(group)
            for lo in range(0, len(group), size):
                part = group[lo : lo + size]
                wavs = e.codes_to_wavs(
                    [s.voice for s in part],
                    [s.prefix for s in part],
                    [s.codes for s in part],  # type: ignore[misc]
                    [noise_generator(s.seed, s.index) for s in part],
                    steps=steps,
                    cfg_rate=cfg_rate,
                    schedule=schedule,
                    cache_level=cache_level,
                )
                for s, w in zip(part, wavs, strict=True):
                    s.wav = w
                ready()


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
