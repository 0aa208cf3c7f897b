"""GPU acceptance and bench of the torch backend (issue 6), one command: scripts/gpu-torch-acceptance.sh.

    python -m fasttts_cli.torch_backend.bench_gpu [--parity-dir DIR] [--batches 1,8,16] [--tokens 100]
        [--out FILE.json] [--size full|tiny] [--device cuda|cpu] [--skip-parity] [--skip-baseline]

1. Parity: regenerates the parity checkpoint from DIR (make_checkpoint.py, needs numpy, safetensors and
   PyYAML) and runs `parity_torch.check_case` for every vector set in fp32 (TF32 off; the README's 1e-4),
   fp16 and bf16 (tolerances in `parity_torch.TOLERANCES`), on the device with CUDA graphs.
2. Bench: a full-size random-weight model built in-process (UnifiedVoice 866M parameters, s2mel DiT,
   BigVGAN v2 22 kHz 256x; nothing downloaded, no checkpoint carried), forced lengths (`--tokens` codes
   per line, the stop token masked; 100 codes = a 2 s line), a prompt of `--prompt-frames` mel frames,
   25 Euler steps, 1 beam. For each batch size: ours (static cache + CUDA graphs, fp16 GPT and DiT,
   BigVGAN fp32/TF32) and the same modules run eagerly in fp16 (HF-style KV concatenation, autocast fp16
   DiT, fp32 BigVGAN): per-stage times, ms per token, RTF, x real time, lines/s, peak GPU memory.
3. One table at the end (and a JSON file); exit status 1 when a parity check fails.

Voice preparation (w2v-BERT, codec, CAMPPlus, conditioners; once per voice, cached) is not benched here;
its parity is the build modules' own. The codec's vq2emb (a table lookup + projection) is replaced by a
random tensor in the bench.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fasttts_cli.indextts2.sampling import SamplingParams
from fasttts_cli.torch_backend.decode_torch import DecodeSettings, TorchGPT
from fasttts_cli.torch_backend.random_model import random_bigvgan, random_s2mel, random_unified_voice
from fasttts_cli.torch_backend.s2mel_torch import S2MelSettings, TorchS2Mel, TorchVocoder
from fasttts_cli.torch_backend.sampling_torch import RowParams, process_scores

SR = 22050
CODE_TO_FRAMES = 1.72


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _timed(dev: torch.device, fn: Callable[[], Any]) -> tuple[Any, float]:
    _sync(dev)
    t0 = time.perf_counter()
    out = fn()
    _sync(dev)
    return out, time.perf_counter() - t0


@dataclass
class BenchRow:
    config: str
    batch: int
    tokens: int
    audio_s: float  # per line
    prefill_ms: float = 0.0
    decode_ms_per_token: float = 0.0
    gpt_s: float = 0.0
    latent_ms: float = 0.0
    content_ms: float = 0.0
    cfm_ms: float = 0.0
    cfm_step_ms: float = 0.0
    vocoder_ms: float = 0.0
    total_s: float = 0.0
    warmup_s: float = 0.0
    peak_gb: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rtf(self) -> float:
        """Wall time per second of audio produced (aggregate over the batch)."""
        return self.total_s / (self.batch * self.audio_s)

    @property
    def x_realtime(self) -> float:
        return 1.0 / self.rtf

    @property
    def lines_per_s(self) -> float:
        return self.batch / self.total_s


@dataclass
class Workload:
    """Random inputs of one batch: prefixes, prompt condition, prompt mel, style, CFM noise."""

    prefixes: list[np.ndarray]
    prompt_cond: torch.Tensor  # (B, Tm, C)
    prompt_mel: torch.Tensor  # (B, 80, Tm)
    style: torch.Tensor  # (B, 192)
    vq: torch.Tensor  # (B, n, 1024) stand-in for codec vq2emb
    z: torch.Tensor  # (B, 80, Tm + Tg)


def make_workload(
    uv: Any,
    s2: Any,
    batch: int,
    tokens: int,
    prompt_frames: int,
    text_tokens: int,
    dev: torch.device,
    seed: int = 0,
) -> Workload:
    g = np.random.default_rng(seed)
    d = uv.cfg.model_dim
    p = uv.cfg.n_conds + text_tokens + 2
    prefixes = [(g.standard_normal((p, d)) * 0.02).astype(np.float32) for _ in range(batch)]
    tg = int(np.float32(tokens) * np.float32(CODE_TO_FRAMES))
    c = s2.length_regulator.content_in_proj.out_features
    width = s2.gpt_layer[-1].out_features
    gen = torch.Generator(device=dev).manual_seed(seed)
    sd = s2.cfm.estimator.cfg.style_dim
    return Workload(
        prefixes,
        torch.randn(batch, prompt_frames, c, generator=gen, device=dev) * 0.5,
        torch.randn(batch, 80, prompt_frames, generator=gen, device=dev) - 5.0,
        torch.randn(batch, sd, generator=gen, device=dev),
        torch.randn(batch, tokens, width, generator=gen, device=dev) * 0.1,
        torch.randn(batch, 80, prompt_frames + tg, generator=gen, device=dev),
    )


# ------------------------------------------------------------------------------------------ ours


def run_ours(
    gpt: TorchGPT, s2m: TorchS2Mel, voc: TorchVocoder, w: Workload, tokens: int, steps: int, beams: int = 1
) -> BenchRow:
    dev = gpt.device
    b = len(w.prefixes)
    p = SamplingParams(beams=beams, max_tokens=tokens)
    name = "ours" if beams == 1 else f"ours-{beams}beam"
    row = BenchRow(name, b, tokens, 256 * int(np.float32(tokens) * np.float32(CODE_TO_FRAMES)) / SR)
    _, row.prefill_ms = _timed(dev, lambda: gpt._prefill(w.prefixes, tokens + 1, b * beams))
    dec, row.gpt_s = _timed(dev, lambda: gpt.generate(w.prefixes, [p] * b, list(range(b)), ignore_stop=True))
    row.decode_ms_per_token = (row.gpt_s - row.prefill_ms) / tokens * 1e3
    row.prefill_ms *= 1e3
    codes = [d.codes for d in dec]
    lat, t = _timed(dev, lambda: gpt.latents(w.prefixes, codes))
    row.latent_ms = t * 1e3
    lens = torch.tensor([len(c) for c in codes], device=dev)
    (cond, ylens), t = _timed(dev, lambda: s2m.content(lat, w.vq, lens))
    row.content_ms = t * 1e3
    tm = w.prompt_mel.shape[-1]
    mu = torch.cat([w.prompt_cond, cond], dim=1)
    x_lens = tm + ylens
    p_lens = torch.full((b,), tm, device=dev)
    x, t = _timed(dev, lambda: s2m.cfm(mu, x_lens, w.prompt_mel, p_lens, w.style, w.z, steps=steps))
    row.cfm_ms, row.cfm_step_ms = t * 1e3, t * 1e3 / steps
    mels = s2m.mels(x, p_lens, x_lens)
    wavs, t = _timed(dev, lambda: voc(mels))
    row.vocoder_ms = t * 1e3
    row.total_s = row.gpt_s + (row.latent_ms + row.content_ms + row.cfm_ms + row.vocoder_ms) / 1e3
    row.extra["finite"] = bool(torch.isfinite(x).all()) and all(bool(torch.isfinite(v).all()) for v in wavs)
    return row


# ------------------------------------------------------------------------------------------ eager baseline


def eager_generate(
    uv16: Any, prefixes: list[np.ndarray], tokens: int, seed: int = 0
) -> tuple[list[torch.Tensor], float]:
    """HF-style eager decoding in fp16 on the same modules: `UnifiedVoice.trunk` with a concatenating KV
    cache, processors and multinomial sampling on the device, stop token masked.
    Returns (codes, prefill seconds)."""
    c = uv16.cfg
    dev = uv16.mel_head.weight.device
    b = len(prefixes)
    pmax = max(x.shape[0] for x in prefixes)
    x = torch.zeros(b, pmax + 1, c.model_dim, dtype=torch.float16, device=dev)
    mask = torch.zeros(b, pmax + 1, dtype=torch.long, device=dev)
    for i, pr in enumerate(prefixes):
        x[i, pmax - pr.shape[0] : pmax] = torch.from_numpy(pr).to(dev)
        mask[i, pmax - pr.shape[0] :] = 1
    start = torch.full((b, 1), c.start_mel_token, device=dev)
    x[:, pmax:] = uv16.mel_input_embedding(start, torch.zeros_like(start))
    torch.manual_seed(seed)
    _sync(dev)
    t0 = time.perf_counter()
    logits, _, past = uv16.trunk(x, mask, logits_for="last")
    _sync(dev)
    prefill = time.perf_counter() - t0
    seen = torch.zeros(b, c.number_mel_codes, dtype=torch.bool, device=dev)
    seen[:, [1, c.start_mel_token]] = True
    rp = RowParams.build([SamplingParams(beams=1)] * b, 1, dev)
    rows = torch.arange(b, device=dev)
    codes = []
    for k in range(tokens):
        lg = logits[:, -1].float()
        lg[:, c.stop_mel_token] = float("-inf")
        scores = process_scores(lg, seen, rp, beam_mode=False, do_sample=True)
        tok = torch.multinomial(torch.softmax(scores, dim=-1), 1)[:, 0]
        seen[rows, tok] = True
        codes.append(tok)
        if k == tokens - 1:
            break
        xs = uv16.mel_input_embedding(tok[:, None], torch.full((b, 1), k + 2, device=dev))
        mask = torch.cat([mask, torch.ones(b, 1, dtype=torch.long, device=dev)], dim=1)
        logits, _, past = uv16.trunk(xs, mask, past, logits_for="last")
    allc = torch.stack(codes, 1)
    return [allc[i] for i in range(b)], prefill


def run_eager(uv16: Any, s2: Any, bv: Any, w: Workload, tokens: int, steps: int) -> BenchRow:
    dev = uv16.mel_head.weight.device
    b = len(w.prefixes)
    c = uv16.cfg
    row = BenchRow("eager-fp16", b, tokens, 256 * int(np.float32(tokens) * np.float32(CODE_TO_FRAMES)) / SR)
    with torch.inference_mode():
        (codes, prefill), row.gpt_s = _timed(dev, lambda: eager_generate(uv16, w.prefixes, tokens))
        row.prefill_ms = prefill * 1e3
        row.decode_ms_per_token = (row.gpt_s - prefill) / tokens * 1e3

        def latent() -> torch.Tensor:
            seqs = []
            for pr, cd in zip(w.prefixes, codes, strict=True):
                ids = torch.cat([cd.new_tensor([c.start_mel_token]), cd, cd.new_tensor([c.stop_mel_token])])
                pos = torch.arange(ids.numel(), device=dev)
                mel = uv16.mel_input_embedding(ids[None], pos[None])[0]
                seqs.append(torch.cat([torch.from_numpy(pr).to(dev).half(), mel], 0))
            x = torch.stack(seqs)  # equal lengths in the bench
            _, hidden, _ = uv16.trunk(
                x, torch.ones(x.shape[:2], dtype=torch.long, device=dev), logits_for="none"
            )
            return hidden[:, -tokens - 2 : -2].float()

        lat, t = _timed(dev, latent)
        row.latent_ms = t * 1e3
        lens = torch.full((b,), tokens, device=dev)
        (cond, ylens), t = _timed(dev, lambda: s2.content(lat, w.vq, lens))
        row.content_ms = t * 1e3
        tm = w.prompt_mel.shape[-1]
        mu = torch.cat([w.prompt_cond, cond], dim=1)
        x_lens = tm + ylens
        p_lens = torch.full((b,), tm, device=dev)

        def cfm() -> torch.Tensor:
            with torch.autocast(dev.type, dtype=torch.float16 if dev.type == "cuda" else torch.bfloat16):
                return s2.cfm.solve(mu, x_lens, w.prompt_mel, p_lens, w.style, w.z, n_steps=steps)[0]

        x, t = _timed(dev, cfm)
        row.cfm_ms, row.cfm_step_ms = t * 1e3, t * 1e3 / steps
        mel = x[:, :, tm:].float()
        _, t = _timed(dev, lambda: bv(mel, ylens))
        row.vocoder_ms = t * 1e3
    row.total_s = row.gpt_s + (row.latent_ms + row.content_ms + row.cfm_ms + row.vocoder_ms) / 1e3
    return row


# ------------------------------------------------------------------------------------------ parity


def run_parity(parity_dir: Path, dev: torch.device, precisions: list[str]) -> tuple[list[dict], str]:
    """Returns (checks as dicts, a skip reason or "")."""
    import importlib.util

    missing = [m for m in ("yaml", "safetensors") if importlib.util.find_spec(m) is None]
    if missing:
        return (
            [],
            f"parity skipped: python packages {', '.join(missing)} are missing (carry their wheels in .whl/)",
        )
    vectors = sorted(parity_dir.glob("vectors_*.npz"))
    maker = parity_dir / "make_checkpoint.py"
    if not vectors or not maker.is_file():
        return [], f"parity skipped: no vectors_*.npz / make_checkpoint.py in {parity_dir}"
    out: list[dict] = []
    text = []
    cases = []
    for npz in vectors:
        side = json.loads(npz.with_suffix(".json").read_text(encoding="utf-8"))
        arrays = dict(np.load(npz, allow_pickle=False))
        if side.get("base"):
            base = dict(np.load(parity_dir / side["base"], allow_pickle=False))
            for k in side.get("same_as_base", []):
                arrays.setdefault(k, base[k])
        cases.append((npz.stem, arrays, int(side["checkpoint"]["weight_seed"])))
    ckpts: dict[int, Path] = {}
    root = Path(tempfile.mkdtemp(prefix="fasttts-parity-"))
    try:
        _parity_cases(cases, ckpts, root, maker, parity_dir, dev, precisions, out, text)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out, ""


def _parity_cases(cases, ckpts, root, maker, parity_dir, dev, precisions, out, text) -> None:  # type: ignore[no-untyped-def]
    import yaml

    from fasttts_cli.build.bigvgan import load_bigvgan
    from fasttts_cli.build.s2mel import load_s2mel
    from fasttts_cli.build.unified_voice import load_unified_voice
    from fasttts_cli.torch_backend.parity_torch import check_case, format_checks

    for name, arrays, seed in cases:
        if seed not in ckpts:
            ck = root / f"seed{seed}"
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, str(maker), str(ck), "--spec", str(parity_dir), "--seed", str(seed)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            print(
                f"parity checkpoint seed {seed} regenerated in {time.perf_counter() - t0:.1f} s", flush=True
            )
            ckpts[seed] = ck
        ck = ckpts[seed]
        cfg = yaml.safe_load((ck / "config.yaml").read_text(encoding="utf-8"))
        uv = load_unified_voice(ck / "gpt.pth", cfg["gpt"])
        s2 = load_s2mel(ck / "s2mel.pth", cfg["s2mel"])
        bv = load_bigvgan(ck / "hf_cache" / "bigvgan")
        for prec in precisions:
            t0 = time.perf_counter()
            checks = check_case(arrays, uv, s2, bv, precision=prec, device=dev)
            title = f"parity {name} {prec} on {dev.type} ({time.perf_counter() - t0:.1f} s)"
            text.append(format_checks(checks, title))
            print(text[-1], flush=True)
            out += [{"case": name, "precision": prec, **asdict(c)} for c in checks]


# ------------------------------------------------------------------------------------------ main


def _fmt_table(rows: list[BenchRow]) -> str:
    cols = [
        ("config", 11, lambda r: r.config),
        ("B", 3, lambda r: r.batch),
        ("prefill_ms", 11, lambda r: f"{r.prefill_ms:.1f}"),
        ("ms/token", 9, lambda r: f"{r.decode_ms_per_token:.2f}"),
        ("gpt_s", 8, lambda r: f"{r.gpt_s:.3f}"),
        ("latent_ms", 10, lambda r: f"{r.latent_ms:.1f}"),
        ("cfm_ms", 9, lambda r: f"{r.cfm_ms:.1f}"),
        ("step_ms", 8, lambda r: f"{r.cfm_step_ms:.2f}"),
        ("vocoder_ms", 11, lambda r: f"{r.vocoder_ms:.1f}"),
        ("total_s", 8, lambda r: f"{r.total_s:.3f}"),
        ("RTF", 8, lambda r: f"{r.rtf:.4f}"),
        ("xRT", 7, lambda r: f"{r.x_realtime:.1f}"),
        ("lines/s", 8, lambda r: f"{r.lines_per_s:.2f}"),
        ("peak_GB", 8, lambda r: f"{r.peak_gb:.2f}"),
    ]
    head = "".join(f"{n:>{w}}" if i else f"{n:<{w}}" for i, (n, w, _) in enumerate(cols))
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append("".join(f"{f(r)!s:>{w}}" if i else f"{f(r)!s:<{w}}" for i, (_, w, f) in enumerate(cols)))
    return "\n".join(lines)


def _targets(rows: list[BenchRow]) -> list[str]:
    """The issue's targets (H200, 2 s lines, 1 beam) evaluated on this run."""
    by = {(r.config, r.batch): r for r in rows}
    out = []

    def line(name: str, ok: bool, detail: str) -> None:
        out.append(f"  [{'PASS' if ok else 'FAIL'}] {name}: {detail}")

    o1, e1 = by.get(("ours", 1)), by.get(("eager-fp16", 1))
    o16, e16 = by.get(("ours", 16)), by.get(("eager-fp16", 16))
    if o1:
        line(
            "GPT decode <= 4 ms/token at batch 1",
            o1.decode_ms_per_token <= 4.0,
            f"{o1.decode_ms_per_token:.2f} ms",
        )
        line("whole-line RTF <= 0.05 at batch 1", o1.rtf <= 0.05, f"{o1.rtf:.4f}")
        if e1:
            line(
                ">= 3x the eager fp16 baseline at batch 1 (decode, RTF)",
                e1.decode_ms_per_token >= 3 * o1.decode_ms_per_token and e1.rtf >= 3 * o1.rtf,
                f"decode x{e1.decode_ms_per_token / o1.decode_ms_per_token:.1f}, RTF x{e1.rtf / o1.rtf:.1f}",
            )
    if o16:
        line(">= 30x real time aggregate at batch 16", o16.x_realtime >= 30, f"{o16.x_realtime:.1f}x")
        if e16:
            line(
                ">= 3x the eager fp16 baseline at batch 16",
                e16.rtf >= 3 * o16.rtf,
                f"x{e16.rtf / o16.rtf:.1f}",
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parity-dir", type=Path, default=None)
    ap.add_argument("--skip-parity", action="store_true")
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument("--batches", default="1,8,16")
    ap.add_argument("--tokens", type=int, default=100, help="codes per line (100 = a 2 s line)")
    ap.add_argument("--prompt-frames", type=int, default=172, help="reference prompt mel frames (172 = 2 s)")
    ap.add_argument("--text-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--precision", default="fp16", choices=("fp16", "bf16", "fp32"))
    ap.add_argument("--parity-precisions", default="fp32,fp16,bf16")
    ap.add_argument("--size", default="full", choices=("full", "tiny"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per config (the fastest is kept)")
    ap.add_argument(
        "--beam3-batches",
        default="1,16",
        help="batches also run with 3 beams (ours; informational, '' = none)",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    t_start = time.perf_counter()
    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
    }
    print("environment:", json.dumps(env), flush=True)
    report: dict[str, Any] = {"environment": env, "args": {k: str(v) for k, v in vars(args).items()}}

    parity: list[dict] = []
    if not args.skip_parity:
        pdir = args.parity_dir or Path(os.environ.get("FASTTTS_PARITY_DIR", "tests/.cache/parity-src"))
        parity, reason = run_parity(pdir, dev, [p for p in args.parity_precisions.split(",") if p])
        if reason:
            print(reason, flush=True)
            report["parity_skipped"] = reason
    report["parity"] = parity
    if dev.type == "cuda":
        torch.cuda.empty_cache()

    dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.precision]
    batches = [int(x) for x in args.batches.split(",") if x]
    t0 = time.perf_counter()
    uv = random_unified_voice(args.size, 0, device=dev)
    s2 = random_s2mel(args.size, 1, device=dev)
    bv = random_bigvgan(args.size, 2, device=dev)
    _sync(dev)
    print(f"random {args.size} models built in {time.perf_counter() - t0:.1f} s", flush=True)
    rows: list[BenchRow] = []
    max_b = max(batches)

    if not args.skip_baseline:
        uv16 = copy.deepcopy(uv).half()
        for b in batches:
            w = make_workload(uv, s2, b, args.tokens, args.prompt_frames, args.text_tokens, dev, seed=b)
            best = None
            for rep in range(args.repeats + 1):  # the first run warms up
                if dev.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(dev)
                r = run_eager(uv16, s2, bv, w, args.tokens, args.steps)
                if dev.type == "cuda":
                    r.peak_gb = torch.cuda.max_memory_allocated(dev) / 2**30
                if rep and (best is None or r.total_s < best.total_s):
                    best = r
            assert best is not None
            rows.append(best)
            print(_fmt_table([best]).splitlines()[-1], flush=True)
        del uv16
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    beam3 = [int(x) for x in args.beam3_batches.split(",") if x and int(x) <= max_b]
    dset = DecodeSettings(max_lines=max_b, max_beams=3 if beam3 else 1)
    gpt = TorchGPT(uv, dtype=dt, device=dev, settings=dset)
    s2m = TorchS2Mel(s2, dtype=dt, device=dev, settings=S2MelSettings(max_rows=max_b))
    voc = TorchVocoder(bv, device=dev, settings=S2MelSettings(max_rows=max_b))
    for b, nb in [(b, 1) for b in batches] + [(b, 3) for b in beam3]:
        w = make_workload(uv, s2, b, args.tokens, args.prompt_frames, args.text_tokens, dev, seed=b)
        with torch.inference_mode():
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            _, t_warm = _timed(
                dev, lambda w=w, nb=nb: run_ours(gpt, s2m, voc, w, args.tokens, args.steps, nb)
            )
            best = None
            for _ in range(args.repeats):
                r = run_ours(gpt, s2m, voc, w, args.tokens, args.steps, nb)
                if best is None or r.total_s < best.total_s:
                    best = r
            assert best is not None
            best.warmup_s = t_warm
            if dev.type == "cuda":
                best.peak_gb = torch.cuda.max_memory_allocated(dev) / 2**30
            best.extra.update(
                graphs=gpt.graphs.captures + s2m.graphs.captures + voc.graphs.captures,
                graph_failures=[str(k) for g in (gpt.graphs, s2m.graphs, voc.graphs) for k in g.failures],
                kv_cache_gb=round(gpt.cache.nbytes() / 2**30, 3) if gpt.cache is not None else 0.0,
            )
        rows.append(best)
        print(_fmt_table([best]).splitlines()[-1], flush=True)

    report["bench"] = [
        {**asdict(r), "rtf": r.rtf, "x_realtime": r.x_realtime, "lines_per_s": r.lines_per_s} for r in rows
    ]
    failed = [p for p in parity if not p["ok"]]
    print()
    print(f"== torch backend acceptance on {env['device']} (torch {env['torch']}, CUDA {env['cuda']})")
    print(
        f"   bench: {args.size} random weights, {args.tokens} codes/line (2 s of audio at 100), prompt "
        f"{args.prompt_frames} frames, {args.steps} steps, 1 beam, ours = {args.precision} GPT+DiT, graphs"
    )
    if parity:
        print(f"   parity: {len(parity) - len(failed)}/{len(parity)} checks within tolerance")
        for p in failed:
            print(
                f"   FAILED parity {p['case']} {p['precision']} {p['stage']} {p['what']}: "
                f"{p['value']:.3e} > {p['tol']:.1e}"
            )
    elif "parity_skipped" in report:
        print(f"   {report['parity_skipped']}")
    print(_fmt_table(rows))
    for r in rows:
        if r.extra:
            print(f"   {r.config} B{r.batch}: " + ", ".join(f"{k}={v}" for k, v in r.extra.items()))
    print("   targets (issue 6, H200):")
    for t in _targets(rows):
        print(t)
    report["targets"] = _targets(rows)
    report["wall_s"] = time.perf_counter() - t_start
    print(f"   wall time {report['wall_s']:.0f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2), encoding="utf-8")
        print(f"   report: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
