"""The engine's CFM stage (spec §2.7, stage 4.4) on engine sessions: the one Euler loop
(`cfm.loop.euler`) driven by the single-graph `dit_cfg_step` velocity at s2mel cache level T0,
or by the calibrated piecewise velocity of the engine's s2mel cache above it. Also the start noise every
backend draws for a row (numpy, from the row's own generator).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.cfm import loop as core
from fasttts_cli.cfm.schedules import euler_times
from fasttts_cli.indextts2.s2mel_cache import piecewise_ort

Opener = Callable[[Path], Any]  # an ONNX file -> a session (`.run(names, feeds) -> {name: array}`)


def ort_opener(threads: int | None = None) -> Opener:
    """How the s2mel cache opens its piece graphs: ONNX Runtime CPU sessions on `threads` threads."""
    from fasttts_cli.backends.onnxruntime.session import OrtSession, SessionOptions

    opts = SessionOptions(threads=threads)
    return lambda path: OrtSession(path, opts)


def session_velocity(session: Any, run: core.CFMRun) -> core.Velocity:
    """The guided velocity of one Euler step from the `dit_cfg_step` graph (both CFG branches inside)."""
    rows = int(run.x_lens.shape[0])
    cfg = np.array([run.cfg_rate], np.float32)
    prompt_lens = np.asarray(run.prompt_lens, np.int64)

    def velocity(step: int, x: np.ndarray, t: np.float32) -> np.ndarray:
        feeds = {
            "x": x,
            "prompt_x": run.prompt_x,
            "x_lens": run.x_lens,
            "t": np.full((rows,), t, np.float32),
            "style": run.style,
            "mu": run.mu,
            "cfg_rate": cfg,
            "prompt_lens": prompt_lens,
        }
        return session.run(["v"], feeds)["v"]

    return velocity


def solve(
    velocity_for: Callable[[core.CFMRun], core.Velocity],
    inp: Any,
    z: np.ndarray,
    steps: int = 25,
    cfg_rate: float = 0.7,
    schedule: str = "uniform",
) -> np.ndarray:
    """Euler CFM from start noise z (B, n_mels, T) -> x (B, n_mels, T) float32, each row's prompt region
    and padding zero. `inp`: the engine's CFMInputs (cat_condition, x_lens, prompt, prompt_lens, style);
    `velocity_for(run)` gives the backend's velocity for this run's fixed inputs."""
    args = (inp.cat_condition, inp.x_lens, inp.prompt, inp.prompt_lens, inp.style, z)
    run, x = piecewise_ort.prepare(*args, euler_times(steps, schedule), cfg_rate)
    return np.asarray(core.euler(velocity_for(run), x, run.keep, run.times), np.float32)


def cached_cfm(
    folder: Path, manifest: Any, steps: int, cfg_rate: float, schedule: str, level: str, opener: Opener
) -> piecewise_ort.CachedCFM | None:
    """The engine's calibrated s2mel cache for these run settings; None at level T0 (the plain loop)."""
    if level == "T0":
        return None
    from fasttts_cli.spec.presets import S2MelOptions

    opts = S2MelOptions(steps=steps, cfg_rate=cfg_rate, schedule=schedule, cache_level=level)
    return piecewise_ort.CachedCFM.for_engine(folder, manifest, opts, opener)


def draw_noise(rng: np.random.Generator, n_mels: int, frames: int) -> np.ndarray:
    """Start noise (n_mels, frames) float32 ~ N(0, 1) from the row's own generator."""
    return rng.standard_normal((n_mels, frames), dtype=np.float32)


def start_noise(
    noises: Sequence[np.ndarray | np.random.Generator], x_lens: Sequence[int], n_mels: int
) -> np.ndarray:
    """(B, n_mels, max x_len) float32: row b's noise (given, or drawn from its generator) on its first
    x_lens[b] frames, zero after."""
    lens = [int(n) for n in x_lens]
    z = np.zeros((len(lens), n_mels, max(lens)), np.float32)
    for b, nz in enumerate(noises):
        n = lens[b]
        z[b, :, :n] = draw_noise(nz, n_mels, n) if isinstance(nz, np.random.Generator) else nz[:, :n]
    return z
