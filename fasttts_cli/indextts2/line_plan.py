"""A line's plan (its GPT codes) packed for the plan cache, and a target length split over its segments.

An IndexTTS-2 line is spoken as segments joined by a fixed gap of silence. Rendered to `F * hop`
samples, each segment gets frames in proportion to its natural frames (at least one), the gaps keep the
segment gap, and what is left below one frame (< hop samples) goes into the last gap, so the total is
exactly F * hop. Pure integer arithmetic: the split never depends on a float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SegmentCodes:
    """The plan phase's result for one line: each segment's codes and whether it ended on a stop code."""

    codes: list[np.ndarray]
    stopped: list[bool]

    def payload(self) -> np.ndarray:
        """Every segment's codes end to end, int32 (the plan cache's payload)."""
        return np.concatenate([np.asarray(c).reshape(-1) for c in self.codes]).astype(np.int32)

    def info(self) -> dict[str, Any]:
        """JSON-able: the code count of each segment and its stop flag."""
        return {"segments": [int(np.asarray(c).size) for c in self.codes], "stopped": list(self.stopped)}

    @classmethod
    def unpack(cls, payload: np.ndarray, info: dict[str, Any]) -> SegmentCodes:
        """The inverse of payload()/info(); ValueError when they do not fit together."""
        counts = [int(n) for n in info.get("segments", [])]
        stopped = [bool(s) for s in info.get("stopped", [True] * len(counts))]
        flat = np.asarray(payload).reshape(-1)
        if not counts or len(stopped) != len(counts) or min(counts) < 1 or sum(counts) != flat.size:
            raise ValueError(
                f"the plan's codes ({flat.size}) do not fit its segments {counts} / stop flags {stopped}"
            )
        bounds = np.cumsum(counts)[:-1]
        return cls([c.astype(np.int64) for c in np.split(flat, bounds)], stopped)


@dataclass(frozen=True)
class SegmentSplit:
    """A line's target length over its segments: mel frames per segment, gap samples between them."""

    frames: list[int]
    gaps: list[int]

    def samples(self, hop: int) -> int:
        return hop * sum(self.frames) + sum(self.gaps)


def natural_split(natural_frames: Sequence[int], gap: int) -> SegmentSplit:
    """The line at its natural pace: every segment's own frames, every gap the segment gap."""
    return SegmentSplit([int(f) for f in natural_frames], [gap] * (len(natural_frames) - 1))


def split_target(frames: int, natural_frames: Sequence[int], hop: int, gap: int) -> SegmentSplit:
    """`frames * hop` samples over segments whose natural lengths are `natural_frames` (see the module
    docstring); ValueError when the target cannot hold the gaps and one frame per segment."""
    k = len(natural_frames)
    if k < 1 or min(natural_frames) < 1:
        raise ValueError(f"natural frames {list(natural_frames)}: every segment needs at least one")
    total = int(frames) * hop
    speech = total - (k - 1) * gap
    budget = speech // hop
    if budget < k:
        need = (k - 1) * gap + k * hop
        raise ValueError(
            f"a target of {frames} frames ({total} samples) is too short for {k} segments and their "
            f"gaps (at least {-(-need // hop)} frames)"
        )
    gaps = [gap] * (k - 1)
    if gaps:
        gaps[-1] += speech - budget * hop
    return SegmentSplit(_proportional(budget, [int(n) for n in natural_frames]), gaps)


def _proportional(total: int, weights: list[int]) -> list[int]:
    """`total` split in proportion to `weights`, each part >= 1 (largest remainder, ties to the first)."""
    w = sum(weights)
    parts = [max(1, total * x // w) for x in weights]
    # remainders as exact fractions over w: want_i - part_i = (total * x_i - part_i * w) / w
    while sum(parts) < total:
        i = max(range(len(parts)), key=lambda j: (total * weights[j] - parts[j] * w, -j))
        parts[i] += 1
    while sum(parts) > total:  # only when a floor of zero was raised to one
        i = min(
            (j for j in range(len(parts)) if parts[j] > 1),
            key=lambda j: (total * weights[j] - parts[j] * w, -j),
        )
        parts[i] -= 1
    return parts
