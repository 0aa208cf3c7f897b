"""Before/after timing of two source trees with `fasttts bench`, alternating A, B, A, B... on one machine.

    python3 -m fasttts_cli.tools.bench_compare A_TREE B_TREE [--rounds 3] [--engine DIR [--checkpoint DIR]]
        [--tokens 8] [--batch 1,4] [--beams 1,3] [--steps-timed 2] [--threads N] [--eager] [--work DIR]
        [--json FILE]

Each run is `python -m fasttts_cli bench ... --json` in a child process whose PYTHONPATH is that tree
(checked: the child imports fasttts_cli from it). Without --engine, each tree writes the tiny checkpoint
(`fasttts tiny-checkpoint`) and builds its own cpu-fp32 engine (`fasttts build`), so each side runs
what its own exporter makes. A shared CPU's speed drifts by tens of percent within minutes, so the two
sides alternate and every figure is reported as the median over rounds with its spread
((max - min) / median); B/A is the ratio of the medians. Run it with A = B to see the noise floor.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the figures compared: key paths into `fasttts bench --json` (ours per batch, and the eager side)
OURS_KEYS = (
    "prefill_s",
    "ms_per_token",
    "ms_per_audio_s",
    "latent_s",
    "codec_decode_s",
    "s2mel_content_s",
    "s2mel_step_s",
    "vocoder_s",
    "batch_s",
)
TOP_KEYS = ("load_s", "voice_prep_s")


@dataclass(frozen=True)
class Tree:
    label: str
    path: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.path), "PYTHONDONTWRITEBYTECODE": "1"}

    def run(self, args: Sequence[str], cwd: Path) -> str:
        cmd = [sys.executable, "-m", "fasttts_cli", *args]
        r = subprocess.run(cmd, cwd=cwd, env=self.env(), capture_output=True, text=True, check=False)
        if r.returncode != 0:
            tail = " / ".join(r.stderr.strip().splitlines()[-4:])
            raise RuntimeError(f"{self.label} ({self.path}): fasttts {' '.join(args[:1])} failed: {tail}")
        return r.stdout

    def check_imported_from(self, cwd: Path) -> None:
        code = "import fasttts_cli, pathlib; print(pathlib.Path(fasttts_cli.__file__).resolve())"
        r = subprocess.run(
            [sys.executable, "-c", code], cwd=cwd, env=self.env(), capture_output=True, text=True
        )
        got = Path(r.stdout.strip())
        if self.path.resolve() not in got.parents:
            raise RuntimeError(f"{self.label}: fasttts_cli imports from {got}, not from {self.path}")


def flatten(result: Mapping[str, Any]) -> dict[str, float]:
    """`fasttts bench --json` -> {"ours b=1 ms_per_token[1]": 12.3, ...} for the figures compared."""
    out: dict[str, float] = {}

    def put(prefix: str, key: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                out[f"{prefix} {key}[{k}]"] = float(v)
        elif isinstance(value, int | float):
            out[f"{prefix} {key}"] = float(value)

    ours = result["ours"]
    for key in TOP_KEYS:
        put("ours", key, ours.get(key))
    for b, row in ours["batches"].items():
        for key in OURS_KEYS:
            put(f"ours b={b}", key, row.get(key))
    eager = result.get("eager")
    if eager:
        for key in (*TOP_KEYS, *OURS_KEYS):
            put("eager", key, eager.get(key))
    return out


def summarize(runs: Sequence[Mapping[str, float]]) -> dict[str, tuple[float, float, float]]:
    """Per figure over the rounds: (median, spread = (max - min) / median, min). On a shared CPU the
    minimum is the steadier estimate of a figure's own cost: contention only ever adds time."""
    out = {}
    for key in runs[0]:
        vals = [r[key] for r in runs if key in r]
        med = statistics.median(vals)
        out[key] = (med, (max(vals) - min(vals)) / med if med else 0.0, min(vals))
    return out


def format_comparison(
    a: Mapping[str, tuple[float, float, float]], b: Mapping[str, tuple[float, float, float]]
) -> str:
    head = ("figure", "A median", "A spread", "A min", "B median", "B spread", "B min", "B/A med", "B/A min")
    rows = [head]
    for key in a:
        if key not in b:
            continue
        (ma, sa, na), (mb, sb, nb) = a[key], b[key]
        rows.append(
            (
                key,
                *(f"{ma:.4g}", f"{100 * sa:.1f}%", f"{na:.4g}", f"{mb:.4g}", f"{100 * sb:.1f}%", f"{nb:.4g}"),
                f"{mb / ma:.3f}" if ma else "-",
                f"{nb / na:.3f}" if na else "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    for side, mine, other in (("A", a, b), ("B", b, a)):
        only = sorted(set(mine) - set(other))
        if only:
            lines.append(f"only in {side}: {', '.join(only)}")
    return "\n".join(lines)


def prepare_engine(tree: Tree, work: Path) -> tuple[Path, Path]:
    """The tiny checkpoint and the cpu-fp32 engine, written by this tree's own CLI."""
    # named by the tree, so a kept --work folder never hands one tree's engine to another
    tag = f"{tree.label}-{hashlib.sha1(str(tree.path).encode()).hexdigest()[:8]}"
    ckpt, engine = work / f"{tag}-ckpt", work / f"{tag}-engine"
    if not (ckpt / "config.yaml").is_file():
        tree.run(["tiny-checkpoint", str(ckpt)], work)
    if not (engine / "manifest.json").is_file():
        tree.run(
            ["build", "--checkpoint", str(ckpt), "--preset", "cpu-fp32", "--out", str(engine), "-q"], work
        )
    return ckpt, engine


def bench_args(a: argparse.Namespace, engine: Path, ckpt: Path | None) -> list[str]:
    args = [
        "bench",
        "--engine",
        str(engine),
        "--tokens",
        str(a.tokens),
        "--batch",
        a.batch,
        "--beams",
        a.beams,
    ]
    args += ["--steps-timed", str(a.steps_timed), "--json", "-q"]
    if a.threads:
        args += ["--threads", str(a.threads)]
    if a.eager and ckpt is not None:
        args += ["--checkpoint", str(ckpt)]
    else:
        args += ["--no-eager"]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python3 -m fasttts_cli.tools.bench_compare", description=__doc__.split("\n")[0]
    )
    ap.add_argument("a", type=Path, help="source tree A (before)")
    ap.add_argument("b", type=Path, help="source tree B (after)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engine", type=Path, help="one prebuilt engine for both sides")
    ap.add_argument("--checkpoint", type=Path, help="its checkpoint (for --eager)")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--batch", default="1,4")
    ap.add_argument("--beams", default="1,3")
    ap.add_argument("--steps-timed", type=int, default=2)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--eager", action="store_true", help="also time the eager side (slower)")
    ap.add_argument("--work", type=Path, help="keep checkpoints and engines here (default: a temp folder)")
    ap.add_argument("--json", type=Path, help="write the runs and the summary here")
    a = ap.parse_args(argv)
    if a.rounds < 3:
        print("bench_compare: --rounds must be 3 or more (a median of alternating runs)", file=sys.stderr)
        return 2
    trees = [Tree("A", a.a.resolve()), Tree("B", a.b.resolve())]
    with tempfile.TemporaryDirectory(prefix="fasttts-bench-compare-") as tmp:
        work = a.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        try:
            for t in trees:
                t.check_imported_from(work)
            engines = {
                t.label: (a.checkpoint, a.engine) if a.engine else prepare_engine(t, work) for t in trees
            }
            runs: dict[str, list[dict[str, float]]] = {t.label: [] for t in trees}
            for r in range(a.rounds):
                for t in trees:
                    ckpt, engine = engines[t.label]
                    print(f"round {r + 1}/{a.rounds}: {t.label} ({t.path})", file=sys.stderr, flush=True)
                    out = t.run(bench_args(a, engine, ckpt), work)
                    runs[t.label].append(flatten(json.loads(out)))
        except RuntimeError as e:
            print(f"bench_compare: {e}", file=sys.stderr)
            return 1
    summary = {k: summarize(v) for k, v in runs.items()}
    print(f"A = {trees[0].path}\nB = {trees[1].path}\n{a.rounds} rounds, alternating A, B")
    print(format_comparison(summary["A"], summary["B"]))
    if a.json:
        a.json.write_text(
            json.dumps({"trees": [str(t.path) for t in trees], "runs": runs, "summary": summary}, indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
