"""Weight-only quantization of exported ONNX components for ONNX Runtime (CPU and CUDA providers).

Two methods, chosen by the preset's ComponentSpec (`precision` int8|int4, option `method`):

- `matmulnbits` (default): every MatMul whose right operand is a constant 2-D float weight (K, N) becomes a
  `com.microsoft.MatMulNBits` node: weights stored in 8 or 4 bits per block of `block_size` values along
  K, one fp32 scale (and, asymmetric, one zero point) per block, activations kept in float. The kernel's
  `accuracy_level` is the minimum compute type for the activations (0 unset, 1 fp32, 2 fp16, 3 bf16,
  4 int8); on the CPU provider 8-bit blocks are only fast with level 4 (with the default level they run
  slower than fp32). We pack the blocks ourselves (plain numpy round-to-nearest, the layout of the
  contrib op's schema) so the build needs no quantizer package beyond onnx; tests check the packing
  against ONNX Runtime's kernel with fp32 compute.
- `dynamic`: onnxruntime.quantization.quantize_dynamic, int8 weights with per-tensor (or per-channel)
  scales and activations quantized at run time, one scale per call (DynamicQuantizeMatMul). On CPUs
  with AMX or VNNI its u8 x s8 GEMM runs 4-5x faster than fp32 once a call has a few dozen rows
  (w2v-BERT, the conditioners, the DiT), but a single row is slower than MatMulNBits, and the shared
  activation scale ties together the rows of a call, so the GPT keeps MatMulNBits (per-row blocks:
  a line's codes never depend on its batch-mates). Per-channel weight scales were both faster and
  closer than per-tensor ones on w2v-BERT (630 against 799 ms, 3.6% against 4.9% error).

The GPT head (a MatMul after the exporter folds nn.Linear's transpose) is quantized with the trunk, so
the measured ms/token includes it. BigVGAN is never passed here (gpu_stack.check_preset refuses integer
precisions for it); the DiT only with the dynamic method.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.build.onnx_io import (
    EXTERNAL_DATA_BYTES,
    load_model,
    save_model,
    staged_folder,
    weight_bytes,
)
from fasttts_cli.build.quantize_blocks import QuantizeError, quantize_blocks
from fasttts_cli.build.quiet import quiet_native_output
from fasttts_cli.spec import registry
from fasttts_cli.spec.presets import INTEGER_PRECISIONS, ComponentSpec

MS_DOMAIN = "com.microsoft"

# Defaults when a preset leaves an option out (acceleration.md §4.3: block 128 for 8 bits, 32 for 4).
DEFAULT_BLOCK = {8: 128, 4: 32}
DEFAULT_ACCURACY_LEVEL = 4


@dataclass(frozen=True)
class QuantConfig:
    bits: int  # 8 or 4
    method: str = "matmulnbits"  # matmulnbits | dynamic
    block_size: int = 128
    accuracy_level: int = DEFAULT_ACCURACY_LEVEL
    symmetric: bool = False
    per_channel: bool = False  # dynamic only
    min_k: int = 16  # MatMuls with a shorter reduction axis stay float (nothing to gain)

    @staticmethod
    def from_spec(spec: ComponentSpec) -> QuantConfig:
        bits = {"int8": 8, "int4": 4}.get(spec.precision)
        if bits is None:
            raise QuantizeError(f"precision {spec.precision!r} is not a weight-only integer precision")
        o = spec.options
        method = str(o.get("method", "matmulnbits"))
        if method == "dynamic" and bits != 8:
            raise QuantizeError("dynamic quantization is int8 only")
        return QuantConfig(
            bits=bits,
            method=method,
            block_size=int(o.get("block_size", DEFAULT_BLOCK[bits])),
            accuracy_level=int(o.get("accuracy_level", DEFAULT_ACCURACY_LEVEL)),
            symmetric=bool(o.get("symmetric", False)),
            per_channel=bool(o.get("per_channel", False)),
        )


@dataclass
class QuantReport:
    method: str
    bits: int
    block_size: int | None
    accuracy_level: int | None
    quantized: list[str] = field(default_factory=list)  # weight initializer names
    skipped: list[str] = field(default_factory=list)  # MatMul nodes left in float, with the reason
    per_channel: bool | None = None  # dynamic only
    bytes_before: int = 0
    bytes_after: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


# ------------------------------------------------------------------------------------------ graph


def _ensure_ms_opset(model: Any) -> None:
    import onnx

    if not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(MS_DOMAIN, 1))


def quantize_matmul_nbits(model: Any, cfg: QuantConfig) -> QuantReport:
    """Rewrite `model` (an onnx.ModelProto, in place): constant-weight MatMuls -> MatMulNBits."""
    from onnx import helper, numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    report = QuantReport("matmulnbits", cfg.bits, cfg.block_size, cfg.accuracy_level)
    packed: dict[str, list[str]] = {}  # weight name -> names of its packed inputs (shared weights)
    biases = _bias_adds(g, inits)
    folded: set[int] = set()  # id() of Add nodes whose bias went into a MatMulNBits
    new_nodes = []
    for node in g.node:
        if id(node) in folded:
            continue
        w = inits.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
        if w is None:
            if node.op_type == "MatMul":
                report.skipped.append(f"{node.name or node.output[0]}: right operand is not a constant")
            new_nodes.append(node)
            continue
        arr = numpy_helper.to_array(w)
        if arr.ndim != 2 or arr.dtype != np.float32:
            report.skipped.append(f"{node.name or node.output[0]}: weight {arr.dtype} {arr.shape}")
            new_nodes.append(node)
            continue
        if arr.shape[0] < cfg.min_k:
            report.skipped.append(f"{node.name or node.output[0]}: K={arr.shape[0]} < {cfg.min_k}")
            new_nodes.append(node)
            continue
        if w.name not in packed:
            p = quantize_blocks(arr, cfg.bits, cfg.block_size, symmetric=cfg.symmetric)
            base = f"{w.name}_q{cfg.bits}"
            names = [base, base + "_scales"]
            g.initializer.extend(
                [numpy_helper.from_array(p.blob, names[0]), numpy_helper.from_array(p.scales, names[1])]
            )
            if p.zero_points is not None:
                names.append(base + "_zp")
                g.initializer.append(numpy_helper.from_array(p.zero_points, names[2]))
            packed[w.name] = names
            report.quantized.append(w.name)
            report.bytes_before += arr.nbytes
            report.bytes_after += (
                p.blob.nbytes + p.scales.nbytes + (p.zero_points.nbytes if p.zero_points is not None else 0)
            )
        k, n = arr.shape
        inputs, outputs = [node.input[0], *packed[w.name]], list(node.output)
        add = biases.get(node.output[0])
        if add is not None and _bias_len(add[1], inits) == n:
            # the op's optional bias (input 5) saves the separate Add node and its pass over the output
            inputs = [*inputs, *[""] * (5 - len(inputs)), add[1]]  # zero points, g_idx may be absent
            outputs = list(add[0].output)
            folded.add(id(add[0]))
        new_nodes.append(
            helper.make_node(
                "MatMulNBits",
                inputs,
                outputs,
                name=(node.name or node.output[0]) + "_MatMulNBits",
                domain=MS_DOMAIN,
                K=int(k),
                N=int(n),
                bits=cfg.bits,
                block_size=cfg.block_size,
                accuracy_level=cfg.accuracy_level,
            )
        )
    del g.node[:]
    g.node.extend(new_nodes)
    # Drop float weights nothing reads any more.
    used = {i for nd in g.node for i in nd.input} | {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    _ensure_ms_opset(model)
    return report


def _bias_adds(g: Any, inits: Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    """MatMul output name -> (its only consumer, an Add of a constant vector; that vector's name)."""
    consumers: dict[str, list[Any]] = {}
    for nd in g.node:
        for i in nd.input:
            consumers.setdefault(i, []).append(nd)
    graph_outputs = {o.name for o in g.output}
    out: dict[str, tuple[Any, str]] = {}
    for nd in g.node:
        if nd.op_type != "MatMul" or nd.output[0] in graph_outputs:
            continue
        users = consumers.get(nd.output[0], [])
        if len(users) != 1 or users[0].op_type != "Add" or len(users[0].input) != 2:
            continue
        add = users[0]
        other = add.input[1] if add.input[0] == nd.output[0] else add.input[0]
        if other in inits:
            out[nd.output[0]] = (add, other)
    return out


def _bias_len(name: str, inits: Mapping[str, Any]) -> int:
    """Length of a 1-D float32 initializer (-1 for anything else: not a bias MatMulNBits can take)."""
    t = inits[name]
    from onnx import TensorProto

    return int(t.dims[0]) if len(t.dims) == 1 and t.data_type == TensorProto.FLOAT else -1


def quantize_file(src: Path | str, dst: Path | str, cfg: QuantConfig) -> QuantReport:
    """Quantize the ONNX file `src` into `dst` (may equal src); returns what was done."""
    src, dst = Path(src), Path(dst)
    if cfg.method == "matmulnbits":
        model = load_model(src)
        report = quantize_matmul_nbits(model, cfg)
        if not report.quantized:
            raise QuantizeError(f"{src.name}: no MatMul with a constant float weight to quantize")
        import onnx

        try:
            if model.ByteSize() < 2**31 - 1:  # the checker cannot take a protobuf past 2 GB
                onnx.checker.check_model(model)
        except onnx.checker.ValidationError as e:
            raise QuantizeError(f"{src.name}: quantized graph is invalid: {e}") from None
        save_model(model, dst)
        return report
    if cfg.method == "dynamic":
        return _quantize_dynamic(src, dst, cfg)
    raise QuantizeError(f"unknown quantization method {cfg.method!r} (allowed: matmulnbits, dynamic)")


def _quantize_dynamic(src: Path, dst: Path, cfg: QuantConfig) -> QuantReport:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    before = weight_bytes(src)
    with tempfile.TemporaryDirectory(dir=dst.parent) as tmp:
        out = Path(tmp) / dst.name
        large = before > EXTERNAL_DATA_BYTES
        try:
            with quiet_native_output(f"the dynamic int8 quantization of {src.name}"):
                quantize_dynamic(
                    str(src),
                    str(out),
                    weight_type=QuantType.QInt8,
                    per_channel=cfg.per_channel,
                    # 7-bit weights: on x86 CPUs without VNNI (AVX2 only: most laptops, this CI's AMD
                    # EPYC) ONNX Runtime's u8s8 kernel sums pairs in int16 and saturates with 8-bit
                    # weights; the tiny DiT's mel moved 4.2% of its range instead of 0.14%. An engine may
                    # run on another CPU than the one that built it, so always.
                    reduce_range=True,
                    op_types_to_quantize=["MatMul"],
                    use_external_data_format=large,
                    extra_options={"MatMulConstBOnly": True},
                )
        except Exception as e:  # the quantizer raises many types
            raise QuantizeError(f"{src.name}: dynamic quantization failed: {e}") from None
        model = load_model(out)
        names = sorted(
            t.name for t in model.graph.initializer if t.data_type in (3,) and t.name.endswith("_quantized")
        )
        save_model(model, dst)
    rep = QuantReport("dynamic", 8, None, None, quantized=names, per_channel=cfg.per_channel)
    rep.bytes_before, rep.bytes_after = before, weight_bytes(dst)
    return rep


# ------------------------------------------------------------------------------------------ entry points


def apply_precision(src: Path | str, dst: Path | str, spec: ComponentSpec) -> dict[str, Any] | None:
    """What the exporter calls per exported ONNX file: transform `src` into `dst` as the component's
    ComponentSpec asks (int8/int4 -> quantize here; fp16 -> fp16.convert_file with fp32 islands).
    Returns a JSON-able report for the manifest/log, or None when the file stays fp32 (dst untouched)."""
    if spec.precision in INTEGER_PRECISIONS:
        return quantize_file(src, dst, QuantConfig.from_spec(spec)).to_json()
    if spec.precision == "fp16":
        from fasttts_cli.build.fp16 import convert_file

        return convert_file(src, dst).to_json()
    if spec.precision == "fp32":
        return None
    raise QuantizeError(
        f"precision {spec.precision!r} is not applied to ONNX files (allowed here: fp32, fp16, int8, int4)"
    )


def count_ops(path_or_model: Path | str | Any) -> dict[str, int]:
    """op_type -> count; handy for tests and build logs."""
    import onnx

    m = (
        onnx.load(str(path_or_model), load_external_data=False)
        if isinstance(path_or_model, str | Path)
        else path_or_model
    )
    out: dict[str, int] = {}
    for n in m.graph.node:
        out[n.op_type] = out.get(n.op_type, 0) + 1
    return out


def compare_outputs(
    ref_path: Path | str,
    test_path: Path | str,
    feeds: Mapping[str, np.ndarray],
    *,
    threads: int | None = 1,
) -> dict[str, float]:
    """Relative error ||a - b|| / ||b|| (float64) of every float output of `test_path` vs `ref_path`."""
    import onnxruntime as ort

    def run(p: Path | str) -> dict[str, np.ndarray]:
        so = ort.SessionOptions()
        if threads:
            so.intra_op_num_threads = threads
        s = ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in s.get_outputs()]
        return dict(zip(names, s.run(names, dict(feeds)), strict=True))

    ref, got = run(ref_path), run(test_path)
    out = {}
    for k, b in ref.items():
        if not np.issubdtype(b.dtype, np.floating):
            continue
        a64, b64 = np.asarray(got[k], np.float64), np.asarray(b, np.float64)
        nb = np.linalg.norm(b64)
        out[k] = float(np.linalg.norm(a64 - b64) / (nb if nb > 0 else 1.0))
    return out


# ------------------------------------------------------------------------------------------ engines

# Exported graph -> the preset component it belongs to (export.py's GraphSpec.group).
GRAPH_GROUPS = {
    "w2v_bert": "w2v_bert",
    "codec_quantize": "codec",
    "codec_vq2emb": "codec",
    "codec_decode": "codec",  # IndexTTS-2.5
    "campplus": "campplus",
    "speaker_conditioner": "conditioners",
    "emotion_conditioner": "conditioners",
    "gpt_trunk": "gpt",
    "s2mel_content": "s2mel",
    "length_regulator": "s2mel",
    "dit_cfg_step": "dit",
    "bigvgan": "vocoder",
}


def convert_engine(src: Path | str, dst: Path | str, preset: Any, *, overwrite: bool = False) -> Path:
    """Derive an ONNX Runtime engine for `preset` (cpu-int8, cpu-int4, an onnxruntime-cuda fp16 preset)
    from an fp32 engine folder: every component is transformed as the preset's ComponentSpec asks
    (apply_precision), the rest copied; the manifest records the new preset, its build keys, the
    per-component precision and file digests, and what each transformation did. Built in a temporary
    folder and renamed when complete."""
    import shutil

    from fasttts_cli.errors import UsageError
    from fasttts_cli.spec.engine_folder import component_sha256, read_manifest, write_manifest

    src, dst = Path(src), Path(dst)
    if dst.exists() and not overwrite:
        raise UsageError(f"--out {dst}: already exists", hint="choose another folder or pass --overwrite")
    m = read_manifest(src)
    if any(c.precision != "fp32" for c in m.components.values()):
        raise UsageError(f"{src}: engine is not fp32 (preset {m.preset}); convert from the fp32 engine")
    with staged_folder(dst) as tmp:
        specs = {}
        for name in m.components:
            group = GRAPH_GROUPS.get(name)
            if group is None:
                raise QuantizeError(f"{src}: unknown component {name!r} (known: {', '.join(GRAPH_GROUPS)})")
            specs[name] = preset.components.get(group, ComponentSpec())
        transformed = {
            f
            for n, e in m.components.items()
            if specs[n].precision != "fp32"
            for f in (e.file, e.file + ".data")
        }
        for f in src.iterdir():
            if f.is_file() and f.name != "manifest.json" and f.name not in transformed:
                shutil.copyfile(f, tmp / f.name)
        comps = {}
        reports: dict[str, Any] = {}
        for name, entry in m.components.items():
            spec, group = specs[name], GRAPH_GROUPS[name]
            if spec.backend not in registry.of_runtime(registry.ONNXRUNTIME):
                raise UsageError(
                    f"--preset {preset.name}: component {group} wants backend {spec.backend!r}; "
                    "convert_engine makes ONNX Runtime engines (TensorRT plans: tensorrt_build)"
                )
            rep = apply_precision(src / entry.file, tmp / entry.file, spec)
            if rep is not None:
                reports[name] = rep
            comps[name] = replace(
                entry,
                backend=spec.backend,
                precision=spec.precision,
                sha256=component_sha256(tmp / entry.file),
            )
        config = dict(m.config)
        config["precision"] = reports
        write_manifest(
            tmp,
            replace(
                m, preset=preset.name, preset_build_keys=preset.build_keys(), components=comps, config=config
            ),
        )
    return dst
