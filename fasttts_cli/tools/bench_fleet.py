"""Lines planned per second by each kind of pool on the same tasks, the pools taking turns.

    python -m fasttts_cli.tools.bench_fleet --engine ENGINE [--preset P] [--lines 24] [--batch 4]
        [--rounds 3] [--ray] [--json]

Every pool is opened first (engine loads are reported, not counted), warmed once on the tasks, then the
rounds run each pool on the same tasks in turn, the order rotating every round, so the pools share the
machine's state (clocks, other load) alike. A run's rate is lines / wall seconds from the first batch
handed over to the last outcome back. Not a test: the numbers depend on the machine."""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fasttts_cli.app.fleet import EngineSpec, LineOutcome, LineTask, Pool, open_pool
from fasttts_cli.dubbing.cache import line_seed
from fasttts_cli.synth.synthesizer import EmotionSpec

_PHRASES = (
    "the night was long",
    "and every window in the street was dark",
    "except one where somebody still read aloud",
    "from an old book about ships and rivers",
    "and the people who waited for them",
)
_WORDS = [w for p in _PHRASES for w in p.split()]


def bench_tasks(voices: list[Path], n: int) -> list[LineTask]:
    """n lines of 4 to 15 words, the voices in turn, seeded as a dub seeds them."""
    tasks = []
    for i in range(n):
        words = 4 + (i * 7) % 12
        text = " ".join(_WORDS[(i * 5 + k) % len(_WORDS)] for k in range(words)).capitalize() + "."
        v = voices[i % len(voices)]
        tasks.append(LineTask(f"l{i}", text, v, v.stem, EmotionSpec(), line_seed(text, v.stem, i), None))
    return tasks


def synthetic_voices(folder: Path) -> list[Path]:
    """Two voice-like references (harmonic tones with vibrato), written with soundfile."""
    import numpy as np
    import soundfile as sf

    out = []
    for name, f0, sr, secs in (("low", 130.0, 24000, 3.0), ("high", 220.0, 16000, 4.0)):
        t = np.arange(int(secs * sr)) / sr
        phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.03 * np.sin(2 * np.pi * 5 * t))) / sr
        x = 0.2 * sum(np.sin(k * phase) / k for k in range(1, 10)) * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t))
        sf.write(str(folder / f"{name}.wav"), x.astype(np.float32), sr, subtype="PCM_16")
        out.append(folder / f"{name}.wav")
    return out


def timed_run(pool: Pool, batches: list[list[LineTask]], max_retries: int) -> tuple[float, int, int]:
    """(seconds, lines, lines the guard or the engine failed). A failed line cost its full plan (a
    runaway runs to the token limit), so it counts; a lost line ends the benchmark."""
    got: list[LineOutcome] = []
    t0 = time.perf_counter()
    pool.run(batches, max_retries, got.append)
    secs = time.perf_counter() - t0
    if sorted(o.key for o in got) != sorted(t.key for b in batches for t in b):
        raise SystemExit(f"a pool lost lines or handed one over twice: {len(got)} outcomes")
    return secs, len(got), sum(not o.ok for o in got)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", required=True, help="engine folder or checkpoint directory")
    ap.add_argument("--preset", default=None)
    ap.add_argument("--lines", type=int, default=24)
    ap.add_argument("--batch", type=int, default=4, help="lines per batch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ray", action="store_true", help="also Ray with 2 actors (a local cluster of its own)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        voices = synthetic_voices(Path(tmp))
        tasks = bench_tasks(voices, a.lines)
        batches = [tasks[i : i + a.batch] for i in range(0, len(tasks), a.batch)]
        spec = EngineSpec(a.engine, a.preset, voices_dir=Path(tmp) / "voices")
        kinds: dict[str, dict[str, Any]] = {"local": {}, "procs1": {"workers": 1}, "procs2": {"workers": 2}}
        ray = None
        if a.ray:
            import ray

            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            kinds["ray2"] = {"ray": "auto", "workers": 2}
        pools: dict[str, Pool] = {}
        loads: dict[str, float] = {}
        try:
            for name, how in kinds.items():
                t0 = time.perf_counter()
                if name == "procs1":  # open_pool keeps workers=1 in this process: ask for the pool itself
                    from fasttts_cli.app.fleet_procs import ProcessPool

                    pools[name] = ProcessPool(spec, 1)
                else:
                    pools[name] = open_pool(spec, **how)
                loads[name] = time.perf_counter() - t0
                timed_run(pools[name], batches, 0)  # warm: voices prepared, sessions opened
            rates: dict[str, list[float]] = {n: [] for n in pools}
            failed = dict.fromkeys(pools, 0)
            names = list(pools)
            for r in range(a.rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    secs, n, bad = timed_run(pools[name], batches, 0)
                    rates[name].append(n / secs)
                    failed[name] += bad
        finally:
            for p in pools.values():
                p.close()
            if ray is not None:
                ray.shutdown()
    rows = [
        {
            "pool": name,
            "workers": pools[name].workers,
            "load_s": round(loads[name], 2),
            "lines_per_s": round(statistics.median(rates[name]), 3),
            "runs": [round(x, 3) for x in rates[name]],
            "failed_lines": failed[name],
        }
        for name in names
    ]
    if a.json:
        print(json.dumps({"lines": a.lines, "batch": a.batch, "rounds": a.rounds, "rows": rows}))
        return 0
    print(f"{a.lines} lines in batches of {a.batch}, {a.rounds} rounds, pools in turn (median lines/s)")
    print("| pool | workers | engine load s | lines/s | runs | failed lines |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        runs = " ".join(map(str, row["runs"]))
        cells = [row["pool"], row["workers"], row["load_s"], row["lines_per_s"], runs, row["failed_lines"]]
        print("| " + " | ".join(map(str, cells)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
