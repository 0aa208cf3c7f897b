"""The look-ahead true-peak limiter (`LimiterStream`), vectorised per block, and its one-shot form `limit`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttts_cli.audio.loudness_meter import PeakEnvelope, as_channels

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
        ch = as_channels(x)
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
    ch = as_channels(x)
    return LimiterStream(sr, ch.shape[0], ceiling_db, opts).push(ch, last=True)[1]


def limit(x: np.ndarray, sr: int, ceiling_db: float, opts: LimiterOptions = LimiterOptions()) -> np.ndarray:
    ch = as_channels(x)
    y = LimiterStream(sr, ch.shape[0], ceiling_db, opts).push(ch, last=True)[0]
    return y.reshape(np.shape(x))
