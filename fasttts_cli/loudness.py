"""Loudness per ITU-R BS.1770 / EBU R128: measure, normalize under a true-peak ceiling, level lines.

Integrated loudness comes from pyloudnorm (K-weighting, 400 ms blocks, -70 LUFS absolute and -10 LU relative
gates). True peak is the peak of the signal oversampled 4x (soxr HQ, the BS.1770 Annex 2 method), in dBTP.

When gain to the target would push the true peak over the ceiling, `normalize_loudness` runs a look-ahead
peak limiter (below) on the gained signal instead of lowering the whole programme, then adds make-up gain
until the result measures within 0.1 LU of the target; a final uniform trim guarantees the ceiling even for
signals that cannot be limited that far (the loudness then falls short and `normalize_report` says so).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pyloudnorm
import soxr

BLOCK_S = 0.4  # BS.1770 gating block
OVERSAMPLE = 4  # _oversampled_peaks folds exactly four output samples per input sample
_CHUNK = 1 << 18


def _as_channels(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x[None, :] if x.ndim == 1 else x


def _bs1770_channels(x: np.ndarray) -> np.ndarray:
    """(frames, channels) in the order pyloudnorm weights them: L, R, C, Ls, Rs (LFE is not measured)."""
    ch = _as_channels(x)
    if ch.shape[0] == 6:  # ffmpeg 5.1 order: FL FR FC LFE (B|S)L (B|S)R
        ch = ch[[0, 1, 2, 4, 5]]
    elif ch.shape[0] > 5:
        raise ValueError(f"loudness of {ch.shape[0]} channels is not supported (mono to 5.1)")
    return np.ascontiguousarray(ch.T, dtype=np.float64)


def integrated_loudness(x: np.ndarray, sr: int) -> float:
    """Gated integrated loudness in LUFS; -inf for silence or audio shorter than one 400 ms block."""
    data = _bs1770_channels(x)
    if data.shape[0] < BLOCK_S * sr or not np.any(data):
        return float("-inf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyloudnorm warns on clipping-range floats; floats >1 are fine here
        value = pyloudnorm.Meter(sr).integrated_loudness(data)
    return float(value) if np.isfinite(value) else float("-inf")


def _oversampled_peaks(ch: np.ndarray, sr: int) -> np.ndarray:
    """Per input sample, the largest |value| among the sample and its 4x-oversampled neighbours, max over
    channels. Streamed through soxr in chunks (its stream output equals a one-shot resample) so memory
    stays bounded on feature-length mixes; strided maxima instead of small-axis reductions, which are slow
    in numpy."""
    n = ch.shape[1]
    env = np.zeros(n, dtype=np.float32)
    for c in range(ch.shape[0]):
        mono = np.ascontiguousarray(ch[c], dtype=np.float32)
        np.maximum(env, np.abs(mono), out=env)
        stream = soxr.ResampleStream(sr, sr * OVERSAMPLE, 1, dtype="float32", quality="HQ")
        pos = 0  # input samples whose 4 oversampled values have been folded into env
        carry = np.zeros(0, dtype=np.float32)
        for start in range(0, n, _CHUNK):
            chunk = mono[start : start + _CHUNK]
            up = stream.resample_chunk(chunk, last=start + _CHUNK >= n)
            up = np.abs(np.concatenate([carry, up])) if carry.size else np.abs(up)
            whole = min(up.size // OVERSAMPLE, n - pos)
            body = up[: whole * OVERSAMPLE]
            peaks = np.maximum(np.maximum(body[0::4], body[1::4]), np.maximum(body[2::4], body[3::4]))
            np.maximum(env[pos : pos + whole], peaks, out=env[pos : pos + whole])
            pos += whole
            carry = up[whole * OVERSAMPLE :]
    return env


def true_peak(x: np.ndarray, sr: int) -> float:
    """True peak in dBTP (4x oversampled, all channels); -inf for silence."""
    env = _oversampled_peaks(_as_channels(x), sr)
    peak = float(env.max()) if env.size else 0.0
    return float(20.0 * np.log10(peak)) if peak > 0 else float("-inf")


def measure_loudness(x: np.ndarray, sr: int) -> tuple[float, float]:
    """(integrated loudness in LUFS, true peak in dBTP) of mono `(n,)` or `(channels, n)` audio."""
    return integrated_loudness(x, sr), true_peak(x, sr)


# ---------------------------------------------------------------------------------------------------------
# Look-ahead true-peak limiter, vectorised.
#
# Gain reduction is computed in dB per sample from the oversampled peak envelope, then shaped without any
# per-sample Python loop:
#   release: the reduction in dB decays exponentially (time constant `release_s`, so recovery time does not
#            grow with depth), i.e. att[n] = max(req[n], att[n-1]*exp(-1/(release_s*sr))). In log(att) that
#            is max(log req[n], log att[n-1] - lam), whose solution is cummax(log req[k] + lam*k) - lam*n.
#   attack:  a forward running max over the look-ahead window followed by a moving average of the same
#            length; every averaged value comes from a window that contains n, so the result is never below
#            what sample n needs, and the gain ramps down over the look-ahead instead of jumping.
# Channels are linked (one gain for all) so the stereo/5.1 image does not shift.


@dataclass(frozen=True)
class LimiterOptions:
    lookahead_s: float = 0.005
    release_s: float = 0.05  # time constant of the exponential recovery of the reduction (in dB)


def _running_max_forward(a: np.ndarray, w: int) -> np.ndarray:
    """out[i] = max(a[i:i+w]) (van Herk/Gil-Werman, O(n)); a beyond the end counts as 0."""
    if w <= 1:
        return a.copy()
    n = a.size
    nb = -(-(n + w) // w)
    padded = np.zeros(nb * w)
    padded[:n] = a
    blocks = padded.reshape(nb, w)
    prefix = np.maximum.accumulate(blocks, axis=1).ravel()
    suffix = np.maximum.accumulate(blocks[:, ::-1], axis=1)[:, ::-1].ravel()
    idx = np.arange(n)
    return np.maximum(suffix[idx], prefix[idx + w - 1])


def _moving_average_backward(a: np.ndarray, w: int) -> np.ndarray:
    """out[i] = mean(a[i-w+1 : i+1]), the start padded with a[0]."""
    if w <= 1:
        return a.copy()
    padded = np.concatenate([np.full(w - 1, a[0]), a])
    c = np.concatenate([[0.0], np.cumsum(padded)])
    return (c[w:] - c[:-w]) / w


def limiter_gain(
    x: np.ndarray, sr: int, ceiling_db: float, opts: LimiterOptions = LimiterOptions()
) -> np.ndarray:
    """Per-sample linear gain (n,) keeping the 4x-oversampled peak of `x * gain` at or below `ceiling_db`."""
    ch = _as_channels(x)
    env = _oversampled_peaks(ch, sr)
    ceiling = 10.0 ** (ceiling_db / 20.0)
    with np.errstate(divide="ignore"):
        req = np.maximum(0.0, 20.0 * np.log10(np.maximum(env, 1e-12) / ceiling))
    if not np.any(req > 0):
        return np.ones(ch.shape[1])
    k = np.arange(req.size, dtype=np.float64)
    lam = 1.0 / (opts.release_s * sr)
    with np.errstate(divide="ignore"):
        log_req = np.log(req)  # -inf where nothing is needed
    att = np.exp(np.maximum.accumulate(log_req + lam * k) - lam * k)
    w = max(1, round(opts.lookahead_s * sr))
    att = _moving_average_backward(_running_max_forward(att, w), w)
    return 10.0 ** (-np.maximum(att, req) / 20.0)


def limit(x: np.ndarray, sr: int, ceiling_db: float, opts: LimiterOptions = LimiterOptions()) -> np.ndarray:
    g = limiter_gain(x, sr, ceiling_db, opts).astype(np.float32)
    return (np.asarray(x, dtype=np.float32) * g).astype(np.float32)


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


def normalize_report(
    x: np.ndarray, sr: int, target_lufs: float = -23.0, max_true_peak: float = -1.0
) -> tuple[np.ndarray, NormalizeReport]:
    """normalize_loudness plus what it did (for the run report)."""
    x = np.asarray(x, dtype=np.float32)
    lufs_in, tp_in = measure_loudness(x, sr)
    if not np.isfinite(lufs_in):
        # Silence, or shorter than one gating block: nothing to measure, so only enforce the ceiling.
        y = x.copy()
        if np.isfinite(tp_in) and tp_in > max_true_peak:
            y *= np.float32(10.0 ** ((max_true_peak - tp_in) / 20.0))
        tp = true_peak(y, sr)
        return y, NormalizeReport(lufs_in, tp_in, lufs_in, tp, 0.0, False, 0.0, False)

    gain_db = target_lufs - lufs_in
    if tp_in + gain_db <= max_true_peak - 0.001:
        # Plain gain is enough. Loudness and true peak both scale exactly with gain, so only the loudness
        # is re-measured (the -70 LUFS absolute gate could in principle move a block in or out).
        y = (x * np.float32(10.0 ** (gain_db / 20.0))).astype(np.float32)
        lufs, tp = integrated_loudness(y, sr), tp_in + gain_db
        return y, NormalizeReport(
            lufs_in, tp_in, lufs, tp, gain_db, False, 0.0, abs(lufs - target_lufs) <= 0.5
        )

    margin = 0.1  # aim the limiter slightly under the ceiling: its own gain changes add inter-sample peaks
    max_red = 0.0
    y = x
    lufs = tp = float("nan")
    for _ in range(6):
        y = x * np.float32(10.0 ** (gain_db / 20.0))
        g = limiter_gain(y, sr, max_true_peak - margin)
        max_red = float(-20.0 * np.log10(g.min()))
        y = (y * g.astype(np.float32)).astype(np.float32)
        lufs, tp = measure_loudness(y, sr)
        if tp > max_true_peak:
            margin += tp - max_true_peak + 0.05
        if abs(lufs - target_lufs) <= 0.1 and tp <= max_true_peak:
            break
        gain_db += target_lufs - lufs  # make-up for what the limiter took
    if tp > max_true_peak:  # last resort: a uniform trim always meets the ceiling
        y = y * np.float32(10.0 ** ((max_true_peak - tp - 0.01) / 20.0))
        lufs, tp = measure_loudness(y, sr)
    y = np.asarray(y, dtype=np.float32)
    report = NormalizeReport(
        input_lufs=lufs_in,
        input_true_peak=tp_in,
        output_lufs=lufs,
        output_true_peak=tp,
        gain_db=gain_db,
        limited=True,
        max_reduction_db=max_red,
        on_target=abs(lufs - target_lufs) <= 0.5,
    )
    return y, report


def normalize_loudness(
    x: np.ndarray, sr: int, target_lufs: float = -23.0, max_true_peak: float = -1.0
) -> np.ndarray:
    """Gain to `target_lufs` (integrated), limiting peaks so the true peak stays <= `max_true_peak` dBTP."""
    return normalize_report(x, sr, target_lufs, max_true_peak)[0]


# ---------------------------------------------------------------------------------------------------------
# Per-line leveling


def _kweighted_loudness(x: np.ndarray, sr: int) -> float:
    """Ungated K-weighted loudness over the whole clip (the fallback for clips too short to gate)."""
    data = _bs1770_channels(x)
    meter = pyloudnorm.Meter(sr)
    # pyloudnorm's own K-weighting stages, so both paths weight identically.
    for stage in meter._filters.values():
        for c in range(data.shape[1]):
            data[:, c] = stage.apply_filter(data[:, c])
    gains = np.array([1.0, 1.0, 1.0, 1.41, 1.41])[: data.shape[1]]
    ms = float(np.sum(np.mean(np.square(data), axis=0) * gains))
    return -0.691 + 10.0 * np.log10(ms) if ms > 0 else float("-inf")


def _trim_silence(x: np.ndarray, threshold: float = 1e-3) -> np.ndarray:
    ch = _as_channels(x)
    loud = np.flatnonzero(np.max(np.abs(ch), axis=0) > threshold)
    if loud.size == 0:
        return ch[:, :0]
    return ch[:, loud[0] : loud[-1] + 1]


def line_loudness(x: np.ndarray, sr: int) -> float:
    """Loudness of one synthesized line: gated BS.1770 when the line is long enough, else (or when gating
    leaves nothing) the ungated K-weighted level of the line with leading/trailing silence trimmed."""
    value = integrated_loudness(x, sr)
    if np.isfinite(value):
        return value
    core = _trim_silence(x)
    if core.shape[1] == 0:
        return float("-inf")
    return _kweighted_loudness(core, sr)


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
