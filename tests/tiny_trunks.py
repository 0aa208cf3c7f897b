"""The tiny checkpoint's GPT as both ONNX trunks (classic full-KV and in-place) with their host tables:
what the in-place decoder tests and the one-loop tests both start from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fasttts_cli.backends.onnxruntime.session import OrtSession, SessionOptions
from fasttts_cli.indextts2 import decode as dec
from fasttts_cli.indextts2.decode_inplace import InplaceGPTDecoder, decoder_for


@dataclass
class TinyTrunks:
    checkpoint: Path
    gpt_config: dict[str, Any]
    model: Any  # the UnifiedVoice the graphs were exported from
    classic: dec.GPTDecoder
    inplace: InplaceGPTDecoder
    emb: dec.HostEmbeddings
    n_latents: int
    graph: object  # the in-place trunk's ONNX file


def tiny_trunks(root: Path, headroom: int = 4) -> TinyTrunks:
    """Export both trunks of a fresh tiny checkpoint (no stop bias, so lines run long) under `root`.
    `headroom` is small so the in-place cache grows several times within short lines."""
    torch = pytest.importorskip("torch")
    yaml = pytest.importorskip("yaml")
    from fasttts_cli.build.export import export_graph, gpt_host_tables, inplace_trunk_spec, trunk_spec
    from fasttts_cli.build.tiny import TINY, write_tiny_checkpoint
    from fasttts_cli.nets.unified_voice import load_unified_voice

    torch.set_num_threads(1)
    ckpt = write_tiny_checkpoint(root / "ckpt", stop_bias=0.0)
    gcfg = yaml.safe_load((ckpt / "config.yaml").read_text(encoding="utf-8"))["gpt"]
    uv = load_unified_voice(ckpt / "gpt.pth", gcfg, cond_input_size=TINY.w2v_width)
    (root / "a").mkdir()
    (root / "b").mkdir()
    classic = export_graph(trunk_spec(uv), root / "a")
    inplace = export_graph(inplace_trunk_spec(uv), root / "b")  # verified against PyTorch inside
    for name, arr in gpt_host_tables(uv).items():
        np.save(root / name, arr)
    c = uv.cfg
    emb = dec.HostEmbeddings.load(
        root, dec.GPTTokens(c.start_text_token, c.stop_text_token, c.start_mel_token, c.stop_mel_token)
    )
    opts = SessionOptions(threads=1)
    full = decoder_for(OrtSession(classic, opts), emb, layers=c.layers, heads=c.heads)
    inp = decoder_for(OrtSession(inplace, opts), emb, layers=c.layers, heads=c.heads)
    assert isinstance(full, dec.GPTDecoder) and isinstance(inp, InplaceGPTDecoder)
    inp.headroom = headroom
    return TinyTrunks(ckpt, gcfg, uv, full, inp, emb, c.spk_perceiver.num_latents, inplace)
