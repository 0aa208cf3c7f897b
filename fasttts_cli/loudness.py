"""Loudness per ITU-R BS.1770 / EBU R128: measure, normalize under a true-peak ceiling, level lines.

Everything here streams: a feature-length mix is measured and normalized block by block with bounded
memory, and the in-memory functions (`measure_loudness`, `normalize_loudness`, `limit`, ...) are the same
code run over one block.

- Integrated loudness (`LoudnessMeter`): K-weighting with pyloudnorm's filter coefficients, run through
  scipy's lfilter with its state carried from block to block; mean squares per 100 ms hop, so the 400 ms
  gating blocks with 75 % overlap are sums of four hops whatever the block size; -70 LUFS absolute and
  -10 LU relative gates. Block placement follows pyloudnorm (its block count, a partial last block), so the
  result equals pyloudnorm's within float rounding.
- True peak (`PeakEnvelope`): the signal oversampled 4x (soxr HQ, the BS.1770 Annex 2 method) as a soxr
  stream, whose output equals a one-shot resample bit for bit, so block edges change nothing.
- Normalization: when gain to the target would push the true peak over the ceiling, a look-ahead peak
  limiter (`LimiterStream`) runs on the gained signal instead of lowering the whole programme, with make-up
  gain until the result measures within 0.1 LU of the target; a final uniform trim guarantees the ceiling
  even for signals that cannot be limited that far (the loudness then falls short and the report says so).
  Each attempt is a pass over the source; the output is produced by one final pass into a sink, so no
  intermediate copy of the programme is ever held.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyloudnorm
import scipy.signal
import soxr

BLOCK_S = 0.4  # BS.1770 gating block
HOP_S = 0.1  # gating blocks overlap by 75 %: they start every 100 ms
OVERSAMPLE = 4  # PeakEnvelope folds exactly four output samples per input sample
_CHUNK = 1 << 16  # frames per soxr call in PeakEnvelope
ABS_GATE = -70.0
REL_GATE = -10.0
_SURROUND_GAIN = 1.41  # BS.1770 weight of the surround channels


def _as_channels(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x[None, :] if x.ndim == 1 else x


def _bs1770_select(channels: int) -> tuple[list[int], np.ndarray]:
    """Which channels BS.1770 measures, in the order L, R, C, Ls, Rs, and their weights. ffmpeg's 5.1 order
    is FL FR FC LFE (B|S)L (B|S)R: the LFE is not measured."""
    if channels == 6:
        sel = [0, 1, 2, 4, 5]
    elif channels <= 5:
        sel = list(range(channels))
    else:
        raise ValueError(f"loudness of {channels} channels is not supported (mono to 5.1)")
    gains = np.array([1.0, 1.0, 1.0, _SURROUND_GAIN, _SURROUND_GAIN])[: len(sel)]
    return sel, gains


@functools.cache
def _k_stages(sr: int) -> tuple[tuple[np.ndarray, np.ndarray, float], ...]:
    """pyloudnorm's K-weighting biquads for `sr` (high shelf, then high pass): (b, a, passband gain)."""
    return tuple(
        (np.asarray(f.b, dtype=np.float64), np.asarray(f.a, dtype=np.float64), float(f.passband_gain))
        for f in pyloudnorm.Meter(sr)._filters.values()
    )


class KWeighting:
    """The K-weighting filter as a stream over `(channels, m)` blocks (filter state carried), one channel at
    a time so the float64 intermediates are one channel of one block."""

    def __init__(self, sr: int, channels: int) -> None:
        self.stages = _k_stages(sr)
        self.zi = [[np.zeros(max(len(a), len(b)) - 1) for b, a, _ in self.stages] for _ in range(channels)]

    def channel(self, c: int, x: np.ndarray) -> np.ndarray:
        y = np.asarray(x, dtype=np.float64)
        for k, (b, a, gain) in enumerate(self.stages):
            y, self.zi[c][k] = scipy.signal.lfilter(b, a, y, zi=self.zi[c][k])
            if gain != 1.0:
                y = gain * y
        return y

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.stack([self.channel(c, row) for c, row in enumerate(np.atleast_2d(x))])


class LoudnessMeter:
    """Streaming BS.1770-4 integrated loudness: `add` blocks of `(channels, m)` (or mono `(m,)`) audio in
    order, then `integrated()`. Memory: one float per channel per 100 ms of programme."""

    def __init__(self, sr: int, channels: int) -> None:
        self.sr = sr
        self.sel, self.gains = _bs1770_select(channels)
        self.kw = KWeighting(sr, len(self.sel))
        self.n = 0  # samples seen
        self._hops = np.zeros((64, len(self.sel)))  # rows [0, _nh): sum of squares per channel per hop
        self._nh = 0  # completed hops
        self._acc = np.zeros(len(self.sel))  # the hop in progress

    def _bound(self, k: int) -> int:
        """First sample of hop k (exact for every rate divisible by 10)."""
        return k * self.sr // 10

    def _append(self, rows: np.ndarray) -> None:
        need = self._nh + rows.shape[0]
        if need > self._hops.shape[0]:
            grown = np.zeros((max(need, 2 * self._hops.shape[0]), self._hops.shape[1]))
            grown[: self._nh] = self._hops[: self._nh]
            self._hops = grown
        self._hops[self._nh : need] = rows
        self._nh = need

    def add(self, block: np.ndarray) -> None:
        x = _as_channels(block)
        m = x.shape[1]
        if m == 0:
            return
        pos, end = self.n, self.n + m
        # hop boundaries in (pos, end], relative to the block
        last_k = (10 * (end + 1) - 1) // self.sr
        cuts = [self._bound(k) - pos for k in range(self._nh + 1, last_k + 1)]
        idx = [0, *(c for c in cuts if c < m)]
        seg = np.empty((len(self.sel), len(idx)))  # column i: energy of samples idx[i]:idx[i+1]
        for row, c in enumerate(self.sel):
            y = self.kw.channel(row, x[c])
            seg[row] = np.add.reduceat(y * y, idx)
        self.n = end
        if not cuts:
            self._acc = self._acc + seg[:, 0]
            return
        done = seg[:, : len(cuts)].T.copy()
        done[0] += self._acc
        self._append(done)
        self._acc = seg[:, len(cuts)].copy() if len(idx) > len(cuts) else np.zeros(len(self.sel))

    def integrated(self) -> float:
        """Gated integrated loudness in LUFS; -inf for silence or less than one 400 ms block."""
        if self.n < BLOCK_S * self.sr:
            return float("-inf")
        # pyloudnorm's block count; blocks reaching past the end take what is there (a partial block).
        seconds = self.n / self.sr
        nb = int(np.round((seconds - BLOCK_S) / (BLOCK_S * (1.0 - 0.75)))) + 1
        hops = np.zeros((nb + 3, len(self.sel)))
        k = min(self._nh, hops.shape[0])
        hops[:k] = self._hops[:k]
        if self._nh < hops.shape[0]:
            hops[self._nh] = self._acc  # the partial last hop
        z = (hops[0:nb] + hops[1 : nb + 1] + hops[2 : nb + 2] + hops[3 : nb + 3]) / (BLOCK_S * self.sr)
        power = z @ self.gains  # channel-weighted mean square per gating block
        with np.errstate(divide="ignore"):
            level = -0.691 + 10.0 * np.log10(power)
        above_abs = level >= ABS_GATE
        if not np.any(above_abs):
            return float("-inf")
        rel = -0.691 + 10.0 * np.log10(np.mean(power[above_abs])) + REL_GATE
        gated = (level > rel) & (level > ABS_GATE)
        if not np.any(gated):
            return float("-inf")
        value = -0.691 + 10.0 * np.log10(np.mean(power[gated]))
        return float(value) if np.isfinite(value) else float("-inf")


def integrated_loudness(x: np.ndarray, sr: int) -> float:
    """Gated integrated loudness in LUFS; -inf for silence or audio shorter than one 400 ms block."""
    ch = _as_channels(x)
    meter = LoudnessMeter(sr, ch.shape[0])
    meter.add(ch)
    return meter.integrated()


class PeakEnvelope:
    """Per input sample, the largest |value| among the sample and its 4x-oversampled neighbours, max over
    channels, as a stream: `push` returns the envelope of the samples whose oversampled values are out of
    soxr so far (it lags the input by the resampler's delay); `last=True` flushes the rest.

    One soxr stream per channel (identical streams yield identical counts), fed in chunks of `_CHUNK`
    frames so the 4x intermediate stays small whatever the block size."""

    def __init__(self, sr: int, channels: int) -> None:
        self.channels = channels
        self._rs = [
            soxr.ResampleStream(sr, sr * OVERSAMPLE, 1, dtype="float32", quality="HQ")
            for _ in range(channels)
        ]
        self._pending = np.zeros(0, dtype=np.float32)  # |x| of samples still waiting for their oversamples
        self._carry = np.zeros(0, dtype=np.float32)  # oversampled values past the last whole input sample

    def _fold(self, ch: np.ndarray, last: bool) -> np.ndarray:
        up = None
        for c, rs in enumerate(self._rs):
            u = np.abs(rs.resample_chunk(np.ascontiguousarray(ch[c]), last=last))
            up = u if up is None else np.maximum(up, u, out=up)
        assert up is not None
        if self._carry.size:
            up = np.concatenate([self._carry, up])
        whole = min(up.size // OVERSAMPLE, self._pending.size)
        body = up[: whole * OVERSAMPLE]
        # strided maxima instead of a reduction over a small axis, which is slow in numpy
        peaks = np.maximum(np.maximum(body[0::4], body[1::4]), np.maximum(body[2::4], body[3::4]))
        env = np.maximum(self._pending[:whole], peaks)
        self._pending, self._carry = self._pending[whole:], up[whole * OVERSAMPLE :]
        return env

    def push(self, x: np.ndarray, last: bool = False) -> np.ndarray:
        ch = _as_channels(x)
        out = []
        n = ch.shape[1]
        for start in range(0, max(n, 1), _CHUNK):
            part = ch[:, start : start + _CHUNK]
            here = np.abs(part).max(axis=0) if self.channels > 1 else np.abs(part[0])
            self._pending = np.concatenate([self._pending, here]) if self._pending.size else here
            out.append(self._fold(part, last and start + _CHUNK >= n))
        if last:  # samples soxr produced nothing for (never in practice) keep their own |x|
            out.append(self._pending)
            self._pending = self._pending[:0]
        return np.concatenate(out) if len(out) > 1 else out[0]


class TruePeakMeter:
    """Streaming true peak (4x oversampled, all channels)."""

    def __init__(self, sr: int, channels: int) -> None:
        self.env = PeakEnvelope(sr, channels)
        self.peak = 0.0

    def add(self, block: np.ndarray, last: bool = False) -> None:
        e = self.env.push(block, last)
        if e.size:
            self.peak = max(self.peak, float(e.max()))

    def dbtp(self) -> float:
        return float(20.0 * np.log10(self.peak)) if self.peak > 0 else float("-inf")


def _oversampled_peaks(ch: np.ndarray, sr: int) -> np.ndarray:
    """The whole PeakEnvelope of `(channels, n)` audio in one call."""
    return PeakEnvelope(sr, ch.shape[0]).push(ch, last=True)


def true_peak(x: np.ndarray, sr: int) -> float:
    """True peak in dBTP (4x oversampled, all channels); -inf for silence."""
    ch = _as_channels(x)
    m = TruePeakMeter(sr, ch.shape[0])
    m.add(ch, last=True)
    return m.dbtp()


def measure_loudness(x: np.ndarray, sr: int) -> tuple[float, float]:
    """(integrated loudness in LUFS, true peak in dBTP) of mono `(n,)` or `(channels, n)` audio."""
    return integrated_loudness(x, sr), true_peak(x, sr)


# ---------------------------------------------------------------------------------------------------------
# Look-ahead true-peak limiter, vectorised per block.
#
# Gain reduction is computed in dB per sample from the oversampled peak envelope, then shaped without any
# per-sample Python loop:
#   release: the reduction in dB decays exponentially (time constant `release_s`, so recovery time does not
#            grow with depth), i.e. att[n] = max(req[n], att[n-1]*exp(-1/(release_s*sr))). In log(att) that
#            is max(log req[n], log att[n-1] - lam), whose solution over a block starting at s is
#            cummax(log req[s+i] + lam*i) - lam*i, with the carried log att[s-1] - lam folded into i = 0.
#   attack:  a forward running max over the look-ahead window followed by a moving average of the same
#            length; every averaged value comes from a window that contains n, so the result is never below
#            what sample n needs, and the gain ramps down over the look-ahead instead of jumping. The
#            running max needs w-1 samples of the future and the average w-1 of the past: the stream holds
#            them back across block edges, so the gains do not depend on the block size.
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


class LimiterStream:
    """The look-ahead limiter as a stream: `push(x)` takes `(channels, m)` float32 blocks in order and
    returns `(y, g)` for the samples whose gain is settled (lagging the input by the look-ahead and the
    oversampler's delay); `last=True` returns the rest. `y` = x * g in float32, g the linear gain."""

    def __init__(self, sr: int, channels: int, ceiling_db: float, opts: LimiterOptions = LimiterOptions()):
        self.env = PeakEnvelope(sr, channels)
        self.ceiling = 10.0 ** (ceiling_db / 20.0)
        self.lam = 1.0 / (opts.release_s * sr)
        self.w = max(1, round(opts.lookahead_s * sr))
        self._log_att = float("-inf")  # log of the released reduction at the last sample
        self._att = np.zeros(0)  # released reduction (dB) of samples waiting for their look-ahead
        self._req = np.zeros(0)  # required reduction (dB) of the same samples
        self._hist: np.ndarray | None = None  # last w-1 running maxima, for the moving average
        self._x = np.zeros((channels, 0), dtype=np.float32)  # input waiting for its gain

    def push(self, x: np.ndarray, last: bool = False) -> tuple[np.ndarray, np.ndarray]:
        ch = _as_channels(x)
        self._x = np.concatenate([self._x, ch], axis=1) if self._x.shape[1] else ch
        env = self.env.push(ch, last)
        with np.errstate(divide="ignore"):
            req = np.maximum(0.0, 20.0 * np.log10(np.maximum(env, 1e-12) / self.ceiling))
            log_req = np.log(req)  # -inf where nothing is needed
        if req.size:
            i = np.arange(req.size, dtype=np.float64)
            v = log_req + self.lam * i
            v[0] = max(v[0], self._log_att - self.lam)
            log_att = np.maximum.accumulate(v) - self.lam * i
            self._log_att = float(log_att[-1])
            att = np.exp(log_att)
        else:
            att = req
        a = np.concatenate([self._att, att])
        r = np.concatenate([self._req, req])
        w = self.w
        if last:
            rm = _running_max_forward(a, w)
        else:
            k = max(0, a.size - (w - 1))
            rm = _running_max_forward(a, w)[:k] if k else a[:0]
        self._att, self._req = a[rm.size :], r[rm.size :]
        if w > 1 and rm.size:
            if self._hist is None:
                self._hist = np.full(w - 1, rm[0])  # the average's start is padded with the first value
            p = np.concatenate([self._hist, rm])
            c = np.concatenate([[0.0], np.cumsum(p)])
            avg = (c[w:] - c[:-w]) / w
            self._hist = p[-(w - 1) :]
        else:
            avg = rm
        g = 10.0 ** (-np.maximum(avg, r[: rm.size]) / 20.0)
        y = (self._x[:, : g.size] * g.astype(np.float32)).astype(np.float32)
        self._x = self._x[:, g.size :]
        return y, g


def limiter_gain(
    x: np.ndarray, sr: int, ceiling_db: float, opts: LimiterOptions = LimiterOptions()
) -> np.ndarray:
    """Per-sample linear gain (n,) keeping the 4x-oversampled peak of `x * gain` at or below `ceiling_db`."""
    ch = _as_channels(x)
    return LimiterStream(sr, ch.shape[0], ceiling_db, opts).push(ch, last=True)[1]


def limit(x: np.ndarray, sr: int, ceiling_db: float, opts: LimiterOptions = LimiterOptions()) -> np.ndarray:
    ch = _as_channels(x)
    y = LimiterStream(sr, ch.shape[0], ceiling_db, opts).push(ch, last=True)[0]
    return y.reshape(np.shape(x))


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
        self.data = _as_channels(x)
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


# ---------------------------------------------------------------------------------------------------------
# Per-line leveling


def _kweighted_loudness(x: np.ndarray, sr: int) -> float:
    """Ungated K-weighted loudness over the whole clip (the fallback for clips too short to gate)."""
    ch = _as_channels(x)
    sel, gains = _bs1770_select(ch.shape[0])
    # The meter's own K-weighting, so both paths weight identically.
    data = KWeighting(sr, len(sel))(ch[sel])
    ms = float(np.sum(np.mean(np.square(data), axis=1) * gains))
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
