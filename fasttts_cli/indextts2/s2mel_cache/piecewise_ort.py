"""The cached CFM on ONNX Runtime (numpy, no torch): the DiT pieces of `export_pieces` driven by core.py.

`OrtPieces.load(folder, opener)` opens `<folder>/pieces.json` (an engine's `s2mel_pieces/`); `solve` has
the contract of the engine's CFM stage (start noise in, x with zero prompt region out) plus a policy:
with no policy (T0) every piece runs on both CFG branches; a skipped module's session is simply not run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.cfm import loop as core
from fasttts_cli.cfm.loop import FULL, CacheState, CFMRun, Plan, run_steps
from fasttts_cli.errors import EngineMismatchError

PIECES_DIR = "s2mel_pieces"  # inside the engine folder
INDEX = "pieces.json"
FORMAT_VERSION = 2  # 2: the head takes prompt_lens and skips the prompt region
Opener = Callable[[Path], Any]  # an ONNX file -> a session (`.run(None, feeds) -> {name: array}`)


@dataclass
class OrtContext:
    h: np.ndarray  # (N, T, D)
    c: np.ndarray  # (N, 1, D)
    rope: np.ndarray  # (T, hd/2, 2)
    key_mask: np.ndarray  # bool (N, 1, 1, T)


class OrtPieces:
    def __init__(self, folder: Path, index: dict[str, Any], sessions: dict[str, Any]) -> None:
        self.folder = folder
        self.depth = int(index["depth"])
        self.skip_plan = {int(k): int(v) for k, v in index["skip_plan"].items()}
        self.index = index
        self._s = sessions
        self.calls: dict[str, int] = {}

    @classmethod
    def load(cls, folder: Path | str, opener: Opener, diag: bool = False) -> OrtPieces:
        """Open the pieces with `opener` (ONNX file -> session; the caller's, so this package needs no
        session code), the `diag_*` calibration graphs only when `diag`."""
        folder = Path(folder)
        path = folder / INDEX
        if not path.is_file():
            raise EngineMismatchError(
                f"{folder}: no s2mel pieces ({INDEX} missing)",
                hint="export them with `fasttts calibrate --checkpoint` or use s2mel cache level T0",
            )
        index = json.loads(path.read_text(encoding="utf-8"))
        if index.get("format_version") != FORMAT_VERSION:
            raise EngineMismatchError(
                f"{path}: pieces format {index.get('format_version')!r}, expected {FORMAT_VERSION}",
                hint="export them again with `fasttts calibrate --checkpoint` (then calibrate again)",
            )
        sessions = {
            name: opener(folder / spec["file"])
            for name, spec in index["pieces"].items()
            if diag or not name.startswith("diag_")
        }
        return cls(folder, index, sessions)

    def _run(self, name: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        self.calls[name] = self.calls.get(name, 0) + 1
        out = self._s[name].run(None, feeds)
        return list(out.values())

    # -- core.Pieces ---------------------------------------------------------------------------------

    def embed(self, x, prompt_x, x_lens, t, style, mu) -> OrtContext:
        h, c, rope, km = self._run(
            "embed",
            {"x": x, "prompt_x": prompt_x, "x_lens": x_lens, "t": t, "style": style, "mu": mu},
        )
        return OrtContext(h, c, rope, km)

    def first_rows(self, ctx: OrtContext, n: int) -> OrtContext:
        km = ctx.key_mask if ctx.key_mask.shape[0] == 1 else ctx.key_mask[:n]
        return OrtContext(ctx.h[:n], ctx.c[:n], ctx.rope, km)

    def hidden(self, ctx: OrtContext) -> np.ndarray:
        return ctx.h

    def skip_in(self, layer: int, x: np.ndarray, skip: np.ndarray) -> np.ndarray:
        return self._run(f"skip_in_{layer}", {"x": x, "skip": skip})[0]

    def module(self, kind: str, layer: int, x: np.ndarray, ctx: OrtContext) -> np.ndarray:
        if ctx.c.shape[0] != x.shape[0]:
            ctx = self.first_rows(ctx, x.shape[0])
        if kind == "attn":
            feeds = {"x": x, "c": ctx.c, "rope": ctx.rope, "key_mask": ctx.key_mask}
            return self._run(f"attn_{layer}", feeds)[0]
        return self._run(f"ffn_{layer}", {"x": x, "c": ctx.c})[0]

    def diagonal(self, layer: int, x: np.ndarray, ctx: OrtContext) -> np.ndarray:
        feeds = {"x": x, "c": ctx.c, "rope": ctx.rope, "key_mask": ctx.key_mask}
        return self._run(f"diag_{layer}", feeds)[0]

    def head(self, h, x, x_lens, t, prompt_lens, ctx: OrtContext) -> np.ndarray:
        if prompt_lens is None:  # no crop: start = max(0, 0 - margin) = 0
            prompt_lens = np.zeros(h.shape[0], np.int64)
        feeds = {"h": h, "x": x, "x_lens": x_lens, "t": t, "prompt_lens": prompt_lens}
        return self._run("head", feeds)[0]

    def cat(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.concatenate([a, b], axis=0)

    def zeros_like(self, a: np.ndarray) -> np.ndarray:
        return np.zeros_like(a)

    def rows_t(self, value: np.float32, n: int) -> np.ndarray:
        return np.full((n,), value, np.float32)


def _numpy(inputs: tuple[Any, ...]) -> tuple[np.ndarray, ...]:
    """(mu, x_lens, prompt, prompt_lens, style, z) as the sessions take them: lengths int64, the rest
    float32."""
    return tuple(np.asarray(a, np.int64 if i in (1, 3) else np.float32) for i, a in enumerate(inputs))


def prepare(*args: Any) -> tuple[CFMRun, np.ndarray]:
    """core.prepare(mu, x_lens, prompt, prompt_lens, style, z, times, cfg_rate) on numpy arrays."""
    return core.prepare(*_numpy(args[:6]), *args[6:])


def solve(pieces: OrtPieces, *args: Any, **options: Any) -> np.ndarray:
    """core.solve(pieces, mu, x_lens, prompt, prompt_lens, style, z, steps, cfg_rate, schedule=,
    times=, plan=) on numpy arrays: the Euler CFM under a plan (None = T0)."""
    return core.solve(pieces, _numpy(args[:6]), *args[6:], **options)


def diagonal_scores(pieces: OrtPieces, run: CFMRun, x0: np.ndarray) -> np.ndarray:
    """(depth, steps) diagonal scores of the uncompressed run from the exported `diag_*` graphs."""
    b = x0.shape[0]
    out = np.zeros((pieces.depth, run.steps), np.float64)

    def observe(layer: int, step: int, h: np.ndarray, ctx: Any) -> None:
        cond = pieces.first_rows(ctx, b)
        out[layer, step] = float(pieces.diagonal(layer, h[:b], cond).mean())

    run_steps(pieces, FULL, run, x0, CacheState(), observer=observe)
    return out


class CachedCFM:
    """The engine hook: `CachedCFM.for_engine(folder, manifest, preset.s2mel, opener)` returns None at
    level T0 (the plain loop over the single-graph `dit_cfg_step`), else an object whose `velocity` drives
    the one Euler loop through the pieces, with the policy checked against this engine and these run
    settings."""

    def __init__(self, pieces: OrtPieces, plan: Plan, steps: int, schedule: str, cfg_rate: float) -> None:
        self.pieces, self.plan = pieces, plan
        self.steps, self.schedule, self.cfg_rate = steps, schedule, cfg_rate

    @classmethod
    def for_engine(cls, folder: Path | str, manifest: Any, s2mel: Any, opener: Opener) -> CachedCFM | None:
        """`s2mel`: the preset's S2MelOptions (steps, cfg_rate, schedule, cache_level)."""
        from fasttts_cli.indextts2.s2mel_cache.policy import load_policy

        folder = Path(folder)
        policy = load_policy(
            folder,
            s2mel.cache_level,
            steps=int(s2mel.steps),
            schedule=str(s2mel.schedule),
            cfg_rate=float(s2mel.cfg_rate),
            manifest=manifest,
        )
        if policy is None:
            return None
        pieces = OrtPieces.load(folder / PIECES_DIR, opener)
        return cls(pieces, policy, int(s2mel.steps), str(s2mel.schedule), float(s2mel.cfg_rate))

    def velocity(self, run: CFMRun) -> core.Velocity:
        """The policy's velocity for one run (its caches start empty)."""
        state = CacheState()

        def velocity(step: int, x: np.ndarray, t: np.float32) -> np.ndarray:
            return core.guided_velocity(self.pieces, self.plan, step, state, x, t, run)

        return velocity
