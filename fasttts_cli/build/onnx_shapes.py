"""Where each output dimension of an ONNX component comes from: input dimensions, or input values.

TensorRT resolves an output's shape from the input shapes when `set_input_shape` has been called; a
dimension computed from input *values* (the length regulator's `max(y_lens)` frames) reads -1 from
`IExecutionContext.get_tensor_shape` until the run, and the runtime must give TensorRT an
IOutputAllocator for that output (NvInferRuntime.h, IExecutionContext::setTensorAddress: "If
getTensorShape(name) reports a -1 for any dimension of an output after all input shapes have been set,
use setOutputAllocator()"). `check_tensorrt_outputs` flags every such dimension that a component does
not declare (`VALUE_DEPENDENT_OUTPUTS`), so a new graph cannot slip a data-dependent size past the
session; the fake TensorRT (tools/fakes/tensorrt.py) uses the same analysis to report -1 where the real
library would.

The analysis is ONNX Runtime's symbolic shape inference (sympy expressions over the input dim names);
a dimension it names after the op that made it is traced back: from a value-dependent op (Range,
NonZero, a Reshape/Expand/ConstantOfShape of a computed shape...) it depends on values, from any other
op (a ConvTranspose, whose symbolic rule is missing) it is derived from that op's inputs' dims.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Components whose outputs have value-dependent sizes: the TensorRT session gives these an output
# allocator (frames = max(ylens) / max(y_lens), the target frames given as inputs: the sizes the CFM
# then runs at).
VALUE_DEPENDENT_OUTPUTS: dict[str, frozenset[str]] = {
    "s2mel_content": frozenset({"cond"}),
    "length_regulator": frozenset({"y"}),
}

# ops whose output size can come from input values (an operand read as a shape, a count or an index)
VALUE_DEPENDENT_OPS = frozenset(
    {"Range", "NonZero", "Compress", "Unique", "ConstantOfShape", "Expand", "Reshape", "Tile", "Slice",
     "TopK", "Resize", "Pad", "OneHot", "Loop", "If", "Scan", "Upsample", "CenterCropPad"}
)  # fmt: skip

# operand positions that are read as shapes / sizes (TensorRT's shape-tensor positions)
SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "ConstantOfShape": (0,),
    "Tile": (1,),
    "Range": (0, 1, 2),
    "Slice": (1, 2, 3, 4),
    "Resize": (2, 3),
    "TopK": (1,),
    "Pad": (1,),
    "OneHot": (1,),
    "Unsqueeze": (1,),
    "Squeeze": (1,),
}
_INT_TYPES = {6, 7}  # TensorProto INT32, INT64
_GENERATED = re.compile(r"^([A-Za-z]+)_(\d+)_o(\d+)__d(\d+)$")  # symbolic_shape_infer's new dim names


@dataclass(frozen=True)
class Dim:
    """One output dimension: kind "const" (value int), "expr" (a sympy expression over input dim
    names, in `expr`), "derived" (from input dims, but only a run tells the number) or "value" (from
    input values; `expr` lists the inputs whose values it reads, comma-separated)."""

    kind: str
    value: int = 0
    expr: str = ""

    def to_json(self) -> list[Any]:
        return [self.kind, self.value, self.expr]

    @classmethod
    def from_json(cls, j: list[Any]) -> Dim:
        return cls(str(j[0]), int(j[1]), str(j[2]))


def _load(model: Any) -> Any:
    import onnx

    return onnx.load(str(model), load_external_data=False) if isinstance(model, str | Path) else model


def _dims(vi: Any) -> list[int | str]:
    return [d.dim_param if d.dim_param else int(d.dim_value) for d in vi.type.tensor_type.shape.dim]


_CACHE: dict[str, dict[str, list[Dim]]] = {}


def output_dims(model: Any) -> dict[str, list[Dim]]:
    """Every graph output's dims, classified (see Dim). The declared output shapes are ignored: the
    exporter names output axes as it is told (`dynamic_axes`), which says nothing about their source.
    Cached by graph content (the build's check and the fake TensorRT builder ask for the same graph)."""
    import hashlib

    loaded = _load(model)
    key = hashlib.sha256(loaded.SerializeToString()).hexdigest()
    if key not in _CACHE:
        _CACHE[key] = _output_dims(loaded)
    return _CACHE[key]


def _output_dims(loaded: Any) -> dict[str, list[Dim]]:
    import onnx
    import sympy
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    m = onnx.ModelProto()
    m.CopyFrom(loaded)
    for o in m.graph.output:
        o.type.tensor_type.ClearField("shape")
    inferred = SymbolicShapeInference.infer_shapes(m, auto_merge=True, guess_output_rank=False)
    g = inferred.graph
    initializers = {i.name for i in g.initializer}
    input_syms = {d for i in g.input if i.name not in initializers for d in _dims(i) if isinstance(d, str)}
    shapes = {vi.name: _dims(vi) for vi in [*g.input, *g.value_info, *g.output]}
    producer = {out: n for n in g.node for out in n.output}
    first_with: dict[str, str] = {}  # generated dim name -> the first tensor that has it
    for n in g.node:
        for out in n.output:
            for d in shapes.get(out, []):
                if isinstance(d, str):
                    first_with.setdefault(d, out)
    memo: dict[str, str] = {}
    graph_inputs = {i.name for i in g.input if i.name not in initializers}
    reads: dict[str, set[str]] = {}  # value-dependent dim -> the graph inputs whose values it reads

    def inputs_read(node: Any) -> set[str]:
        """Graph inputs whose values reach the operands `node` reads as sizes (a Reshape's shape, not
        its data)."""
        pos = SHAPE_OPERANDS.get(node.op_type, range(len(node.input)))
        seen, todo, found = (
            set(),
            [node.input[i] for i in pos if i < len(node.input) and node.input[i]],
            set(),
        )
        while todo:
            t = todo.pop()
            if t in seen or t in initializers:
                continue
            seen.add(t)
            if t in graph_inputs:
                found.add(t)
            up = producer.get(t)
            if up is not None and up.op_type not in ("Shape", "Size"):  # those read no values
                todo.extend(x for x in up.input if x)
        return found

    def source(sym: str, depth: int = 0) -> str:
        """'expr' | 'derived' | 'value' for a symbolic dim name."""
        if sym in memo:
            return memo[sym]
        memo[sym] = "value"  # a cycle (should not happen) counts as unknown
        try:
            free = {str(s) for s in sympy.sympify(sym.replace("?", "_q_")).free_symbols}
        except (sympy.SympifyError, TypeError, SyntaxError):
            free = {sym}
        if free <= input_syms:
            memo[sym] = "expr"
            return "expr"
        kinds = []
        for f in free - input_syms:
            tensor = first_with.get(f)
            node = producer.get(tensor) if tensor else None
            if node is None or node.op_type in VALUE_DEPENDENT_OPS or depth > 200:
                kinds.append("value")
                reads.setdefault(sym, set()).update(inputs_read(node) if node is not None else {"?"})
                continue
            upstream = [d for t in node.input if t and t not in initializers for d in shapes.get(t, [])]
            if any(d == f for d in upstream):
                kinds.append("derived")
                continue
            subs = [source(d, depth + 1) for d in upstream if isinstance(d, str)]
            kinds.append("value" if "value" in subs else "derived")
            for d in upstream:
                if isinstance(d, str) and d in reads:
                    reads.setdefault(sym, set()).update(reads[d])
        memo[sym] = "value" if "value" in kinds else "derived"
        return memo[sym]

    out: dict[str, list[Dim]] = {}
    for o in g.output:
        dims = []
        for d in _dims(o):
            if isinstance(d, int):
                dims.append(Dim("const", d))
            else:
                kind = source(d)
                detail = (
                    d if kind == "expr" else ",".join(sorted(reads.get(d, ()))) if kind == "value" else ""
                )
                dims.append(Dim(kind, 0, detail))
        out[o.name] = dims
    return out


def check_tensorrt_outputs(
    model: Any, component: str, declared: Mapping[str, Iterable[str]] | None = None
) -> list[str]:
    """Problems for a component meant for TensorRT: each output dimension that comes from input
    values, unless `declared[component]` names that output (VALUE_DEPENDENT_OUTPUTS by default). A
    declared output whose dims all come from input dims is a problem too (the declaration is stale)."""
    declared = VALUE_DEPENDENT_OUTPUTS if declared is None else declared
    allowed = set(declared.get(component, ()))
    problems = []
    model = _load(model)
    dims = output_dims(model)
    host = host_inputs(model)  # values TensorRT has on the host before the run: not -1

    def unknown(d: Dim) -> bool:
        reads = {n for n in d.expr.split(",") if n}
        return d.kind == "value" and not (reads and reads <= host)

    for name, ds in dims.items():
        bad = [i for i, d in enumerate(ds) if unknown(d)]
        if bad and name not in allowed:
            problems.append(
                f"{component}: output {name} axis {bad} has a size computed from input values; TensorRT "
                "reports -1 for it: derive it from an input dimension, or declare the output in "
                "onnx_shapes.VALUE_DEPENDENT_OUTPUTS (the session then allocates it at run time)"
            )
        if not bad and name in allowed:
            problems.append(f"{component}: output {name} is declared value-dependent but its size is not")
    for name in sorted(allowed - set(dims)):
        problems.append(f"{component}: declared value-dependent output {name} is not an output")
    return problems


def host_inputs(model: Any) -> set[str]:
    """Inputs TensorRT makes shape tensors (TensorLocation.HOST): integer, rank <= 1, a shape known at
    build time (NvInfer.h ITensor::isShapeTensor), and read as a shape by some op. A (batch,) lengths
    input has a dynamic shape, so it stays an execution tensor and its Range becomes a data-dependent
    size inside the network."""
    g = _load(model).graph
    initializers = {i.name for i in g.initializer}
    producer = {out: n for n in g.node for out in n.output}
    wanted: list[str] = []
    for n in g.node:
        for i in SHAPE_OPERANDS.get(n.op_type, ()):
            if i < len(n.input) and n.input[i]:
                wanted.append(n.input[i])
    reach: set[str] = set()
    while wanted:
        t = wanted.pop()
        if t in reach or t in initializers:
            continue
        reach.add(t)
        node = producer.get(t)
        if node is not None and node.op_type not in ("Shape", "Size"):  # those read no values
            wanted.extend(x for x in node.input if x)
    out = set()
    for i in g.input:
        if i.name in reach and i.type.tensor_type.elem_type in _INT_TYPES:
            dims = _dims(i)
            if len(dims) <= 1 and all(isinstance(d, int) and d > 0 for d in dims):
                out.add(i.name)
    return out
