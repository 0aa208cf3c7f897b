"""Euler time grids for the s2mel CFM (issue 5, item 4): the number of steps and the grid are preset options.

- "uniform": the original's grid, `torch.linspace(0, 1, steps + 1)` value for value in float32 (checked for
  1..300 steps). torch fills the first half of a linspace from the start and the second half from the end
  (start + i*step, end - (n-1-i)*step, the latter fused); reproducing that keeps a uniform run
  bit-identical to the original's at any step count.
- "sway": F5-TTS sway sampling t + s (cos(pi t / 2) - 1 + t) applied to the uniform grid; the default
  s = -1 gives 1 - cos(pi t / 2), i.e. denser steps near t = 0 where the flow changes fastest.

No torch import: the ONNX Runtime path uses these grids too.
"""

from __future__ import annotations

import numpy as np

SCHEDULES = ("uniform", "sway")
DEFAULT_SWAY = -1.0


def uniform_grid(steps: int) -> np.ndarray:
    """(steps + 1,) float32, equal to torch.linspace(0, 1, steps + 1) element for element."""
    if steps < 1:
        raise ValueError(f"s2mel steps must be >= 1, got {steps}")
    n = steps + 1
    step = np.float32(1.0) / np.float32(steps)
    idx = np.arange(n)
    head = np.float32(0.0) + step * idx.astype(np.float32)
    # torch's vectorised CPU kernel forms the second half with a fused multiply-add (one rounding of
    # 1 - step * k); float64 holds step * k and the difference exactly, so rounding once to float32 is it.
    tail = (1.0 - step.astype(np.float64) * (n - 1 - idx)).astype(np.float32)
    return np.where(idx < n // 2, head, tail).astype(np.float32)


def sway_grid(steps: int, coef: float = DEFAULT_SWAY) -> np.ndarray:
    """(steps + 1,) float32 sway grid; coef = 0 gives the uniform grid, coef < 0 crowds steps near t = 0."""
    t = uniform_grid(steps).astype(np.float64)
    out = t + coef * (np.cos(np.pi / 2 * t) - 1.0 + t)
    # exact end points whatever the rounding of the cosine
    out[0], out[-1] = 0.0, 1.0
    return out.astype(np.float32)


def euler_times(steps: int, schedule: str = "uniform", *, sway_coef: float = DEFAULT_SWAY) -> np.ndarray:
    """The (steps + 1,) float32 time points of an Euler run from t = 0 to 1."""
    if schedule == "uniform":
        return uniform_grid(steps)
    if schedule == "sway":
        return sway_grid(steps, sway_coef)
    raise ValueError(f"unknown s2mel schedule {schedule!r} (known: {', '.join(SCHEDULES)})")


def step_times(times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(t fed at each step, dt of each step), float32, exactly as the original's Euler loop forms them:
    dt = t_span[k] - t_span[k-1], and t is ACCUMULATED (t += dt), not read from the grid."""
    times = np.asarray(times, np.float32)
    dts = (times[1:] - times[:-1]).astype(np.float32)
    ts = np.empty_like(dts)
    t = np.float32(times[0])
    for k, dt in enumerate(dts):
        ts[k] = t
        t = np.float32(t + dt)
    return ts, dts
