"""fp16 ONNX graphs with fp32 islands, for strongly typed TensorRT builds and the ONNX Runtime CUDA EP.

Every node runs in fp16 except the islands: ops whose numerics break in half precision (softmax and
its masking `Where` with a finfo(fp32).min constant, which becomes -inf in fp16 and turns fully masked
rows into NaN; normalizations and the reductions/powers of hand-written norms; exp/log; resampling),
nodes named by the caller, and anything holding a subgraph. Tensors are cast where a value crosses
between an fp16 node and an fp32 one; float weights read only by fp16 nodes are stored in fp16 (values
clipped to the fp16 range), weights read by both kinds are kept twice. Graph inputs and outputs keep
their fp32 types (`keep_io_types`), so the runtime feeds the same arrays as for the fp32 engine.

The precision is thereby carried by the graph, which is what TensorRT's strongly typed networks (the
only mode in TensorRT 11) and ORT need; no builder precision flags are involved.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.errors import FastTTSError

FP16_MAX = 65504.0

# Ops kept in fp32 (the islands). Masks: Where/Softmax; norms: LayerNorm & co. plus what hand-written
# RMS/AdaRMS norms export to (Pow, ReduceMean, Sqrt, Reciprocal); exp/log/cumulative sums overflow or
# lose precision; Resize's float `scales` input must stay fp32; Range/RandomNormal* carry dtypes.
DEFAULT_FP32_OPS = frozenset(
    {
        "Softmax",
        "LogSoftmax",
        "Where",
        "LayerNormalization",
        "InstanceNormalization",
        "GroupNormalization",
        "BatchNormalization",
        "SimplifiedLayerNormalization",
        "SkipLayerNormalization",
        "ReduceMean",
        "ReduceSum",
        "ReduceSumSquare",
        "ReduceL2",
        "ReduceLogSumExp",
        "Pow",
        "Sqrt",
        "Reciprocal",
        "Exp",
        "Log",
        "Sin",
        "Cos",
        "CumSum",
        "Range",
        "Resize",
        "Upsample",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "TopK",
        "ArgMax",
        "ArgMin",
    }
)
# Nodes whose output dtype is fixed by an attribute or a constant value, not by their inputs: they are
# left alone (outputs keep their original type) and their consumers cast as needed.
_SOURCE_OPS = frozenset({"Cast", "Constant", "ConstantOfShape", "EyeLike", "CastLike"})
_SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan"})
# Ops whose *argument* needs fp32 resolution: sin(1000 t) of a timestep embedding is wrong by ~0.3 rad
# once t passed through fp16. The cheap ops computing such arguments are pulled into the island too
# (walking back from the op until something expensive, a graph input or a weight).
ARGUMENT_SENSITIVE_OPS = frozenset({"Sin", "Cos"})
_CHEAP_OPS = frozenset(
    {
        "Mul", "Add", "Sub", "Div", "Neg", "Unsqueeze", "Squeeze", "Reshape", "Concat", "Expand",
        "Gather", "Slice", "Transpose", "Identity", "Split", "Flatten", "Tile", "Cast",
    }
)  # fmt: skip

FLOAT, FLOAT16 = 1, 10  # onnx.TensorProto.FLOAT / FLOAT16


class Fp16Error(FastTTSError):
    """A graph could not be converted to fp16."""


@dataclass
class Fp16Report:
    fp16_nodes: int = 0
    fp32_nodes: int = 0
    casts_added: int = 0
    islands: dict[str, int] = field(default_factory=dict)  # op_type -> fp32 node count
    weights_fp16: int = 0
    weights_clipped: int = 0  # initializers with values outside the fp16 range

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _float_tensors(model: Any) -> set[str]:
    """Names of every float32 tensor in the graph (inputs, initializers, intermediate values)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=False)
    except Exception as e:  # inference errors come in several types
        raise Fp16Error(f"shape inference failed, cannot tell float tensors apart: {e}") from None
    g = inferred.graph
    out = {t.name for t in g.initializer if t.data_type == FLOAT}
    for vi in (*g.input, *g.value_info, *g.output):
        if vi.type.tensor_type.elem_type == FLOAT:
            out.add(vi.name)
    for n in g.node:  # Constant nodes are not always in value_info
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.t.data_type == FLOAT:
                    out.add(n.output[0])
    return out


def convert_model(
    model: Any,
    *,
    fp32_ops: frozenset[str] | set[str] = DEFAULT_FP32_OPS,
    fp32_nodes: set[str] | frozenset[str] = frozenset(),
    keep_io_types: bool = True,
) -> Fp16Report:
    """Convert an onnx.ModelProto to fp16 with fp32 islands, in place."""
    from onnx import helper, numpy_helper

    if not keep_io_types:
        raise Fp16Error("only keep_io_types=True is implemented (inputs/outputs stay fp32)")
    g = model.graph
    floats = _float_tensors(model)
    inits = {t.name: t for t in g.initializer}
    graph_inputs = {i.name for i in g.input}
    report = Fp16Report()

    def is_half(node: Any) -> bool:
        if node.op_type in _SOURCE_OPS:
            return False
        return not (
            node.op_type in fp32_ops
            or node.op_type in _SUBGRAPH_OPS
            or (node.name and node.name in fp32_nodes)
            or node.domain not in ("", "ai.onnx", "com.microsoft")
        )

    nodes = list(g.node)  # protobuf wrappers are not stable objects: index by position
    half = [is_half(n) for n in nodes]
    producer = {o: k for k, n in enumerate(nodes) for o in n.output}
    stack = [i for n in nodes if n.op_type in ARGUMENT_SENSITIVE_OPS for i in n.input]
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen or name not in producer:
            continue
        seen.add(name)
        k = producer[name]
        if nodes[k].op_type in _CHEAP_OPS:
            half[k] = False
            stack.extend(nodes[k].input)
    # dtype each float tensor will have after conversion: produced by an fp16 node -> fp16.
    now_half: set[str] = set()
    for n, h in zip(nodes, half, strict=True):
        if h:
            now_half.update(o for o in n.output if o in floats)

    consumers: dict[str, list[int]] = defaultdict(list)
    for k, n in enumerate(nodes):
        for i in n.input:
            consumers[i].append(k)

    # Weights: fp16 when only fp16 nodes read them, else keep fp32 and add an fp16 copy when needed.
    init_half: dict[str, str] = {}
    new_inits = []
    for name, t in inits.items():
        if name not in floats or t.data_type != FLOAT:
            continue
        users = consumers.get(name, [])
        want_half = [u for u in users if half[u]]
        if not want_half:
            continue
        arr = numpy_helper.to_array(t)
        if np.any(np.abs(arr) > FP16_MAX):
            report.weights_clipped += 1
        arr16 = np.clip(arr, -FP16_MAX, FP16_MAX).astype(np.float16)
        if len(want_half) == len(users) and name not in graph_inputs:
            t.CopyFrom(numpy_helper.from_array(arr16, name))
            init_half[name] = name
            now_half.add(name)
        else:
            init_half[name] = name + "_fp16"
            new_inits.append(numpy_helper.from_array(arr16, name + "_fp16"))
        report.weights_fp16 += 1
    g.initializer.extend(new_inits)

    # Float Constant nodes read by fp16 nodes: an fp16 copy clipped to the fp16 range, not a Cast (a
    # finfo(fp32).min mask constant would become -inf and 0 * -inf = NaN).
    for n in nodes:
        if n.op_type != "Constant" or n.output[0] not in floats:
            continue
        users = consumers.get(n.output[0], [])
        if not any(half[u] for u in users):
            continue
        attr = next((a for a in n.attribute if a.name == "value"), None)
        if attr is None or attr.t.data_type != FLOAT:
            continue
        arr = numpy_helper.to_array(attr.t)
        if np.any(np.abs(arr) > FP16_MAX):
            report.weights_clipped += 1
        copy = n.output[0] + "_fp16"
        g.initializer.append(
            numpy_helper.from_array(np.clip(arr, -FP16_MAX, FP16_MAX).astype(np.float16), copy)
        )
        init_half[n.output[0]] = copy

    casts: dict[tuple[str, int], str] = {}
    cast_nodes: list[Any] = []

    def cast(name: str, to: int) -> str:
        key = (name, to)
        if key not in casts:
            out = f"{name}_to_{'fp16' if to == FLOAT16 else 'fp32'}"
            cast_nodes.append(helper.make_node("Cast", [name], [out], name=out + "_cast", to=to))
            casts[key] = out
        return casts[key]

    new_nodes = []
    for n, want16 in zip(nodes, half, strict=True):
        if n.op_type in _SOURCE_OPS:
            report.fp32_nodes += n.op_type != "Constant"
            new_nodes.append(n)
            continue
        for idx, name in enumerate(n.input):
            if not name or name not in floats:
                continue
            if want16:
                if name in init_half:
                    n.input[idx] = init_half[name]
                elif name not in now_half:
                    n.input[idx] = cast(name, FLOAT16)
            elif name in now_half:
                n.input[idx] = cast(name, FLOAT)
        # the casts feeding this node must precede it
        new_nodes.extend(cast_nodes)
        cast_nodes.clear()
        new_nodes.append(n)
        if want16:
            report.fp16_nodes += 1
        else:
            report.fp32_nodes += 1
            report.islands[n.op_type] = report.islands.get(n.op_type, 0) + 1

    # Outputs produced in fp16 go back to fp32 under their own names.
    tail = []
    for out in g.output:
        if out.name in now_half:
            inner = out.name + "_fp16_out"
            for n in new_nodes:
                n.output[:] = [inner if o == out.name else o for o in n.output]
                n.input[:] = [inner if i == out.name else i for i in n.input]
            tail.append(helper.make_node("Cast", [inner], [out.name], name=out.name + "_cast_out", to=FLOAT))
    report.casts_added = len(casts) + len(tail)
    del g.node[:]
    g.node.extend(new_nodes + tail)
    # Stale value_info would pin fp32 types on tensors that are fp16 now.
    del g.value_info[:]
    return report


def convert_file(
    src: Path | str,
    dst: Path | str,
    *,
    fp32_ops: frozenset[str] | set[str] = DEFAULT_FP32_OPS,
    fp32_nodes: set[str] | frozenset[str] = frozenset(),
) -> Fp16Report:
    """Convert the ONNX file `src` into `dst` (may equal src); the result passes onnx's checker with
    strict type inference, else Fp16Error."""
    from fasttts_cli.build.onnx_io import load_model, save_model

    model = load_model(Path(src))
    report = convert_model(model, fp32_ops=fp32_ops, fp32_nodes=fp32_nodes)
    check_types(model)
    save_model(model, Path(dst))
    return report


def check_types(model: Any) -> None:
    """Strict type/shape inference over the whole graph: a dtype mismatch left by the conversion fails
    here rather than in a TensorRT build on the user's GPU."""
    import onnx

    if model.ByteSize() >= 2**31 - 1:
        return  # the in-memory checker cannot take a >2 GB protobuf; TensorRT/ORT check at load
    try:
        onnx.checker.check_model(model)
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except Exception as e:  # ValidationError / InferenceError
        raise Fp16Error(f"fp16 graph is invalid: {e}") from None


def tensor_types(model: Any) -> dict[str, int]:
    """Tensor name -> onnx elem type after inference (1 float32, 10 float16), for tests and logs."""
    import onnx

    g = onnx.shape_inference.infer_shapes(model).graph
    out = {t.name: t.data_type for t in g.initializer}
    for vi in (*g.input, *g.value_info, *g.output):
        out[vi.name] = vi.type.tensor_type.elem_type
    return out
