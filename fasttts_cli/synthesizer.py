"""The Synthesizer contract: the one seam between the dubbing pipeline and every TTS engine.

Engines (`draft`, `indextts2`, later `torch`) implement this protocol; the pipeline never imports
an engine's internals. A line's audio must not depend on its batch-mates: each request carries its
own seed (derived from its cache key), which is what lets the per-line cache treat a batch as a set
of independent lines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
        """One result per request, same order; a failing line does not fail its batch."""
        ...

    def close(self) -> None: ...
