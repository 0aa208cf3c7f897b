"""The torch backend's random-weight bench: ours (static cache + CUDA graphs) vs the same modules eager.

A random-weight model built in-process (`nets.random_modules`: full size = UnifiedVoice 866M
parameters, s2mel DiT, BigVGAN v2 22 kHz 256x; nothing downloaded, no checkpoint carried), forced lengths
(`tokens` codes per line, the stop token masked; 100 codes = a 2 s line), a prompt of `prompt_frames` mel
frames, `steps` Euler steps. For each batch size: ours (fp16 GPT and DiT by default, BigVGAN fp32/TF32)
and the same modules run eagerly in fp16 (HF-style KV concatenation, autocast DiT, fp32 BigVGAN):
per-stage times, ms per token, RTF, x real time, lines/s, peak GPU memory.

Voice preparation (w2v-BERT, codec, CAMPPlus, conditioners) is not benched here; the codec's vq2emb (a
table lookup + projection) is replaced by a random tensor. `fasttts_cli.tools.accept_torch` runs this on
the GPU (and on the CPU with --sim-cpu) and turns the issue's targets into checks.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fasttts_cli.backends.torch.s2mel import S2MelSettings, TorchS2Mel, TorchVocoder
from fasttts_cli.indextts2.decode_torch import DecodeSettings, TorchGPT
from fasttts_cli.indextts2.sampling import SamplingParams
from fasttts_cli.indextts2.sampling_torch import RowParams, process_scores
from fasttts_cli.nets.random_modules import random_bigvgan, random_s2mel, random_unified_voice

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


def _content(
    row: BenchRow, content: Callable[..., Any], lat: Any, w: Workload, lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The timed content stage and the CFM inputs it makes (prompt condition first), on both sides."""
    dev = w.z.device
    (cond, ylens), t = _timed(dev, lambda: content(lat, w.vq, lens))
    row.content_ms = t * 1e3
    tm = w.prompt_mel.shape[-1]
    mu = torch.cat([w.prompt_cond, cond], dim=1)
    p_lens = torch.full((len(w.prefixes),), tm, device=dev)
    return mu, tm + ylens, p_lens, ylens


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
    mu, x_lens, p_lens, _ = _content(row, s2m.content, lat, w, lens)
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
        mu, x_lens, p_lens, ylens = _content(row, s2.content, lat, w, lens)
        tm = w.prompt_mel.shape[-1]

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


# name:attribute:width[.format] of each column of the bench table
_COLUMNS = (
    "config:config:11 B:batch:3 prefill_ms:prefill_ms:11.1f ms/token:decode_ms_per_token:9.2f "
    "gpt_s:gpt_s:8.3f latent_ms:latent_ms:10.1f cfm_ms:cfm_ms:9.1f step_ms:cfm_step_ms:8.2f "
    "vocoder_ms:vocoder_ms:11.1f total_s:total_s:8.3f RTF:rtf:8.4f xRT:x_realtime:7.1f "
    "lines/s:lines_per_s:8.2f peak_GB:peak_gb:8.2f"
)


def format_rows(rows: list[BenchRow]) -> str:
    cols = [c.split(":") for c in _COLUMNS.split()]

    def cell(i: int, spec: str, value: Any) -> str:
        width, _, prec = spec.partition(".")
        text = format(value, f".{prec}") if prec else str(value)
        return f"{text:<{width}}" if i == 0 else f"{text:>{width}}"

    head = "".join(cell(i, spec.partition(".")[0], name) for i, (name, _, spec) in enumerate(cols))
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append("".join(cell(i, spec, getattr(r, attr)) for i, (_, attr, spec) in enumerate(cols)))
    return "\n".join(lines)


def targets(rows: list[BenchRow]) -> list[tuple[str, bool, str]]:
    """The issue's targets (H200, 2 s lines, 1 beam) on this run: (name, met, measured)."""
    by = {(r.config, r.batch): r for r in rows}
    out: list[tuple[str, bool, str]] = []
    o1, e1 = by.get(("ours", 1)), by.get(("eager-fp16", 1))
    o16, e16 = by.get(("ours", 16)), by.get(("eager-fp16", 16))
    if o1:
        ms = o1.decode_ms_per_token
        out.append(("GPT decode <= 4 ms/token at batch 1", ms <= 4.0, f"{ms:.2f} ms"))
        out.append(("whole-line RTF <= 0.05 at batch 1", o1.rtf <= 0.05, f"{o1.rtf:.4f}"))
        if e1:
            speed = e1.decode_ms_per_token / ms
            out.append(
                (
                    ">= 3x the eager fp16 baseline at batch 1 (decode, RTF)",
                    speed >= 3 and e1.rtf >= 3 * o1.rtf,
                    f"decode x{speed:.1f}, RTF x{e1.rtf / o1.rtf:.1f}",
                )
            )
    if o16:
        out.append((">= 30x real time aggregate at batch 16", o16.x_realtime >= 30, f"{o16.x_realtime:.1f}x"))
        if e16:
            out.append(
                (
                    ">= 3x the eager fp16 baseline at batch 16",
                    e16.rtf >= 3 * o16.rtf,
                    f"x{e16.rtf / o16.rtf:.1f}",
                )
            )
    return out


@dataclass(frozen=True)
class BenchConfig:
    size: str = "full"  # random_model sizes: "full" or "tiny"
    batches: tuple[int, ...] = (1, 8, 16)
    beam3_batches: tuple[int, ...] = (1, 16)  # also run with 3 beams (ours; informational)
    tokens: int = 100  # codes per line (100 = a 2 s line)
    prompt_frames: int = 172  # reference prompt mel frames (172 = 2 s)
    text_tokens: int = 32
    steps: int = 25
    precision: str = "fp16"  # ours: GPT and DiT
    repeats: int = 2  # timed runs per config after a warm-up (the fastest is kept)
    baseline: bool = True  # also time the eager fp16 modules


def _peak(dev: torch.device) -> float:
    return torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else 0.0


def _reset_peak(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)


def _fastest(runs: list[BenchRow]) -> BenchRow:
    return min(runs, key=lambda r: r.total_s)


def run_bench(cfg: BenchConfig, dev: torch.device, log: Callable[[str], None] = print) -> list[BenchRow]:
    """Eager (when asked) then ours at every batch size; the fastest of `repeats` timed runs each."""
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[cfg.precision]
    t0 = time.perf_counter()
    uv = random_unified_voice(cfg.size, 0, device=dev)
    s2 = random_s2mel(cfg.size, 1, device=dev)
    bv = random_bigvgan(cfg.size, 2, device=dev)
    _sync(dev)
    log(f"random {cfg.size} models built in {time.perf_counter() - t0:.1f} s")
    rows: list[BenchRow] = []
    max_b = max(cfg.batches)

    def workload(b: int) -> Workload:
        return make_workload(uv, s2, b, cfg.tokens, cfg.prompt_frames, cfg.text_tokens, dev, seed=b)

    if cfg.baseline:
        uv16 = copy.deepcopy(uv).half()
        for b in cfg.batches:
            w = workload(b)
            run_eager(uv16, s2, bv, w, cfg.tokens, cfg.steps)  # warm-up
            _reset_peak(dev)
            best = _fastest([run_eager(uv16, s2, bv, w, cfg.tokens, cfg.steps) for _ in range(cfg.repeats)])
            best.peak_gb = _peak(dev)
            rows.append(best)
            log(format_rows([best]).splitlines()[-1])
        del uv16
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    beam3 = [b for b in cfg.beam3_batches if b <= max_b]
    gpt = TorchGPT(
        uv, dtype=dt, device=dev, settings=DecodeSettings(max_lines=max_b, max_beams=3 if beam3 else 1)
    )
    s2m = TorchS2Mel(s2, dtype=dt, device=dev, settings=S2MelSettings(max_rows=max_b))
    voc = TorchVocoder(bv, device=dev, settings=S2MelSettings(max_rows=max_b))
    for b, nb in [(b, 1) for b in cfg.batches] + [(b, 3) for b in beam3]:
        w = workload(b)
        with torch.inference_mode():
            _reset_peak(dev)
            _, t_warm = _timed(dev, lambda w=w, nb=nb: run_ours(gpt, s2m, voc, w, cfg.tokens, cfg.steps, nb))
            best = _fastest(
                [run_ours(gpt, s2m, voc, w, cfg.tokens, cfg.steps, nb) for _ in range(cfg.repeats)]
            )
            best.warmup_s, best.peak_gb = t_warm, _peak(dev)
            best.extra.update(
                graphs=gpt.graphs.captures + s2m.graphs.captures + voc.graphs.captures,
                graph_failures=[str(k) for g in (gpt.graphs, s2m.graphs, voc.graphs) for k in g.failures],
                kv_cache_gb=round(gpt.cache.nbytes() / 2**30, 3) if gpt.cache is not None else 0.0,
            )
        rows.append(best)
        log(format_rows([best]).splitlines()[-1])
    return rows
