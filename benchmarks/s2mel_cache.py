"""Issue 5, item 5: s2mel cache levels T0..T6 -- fraction of module computations kept, s2mel stage time,
output error vs T0 -- on the tiny DiT and on a full-size (13 x 512) random-weight DiT.

    python benchmarks/s2mel_cache.py --sizes tiny,full --threads 2 --json out.json

Per size: random weights from the one random-model factory (fasttts_cli/nets/random_model.py),
the pieces exported to ONNX and run on ONNX Runtime (the runtime path), levels T1..T6 calibrated on
random calibration lines, then one held-out line of `--frames` frames (prompt 5/8 of it, as the
reference's 215 + 129) timed through the 25-step CFM at every level. Random weights say nothing about
audible quality: real thresholds must be calibrated and judged on the real checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fasttts_cli.backends.onnxruntime.session import available_cpus
from fasttts_cli.build.s2mel_pieces import export_pieces
from fasttts_cli.indextts2.cfm import ort_opener
from fasttts_cli.indextts2.s2mel_cache import piecewise_ort as po
from fasttts_cli.indextts2.s2mel_cache.calibrate import calibrate_ort, relative_mae
from fasttts_cli.indextts2.s2mel_cache.policy import LEVELS
from fasttts_cli.nets.random_model import dit_config, random_dit

SIZES = {
    # the parity/tiny checkpoint's DiT shape (tools/parity2/config.yaml): 64 wide, 3 blocks, 2 heads
    "tiny": dict(hidden=64, depth=3, heads=2, content_dim=64, style_dim=192, wavenet_layers=2),
    # the release config (spec §1.2): 512 wide, 13 blocks, 8 heads, WaveNet 8 layers
    "full": dict(),
}


def line(rng: np.random.Generator, frames: int, prompt: int, content_dim: int, style_dim: int) -> dict:
    mel = rng.standard_normal((80, prompt)).astype(np.float32) * 2.0 - 5.0  # log-mel-like offset and spread
    return {
        "mu": rng.standard_normal((frames, content_dim)).astype(np.float32),
        "prompt": mel,
        "style": rng.standard_normal(style_dim).astype(np.float32),
    }


def bench_size(name: str, args: argparse.Namespace, out_dir: Path) -> dict:
    torch.set_num_threads(args.threads)
    cfg = dit_config(**SIZES[name])
    dit = random_dit(cfg, seed=args.seed)
    t0 = time.perf_counter()
    export_pieces(dit, out_dir / name, verify=True)
    export_s = time.perf_counter() - t0
    pieces = po.OrtPieces.load(out_dir / name, ort_opener(args.threads), diag=True)
    rng = np.random.default_rng(args.seed)
    cal_frames = args.cal_frames_tiny if name == "tiny" else args.cal_frames_full
    n_cal = args.cal_lines_tiny if name == "tiny" else args.cal_lines_full
    rows = [line(rng, cal_frames, cal_frames * 5 // 8, cfg.content_dim, cfg.style_dim) for _ in range(n_cal)]
    levels = [lv for lv in args.levels.split(",") if lv != "T0"]
    t0 = time.perf_counter()
    ps, reports = calibrate_ort(
        pieces,
        rows,
        levels,
        engine_id=f"benchmark-{name}",
        steps=args.steps,
        seed=args.seed,
        max_trials=args.max_trials_full if name == "full" else None,
        progress=(lambda m: print(f"  [{name}] {m}", file=sys.stderr, flush=True)) if args.verbose else None,
    )
    cal_s = time.perf_counter() - t0
    rep = {r.level: r for r in reports}

    ev = line(
        np.random.default_rng(args.seed + 1000),
        args.frames,
        args.frames * 5 // 8,
        cfg.content_dim,
        cfg.style_dim,
    )
    z = np.random.default_rng(args.seed + 2000).standard_normal((1, 80, args.frames)).astype(np.float32)
    feed = (
        ev["mu"][None],
        np.array([args.frames]),
        ev["prompt"][None],
        np.array([ev["prompt"].shape[1]]),
        ev["style"][None],
        z,
    )
    keep = po.prepare(*feed, np.linspace(0, 1, 2).astype(np.float32))[0].keep
    timed = ["T0", *levels]
    po.solve(pieces, *feed, 2, plan=None)  # warm-up (session arenas)
    # Round-robin repeats, median per level: this machine's speed drifts by tens of percent within
    # minutes, so levels timed one after another in one block each would compare different machines.
    secs: dict[str, list[float]] = {lv: [] for lv in timed}
    outs: dict[str, np.ndarray] = {}
    for _ in range(args.repeats):
        for lv in timed:
            t0 = time.perf_counter()
            outs[lv] = po.solve(pieces, *feed, args.steps, plan=None if lv == "T0" else ps.levels[lv])
            secs[lv].append(time.perf_counter() - t0)
    results = []
    ref = outs["T0"]
    for lv in timed:
        pol = None if lv == "T0" else ps.levels[lv]
        x, sec = outs[lv], float(np.median(secs[lv]))
        gen = ref[0][:, keep[0, 0] > 0]
        mae = float(np.abs(x - ref)[0][:, keep[0, 0] > 0].mean())
        results.append(
            {
                "level": lv,
                "threshold": LEVELS[lv],
                "modules_kept": 1.0 if pol is None else pol.kept_fraction(),
                "head_kept": 1.0 if pol is None else pol.head_fraction(),
                "s2mel_s": sec,
                "speedup": None,
                "mae": mae,
                "mae_pct_range": 100 * mae / float(gen.max() - gen.min()),
                "rel_mae_heldout": relative_mae(x, ref, keep),
                "cal_error": 0.0 if pol is None else rep[lv].error,
                "cal_trials": 0 if pol is None else rep[lv].trials,
                "cal_truncated": False if pol is None else rep[lv].truncated,
                "cal_s": 0.0 if pol is None else rep[lv].seconds,
            }
        )
    for r in results:
        r["speedup"] = results[0]["s2mel_s"] / r["s2mel_s"]
    return {
        "size": name,
        "config": {
            "hidden": cfg.hidden_dim,
            "depth": cfg.depth,
            "heads": cfg.num_heads,
            "wavenet": cfg.wavenet.num_layers,
        },
        "frames": args.frames,
        "steps": args.steps,
        "threads": args.threads,
        "export_s": export_s,
        "calibration": {"lines": n_cal, "frames": cal_frames, "seconds": cal_s},
        "levels": results,
        "load_avg": os.getloadavg(),
    }


def table(res: dict) -> str:
    c = res["config"]
    lines = [
        f"### {res['size']}: DiT {c['depth']} x {c['hidden']} ({c['heads']} heads, WaveNet {c['wavenet']}), "
        f"{res['frames']} frames, {res['steps']} steps, {res['threads']} thread(s); calibration "
        f"{res['calibration']['lines']} line(s) x {res['calibration']['frames']} frames, "
        f"{res['calibration']['seconds']:.0f} s; load avg {res['load_avg'][0]:.1f}",
        "",
        "| level | thr (rel. MAE) | modules kept | head kept | s2mel s | speed-up | MAE vs T0 "
        "| % of mel range | cal. error | cal. trials |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["levels"]:
        lines.append(
            f"| {r['level']} | {r['threshold']:g} | {r['modules_kept']:.3f} | {r['head_kept']:.2f} | "
            f"{r['s2mel_s']:.2f} | {r['speedup']:.2f}x | {r['mae']:.4f} | {r['mae_pct_range']:.2f}% | "
            f"{r['cal_error']:.4f} | {r['cal_trials']}{' (capped)' if r['cal_truncated'] else ''} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="tiny,full")
    ap.add_argument("--frames", type=int, default=344, help="held-out line length (prompt + generated)")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--threads", type=int, default=available_cpus(), help="default: the CPUs we may use")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cal-lines-tiny", type=int, default=2)
    ap.add_argument("--cal-frames-tiny", type=int, default=64)
    ap.add_argument("--cal-lines-full", type=int, default=1)
    ap.add_argument("--cal-frames-full", type=int, default=12)
    ap.add_argument("--max-trials-full", type=int, default=32, help="calibration trials per pass (full size)")
    ap.add_argument("--levels", default=",".join(LEVELS), help="levels to calibrate and time (T0 always)")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per level, round-robin (median)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sizes.split(","):
            res = bench_size(name, args, Path(tmp))
            out.append(res)
            print(table(res), flush=True)
            print(flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
