"""`fasttts bench`: per-stage timings, RTF and lines/s of our ONNX runtime vs the PyTorch eager modules.

    fasttts bench --random-weights --preset cpu-fp32 --tokens N --batch 1,4,8
    fasttts bench --engine DIR [--checkpoint CKPT] --tokens N --batch 1,4,8

`--random-weights` writes a FULL-SIZE IndexTTS-2 checkpoint with random weights in the official layout
(config.yaml of the release, every module at its real width) into a temporary folder and builds its engine
(`build_engine`, in a child process whose time and peak memory are reported too); `--engine` times an
existing engine (the eager side then needs `--checkpoint`, since the runtime never reads one).

Both sides get the same work, from the same weights, in the same process:
- voice preparation of a synthetic reference voice (w2v-BERT on the speaker and the emotion path, codec,
  CAMPPlus, prompt condition, both conditioners; the eager side runs all of w2v-BERT's layers, as the
  original does, where ours stops at layer 17, the one both read);
- per line: prefill, exactly N generated tokens (the stop token is masked out: timing only) at 1 and 3
  beams, the latent pass, s2mel (content + CFM; `s2mel_steps_timed` steps are run and the per-step time is
  scaled to the preset's step count), BigVGAN.
Ours runs each batch size as one batch (prefixes left-padded, beams as rows); the eager side runs lines one
at a time at batch 1, as the original does (its 3 beams are 3 rows of one batch, its prefill runs on
every beam row), so its per-line cost is the same at every batch size. Peak RSS is the process's high
water mark after ours (ONNX sessions only) and after eager (plus the PyTorch modules).

`--rounds N` times ours, then eager, N times over and reports the median of every figure: a shared
CPU's speed drifts by tens of percent within minutes, so one pass of each side can compare two
different machines.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.errors import UsageError

SR_OUT = 22050
HOP = 256


@dataclass(frozen=True)
class BenchOptions:
    engine: Path | None = None  # existing engine folder
    checkpoint: Path | None = None  # its checkpoint, for the eager side
    random_weights: bool = False  # full-size random checkpoint + engine in a temporary folder
    preset: str | None = None  # None: the engine's own (cpu-fp32 for --random-weights)
    tokens: int = 100  # generated tokens per line (100 codes = 2 s of speech)
    batches: tuple[int, ...] = (1, 4, 8)
    beams: tuple[int, ...] = (1, 3)
    text_tokens: int = 24  # text tokens per line
    ref_seconds: float = 4.0  # reference voice (4 s -> 344 prompt mel frames, the spec's example)
    s2mel_steps_timed: int = 2  # CFM steps actually run per measurement
    eager: bool = True
    threads: int | None = None  # ORT intra-op threads and torch threads (None: all cores)
    work_dir: Path | None = None  # where the random checkpoint and engine go (default: a temp folder)
    seed: int = 0
    rounds: int = 1  # ours then eager, this many times; every figure is the median over rounds


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def median_of_runs(runs: Sequence[Any]) -> Any:
    """One result from several runs of the same measurement: numbers -> their median (ints that agree
    stay ints), dicts -> per key (the keys of the first run), anything else -> the first run's."""
    first = runs[0]
    if isinstance(first, dict):
        return {k: median_of_runs([r[k] for r in runs]) for k in first}
    nums = [isinstance(r, int | float) and not isinstance(r, bool) for r in runs]
    if all(nums):
        if all(isinstance(r, int) for r in runs) and len(set(runs)) == 1:
            return first
        return float(np.median(np.asarray(runs, np.float64)))
    return first


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def write_bench_voice(path: Path, seconds: float, sr: int = 24000, seed: int = 0) -> Path:
    """A voice-like test signal (harmonics with vibrato and an amplitude envelope, a little noise)."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    phase = 2 * np.pi * np.cumsum(130.0 * (1 + 0.03 * np.sin(2 * np.pi * 5 * t))) / sr
    x = sum(np.sin(k * phase) / k for k in range(1, 16))
    x = 0.2 * x * (0.5 + 0.5 * np.sin(2 * np.pi * 2.5 * t) ** 2) + 0.01 * rng.standard_normal(t.size)
    sf.write(str(path), x.astype(np.float32), sr, subtype="PCM_16")
    return path


# --------------------------------------------------------------------------- full-size random checkpoint


def full_config() -> dict[str, Any]:
    """The release's config.yaml (spec §1.2)."""
    from fasttts_cli.build.tiny import TINY_CONFIG
    from fasttts_cli.torch_backend.random_model import FULL_GPT

    cfg = json.loads(json.dumps(TINY_CONFIG))  # the schema; every size below is the release's
    cfg["gpt"] = {**cfg["gpt"], **json.loads(json.dumps(FULL_GPT))}
    cfg["semantic_codec"].update(
        hidden_size=1024, vocos_dim=384, vocos_intermediate_dim=2048, vocos_num_layers=12
    )
    s2 = cfg["s2mel"]
    s2["style_encoder"]["dim"] = 192
    s2["length_regulator"].update(
        channels=512, in_channels=1024, content_codebook_size=2048, sampling_ratios=[1, 1, 1, 1]
    )
    s2["DiT"].update(hidden_dim=512, num_heads=8, depth=13, content_dim=512, content_codebook_size=1024)
    s2["wavenet"].update(hidden_dim=512, num_layers=8)
    return cfg


BIGVGAN_FULL_JSON: dict[str, Any] = {
    "resblock": "1",
    "num_mels": 80,
    "upsample_rates": [4, 4, 2, 2, 2, 2],
    "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4],
    "upsample_initial_channel": 1536,
    "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "activation": "snakebeta",
    "snake_logscale": True,
    "use_tanh_at_final": False,
    "use_bias_at_final": False,
    "sampling_rate": 22050,
    "hop_size": 256,
    "n_fft": 1024,
    "win_size": 1024,
    "fmin": 0,
    "fmax": None,
}


def write_random_checkpoint(out: Path, seed: int = 0) -> Path:
    """Full-size IndexTTS-2 checkpoint with random weights in the official layout (about 7 GB: w2v-BERT
    with all 24 layers as released). Modules are built, saved and freed one at a time to bound memory."""
    import gc

    import torch
    import yaml
    from safetensors.torch import save_file
    from transformers import Wav2Vec2BertConfig, Wav2Vec2BertModel

    from fasttts_cli.build import tiny
    from fasttts_cli.build.campplus import CAMPPlus
    from fasttts_cli.build.codec import CodecSizes, SemanticCodec
    from fasttts_cli.torch_backend.random_model import random_bigvgan, random_s2mel, random_unified_voice

    def state(m: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {k: v.detach().contiguous() for k, v in m.state_dict().items()}

    out.mkdir(parents=True, exist_ok=True)
    from fasttts_cli.build.checkpoint import RANDOM_KEY

    cfg = {**full_config(), RANDOM_KEY: True}  # engines built from it say they have random weights
    (out / "config.yaml").write_text(
        "# RANDOM full-size IndexTTS-2 checkpoint (fasttts bench --random-weights)\n"
        + yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True),
        encoding="utf-8",
    )
    (out / "bpe.model").write_bytes(tiny.train_bpe())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m: Any = random_unified_voice("full", seed)
        torch.save(state(m), out / "gpt.pth")
        del m
        gc.collect()
        s2 = random_s2mel("full", seed + 1)
        torch.save({"net": {k: dict(v) for k, v in s2.official_state_dict().items()}}, out / "s2mel.pth")
        del s2
        n_proto = sum(cfg["emo_num"])
        torch.save(0.5 * torch.randn(n_proto, 192, generator=g), out / "feat1.pt")
        torch.save(0.02 * torch.randn(n_proto, 1280, generator=g), out / "feat2.pt")
        torch.save(
            {
                "mean": 0.1 * torch.randn(1024, generator=g),
                "var": 0.5 + 0.5 * torch.randn(1024, generator=g).abs(),
            },
            out / "wav2vec2bert_stats.pt",
        )
        hf = out / "hf_cache"
        w2v_dir = hf / "w2v-bert-2.0"
        w2v_dir.mkdir(parents=True, exist_ok=True)
        wcfg = Wav2Vec2BertConfig(add_adapter=False, hidden_dropout=0.0, attention_dropout=0.0)
        w2v = Wav2Vec2BertModel(wcfg)
        tiny._randomize(w2v, g)
        d = wcfg.to_dict()
        d["architectures"] = ["Wav2Vec2BertModel"]
        (w2v_dir / "config.json").write_text(json.dumps(d, indent=2, sort_keys=True), encoding="utf-8")
        (w2v_dir / "preprocessor_config.json").write_text(
            json.dumps(tiny.PREPROCESSOR_CONFIG), encoding="utf-8"
        )
        save_file(state(w2v), str(w2v_dir / "model.safetensors"), metadata={"format": "pt"})
        del w2v
        gc.collect()
        codec = SemanticCodec(CodecSizes())
        tiny._randomize(codec, g)
        save_file(state(codec), str(hf / "semantic_codec_model.safetensors"), metadata={"format": "pt"})
        camp = CAMPPlus()
        tiny._randomize(camp, g)
        torch.save(state(camp), hf / "campplus_cn_common.bin")
        (hf / "bigvgan").mkdir(exist_ok=True)
        (hf / "bigvgan" / "config.json").write_text(json.dumps(BIGVGAN_FULL_JSON, indent=2), encoding="utf-8")
        bv = random_bigvgan("full", seed + 2)
        torch.save({"generator": state(bv)}, hf / "bigvgan" / "bigvgan_generator.pt")
    return out


def build_random_engine(work: Path, preset: str, seed: int = 0) -> dict[str, Any]:
    """Checkpoint + engine in `work`, in this process; returns times and peak RSS."""
    import torch

    from fasttts_cli.build.export import build_engine

    torch.set_grad_enabled(False)
    t_ckpt, ckpt = _timed(lambda: write_random_checkpoint(work / "checkpoint", seed))
    size = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
    t_build, eng = _timed(lambda: build_engine(ckpt, preset, work / "engine", overwrite=True))
    esize = sum(p.stat().st_size for p in eng.rglob("*") if p.is_file())
    info = {
        "checkpoint": str(ckpt),
        "engine": str(eng),
        "checkpoint_gb": round(size / 1e9, 2),
        "engine_gb": round(esize / 1e9, 2),
        "write_checkpoint_s": round(t_ckpt, 1),
        "load_and_export_s": round(t_build, 1),
        "peak_rss_mb": round(_peak_rss_mb()),
    }
    (work / "build.json").write_text(json.dumps(info), encoding="utf-8")
    return info


# --------------------------------------------------------------------------------------------- ours


def _random_text(rng: np.random.Generator, n: int, vocab: int) -> list[int]:
    return [int(x) for x in rng.integers(3, max(4, vocab), n)]


def bench_ours(
    opts: BenchOptions, engine_dir: Path, voice: Path, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    from fasttts_cli.indextts2.engine import IndexTTS2Engine

    e = IndexTTS2Engine.load(engine_dir, opts.preset, opts.threads)
    t_open, _ = _timed(e.open_all)
    speaker, emo16 = e.speaker_audio(voice), e.emotion_audio(voice)
    t_cold, _ = _timed(lambda: e.voice_conditioning(speaker, emo16))  # first run: ORT warm-up included
    t_voice, cond = _timed(lambda: e.voice_conditioning(speaker, emo16))
    rng = np.random.default_rng(opts.seed)
    vocab = min(e.text.vocab_size, e.embeddings.text_embedding.shape[0])
    b_max = max(opts.batches)
    texts = [_random_text(rng, opts.text_tokens, vocab) for _ in range(b_max)]
    prefixes = [e.prefix(cond.spk_latents, cond.emovec, t) for t in texts]
    steps = e.preset.s2mel.steps
    n = min(opts.tokens, e.max_codes)
    out: dict[str, Any] = {
        "load_s": t_open,
        "voice_prep_cold_s": t_cold,
        "voice_prep_s": t_voice,
        "tokens": n,
        "batches": {},
    }
    for b in opts.batches:
        if progress:
            progress(f"ours: batch {b}")
        out["batches"][b] = _bench_batch(e, opts, cond, prefixes[:b], n, steps)
    out["s2mel_steps"] = steps
    out["peak_rss_mb"] = _peak_rss_mb()
    e.close()
    return out


def _bench_batch(
    e: Any, opts: BenchOptions, cond: Any, pre: list[np.ndarray], n: int, steps: int
) -> dict[str, Any]:
    """One batch of len(pre) lines through every stage of our runtime."""
    from fasttts_cli.indextts2.engine import noise_generator, segment_seed_generator
    from fasttts_cli.indextts2.sampling import SamplingParams

    b = len(pre)
    row: dict[str, Any] = {"ms_per_token": {}, "generate_s": {}}
    for k in opts.beams:
        p1 = SamplingParams(beams=k, max_tokens=1, stop_token=e.tokens.stop_mel)
        # untimed warm-up: ORT's first run of a shape allocates its arena and plans the graph
        e.generate(
            pre, replace(p1, max_tokens=3), [segment_seed_generator(i, 0) for i in range(b)], ignore_stop=True
        )
        gens = [segment_seed_generator(i, 0) for i in range(b)]
        t1, _ = _timed(lambda p=p1, g=gens: e.generate(pre, p, g, ignore_stop=True))
        gens = [segment_seed_generator(i, 0) for i in range(b)]
        pn = replace(p1, max_tokens=n)
        tn, dec = _timed(lambda p=pn, g=gens: e.generate(pre, p, g, ignore_stop=True))
        row["prefill_s"] = min(row.get("prefill_s", t1), t1)  # prefill (+ one sampling step)
        row["ms_per_token"][k] = 1000 * (tn - t1) / max(1, n - 1)
        row["generate_s"][k] = tn
    codes = [d.codes for d in dec]
    t_lat, lat = _timed(lambda: e.latent(pre, codes))
    # s2mel and the vocoder in the engine's grouping (codes_to_wavs: s2mel.rows_per_call lines a call)
    t_content = t_cfm = t_voc = 0.0
    t_len, wavs = 0, []
    size = e.s2mel_rows(b)
    for lo in range(0, b, size):
        rows = range(lo, min(b, lo + size))
        dt, (cnd, ylens) = _timed(lambda r=rows: e.s2mel_content([lat[i] for i in r], [codes[i] for i in r]))
        t_content += dt
        inp = e.cfm_inputs([cond] * len(rows), cnd, ylens)
        n = int(inp.x_lens.max())
        t_len = max(t_len, n)
        z = np.stack([e.cfm_noise(noise_generator(i, 0), n) for i in rows])
        dt, x = _timed(lambda i=inp, z=z: e.cfm(i, z, opts.s2mel_steps_timed, e.preset.s2mel.cfg_rate))
        t_cfm += dt
        mels = [x[j, :, int(inp.prompt_lens[j]) : int(inp.x_lens[j])] for j in range(len(rows))]
        dt, w = _timed(lambda m=mels: e.vocode(m))
        t_voc += dt
        wavs += w
    step_s = t_cfm / opts.s2mel_steps_timed
    row.update(
        latent_s=t_lat,
        s2mel_content_s=t_content,
        s2mel_step_s=step_s,
        s2mel_s=t_content + steps * step_s,
        cfm_frames=t_len,
        vocoder_s=t_voc,
        audio_s=sum(w.size for w in wavs) / SR_OUT,
    )
    _totals(row, opts.beams, b, steps)
    return row


def _totals(row: dict[str, Any], beams: Sequence[int], lines: int, steps: int) -> None:
    """Batch wall time per beam count (generation already includes its prefill), RTF and lines/s."""
    row["batch_s"], row["rtf"], row["lines_per_s"] = {}, {}, {}
    for k in beams:
        total = row["generate_s"][k] + row["latent_s"] + row["s2mel_s"] + row["vocoder_s"]
        row["batch_s"][k] = total
        row["rtf"][k] = total / row["audio_s"]
        row["lines_per_s"][k] = lines / total


# --------------------------------------------------------------------------------------------- eager


def bench_eager(
    opts: BenchOptions, checkpoint: Path, voice: Path, steps: int, cfg_rate: float
) -> dict[str, Any]:
    """Our PyTorch modules driven the original's way: one line at a time, batch 1 (beams as rows)."""
    import torch

    from fasttts_cli.build.checkpoint import CheckpointPaths, load_checkpoint, load_config
    from fasttts_cli.build.w2v_bert import load_w2v_bert
    from fasttts_cli.indextts2 import features as feat
    from fasttts_cli.indextts2.engine import NoStopDecoder, segment_seed_generator
    from fasttts_cli.indextts2.sampling import SamplingParams

    torch.set_grad_enabled(False)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    t_load, m = _timed(lambda: load_checkpoint(checkpoint))
    uv, s2 = m.gpt, m.s2mel
    # The original runs every w2v-BERT layer (24 as released) and reads layer 17's output; our engine
    # stops at 17. The eager side pays the original's price, as the targets are stated against it.
    m.w2v_bert = None  # the 17-layer copy is not used here
    paths = CheckpointPaths(Path(checkpoint))
    rp = paths.resolve(load_config(paths.config_path))
    w2v_all = load_w2v_bert(rp.w2v_bert, rp.w2v_stat, all_layers=True)
    speaker = feat.load_speaker_audio(voice)
    emo16 = feat.load_emotion_audio(voice)

    def voice_prep() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        def w2v(a16: np.ndarray) -> torch.Tensor:
            x, mask = feat.w2v_bert_features(a16)
            return w2v_all(torch.from_numpy(x), torch.from_numpy(mask))

        spk = w2v(speaker.audio_16k)
        emo = w2v(emo16)
        _, _, s_ref = m.codec.quantize(spk)
        mel = torch.from_numpy(feat.log_mel(speaker.audio_22k))[None]
        _, fb = feat.campplus_fbank(speaker.audio_16k)
        style = m.campplus(torch.from_numpy(fb)[None])
        tm = torch.tensor([mel.shape[-1]])
        prompt = s2.length_regulator(s_ref, torch.tensor([s_ref.shape[1]]), tm)
        lat = uv.speaker_latents(spk)
        emovec = uv.emotion_vector(emo, spk, 1.0)
        return lat, emovec, style, mel, prompt

    t_cold, _ = _timed(voice_prep)
    t_voice, (lat, emovec, style, mel, prompt) = _timed(voice_prep)
    rng = np.random.default_rng(opts.seed)
    vocab = int(uv.text_embedding.weight.shape[0])
    text = torch.tensor([_random_text(rng, opts.text_tokens, vocab)])
    n = min(opts.tokens, uv.cfg.mel_pos_rows - 2)
    c = uv.cfg
    out: dict[str, Any] = {
        "load_s": t_load,
        "voice_prep_cold_s": t_cold,
        "voice_prep_s": t_voice,
        "w2v_layers_run": w2v_all.depth,
        "tokens": n,
        "ms_per_token": {},
    }

    def generate(k: int, tokens: int) -> np.ndarray:
        pre = uv.prefix_embeddings(lat, emovec, text)
        start = uv.mel_input_embedding(torch.tensor([[c.start_mel_token]]), torch.tensor([[0]]))
        x = torch.cat([pre.embeds, start], dim=1).expand(k, -1, -1)  # HF expands to beams before prefill
        mask = torch.ones(k, x.shape[1], dtype=torch.long)
        logits, _, kv = uv.trunk(x, mask, logits_for="last")
        params = SamplingParams(beams=k, max_tokens=tokens, stop_token=c.stop_mel_token)
        d = NoStopDecoder(
            params, segment_seed_generator(0, 0), vocab=c.number_mel_codes, prefix_ids=(1, c.start_mel_token)
        )
        step = 0
        while True:
            parents, toks = d.step(logits[:, 0].numpy())
            if d.done:
                return d.result().codes
            idx = torch.from_numpy(parents)
            kv = tuple((a[idx], b[idx]) for a, b in kv)
            e = uv.mel_input_embedding(torch.from_numpy(toks)[:, None], torch.full((k, 1), step + 2))
            mask = torch.cat([mask, torch.ones(k, 1, dtype=torch.long)], dim=1)
            logits, _, kv = uv.trunk(e, mask, kv, logits_for="last")
            step += 1

    for k in opts.beams:
        generate(k, 3)  # untimed warm-up, as on our side
        t1, _ = _timed(lambda k=k: generate(k, 1))
        tn, codes = _timed(lambda k=k: generate(k, n))
        out["prefill_s"] = min(out.get("prefill_s", t1), t1)
        out["ms_per_token"][k] = 1000 * (tn - t1) / max(1, n - 1)
        out.setdefault("generate_s", {})[k] = tn
    codes_t = torch.from_numpy(codes)[None]
    t_lat, latent = _timed(lambda: uv.latent(lat, emovec, text, codes_t))
    lens = torch.tensor([codes_t.shape[1]])

    def content() -> tuple[torch.Tensor, torch.Tensor]:
        vq = m.codec.vq2emb(codes_t)
        return s2.content(latent, vq, lens)

    t_content, (cond, _) = _timed(content)
    cat = torch.cat([prompt, cond], dim=1)
    t_len = cat.shape[1]
    z = torch.randn(1, 80, t_len, generator=torch.Generator().manual_seed(opts.seed))
    x_lens = torch.tensor([t_len])
    t_cfm, (x, _) = _timed(
        lambda: s2.cfm.solve(
            cat, x_lens, mel, torch.tensor([mel.shape[-1]]), style, z, opts.s2mel_steps_timed, cfg_rate
        )
    )
    t_voc, wav = _timed(lambda: m.bigvgan(x[:, :, mel.shape[-1] :]))
    step_s = t_cfm / opts.s2mel_steps_timed
    out.update(
        latent_s=t_lat,
        s2mel_content_s=t_content,
        s2mel_step_s=step_s,
        s2mel_s=t_content + steps * step_s,
        cfm_frames=t_len,
        vocoder_s=t_voc,
        audio_s=wav.shape[-1] / SR_OUT,
        peak_rss_mb=_peak_rss_mb(),
    )
    _totals(out, opts.beams, 1, steps)
    return out


# --------------------------------------------------------------------------------------------- driver


def run_bench(opts: BenchOptions, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the benchmark; returns the JSON-able result (`format_table` renders it)."""
    say = progress or (lambda _m: None)
    if opts.tokens < 2:
        raise UsageError("--tokens must be at least 2")
    if not opts.batches or min(opts.batches) < 1:
        raise UsageError("--batch: sizes must be >= 1")
    if opts.engine is None and not opts.random_weights:
        raise UsageError("fasttts bench needs --engine DIR or --random-weights")
    if opts.rounds < 1:
        raise UsageError(f"--rounds {opts.rounds}: expected 1 or more")
    with tempfile.TemporaryDirectory(prefix="fasttts-bench-") as tmp:
        work = Path(opts.work_dir) if opts.work_dir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result: dict[str, Any] = {
            "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
            "machine": {"cpus": os.cpu_count(), "threads": opts.threads},
        }
        engine_dir, checkpoint = opts.engine, opts.checkpoint
        if opts.random_weights:
            done = work / "build.json"
            if opts.work_dir and done.is_file() and (work / "engine" / "manifest.json").is_file():
                say(f"reusing the random checkpoint and engine in {work}")
                result["build"] = {**json.loads(done.read_text(encoding="utf-8")), "reused": True}
            else:
                say("writing a full-size random checkpoint and building its engine (child process)")
                result["build"] = _build_in_child(work, opts.preset or "cpu-fp32", opts.seed)
            engine_dir, checkpoint = Path(result["build"]["engine"]), Path(result["build"]["checkpoint"])
        assert engine_dir is not None
        voice = write_bench_voice(work / "bench-voice.wav", opts.ref_seconds)
        ours_runs: list[dict[str, Any]] = []
        eager_runs: list[dict[str, Any]] = []
        for r in range(opts.rounds):
            tag = f" (round {r + 1} of {opts.rounds})" if opts.rounds > 1 else ""
            say(f"timing our runtime (ONNX Runtime){tag}")
            ours_runs.append(bench_ours(opts, engine_dir, voice, say))
            if opts.eager and checkpoint is not None:
                say(f"timing the PyTorch eager modules{tag}")
                from fasttts_cli.engine_folder import read_manifest
                from fasttts_cli.indextts2.engine import resolve_preset

                p = resolve_preset(read_manifest(engine_dir), opts.preset, engine_dir)
                eager_runs.append(bench_eager(opts, checkpoint, voice, p.s2mel.steps, p.s2mel.cfg_rate))
        result["ours"] = median_of_runs(ours_runs)
        # the high-water mark is per process: from round 2 on it includes the eager side's modules
        result["ours"]["peak_rss_mb"] = ours_runs[0]["peak_rss_mb"]
        if eager_runs:
            result["eager"] = median_of_runs(eager_runs)
        elif opts.eager:
            result["eager"] = None
            result["note"] = "eager side skipped: pass --checkpoint with --engine"
    return result


def _build_in_child(work: Path, preset: str, seed: int) -> dict[str, Any]:
    """The build runs in a child process so its memory does not count in the bench's own peak RSS."""
    work.mkdir(parents=True, exist_ok=True)
    code = (
        "import json, sys; from pathlib import Path; from fasttts_cli.bench import build_random_engine; "
        "print(json.dumps(build_random_engine(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(work), preset, str(seed)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"building the random engine failed:\n{tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------- output


def format_table(result: dict[str, Any]) -> str:
    """A plain-text table: ours per batch size next to eager (per line, batch 1). Accepts the result as
    returned or after a JSON round trip (integer keys turned into strings)."""
    result = _int_keys(result)
    ours, eager = result["ours"], result.get("eager")
    bs = list(ours["batches"])
    beams = sorted({int(k) for row in ours["batches"].values() for k in row["ms_per_token"]})
    cols = [f"ours b={b}" for b in bs] + (["eager (1 line)"] if eager else [])

    def cell(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    rows: list[tuple[str, list[str]]] = []

    def add(
        label: str, fn: Callable[[dict[str, Any]], float | None], fmt: str, eager_too: bool = True
    ) -> None:
        vals = [cell(fn(ours["batches"][b]), fmt) for b in bs]
        if eager:
            vals.append(cell(fn(eager), fmt) if eager_too else "-")
        rows.append((label, vals))

    for label, key in (
        ("voice prep, first (s)", "voice_prep_cold_s"),
        ("voice prep, again (s)", "voice_prep_s"),
    ):
        rows.append(
            (
                label,
                [cell(ours.get(key), ".2f")]
                + [""] * (len(bs) - 1)
                + ([cell(eager.get(key), ".2f")] if eager else []),
            )
        )
    add("prefill + 1 token (s)", lambda r: r["prefill_s"], ".3f")
    for k in beams:
        add(f"ms/token, {k} beam{'s' if k > 1 else ''}", lambda r, k=k: r["ms_per_token"][k], ".1f")
    add("latent pass (s)", lambda r: r["latent_s"], ".3f")
    add("s2mel per step (s)", lambda r: r["s2mel_step_s"], ".3f")
    add("  (CFM frames)", lambda r: r["cfm_frames"], "d")
    add("vocoder (s)", lambda r: r["vocoder_s"], ".3f")
    add("audio (s)", lambda r: r["audio_s"], ".2f")
    for k in beams:
        add(f"RTF, {k} beam{'s' if k > 1 else ''}", lambda r, k=k: r["rtf"][k], ".2f")
        add(f"lines/s, {k} beam{'s' if k > 1 else ''}", lambda r, k=k: r["lines_per_s"][k], ".3f")
    if eager:
        for k in beams:
            rows.append(
                (
                    f"speed-up vs eager, {k} beam{'s' if k > 1 else ''}",
                    [
                        cell(eager["batch_s"][k] * b / ours["batches"][b]["batch_s"][k], ".2f") + "x"
                        for b in bs
                    ]
                    + ["1.00x"],
                )
            )
        k3 = max(beams)
    if eager and 1 in beams and k3 > 1:
        rows.append(
            (
                f"{k3}-beam / 1-beam token cost",
                [
                    cell(
                        ours["batches"][b]["ms_per_token"][k3] / ours["batches"][b]["ms_per_token"][1], ".2f"
                    )
                    for b in bs
                ]
                + [cell(eager["ms_per_token"][k3] / eager["ms_per_token"][1], ".2f")],
            )
        )
    rows.append(
        (
            "peak RSS (MB)",
            [cell(ours["peak_rss_mb"], ".0f")]
            + [""] * (len(bs) - 1)
            + ([cell(eager["peak_rss_mb"], ".0f")] if eager else []),
        )
    )
    w0 = max(len(r[0]) for r in rows)
    widths = [max(len(c), *(len(r[1][i]) for r in rows)) for i, c in enumerate(cols)]
    lines = [" ".join([" " * w0, *(c.rjust(w) for c, w in zip(cols, widths, strict=True))])]
    for label, vals in rows:
        lines.append(" ".join([label.ljust(w0), *(v.rjust(w) for v, w in zip(vals, widths, strict=True))]))
    o = result["options"]
    lines.append(
        f"tokens/line {ours['tokens']}, text tokens {o['text_tokens']}, reference {o['ref_seconds']} s, "
        f"s2mel {ours['s2mel_steps']} steps (per-step time from {o['s2mel_steps_timed']} timed steps), "
        f"cpus {result['machine']['cpus']}, threads {o['threads'] or 'all'}"
        + (f", median of {o['rounds']} rounds (ours, eager, alternating)" if o.get("rounds", 1) > 1 else "")
        + (
            f"; eager voice prep runs all {eager['w2v_layers_run']} w2v-BERT layers as the original does "
            "(ours stops at the one it reads)"
            if eager and eager.get("w2v_layers_run")
            else ""
        )
    )
    if "build" in result:
        b = result["build"]
        lines.append(
            f"random checkpoint {b['checkpoint_gb']} GB written in {b['write_checkpoint_s']} s; "
            f"load + export {b['load_and_export_s']} s (engine {b['engine_gb']} GB), "
            f"build peak RSS {b['peak_rss_mb']} MB"
        )
    return "\n".join(lines)


def _int_keys(x: Any) -> Any:
    if isinstance(x, dict):
        return {(int(k) if isinstance(k, str) and k.isdigit() else k): _int_keys(v) for k, v in x.items()}
    return x


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, default=_json_default)


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"expected comma-separated integers, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m fasttts_cli.bench ...` (the same options as `fasttts bench`)."""
    import argparse

    ap = argparse.ArgumentParser(prog="fasttts bench", description=__doc__.split("\n")[0])
    ap.add_argument("--engine", type=Path)
    ap.add_argument("--checkpoint", type=Path, help="the engine's checkpoint, for the eager side")
    ap.add_argument("--random-weights", action="store_true")
    ap.add_argument(
        "--preset", default=None, help="default: the engine's own (cpu-fp32 with --random-weights)"
    )
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--batch", default="1,4,8")
    ap.add_argument("--beams", default="1,3")
    ap.add_argument("--text-tokens", type=int, default=24)
    ap.add_argument("--ref-seconds", type=float, default=4.0)
    ap.add_argument("--steps-timed", type=int, default=2)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--no-eager", action="store_true")
    ap.add_argument("--work-dir", type=Path)
    ap.add_argument("--json", action="store_true", help="print the JSON result instead of the table")
    ap.add_argument(
        "--rounds", type=int, default=1, help="time ours then eager this many times; report medians"
    )
    a = ap.parse_args(argv)
    opts = BenchOptions(
        engine=a.engine,
        checkpoint=a.checkpoint,
        random_weights=a.random_weights,
        preset=a.preset,
        tokens=a.tokens,
        batches=_ints(a.batch),
        beams=_ints(a.beams),
        text_tokens=a.text_tokens,
        ref_seconds=a.ref_seconds,
        s2mel_steps_timed=a.steps_timed,
        eager=not a.no_eager,
        threads=a.threads,
        work_dir=a.work_dir,
        rounds=a.rounds,
    )
    result = run_bench(opts, progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(to_json(result) if a.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
