"""ORT CUDA-EP session with IO binding (KV cache kept as device OrtValues), exercised on the CPU provider
(`device="cpu"`) so the binding logic is tested without a GPU; the CUDA run is marked `gpu`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fasttts_cli.backends.onnxruntime.cuda_session import CudaOrtSession, DeviceTensor  # noqa: E402
from fasttts_cli.backends.onnxruntime.session import OrtSession, SessionOptions  # noqa: E402
from fasttts_cli.indextts2 import decode as dec  # noqa: E402
from fasttts_cli.indextts2.sampling import SamplingParams  # noqa: E402

D, V, H = 8, 8194, 2  # model dim, mel vocab (the sampler expects 8194), heads (head_dim 4)


def _toy_trunk(path: Path) -> Path:
    """A 1-layer stand-in for the exported trunk with the same io names: present = concat(past, new
    keys/values), hidden = x + mean over the cache of the values, logits = hidden[:, -1] @ W."""
    rng = np.random.default_rng(0)
    wk = numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32), "Wk")
    wo = numpy_helper.from_array(rng.standard_normal((D, V)).astype(np.float32), "Wo")
    shape = numpy_helper.from_array(np.array([0, 0, H, D // H], np.int64), "shape")
    axes1 = numpy_helper.from_array(np.array([1], np.int64), "ax1")
    nodes = [
        helper.make_node("MatMul", [dec.INPUTS_EMBEDS, "Wk"], ["k_lin"]),
        helper.make_node("Reshape", ["k_lin", "shape"], ["k4"]),
        helper.make_node("Transpose", ["k4"], ["k_new"], perm=[0, 2, 1, 3]),
        helper.make_node("Tanh", ["k_new"], ["v_new"]),
        helper.make_node("Concat", ["past_key_0", "k_new"], ["present_key_0"], axis=2),
        helper.make_node("Concat", ["past_value_0", "v_new"], ["present_value_0"], axis=2),
        helper.make_node("ReduceMean", ["present_value_0"], ["vm"], axes=[2], keepdims=0),  # (B,H,Dh)
        helper.make_node("Flatten", ["vm"], ["vflat"], axis=1),  # (B, D)
        helper.make_node("Unsqueeze", ["vflat", "ax1"], ["v3"]),
        helper.make_node("Add", [dec.INPUTS_EMBEDS, "v3"], [dec.HIDDEN]),
        helper.make_node("Gather", [dec.HIDDEN, "last"], ["h_last"], axis=1),
        helper.make_node("MatMul", ["h_last", "Wo"], ["lg"]),
        helper.make_node("Unsqueeze", ["lg", "ax1"], [dec.LOGITS]),
        helper.make_node("Cast", [dec.ATTENTION_MASK], ["mask_f"], to=TensorProto.FLOAT),  # keep mask used
    ]
    last = numpy_helper.from_array(np.array(-1, np.int64), "last")
    kv = ["batch", H, "past", D // H]
    g = helper.make_graph(
        nodes,
        "toy_trunk",
        [
            helper.make_tensor_value_info(dec.INPUTS_EMBEDS, TensorProto.FLOAT, ["batch", "new", D]),
            helper.make_tensor_value_info(dec.ATTENTION_MASK, TensorProto.INT64, ["batch", "total"]),
            helper.make_tensor_value_info("past_key_0", TensorProto.FLOAT, kv),
            helper.make_tensor_value_info("past_value_0", TensorProto.FLOAT, kv),
        ],
        [
            helper.make_tensor_value_info(dec.LOGITS, TensorProto.FLOAT, ["batch", 1, V]),
            helper.make_tensor_value_info(dec.HIDDEN, TensorProto.FLOAT, ["batch", "new", D]),
            helper.make_tensor_value_info("present_key_0", TensorProto.FLOAT, ["batch", H, "total", D // H]),
            helper.make_tensor_value_info(
                "present_value_0", TensorProto.FLOAT, ["batch", H, "total", D // H]
            ),
            helper.make_tensor_value_info("mask_f", TensorProto.FLOAT, ["batch", "total"]),
        ],
        [wk, wo, shape, axes1, last],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _emb() -> dec.HostEmbeddings:
    rng = np.random.default_rng(1)
    return dec.HostEmbeddings(
        text_embedding=rng.standard_normal((6, D)).astype(np.float32),
        text_pos=rng.standard_normal((10, D)).astype(np.float32),
        mel_embedding=rng.standard_normal((V, D)).astype(np.float32),
        mel_pos=rng.standard_normal((40, D)).astype(np.float32),
        speed=rng.standard_normal((2, D)).astype(np.float32),
    )


def test_device_kv_roundtrip_and_gather(tmp_path: Path) -> None:
    path = _toy_trunk(tmp_path / "t.onnx")
    cuda_like = CudaOrtSession(path, SessionOptions(threads=1), device="cpu")
    plain = OrtSession(path, SessionOptions(threads=1))
    assert {i.name for i in cuda_like.inputs} == {i.name for i in plain.inputs}
    assert cuda_like.device_outputs == {"present_key_0", "present_value_0"}
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, D)).astype(np.float32)
    z = np.zeros((3, H, 0, D // H), np.float32)
    feeds = {
        dec.INPUTS_EMBEDS: x,
        dec.ATTENTION_MASK: np.ones((3, 4), np.int64),
        "past_key_0": z,
        "past_value_0": z,
    }
    a, b = cuda_like.run(None, feeds), plain.run(None, feeds)
    assert isinstance(a["present_key_0"], DeviceTensor) and isinstance(a[dec.LOGITS], np.ndarray)
    assert a["present_key_0"].shape == (3, H, 4, D // H)
    np.testing.assert_array_equal(np.asarray(a["present_value_0"]), b["present_value_0"])
    np.testing.assert_array_equal(a[dec.LOGITS], b[dec.LOGITS])
    # beam reorder on the device
    rows = np.array([2, 0, 0])
    np.testing.assert_array_equal(np.asarray(a["present_key_0"][rows]), b["present_key_0"][rows])
    with pytest.raises(TypeError):
        a["present_key_0"][:, 1]
    # fed back as the next step's past without leaving the device
    x2 = rng.standard_normal((3, 1, D)).astype(np.float32)
    f2 = {
        dec.INPUTS_EMBEDS: x2,
        dec.ATTENTION_MASK: np.ones((3, 5), np.int64),
        "past_key_0": a["present_key_0"],
        "past_value_0": a["present_value_0"],
    }
    g2 = {**f2, "past_key_0": b["present_key_0"], "past_value_0": b["present_value_0"]}
    a2, b2 = cuda_like.run([dec.LOGITS, "present_key_0"], f2), plain.run([dec.LOGITS, "present_key_0"], g2)
    assert list(a2) == [dec.LOGITS, "present_key_0"]
    np.testing.assert_array_equal(a2[dec.LOGITS], b2[dec.LOGITS])
    np.testing.assert_array_equal(np.asarray(a2["present_key_0"]), b2["present_key_0"])


def test_gather_graphs_are_what_they_claim() -> None:
    import base64

    from fasttts_cli.backends.onnxruntime.cuda_session import GATHER_GRAPHS

    for et in (TensorProto.FLOAT, TensorProto.FLOAT16):
        g = helper.make_graph(
            [helper.make_node("Gather", ["data", "rows"], ["out"], axis=0)],
            "gather_rows",
            [
                helper.make_tensor_value_info("data", et, None),
                helper.make_tensor_value_info("rows", TensorProto.INT64, ["n"]),
            ],
            [helper.make_tensor_value_info("out", et, None)],
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="fasttts")
        m.ir_version = 8
        assert base64.b64decode(GATHER_GRAPHS[et]) == m.SerializeToString()


@pytest.mark.parametrize("beams", [1, 3])
def test_gpt_decoder_runs_unchanged_on_device_kv(tmp_path: Path, beams: int) -> None:
    path = _toy_trunk(tmp_path / "t.onnx")
    emb = _emb()
    prefixes = [
        np.random.default_rng(3 + i).standard_normal((5 + 2 * i, D)).astype(np.float32) for i in range(3)
    ]
    params = SamplingParams(
        do_sample=True,
        beams=beams,
        top_k=5,
        top_p=0.9,
        temperature=1.0,
        repetition_penalty=2.0,
        max_tokens=12,
        stop_token=V - 1,
    )
    results = []
    for sess in (
        OrtSession(path, SessionOptions(threads=1)),
        CudaOrtSession(path, SessionOptions(threads=1), device="cpu"),
    ):
        d = dec.GPTDecoder(sess, emb, layers=1, heads=H)
        out = d.generate_codes(prefixes, params, seeds=[11, 12, 13])
        results.append([np.asarray(r.codes) for r in out])
        lat = d.latents(prefixes, [r.codes for r in out])
        results.append(lat)
    for a, b in zip(results[0], results[2], strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(results[1], results[3], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert any(len(c) > 0 for c in results[0])


@pytest.mark.gpu
@pytest.mark.skipif(
    "CUDAExecutionProvider" not in ort.get_available_providers(),
    reason="onnxruntime-gpu (CUDAExecutionProvider) is not installed",
)
def test_cuda_provider_matches_cpu(tmp_path: Path) -> None:  # pragma: no cover - GPU only
    path = _toy_trunk(tmp_path / "t.onnx")
    emb = _emb()
    prefixes = [np.ones((6, D), np.float32)]
    params = SamplingParams(do_sample=False, beams=1, max_tokens=8)
    ref = dec.GPTDecoder(OrtSession(path), emb, layers=1, heads=H).generate_codes(prefixes, params, [0])
    got = dec.GPTDecoder(CudaOrtSession(path), emb, layers=1, heads=H).generate_codes(prefixes, params, [0])
    np.testing.assert_array_equal(ref[0].codes, got[0].codes)
