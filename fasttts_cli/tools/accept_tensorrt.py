"""GPU acceptance of the TensorRT backend: `python3 -m fasttts_cli.tools.accept_tensorrt [options]`.

For a random checkpoint (tiny, or full size with `--only full`): the CPU fp32 reference engine (classic
GPT trunk, no ONNX Runtime contrib ops: the graphs `fasttts build` makes for TensorRT), every component
converted as the preset says (fp16 ONNX with fp32 islands; BigVGAN, codec and CAMPPlus fp32), the static
output-size check (build/onnx_shapes), a strongly typed plan per component with the preset's profiles,
each plan run through TrtSession against the CPU fp32 ONNX on the exporter's verification shapes
(relative L2 error; integer outputs by mismatch share), then the GPT trunk plan driven by GPTDecoder:
teacher-forced logits against CPU fp32, and a 3-beam generation with the KV cache on the device. One
table at the end (tools/acceptance_table); exit status 1 when any check failed.

  --prepare   the CPU half only (checkpoint, reference engine, conversions, cases with their reference
              outputs as .npz) into --work, so the GPU half needs no torch: numpy, onnx, onnxruntime,
              tensorrt and cuda-python (`pip install 'fasttts-cli[gpu]'`).
  --sim-cpu   everything through the fakes of tensorrt and cuda-python (tools/fakes: plans run by ONNX
              Runtime on the CPU), which is how CI runs this program; checks are reported as mode "sim".

Tolerances (relative L2 vs CPU fp32): fp32 plans 2e-3 (TensorRT may use TF32), fp16 3e-2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.tools.acceptance_table import Table

PROGRAM = "accept_tensorrt"
TOL = {"fp32": 2e-3, "fp16": 3e-2, "bf16": 5e-2}
INT_TOL = 0.01  # integer outputs (codec indices): share of entries that may differ near a tie


def rel(a: np.ndarray, b: np.ndarray) -> float:
    """Relative L2 error; inf when the result has NaN/inf."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a64.shape != b64.shape or not np.isfinite(a64).all():
        return float("inf")
    n = np.linalg.norm(b64)
    return float(np.linalg.norm(a64 - b64) / (n if n > 0 else 1.0))


def _layout(work: Path, kind: str, preset: str) -> dict[str, Path]:
    return {
        "ckpt": work / f"{kind}-checkpoint",
        "ref": work / f"{kind}-cpu-fp32",
        "out": work / f"{kind}-{preset}",
        "cases": work / f"{kind}-{preset}" / "cases",
    }


def _clip(n: int, r: Any) -> int:
    return max(r.min, min(n, r.max))


# ------------------------------------------------------------------------------------------ CPU half


def prepare(work: Path, kind: str, preset_name: str, say: Any = print) -> dict[str, Any]:
    """The CPU half: writes the checkpoint, the reference engine, the converted ONNX and the cases, and
    `prepared.json` describing them; returns that description. Needs the `build` extra (torch)."""
    import torch

    from fasttts_cli.backends.onnxruntime.session import OrtSession, SessionOptions
    from fasttts_cli.build import tensorrt_build as tb
    from fasttts_cli.build import tiny
    from fasttts_cli.build.export import build_engine, engine_specs
    from fasttts_cli.build.quantize import apply_precision
    from fasttts_cli.indextts2 import decode as dec
    from fasttts_cli.indextts2.components import built_for_target_frames
    from fasttts_cli.nets.checkpoint import load_checkpoint
    from fasttts_cli.spec.engine_folder import read_manifest
    from fasttts_cli.spec.presets import ComponentSpec, load_preset

    torch.set_grad_enabled(False)
    p = _layout(work, kind, preset_name)
    if not (p["ckpt"] / "config.yaml").exists():
        say(f"writing the {kind} checkpoint")
        tiny.write_tiny_checkpoint(p["ckpt"], seed=0, sizes=tiny.TINY if kind == "tiny" else tiny.FULL)
    preset = load_preset(preset_name)
    if (p["ref"] / "manifest.json").exists() and not built_for_target_frames(read_manifest(p["ref"])):
        say("the reference engine predates s2mel_content's target frames: rebuilding it")
        shutil.rmtree(p["ref"])
        shutil.rmtree(p["out"], ignore_errors=True)  # its conversions and cases came from the old graphs
    if not (p["ref"] / "manifest.json").exists():
        say("building the CPU fp32 reference engine")
        # the graphs a TensorRT build exports (classic trunk, standard ops), at fp32 on ONNX Runtime
        base = load_preset("cpu-fp32")
        gpu_graphs = ComponentSpec("onnxruntime-cuda", "fp32")
        ref = replace(base, name="cpu-fp32-tensorrt-graphs",
                      components={**base.components, "gpt": gpu_graphs, "dit": gpu_graphs})  # fmt: skip
        build_engine(p["ckpt"], ref, p["ref"], overwrite=True)
    manifest = read_manifest(p["ref"])
    specs = {s.name: s for s in engine_specs(load_checkpoint(p["ckpt"]), preset)}
    p["cases"].mkdir(parents=True, exist_ok=True)
    described: dict[str, Any] = {"kind": kind, "preset": preset_name, "components": {}}
    for name, entry in manifest.components.items():
        spec = specs[name]
        cs = preset.components[spec.group]
        if cs.backend != "tensorrt":
            continue
        src = p["out"] / entry.file
        if not src.exists():
            say(f"converting {name} to {cs.precision}")
            if apply_precision(p["ref"] / entry.file, src, cs) is None:
                shutil.copyfile(p["ref"] / entry.file, src)
        ranges = tb.axis_ranges(name, preset.limits, manifest.config)
        ref_sess = OrtSession(p["ref"] / entry.file, SessionOptions(threads=1))
        g = torch.Generator().manual_seed(7)
        cases = {}
        for i, (b, t) in enumerate(spec.verify_bt):
            x = spec.make_inputs(_clip(b, ranges["batch"]), t, g)
            feeds = {n: v.numpy() for n, v in zip(spec.input_names, x, strict=True)}
            want = ref_sess.run(None, feeds)
            cases.update({f"{i}/in/{k}": v for k, v in feeds.items()})
            cases.update({f"{i}/want/{k}": v for k, v in want.items()})
        np.savez(p["cases"] / f"{name}.npz", **cases)
        described["components"][name] = {"file": entry.file, "precision": cs.precision, "group": spec.group}
    if "gpt_trunk" in described["components"]:
        c = manifest.config["gpt"]
        emb = dec.HostEmbeddings.load(p["ref"])
        rng = np.random.default_rng(0)
        prefix = (0.5 * rng.standard_normal((40, emb.model_dim))).astype(np.float32)
        codes = rng.integers(0, emb.mel_embedding.shape[0] - 2, 24)
        ref_dec = dec.GPTDecoder(OrtSession(p["ref"] / manifest.components["gpt_trunk"].file), emb,
                                 layers=c["layers"], heads=c["heads"])  # fmt: skip
        logits, _ = ref_dec.forced(prefix, codes)
        np.savez(p["cases"] / "decoder.npz", prefix=prefix, codes=codes, logits=logits)
    (p["out"] / "prepared.json").write_text(json.dumps(described, indent=2))
    return described


# ------------------------------------------------------------------------------------------ GPU half


@contextlib.contextmanager
def _backend(sim_cpu: bool) -> Iterator[None]:
    if not sim_cpu:
        yield
        return
    from fasttts_cli.tools.fakes import tensorrt as fake_trt

    with fake_trt.install():
        yield


def _compare(sess: Any, cases: Any, detail: list[str]) -> tuple[float, float]:
    """Worst errors over the cases: relative L2 of float outputs, mismatch share of integer ones."""
    worst, mismatch = 0.0, 0.0
    n = 1 + max(int(k.split("/")[0]) for k in cases.files)
    for i in range(n):
        feeds = {k.split("/", 2)[2]: cases[k] for k in cases.files if k.startswith(f"{i}/in/")}
        got = sess.run(None, feeds)
        for k in cases.files:
            if not k.startswith(f"{i}/want/"):
                continue
            name, want = k.split("/", 2)[2], cases[k]
            g = np.asarray(got[name])
            if np.issubdtype(want.dtype, np.floating):
                worst = max(worst, rel(g, want))
            else:
                mismatch = max(mismatch, 1.0 if g.shape != want.shape else float(np.mean(g != want)))
    detail.append(f"{n} shapes")
    return worst, mismatch


def run_checks(work: Path, kind: str, preset_name: str, sim_cpu: bool, table: Table) -> None:
    from fasttts_cli.build import tensorrt_build as tb
    from fasttts_cli.build.onnx_shapes import check_tensorrt_outputs
    from fasttts_cli.spec.engine_folder import read_manifest
    from fasttts_cli.spec.presets import load_preset

    mode = "sim" if sim_cpu else "ran"
    p = _layout(work, kind, preset_name)
    described = json.loads((p["out"] / "prepared.json").read_text())
    manifest = read_manifest(p["ref"])
    preset = load_preset(preset_name)
    with _backend(sim_cpu):
        from fasttts_cli.backends.tensorrt.session import TrtSession

        sessions: dict[str, Any] = {}
        for name, d in described["components"].items():
            src = p["out"] / d["file"]
            with table.timed(f"{kind} {name}: output sizes", mode) as detail:
                problems = check_tensorrt_outputs(src, name)
                if problems:
                    raise AssertionError("; ".join(problems))
                detail.append("every output dim from input dims or declared")
            entry = replace(manifest.components[name], file=src.name)
            cs = preset.components[d["group"]]
            with table.timed(f"{kind} {name}: {d['precision']} plan vs cpu fp32", mode) as detail:
                t0 = time.perf_counter()
                plan_entry, _ = tb.build_component(p["out"], name, entry, cs, preset.limits, manifest.config)
                detail.append(f"built in {time.perf_counter() - t0:.1f}s")
                sess = TrtSession(p["out"] / plan_entry.file)
                err, mismatch = _compare(sess, np.load(p["cases"] / f"{name}.npz"), detail)
                tol = TOL.get(d["precision"], 3e-2)
                detail.append(f"worst rel err {err:.3g} (tol {tol:g}), integer mismatch {mismatch:.3g}")
                if not (err < tol and mismatch <= INT_TOL):
                    raise AssertionError(f"error {err:.3g} (tol {tol:g}), integer mismatch {mismatch:.3g}")
                sessions[name] = sess
        if "gpt_trunk" in sessions:
            _decoder_checks(p, manifest, sessions["gpt_trunk"], described, kind, sim_cpu, table)


def _decoder_checks(
    p: dict[str, Path],
    manifest: Any,
    sess: Any,
    described: dict[str, Any],
    kind: str,
    sim_cpu: bool,
    table: Table,
) -> None:
    from fasttts_cli.indextts2 import decode as dec
    from fasttts_cli.indextts2.sampling import SamplingParams

    mode = "sim" if sim_cpu else "ran"
    c = manifest.config["gpt"]
    emb = dec.HostEmbeddings.load(p["ref"])
    case = np.load(p["cases"] / "decoder.npz")
    d = dec.GPTDecoder(sess, emb, layers=c["layers"], heads=c["heads"])
    precision = described["components"]["gpt_trunk"]["precision"]
    with table.timed(f"{kind} gpt_trunk: teacher-forced logits vs cpu fp32", mode) as detail:
        logits, _ = d.forced(case["prefix"], case["codes"])
        err = rel(logits, case["logits"])
        agree = float(np.mean(logits.argmax(-1) == case["logits"].argmax(-1)))
        tol = TOL.get(precision, 3e-2)
        detail.append(f"rel err {err:.3g} (tol {tol:g}), argmax agreement {agree:.2f}")
        if not err < tol:
            raise AssertionError(f"error {err:.3g} >= {tol:g}")
    with table.timed(f"{kind} gpt_trunk: 3-beam decode, KV on the device", mode) as detail:
        from fasttts_cli.backends.tensorrt.device import DeviceTensor

        fed: list[bool] = []
        real_run = sess.run

        def spy(outputs: Any, feeds: dict[str, Any]) -> Any:
            fed.append(all(isinstance(v, DeviceTensor) for k, v in feeds.items() if k.startswith("past_")))
            return real_run(outputs, feeds)

        sess.run = spy
        params = SamplingParams(do_sample=True, beams=3, top_k=30, top_p=0.8, temperature=0.8,
                                repetition_penalty=10.0, max_tokens=24)  # fmt: skip
        prefixes = [case["prefix"], case["prefix"][:30]]
        t0 = time.perf_counter()
        out = d.generate_codes(prefixes, params, [1, 2])
        dt = time.perf_counter() - t0
        sess.run = real_run
        steps = len(fed) - 1
        detail.append(
            f"{steps} steps, {1000 * dt / max(1, steps):.2f} ms/step, codes {[len(o.codes) for o in out]}"
        )
        if steps < 1 or not all(fed[1:]):
            raise AssertionError("a decode step fed the KV cache from the host")
        if sim_cpu:
            from fasttts_cli.tools.fakes import cuda as fake_cuda

            detail.append(f"copies {dict(fake_cuda.DEVICE.copies)}")


# ------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog=f"python3 -m fasttts_cli.tools.{PROGRAM}", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--work", type=Path, help="working folder (default: a new temporary one)")
    ap.add_argument("--only", choices=["tiny", "full"], default="tiny", help="which random checkpoint")
    ap.add_argument("--preset", default="fp16", help="the TensorRT preset whose components are built")
    ap.add_argument("--sim-cpu", action="store_true", help="through the fakes of tensorrt and cuda-python")
    ap.add_argument("--prepare", action="store_true", help="the CPU half only (needs torch)")
    ap.add_argument("--out", type=Path, help=f"folder for {PROGRAM}.json (default $OUT)")
    a = ap.parse_args(argv)
    work = a.work or Path(tempfile.mkdtemp(prefix="fasttts-trt-"))
    work.mkdir(parents=True, exist_ok=True)
    table = Table(PROGRAM)
    mode = "sim" if a.sim_cpu else "ran"
    if not (_layout(work, a.only, a.preset)["out"] / "prepared.json").exists() or a.prepare:
        with table.timed(f"{a.only}: prepare (checkpoint, cpu fp32 engine, conversions)", mode) as detail:
            d = prepare(work, a.only, a.preset, say=lambda m: print(m, flush=True))
            detail.append(f"{len(d['components'])} components in {work}")
        if a.prepare or not table.ok:
            return table.finish(a.out)
    if not a.sim_cpu:
        from fasttts_cli.backends import gpu_stack

        st = gpu_stack.detect()
        if not st.has_gpu:
            print("no NVIDIA GPU found; use --sim-cpu to check the program without one", file=sys.stderr)
            return 3
    run_checks(work, a.only, a.preset, a.sim_cpu, table)
    return table.finish(a.out)


if __name__ == "__main__":
    sys.exit(main())
