"""The Synthesizer contract: the one seam between the dubbing pipeline and every TTS engine.

Engines (`draft`, `indextts2`, later `torch`) implement this protocol; the pipeline never imports
an engine's internals. A line's audio must not depend on its batch-mates: each request carries its
own seed (derived from its cache key), which is what lets the per-line cache treat a batch as a set
of independent lines.

Progress per line: an engine that can tell when each row of a batch is ready sets `reports_rows = True`
and accepts `synthesize(requests, on_result=cb)`, calling `cb(k, result)` once per row as soon as that
row's audio (or error) is final; the pipeline drives every engine through `synthesize_rows`, which also
serves engines without it (their rows are reported when the call returns).

Two phases, for fitting lines to their slots: `plan(requests)` decides what a line says (IndexTTS-2: the
GPT's codes; the draft voice: its natural audio) and so its natural length; `render(items)` turns a plan
into audio at a target of exactly `frames * hop` samples (or its natural length, `frames=None`). The
timing solver runs between them, on natural lengths, so the model, not a tempo change, fits each line.
`synthesize` is plan + render at the natural length. An engine that cannot render to a length sets
`renders_to_length = False` (its lines are fitted by tempo change); one with no `plan`/`render` at all
(an embedding program's own engine) is driven through `plan_rows`/`render_rows`, which treat its
`synthesize` output as the plan and render it at its natural length only.

Streaming: an engine that can hand a line's audio on while the line is still being made has
`stream(requests, on_audio, cancelled=None)`: `on_audio(k, samples)` for each piece of row k, in order,
then one result per request (the whole audio) as `synthesize` returns them; `cancelled(k)` lets it stop
work on a row nobody listens to. Lines stream at their natural length. `stream_rows` drives any engine:
one without `stream` hands each line on whole when it is ready.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class EmotionSpec:
    """How to steer emotion. Default: taken from the speaker audio itself."""

    audio: Path | None = None  # separate emotion reference
    vector: tuple[float, ...] | None = (
        None  # 8 values: happy, angry, sad, afraid, disgusted, melancholic, surprised, calm
    )
    alpha: float = 1.0  # blend strength of the emotion reference
    # The audio's sha256, where the caller knows it (--emotion-from-line's content-named clips): the key
    # then names the content, not the path, so the same clip under another spelling of the work folder
    # keeps its lines cached.
    audio_sha256: str | None = None

    def key(self) -> str:
        audio = f"sha256:{self.audio_sha256}" if self.audio_sha256 else self.audio
        return f"audio={audio}|vector={self.vector}|alpha={self.alpha}"


@dataclass(frozen=True)
class Voice:
    """A prepared reference voice. `key` goes into cache keys; `state` is engine-private."""

    name: str  # speaker name or file stem, for messages
    path: Path
    audio_sha256: str
    emotion: EmotionSpec = field(default_factory=EmotionSpec)
    state: Any = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.audio_sha256}|{self.emotion.key()}"


@dataclass(frozen=True)
class SynthRequest:
    """One line to speak. `options` holds per-line overrides of run-time preset keys."""

    line_id: str
    text: str
    voice: Voice
    seed: int
    options: Mapping[str, Any] = field(default_factory=dict)
    lang: str | None = None  # ISO 639-1 code of the text (synth.languages); None: the engine decides


@dataclass
class SynthResult:
    """Audio for one line (float32 mono at `sample_rate`) or the reason it failed."""

    line_id: str
    audio: np.ndarray | None
    sample_rate: int
    error: str | None = None
    n_tokens: int | None = None  # generated acoustic tokens, where the engine has them
    hit_token_limit: bool = False  # generation stopped at max tokens instead of a stop token
    # The draft voice's correction after rendering to a length: rendered length / target (1.0: none). It is
    # kept apart from the solver's tempo change (`stretch_factor`) so a report shows both.
    residual: float = 1.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.audio is not None


@dataclass
class LinePlan:
    """Phase one of a line: what the engine will say, and how long it is at its natural pace.

    `payload` and `info` are engine-private and stored in the plan cache (`plans/`) as they are: `payload`
    a 1-D float32 or int32 array (IndexTTS-2: every segment's codes end to end; the draft voice: the
    natural audio), `info` JSON-able (IndexTTS-2: the segments' code counts). A render needs nothing
    else from the plan phase, so a re-timed line never re-runs the GPT."""

    line_id: str
    sample_rate: int
    natural_samples: int = 0  # the line's length rendered at its natural pace
    payload: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    n_tokens: int | None = None
    hit_token_limit: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and self.payload is not None

    @property
    def natural(self) -> float:
        """Natural duration, seconds."""
        return self.natural_samples / self.sample_rate


@dataclass(frozen=True)
class RenderRequest:
    """Phase two of a line: its plan rendered to `frames * hop` samples exactly (None: natural length).
    `request` is the line's own request (voice, seed, options): rendering is as deterministic as
    planning, and as independent of batch-mates."""

    request: SynthRequest
    plan: LinePlan
    frames: int | None = None


@runtime_checkable
class Synthesizer(Protocol):
    name: str  # engine kind: "draft", "indextts2", ...
    sample_rate: int
    clones_voice: bool  # False for the draft voice: the pipeline says so visibly

    def identity(self) -> str:
        """Changes whenever output could change: model, engine build, preset, code version."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens the engine will see for `text`; needs only the tokenizer (for planning)."""
        ...

    def prepare_voice(
        self, path: Path, *, name: str | None = None, emotion: EmotionSpec | None = None
    ) -> Voice:
        """Validate the reference audio and compute (or load cached) conditioning."""
        ...

    def synthesize(self, requests: Sequence[SynthRequest]) -> list[SynthResult]:
        """One result per request, same order; a failing line does not fail its batch. An engine with
        `reports_rows = True` also takes `on_result` (see the module docstring)."""
        ...

    # Two-phase engines (see the module docstring) also have:
    #   hop: int                      samples per render frame
    #   renders_to_length: bool       render(frames=F) is supported
    #   plan(requests, on_result=None) -> list[LinePlan]          one per request, same order
    #   render(items, on_result=None) -> list[SynthResult]        one per RenderRequest, same order

    def close(self) -> None: ...


ResultCallback = Callable[[int, SynthResult], None]
# (row index in the call, the next samples of that row's audio)
AudioCallback = Callable[[int, np.ndarray], None]
# (row index in the call, its result, synthesis seconds attributed to the row)
RowReport = Callable[[int, SynthResult, float], None]
PlanReport = Callable[[int, LinePlan, float], None]


class CallbackFailed(BaseException):
    """The caller's `on_result` raised inside an engine. A BaseException so that an engine's own
    per-line error handling (`except Exception`) cannot mistake it for a failing line; `synthesize_rows`
    re-raises the original."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def deliver(on_result: Callable[[int, Any], None] | None, k: int, result: Any) -> None:
    """Call an engine's `on_result` for row k, wrapping what it raises in CallbackFailed."""
    if on_result is None:
        return
    try:
        on_result(k, result)
    except Exception as e:
        raise CallbackFailed(e) from e


def synthesize_rows(
    synth: Synthesizer, requests: Sequence[SynthRequest], on_row: RowReport
) -> list[SynthResult]:
    """`synth.synthesize(requests)`, calling `on_row(k, result, seconds)` once per row as soon as the
    engine says the row is ready (`reports_rows`), or for every row when the call returns (other
    engines). `seconds`: for a reporting engine, the time since the previous row was ready (or since the
    call began); otherwise the call's time shared equally, since nothing finer is known."""
    return _rows(synth, synth.synthesize, requests, on_row)


def streams(synth: Any) -> bool:
    """Whether `synth` hands audio on before a line is done (see the module docstring)."""
    return callable(getattr(synth, "stream", None))


def stream_rows(
    synth: Any,
    requests: Sequence[SynthRequest],
    on_audio: AudioCallback,
    cancelled: Callable[[int], bool] | None = None,
) -> list[SynthResult]:
    """`synth.stream(...)` where the engine streams; otherwise `synthesize`, each line handed on whole
    as the engine reports it ready. The caller's `on_audio` raising stops the call and is re-raised."""
    if not streams(synth):
        return whole_rows(synth, requests, on_audio, cancelled)
    try:
        return list(synth.stream(requests, on_audio, cancelled=cancelled))
    except CallbackFailed as e:
        raise e.error from None


def whole_rows(
    synth: Any,
    requests: Sequence[SynthRequest],
    on_audio: AudioCallback,
    cancelled: Callable[[int], bool] | None = None,
) -> list[SynthResult]:
    """`synthesize` (whole lines, no chunk joins) with `stream_rows`' signature: each line handed on
    once, as the engine reports it ready."""

    def whole(k: int, res: SynthResult, _seconds: float) -> None:
        if res.ok and not (cancelled is not None and cancelled(k)):
            on_audio(k, np.asarray(res.audio, np.float32))

    return synthesize_rows(synth, requests, whole)


def two_phase(synth: Any) -> bool:
    """Whether `synth` has the plan/render phases itself (see the module docstring)."""
    return callable(getattr(synth, "plan", None)) and callable(getattr(synth, "render", None))


def renders_to_length(synth: Any) -> bool:
    return two_phase(synth) and bool(getattr(synth, "renders_to_length", True))


def plan_rows(synth: Any, requests: Sequence[SynthRequest], on_row: PlanReport) -> list[LinePlan]:
    """`synth.plan(requests)` reported row by row as `synthesize_rows` does. An engine without the two
    phases is planned by synthesizing: its audio is the plan, rendered at its natural length only."""
    if two_phase(synth):
        return _rows(synth, synth.plan, requests, on_row)

    def as_plan(k: int, res: SynthResult, seconds: float) -> None:
        on_row(k, audio_plan(res), seconds)

    return [audio_plan(r) for r in _rows(synth, synth.synthesize, requests, as_plan)]


def render_rows(synth: Any, items: Sequence[RenderRequest], on_row: RowReport) -> list[SynthResult]:
    """`synth.render(items)` reported row by row; an engine without the two phases renders a plan made by
    `plan_rows` (its audio) at its natural length."""
    if two_phase(synth):
        return _rows(synth, synth.render, items, on_row)
    out = []
    for k, item in enumerate(items):
        if item.frames is not None:
            raise ValueError(f"the {synth.name} engine cannot render a line to a length")
        out.append(audio_result(item.plan))
        on_row(k, out[-1], 0.0)
    return out


def audio_plan(res: SynthResult) -> LinePlan:
    """A plan whose payload is the line's natural audio (engines whose plan phase is synthesis itself)."""
    audio = None if res.audio is None else np.ascontiguousarray(res.audio, dtype=np.float32).reshape(-1)
    return LinePlan(
        res.line_id,
        res.sample_rate,
        0 if audio is None else len(audio),
        audio,
        error=res.error,
        n_tokens=res.n_tokens,
        hit_token_limit=res.hit_token_limit,
    )


def audio_result(plan: LinePlan) -> SynthResult:
    """The natural-length render of an `audio_plan`."""
    audio = None if plan.payload is None else np.asarray(plan.payload, dtype=np.float32)
    return SynthResult(
        plan.line_id,
        audio,
        plan.sample_rate,
        error=plan.error,
        n_tokens=plan.n_tokens,
        hit_token_limit=plan.hit_token_limit,
    )


def _rows(
    synth: Any, call: Callable[..., list[Any]], items: Sequence[Any], on_row: Callable[..., None]
) -> list[Any]:
    t0 = time.monotonic()
    if not getattr(synth, "reports_rows", False):
        results = call(items)
        share = (time.monotonic() - t0) / max(1, len(items))
        for k, res in enumerate(results[: len(items)]):
            on_row(k, res, share)
        return results
    seen: set[int] = set()
    last = t0

    def cb(k: int, res: Any) -> None:
        nonlocal last
        if k in seen or not 0 <= k < len(items):
            return  # an engine reporting a row twice (or one that is not there) is not the caller's problem
        seen.add(k)
        now = time.monotonic()
        seconds, last = now - last, now
        on_row(k, res, seconds)

    try:
        results = call(items, on_result=cb)
    except CallbackFailed as e:
        raise e.error from None
    # a row the engine did not report (it should have) is reported now, with no time of its own
    for k, res in enumerate(results[: len(items)]):
        if k not in seen:
            cb(k, res)
    return results
