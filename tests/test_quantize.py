"""Weight-only quantization (MatMulNBits int8/int4, dynamic int8) of ONNX graphs: the packing matches
ONNX Runtime's kernel, graphs stay valid, errors vs fp32 are bounded; on the parity checkpoint's GPT
trunk the int8 logits stay close to fp32 and give the same greedy (argmax) codes."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fasttts_cli.build.quantize import (  # noqa: E402
    QuantConfig,
    apply_precision,
    compare_outputs,
    count_ops,
    quantize_file,
)
from fasttts_cli.build.quantize_blocks import QuantizeError, dequantize_blocks, quantize_blocks  # noqa: E402
from fasttts_cli.spec.presets import ComponentSpec, load_preset  # noqa: E402

K, N, M = 200, 96, 64  # K deliberately not a multiple of the block sizes


def _nbits_graph(p, accuracy_level: int) -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", p.k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "t", p.n])
    inits = [numpy_helper.from_array(p.blob, "B"), numpy_helper.from_array(p.scales, "S")]
    if p.zero_points is not None:
        inits.append(numpy_helper.from_array(p.zero_points, "Z"))
    node = helper.make_node(
        "MatMulNBits",
        ["x", *[t.name for t in inits]],
        ["y"],
        domain="com.microsoft",
        K=p.k,
        N=p.n,
        bits=p.bits,
        block_size=p.block_size,
        accuracy_level=accuracy_level,
    )
    model = helper.make_model(
        helper.make_graph([node], "g", [x], [y], inits),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.mark.parametrize(
    ("bits", "block", "sym", "w_err"),
    [(8, 128, False, 0.01), (8, 16, True, 0.01), (4, 32, False, 0.12), (4, 64, True, 0.15)],
)
def test_packing_matches_onnxruntime_kernel(bits: int, block: int, sym: bool, w_err: float) -> None:
    rng = np.random.default_rng(bits * 100 + block)
    w = rng.standard_normal((K, N)).astype(np.float32)
    p = quantize_blocks(w, bits, block, symmetric=sym)
    assert p.blob.shape == (N, -(-K // block), block * bits // 8) and p.blob.dtype == np.uint8
    assert (p.zero_points is None) == sym
    wd = dequantize_blocks(p)
    # quantization error is that of round-to-nearest with (max-min)/(2^bits-1) steps: bounded, nonzero
    err = np.linalg.norm(wd - w) / np.linalg.norm(w)
    assert 0 < err < w_err
    assert np.abs(wd - w).max() <= np.abs(w).max() / ((1 << (bits - 1)) - 1)
    # accuracy_level 1 = fp32 compute: ORT must compute exactly x @ dequantized(W)
    sess = ort.InferenceSession(_nbits_graph(p, 1), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((2, 5, K)).astype(np.float32)
    y = sess.run(None, {"x": x})[0]
    ref = x.astype(np.float64) @ wd.astype(np.float64)
    assert np.abs(y - ref).max() / np.abs(ref).max() < 1e-5


def test_bad_block_size_and_bits() -> None:
    w = np.ones((32, 8), np.float32)
    with pytest.raises(QuantizeError, match="power of two"):
        quantize_blocks(w, 8, 48, symmetric=False)
    with pytest.raises(QuantizeError, match="4 or 8"):
        quantize_blocks(w, 2, 32, symmetric=False)


def _mlp(path: Path, rng: np.random.Generator) -> Path:
    """x (b,t,K) -> MatMul W1 + b1 -> Relu -> MatMul W2 -> y; plus a MatMul of two activations (x x^T),
    which has no constant weight and must stay float."""
    w1 = numpy_helper.from_array((rng.standard_normal((K, M)) / np.sqrt(K)).astype(np.float32), "W1")
    b1 = numpy_helper.from_array(rng.standard_normal(M).astype(np.float32), "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((M, N)) / np.sqrt(M)).astype(np.float32), "W2")
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h0"], name="mm1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "W2"], ["y"], name="mm2"),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["x", "xt"], ["gram"], name="mm_act"),
    ]
    g = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", K])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "t", N]),
            helper.make_tensor_value_info("gram", TensorProto.FLOAT, ["b", "t", "t"]),
        ],
        [w1, b1, w2],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(
    ("precision", "options", "tol"),
    [
        ("int8", {"block_size": 128, "accuracy_level": 4}, 0.03),
        ("int8", {"block_size": 32, "accuracy_level": 1, "symmetric": True}, 0.02),
        ("int4", {"block_size": 32, "accuracy_level": 4}, 0.15),
        ("int4", {"block_size": 16, "accuracy_level": 0}, 0.12),
    ],
)
def test_matmulnbits_on_small_graph(tmp_path: Path, precision: str, options: dict, tol: float) -> None:
    rng = np.random.default_rng(1)
    src = _mlp(tmp_path / "mlp.onnx", rng)
    dst = tmp_path / "mlp_q.onnx"
    rep = apply_precision(src, dst, ComponentSpec("onnxruntime-cpu", precision, options))
    assert rep is not None and sorted(rep["quantized"]) == ["W1", "W2"]
    assert any("mm_act" in s for s in rep["skipped"])
    # K=200 pads to whole blocks, so the ratio is below the ideal 4x / 8x
    assert rep["bytes_after"] < rep["bytes_before"] / (2.2 if precision == "int8" else 4)
    model = onnx.load(str(dst))
    onnx.checker.check_model(model)
    ops = count_ops(model)
    assert ops["MatMulNBits"] == 2 and ops["MatMul"] == 1
    assert "Add" not in ops  # b1 went into the first MatMulNBits as its bias input
    bits = 8 if precision == "int8" else 4
    for n in model.graph.node:
        if n.op_type == "MatMulNBits":
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            assert attrs["bits"] == bits and attrs["block_size"] == options["block_size"]
            assert attrs["accuracy_level"] == options["accuracy_level"]
            assert len(n.input) == (6 if n.input[0] == "x" else 3 + (not options.get("symmetric", False)))
            if n.input[0] == "x":
                assert n.input[5] == "b1" and n.output[0] == "h1"
    assert {t.name for t in model.graph.initializer}.isdisjoint({"W1", "W2"})  # float copies dropped
    x = rng.standard_normal((3, 7, K)).astype(np.float32)
    errs = compare_outputs(src, dst, {"x": x})
    assert errs["gram"] == 0.0  # untouched
    assert 0 < errs["y"] < tol, errs


def test_bias_stays_an_add_where_it_cannot_fold(tmp_path: Path) -> None:
    """The MatMul output read by a second node, or a bias that is not a vector of N floats: the Add
    stays, and the quantized graph still computes the same function as the float one."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((K, M)) / np.sqrt(K)).astype(np.float32), "W")
    v = numpy_helper.from_array((rng.standard_normal((K, M)) / np.sqrt(K)).astype(np.float32), "V")
    b = numpy_helper.from_array(rng.standard_normal(M).astype(np.float32), "b")
    b2d = numpy_helper.from_array(rng.standard_normal((1, M)).astype(np.float32), "b2d")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Mul", ["h", "hb"], ["y"]),  # h has two readers
        helper.make_node("MatMul", ["x", "V"], ["g"]),
        helper.make_node("Add", ["b2d", "g"], ["z"]),  # a 2-D bias
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", K])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", "t", M]) for n in ("y", "z")],
        [w, v, b, b2d],
    )
    src, dst = tmp_path / "g.onnx", tmp_path / "g_q.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    quantize_file(src, dst, QuantConfig(bits=8, accuracy_level=1))
    ops = count_ops(dst)
    assert ops["MatMulNBits"] == 2 and ops["Add"] == 2
    assert all(len(n.input) <= 4 for n in onnx.load(str(dst)).graph.node if n.op_type == "MatMulNBits")
    errs = compare_outputs(src, dst, {"x": rng.standard_normal((2, 5, K)).astype(np.float32)})
    assert 0 < errs["y"] < 0.03 and 0 < errs["z"] < 0.03, errs


def test_dynamic_int8(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    src = _mlp(tmp_path / "mlp.onnx", rng)
    dst = tmp_path / "mlp_dyn.onnx"
    rep = quantize_file(src, dst, QuantConfig(bits=8, method="dynamic"))
    assert rep.method == "dynamic" and rep.bytes_after < rep.bytes_before
    ops = count_ops(dst)
    assert ops.get("MatMulInteger", 0) == 2 and ops.get("MatMul", 0) == 1
    errs = compare_outputs(src, dst, {"x": rng.standard_normal((2, 5, K)).astype(np.float32)})
    assert 0 < errs["y"] < 0.05


def test_from_preset_and_fp32_passthrough(tmp_path: Path) -> None:
    cfg = QuantConfig.from_spec(load_preset("cpu-int4").components["gpt"])
    assert (cfg.bits, cfg.block_size, cfg.accuracy_level, cfg.method) == (4, 32, 4, "matmulnbits")
    assert apply_precision(tmp_path / "x.onnx", tmp_path / "y.onnx", ComponentSpec()) is None
    with pytest.raises(QuantizeError, match="int8 only"):
        QuantConfig.from_spec(ComponentSpec("onnxruntime-cpu", "int4", {"method": "dynamic"}))


def test_graph_without_weights_is_an_error(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    model = helper.make_model(
        helper.make_graph([helper.make_node("MatMul", ["x", "x"], ["y"])], "g", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    onnx.save(model, str(tmp_path / "a.onnx"))
    with pytest.raises(QuantizeError, match="no MatMul"):
        quantize_file(tmp_path / "a.onnx", tmp_path / "b.onnx", QuantConfig(bits=8))


# ------------------------------------------------------------------------------- parity GPT trunk


@pytest.fixture(scope="module", params=["classic", "inplace"])
def trunk_onnx(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """The parity checkpoint's trunk in both graph forms (decode.py's and decode_inplace.py's)."""
    torch = pytest.importorskip("torch")
    yaml = pytest.importorskip("yaml")
    from fasttts_cli.indextts2 import decode as dec
    from fasttts_cli.nets.unified_voice import TrunkGraph, load_unified_voice
    from tests.parity import checkpoint_for, load_cases

    cases = load_cases()
    if not cases:
        pytest.skip("no parity vectors")
    ckpt = checkpoint_for(cases[0].weight_seed)
    torch.set_num_threads(1)
    cfg = yaml.safe_load((ckpt / "config.yaml").read_text(encoding="utf-8"))
    uv = load_unified_voice(ckpt / "gpt.pth", cfg["gpt"])
    c = uv.cfg
    if request.param == "inplace":
        from fasttts_cli.build.export import export_graph, inplace_trunk_spec

        return export_graph(inplace_trunk_spec(uv), tmp_path_factory.mktemp("trunk-inplace"))
    out = tmp_path_factory.mktemp("trunk") / "gpt_trunk.onnx"
    past, present = dec.past_names(c.layers), dec.present_names(c.layers)
    axes = {dec.INPUTS_EMBEDS: {0: "batch", 1: "new"}, dec.ATTENTION_MASK: {0: "batch", 1: "total"}}
    axes.update({n: {0: "batch", 2: "past"} for n in past})
    axes.update({dec.LOGITS: {0: "batch"}, dec.HIDDEN: {0: "batch", 1: "new"}})
    axes.update({n: {0: "batch", 2: "total"} for n in present})
    ex = (
        torch.randn(1, 4, c.model_dim),
        torch.ones(1, 7, dtype=torch.int64),
        *[torch.randn(1, c.heads, 3, c.head_dim) for _ in past],
    )
    f = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(
            TrunkGraph(uv, kv_layout="per_layer", logits_for="last"),
            ex,
            f,
            input_names=[dec.INPUTS_EMBEDS, dec.ATTENTION_MASK, *past],
            output_names=[dec.LOGITS, dec.HIDDEN, *present],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    out.write_bytes(f.getvalue())
    return out


def _decoder(path: Path):
    """The runtime's decoder for either trunk form (decode_inplace.decoder_for)."""
    from fasttts_cli.backends.onnxruntime.session import OrtSession, SessionOptions
    from fasttts_cli.indextts2.decode import HostEmbeddings
    from fasttts_cli.indextts2.decode_inplace import decoder_for

    sess = OrtSession(path, SessionOptions(threads=1))
    layers = sum(1 for i in sess.inputs if i.name.startswith("past_key_"))
    heads = int(next(i for i in sess.inputs if i.name == "past_key_0").shape[1])
    return decoder_for(sess, HostEmbeddings.load(path.parent), layers=layers, heads=heads)


def _forced(path: Path, case) -> tuple[np.ndarray, np.ndarray]:
    return _decoder(path).forced(case["gpt_prefix_emb"][0], case["gpt_forced_codes"])


@pytest.mark.parity
@pytest.mark.slow
def test_parity_trunk_int8_int4(trunk_onnx: Path, parity_case) -> None:
    torch = pytest.importorskip("torch")
    yaml = pytest.importorskip("yaml")
    from fasttts_cli.indextts2 import decode as dec
    from fasttts_cli.nets.unified_voice import load_unified_voice
    from tests.parity import checkpoint_for, rel

    ckpt = checkpoint_for(parity_case.weight_seed)
    folder = trunk_onnx.parent
    if not (folder / dec.TABLE_FILES["mel_pos"]).exists():
        cfg = yaml.safe_load((ckpt / "config.yaml").read_text(encoding="utf-8"))
        uv = load_unified_voice(ckpt / "gpt.pth", cfg["gpt"])
        tabs = uv.host_tables()
        names = {"speed": "speed_emb"}
        for k, fname in dec.TABLE_FILES.items():
            np.save(folder / fname, tabs[names.get(k, k)].numpy())
    del torch
    ref = parity_case["gpt_gen_logits"]
    logits32, _ = _forced(trunk_onnx, parity_case)
    assert rel(logits32, ref) < 1e-4
    results = {}
    for prec, opts, tol in (
        ("int8", {"block_size": 128, "accuracy_level": 4}, 0.02),
        ("int4", {"block_size": 32, "accuracy_level": 4}, 0.15),
    ):
        q = folder / f"gpt_trunk_{prec}.onnx"
        rep = apply_precision(trunk_onnx, q, ComponentSpec("onnxruntime-cpu", prec, opts))
        assert rep is not None
        # every weight matmul of every block (c_attn, attn c_proj, c_fc, mlp c_proj) and the head
        layers = sum(1 for i in onnx.load(str(trunk_onnx)).graph.input if i.name.startswith("past_key_"))
        assert count_ops(q)["MatMulNBits"] == len(rep["quantized"]) == 4 * layers + 1
        logits, _ = _forced(q, parity_case)
        err = rel(logits, ref)
        agree = float(np.mean(logits.argmax(-1) == ref.argmax(-1)))
        results[prec] = (err, agree)
        assert err < tol, (prec, err)
    # int8: greedy choices equal to fp32 at every forced step, and free-running greedy codes equal
    assert results["int8"][1] == 1.0, results
    _check_greedy(trunk_onnx, folder / "gpt_trunk_int8.onnx", parity_case)
    print("parity trunk logits rel err / argmax agreement:", results)


def _check_greedy(fp32: Path, q: Path, case) -> None:
    """Greedy decoding of the quantized trunk vs fp32. A step can only flip when fp32's top-2 margin is
    below twice the quantized trunk's largest logit deviation at that step (random weights give such
    near ties now and then). Teacher-forced on fp32's greedy codes, every step clear of that bound has the
    same argmax; free-running, the codes are identical up to the first near tie."""
    a, b = _greedy(fp32, case), _greedy(q, case)
    la, _ = _forced_codes(fp32, case, a)
    lb, _ = _forced_codes(q, case, a)
    n = len(a)
    top2 = np.sort(la, axis=-1)[:n, -2:]
    margin = top2[:, 1] - top2[:, 0]
    bound = 2 * np.abs(lb - la)[:n].max(axis=-1)
    clear = margin > bound
    assert clear.mean() >= 0.5, "too many near ties for a meaningful comparison"
    np.testing.assert_array_equal(la[:n].argmax(-1)[clear], lb[:n].argmax(-1)[clear])
    first_tie = int(np.argmin(clear)) if not clear.all() else n
    assert a[:first_tie] == b[:first_tie], (a, b, first_tie)


def _forced_codes(path: Path, case, codes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return _decoder(path).forced(case["gpt_prefix_emb"][0], np.asarray(codes, dtype=np.int64))


def _greedy(path: Path, case) -> list[int]:
    from fasttts_cli.indextts2.sampling import SamplingParams

    d = _decoder(path)
    params = SamplingParams(do_sample=False, beams=1, repetition_penalty=1.0, max_tokens=40)
    out = d.generate_codes([case["gpt_prefix_emb"][0]], params, seeds=[0])[0]
    assert len(out.codes) > 0
    return [int(c) for c in out.codes]


def test_convert_engine_folder(tmp_path: Path) -> None:
    from fasttts_cli.build.quantize import convert_engine
    from fasttts_cli.errors import EngineMismatchError, UsageError
    from fasttts_cli.spec.engine_folder import (
        ComponentEntry,
        Manifest,
        check_preset_matches,
        read_manifest,
        write_manifest,
    )

    rng = np.random.default_rng(5)
    src = tmp_path / "fp32"
    src.mkdir()
    _mlp(src / "gpt_trunk.onnx", rng)
    _mlp(src / "bigvgan.onnx", rng)
    (src / "bpe.model").write_bytes(b"tokenizer")
    fp32 = load_preset("cpu-fp32")
    entries = {
        n: ComponentEntry(f"{n}.onnx", "onnxruntime-cpu", "fp32", {"x": ["b", "t", K]}, {"y": ["b", "t", N]})
        for n in ("gpt_trunk", "bigvgan")
    }
    write_manifest(
        src,
        Manifest(
            "indextts2", "2.0", "d" * 64, "cpu-fp32", fp32.build_keys(), entries, files={"bpe": "bpe.model"}
        ),
    )
    i8 = load_preset("cpu-int8")
    out = convert_engine(src, tmp_path / "int8", i8)
    m = read_manifest(out)
    assert m.preset == "cpu-int8" and m.preset_build_keys == i8.build_keys()
    assert m.components["gpt_trunk"].precision == "int8" and m.components["bigvgan"].precision == "fp32"
    assert count_ops(out / "gpt_trunk.onnx")["MatMulNBits"] == 2
    assert count_ops(out / "bigvgan.onnx").get("MatMulNBits", 0) == 0
    assert m.config["precision"]["gpt_trunk"]["bits"] == 8 and "bigvgan" not in m.config["precision"]
    assert (out / "bpe.model").read_bytes() == b"tokenizer"
    check_preset_matches(m, "cpu-int8", i8.build_keys(), out)
    with pytest.raises(EngineMismatchError, match="build-time keys"):
        check_preset_matches(m, "cpu-fp32", fp32.build_keys(), out)
    x = rng.standard_normal((2, 3, K)).astype(np.float32)
    assert compare_outputs(src / "bigvgan.onnx", out / "bigvgan.onnx", {"x": x})["y"] == 0.0
    with pytest.raises(UsageError, match="already exists"):
        convert_engine(src, out, i8)
    with pytest.raises(UsageError, match="not fp32"):
        convert_engine(out, tmp_path / "again", load_preset("cpu-int4"))
    with pytest.raises(UsageError, match="tensorrt"):
        convert_engine(src, tmp_path / "gpu", load_preset("fp16"))
    assert not (tmp_path / "gpu").exists() and not list(tmp_path.glob(".gpu.*"))  # no half-built folder
