"""Loudness normalization per EBU R128 under a true-peak ceiling, block by block, and per-line leveling.

Everything here streams: a feature-length mix is measured and normalized block by block with bounded
memory, and the in-memory functions (`measure_loudness`, `normalize_loudness`, `limit`, ...) are the same
code run over one block. Measurement lives in `loudness_meter`, the limiter in `limiter`.

Normalization: when gain to the target would push the true peak over the ceiling, a look-ahead peak
limiter (`LimiterStream`) runs on the gained signal instead of lowering the whole programme, with make-up
gain until the result measures within 0.1 LU of the target; a final uniform trim guarantees the ceiling
even for signals that cannot be limited that far (the loudness then falls short and the report says so).
Each attempt is a pass over the source; the output is produced by one final pass into a sink, so no
intermediate copy of the programme is ever held.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fasttts_cli.audio.limiter import LimiterStream
from fasttts_cli.audio.loudness_meter import LoudnessMeter, TruePeakMeter, as_channels, line_loudness

# ---------------------------------------------------------------------------------------------------------
# Normalization, in passes over a block source


class BlockSource(Protocol):
    """Random-access float32 audio: `n` frames of `channels`, `read(start, stop)` -> `(channels, m)`."""

    channels: int

    @property
    def n(self) -> int: ...

    def read(self, start: int, stop: int) -> np.ndarray: ...


class ArraySource:
    """An in-memory `(channels, n)` (or mono) array as a BlockSource."""

    def __init__(self, x: np.ndarray) -> None:
        self.data = as_channels(x)
        self.channels = self.data.shape[0]

    @property
    def n(self) -> int:
        return self.data.shape[1]

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.data[:, start:stop]


@dataclass(frozen=True)
class NormalizeReport:
    input_lufs: float
    input_true_peak: float
    output_lufs: float
    output_true_peak: float
    gain_db: float  # static gain applied before limiting
    limited: bool
    max_reduction_db: float  # deepest limiter gain reduction
    on_target: bool  # within 0.5 LU of the target


@dataclass(frozen=True)
class _Pass:
    lufs: float
    true_peak: float
    min_gain: float


def _pass(
    src: BlockSource,
    sr: int,
    block: int,
    *,
    gain: np.float32 | None = None,
    ceiling_db: float | None = None,
    trim: np.float32 | None = None,
    sink: Callable[[np.ndarray], None] | None = None,
    lufs: bool = True,
    peak: bool = True,
) -> _Pass:
    """One pass over `src`: optional static gain, limiter and trim (float32, in that order), the result
    measured and handed to `sink` block by block, in order."""
    meter = LoudnessMeter(sr, src.channels) if lufs else None
    tp = TruePeakMeter(sr, src.channels) if peak else None
    lim = LimiterStream(sr, src.channels, ceiling_db) if ceiling_db is not None else None
    min_gain = 1.0
    n = src.n
    starts = list(range(0, n, block)) or [0]
    for start in starts:
        last = start + block >= n
        y = src.read(start, min(n, start + block))
        if gain is not None:
            y = y * gain
        if lim is not None:
            y, g = lim.push(y, last)
            if g.size:
                min_gain = min(min_gain, float(g.min()))
        if trim is not None:
            y = y * trim
        if meter is not None:
            meter.add(y)
        if tp is not None:
            tp.add(y, last)
        if sink is not None and y.shape[1]:
            sink(np.asarray(y, dtype=np.float32))
    return _Pass(meter.integrated() if meter else float("nan"), tp.dbtp() if tp else float("nan"), min_gain)


def _db_gain(db: float) -> np.float32:
    return np.float32(10.0 ** (db / 20.0))


def normalize_stream(
    src: BlockSource,
    sr: int,
    sink: Callable[[np.ndarray], None],
    target_lufs: float = -23.0,
    max_true_peak: float = -1.0,
    *,
    block: int | None = None,
) -> NormalizeReport:
    """Normalize `src` to `target_lufs` under `max_true_peak`, handing the result to `sink` block by block
    (float32 `(channels, m)`, in order, exactly once). `block`: frames per read (default: all at once).

    Passes over the source: one to measure, one per limiter attempt (measure only), one to write."""
    block = max(1, block or src.n)
    first = _pass(src, sr, block)
    lufs_in, tp_in = first.lufs, first.true_peak
    if not np.isfinite(lufs_in):
        # Silence, or shorter than one gating block: nothing to measure, so only enforce the ceiling.
        trim = _db_gain(max_true_peak - tp_in) if np.isfinite(tp_in) and tp_in > max_true_peak else None
        out = _pass(src, sr, block, gain=trim, sink=sink, lufs=False)
        return NormalizeReport(lufs_in, tp_in, lufs_in, out.true_peak, 0.0, False, 0.0, False)

    gain_db = target_lufs - lufs_in
    if tp_in + gain_db <= max_true_peak - 0.001:
        # Plain gain is enough. Loudness and true peak both scale exactly with gain, so only the loudness
        # is re-measured (the -70 LUFS absolute gate could in principle move a block in or out).
        out = _pass(src, sr, block, gain=_db_gain(gain_db), sink=sink, peak=False)
        lufs, tp = out.lufs, tp_in + gain_db
        return NormalizeReport(lufs_in, tp_in, lufs, tp, gain_db, False, 0.0, abs(lufs - target_lufs) <= 0.5)

    margin = 0.1  # aim the limiter slightly under the ceiling: its own gain changes add inter-sample peaks
    lufs = tp = float("nan")
    used = (gain_db, margin)
    max_red = 0.0
    for _ in range(6):
        used = (gain_db, margin)
        attempt = _pass(src, sr, block, gain=_db_gain(gain_db), ceiling_db=max_true_peak - margin)
        max_red = float(-20.0 * np.log10(attempt.min_gain))
        lufs, tp = attempt.lufs, attempt.true_peak
        if tp > max_true_peak:
            margin += tp - max_true_peak + 0.05
        if abs(lufs - target_lufs) <= 0.1 and tp <= max_true_peak:
            break
        gain_db += target_lufs - lufs  # make-up for what the limiter took
    # The output: the last attempt again, into the sink, with a uniform trim if it still peaks over the
    # ceiling (a last resort that always meets it).
    trim = _db_gain(max_true_peak - tp - 0.01) if tp > max_true_peak else None
    out = _pass(
        src,
        sr,
        block,
        gain=_db_gain(used[0]),
        ceiling_db=max_true_peak - used[1],
        trim=trim,
        sink=sink,
        lufs=trim is not None,
        peak=trim is not None,
    )
    if trim is not None:
        lufs, tp = out.lufs, out.true_peak
    return NormalizeReport(
        input_lufs=lufs_in,
        input_true_peak=tp_in,
        output_lufs=lufs,
        output_true_peak=tp,
        gain_db=gain_db,
        limited=True,
        max_reduction_db=max_red,
        on_target=abs(lufs - target_lufs) <= 0.5,
    )


def normalize_report(
    x: np.ndarray, sr: int, target_lufs: float = -23.0, max_true_peak: float = -1.0
) -> tuple[np.ndarray, NormalizeReport]:
    """normalize_loudness plus what it did (for the run report)."""
    x = np.asarray(x, dtype=np.float32)
    parts: list[np.ndarray] = []
    report = normalize_stream(ArraySource(x), sr, parts.append, target_lufs, max_true_peak)
    y = np.concatenate(parts, axis=1) if len(parts) != 1 else parts[0]
    if not parts:
        y = np.zeros((1 if x.ndim == 1 else x.shape[0], 0), dtype=np.float32)
    return np.asarray(y, dtype=np.float32).reshape(x.shape), report


def normalize_loudness(
    x: np.ndarray, sr: int, target_lufs: float = -23.0, max_true_peak: float = -1.0
) -> np.ndarray:
    """Gain to `target_lufs` (integrated), limiting peaks so the true peak stays <= `max_true_peak` dBTP."""
    return normalize_report(x, sr, target_lufs, max_true_peak)[0]


def level_line(x: np.ndarray, sr: int, target_lufs: float = -23.0, max_gain_db: float = 30.0) -> np.ndarray:
    """Gain one line to a common loudness so lines sound even; silence is returned unchanged and the gain is
    capped at +/- `max_gain_db` so a near-silent glitch is not blown up into noise. No limiting here: the
    final mix normalization owns the true-peak ceiling."""
    x = np.asarray(x, dtype=np.float32)
    value = line_loudness(x, sr)
    if not np.isfinite(value):
        return x.copy()
    gain_db = float(np.clip(target_lufs - value, -max_gain_db, max_gain_db))
    return (x * np.float32(10.0 ** (gain_db / 20.0))).astype(np.float32)
