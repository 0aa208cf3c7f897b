"""ONNX export of the DiT in pieces, so the ONNX Runtime path really skips what a policy skips.

Graphs (all with dynamic batch N and time T; written to `<engine>/s2mel_pieces/`):

    embed.onnx        (x, prompt_x, x_lens, t, style, mu) -> (h, c, rope, key_mask)
    skip_in_<l>.onnx  (x, skip) -> y                              blocks that receive a UViT skip
    attn_<l>.onnx     (x, c, rope, key_mask) -> out               what block l's attention adds
    ffn_<l>.onnx      (x, c) -> out                               what block l's FFN adds
    diag_<l>.onnx     (x, c, rope, key_mask) -> mass (N,)         calibration only: diagonal mass
    head.onnx         (h, x, x_lens, t, prompt_lens) -> v         final norm, long skip, WaveNet, conv2
                                                                  (from min(prompt_lens) - margin on)

`pieces.json` indexes them (depth, UViT skip plan, io names, sha256 per file). Every graph is checked
against its PyTorch piece at export (ONNX Runtime, shapes other than the export example, rel < 1e-4).
Each graph is one module of the same DiT weights; nothing is retrained or re-derived.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fasttts_cli.build.onnx_io import staged_folder
from fasttts_cli.build.quiet import quiet_native_output
from fasttts_cli.indextts2.s2mel_cache.piecewise_ort import FORMAT_VERSION, INDEX, PIECES_DIR
from fasttts_cli.indextts2.s2mel_cache.piecewise_torch import DIAGONAL_BAND, attention_probs, diagonal_mass
from fasttts_cli.nets.dit import Attention, DiT, DiTInputs, rope_table, use_ort_attention
from fasttts_cli.spec.engine_folder import file_sha256
from fasttts_cli.spec.presets import INTEGER_PRECISIONS, ComponentSpec

OPSET = 17
VERIFY_REL = 1e-4


class _Embed(nn.Module):
    def __init__(self, dit: DiT) -> None:
        super().__init__()
        self.dit = dit

    def forward(self, x, prompt_x, x_lens, t, style, mu):
        inp = self.dit.embed(x, prompt_x, x_lens, t, style, mu)
        return inp.h, inp.c, inp.rope, inp.key_mask


class _BlockPiece(nn.Module):
    """One piece of transformer block `layer`."""

    def __init__(self, dit: DiT, layer: int) -> None:
        super().__init__()
        self.block = dit.transformer.layers[layer]


class _SkipIn(_BlockPiece):
    def forward(self, x, skip):
        return self.block.skip_in(x, skip)


class _Attn(_BlockPiece):
    def forward(self, x, c, rope, key_mask):
        return self.block.attention_out(x, c, rope, key_mask)


class _FFN(_BlockPiece):
    def forward(self, x, c):
        return self.block.ffn_out(x, c)


class _Diag(nn.Module):
    def __init__(self, dit: DiT, layer: int) -> None:
        super().__init__()
        self.dit, self.layer = dit, layer

    def forward(self, x, c, rope, key_mask):
        ctx = DiTInputs(h=x, c=c, t1=c[:, 0], x_t=x, rope=rope, key_mask=key_mask, x_mask=key_mask)
        return diagonal_mass(attention_probs(self.dit, self.layer, x, ctx), key_mask, DIAGONAL_BAND)


class _Head(nn.Module):
    def __init__(self, dit: DiT) -> None:
        super().__init__()
        self.dit = dit

    def forward(self, h, x, x_lens, t, prompt_lens):
        t1 = self.dit.t_embedder(t)
        tt = x.shape[-1]
        valid = torch.arange(tt, device=x.device).unsqueeze(0) < x_lens.unsqueeze(1)
        inp = DiTInputs(
            h=h,
            c=t1.unsqueeze(1),
            t1=t1,
            x_t=x.transpose(1, 2),
            rope=rope_table(tt, self.dit.cfg.head_dim, self.dit.cfg.rope_base, x.device),
            key_mask=valid[:, None, None, :],
            x_mask=valid[:, None, :].to(x.dtype),
        )
        return self.dit.head(h, inp, t, x_lens, self.dit.head_start(prompt_lens))


def _graphs(dit: DiT) -> list[tuple[str, nn.Module, list[str], list[str]]]:
    """(file stem, module, input names, output names) of every piece."""
    g: list[tuple[str, nn.Module, list[str], list[str]]] = [
        (
            "embed",
            _Embed(dit),
            ["x", "prompt_x", "x_lens", "t", "style", "mu"],
            ["h", "c", "rope", "key_mask"],
        )
    ]
    for layer in range(dit.cfg.depth):
        if layer in dit.skip_plan:
            g.append((f"skip_in_{layer}", _SkipIn(dit, layer), ["x", "skip"], ["y"]))
        g.append((f"attn_{layer}", _Attn(dit, layer), ["x", "c", "rope", "key_mask"], ["out"]))
        g.append((f"ffn_{layer}", _FFN(dit, layer), ["x", "c"], ["out"]))
        g.append((f"diag_{layer}", _Diag(dit, layer), ["x", "c", "rope", "key_mask"], ["mass"]))
    g.append(("head", _Head(dit), ["h", "x", "x_lens", "t", "prompt_lens"], ["v"]))
    return g


_AXES = {
    "x": {0: "batch", 1: "time"},  # (N, T, D) stream inputs; the mel `x` of embed/head is (N, 80, T)
    "skip": {0: "batch", 1: "time"},
    "h": {0: "batch", 1: "time"},
    "c": {0: "batch"},
    "rope": {0: "time"},
    "key_mask": {0: "batch", 3: "time"},
    "out": {0: "batch", 1: "time"},
    "y": {0: "batch", 1: "time"},
    "mass": {0: "batch"},
    "prompt_x": {0: "batch", 2: "time"},
    "x_lens": {0: "batch"},
    "prompt_lens": {0: "batch"},
    "t": {0: "batch"},
    "style": {0: "batch"},
    "mu": {0: "batch", 1: "time"},
    "v": {0: "batch", 2: "time"},
}


def _example(dit: DiT, name: str, n: int, t: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Inputs for one piece at batch n, time t: the real stream values of a random DiT call."""
    cfg = dit.cfg
    x = torch.randn(n, cfg.in_channels, t, generator=g)
    lens = torch.full((n,), t, dtype=torch.int64)
    lens[1:] = torch.randint(max(1, t - 2), t + 1, (n - 1,), generator=g)
    tt = torch.rand(n, generator=g)
    emb = (
        x,
        torch.randn(n, cfg.in_channels, t, generator=g),
        lens,
        tt,
        torch.randn(n, cfg.style_dim, generator=g),
        torch.randn(n, t, cfg.content_dim, generator=g),
    )
    if name == "embed":
        return emb
    inp = dit.embed(*emb)
    h = inp.h + 0.5 * torch.randn(inp.h.shape, generator=g)
    if name.startswith("skip_in"):
        return h, torch.randn(inp.h.shape, generator=g)
    if name.startswith(("attn", "diag")):
        return h, inp.c, inp.rope, inp.key_mask
    if name.startswith("ffn"):
        return h, inp.c
    return h, x, lens, tt, (lens * torch.rand(n, generator=g)).long()  # head


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nb = float(np.linalg.norm(b64))
    return float(np.linalg.norm(a64 - b64) / (nb if nb > 0 else 1.0))


def export_pieces(
    dit: DiT,
    out_dir: Path | str,
    *,
    verify: bool = True,
    seed: int = 0,
    precision: ComponentSpec | None = None,
) -> Path:
    """Export every piece of `dit` into `out_dir` (created; replaced atomically); returns the index path.

    `precision`: the engine's DiT spec. An integer DiT gets integer pieces too (after the fp32 check
    against PyTorch), so the cached path runs the same arithmetic as the engine's single graph. The
    calibration-only `diag_*` graphs stay fp32: they only rank attention maps."""
    import onnxruntime as ort

    from fasttts_cli.build.quantize import apply_precision

    integer = precision if precision is not None and precision.precision in INTEGER_PRECISIONS else None
    out = Path(out_dir)
    dit = dit.eval()
    files: dict[str, dict[str, Any]] = {}
    was = [m.ort_contrib for m in dit.modules() if isinstance(m, Attention)]
    use_ort_attention(dit)  # the pieces run only on ONNX Runtime's CPU provider
    try:
        with staged_folder(out) as tmp:
            g = torch.Generator().manual_seed(seed)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # legacy exporter tracer warnings
                for name, module, ins, outs in _graphs(dit):
                    path = tmp / f"{name}.onnx"
                    ex = _example(dit, name, 2, 24, g)
                    with quiet_native_output(f"the ONNX export of DiT piece {name}"):
                        torch.onnx.export(
                            module,
                            ex,
                            str(path),
                            input_names=ins,
                            output_names=outs,
                            dynamic_axes={k: _mel_axes(k, name) for k in ins + outs},
                            opset_version=OPSET,
                            dynamo=False,
                            do_constant_folding=True,
                        )
                    worst = 0.0
                    if verify:
                        so = ort.SessionOptions()
                        so.intra_op_num_threads = 1
                        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
                        for n, t in ((3, 17), (1, 31)):
                            args = _example(dit, name, n, t, g)
                            want = module(*args)
                            want = want if isinstance(want, tuple) else (want,)
                            got = sess.run(outs, {k: a.numpy() for k, a in zip(ins, args, strict=True)})
                            for o, a, b in zip(outs, got, want, strict=True):
                                if b.dtype == torch.bool:
                                    ok = np.array_equal(a, b.numpy())
                                    err = 0.0 if ok else 1.0
                                else:
                                    err = _rel(a, b.numpy())
                                worst = max(worst, err)
                                if not err < VERIFY_REL:
                                    raise RuntimeError(
                                        f"s2mel piece {name} output {o}: rel error {err:.2e} at ({n}, {t})"
                                    )
                    piece_precision = "fp32"
                    # integer pieces only: the pieces run on the CPU provider (no fp16 there)
                    if integer is not None and not name.startswith("diag_"):
                        apply_precision(path, path, integer)
                        piece_precision = integer.precision
                    files[name] = {
                        "precision": piece_precision,
                        "file": path.name,
                        "inputs": ins,
                        "outputs": outs,
                        "sha256": file_sha256(path),
                        "verify_rel": worst,
                    }
            index = {
                "format_version": FORMAT_VERSION,
                "depth": dit.cfg.depth,
                "skip_plan": {str(k): v for k, v in sorted(dit.skip_plan.items())},
                "diagonal_band": DIAGONAL_BAND,
                "opset": OPSET,
                "pieces": files,
            }
            (tmp / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True), encoding="utf-8")
    finally:
        for m, on in zip((m for m in dit.modules() if isinstance(m, Attention)), was, strict=True):
            m.ort_contrib = on
    return out / INDEX


def _mel_axes(name: str, graph: str) -> dict[int, str]:
    # embed/head take the mel `x` as (N, 80, T); the stream pieces take `x` as (N, T, D)
    if name == "x" and graph in ("embed", "head"):
        return {0: "batch", 2: "time"}
    return _AXES[name]


def export_pieces_into_engine(engine_dir: Path | str, dit: DiT) -> Path:
    """Add the pieces to an engine folder (beside its single-graph DiT) and list the index in the
    manifest's `files` as `s2mel_pieces` (the manifest check then insists the folder is there)."""
    from fasttts_cli.spec.engine_folder import Manifest, read_manifest, write_manifest

    folder = Path(engine_dir)
    manifest = read_manifest(folder)
    spec = (manifest.preset_build_keys.get("components") or {}).get("dit")
    precision = None if spec is None else ComponentSpec(**spec)
    index = export_pieces(dit, folder / PIECES_DIR, precision=precision)
    files = dict(manifest.files) | {"s2mel_pieces": f"{PIECES_DIR}/{INDEX}"}
    write_manifest(folder, Manifest.from_dict(json.loads(manifest.to_json()) | {"files": files}))
    return index
