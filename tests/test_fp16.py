"""fp16 conversion with fp32 islands: valid graphs (strict type inference), islands in fp32, io in fp32,
weights in fp16, masks stay finite, outputs close to fp32."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from fasttts_cli.build.fp16 import (  # noqa: E402
    DEFAULT_FP32_OPS,
    FLOAT,
    FLOAT16,
    check_types,
    convert_file,
    convert_model,
    tensor_types,
)
from fasttts_cli.build.quantize import apply_precision, compare_outputs  # noqa: E402
from fasttts_cli.spec.presets import ComponentSpec  # noqa: E402


class _Block(torch.nn.Module):
    """Linear + LayerNorm + masked softmax attention (finfo.min mask, like our trunk) + gelu + RMS norm."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(32, 64)
        self.ln = torch.nn.LayerNorm(64)
        self.l2 = torch.nn.Linear(64, 32)
        self.g = torch.nn.Parameter(torch.rand(32) + 0.5)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.ln(self.l1(x))
        sc = h @ h.transpose(1, 2) / 8
        sc = torch.where(mask[:, None, :] > 0, sc, torch.finfo(torch.float32).min)
        a = torch.softmax(sc, -1) @ h
        y = self.l2(torch.nn.functional.gelu(a, approximate="tanh"))
        rms = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g
        return y, rms


def _export(path: Path) -> tuple[torch.nn.Module, Path]:
    torch.manual_seed(0)
    m = _Block().eval()
    x = torch.randn(2, 7, 32)
    mask = torch.ones(2, 7, dtype=torch.int64)
    f = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(
            m,
            (x, mask),
            f,
            input_names=["x", "mask"],
            output_names=["y", "rms"],
            dynamic_axes={"x": {0: "b", 1: "t"}, "mask": {0: "b", 1: "t"}},
            opset_version=17,
            dynamo=False,
        )
    path.write_bytes(f.getvalue())
    return m, path


def test_islands_io_and_weights(tmp_path: Path) -> None:
    _, src = _export(tmp_path / "b.onnx")
    model = onnx.load(str(src))
    rep = convert_model(model)
    check_types(model)
    types = tensor_types(model)
    seen = set()
    for n in model.graph.node:
        floats_in = [types[i] for i in n.input if i and types.get(i) in (FLOAT, FLOAT16)]
        floats_out = [types[o] for o in n.output if types.get(o) in (FLOAT, FLOAT16)]
        if n.op_type in DEFAULT_FP32_OPS:
            seen.add(n.op_type)
            assert set(floats_in) <= {FLOAT} and set(floats_out) <= {FLOAT}, n.op_type
        elif n.op_type in ("MatMul", "Gemm", "Tanh"):
            assert set(floats_in) == {FLOAT16} and set(floats_out) == {FLOAT16}, n.op_type
    assert {"LayerNormalization", "Where", "Softmax", "Pow", "ReduceMean", "Sqrt"} <= seen
    assert set(rep.islands) == seen
    assert rep.fp16_nodes > rep.fp32_nodes > 0 and rep.weights_fp16 >= 2
    # graph io stays fp32
    assert all(i.type.tensor_type.elem_type in (FLOAT, 7) for i in model.graph.input)
    assert all(o.type.tensor_type.elem_type == FLOAT for o in model.graph.output)
    # the mask constant of the Where island is still finfo(fp32).min, not -inf
    where = next(n for n in model.graph.node if n.op_type == "Where")
    const = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant"}
    vals = [onnx.numpy_helper.to_array(const[i].attribute[0].t) for i in where.input if i in const]
    assert vals and all(np.isfinite(v).all() for v in vals)
    # the linear weights are fp16 now, the LayerNorm's fp32
    inits = {t.name: t.data_type for t in model.graph.initializer}
    assert FLOAT16 in inits.values() and FLOAT in inits.values()


def test_fp16_runs_and_matches_fp32(tmp_path: Path) -> None:
    _, src = _export(tmp_path / "b.onnx")
    dst = tmp_path / "b16.onnx"
    rep = apply_precision(src, dst, ComponentSpec("onnxruntime-cuda", "fp16"))
    assert rep is not None and rep["fp16_nodes"] > 0
    x = np.random.default_rng(0).standard_normal((3, 9, 32)).astype(np.float32)
    mask = np.ones((3, 9), np.int64)
    mask[1, :4] = 0
    mask[2, :8] = 0  # nearly fully masked row: must stay finite
    errs = compare_outputs(src, dst, {"x": x, "mask": mask})
    assert set(errs) == {"y", "rms"}
    assert all(0 < e < 5e-3 for e in errs.values()), errs
    sess = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    y, rms = sess.run(None, {"x": x, "mask": mask})
    assert y.dtype == np.float32 and np.isfinite(y).all() and np.isfinite(rms).all()


def test_extra_fp32_nodes_and_op_types(tmp_path: Path) -> None:
    _, src = _export(tmp_path / "b.onnx")
    model = onnx.load(str(src))
    first_mm = next(n.name for n in model.graph.node if n.op_type == "MatMul")
    rep = convert_file(src, tmp_path / "c.onnx", fp32_nodes={first_mm}, fp32_ops=DEFAULT_FP32_OPS | {"Tanh"})
    assert rep.islands.get("MatMul") == 1 and rep.islands.get("Tanh") == 1
    out = onnx.load(str(tmp_path / "c.onnx"))
    types = tensor_types(out)
    mm = next(n for n in out.graph.node if n.name == first_mm)
    assert {types[i] for i in mm.input} == {FLOAT}


class _MaskAndTime(torch.nn.Module):
    """w2v-BERT's additive mask (1 - mask) * finfo(fp32).min and a DiT-style sin/cos(1000 t) timestep
    embedding: the two patterns that break a naive fp16 conversion (NaN from 0 * -inf; ~0.3 rad phase
    error once t is rounded to fp16)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)
        self.register_buffer("freqs", torch.exp(-torch.arange(8) * 0.5))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        add = (1.0 - mask[:, None, :].float()) * torch.finfo(torch.float32).min
        s = torch.softmax(self.lin(x) @ x.transpose(1, 2) / 4 + add, -1)
        arg = 1000 * t[:, None] * self.freqs[None]
        temb = torch.cat([torch.sin(arg), torch.cos(arg)], -1)
        return s @ x + temb[:, None, :]


def test_mask_constant_and_timestep_embedding_survive(tmp_path: Path) -> None:
    torch.manual_seed(1)
    m = _MaskAndTime().eval()
    x, t = torch.randn(2, 6, 16), torch.rand(2)
    mask = torch.ones(2, 6, dtype=torch.int64)
    mask[1, :2] = 0
    f = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(
            m,
            (x, mask, t),
            f,
            input_names=["x", "mask", "t"],
            output_names=["y"],
            dynamic_axes={"x": {0: "b", 1: "n"}, "mask": {0: "b", 1: "n"}, "t": {0: "b"}},
            opset_version=17,
            dynamo=False,
        )
    src = tmp_path / "mt.onnx"
    src.write_bytes(f.getvalue())
    dst = tmp_path / "mt16.onnx"
    rep = convert_file(src, dst)
    assert rep.weights_clipped >= 1  # the finfo.min constant became -65504, not -inf
    model = onnx.load(str(dst))
    types = tensor_types(model)
    for n in model.graph.node:
        if n.op_type in ("Sin", "Cos"):  # the argument path stays fp32
            assert {types[i] for i in n.input} == {FLOAT}
    feeds = {"x": x.numpy(), "mask": mask.numpy(), "t": t.numpy()}
    errs = compare_outputs(src, dst, feeds)
    assert errs["y"] < 5e-3, errs
