"""`fasttts bench`: per-stage timings, RTF and lines/s of our ONNX runtime vs the PyTorch eager modules.

    fasttts bench --random-weights --preset cpu-fp32 --tokens N --batch 1,4,8
    fasttts bench --engine DIR [--checkpoint CKPT] --tokens N --batch 1,4,8
    fasttts bench --random-weights --model indextts2.5 --tokens N --batch 1,4,8

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

IndexTTS-2.5 (an engine folder whose manifest says so, or `--random-weights --model indextts2.5`): the same
stages on its engine, except that it has no latent pass (latent_s null) and decodes its 25 Hz codes with
`codec_decode` (codec_decode_s, part of s2mel_content_s); ms_per_audio_s puts both models' token cost per
second of audio, where 2.5 needs half the tokens. Its eager side (bench_eager25.EagerV25, with
`--checkpoint` or `--random-weights`) is the 2.5 PyTorch modules the way infer_v2_5 runs them: the same
stages, its w2v-BERT run twice on the speaker as the original does.

`--rounds N` times ours, then eager, N times over and reports the median of every figure: a shared
CPU's speed drifts by tens of percent within minutes, so one pass of each side can compare two
different machines.

This module drives both sides and times ours; the rest lives in fasttts_cli/tools/: bench_eager and
bench_eager25 (the eager side of each model), bench_random (the random checkpoint and engine),
bench_table (table and JSON), bench_common.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.errors import UsageError
from fasttts_cli.indextts25.components import MODEL_ID25
from fasttts_cli.tools import bench_common as common
from fasttts_cli.tools.bench_common import BenchOptions, StageTimes, finish_row
from fasttts_cli.tools.bench_table import format_table, to_json

__all__ = ["BenchOptions", "format_table", "median_of_runs", "run_bench", "to_json", "write_bench_voice"]


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


# --------------------------------------------------------------------------------------------- ours


def load_engine(engine_dir: Path, preset: str | None, threads: int | None) -> Any:
    """The engine class the folder's manifest names (IndexTTS-2 or IndexTTS-2.5)."""
    from fasttts_cli.indextts2.engine import IndexTTS2Engine
    from fasttts_cli.indextts25.components import MODEL_ID25
    from fasttts_cli.indextts25.engine import IndexTTS25Engine
    from fasttts_cli.spec.engine_folder import read_manifest

    is25 = read_manifest(engine_dir).model_id == MODEL_ID25
    return (IndexTTS25Engine if is25 else IndexTTS2Engine).load(engine_dir, preset, threads)


def bench_ours(
    opts: BenchOptions, engine_dir: Path, voice: Path, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    e = load_engine(engine_dir, opts.preset, opts.threads)
    t_open, _ = common.timed(e.open_all)
    speaker, emo16 = e.speaker_audio(voice), e.emotion_audio(voice)
    t_cold, _ = common.timed(lambda: e.voice_conditioning(speaker, emo16))  # first run: ORT warm-up included
    t_voice, cond = common.timed(lambda: e.voice_conditioning(speaker, emo16))
    rng = np.random.default_rng(opts.seed)
    rows = e.embeddings.text_embedding.shape[0]
    vocab = min(getattr(e.text, "vocab_size", rows), rows)
    b_max = max(opts.batches)
    texts = [common.random_text(rng, opts.text_tokens, vocab) for _ in range(b_max)]
    if e.model_id == MODEL_ID25:  # language row 0: every row costs the same
        prefixes = [e.prefix25(cond.spk_latents, cond.emovec, t, 0) for t in texts]
    else:
        prefixes = [e.prefix(cond.spk_latents, cond.emovec, t) for t in texts]
    steps = e.preset.s2mel.steps
    n = min(opts.tokens, e.max_codes)
    out: dict[str, Any] = {
        "model": e.model_id,
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
    out["peak_rss_mb"] = common.peak_rss_mb()
    e.close()
    return out


def _bench_batch(
    e: Any, opts: BenchOptions, cond: Any, pre: list[np.ndarray], n: int, steps: int
) -> dict[str, Any]:
    """One batch of len(pre) lines through every stage of our runtime. IndexTTS-2.5 has no latent pass
    (latent_s None); its codec decode is timed on its own too (codec_decode_s, also inside
    s2mel_content_s, where the engine runs it)."""
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
        t1, _ = common.timed(lambda p=p1, g=gens: e.generate(pre, p, g, ignore_stop=True))
        gens = [segment_seed_generator(i, 0) for i in range(b)]
        pn = replace(p1, max_tokens=n)
        tn, dec = common.timed(lambda p=pn, g=gens: e.generate(pre, p, g, ignore_stop=True))
        row["prefill_s"] = min(row.get("prefill_s", t1), t1)  # prefill (+ one sampling step)
        row["ms_per_token"][k] = 1000 * (tn - t1) / max(1, n - 1)
        row["generate_s"][k] = tn
    codes = [d.codes for d in dec]
    is25 = e.model_id == MODEL_ID25
    t_lat, lat = common.timed(lambda: e.latent(pre, codes))
    # s2mel and the vocoder in the engine's grouping (codes_to_wavs: s2mel.rows_per_call lines a call)
    t_codec = t_content = t_cfm = t_voc = 0.0
    t_len, wavs = 0, []
    size = e.s2mel_rows(b)
    for lo in range(0, b, size):
        rows = range(lo, min(b, lo + size))
        if is25:
            e.codec_decode([codes[i] for i in rows])  # untimed warm-up of this shape, as for generate
            dt, _ = common.timed(lambda r=rows: e.codec_decode([codes[i] for i in r]))
            t_codec += dt
        dt, (cnd, ylens) = common.timed(
            lambda r=rows: e.s2mel_content([lat[i] for i in r], [codes[i] for i in r])
        )
        t_content += dt
        inp = e.cfm_inputs([cond] * len(rows), cnd, ylens)
        n_frames = int(inp.x_lens.max())
        t_len = max(t_len, n_frames)
        z = np.stack([e.cfm_noise(noise_generator(i, 0), n_frames) for i in rows])
        dt, x = common.timed(lambda i=inp, z=z: e.cfm(i, z, opts.s2mel_steps_timed, e.preset.s2mel.cfg_rate))
        t_cfm += dt
        mels = [x[j, :, int(inp.prompt_lens[j]) : int(inp.x_lens[j])] for j in range(len(rows))]
        dt, w = common.timed(lambda m=mels: e.vocode(m))
        t_voc += dt
        wavs += w
    t = StageTimes(
        None if is25 else t_lat, t_content, t_cfm, t_len, t_voc, sum(w.size for w in wavs) / common.SR_OUT
    )
    extra = {"codec_decode_s": t_codec} if is25 else {}
    return finish_row(row, opts.beams, b, steps, opts.s2mel_steps_timed, t, tokens=n, **extra)


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
            result["build"] = _random_build(opts, work, say)
            engine_dir, checkpoint = Path(result["build"]["engine"]), Path(result["build"]["checkpoint"])
        assert engine_dir is not None
        model = _engine_model(engine_dir, opts.model)
        voice = write_bench_voice(work / "bench-voice.wav", opts.ref_seconds)
        ours_runs: list[dict[str, Any]] = []
        eager_runs: list[dict[str, Any]] = []
        eager = opts.eager and checkpoint is not None
        for r in range(opts.rounds):
            tag = f" (round {r + 1} of {opts.rounds})" if opts.rounds > 1 else ""
            say(f"timing our runtime (ONNX Runtime){tag}")
            ours_runs.append(bench_ours(opts, engine_dir, voice, say))
            if eager:
                say(f"timing the PyTorch eager modules{tag}")
                assert checkpoint is not None
                eager_runs.append(_bench_eager(opts, engine_dir, checkpoint, model, voice))
        result["ours"] = median_of_runs(ours_runs)
        # the high-water mark is per process: from round 2 on it includes the eager side's modules
        result["ours"]["peak_rss_mb"] = ours_runs[0]["peak_rss_mb"]
        if eager_runs:
            result["eager"] = median_of_runs(eager_runs)
        elif opts.eager:
            result["eager"] = None
            result["note"] = "eager side skipped: pass --checkpoint with --engine"
    return result


def _bench_eager(
    opts: BenchOptions, engine_dir: Path, checkpoint: Path, model: str, voice: Path
) -> dict[str, Any]:
    """The eager side of the engine's model (bench_eager / bench_eager25), at the engine's s2mel steps
    and CFG rate."""
    from fasttts_cli.indextts2.engine import resolve_preset
    from fasttts_cli.spec.engine_folder import read_manifest
    from fasttts_cli.tools.bench_eager import EagerV2, bench_eager
    from fasttts_cli.tools.bench_eager25 import EagerV25

    p = resolve_preset(read_manifest(engine_dir), opts.preset, engine_dir)
    side = EagerV25() if model == MODEL_ID25 else EagerV2()
    return {"model": model, **bench_eager(opts, side, checkpoint, voice, p.s2mel.steps, p.s2mel.cfg_rate)}


def _random_build(opts: BenchOptions, work: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """--random-weights: the build.json of `work` when --work-dir holds one for the same model, else a new
    full-size random checkpoint and engine built there in a child process."""
    from fasttts_cli.tools.bench_random import MODELS, build_in_child

    model = opts.model or "indextts2"
    if model not in MODELS:
        raise UsageError(f"--model {model!r}: expected one of {', '.join(MODELS)}")
    done = work / "build.json"
    if opts.work_dir and done.is_file() and (work / "engine" / "manifest.json").is_file():
        info = json.loads(done.read_text(encoding="utf-8"))
        if info.get("model", "indextts2") != model:
            raise UsageError(
                f"--work-dir {work}: holds a random {info.get('model', 'indextts2')} engine, not {model}",
                hint="use another --work-dir for each model",
            )
        say(f"reusing the random checkpoint and engine in {work}")
        return {**info, "reused": True}
    say(f"writing a full-size random {model} checkpoint and building its engine (child process)")
    return build_in_child(work, opts.preset or "cpu-fp32", opts.seed, model)


def _engine_model(engine_dir: Path, want: str | None) -> str:
    from fasttts_cli.spec.engine_folder import read_manifest

    model = read_manifest(engine_dir).model_id
    if want is not None and want != model:
        raise UsageError(f"--model {want}: {engine_dir} is an {model} engine")
    return model
