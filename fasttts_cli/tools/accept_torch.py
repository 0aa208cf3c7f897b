"""GPU acceptance of the torch backend: stage parity at fp32/fp16/bf16, then the random-weight bench.

    python3 -m fasttts_cli.tools.accept_torch [--quick] [--sim-cpu] [--out DIR] [bench options]
    python3 -m fasttts_cli.tools.accept_torch --prepare [prepare options]   # beforehand, where PyPI works

1. Dependencies: what does not import is installed offline from the carried `.whl/` (tools/prepare.py).
2. The CUDA-only unit tests of tests/test_torch_backend.py (`pytest -m gpu`: graph replay == eager, fp16
   close to fp32), as one check.
3. Parity: the parity checkpoint is regenerated from the vectors' spec (make_checkpoint.py) and
   `parity_torch.check_case` runs for every vector set at fp32 (TF32 off; the README's 1e-4), fp16 and
   bf16 (`parity_torch.TOLERANCES`), on the device with CUDA graphs: one check per case and precision.
4. IndexTTS-2.5 (tools/accept_torch25.py): a tiny 2.5 checkpoint on the device against the CPU per
   precision, and lines in ja / es / ar through both GPU torch presets.
5. Bench (tools/bench_torch.py): full-size random weights at batch 1, 8, 16, ours vs eager fp16; one check
   per row (finite output, no graph capture failure) and one per target of the issue (H200).
6. Separation (tools/accept_separation.py): `--separate`'s htdemucs (real architecture, random weights) on
   60 s of audio: time per minute of audio, CUDA peak memory, block-by-block == one pass.
7. Serving (tools/accept_serve.py, CUDA only): `fasttts serve` at 1, 4, 16 clients, streaming vs whole,
   server vs processes; goal: first audio under 150 ms at one client.
One table at the end (tools/acceptance_table.py), written as accept_torch.json to --out or $OUT; the exit
status is 1 when any check failed. Budget on one H200: about 5 minutes, --quick about 2.

--sim-cpu runs the same program on the CPU (torch CPU, tiny random model, small batches, few tokens and
steps, parity at fp32 on the first case) so CI runs it end to end; the targets, stated for an H200, are
then skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fasttts_cli.tools import prepare
from fasttts_cli.tools.acceptance_table import Table

PROGRAM = "accept_torch"
REPO = prepare.REPO
PRECISIONS = ("fp32", "fp16", "bf16")


def parity_source() -> Path:
    """$FASTTTS_PARITY_DIR, else a carried copy, else the repository's own tests/data/parity."""
    if os.environ.get("FASTTTS_PARITY_DIR"):
        return Path(os.environ["FASTTTS_PARITY_DIR"])
    return prepare.PARITY_COPY if prepare.PARITY_COPY.is_dir() else prepare.default_parity_source()


@dataclass(frozen=True)
class ParityCase:
    name: str
    arrays: dict[str, Any]
    seed: int


def load_parity_cases(folder: Path) -> list[ParityCase]:
    """Every vectors_*.npz; delta sets (`base`, `same_as_base` in the sidecar) completed from their base."""
    import numpy as np

    cases = []
    for npz in sorted(folder.glob("vectors_*.npz")):
        side = json.loads(npz.with_suffix(".json").read_text(encoding="utf-8"))
        arrays = dict(np.load(npz, allow_pickle=False))
        if side.get("base"):
            base = dict(np.load(folder / side["base"], allow_pickle=False))
            for k in side.get("same_as_base", []):
                arrays.setdefault(k, base[k])
        cases.append(ParityCase(npz.stem, arrays, int(side["checkpoint"]["weight_seed"])))
    return cases


def parity_checkpoint(folder: Path, seed: int, cache: Path) -> Path:
    """`cache/parity-ckpt-seed{seed}` (the name tests/parity.py uses), regenerated unless complete."""
    out = cache / f"parity-ckpt-seed{seed}"
    if not (out / "make_checkpoint.json").is_file():
        spec = prepare.parity_spec(folder)
        maker = [sys.executable, str(spec / "make_checkpoint.py"), str(out), "--spec", str(spec)]
        subprocess.run([*maker, "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
    return out


def run_parity(
    table: Table,
    folder: Path,
    cache: Path,
    dev: Any,
    precisions: Sequence[str],
    mode: str,
    max_cases: int | None = None,
) -> None:
    import yaml

    from fasttts_cli.nets.bigvgan import load_bigvgan
    from fasttts_cli.nets.s2mel import load_s2mel
    from fasttts_cli.nets.unified_voice import load_unified_voice
    from fasttts_cli.tools.parity_torch import check_case

    cases = load_parity_cases(folder)[:max_cases]
    if not cases or not (prepare.parity_spec(folder) / "make_checkpoint.py").is_file():
        table.add("parity vectors", False, f"no vectors_*.npz / make_checkpoint.py in {folder}", mode=mode)
        return
    models: dict[int, tuple] = {}
    for case in cases:
        if case.seed not in models:
            with table.timed(f"parity checkpoint seed {case.seed}", mode) as d:
                ck = parity_checkpoint(folder, case.seed, cache)
                cfg = yaml.safe_load((ck / "config.yaml").read_text(encoding="utf-8"))
                models[case.seed] = (
                    load_unified_voice(ck / "gpt.pth", cfg["gpt"]),
                    load_s2mel(ck / "s2mel.pth", cfg["s2mel"]),
                    load_bigvgan(ck / "hf_cache" / "bigvgan"),
                )
                d.append(str(ck))
        if case.seed not in models:
            continue
        for prec in precisions:
            with table.timed(f"parity {case.name} {prec}", mode) as d:
                checks = check_case(case.arrays, *models[case.seed], precision=prec, device=dev)
                bad = [c for c in checks if not c.ok]
                worst = max(
                    checks, key=lambda c: c.value / c.tol if c.tol else (0.0 if c.value == 0 else 1e9)
                )
                d.append(f"{len(checks) - len(bad)}/{len(checks)} within tolerance")
                d.append(f"worst {worst.stage} {worst.what} {worst.value:.2e} (tol {worst.tol:.0e})")
                if bad:
                    raise AssertionError(
                        "; ".join(f"{c.stage} {c.what} {c.value:.3e} > {c.tol:.1e}" for c in bad)
                    )


def run_unit_tests(table: Table) -> None:
    """The CUDA-only tests of the torch backend, in a child pytest: every failure counts."""
    with table.timed("pytest -m gpu tests/test_torch_backend.py") as d:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu"]
        r = subprocess.run([*cmd, "tests/test_torch_backend.py"], cwd=REPO, capture_output=True, text=True)
        last = (r.stdout.strip().splitlines() or ["(no output)"])[-1]
        d.append(last)
        if r.returncode != 0:
            print(r.stdout[-4000:], r.stderr[-2000:], sep="\n", flush=True)
            raise AssertionError(f"pytest exit status {r.returncode}")
        if " passed" not in last:
            raise AssertionError("no GPU test ran")


def run_bench_checks(table: Table, cfg: Any, dev: Any, mode: str, with_targets: bool) -> None:
    from fasttts_cli.tools.bench_torch import format_rows, run_bench, targets

    rows = []
    with table.timed(f"bench build + run ({cfg.size} random weights)", mode) as d:
        rows = run_bench(cfg, dev, log=lambda m: print(m, flush=True))
        d.append(f"{len(rows)} rows, {cfg.tokens} codes/line, {cfg.steps} steps, ours {cfg.precision}")
    if rows:
        print(format_rows(rows), flush=True)
    for r in rows:
        detail = (
            f"ms/token {r.decode_ms_per_token:.2f}, RTF {r.rtf:.4f}, xRT {r.x_realtime:.1f}, "
            f"lines/s {r.lines_per_s:.2f}, peak {r.peak_gb:.2f} GB"
        )
        failures = r.extra.get("graph_failures") or []
        ok = r.total_s > 0 and r.extra.get("finite", True) and not failures
        if failures:
            detail += f"; graph capture failed: {', '.join(failures)}"
        if r.extra.get("finite") is False:
            detail += "; non-finite output"
        table.add(f"bench {r.config} B={r.batch}", ok, detail, r.total_s, mode)
    for name, met, measured in targets(rows):
        if with_targets:
            table.add(f"target: {name}", met, measured)
        else:
            table.add(
                f"target: {name}", False, f"{measured} (stated for an H200: not judged)", mode="skipped"
            )


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog=f"python3 -m fasttts_cli.tools.{PROGRAM}", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--sim-cpu", action="store_true", help="the same program on the CPU, small sizes")
    ap.add_argument("--quick", action="store_true", help="a ~2-minute subset (one case, fewer batches)")
    ap.add_argument("--out", type=Path, default=None, help="where accept_torch.json goes (default $OUT)")
    ap.add_argument("--parity-dir", type=Path, default=None)
    ap.add_argument("--parity-cache", type=Path, default=None, help="keep/reuse parity checkpoints here")
    ap.add_argument("--parity-precisions", default=None, help="default fp32,fp16,bf16 (--sim-cpu: fp32)")
    ap.add_argument("--skip-parity", action="store_true")
    ap.add_argument("--skip-unit-tests", action="store_true")
    ap.add_argument("--skip-v25", action="store_true", help="no IndexTTS-2.5 checks")
    ap.add_argument("--skip-separation", action="store_true", help="no --separate (htdemucs) timing")
    ap.add_argument("--skip-baseline", action="store_true", help="no eager side in the bench")
    ap.add_argument("--skip-serve", action="store_true", help="no serving table (fasttts serve, issue 33)")
    ap.add_argument("--batches", default=None, help="default 1,8,16 (--quick 1,16; --sim-cpu 1,2)")
    ap.add_argument("--beam3-batches", default=None, help="also with 3 beams (default 1,16; --sim-cpu 1)")
    ap.add_argument("--tokens", type=int, default=None, help="codes per line (100 = 2 s; --sim-cpu 4)")
    ap.add_argument("--steps", type=int, default=None, help="Euler steps (25; --sim-cpu 2)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per row (2; --quick/--sim-cpu 1)")
    ap.add_argument("--precision", default=None, choices=PRECISIONS, help="ours (fp16; --sim-cpu fp32)")
    ap.add_argument("--device", default=None, help="default cuda (--sim-cpu: cpu)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    return ap.parse_args(argv)


def bench_config(a: argparse.Namespace) -> Any:
    from fasttts_cli.tools.bench_torch import BenchConfig

    if a.sim_cpu:
        cfg = BenchConfig("tiny", (1, 2), (1,), tokens=4, prompt_frames=12, text_tokens=8, steps=2, repeats=1)
    elif a.quick:
        cfg = BenchConfig(batches=(1, 16), beam3_batches=(), repeats=1)
    else:
        cfg = BenchConfig()
    given = {
        "batches": _ints(a.batches) if a.batches is not None else None,
        "beam3_batches": _ints(a.beam3_batches) if a.beam3_batches is not None else None,
        "tokens": a.tokens,
        "steps": a.steps,
        "repeats": a.repeats,
    }
    return replace(
        cfg,
        precision=a.precision or ("fp32" if a.sim_cpu else "fp16"),
        baseline=not a.skip_baseline,
        **{k: v for k, v in given.items() if v is not None},
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--prepare"]:
        return prepare.main(argv[1:])
    a = parse_args(argv)
    mode = "sim" if a.sim_cpu else "ran"
    table = Table(PROGRAM)
    t_start = time.perf_counter()
    with table.timed("dependencies", mode) as d:
        installed = prepare.ensure_installed(prepare.TORCH_PACKAGES)
        d.append(f"installed from .whl: {', '.join(installed)}" if installed else "all present")
    try:
        import torch
    except ImportError as e:
        table.add("torch", False, f"{e}: the torch path needs PyTorch")
        return table.finish(a.out)
    dev = torch.device(a.device or ("cpu" if a.sim_cpu else "cuda"))
    env = f"torch {torch.__version__}, CUDA {torch.version.cuda}, python {sys.version.split()[0]}"
    if dev.type == "cuda" and not torch.cuda.is_available():
        table.add("cuda device", False, f"no CUDA device visible to torch ({env}); use --sim-cpu without one")
        return table.finish(a.out)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    table.add("environment", True, f"{name}; {env}", mode=mode)
    torch.set_grad_enabled(False)
    if a.threads:
        torch.set_num_threads(a.threads)

    if a.skip_unit_tests or dev.type != "cuda":
        table.add(
            "pytest -m gpu tests/test_torch_backend.py",
            False,
            "--skip-unit-tests" if a.skip_unit_tests else "CUDA-only tests: no CUDA here",
            mode="skipped",
        )
    else:
        run_unit_tests(table)
    default = "fp32" if a.sim_cpu else ("fp32,fp16" if a.quick else ",".join(PRECISIONS))
    precisions = [p for p in (a.parity_precisions or default).split(",") if p]
    if a.skip_parity:
        table.add("parity", False, "--skip-parity", mode="skipped")
    else:
        with tempfile.TemporaryDirectory(prefix="fasttts-parity-") as tmp:
            cache = a.parity_cache or Path(tmp)
            folder = a.parity_dir or parity_source()
            # --sim-cpu checks the program's path; tests/test_torch_backend_parity.py covers every case on CPU
            run_parity(table, folder, cache, dev, precisions, mode, 1 if a.quick or a.sim_cpu else None)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    if a.skip_v25:
        table.add("2.5", False, "--skip-v25", mode="skipped")
    else:
        from fasttts_cli.tools.accept_torch25 import run_v25

        with tempfile.TemporaryDirectory(prefix="fasttts-v25-") as tmp:
            run_v25(table, dev, mode, precisions, Path(tmp))
    run_bench_checks(table, bench_config(a), dev, mode, with_targets=not a.sim_cpu)
    if a.skip_separation:
        table.add("separation", False, "--skip-separation", mode="skipped")
    else:
        from fasttts_cli.tools.accept_separation import run_separation

        with tempfile.TemporaryDirectory(prefix="fasttts-separation-") as tmp:
            run_separation(table, dev, mode, Path(tmp))
    if a.skip_serve or dev.type != "cuda":
        why = "--skip-serve" if a.skip_serve else "CUDA only (the CPU table: benchmarks/serve_bench.py)"
        table.add("serve bench", False, why, mode="skipped")
    else:
        from fasttts_cli.tools.accept_serve import run_serve_checks

        with tempfile.TemporaryDirectory(prefix="fasttts-serve-") as tmp:
            run_serve_checks(table, Path(tmp), mode)
    table.add("wall time", True, f"{time.perf_counter() - t_start:.0f} s", mode=mode)
    return table.finish(a.out)


if __name__ == "__main__":
    raise SystemExit(main())
