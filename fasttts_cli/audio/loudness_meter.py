"""Loudness and true peak per ITU-R BS.1770 / EBU R128, measured as a stream.

- Integrated loudness (`LoudnessMeter`): K-weighting with pyloudnorm's filter coefficients, run through
  scipy's lfilter with its state carried from block to block; mean squares per 100 ms hop, so the 400 ms
  gating blocks with 75 % overlap are sums of four hops whatever the block size; -70 LUFS absolute and
  -10 LU relative gates. Block placement follows pyloudnorm (its block count, a partial last block), so the
  result equals pyloudnorm's within float rounding.
- True peak (`PeakEnvelope`): the signal oversampled 4x (soxr HQ, the BS.1770 Annex 2 method) as a soxr
  stream, whose output equals a one-shot resample bit for bit, so block edges change nothing.
- One line's level (`line_loudness`): gated when the line is long enough, else ungated on its trimmed core.
"""

from __future__ import annotations

import functools

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


def as_channels(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x[None, :] if x.ndim == 1 else x


def bs1770_select(channels: int) -> tuple[list[int], np.ndarray]:
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
        self.sel, self.gains = bs1770_select(channels)
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
        x = as_channels(block)
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
    ch = as_channels(x)
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
        ch = as_channels(x)
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
    ch = as_channels(x)
    m = TruePeakMeter(sr, ch.shape[0])
    m.add(ch, last=True)
    return m.dbtp()


def measure_loudness(x: np.ndarray, sr: int) -> tuple[float, float]:
    """(integrated loudness in LUFS, true peak in dBTP) of mono `(n,)` or `(channels, n)` audio."""
    return integrated_loudness(x, sr), true_peak(x, sr)


def _kweighted_loudness(x: np.ndarray, sr: int) -> float:
    """Ungated K-weighted loudness over the whole clip (the fallback for clips too short to gate)."""
    ch = as_channels(x)
    sel, gains = bs1770_select(ch.shape[0])
    # The meter's own K-weighting, so both paths weight identically.
    data = KWeighting(sr, len(sel))(ch[sel])
    ms = float(np.sum(np.mean(np.square(data), axis=1) * gains))
    return -0.691 + 10.0 * np.log10(ms) if ms > 0 else float("-inf")


def _trim_silence(x: np.ndarray, threshold: float = 1e-3) -> np.ndarray:
    ch = as_channels(x)
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
