#!/usr/bin/env bash
# GPU acceptance for the precision presets (fp16, w8a16, w4a16) on a machine with an NVIDIA GPU and the
# stack (`pip install -e '.[build,gpu]'`, onnxruntime-gpu in place of onnxruntime; optionally a
# TensorRT-LLM 1.2 environment named by $FASTTTS_TRTLLM_PYTHON).
#
# For the tiny and a full-size random checkpoint: exports the CPU fp32 reference engine, then for each
# GPU preset converts every component as the preset says (fp16 ONNX with fp32 islands; BigVGAN fp32),
# builds strongly typed TensorRT plans with the preset's profiles, and checks each plan against the CPU
# fp32 ONNX on the exporter's own example inputs, with a tolerance per precision (below). The GPT runs
# (a) as the TensorRT-LLM checkpoint: numpy conversion always; in the TensorRT-LLM env when present,
# `finalize` (weight-only quantization) and the engine build with our IndexTTS2GPTForCausalLM class
# (first run of that code: it could not be run where it was written), then runs that engine through
# fasttts_cli/trtllm_worker.py: teacher-forced logits and latent vs CPU fp32 (without the env, the
# worker's numpy reference on the converted checkpoint, reported as not run); (b) as our ONNX trunk on
# TensorRT fp16 and on ONNX Runtime's CUDA EP with the KV cache on the device: teacher-forced logits vs
# CPU fp32, ms per token at batch 1 and 8. Prints one table; writes $WORK/acceptance.json.
#
# usage: scripts/gpu-acceptance.sh [--only tiny|full] [--sim-cpu]
#   --sim-cpu  runs the same pipeline with ONNX Runtime CPU in place of TensorRT (no GPU needed): checks
#              the conversions and the script itself, not GPU numerics.
# env: WORK (default: a new temp dir), PYTHON (default: python), FASTTTS_TRTLLM_PYTHON.
#
# Tolerances (relative L2 error vs CPU fp32, per component output / GPT logits):
#   fp32 plans 2e-3 (TensorRT may use TF32), fp16 3e-2, GPT logits fp16 3e-2, w8a16 5e-2, w4a16 0.25.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${WORK:-$(mktemp -d -t fasttts-gpu-XXXX)}"
PY="${PYTHON:-python}"
mkdir -p "$WORK"
cd "$HERE"

cat > "$WORK/acceptance.py" <<'PYEOF'
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from fasttts_cli import gpu_stack
from fasttts_cli.build import tensorrt_build as tb
from fasttts_cli.build import trtllm_convert as tc
from fasttts_cli.build.quantize import apply_precision
from fasttts_cli.engine_folder import read_manifest
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2.sessions import OrtSession, SessionOptions
from fasttts_cli.presets import ComponentSpec, load_preset

TOL = {"fp32": 2e-3, "fp16": 3e-2, "bf16": 5e-2}
GPT_TOL = {"fp32": 2e-3, "fp16": 3e-2, "w8a16": 5e-2, "w4a16": 0.25}
PRESETS = ("fp16", "w8a16", "w4a16")


def rel(a: np.ndarray, b: np.ndarray) -> float:
    """Relative L2 error; inf when the result has NaN/inf (max() would silently skip a NaN)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not np.isfinite(a64).all():
        return float("inf")
    n = np.linalg.norm(b64)
    return float(np.linalg.norm(a64 - b64) / (n if n > 0 else 1.0))


def median_ms(fn, n: int = 10) -> float:
    fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return 1000 * float(np.median(ts))


def copy_onnx(src: Path, dst: Path) -> None:
    shutil.copyfile(src, dst)
    data = src.with_name(src.name + ".data")
    if data.exists():
        shutil.copyfile(data, dst.with_name(dst.name + ".data"))


def open_plan(path: Path, sim_cpu: bool):
    if sim_cpu:
        return OrtSession(path.with_suffix(".onnx"), SessionOptions())
    from fasttts_cli.indextts2.sessions_trt import TrtSession

    return TrtSession(path)


def checkpoint(kind: str, work: Path) -> Path:
    from fasttts_cli.build import tiny

    out = work / f"{kind}-checkpoint"
    if not (out / "config.yaml").exists():
        sizes = tiny.TINY if kind == "tiny" else tiny.FULL
        tiny.write_tiny_checkpoint(out, seed=0, sizes=sizes)
    return out


def gpt_rows(kind, preset, cpu_dir, out, manifest, limits, sim_cpu, rows) -> None:
    """GPT: ONNX trunk on TensorRT fp16 (stand-in for TensorRT-LLM) and on the ORT CUDA EP."""
    entry = manifest.components["gpt_trunk"]
    c = manifest.config["gpt"]
    emb = dec.HostEmbeddings.load(cpu_dir)
    rng = np.random.default_rng(0)
    prefix = (0.5 * rng.standard_normal((60, emb.model_dim))).astype(np.float32)
    codes = rng.integers(0, 8192, 32)
    ref_sess = OrtSession(cpu_dir / entry.file)
    ref_dec = dec.GPTDecoder(ref_sess, emb, layers=c["layers"], heads=c["heads"])
    ref_logits, _ = ref_dec.forced(prefix, codes)

    def measure(label: str, sess, precision: str, build_s: float | None) -> None:
        d = dec.GPTDecoder(sess, emb, layers=c["layers"], heads=c["heads"])
        logits, _ = d.forced(prefix, codes)
        err = rel(logits, ref_logits)
        agree = float(np.mean(logits.argmax(-1) == ref_logits.argmax(-1)))
        ms = {}
        for b in (1, 8):
            x = np.repeat(prefix[None], b, 0)
            x = np.concatenate([x, np.repeat(emb.mel(np.array([8192]), np.array([0]))[None], b, 0)], 1)
            mask = np.ones(x.shape[:2], np.int64)
            _, _, kv = d.forward(x, mask)
            step_x = emb.mel(np.full(b, 7), np.full(b, 2))[:, None, :]
            mask2 = np.ones((b, mask.shape[1] + 1), np.int64)
            ms[b] = median_ms(lambda: d.trunk(step_x, mask2, kv), 20)
        tol = GPT_TOL.get(precision, 3e-2)
        rows.append({
            "checkpoint": kind, "preset": preset.name, "component": "gpt_trunk", "backend": label,
            "precision": precision, "rel_err": err, "tol": tol, "ok": err < tol, "argmax_agree": agree,
            "ms_b1": ms[1], "ms_b8": ms[8], "build_s": build_s,
        })

    # (b1) TensorRT fp16 plan from the fp16 ONNX trunk
    src = out / "gpt_trunk.onnx"
    if not src.exists():
        apply_precision(cpu_dir / entry.file, src, ComponentSpec("tensorrt", "fp16"))
    t = time.time()
    if not sim_cpu and not (out / "gpt_trunk.plan").exists():  # the fp16 preset's loop built it already
        tb.build_component(out, "gpt_trunk", replace(entry, file=src.name), ComponentSpec("tensorrt", "fp16"),
                           limits, manifest.config)
    measure("tensorrt (trunk)", open_plan(out / "gpt_trunk.plan", sim_cpu), "fp16", time.time() - t)
    # (b2) ORT CUDA EP, fp32 and fp16 graphs, KV cache on the device
    from fasttts_cli.indextts2.sessions_cuda import CudaOrtSession

    device = "cpu" if sim_cpu else "cuda"
    measure("onnxruntime-cuda", CudaOrtSession(cpu_dir / entry.file, device=device), "fp32", None)
    measure("onnxruntime-cuda", CudaOrtSession(src, device=device), "fp16", None)


def trtllm_row(kind, preset, ckpt, work, rows) -> None:
    spec = preset.components["gpt"]
    if spec.backend != "tensorrt-llm":  # e.g. fp16 runs the trunk on TensorRT: check the fp16 conversion
        spec = ComponentSpec("tensorrt-llm", "fp16", {"max_beam_width": 3})
    out = work / f"{kind}-{preset.name}-trtllm-ckpt"
    state = tc.state_from_gpt_pth(ckpt / "gpt.pth")
    import yaml

    heads = int(yaml.safe_load((ckpt / "config.yaml").read_text())["gpt"]["heads"])
    t = time.time()
    tc.write_checkpoint(out, state, heads=heads, n_conds=tc.n_conds_from_state(state), precision=spec.precision,
                        max_beam_width=int(spec.options.get("max_beam_width", 3)))
    note = f"checkpoint converted in {time.time() - t:.1f}s"
    py = os.environ.get(gpu_stack.TRTLLM_PYTHON_ENV)
    ok = True
    if not py:
        note += f"; ${gpu_stack.TRTLLM_PYTHON_ENV} not set: finalize/build skipped"
    else:
        steps = [["finalize", str(out)]] if spec.precision in ("w8a16", "w4a16") else []
        # the flags `fasttts build` uses (fasttts_cli/build/trtllm_build.py), sized by the preset's limits
        from fasttts_cli.build.trtllm_build import engine_flags

        layout = tc.layout_from_state(state, n_conds=tc.n_conds_from_state(state))
        steps.append(["build", str(out), str(out) + "-engine", *engine_flags(layout, preset.limits, spec)])
        for step in steps:
            t = time.time()
            r = subprocess.run([py, tc.__file__, *step], capture_output=True, text=True)
            ok = ok and r.returncode == 0
            note += f"; {step[0]} " + (f"ok ({time.time() - t:.0f}s)" if r.returncode == 0
                                       else f"FAILED: {r.stderr.strip()[-300:]}")
            if r.returncode != 0:
                break
    # run it through our worker (fasttts_cli/trtllm_worker.py); without the TensorRT-LLM env, the worker's
    # numpy reference backend on the converted checkpoint checks this path (ok None: the engine did not run)
    err = None
    if ok:
        engine = Path(str(out) + "-engine") if py else out
        try:
            err, lat_err = trtllm_parity(kind, work, engine, "trtllm" if py else "reference")
            note += f"; {'engine' if py else 'numpy reference (no engine)'} via worker: latent rel err {lat_err:.3g}"
            err = max(err, lat_err)
        except Exception as e:  # the row reports it; the other rows still run
            ok, note = False, note + f"; running it FAILED: {str(e)[-400:]}"
    tol = GPT_TOL.get(spec.precision, 3e-2)
    status = False if not ok else (err < tol if py and err is not None else None)
    # ok None = not run: the table shows it, the exit status does not pretend it passed or failed
    rows.append({"checkpoint": kind, "preset": preset.name, "component": "gpt", "backend": "tensorrt-llm",
                 "precision": spec.precision, "rel_err": err, "tol": tol, "ok": status, "note": note})


def trtllm_parity(kind: str, work: Path, engine: Path, backend: str) -> tuple[float, float]:
    """Teacher-forced logits and the latent from the worker vs the CPU fp32 ONNX trunk (GPTDecoder)."""
    from fasttts_cli.indextts2.gpt_trtllm import LinePrompt, TrtllmGPT

    cpu_dir = work / f"{kind}-cpu-fp32"
    manifest = read_manifest(cpu_dir)
    c = manifest.config["gpt"]
    emb = dec.HostEmbeddings.load(cpu_dir)
    ref = dec.GPTDecoder(OrtSession(cpu_dir / manifest.components["gpt_trunk"].file), emb,
                         layers=c["layers"], heads=c["heads"])
    rng = np.random.default_rng(0)
    with TrtllmGPT(engine, backend=backend) as gpt:
        n_lat = gpt.layout.n_conds - 2
        lat = (0.5 * rng.standard_normal((n_lat, emb.model_dim))).astype(np.float32)
        emo = (0.3 * rng.standard_normal(emb.model_dim)).astype(np.float32)
        text = rng.integers(2, emb.text_embedding.shape[0], 24)
        codes = rng.integers(0, 8192, 32)
        prefix, prompt = emb.prefix(lat, emo, text), LinePrompt.from_voice(lat, emo, emb.speed, text)
        want, _ = ref.forced(prefix, codes)
        got, _ = gpt.forced(prompt, codes)
        (lat_want,), (lat_got,) = ref.latents([prefix], [codes]), gpt.latents([prompt], [codes])
    return rel(got, want), rel(lat_got, lat_want)


def run(kind: str, work: Path, sim_cpu: bool, rows: list) -> None:
    from fasttts_cli.build.checkpoint import load_checkpoint
    from fasttts_cli.build.export import build_engine, graph_specs
    import torch

    torch.set_grad_enabled(False)
    ckpt = checkpoint(kind, work)
    cpu_dir = work / f"{kind}-cpu-fp32"
    if not (cpu_dir / "manifest.json").exists():
        # the reference keeps the classic trunk graph (a CPU engine would get the in-place one, whose
        # GroupQueryAttention TensorRT cannot parse): same weights, same graphs otherwise
        base = load_preset("cpu-fp32")
        ref = replace(base, name="cpu-fp32-classic-trunk",
                      components={**base.components, "gpt": ComponentSpec("onnxruntime-cuda", "fp32")})
        build_engine(ckpt, ref, cpu_dir, overwrite=True)
    manifest = read_manifest(cpu_dir)
    specs = {s.name: s for s in graph_specs(load_checkpoint(ckpt))}
    done: dict[tuple, dict] = {}  # (component, backend, precision, options) -> row: presets share plans
    for pname in PRESETS:
        preset = load_preset(pname)
        gpu_stack.check_preset(preset)
        out = work / f"{kind}-{pname}"
        out.mkdir(exist_ok=True)
        for name, entry in manifest.components.items():
            spec = specs[name]
            cs = preset.components[spec.group]
            if cs.backend == "tensorrt-llm":
                continue
            key = (name, cs.backend, cs.precision, json.dumps(cs.options, sort_keys=True))
            if key in done:
                rows.append({**done[key], "preset": pname, "note": f"same plan as {done[key]['preset']}"})
                continue
            src = out / entry.file
            if cs.precision == "fp16":
                apply_precision(cpu_dir / entry.file, src, cs)
            else:
                copy_onnx(cpu_dir / entry.file, src)
            t = time.time()
            if not sim_cpu:
                tb.build_component(out, name, replace(entry, file=src.name), cs, preset.limits, manifest.config)
            build_s = time.time() - t
            sess = open_plan(out / tb.plan_name(name), sim_cpu)
            ref = OrtSession(cpu_dir / entry.file)
            g = __import__("torch").Generator().manual_seed(7)
            worst = 0.0
            for b, tlen in spec.verify_bt:
                feeds = {n: x.numpy() for n, x in zip(spec.input_names, spec.make_inputs(b, tlen, g), strict=True)}
                want, got = ref.run(None, feeds), sess.run(None, feeds)
                for o, w in want.items():
                    if np.issubdtype(w.dtype, np.floating):
                        worst = max(worst, rel(got[o], w))
                    elif not np.array_equal(got[o], w):
                        worst = max(worst, float(np.mean(got[o] != w)))  # integer outputs: mismatch share
            b, tlen = spec.verify_bt[0]
            feeds = {n: x.numpy() for n, x in zip(spec.input_names, spec.make_inputs(b, tlen, g), strict=True)}
            ms = median_ms(lambda: sess.run(None, feeds))
            tol = TOL.get(cs.precision, 3e-2)
            rows.append({"checkpoint": kind, "preset": pname, "component": name, "backend": cs.backend,
                         "precision": cs.precision, "rel_err": worst, "tol": tol, "ok": worst < tol,
                         "ms_b1": ms, "build_s": build_s})
            done[key] = rows[-1]
            print(json.dumps(rows[-1]), flush=True)
        if pname == "fp16":  # the trunk rows do not depend on the preset's TensorRT-LLM precision
            gpt_rows(kind, preset, cpu_dir, out, manifest, preset.limits, sim_cpu, rows)
        trtllm_row(kind, preset, ckpt, work, rows)
    engine_row(kind, ckpt, cpu_dir, work, sim_cpu, rows)


def engine_row(kind: str, ckpt: Path, cpu_dir: Path, work: Path, sim_cpu: bool, rows: list) -> None:
    """The whole w8a16 engine as `fasttts build` makes it (TensorRT plans + the TensorRT-LLM GPT built in
    $FASTTTS_TRTLLM_PYTHON's environment), one line through the engine API against the reference engine:
    greedy codes agreement and the relative error of the mel."""
    from fasttts_cli.build.export import build_engine
    from fasttts_cli.indextts2.engine import IndexTTS2Engine
    from fasttts_cli.indextts2.sampling import SamplingParams
    import soundfile as sf

    row = {"checkpoint": kind, "preset": "w8a16", "component": "engine (fasttts build)", "backend": "tensorrt + tensorrt-llm",
           "precision": "w8a16", "tol": GPT_TOL["w8a16"]}
    if sim_cpu or not os.environ.get(gpu_stack.TRTLLM_PYTHON_ENV):
        rows.append({**row, "ok": None, "note": f"needs a GPU, TensorRT and ${gpu_stack.TRTLLM_PYTHON_ENV}: not run"})
        return
    out = work / f"{kind}-w8a16-engine"
    try:
        t = time.time()
        build_engine(ckpt, "w8a16", out, overwrite=True)
        row["build_s"] = time.time() - t
        wav = work / "voice.wav"
        tt = np.arange(3 * 22050) / 22050
        sf.write(str(wav), (0.2 * np.sin(2 * np.pi * 150 * tt) * (1 + 0.3 * np.sin(2 * np.pi * 3 * tt))).astype(np.float32), 22050)
        mels, codes = [], []
        for folder in (out, cpu_dir):
            e = IndexTTS2Engine.load(folder)
            voice = e.voice_conditioning(e.speaker_audio(wav), e.emotion_audio(wav))
            ids = e.text.segments("The quick brown fox jumps over the lazy dog.")[0]
            prefix = e.prefix(voice.spk_latents, voice.emovec, ids)
            (d,) = e.generate([prefix], SamplingParams.greedy(40), [0])
            codes.append(d.codes)
            wavs = e.codes_to_wavs([voice], [prefix], [d.codes], [np.random.default_rng(0)], steps=10)
            mels.append(wavs[0])
            e.close()
        n = min(len(codes[0]), len(codes[1]))
        row["argmax_agree"] = float(np.mean(codes[0][:n] == codes[1][:n])) if n else 0.0
        if len(codes[0]) == len(codes[1]):
            row["rel_err"] = rel(mels[0], mels[1])
            row["ok"] = row["rel_err"] < row["tol"]
        else:
            row["ok"] = False
        row["note"] = f"codes {len(codes[0])} vs {len(codes[1])} (greedy, 40 max); wav error over a 10-step CFM"
    except Exception as e:  # the row reports it; the table still prints
        row.update(ok=False, note=f"FAILED: {str(e)[-400:]}")
    rows.append(row)


def table(rows: list) -> str:
    cols = ["checkpoint", "preset", "component", "backend", "precision", "rel_err", "tol", "ok", "argmax_agree",
            "ms_b1", "ms_b8", "build_s", "note"]
    def cell(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3g}"
        return str(v)
    lines = [" | ".join(cols), " | ".join("---" for _ in cols)]
    for r in rows:
        lines.append(" | ".join(cell(r.get(c)) for c in cols))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--only", choices=["tiny", "full"])
    ap.add_argument("--sim-cpu", action="store_true")
    a = ap.parse_args()
    st = gpu_stack.detect(probe_torch=True)
    print("stack:", json.dumps(st.to_json()), flush=True)
    if not a.sim_cpu and not st.has_gpu:
        print("no NVIDIA GPU found; use --sim-cpu to check the pipeline without one", file=sys.stderr)
        return 3
    for name in ("cpu-fp32", "cpu-int8", "cpu-int4", *PRESETS):
        s = gpu_stack.preset_status(load_preset(name), st)
        print(f"preset {name}: can_build={s.can_build} can_run={s.can_run}", *s.missing, sep="\n  ")
    rows: list = []
    for kind in ([a.only] if a.only else ["tiny", "full"]):
        run(kind, a.work, a.sim_cpu, rows)
    (a.work / "acceptance.json").write_text(json.dumps(rows, indent=2))
    print(table(rows))
    not_run = [r for r in rows if r.get("ok") is None]
    if not_run:
        print(f"{len(not_run)} row(s) NOT RUN (see note)")
    return 0 if all(r.get("ok") is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
PYEOF

exec "$PY" "$WORK/acceptance.py" --work "$WORK" "$@"
