"""Calibration of s2mel cache policies (DiTReducio-style, training-free), for any piece backend.

Per level (threshold `thr` = allowed final-output error, see policy.LEVELS), starting from "compute all":

1. Check: the uncompressed run's attention maps are scored per (layer, step) by their diagonal mass (the
   attention probability on keys within +-3 frames of the query, averaged over heads, the conditional
   rows and their valid queries; piecewise_torch.diagonal_mass). The top 10% of the (layer, step) pairs
   with step >= 1 are the candidates.
2. Pre-calibration: temporal skipping (TS) is tried on the attention and the FFN of each candidate pair.
3. Calibration: TS is tried on every module still computed, then branch skipping (BS) on every module
   still computed, then (our extension, `head_branch_skip`) BS of the WaveNet head per step.

A trial sets one decision and reruns the CFM; it is accepted when the relative mean absolute error of
the final output against the uncompressed run stays below thr * l / L (l = 1-based layer index, L = depth;
the head counts as layer L). The error is the MAE over each row's generated frames divided by the range
(max - min) of that row's reference mel there, averaged over rows. The error is always that of the
whole table so far, so the calibration data end below thr by construction.

Trials go step by step. With `group_first` (default) a step's untried entries are first tried together
against the strictest bound among them; if that holds every entry's own bound holds, so the rule above is
kept while a step of easy entries costs one trial instead of 2L. `max_trials` caps each pass's trials
(evenly spaced steps, each bisected with a few trials; entries never tried stay computed: less saving,
never more error). A trial at step s resumes from a
snapshot of the state (x and caches) at the start of step s: only the remaining S - s steps are rerun.
Every operation is deterministic, so a fixed seed (which fixes the calibration inputs and noise) gives
the same policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fasttts_cli.cfm.loop import BRANCH, COMPUTE, FULL, KINDS, TEMPORAL, CacheState, CFMRun, Pieces, run_steps
from fasttts_cli.cfm.schedules import euler_times
from fasttts_cli.indextts2.s2mel_cache.policy import LEVELS, Policy, PolicySet, level_threshold

CANDIDATE_FRACTION = 0.10
CAPPED_PER_STEP = 4  # trials per calibrated step when a pass is capped (max_trials)
ToNumpy = Callable[[Any], np.ndarray]


def relative_mae(x: np.ndarray, ref: np.ndarray, keep: np.ndarray) -> float:
    """Mean over rows of MAE(x, ref) / (max - min of ref), both over the row's generated frames."""
    errs = []
    for b in range(ref.shape[0]):
        m = keep[b, 0] > 0
        r, a = ref[b][:, m], x[b][:, m]
        if r.size == 0:
            continue
        span = float(r.max() - r.min()) or 1.0
        errs.append(float(np.abs(a.astype(np.float64) - r).mean()) / span)
    return float(np.mean(errs)) if errs else 0.0


class TablePlan:
    """A mutable decision table (core.Plan) used while calibrating."""

    def __init__(self, depth: int, steps: int) -> None:
        self.rows = {k: [[COMPUTE] * steps for _ in range(depth)] for k in KINDS}
        self.head_row = [COMPUTE] * steps
        self.depth, self.steps = depth, steps

    def module(self, kind: str, layer: int, step: int) -> str:
        return self.rows[kind][layer][step]

    def head(self, step: int) -> str:
        return self.head_row[step]

    def freeze(self, level: str, threshold: float, error: float) -> Policy:
        table = {k: ["".join(r) for r in rows] for k, rows in self.rows.items()}
        return Policy.from_table(level, threshold, table, "".join(self.head_row), error)


@dataclass(frozen=True)
class _Snapshot:
    """Where a trial starts: the table so far, at the start of `step` (x and caches there)."""

    plan: TablePlan
    step: int
    x: Any
    state: CacheState
    threshold: float


@dataclass
class LevelReport:
    level: str
    threshold: float
    error: float
    kept: float
    head_kept: float
    trials: int
    accepted: dict[str, int]
    seconds: float
    truncated: bool = False  # a pass hit max_trials: some entries were never tried (left computed)


@dataclass
class Calibrator:
    """Greedy calibration of one batch of calibration rows on one backend."""

    pieces: Pieces
    run: CFMRun
    x0: Any
    to_numpy: ToNumpy
    diag: np.ndarray  # (depth, steps) diagonal scores of the uncompressed run
    head_branch_skip: bool = True
    candidate_fraction: float = CANDIDATE_FRACTION
    group_first: bool = True
    max_trials: int | None = None
    progress: Callable[[str], None] | None = None
    ref: np.ndarray = field(init=False)
    keep: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.ref = self.to_numpy(run_steps(self.pieces, FULL, self.run, self.x0, CacheState()))
        self.keep = self.to_numpy(self.run.keep)

    @property
    def depth(self) -> int:
        return self.pieces.depth

    @property
    def steps(self) -> int:
        return self.run.steps

    def candidates(self) -> list[tuple[int, int]]:
        """(layer, step) pairs, step >= 1, in the top `candidate_fraction` by diagonal score (ties: lower
        step, then lower layer first, so the choice is deterministic)."""
        pairs = [(layer, s) for s in range(1, self.steps) for layer in range(self.depth)]
        n = max(1, int(np.ceil(self.candidate_fraction * self.depth * self.steps)))
        pairs.sort(key=lambda p: (-self.diag[p[0], p[1]], p[1], p[0]))
        return sorted(pairs[:n], key=lambda p: (p[1], p[0]))

    def calibrate(self, level: str) -> tuple[Policy, LevelReport]:
        thr = level_threshold(level)
        t0 = time.perf_counter()
        plan = TablePlan(self.depth, self.steps)
        if thr == 0.0:
            pol = plan.freeze(level, thr, 0.0)
            return pol, LevelReport(level, thr, 0.0, 1.0, 1.0, 0, {}, 0.0)
        self.trials = 0
        self.error = 0.0
        self.truncated = False
        accepted = {"pre_TS": 0, "TS": 0, "BS": 0, "head_BS": 0}
        cands = self.candidates()
        pre = [(s, layer, k, TEMPORAL) for layer, s in cands for k in KINDS]
        accepted["pre_TS"] = self._pass(plan, pre, thr)
        ts = [
            (s, layer, k, TEMPORAL)
            for s in range(1, self.steps)
            for layer in range(self.depth)
            for k in KINDS
        ]
        accepted["TS"] = self._pass(plan, ts, thr)
        bs = [
            (s, layer, k, BRANCH) for s in range(1, self.steps) for layer in range(self.depth) for k in KINDS
        ]
        accepted["BS"] = self._pass(plan, bs, thr)
        if self.head_branch_skip:
            hb = [(s, self.depth, "head", BRANCH) for s in range(1, self.steps)]
            accepted["head_BS"] = self._pass(plan, hb, thr)
        pol = plan.freeze(level, thr, self.error)
        pol.validate()
        rep = LevelReport(
            level,
            thr,
            self.error,
            pol.kept_fraction(),
            pol.head_fraction(),
            self.trials,
            accepted,
            time.perf_counter() - t0,
            self.truncated,
        )
        return pol, rep

    def _pass(self, plan: TablePlan, trials: Sequence[tuple[int, int, str, str]], thr: float) -> int:
        """Try each (step, layer, kind, letter), step by step; keep a decision when the error bound holds.

        With `group_first`, a step's still-computed entries are first tried all at once against the
        strictest bound among them (that of the shallowest layer): if that holds, each entry's own bound
        holds too, and the step costs one trial instead of one per entry. Otherwise they are tried one by
        one. `max_trials` caps the trials of each pass: evenly spaced steps get CAPPED_PER_STEP trials
        each, spent bisecting (whole group; if refused, the deeper half, then the shallower half, ...);
        entries not tried stay computed (less saving, never more error)."""
        accepted = 0
        x, state, at = self.x0, CacheState(), 0
        by_step: dict[int, list[tuple[int, str, str]]] = {}
        for s, layer, kind, letter in trials:
            by_step.setdefault(s, []).append((layer, kind, letter))
        steps = sorted(by_step)
        chosen = set(steps)
        capped = self.max_trials is not None
        if capped:
            n_steps = max(1, min(len(steps), self.max_trials // CAPPED_PER_STEP))
            picks = np.linspace(0, len(steps) - 1, n_steps).round().astype(int)
            chosen = {steps[k] for k in picks}
        for s in steps:
            if s not in chosen:
                self.truncated = True
                continue
            if s > at:  # advance the snapshot to the start of step s under the decisions taken so far
                x = run_steps(self.pieces, plan, self.run, x, state, at, s)
                at = s
            todo = sorted(
                (e for e in by_step[s] if self._row(plan, e)[s] == COMPUTE),
                key=lambda e: (e[0], KINDS.index(e[1]) if e[1] in KINDS else len(KINDS)),
            )
            at_s = _Snapshot(plan, s, x, state, thr)
            if capped:
                accepted += self._bisect(at_s, todo, [CAPPED_PER_STEP])
                continue
            if self.group_first and len(todo) > 1 and self._try(at_s, todo):
                accepted += len(todo)
                continue
            for e in todo:
                accepted += self._try(at_s, [e])
        if self.progress:
            self.progress(f"pass done: {accepted} of {len(trials)} accepted, error {self.error:.4g}")
        return accepted

    def _bisect(self, at: _Snapshot, entries: Sequence[tuple[int, str, str]], budget: list[int]) -> int:
        """Accept `entries` together if their strictest bound holds, else recurse on the deeper half
        (looser bounds) then the shallower half, while the step's trial budget lasts."""
        if not entries:
            return 0
        if budget[0] <= 0:
            self.truncated = True
            return 0
        budget[0] -= 1
        if self._try(at, entries):
            return len(entries)
        if len(entries) == 1:
            return 0
        mid = len(entries) // 2
        deep = self._bisect(at, entries[mid:], budget)
        return deep + self._bisect(at, entries[:mid], budget)

    @staticmethod
    def _row(plan: TablePlan, entry: tuple[int, str, str]) -> list[str]:
        layer, kind, _ = entry
        return plan.head_row if kind == "head" else plan.rows[kind][layer]

    def _try(self, at: _Snapshot, entries: Sequence[tuple[int, str, str]]) -> bool:
        plan, s, thr = at.plan, at.step, at.threshold
        for e in entries:
            self._row(plan, e)[s] = e[2]
        out = run_steps(self.pieces, plan, self.run, at.x, at.state.copy(), s)
        self.trials += 1
        err = relative_mae(self.to_numpy(out), self.ref, self.keep)
        bound = thr * min(min(e[0] + 1, self.depth) for e in entries) / self.depth
        if err < bound:
            self.error = err
            return True
        for e in entries:
            self._row(plan, e)[s] = COMPUTE
        return False


def calibrate_levels(
    cal: Calibrator,
    levels: Sequence[str],
    *,
    engine_id: str,
    schedule: str,
    provenance: dict[str, Any] | None = None,
) -> tuple[PolicySet, list[LevelReport]]:
    """Calibrate each level independently (each from 'compute all') into one PolicySet."""
    tables: dict[str, Policy] = {}
    reports = []
    for level in levels:
        if level not in LEVELS:
            level_threshold(level)  # raises with the list of levels
        pol, rep = cal.calibrate(level)
        reports.append(rep)
        if level != "T0":
            tables[level] = pol
    info = dict(provenance or {})
    info.update(
        measure="relative MAE of the final output (MAE / range of the reference mel, generated frames)",
        diagonal_band=3,
        candidate_fraction=cal.candidate_fraction,
        head_branch_skip=cal.head_branch_skip,
        reports=[r.__dict__ for r in reports],
    )
    ps = PolicySet(
        engine_id=engine_id,
        depth=cal.depth,
        steps=cal.steps,
        schedule=schedule,
        cfg_rate=cal.run.cfg_rate,
        levels=tables,
        calibration=info,
    )
    return ps, reports


# ------------------------------------------------------------------------------------- PyTorch modules


def _calibrate_run(
    pieces: Pieces,
    run: CFMRun,
    x0: Any,
    to_numpy: ToNumpy,
    diag: np.ndarray,
    levels: Sequence[str],
    *,
    engine_id: str,
    schedule: str,
    provenance: dict[str, Any],
    **options: Any,
) -> tuple[PolicySet, list[LevelReport]]:
    """One backend's calibration of prepared rows; `options` are Calibrator's (head_branch_skip,
    group_first, max_trials, progress)."""
    cal = Calibrator(pieces, run, x0, to_numpy, diag, **options)
    return calibrate_levels(cal, levels, engine_id=engine_id, schedule=schedule, provenance=provenance)


def _provenance(seed: int, batch: dict[str, np.ndarray], backend: str) -> dict[str, Any]:
    frames = batch["x_lens"].tolist()
    return {"seed": seed, "rows": len(frames), "frames": frames, "backend": backend}


def calibrate_modules(
    dit: Any,
    rows: Sequence[dict[str, np.ndarray]],
    levels: Sequence[str],
    *,
    steps: int = 25,
    schedule: str = "uniform",
    cfg_rate: float = 0.7,
    seed: int = 0,
    engine_id: str | None = None,
    **options: Any,
) -> tuple[PolicySet, list[LevelReport]]:
    """Calibrate on the PyTorch DiT. `rows`: per calibration line {"mu" (T, C), "prompt" (80, Tm),
    "style" (style_dim,)}; the start noise comes from `seed`. `engine_id` defaults to a digest of the DiT
    weights (pass the engine's identity to use the policy with that engine). `options`: Calibrator's
    head_branch_skip, group_first, max_trials, progress."""
    import torch

    from fasttts_cli.indextts2.s2mel_cache import piecewise_torch as pt

    batch = stack_rows(rows, seed, n_mels=dit.cfg.in_channels)
    names = ("mu", "x_lens", "prompt", "prompt_lens", "style", "z")
    run, x0 = pt.prepare(*(torch.from_numpy(batch[k]) for k in names), euler_times(steps, schedule), cfg_rate)
    with torch.inference_mode():
        return _calibrate_run(
            pt.TorchPieces(dit),
            run,
            x0,
            lambda a: a.detach().numpy(),
            pt.diagonal_scores(dit, run, x0),
            levels,
            engine_id=engine_id or dit_weights_identity(dit),
            schedule=schedule,
            provenance=_provenance(seed, batch, "torch"),
            **options,
        )


def dit_weights_identity(dit: Any) -> str:
    import hashlib

    h = hashlib.sha256()
    for k, v in sorted(dit.state_dict(keep_vars=False).items()):
        h.update(k.encode())
        h.update(v.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def stack_rows(rows: Sequence[dict[str, np.ndarray]], seed: int, n_mels: int = 80) -> dict[str, np.ndarray]:
    """Pad calibration lines into one batch and draw each row's start noise from (seed, row)."""
    if not rows:
        raise ValueError("calibration needs at least one line")
    t_len = max(r["mu"].shape[0] for r in rows)
    p_len = max(r["prompt"].shape[1] for r in rows)
    mu = np.zeros((len(rows), t_len, rows[0]["mu"].shape[1]), np.float32)
    prompt = np.zeros((len(rows), n_mels, p_len), np.float32)
    z = np.zeros((len(rows), n_mels, t_len), np.float32)
    for b, r in enumerate(rows):
        n = r["mu"].shape[0]
        mu[b, :n] = r["mu"]
        prompt[b, :, : r["prompt"].shape[1]] = r["prompt"]
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), b, 0xCA1])))
        z[b, :, :n] = rng.standard_normal((n_mels, n), dtype=np.float32)
    return {
        "mu": mu,
        "x_lens": np.array([r["mu"].shape[0] for r in rows], np.int64),
        "prompt": prompt,
        "prompt_lens": np.array([r["prompt"].shape[1] for r in rows], np.int64),
        "style": np.stack([np.asarray(r["style"], np.float32).reshape(-1) for r in rows]),
        "z": z,
    }


# ------------------------------------------------------------------------------------- ONNX Runtime pieces


def calibrate_ort(
    pieces: Any,
    rows: Sequence[dict[str, np.ndarray]],
    levels: Sequence[str],
    *,
    engine_id: str,
    steps: int = 25,
    schedule: str = "uniform",
    cfg_rate: float = 0.7,
    seed: int = 0,
    **options: Any,
) -> tuple[PolicySet, list[LevelReport]]:
    """Calibrate on exported pieces (piecewise_ort.OrtPieces loaded with diag=True): the runtime path.
    `options`: Calibrator's head_branch_skip, group_first, max_trials, progress."""
    from fasttts_cli.indextts2.s2mel_cache import piecewise_ort as po

    batch = stack_rows(rows, seed)
    names = ("mu", "x_lens", "prompt", "prompt_lens", "style", "z")
    run, x0 = po.prepare(*(batch[k] for k in names), euler_times(steps, schedule), cfg_rate)
    return _calibrate_run(
        pieces,
        run,
        x0,
        np.asarray,
        po.diagonal_scores(pieces, run, x0),
        levels,
        engine_id=engine_id,
        schedule=schedule,
        provenance=_provenance(seed, batch, "onnxruntime"),
        **options,
    )
