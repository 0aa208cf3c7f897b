"""ONNX Runtime IO binding lifetime (the CUDA session's binding path, on the CPU provider): bound CPU
inputs are pointers into numpy memory, so every array the session converts (a non-contiguous view, a
dtype cast) must live until the run returns. The binding here keeps only the pointer, as onnxruntime's
C++ `bind_input` does (onnxruntime 1.32's Python wrapper holds a reference as well, older ones did not),
and the freed memory is reused before the run: a session that drops its converted arrays reads garbage."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from fasttts_cli.backends.onnxruntime.cuda_session import CudaOrtSession  # noqa: E402
from fasttts_cli.backends.onnxruntime.session import OrtSession, SessionOptions  # noqa: E402

pytestmark = pytest.mark.gpu_fake
N = 96  # 96 x 96 float32: 36 KiB, under malloc's mmap threshold, so freed memory is reused at once


def _graph(path: Path) -> Path:
    nodes = [
        helper.make_node("Mul", ["a", "b"], ["ab"]),
        helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["ab", "nf"], ["out"]),
    ]
    g = helper.make_graph(
        nodes,
        "lifetime",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["r", "c"]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["r", "c"]),
            helper.make_tensor_value_info("n", TensorProto.INT64, ["r", "c"]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["r", "c"])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, str(path))
    return path


class _PointerOnlyBinding:
    """An IOBinding whose bind_cpu_input keeps no reference to the array (the C++ call alone)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def bind_cpu_input(self, name: str, arr: np.ndarray) -> None:
        self._inner._iobinding.bind_input(name, arr)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_bound_host_feeds_live_until_the_run_returns(tmp_path: Path) -> None:
    path = _graph(tmp_path / "g.onnx")
    rng = np.random.default_rng(0)
    # non-contiguous views and wrong dtypes: the session must make (and keep) converted copies
    a = rng.standard_normal((N, N)).T
    b = np.asfortranarray(rng.standard_normal((N, N)).astype(np.float32))
    n = rng.integers(0, 5, (N, 2 * N), dtype=np.int32)[:, ::2]
    feeds = {"a": a, "b": b, "n": n}
    want = OrtSession(path, SessionOptions(threads=1)).run(None, feeds)["out"]

    sess = CudaOrtSession(path, SessionOptions(threads=1), device="cpu")
    inner = sess._sess
    make_binding, real_run = inner.io_binding, inner.run_with_iobinding
    junk: list[np.ndarray] = []

    def run_after_gc(binding: Any, *args: Any) -> None:
        gc.collect()  # between bind and run: whatever only the binding pointed to is freed now
        junk.extend(np.full((N, N), 1e6, np.float32) for _ in range(16))  # and its memory reused
        junk.extend(np.full((N, N), 10**9, np.int64) for _ in range(16))
        real_run(binding, *args)

    inner.io_binding = lambda: _PointerOnlyBinding(make_binding())
    inner.run_with_iobinding = run_after_gc
    got = sess.run(None, feeds)["out"]
    assert junk, "the run did not go through run_with_iobinding"
    np.testing.assert_allclose(got, want, rtol=1e-6)
