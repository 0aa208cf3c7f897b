"""TrtSession against the fake TensorRT and CUDA (tools/fakes): value-dependent output sizes through an
IOutputAllocator, host placement of shape-tensor inputs, and the GPT trunk's KV cache kept on the device
between decode steps. Each of these failed with the session before issue 18 (see the asserts on the
fake's own behaviour: -1 shapes, HOST locations, copy counters)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fasttts_cli.backends.onnxruntime.session import OrtSession, SessionOptions  # noqa: E402
from fasttts_cli.build import tensorrt_build as tb  # noqa: E402
from fasttts_cli.errors import SynthesisError  # noqa: E402
from fasttts_cli.indextts2 import decode as dec  # noqa: E402
from fasttts_cli.indextts2.sampling import SamplingParams  # noqa: E402
from fasttts_cli.tools.fakes import cuda as fake_cuda  # noqa: E402
from fasttts_cli.tools.fakes import tensorrt as fake_trt  # noqa: E402
from tests.test_tensorrt_ort_cuda import D, H, _emb, _toy_trunk  # noqa: E402

pytestmark = pytest.mark.gpu_fake


def _save(nodes, inputs, outputs, path: Path, inits=()) -> Path:
    g = helper.make_graph(nodes, path.stem, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def _regulator(path: Path) -> Path:
    """A length-regulator-like graph: y (B, max(lens), C) = x[:, :1] repeated, and 2 * lens (B,)."""
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    nodes = [
        helper.make_node("ReduceMax", ["lens"], ["n"], keepdims=0),
        helper.make_node("Range", ["zero", "n", "one"], ["steps"]),
        helper.make_node("Cast", ["steps"], ["stepf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["stepf", "ax"], ["s3"]),  # (1, n, 1)
        helper.make_node("Mul", ["x", "s3"], ["y"]),  # (B, 1, C) * (1, n, 1) -> (B, n, C)
        helper.make_node("Add", ["lens", "lens"], ["twice"]),
    ]
    ax = numpy_helper.from_array(np.array([0, 2], np.int64), "ax")
    return _save(
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 4]),
            helper.make_tensor_value_info("lens", TensorProto.INT64, ["batch"]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "frames", 4]),
            helper.make_tensor_value_info("twice", TensorProto.INT64, ["batch"]),
        ],
        path,
        [zero, one, ax],
    )


def _plan(onnx_path: Path, shapes: dict) -> Path:
    plan = onnx_path.with_suffix(".plan")
    tb.build_plan(onnx_path, plan, tb.Profile(shapes))
    return plan


def test_value_dependent_output_gets_an_output_allocator(tmp_path: Path) -> None:
    src = _regulator(tmp_path / "lr.onnx")
    feeds = {"x": np.arange(8, dtype=np.float32).reshape(2, 1, 4), "lens": np.array([3, 5], np.int64)}
    want = OrtSession(src, SessionOptions(threads=1)).run(None, feeds)
    with fake_trt.install() as trt:
        plan = _plan(src, {"x": ((1, 1, 4), (2, 1, 4), (4, 1, 4)), "lens": ((1,), (2,), (4,))})
        # what the real library does, which the session before issue 18 stopped at ("shape unresolved")
        engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(plan.read_bytes())
        ctx = engine.create_execution_context()
        ctx.set_input_shape("x", (2, 1, 4))
        ctx.set_input_shape("lens", (2,))
        assert tuple(ctx.get_tensor_shape("y")) == (2, -1, 4)
        assert tuple(ctx.get_tensor_shape("twice")) == (2,)
        from fasttts_cli.backends.tensorrt.session import TrtSession

        s = TrtSession(plan)
        for lens in ([3, 5], [7, 2], [1, 1]):  # the allocator's buffer is reused and grown
            f = {**feeds, "lens": np.array(lens, np.int64)}
            got = s.run(None, f)
            ref = OrtSession(src, SessionOptions(threads=1)).run(None, f)
            assert got["y"].shape == (2, max(lens), 4)
            np.testing.assert_array_equal(got["y"], ref["y"])
            np.testing.assert_array_equal(got["twice"], ref["twice"])
        np.testing.assert_array_equal(s.run(["y"], feeds)["y"], want["y"])
        s.close()


def test_value_dependent_output_without_allocator_fails_the_run(tmp_path: Path) -> None:
    """The fake is faithful: binding a buffer by the -1 shape (what the old session would have to do)
    fails execute_async_v3."""
    src = _regulator(tmp_path / "lr.onnx")
    with fake_trt.install() as trt:
        plan = _plan(src, {"x": ((1, 1, 4), (2, 1, 4), (4, 1, 4)), "lens": ((1,), (2,), (4,))})
        engine = trt.Runtime(trt.Logger(trt.Logger.ERROR)).deserialize_cuda_engine(plan.read_bytes())
        ctx = engine.create_execution_context()
        x, lens = np.ones((1, 1, 4), np.float32), np.array([3], np.int64)
        for name, a in (("x", x), ("lens", lens)):
            ptr = fake_cuda.cudaMalloc(a.nbytes)[1]
            fake_cuda.cudaMemcpy(
                ptr, a.ctypes.data, a.nbytes, fake_cuda.cudaMemcpyKind.cudaMemcpyHostToDevice
            )
            ctx.set_input_shape(name, a.shape)
            ctx.set_tensor_address(name, ptr)
        for name in ("y", "twice"):
            ctx.set_tensor_address(name, fake_cuda.cudaMalloc(256)[1])
        assert ctx.execute_async_v3(1) is False


def _reshaper(path: Path) -> Path:
    """out = Reshape(x, shape): `shape` (2,) is a shape tensor, so TensorRT places it on the host."""
    return _save(
        [helper.make_node("Reshape", ["x", "shape"], ["out"])],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["a", "b"])],
        path,
    )


def test_shape_tensor_input_is_bound_in_host_memory(tmp_path: Path) -> None:
    src = _reshaper(tmp_path / "r.onnx")
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    with fake_trt.install() as trt:
        plan = _plan(src, {"x": ((1, 6), (2, 6), (4, 6))})
        engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(plan.read_bytes())
        assert engine.get_tensor_location("shape") == trt.TensorLocation.HOST
        assert engine.get_tensor_location("x") == trt.TensorLocation.DEVICE
        assert engine.is_shape_inference_io("shape")
        from fasttts_cli.backends.tensorrt.session import TrtSession

        s = TrtSession(plan)
        before = fake_cuda.DEVICE.copies["H2D"]
        for shp in ([3, 4], [4, 3], [12, 1]):
            got = s.run(None, {"x": x, "shape": np.array(shp, np.int64)})["out"]
            np.testing.assert_array_equal(got, x.reshape(shp))
        assert fake_cuda.DEVICE.copies["H2D"] - before == 3  # only x went to the device, once a run
        # a device address for the shape tensor (what the session did before) fails the run
        ctx = engine.create_execution_context()
        dev = fake_cuda.cudaMalloc(256)[1]
        ctx.set_input_shape("x", (2, 6))
        ctx.set_input_shape("shape", (2,))
        ctx.set_tensor_address("x", dev)
        ctx.set_tensor_address("shape", fake_cuda.cudaMalloc(256)[1])
        ctx.set_tensor_address("out", fake_cuda.cudaMalloc(256)[1])
        assert ctx.execute_async_v3(1) is False


def _trunk_plan(tmp_path: Path) -> tuple[Path, Path]:
    src = _toy_trunk(tmp_path / "t.onnx")
    kv = ((1, H, 0, D // H), (3, H, 8, D // H), (9, H, 64, D // H))
    shapes = {
        dec.INPUTS_EMBEDS: ((1, 1, D), (3, 1, D), (9, 64, D)),
        dec.ATTENTION_MASK: ((1, 1), (3, 9), (9, 64)),
        "past_key_0": kv,
        "past_value_0": kv,
    }
    return src, _plan(src, shapes)


@pytest.mark.parametrize("beams", [1, 3])
def test_trunk_kv_stays_on_the_device_between_steps(tmp_path: Path, beams: int) -> None:
    src = _toy_trunk(tmp_path / "t.onnx")
    emb = _emb()
    prefixes = [
        np.random.default_rng(3 + i).standard_normal((5 + 2 * i, D)).astype(np.float32) for i in range(3)
    ]
    params = SamplingParams(
        do_sample=True, beams=beams, top_k=5, top_p=0.9, temperature=1.0, repetition_penalty=2.0,
        max_tokens=12, stop_token=8193,
    )  # fmt: skip
    ref = dec.GPTDecoder(OrtSession(src, SessionOptions(threads=1)), emb, layers=1, heads=H)
    want = ref.generate_codes(prefixes, params, seeds=[11, 12, 13])
    with fake_trt.install():
        _, plan = _trunk_plan(tmp_path)
        from fasttts_cli.backends.tensorrt.device import DeviceTensor
        from fasttts_cli.backends.tensorrt.session import TrtSession

        sess = TrtSession(plan)
        host_in = []  # bytes the decoder hands over as host arrays, per call
        kinds = []
        real_run = sess.run

        def spy(outputs, feeds):
            host_in.append(sum(np.asarray(v).nbytes for v in feeds.values() if isinstance(v, np.ndarray)))
            kinds.append({k: type(v).__name__ for k, v in feeds.items() if k.startswith("past_")})
            return real_run(outputs, feeds)

        sess.run = spy  # type: ignore[method-assign]
        fake_cuda.DEVICE.reset_counters()
        got = dec.GPTDecoder(sess, emb, layers=1, heads=H).generate_codes(
            prefixes, params, seeds=[11, 12, 13]
        )
        for a, b in zip(want, got, strict=True):
            np.testing.assert_array_equal(a.codes, b.codes)
        assert len(kinds) > 2
        # every step after the prefill feeds the cache as device tensors, never through the host
        assert all(set(k.values()) == {DeviceTensor.__name__} for k in kinds[1:])
        assert fake_cuda.DEVICE.copied_bytes["H2D"] == sum(host_in)  # embeddings + masks, nothing else
        assert fake_cuda.DEVICE.copies["D2H"] == 2 * len(kinds)  # logits and hidden, per call
        if beams > 1:
            assert fake_cuda.DEVICE.copies["D2D"] > 0  # beam reordering ran on the device
        sess.close()


def test_device_tensor_gathers_rows_and_copies_back(tmp_path: Path) -> None:
    with fake_trt.install():
        from fasttts_cli.backends.tensorrt.device import Arena, DeviceTensor

        arena = Arena(fake_cuda, fake_cuda.cudaStreamCreate()[1])
        host = np.arange(5 * 3 * 2, dtype=np.float16).reshape(5, 3, 2)
        t = DeviceTensor(arena, host.shape, host.dtype)
        arena.copy(t.ptr, host.ctypes.data, host.nbytes, "H2D")
        for rows in ([4, 0, 0, 2], [0, 1, 2], [3], [-1, 1]):
            np.testing.assert_array_equal(np.asarray(t[np.array(rows)]), host[rows])
        fake_cuda.DEVICE.reset_counters()
        t[np.array([1, 2, 3, 0])]
        assert fake_cuda.DEVICE.copies["D2D"] == 2  # rows 1..3 as one block, then row 0
        with pytest.raises(TypeError):
            t[np.array([True, False, True, False, True])]
        with pytest.raises(IndexError):
            t[np.array([5])]


def test_device_tensor_of_the_wrong_dtype_is_refused(tmp_path: Path) -> None:
    with fake_trt.install():
        _, plan = _trunk_plan(tmp_path)
        from fasttts_cli.backends.tensorrt.device import DeviceTensor
        from fasttts_cli.backends.tensorrt.session import TrtSession

        s = TrtSession(plan)
        bad = DeviceTensor(s._arena, (1, H, 2, D // H), np.float16)
        feeds = {
            dec.INPUTS_EMBEDS: np.zeros((1, 1, D), np.float32),
            dec.ATTENTION_MASK: np.ones((1, 3), np.int64),
            "past_key_0": bad,
            "past_value_0": np.zeros((1, H, 2, D // H), np.float32),
        }
        with pytest.raises(SynthesisError, match="float16 device tensor"):
            s.run(None, feeds)
