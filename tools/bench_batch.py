"""Issue 22 benchmark: lines/s for a 3-job manifest run as three separate `fasttts dub` processes against
one `fasttts batch` process (and `batch --workers N` where the fleet's worker pools are installed), the
sides alternated round by round on the same machine, every run from empty work folders.

    python tools/bench_batch.py --engine DIR --rounds 3 --lines 8 [--workers 1,2] [--json out.json]

Without --engine a tiny random-weight IndexTTS-2 engine is built in a temporary folder first (about
30 s). `--engine draft` measures the Piper draft voice. Not a test: wall-clock numbers of a shared CPU
drift, which is why the sides alternate, the table reports medians, and CPU seconds (of each run's
whole process tree) stand next to wall seconds: on a machine other jobs share, CPU time is the steadier
measure of the work done.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORDS = [
    "the",
    "night",
    "was",
    "long",
    "and",
    "the",
    "road",
    "went",
    "on",
    "past",
    "the",
    "river",
    "where",
    "the",
    "old",
    "mill",
    "stood",
    "silent",
    "while",
    "we",
    "waited",
    "for",
    "morning",
    "and",
    "the",
    "first",
    "train",
    "out",
    "of",
    "town",
]


def write_inputs(folder: Path, n_lines: int) -> list[dict[str, str]]:
    """Three episodes of `n_lines` lines, two speakers each (two reference voices)."""
    from tests.conftest_engine import write_test_voice

    folder.mkdir(parents=True, exist_ok=True)
    a = write_test_voice(folder / "alice.wav")
    b = write_test_voice(folder / "bob.wav", 3.0, 16000, 210.0, 1)
    rows = []
    for ep in (1, 2, 3):
        cues = []
        for i in range(n_lines):
            k = (i * 3 + ep) % 10
            text = " ".join(WORDS[k : k + 4 + i % 5]).capitalize() + "."
            t0 = 0.5 + 3.0 * i
            cues.append(f"{t0:.2f}\t{t0 + 2.5:.2f}\t{'ALICE' if i % 2 == 0 else 'BOB'}\t{text}")
        script = folder / f"ep{ep}.tsv"
        script.write_text("start\tend\tspeaker\ttext\n" + "\n".join(cues) + "\n")
        rows.append({"id": f"ep{ep}", "script": str(script), "voice": [f"ALICE={a}", f"BOB={b}"]})
    return rows


def fasttts(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and everything it started and waited for)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "fasttts_cli", *args, "-q"], env=env, capture_output=True, text=True
    )
    if p.returncode != 0:
        raise SystemExit(f"fasttts {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def separate(rows: list[dict[str, object]], engine: str, out: Path) -> tuple[float, float]:
    wall = cpu = 0.0
    for r in rows:
        voices = [f"--voice={v}" for v in r["voice"]]  # type: ignore[union-attr]
        w, c = fasttts(["dub", str(r["script"]), *voices, "--engine", engine, "--output-dir", str(out)])
        wall, cpu = wall + w, cpu + c
    return wall, cpu


def batch(manifest: Path, engine: str, out: Path, workers: int | None) -> tuple[float, float]:
    extra = [] if workers is None else ["--workers", str(workers)]
    return fasttts(["batch", str(manifest), *extra, "--engine", engine, "--output-dir", str(out)])


def workers_available() -> bool:
    from fasttts_cli.app.fleet import EngineSpec, open_pool

    try:
        open_pool(EngineSpec(None, None), workers=1).close()
    except NotImplementedError:
        return False
    except Exception:
        return True  # the pool exists; it could not start here without an engine
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", help="engine folder or 'draft' (default: build a tiny random-weight one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lines", type=int, default=8, help="lines per job")
    ap.add_argument("--workers", default="", help="also `batch --workers N` for each N (e.g. 1,2)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fasttts-bench-batch-"))
    try:
        engine = a.engine
        if engine is None:
            import torch

            from fasttts_cli.build.export import build_engine
            from fasttts_cli.build.tiny import write_tiny_checkpoint

            torch.set_num_threads(1)
            ckpt = write_tiny_checkpoint(tmp / "ckpt", stop_bias=0.0)
            engine = str(build_engine(ckpt, "cpu-fp32", tmp / "engine", overwrite=True))
        rows = write_inputs(tmp / "in", a.lines)
        manifest = tmp / "jobs.jsonl"
        manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
        n_lines = 3 * a.lines
        sides: dict[str, list[tuple[float, float]]] = {"3 x dub": [], "batch": []}
        ws = [int(w) for w in a.workers.split(",") if w.strip()]
        if ws and not workers_available():
            print("note: the worker-process pool is not in this build; no --workers rows", file=sys.stderr)
            ws = []
        for w in ws:
            sides[f"batch --workers {w}"] = []
        for rnd in range(a.rounds):
            for name in sides:
                out = tmp / f"out-{rnd}-{name.replace(' ', '_')}"
                if name == "3 x dub":
                    got = separate(rows, engine, out)
                else:
                    w = int(name.rsplit(" ", 1)[1]) if "workers" in name else None
                    got = batch(manifest, engine, out, w)
                sides[name].append(got)
                shutil.rmtree(out, ignore_errors=True)
                print(
                    f"round {rnd + 1}: {name}: {got[0]:.2f} s wall, {got[1]:.2f} s CPU "
                    f"({n_lines / got[0]:.2f} lines/s)",
                    file=sys.stderr,
                )
        table = {}
        for name, runs in sides.items():
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            table[name] = {
                "median_wall_s": round(wall, 3),
                "lines_per_s": round(n_lines / wall, 3),
                "median_cpu_s": round(cpu, 3),
                "lines_per_cpu_s": round(n_lines / cpu, 3),
                "runs": [[round(w, 3), round(c, 3)] for w, c in runs],
            }
        print(f"{a.rounds} rounds, 3 jobs x {a.lines} lines, engine {engine}")
        print("| side | median wall s | lines/s | median CPU s | lines per CPU s |")
        print("|---|---|---|---|---|")
        for name, r in table.items():
            print(
                f"| {name} | {r['median_wall_s']} | {r['lines_per_s']} | {r['median_cpu_s']} | "
                f"{r['lines_per_cpu_s']} |"
            )
        if a.json:
            a.json.write_text(json.dumps({"lines": n_lines, "engine": engine, "sides": table}, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
