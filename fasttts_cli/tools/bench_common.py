"""What `fasttts bench`'s two sides share: the options, the clock, the peak RSS and the per-row totals."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SR_OUT = 22050
HOP = 256


@dataclass(frozen=True)
class BenchOptions:
    engine: Path | None = None  # existing engine folder
    checkpoint: Path | None = None  # its checkpoint, for the eager side
    random_weights: bool = False  # full-size random checkpoint + engine in a temporary folder
    preset: str | None = None  # None: the engine's own (cpu-fp32 for --random-weights)
    tokens: int = 100  # generated tokens per line (100 codes = 2 s of speech)
    batches: tuple[int, ...] = (1, 4, 8)
    beams: tuple[int, ...] = (1, 3)
    text_tokens: int = 24  # text tokens per line
    ref_seconds: float = 4.0  # reference voice (4 s -> 344 prompt mel frames, the spec's example)
    s2mel_steps_timed: int = 2  # CFM steps actually run per measurement
    eager: bool = True
    threads: int | None = None  # ORT intra-op threads and torch threads (None: all cores)
    work_dir: Path | None = None  # where the random checkpoint and engine go (default: a temp folder)
    seed: int = 0
    rounds: int = 1  # ours then eager, this many times; every figure is the median over rounds
    model: str | None = None  # --random-weights: indextts2 (default) or indextts2.5; --engine: must match


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def random_text(rng: np.random.Generator, n: int, vocab: int) -> list[int]:
    return [int(x) for x in rng.integers(3, max(4, vocab), n)]


@dataclass(frozen=True)
class StageTimes:
    """One measurement's stage seconds after generation; cfm_s covers `timed_steps` Euler steps.
    latent_s is None where the model has no latent pass (IndexTTS-2.5)."""

    latent_s: float | None
    content_s: float
    cfm_s: float
    cfm_frames: int
    vocoder_s: float
    audio_s: float


def finish_row(
    row: dict[str, Any],
    beams: Sequence[int],
    lines: int,
    steps: int,
    timed_steps: int,
    t: StageTimes,
    tokens: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The s2mel figures scaled from `timed_steps` to the preset's `steps`, then batch wall time per beam
    count (generation already includes its prefill), RTF and lines/s. With `tokens` (per line) also the
    code rate (codes_per_audio_s: 50 for IndexTTS-2, 25 for 2.5) and ms_per_audio_s, the decode steps'
    cost per second of the batch's audio (ms_per_token x tokens / audio_s): what compares two models
    whose codes cover different spans of time."""
    step_s = t.cfm_s / timed_steps
    row.update(
        latent_s=t.latent_s,
        s2mel_content_s=t.content_s,
        s2mel_step_s=step_s,
        s2mel_s=t.content_s + steps * step_s,
        cfm_frames=t.cfm_frames,
        vocoder_s=t.vocoder_s,
        audio_s=t.audio_s,
        **extra,
    )
    row["batch_s"], row["rtf"], row["lines_per_s"] = {}, {}, {}
    for k in beams:
        total = row["generate_s"][k] + (row["latent_s"] or 0.0) + row["s2mel_s"] + row["vocoder_s"]
        row["batch_s"][k] = total
        row["rtf"][k] = total / row["audio_s"]
        row["lines_per_s"][k] = lines / total
    if tokens is not None:
        row["codes_per_audio_s"] = lines * tokens / row["audio_s"]
        row["ms_per_audio_s"] = {k: v * tokens / row["audio_s"] for k, v in row["ms_per_token"].items()}
    return row
