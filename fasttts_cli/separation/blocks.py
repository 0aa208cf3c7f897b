"""Where each block of a long separation starts and ends, and how neighbouring blocks are cross-faded.

A film is separated block by block so memory stays at one block whatever its length. Demucs itself cuts its
input into segments (`apply_model(split=True)`: `segment` seconds, one every `stride = (1 - overlap) *
segment`, triangle-weighted where they overlap). Block k keeps the frames `[k*block, (k+1)*block)` and is fed
`context` frames more on each side. Both `block` and `context` are whole multiples of that stride, so the
segments Demucs places inside a block fall on the very grid a one-pass separation of the whole file uses:
away from the block's own edges (more than a segment in) a frame is computed from the same segments of the
same samples, and the block-by-block result equals the one-pass one to float rounding. `context` is at least
a segment plus the cross-fade, so the cross-fades lie entirely in that region.

Each block's stems are stored over `[start - fade, stop + fade)`; at each inner boundary the two blocks are
cross-faded linearly over `2 * fade` frames (weights summing to one), which hides any residual difference
where the grid cannot be kept (a model whose segment does not divide evenly, a bag of models).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BlockPlan:
    """Block geometry over a source of `n` frames (n may be unknown while streaming: None)."""

    block: int  # frames each block keeps (a multiple of `stride`)
    context: int  # frames fed to the model beyond each side of the kept range (a multiple of `stride`)
    fade: int  # half-width of the cross-fade at each inner boundary
    stride: int  # Demucs' segment stride

    def kept(self, k: int, n: int) -> tuple[int, int]:
        return k * self.block, min(n, (k + 1) * self.block)

    def stored(self, k: int, n: int) -> tuple[int, int]:
        """The frames block k's stems are kept for: its own range and a fade's length into each neighbour."""
        s, e = self.kept(k, n)
        return max(0, s - self.fade), min(n, e + self.fade)

    def model_input(self, k: int, n: int) -> tuple[int, int]:
        s, e = self.kept(k, n)
        return max(0, s - self.context), min(n, e + self.context)

    def count(self, n: int) -> int:
        return math.ceil(n / self.block) if n > 0 else 0

    def to_json(self) -> dict[str, int]:
        return {"block": self.block, "context": self.context, "fade": self.fade, "stride": self.stride}


def plan_blocks(segment: int, overlap: float, *, strides: int, fade: int) -> BlockPlan:
    """A BlockPlan for a model whose segment is `segment` frames, Demucs' `overlap`, blocks of `strides`
    strides and a cross-fade of `fade` frames each side of a boundary."""
    stride = int((1 - overlap) * segment)  # exactly as demucs.apply.apply_model computes it
    if stride < 1 or strides < 1:
        raise ValueError(f"block plan: stride {stride}, strides {strides}: both must be >= 1")
    block = strides * stride
    fade = max(0, min(fade, block // 2))
    context = math.ceil((segment + fade) / stride) * stride
    return BlockPlan(block, context, fade, stride)


def weight(plan: BlockPlan, k: int, n: int, start: int, stop: int) -> np.ndarray:
    """Block k's cross-fade weight over frames [start, stop): 1 inside its range, a linear ramp over
    `[boundary - fade, boundary + fade)` at each inner boundary, 0 outside what it stores. The weights of
    neighbouring blocks sum to 1 at every frame."""
    t = np.arange(start, stop, dtype=np.float64)
    s, e = plan.kept(k, n)
    w = np.ones_like(t)
    f = plan.fade
    if f > 0:
        if k > 0:
            w = np.minimum(w, np.clip((t - (s - f) + 0.5) / (2 * f), 0.0, 1.0))
        if e < n:
            w = np.minimum(w, np.clip(((e + f) - t - 0.5) / (2 * f), 0.0, 1.0))
    else:
        w[(t < s) | (t >= e)] = 0.0
    return w.astype(np.float32)


def assemble(plan: BlockPlan, n: int, k: int, read: Callable[[int], np.ndarray]) -> tuple[int, np.ndarray]:
    """The final stems over block k's kept range: its stored stems cross-faded with its neighbours'.
    `read(j)` gives block j's stored array `(..., stored length)`. Returns (start frame, array)."""
    s, e = plan.kept(k, n)
    out: np.ndarray | None = None
    for j in (k - 1, k, k + 1):
        if j < 0 or j >= plan.count(n):
            continue
        a, b = plan.stored(j, n)
        lo, hi = max(a, s), min(b, e)
        if hi <= lo:
            continue
        w = weight(plan, j, n, lo, hi)
        if not w.any():
            continue
        part = read(j)[..., lo - a : hi - a] * w
        if out is None:
            out = np.zeros((*part.shape[:-1], e - s), dtype=np.float32)
        out[..., lo - s : hi - s] += part
    assert out is not None, f"block {k} of {plan.count(n)} has no stems"
    return s, out
