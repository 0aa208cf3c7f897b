"""How much temporal redundancy the s2mel DiT has: the quantity the s2mel cache (issue 5) lives on.

    python benchmarks/s2mel_redundancy.py                      # full-size random-weight DiT
    python benchmarks/s2mel_redundancy.py --checkpoint DIR     # the DiT of an official checkpoint

One line (`--frames`, prompt 5/8 of it) through the uncompressed 25-step CFM, run in pieces; every
attention and FFN output is recorded per step (both CFG branches). Printed per module kind, as medians
over layers and steps s >= 1:

- change: |o_s - o_{s-1}| / |o_s| (mean absolute values), what temporal skipping gets wrong at step s.
  Trained DiTs change by a few percent between neighbouring steps (the premise of DiTReducio, FORA and
  similar caches); a module whose output is re-drawn every step has a change near 1 or above.
- share: |o_s| / |h_s|, the module's output against the residual stream it is added to. Skipping a
  module with a small share costs little even when its output changes completely.
- extrapolation: |o_s - (2 o_{s-1} - o_{s-2})| / |o_s|, the first-order alternative to reuse.

Random weights say nothing about a trained model's redundancy: run it on the real checkpoint.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fasttts_cli.cfm.loop import FULL, KINDS, CacheState, run_steps
from fasttts_cli.cfm.schedules import euler_times
from fasttts_cli.indextts2.s2mel_cache import piecewise_torch as pt
from fasttts_cli.nets.random_model import dit_config, random_dit


class _Recorder(pt.TorchPieces):
    def __init__(self, dit: Any) -> None:
        super().__init__(dit)
        self.outs: dict[tuple[str, int], list[torch.Tensor]] = collections.defaultdict(list)
        self.streams: dict[tuple[str, int], list[torch.Tensor]] = collections.defaultdict(list)

    def module(self, kind: str, layer: int, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        out = super().module(kind, layer, x, ctx)
        self.outs[(kind, layer)].append(out.clone())
        self.streams[(kind, layer)].append(x.clone())
        return out


def _mean_abs(a: torch.Tensor) -> float:
    return float(a.abs().mean())


def measure(dit: Any, frames: int, steps: int, seed: int) -> dict[str, dict[str, float]]:
    cfg = dit.cfg
    rng = np.random.default_rng(seed)
    prompt = frames * 5 // 8

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a.astype(np.float32))

    mu = t(rng.standard_normal((1, frames, cfg.content_dim)))
    mel = t(rng.standard_normal((1, 80, prompt)) * 2.0 - 5.0)  # log-mel-like offset and spread
    style = t(rng.standard_normal((1, cfg.style_dim)))
    z = t(rng.standard_normal((1, 80, frames)))
    run, x = pt.prepare(
        mu, torch.tensor([frames]), mel, torch.tensor([prompt]), style, z, euler_times(steps, "uniform")
    )
    rec = _Recorder(dit)
    with torch.inference_mode():
        run_steps(rec, FULL, run, x, CacheState())
    res: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        change, share, extra = [], [], []
        for layer in range(dit.cfg.depth):
            outs, hs = rec.outs[(kind, layer)], rec.streams[(kind, layer)]
            for s in range(1, steps):
                n = _mean_abs(outs[s])
                change.append(_mean_abs(outs[s] - outs[s - 1]) / n)
                share.append(n / _mean_abs(hs[s]))
                if s >= 2:
                    extra.append(_mean_abs(outs[s] - 2 * outs[s - 1] + outs[s - 2]) / n)
        res[kind] = {
            "change": float(np.median(change)),
            "share": float(np.median(share)),
            "extrapolation": float(np.median(extra)),
        }
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, help="official checkpoint (default: random full-size DiT)")
    ap.add_argument("--frames", type=int, default=96)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.checkpoint:
        from fasttts_cli.nets.checkpoint import load_checkpoint

        dit, source = load_checkpoint(a.checkpoint).s2mel.cfm.estimator, str(a.checkpoint)
    else:
        dit, source = random_dit(dit_config(), seed=a.seed), "random full-size DiT"
    res = measure(dit.eval(), a.frames, a.steps, a.seed)
    if a.json:
        print(json.dumps({"source": source, "frames": a.frames, "steps": a.steps, "modules": res}, indent=2))
        return
    print(f"{source}, {a.frames} frames, {a.steps} steps (medians over layers and steps)")
    print(f"{'module':8s} {'change':>8s} {'share':>8s} {'extrap.':>8s}")
    for kind, r in res.items():
        print(f"{kind:8s} {r['change']:8.3f} {r['share']:8.3f} {r['extrapolation']:8.3f}")


if __name__ == "__main__":
    main()
