"""CUDA graph capture and replay per shape bucket, with an eager fallback of the same interface.

A captured graph replays fixed kernels on fixed addresses, so a step function run through `GraphRunner`
must read its inputs from, and write its outputs into, tensors that live as long as the runner (static
buffers the caller fills before `run`), and must be idempotent (running it twice on the same inputs
gives the same state): the first call for a key warms up on a side stream (as torch's CUDA graph docs
require), captures, then replays. Shapes vary only through the key's bucket, never inside a graph.

On CPU, or with `enabled=False`, or with $FASTTTS_TORCH_GRAPHS=0, `run` just calls the function: the same
code path is what the CPU tests exercise. A bucket whose capture fails (an op that cannot be captured on
some torch/driver version) runs eagerly from then on, with one warning; `failures` records why.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Hashable, Sequence

import torch

GRAPHS_ENV = "FASTTTS_TORCH_GRAPHS"


def bucket(n: int, buckets: Sequence[int]) -> int:
    """Smallest bucket >= n (buckets ascending); ValueError past the largest."""
    for b in buckets:
        if b >= n:
            return b
    raise ValueError(f"{n} exceeds the largest bucket {buckets[-1] if buckets else None}")


def row_buckets(max_rows: int, beams: Sequence[int] = (1, 3)) -> tuple[int, ...]:
    """Powers of two up to max_rows, times each beam width, plus max_rows x beams itself."""
    out = set()
    for nb in beams:
        p = 1
        while p < max_rows:
            out.add(p * nb)
            p *= 2
        out.add(max_rows * nb)
    return tuple(sorted(out))


def round_up(n: int, step: int, limit: int | None = None) -> int:
    """n rounded up to a multiple of step, capped at limit (the cache size) when given."""
    r = -(-n // step) * step
    return min(r, limit) if limit is not None else r


class GraphRunner:
    """One CUDA graph per key, captured on first use; all graphs share one memory pool (they never run
    concurrently, and everything a caller keeps is copied into its own static buffers)."""

    def __init__(self, enabled: bool, warmup: int = 2) -> None:
        allowed = os.environ.get(GRAPHS_ENV, "1") != "0"
        self.enabled = bool(enabled) and allowed and torch.cuda.is_available()
        self.warmup = warmup
        self.graphs: dict[Hashable, torch.cuda.CUDAGraph] = {}
        self.failures: dict[Hashable, str] = {}
        self._pool = None
        self.captures = 0  # how many graphs were captured (the bench reports it)

    @classmethod
    def for_device(cls, use_graphs: bool | None, device: torch.device) -> GraphRunner:
        """The runner a stage's `use_graphs` setting asks for on `device` (None: graphs on CUDA only)."""
        return cls(use_graphs if use_graphs is not None else device.type == "cuda")

    def clear(self) -> None:
        """Forget every graph (after the static buffers they point at were reallocated)."""
        self.graphs.clear()
        self._pool = None

    def run(self, key: Hashable, fn: Callable[[], None]) -> None:
        if not self.enabled or key in self.failures:
            fn()
            return
        g = self.graphs.get(key)
        if g is None:
            try:
                g = self._capture(fn)
            except RuntimeError as e:
                self.failures[key] = f"{type(e).__name__}: {e}"
                warnings.warn(f"CUDA graph capture failed for {key!r}, running it eagerly: {e}", stacklevel=2)
                torch.cuda.synchronize()
                fn()
                return
            self.graphs[key] = g
        g.replay()

    def _capture(self, fn: Callable[[], None]) -> torch.cuda.CUDAGraph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(g, pool=self._pool):
            fn()
        self.captures += 1
        return g
