"""Stage parity of the torch backend against the original's vectors (tools/parity2 format).

Shared by the CPU tests (fp32, the README's tolerances) and the GPU acceptance script (fp32 with TF32 off,
then fp16 and bf16 with the tolerances stated in `TOLERANCES`). Every stage is fed the stored inputs:

  3.5  TorchGPT.forced (static cache, decode graphs on CUDA)   gpt_gen_logits, gpt_gen_hidden (+ argmax)
  3.6  sampling_torch.process_scores on the stored logits      gpt_proc_beam_scores, gpt_proc_sample_scores
  3.7  TorchGPT.latents                                        gpt_latent
  4.1  TorchS2Mel.content (stored vq2emb)                      s2mel_cond
  4.4  TorchS2Mel.cfm, 25 steps from cfm_z                     cfm_out_full
  5    TorchVocoder                                            bigvgan_wav, wav_int16 (|d| <= 1)
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fasttts_cli.backends.torch.s2mel import S2MelSettings, TorchS2Mel, TorchVocoder
from fasttts_cli.indextts2.decode_torch import DecodeSettings, TorchGPT
from fasttts_cli.indextts2.sampling import SamplingParams, history_mask
from fasttts_cli.indextts2.sampling_torch import RowParams, process_scores

# rel = ||a - b|| / ||b|| bounds per precision. fp32: the parity README's 1e-4. Half precision: what the
# stage can hold after rounding the weights and activations (fp16: 11-bit mantissa, bf16: 8-bit), with a
# margin over the errors measured on CPU for the parity checkpoint (fp16: GPT 8.6e-4, CFM 3.9e-4; bf16:
# GPT 6.8e-3, CFM 3.3e-3); the GPU run reports its own values. BigVGAN and the content stage stay fp32.
TOLERANCES: dict[str, dict[str, float]] = {
    "fp32": {"gpt": 1e-4, "latent": 1e-4, "content": 1e-4, "cfm": 1e-4, "vocoder": 1e-4, "scores": 1e-4},
    "fp16": {"gpt": 5e-3, "latent": 5e-3, "content": 1e-4, "cfm": 5e-3, "vocoder": 1e-4, "scores": 1e-4},
    "bf16": {"gpt": 3e-2, "latent": 3e-2, "content": 1e-4, "cfm": 3e-2, "vocoder": 1e-4, "scores": 1e-4},
}
_DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class StageCheck:
    stage: str
    what: str
    value: float
    tol: float
    ok: bool
    note: str = ""


def rel(a: Any, b: Any) -> float:
    a = np.asarray(
        torch.as_tensor(a).detach().cpu().double().numpy() if isinstance(a, torch.Tensor) else a, np.float64
    )
    b = np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shape {a.shape} != {b.shape}")
    nb = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / (nb if nb > 0 else 1.0))


def _check(out: list[StageCheck], stage: str, what: str, value: float, tol: float, note: str = "") -> None:
    out.append(StageCheck(stage, what, value, tol, bool(value <= tol), note))


def scores_match(got: np.ndarray, want: np.ndarray) -> float:
    """rel of the finite entries, or inf when the -inf positions differ."""
    if not np.array_equal(np.isinf(got), np.isinf(want)):
        return float("inf")
    fin = np.isfinite(want)
    return rel(got[fin], want[fin])


def check_case(
    arrays: Mapping[str, np.ndarray],
    uv: Any,
    s2mel: Any,
    bigvgan: Any,
    *,
    precision: str = "fp32",
    device: torch.device | str = "cpu",
    use_graphs: bool | None = None,
) -> list[StageCheck]:
    """Run every stage above on copies of the modules (they are not modified) and compare."""
    dev = torch.device(device)
    tol = TOLERANCES[precision]
    dt = _DT[precision]
    out: list[StageCheck] = []
    a = arrays
    prefix = a["gpt_prefix_emb"][0]
    codes = a["gpt_forced_codes"].astype(np.int64)
    prev_tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        gpt = TorchGPT(
            copy.deepcopy(uv),
            dtype=dt,
            device=dev,
            settings=DecodeSettings(max_lines=1, use_graphs=use_graphs),
        )
        logits, hidden = gpt.forced(prefix, codes)
        _check(out, "3.5", "generation logits", rel(logits, a["gpt_gen_logits"]), tol["gpt"])
        _check(out, "3.5", "generation hidden", rel(hidden, a["gpt_gen_hidden"]), tol["gpt"])
        same = float((logits.argmax(-1).cpu().numpy() == a["gpt_gen_logits"].argmax(-1)).mean())
        _check(out, "3.5", "greedy code mismatch (fraction)", 1.0 - same, 0.0 if precision == "fp32" else 0.1)
        lat = gpt.latents([prefix], [codes])[0]
        _check(out, "3.7", "latent", rel(lat, a["gpt_latent"][0]), tol["latent"])
        del gpt

        hist = a["gpt_gen_input_ids"][0].tolist()
        seen = history_mask(
            [hist + codes[:k].tolist() for k in range(len(codes) + 1)], a["gpt_gen_logits"].shape[1]
        )
        lg = torch.from_numpy(a["gpt_gen_logits"]).to(dev)
        sn = torch.from_numpy(seen).to(dev)
        for beams, key in ((3, "gpt_proc_beam_scores"), (1, "gpt_proc_sample_scores")):
            rp = RowParams.build([SamplingParams(beams=beams)] * lg.shape[0], 1, dev)
            got = process_scores(lg, sn, rp, beam_mode=beams > 1, do_sample=True).cpu().numpy()
            _check(
                out,
                "3.6",
                f"processors ({'beam' if beams > 1 else 'sample'})",
                scores_match(got, a[key]),
                tol["scores"],
            )

        settings = S2MelSettings(max_rows=1, use_graphs=use_graphs)
        ts = TorchS2Mel(copy.deepcopy(s2mel), dtype=dt, device=dev, settings=settings)
        n = torch.tensor([len(codes)], device=dev)
        cond, ylens = ts.content(
            [torch.from_numpy(a["gpt_latent"][0])], torch.from_numpy(a["s2mel_vq2emb"]), n
        )
        _check(out, "4.1", "content (fp32 by design)", rel(cond, a["s2mel_cond"]), tol["content"])
        _check(
            out, "4.1", "target length mismatch", float(int(ylens[0]) != int(a["s2mel_target_len"][0])), 0.0
        )
        mu = torch.from_numpy(a["s2mel_cat_condition"])
        refmel = torch.from_numpy(a["refmel"])
        x = ts.cfm(
            mu,
            torch.tensor([mu.shape[1]]),
            refmel,
            torch.tensor([refmel.shape[-1]]),
            torch.from_numpy(a["campplus_style"]),
            torch.from_numpy(a["cfm_z"]),
            steps=25,
            cfg_rate=0.7,
        )
        _check(out, "4.4", "CFM 25 steps", rel(x, a["cfm_out_full"]), tol["cfm"])
        del ts

        voc = TorchVocoder(copy.deepcopy(bigvgan), device=dev, settings=settings, tf32=False)
        wav = voc([torch.from_numpy(a["cfm_mel"][0])])[0]
        _check(out, "5", "BigVGAN (fp32)", rel(wav, a["bigvgan_wav"][0, 0]), tol["vocoder"])
        i16 = torch.clamp(32767 * wav, -32767.0, 32767.0).to(torch.int16).cpu().numpy().astype(np.int64)
        _check(out, "5", "wav_int16 max |diff|", float(np.abs(i16 - a["wav_int16"][0]).max()), 1.0)
        if dev.type == "cuda":
            voc32 = TorchVocoder(copy.deepcopy(bigvgan), device=dev, settings=settings, tf32=True)
            w32 = voc32([torch.from_numpy(a["cfm_mel"][0])])[0]
            _check(out, "5", "BigVGAN (TF32)", rel(w32, a["bigvgan_wav"][0, 0]), 5e-3, "TF32 convs/matmuls")
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev_tf32
    return out


def format_checks(checks: list[StageCheck], title: str) -> str:
    lines = [title, f"  {'stage':<6}{'check':<36}{'value':>12}{'tol':>10}  ok"]
    for c in checks:
        lines.append(
            f"  {c.stage:<6}{c.what:<36}{c.value:>12.3e}{c.tol:>10.1e}  {'yes' if c.ok else 'NO'} {c.note}"
        )
    return "\n".join(lines)
