"""The Synthesizer contract: the one seam between the dubbing pipeline and every TTS engine.

Engines (`draft`, `indextts2`, later `torch`) implement this protocol; the pipeline never imports
an engine's internals. A line's audio must not depend on its batch-mates: each request carries its
own seed (derived from its cache key), which is what lets the per-line cache treat a batch as a set
of independent lines.

Progress per line: an engine that can tell when each row of a batch is ready sets `reports_rows = True`
and accepts `synthesize(requests, on_result=cb)`, calling `cb(k, result)` once per row as soon as that
row's audio (or error) is final; the pipeline drives every engine through `synthesize_rows`, which also
serves engines without it (their rows are reported when the call returns).
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

    def key(self) -> str:
        return f"audio={self.audio}|vector={self.vector}|alpha={self.alpha}"


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


@dataclass
class SynthResult:
    """Audio for one line (float32 mono at `sample_rate`) or the reason it failed."""

    line_id: str
    audio: np.ndarray | None
    sample_rate: int
    error: str | None = None
    n_tokens: int | None = None  # generated acoustic tokens, where the engine has them
    hit_token_limit: bool = False  # generation stopped at max tokens instead of a stop token

    @property
    def ok(self) -> bool:
        return self.error is None and self.audio is not None


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

    def close(self) -> None: ...


ResultCallback = Callable[[int, SynthResult], None]
# (row index in the call, its result, synthesis seconds attributed to the row)
RowReport = Callable[[int, SynthResult, float], None]


class CallbackFailed(BaseException):
    """The caller's `on_result` raised inside an engine. A BaseException so that an engine's own
    per-line error handling (`except Exception`) cannot mistake it for a failing line; `synthesize_rows`
    re-raises the original."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def deliver(on_result: ResultCallback | None, k: int, result: SynthResult) -> None:
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
    t0 = time.monotonic()
    if not getattr(synth, "reports_rows", False):
        results = synth.synthesize(requests)
        share = (time.monotonic() - t0) / max(1, len(requests))
        for k, res in enumerate(results[: len(requests)]):
            on_row(k, res, share)
        return results
    seen: set[int] = set()
    last = t0

    def cb(k: int, res: SynthResult) -> None:
        nonlocal last
        if k in seen or not 0 <= k < len(requests):
            return  # an engine reporting a row twice (or one that is not there) is not the caller's problem
        seen.add(k)
        now = time.monotonic()
        seconds, last = now - last, now
        on_row(k, res, seconds)

    try:
        results = synth.synthesize(requests, on_result=cb)  # type: ignore[call-arg]
    except CallbackFailed as e:
        raise e.error from None
    # a row the engine did not report (it should have) is reported now, with no time of its own
    for k, res in enumerate(results[: len(requests)]):
        if k not in seen:
            cb(k, res)
    return results
