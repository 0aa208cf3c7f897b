"""Change the tempo of one line's audio without changing its pitch, through ffmpeg.

`rubberband` (phase vocoder, high quality) when the ffmpeg build has it, else a chain of `atempo` (WSOLA)
stages, each kept within 0.5..2.0 where atempo sounds best. Audio travels as raw float32 through ffmpeg's
stdin/stdout: no temporary files, no format conversion.

Rubber Band options, chosen for speech: `transients=mixed` resets phases at transients only outside the
frequency range of voice fundamentals (Rubber Band's documented behaviour), so consonant attacks stay sharp
without disturbing the harmonic body of vowels; `pitchq=quality` matters only if pitch is ever shifted and
costs nothing at pitch 1.0. The filter compensates its own latency: measured onsets land where expected
(within a few ms of window smear) and the output length is exact.

The result is always exactly `round(len(audio) / factor)` samples long (atempo drops up to ~1 % at the
tail; that is padded with silence), so the timeline can place it by sample count.
"""

from __future__ import annotations

import math
import subprocess

import numpy as np

from fasttts_cli.errors import FastTTSError
from fasttts_cli.media.ffmpeg import ffmpeg_filters, ffmpeg_path

METHODS = ("auto", "rubberband", "atempo")
RUBBERBAND_OPTS = "transients=mixed:detector=compound:phase=laminar:window=standard:pitchq=quality"
# Below this many samples the stretchers return nothing (they need a full analysis window).
_MIN_SAMPLES = 4096


def atempo_chain(factor: float) -> str:
    """`atempo` stages, equal in size and each within 0.5..2.0, whose product is `factor`."""
    stages = max(1, math.ceil(abs(math.log(factor)) / math.log(2.0) - 1e-12))
    each = factor ** (1.0 / stages)
    return ",".join([f"atempo={each:.8f}"] * stages)


def _filter_for(factor: float, method: str) -> str:
    if method == "auto":
        method = "rubberband" if "rubberband" in ffmpeg_filters() else "atempo"
    if method == "rubberband":
        return f"rubberband=tempo={factor:.8f}:{RUBBERBAND_OPTS}"
    return atempo_chain(factor)


def _run_raw(audio: np.ndarray, sr: int, filt: str) -> np.ndarray:
    cmd = [
        ffmpeg_path(),
        "-hide_banner",
        "-nostdin",
        "-loglevel",
        "error",
        *("-f", "f32le", "-ar", str(sr), "-ac", "1", "-i", "pipe:0"),
        *("-af", filt),
        *("-f", "f32le", "-ar", str(sr), "-ac", "1", "pipe:1"),
    ]
    proc = subprocess.run(cmd, input=audio.astype("<f4").tobytes(), capture_output=True, check=False)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise FastTTSError(
            f"ffmpeg failed while changing tempo ({filt}): " + (" | ".join(tail) or f"exit {proc.returncode}")
        )
    return np.frombuffer(proc.stdout, dtype="<f4").astype(np.float32)


def fit_length(x: np.ndarray, n: int, sr: int) -> np.ndarray:
    """`x` cut (with a 2 ms fade-out, so the cut does not click) or zero-padded to exactly n samples."""
    if len(x) >= n:
        return trim_to(x, sr, n / sr, fade_ms=2.0) if len(x) > n else x
    return np.concatenate([x, np.zeros(n - len(x), dtype=np.float32)])


def change_tempo(audio: np.ndarray, sr: int, factor: float, *, method: str = "auto") -> np.ndarray:
    """Play `audio` (float32 mono) `factor` times faster (> 1 shorter, < 1 longer), pitch unchanged.

    `method`: "auto" (rubberband if available, else atempo), "rubberband" or "atempo". Factor 1.0 returns
    the input object itself. Clips too short for the stretchers (< 4096 samples) are cut or padded to the
    new length instead: at that size there is no tempo to hear.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not (math.isfinite(factor) and factor > 0.0):
        raise ValueError(f"tempo factor must be a positive number, got {factor}")
    if factor == 1.0:
        return audio
    x = np.asarray(audio, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"change_tempo takes mono audio (1-D), got shape {x.shape}")
    n_out = round(len(x) / factor)
    if len(x) < _MIN_SAMPLES:
        return fit_length(x.copy(), n_out, sr)
    y = _run_raw(x, sr, _filter_for(factor, method))
    return fit_length(y, n_out, sr)


def trim_to(audio: np.ndarray, sr: int, seconds: float, fade_ms: float = 10.0) -> np.ndarray:
    """Cut `audio` to `seconds`, with a linear fade-out over the last `fade_ms` so the cut does not click.

    Audio already that short is returned unchanged.
    """
    n = max(0, round(seconds * sr))
    if len(audio) <= n:
        return audio
    y = np.array(audio[:n], dtype=np.float32)
    k = min(n, round(fade_ms * sr / 1000.0))
    if k > 0:
        y[n - k :] *= np.linspace(1.0, 0.0, k, dtype=np.float32)
    return y
