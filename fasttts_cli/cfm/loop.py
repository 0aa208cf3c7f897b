"""The CFM's Euler loop, written once for every backend (PyTorch tensors or numpy + ONNX Runtime), and its
cached, piecewise velocity.

`prepare` masks the inputs (prompt region and padding) and `euler` runs the steps: the time grid's t and
dt formed as the original forms them, x <- (x + dt v) * keep. The velocity is the backend's: one graph
(`dit_cfg_step`, `CFM.cfg_velocity`, a captured CUDA graph) or, under a cache policy, the DiT in pieces
(`guided_velocity`), whose level T0 (`FULL`) computes everything and so is the plain loop.

One Euler step runs the DiT as pieces: `embed` (input merge + time embedding), then per block the UViT
`skip_in` (always computed), the attention module and the FFN module, then `head` (final norm, long skip,
WaveNet, final layer). Each attention/FFN output of block l at step s is, per the policy's decision:

- "C" compute: on both CFG branches. Updates the temporal cache with the output and the branch cache with
  the branch residual (unconditional - conditional).
- "T" temporal skip: the module's output from the last step it ran (C or B), both branches. Nothing is
  computed; the caches stay as they are (a cache is updated only when the module is computed).
- "B" branch skip: computed on the conditional rows only; the unconditional rows are rebuilt as
  conditional + the cached branch residual from the last step that computed both branches ("C"). The
  temporal cache takes the (computed, rebuilt) pair. One branch is never used as the other.

The head may also be "B" (`head` row of a policy): conditional velocity computed, unconditional = it + the
velocity residual of the last "C" head step. When no module and not the head computes both branches in a
step, the unconditional residual stream feeds nothing, so embed and skip_in run on the conditional rows
only: skipped work is really skipped.

A module output here is exactly what the block adds to its residual stream, so with every decision "C"
this loop performs the same operations as `DiT.forward` inside `CFM.solve`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fasttts_cli.cfm.schedules import euler_times, step_times

COMPUTE, TEMPORAL, BRANCH = "C", "T", "B"
KINDS = ("attn", "ffn")

Array = Any  # torch.Tensor or np.ndarray: the loop only slices, adds, subtracts and scales them


class Plan(Protocol):
    """What the loop asks a policy: one decision per (module kind, layer, step) and per head step."""

    def module(self, kind: str, layer: int, step: int) -> str: ...

    def head(self, step: int) -> str: ...


class FullPlan:
    """Everything computed: the uncompressed run (level T0)."""

    def module(self, kind: str, layer: int, step: int) -> str:
        return COMPUTE

    def head(self, step: int) -> str:
        return COMPUTE


FULL = FullPlan()


class Pieces(Protocol):
    """A backend's DiT pieces. `ctx` is whatever embed returns (it carries `h`, the merged input)."""

    depth: int
    skip_plan: Mapping[int, int]  # receiving block -> emitting block

    def embed(self, x: Array, prompt_x: Array, x_lens: Array, t: Array, style: Array, mu: Array) -> Any: ...

    def first_rows(self, ctx: Any, n: int) -> Any: ...  # the context of the first n rows

    def hidden(self, ctx: Any) -> Array: ...

    def skip_in(self, layer: int, x: Array, skip: Array) -> Array: ...

    def module(self, kind: str, layer: int, x: Array, ctx: Any) -> Array: ...

    def head(
        self, h: Array, x: Array, x_lens: Array, t: Array, prompt_lens: Array | None, ctx: Any
    ) -> Array: ...

    def cat(self, a: Array, b: Array) -> Array: ...

    def zeros_like(self, a: Array) -> Array: ...

    def rows_t(self, value: np.float32, n: int) -> Array: ...


@dataclass
class CacheState:
    """Per (kind, layer): the temporal cache (both branches) and the branch residual (uncond - cond)."""

    ts: dict[tuple[str, int], Array] = field(default_factory=dict)
    res: dict[tuple[str, int], Array] = field(default_factory=dict)
    head_res: Array | None = None

    def copy(self) -> CacheState:
        # arrays are never modified in place, so sharing them between snapshots is safe
        return CacheState(dict(self.ts), dict(self.res), self.head_res)


@dataclass
class CFMRun:
    """The fixed inputs of one batched CFM run (backend arrays) and its time grid."""

    prompt_x: Array  # (B, 80, T) ref mel in each row's prompt region, zero elsewhere
    keep: Array  # (B, 1, T) 1 on each row's generated region [prompt_len, x_len)
    x_lens: Array  # (B,) int64
    style: Array  # (B, style_dim)
    mu: Array  # (B, T, C)
    times: np.ndarray  # (S + 1,) float32 grid
    cfg_rate: float = 0.7
    prompt_lens: Array | None = None  # (B,) int64; given, the head skips the prompt region (DiT.head)

    @property
    def steps(self) -> int:
        return len(self.times) - 1


Observer = Callable[[int, int, Array, Any], None]  # (layer, step, stream entering attention, ctx)


class PolicyError(ValueError):
    """A decision the loop cannot honour (no cache yet, branch skip without CFG, unknown letter)."""


def _needs_uncond(plan: Plan, depth: int, step: int) -> bool:
    if plan.head(step) == COMPUTE:
        return True
    return any(plan.module(k, layer, step) == COMPUTE for layer in range(depth) for k in KINDS)


def guided_velocity(
    p: Pieces,
    plan: Plan,
    step: int,
    state: CacheState,
    x: Array,
    t: np.float32,
    run: CFMRun,
    observer: Observer | None = None,
) -> Array:
    """The CFG velocity (1 + cfg) v_c - cfg v_u of one Euler step under `plan` (updates `state`)."""
    b = x.shape[0]
    cfg = run.cfg_rate > 0
    both = cfg and _needs_uncond(plan, p.depth, step)
    if both:
        z = p.zeros_like
        args = (
            p.cat(x, x),
            p.cat(run.prompt_x, z(run.prompt_x)),
            p.cat(run.x_lens, run.x_lens),
            p.rows_t(t, 2 * b),
            p.cat(run.style, z(run.style)),
            p.cat(run.mu, z(run.mu)),
        )
    else:
        args = (x, run.prompt_x, run.x_lens, p.rows_t(t, b), run.style, run.mu)
    ctx = p.embed(*args)
    cond_ctx = p.first_rows(ctx, b) if both else ctx
    h = p.hidden(ctx)
    skips: dict[int, Array] = {}
    emitters = set(p.skip_plan.values())
    for layer in range(p.depth):
        src = p.skip_plan.get(layer)
        if src is not None:
            h = p.skip_in(layer, h, skips.pop(src))
        if observer is not None:
            observer(layer, step, h, ctx)
        for kind in KINDS:
            d = plan.module(kind, layer, step) if cfg else _no_cfg(plan.module(kind, layer, step))
            key = (kind, layer)
            if d == COMPUTE:
                out = p.module(kind, layer, h, ctx)
                if cfg:
                    state.res[key] = out[b:] - out[:b]
            elif d == BRANCH:
                if key not in state.res:
                    raise PolicyError(f"{kind} {layer} step {step}: branch skip before any full computation")
                oc = p.module(kind, layer, h[:b], cond_ctx)
                out = p.cat(oc, oc + state.res[key])
            elif d == TEMPORAL:
                if key not in state.ts:
                    raise PolicyError(f"{kind} {layer} step {step}: temporal skip before any computation")
                out = state.ts[key]
            else:
                raise PolicyError(f"{kind} {layer} step {step}: unknown decision {d!r}")
            if d != TEMPORAL:
                state.ts[key] = out
            h = h + (out if both or not cfg else out[:b])
        if layer in emitters:
            skips[layer] = h
    hd = plan.head(step) if cfg else _no_cfg(plan.head(step))
    pl2 = run.prompt_lens
    if pl2 is not None and both:
        pl2 = p.cat(pl2, pl2)
    if not cfg:
        return p.head(h, args[0], args[2], args[3], pl2, ctx)
    if hd == COMPUTE:
        v = p.head(h, args[0], args[2], args[3], pl2, ctx)
        v_c, v_u = v[:b], v[b:]
        state.head_res = v_u - v_c
    elif hd == BRANCH:
        if state.head_res is None:
            raise PolicyError(f"head step {step}: branch skip before any full computation")
        if both:
            v_c = p.head(h[:b], x, run.x_lens, p.rows_t(t, b), run.prompt_lens, cond_ctx)
        else:
            v_c = p.head(h, x, run.x_lens, args[3], run.prompt_lens, ctx)
        v_u = v_c + state.head_res
    else:
        raise PolicyError(f"head step {step}: decision {hd!r} (the head takes C or B)")
    return (1.0 + run.cfg_rate) * v_c - run.cfg_rate * v_u


def _no_cfg(d: str) -> str:
    if d == BRANCH:
        raise PolicyError("branch skipping needs classifier-free guidance (cfg_rate > 0)")
    return d


Velocity = Callable[[int, Array, np.float32], Array]  # (step, x, t) -> guided velocity (B, 80, T)


def _is_numpy(a: Array) -> bool:
    return isinstance(a, np.ndarray)


def _arange(like: Array, n: int) -> Array:
    if _is_numpy(like):
        return np.arange(n)
    import torch  # `like` is a tensor: torch is loaded already

    return torch.arange(n, device=like.device)


def _zeros_like(a: Array) -> Array:
    if _is_numpy(a):
        return np.zeros_like(a)
    import torch

    return torch.zeros_like(a)


def _as_float(mask: Array, like: Array) -> Array:
    return mask.astype(like.dtype) if _is_numpy(like) else mask.to(like.dtype)


def dt_scalar(x: Array, dt: np.float32) -> Any:
    """dt as the loop multiplies it: np.float32 for numpy (a strong float32 scalar, so a velocity of
    another dtype still gives a float32 step, as the original's float32 dt did); for torch a Python
    float, exact for a float32 value, so x + dt * v rounds as the original's 0-d float32 tensor does."""
    return np.float32(dt) if _is_numpy(x) else float(dt)


def masks(prompt: Array, prompt_lens: Array, x_lens: Array, z: Array) -> tuple[Array, Array]:
    """(prompt_x (B, 80, T): the ref mel in each row's prompt region, zero elsewhere; keep (B, 1, T): 1 on
    each row's generated region [prompt_len, x_len)). T = z's frames; prompt (B, 80, Tp) may be shorter."""
    t_len = z.shape[-1]
    pos = _arange(z, t_len)[None, :]
    pl, xl = prompt_lens[:, None], x_lens[:, None]
    in_prompt = _as_float(pos < pl, z)[:, None, :]
    keep = _as_float((pos >= pl) & (pos < xl), z)[:, None, :]
    tp = min(int(prompt.shape[-1]), t_len)
    prompt_x = _zeros_like(z)
    prompt_x[:, :, :tp] = prompt[:, :, :tp]
    return prompt_x * in_prompt, keep


def prepare(
    mu: Array,
    x_lens: Array,
    prompt: Array,
    prompt_lens: Array,
    style: Array,
    z: Array,
    times: np.ndarray,
    cfg_rate: float = 0.7,
) -> tuple[CFMRun, Array]:
    """(the run's fixed inputs, x at step 0 = z on the generated region, zero elsewhere)."""
    prompt_x, keep = masks(prompt, prompt_lens, x_lens, z)
    run = CFMRun(
        prompt_x, keep, x_lens, style, mu, np.asarray(times, np.float32), float(cfg_rate), prompt_lens
    )
    return run, z * keep


def euler(
    velocity: Velocity,
    x: Array,
    keep: Array,
    times: np.ndarray,
    start: int = 0,
    stop: int | None = None,
) -> Array:
    """Euler steps [start, stop) of the grid `times` from x (the state at the start of step `start`).

    t and dt are formed as the original forms them (dt = grid difference, t accumulated in float32), and
    x's prompt region and padding are zeroed after every step."""
    ts, dts = step_times(times)
    stop = len(dts) if stop is None else stop
    for s in range(start, stop):
        v = velocity(s, x, ts[s])
        x = (x + dt_scalar(x, dts[s]) * v) * keep
    return x


def run_steps(
    p: Pieces,
    plan: Plan,
    run: CFMRun,
    x: Array,
    state: CacheState,
    start: int = 0,
    stop: int | None = None,
    observer: Observer | None = None,
) -> Array:
    """Euler steps [start, stop) of the piecewise CFM under `plan`; with every decision "C" this is
    `CFM.solve`'s loop."""

    def velocity(step: int, x: Array, t: np.float32) -> Array:
        return guided_velocity(p, plan, step, state, x, t, run, observer)

    return euler(velocity, x, run.keep, run.times, start, stop)


def solve(
    p: Pieces,
    inputs: tuple[Array, ...],
    steps: int = 25,
    cfg_rate: float = 0.7,
    *,
    schedule: str = "uniform",
    times: np.ndarray | None = None,
    plan: Plan | None = None,
) -> Array:
    """`CFM.solve`'s contract (inputs = (mu, x_lens, prompt, prompt_lens, style, z), start noise z
    (B, 80, T); returns x with zero prompt region), the DiT run in pieces under `plan` (None = T0,
    everything computed). `times` overrides the grid built from steps and schedule."""
    grid = euler_times(steps, schedule) if times is None else np.asarray(times, np.float32)
    run, x = prepare(*inputs, grid, cfg_rate)
    return run_steps(p, plan or FULL, run, x, CacheState())


def module_units(plan: Plan, depth: int, steps: int, cfg: bool = True) -> tuple[int, int]:
    """(kept, total) attention/FFN branch evaluations: C counts 2 (1 without CFG), B 1, T 0."""
    per = 2 if cfg else 1
    kept = 0
    for s in range(steps):
        for layer in range(depth):
            for k in KINDS:
                d = plan.module(k, layer, s)
                kept += per if d == COMPUTE else (1 if d == BRANCH else 0)
    return kept, per * len(KINDS) * depth * steps


def head_units(plan: Plan, steps: int) -> tuple[int, int]:
    """(kept, total) head branch evaluations."""
    kept = sum(2 if plan.head(s) == COMPUTE else 1 for s in range(steps))
    return kept, 2 * steps
