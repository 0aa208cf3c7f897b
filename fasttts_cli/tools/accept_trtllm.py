"""GPU acceptance of the TensorRT-LLM GPT: build the tiny checkpoint's engine the way `fasttts build` does
(numpy conversion, `finalize` and `trtllm-build` in TensorRT-LLM's environment), run it through our
worker, and check it against the worker's numpy reference on the converted checkpoint: teacher-forced
logits and hidden states, latents, greedy codes of ragged lines and sampled 3-beam codes.

    python -m fasttts_cli.tools.accept_trtllm [--sim-cpu] [--prepare] [--work DIR] [--engine-dir DIR]

Without a GPU, `--sim-cpu` runs every step with the fake TensorRT-LLM (`tools/fakes/trtllm.py`) standing
in for $FASTTTS_TRTLLM_PYTHON: the same subprocesses, worker protocol and session driver, CPU numerics.
`--prepare` only writes the tiny checkpoint (what needs no GPU). Ends with the one acceptance table
(`tools/acceptance_table.py`); the exit status is 1 when a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from fasttts_cli.tools.acceptance_table import Table

PROGRAM = "accept_trtllm"
# relative L2 error of logits / hidden / latents vs the float64 reference, per engine precision
TOL = {"fp32": 2e-3, "fp16": 3e-2, "bf16": 5e-2, "w8a16": 5e-2, "w4a16": 0.25}
# fraction of a line's codes that must match the reference before the first divergence (near-ties flip
# in low precision; the fake and fp32 engines must match exactly)
AGREE = {"fp32": 1.0, "fp16": 0.5, "bf16": 0.3, "w8a16": 0.3, "w4a16": 0.0}


def rel(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not np.isfinite(a64).all():
        return float("inf")
    return float(np.linalg.norm(a64 - b64) / max(float(np.linalg.norm(b64)), 1e-30))


def agreement(got: np.ndarray, want: np.ndarray) -> float:
    """Length of the common prefix over the reference's length (1.0 for identical codes)."""
    n = min(got.size, want.size)
    diverge = next((i for i in range(n) if got[i] != want[i]), n)
    same = diverge if (diverge < n or got.size != want.size) else want.size
    return same / max(want.size, 1)


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def prepare(work: Path) -> Path:
    """The tiny random checkpoint (official layout) under work/ckpt; reused when present."""
    from fasttts_cli.build.tiny import write_tiny_checkpoint

    ckpt = work / "ckpt"
    if not (ckpt / "gpt.pth").is_file():
        write_tiny_checkpoint(ckpt, stop_bias=0.0)  # lines run to max_tokens unless a stop is drawn
    return ckpt


def build(ckpt: Path, out: Path, precision: str, python: str) -> tuple[Path, Path]:
    """`build_gpt` exactly as `fasttts build` runs it; returns (engine dir, converted checkpoint dir)."""
    import yaml

    from fasttts_cli.backends.tensorrt_llm import trtllm_convert as tc
    from fasttts_cli.build.trtllm_build import GptSizes, build_gpt
    from fasttts_cli.indextts2.gpt_trtllm import CHECKPOINT_DIR, ENGINE_DIR, GPT_TRTLLM, TRTLLM_PYTHON_ENV
    from fasttts_cli.spec.presets import ComponentSpec, Limits

    g = yaml.safe_load((ckpt / "config.yaml").read_text(encoding="utf-8"))["gpt"]
    state = tc.state_from_gpt_pth(ckpt / "gpt.pth")
    sizes = GptSizes(
        heads=int(g["heads"]),
        n_conds=tc.n_conds_from_state(state),
        start_mel=int(g.get("start_mel_token", 8192)),
        stop_mel=int(g.get("stop_mel_token", 8193)),
        start_text=int(g.get("start_text_token", 0)),
        stop_text=int(g.get("stop_text_token", 1)),
    )
    comp = ComponentSpec("tensorrt-llm", precision, {"max_beam_width": 3})
    with _env(TRTLLM_PYTHON_ENV, python), _env("FASTTTS_TRTLLM_BACKEND", "trtllm"):
        build_gpt(ckpt / "gpt.pth", sizes, comp, Limits(max_batch=2), out)
    return out / GPT_TRTLLM / ENGINE_DIR, out / GPT_TRTLLM / CHECKPOINT_DIR


def check_engine(table: Table, engine: Path, conv: Path, python: str, precision: str, mode: str) -> None:
    from fasttts_cli.indextts2.gpt_trtllm import LinePrompt, TrtllmGPT
    from fasttts_cli.indextts2.sampling import LineDecoder, SamplingParams

    tol, agree = TOL[precision], AGREE[precision] if mode == "ran" else 1.0
    with contextlib.ExitStack() as stack:
        with table.timed("worker starts on the engine", mode) as d:
            gpu = stack.enter_context(TrtllmGPT(engine, backend="trtllm", python=python))
            ref = stack.enter_context(TrtllmGPT(conv, backend="reference"))
            d.append(f"backend {gpu.info.backend}, hidden {gpu.info.hidden_size}")
            assert gpu.info.backend == "trtllm" and gpu.info.layout == ref.layout
        if len(table.checks) and not table.checks[-1].ok:
            return
        lay, dim = ref.layout, ref.info.hidden_size
        rng = np.random.default_rng(0)
        prompts = [
            LinePrompt(
                (0.5 * rng.normal(size=(lay.n_conds, dim))).astype(np.float32), rng.integers(2, 50, size=n)
            )
            for n in (8, 3)
        ]
        codes = rng.integers(0, lay.n_mel - 2, size=12)
        with table.timed("teacher-forced logits and hidden", mode) as d:
            (gl, gh), (wl, wh) = gpu.forced(prompts[0], codes), ref.forced(prompts[0], codes)
            errs = rel(gl, wl), rel(gh, wh)
            d.append(f"rel logits {errs[0]:.2e}, hidden {errs[1]:.2e} (tol {tol:g})")
            assert max(errs) < tol
        with table.timed("latents", mode) as d:
            got, want = gpu.latents(prompts, [codes, codes[:5]]), ref.latents(prompts, [codes, codes[:5]])
            err = max(rel(g, w) for g, w in zip(got, want, strict=True))
            d.append(f"rel {err:.2e} (tol {tol:g})")
            assert err < tol
        for name, params in (
            ("greedy codes, ragged lines", [SamplingParams.greedy(max_tokens=m) for m in (9, 4)]),
            ("sampled codes, 3 beams", [SamplingParams(max_tokens=m) for m in (8, 6)]),
        ):
            with table.timed(name, mode) as d:
                got_codes = gpu.generate(prompts, [LineDecoder(p, 7 + i) for i, p in enumerate(params)])
                want_codes = ref.generate(prompts, [LineDecoder(p, 7 + i) for i, p in enumerate(params)])
                shares = [agreement(g.codes, w.codes) for g, w in zip(got_codes, want_codes, strict=True)]
                d.append(f"agreement {', '.join(f'{s:.2f}' for s in shares)} (need {agree:g})")
                assert min(shares) >= agree


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fasttts_cli.tools.accept_trtllm", description=__doc__)
    ap.add_argument("--sim-cpu", action="store_true", help="the fake TensorRT-LLM on the CPU (no GPU)")
    ap.add_argument("--prepare", action="store_true", help="only write the tiny checkpoint into --work")
    ap.add_argument("--work", type=Path, help="working folder (default: a new temporary one)")
    ap.add_argument("--engine-dir", type=Path, help="check this gpt_trtllm/ folder instead of building one")
    ap.add_argument("--precision", choices=sorted(TOL), help="engine precision (default fp32 sim, fp16)")
    ap.add_argument("--out", type=Path, help="where accept_trtllm.json goes (default $OUT)")
    a = ap.parse_args(argv)
    mode = "sim" if a.sim_cpu else "ran"
    precision = a.precision or ("fp32" if a.sim_cpu else "fp16")
    table = Table(PROGRAM)
    with contextlib.ExitStack() as stack:
        work = a.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="accept-trtllm-")))
        work.mkdir(parents=True, exist_ok=True)
        with table.timed("tiny checkpoint", mode):
            ckpt = prepare(work)
        if a.prepare or not table.ok:
            return table.finish(a.out)
        if a.sim_cpu:
            from fasttts_cli.tools.fakes.trtllm import fake_python

            python: str | None = str(fake_python(work))
        else:
            python = os.environ.get("FASTTTS_TRTLLM_PYTHON")
        if not python:
            table.add("engine build and run", True, "$FASTTTS_TRTLLM_PYTHON is not set", mode="skipped")
            return table.finish(a.out)
        if a.engine_dir is not None:
            from fasttts_cli.indextts2.gpt_trtllm import CHECKPOINT_DIR, ENGINE_DIR

            engine, conv = a.engine_dir / ENGINE_DIR, a.engine_dir / CHECKPOINT_DIR
        else:
            engine, conv = work / "gpt_trtllm" / "engine", work / "gpt_trtllm" / "checkpoint"
            with table.timed(f"convert, finalize and trtllm-build ({precision})", mode) as d:
                engine, conv = build(ckpt, work, precision, python)
                d.append(str(engine))
        if table.ok:
            check_engine(table, engine, conv, python, precision, mode)
    return table.finish(a.out)


if __name__ == "__main__":
    raise SystemExit(main())
