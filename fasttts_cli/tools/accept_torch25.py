"""The IndexTTS-2.5 part of the torch backend's GPU acceptance (accept_torch.py runs it after v2's).

On a tiny random 2.5 checkpoint (`build.tiny.write_tiny_checkpoint25`, written here):
1. per precision (fp32 / fp16 / bf16 for the GPT trunk and the DiT): `TorchEngine25` on the device (static
   KV cache, CUDA graphs) against the same engine on the CPU in fp32, eager: voice conditioning, forced
   GPT logits on a 2.5 prefix (parity_torch.TOLERANCES' "gpt"), and codes -> audio with the same noise;
2. per GPU preset (gpu-torch-fp16, gpu-torch-bf16): whole lines in ja / es / ar through
   `TorchSynthesizer25`, each finite and int(2n * 1.72) frames long. Japanese needs fugashi + unidic-lite
   (47 MB, more than a device call carries beside the rest): without them ja is reported as skipped with
   the reason, and es / ar are still checked.
TF32 is off for the fp32 comparison of the voice and GPT (as parity_torch does); BigVGAN runs TF32 on CUDA
by design, hence the audio's looser bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.tools.acceptance_table import Table

LANGS = ("ja", "es", "ar")
TEXT = "hola mundo"
WAV_TOL = {"fp32": 1e-2, "fp16": 1e-1, "bf16": 1e-1}
PRESETS = {"fp16": "gpu-torch-fp16", "bf16": "gpu-torch-bf16"}


def rel(a: Any, b: Any) -> float:
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a64 - b64) / max(float(np.linalg.norm(b64)), 1e-12))


def preset_for(precision: str, tokens: int) -> Any:
    """A torch preset with the GPT trunk and the DiT in `precision`, the rest fp32, one beam."""
    from fasttts_cli.spec.presets import load_preset

    p = load_preset(PRESETS.get(precision, "gpu-torch-fp16"))
    comps = {
        k: dataclasses.replace(v, precision=precision if k in ("gpt", "dit") else "fp32")
        for k, v in p.components.items()
    }
    return dataclasses.replace(p, components=comps).with_run_keys(decode={"max_tokens": tokens, "beams": 1})


def _no_tf32() -> Any:
    import torch

    prev = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    return prev


def compare_engines(ref: Any, eng: Any, voice: Path, precision: str) -> list[str]:
    """`eng` (device) against `ref` (CPU fp32); raises AssertionError naming every stage out of bounds."""
    import torch

    from fasttts_cli.indextts2.generate_loop import forced
    from fasttts_cli.tools.parity_torch import TOLERANCES

    prev = _no_tf32()
    try:
        vr = ref.voice_conditioning(ref.speaker_audio(voice), ref.emotion_audio(voice))
        ve = eng.voice_conditioning(eng.speaker_audio(voice), eng.emotion_audio(voice))
        errs = {n: rel(getattr(ve, n), getattr(vr, n)) for n in ("spk_latents", "emovec", "prompt_condition")}
        ids = ref.text.segments(TEXT, "es", ref.max_text_tokens)[0]
        prefix = ref.prefix25(vr.spk_latents, vr.emovec, ids, ref.text.lang_index("es"))
        codes = np.random.default_rng(0).integers(0, 8000, size=16)
        errs["gpt logits"] = rel(forced(eng.gpt, prefix, codes)[0], forced(ref.gpt, prefix, codes)[0])
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev
    kw = {"steps": 4, "cfg_rate": 0.7}
    noise = [np.random.default_rng(5)]
    w_ref = ref.codes_to_wavs([vr], [prefix], [codes], noise, **kw)[0]
    w_dev = eng.codes_to_wavs([vr], [prefix], [codes], [np.random.default_rng(5)], **kw)[0]
    if w_dev.shape != w_ref.shape or not np.isfinite(w_dev).all():
        raise AssertionError(f"audio {w_dev.shape} (finite: {np.isfinite(w_dev).all()}), CPU {w_ref.shape}")
    errs["audio"] = rel(w_dev, w_ref)
    tol = {n: 1e-3 for n in ("spk_latents", "emovec", "prompt_condition")}
    tol |= {"gpt logits": TOLERANCES[precision]["gpt"], "audio": WAV_TOL[precision]}
    bad = [f"{n} {e:.2e} > {tol[n]:.0e}" for n, e in errs.items() if not e <= tol[n]]
    if bad:
        raise AssertionError("; ".join(bad))
    return [", ".join(f"{n} {e:.1e}" for n, e in errs.items())]


def speakable(langs: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The languages this machine's text front end handles, and {language: why not} for the others."""
    from fasttts_cli.errors import MissingDependencyError
    from fasttts_cli.indextts25.text_japanese import space_words

    missing: dict[str, str] = {}
    if "ja" in langs:
        try:
            space_words("テスト")
        except MissingDependencyError as e:
            missing["ja"] = f"{e.message} ({e.hint})" if e.hint else e.message
    return [g for g in langs if g not in missing], missing


def speak(synth: Any, voice: Path, tokens: int, langs: Sequence[str] = LANGS) -> list[str]:
    from fasttts_cli.synth.synthesizer import SynthRequest

    v = synth.prepare_voice(voice)
    opts = {"max_tokens": tokens}
    res = synth.synthesize([SynthRequest(g, TEXT, v, seed=3, options=opts, lang=g) for g in langs])
    bad = [f"{r.line_id}: {r.error}" for r in res if not r.ok]
    bad += [r.line_id for r in res if r.ok and not np.isfinite(r.audio).all()]
    bad += [
        f"{r.line_id}: {r.audio.size} samples for {r.n_tokens} codes"
        for r in res
        if r.ok and r.audio.size != int(2 * r.n_tokens * 1.72) * synth.hop
    ]
    if bad:
        raise AssertionError("; ".join(bad))
    return [f"{len(res)} lines, {sum(r.audio.size for r in res) / synth.sample_rate:.2f} s of audio"]


def run_v25(
    table: Table, dev: Any, mode: str, precisions: Sequence[str], work: Path, tokens: int = 16
) -> None:
    """Every 2.5 check (see the module docstring) into `table`, under `work`."""
    from fasttts_cli.build.tiny import write_tiny_checkpoint25
    from fasttts_cli.indextts25.engine_torch import TorchEngine25
    from fasttts_cli.indextts25.synthesizer_torch import TorchSynthesizer25
    from fasttts_cli.tools.bench import write_bench_voice

    ck = work / "ckpt25"
    with table.timed("2.5 tiny checkpoint", mode) as d:
        if not ck.is_dir():
            write_tiny_checkpoint25(ck, stop_bias=0.0)
        voice = write_bench_voice(work / "voice25.wav", 2.0)
        d.append(str(ck))
    if not ck.is_dir():
        return
    ref = TorchEngine25.load(ck, preset_for("fp32", tokens), device="cpu")
    for prec in precisions:
        with table.timed(f"2.5 torch {prec} on {dev.type} vs CPU fp32", mode) as d:
            d += compare_engines(
                ref, TorchEngine25.load(ck, preset_for(prec, tokens), device=dev), voice, prec
            )
    langs, missing = speakable(LANGS)
    for name in PRESETS.values():
        for g, why in missing.items():
            table.add(f"2.5 speaks {g} ({name})", False, why, mode="skipped")
        with table.timed(f"2.5 speaks {'/'.join(langs)} ({name})", mode) as d:
            s = TorchSynthesizer25.load(ck, name, device=dev)
            try:
                d += speak(s, voice, tokens, langs)
            finally:
                s.close()
