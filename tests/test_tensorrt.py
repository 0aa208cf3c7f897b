"""TensorRT build side without a GPU: optimization profiles from preset limits, manifest entries, the
runner's buffer logic; GPU builds/runs are marked `gpu` and skipped with a reason where the stack is
missing."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from fasttts_cli.backends.tensorrt.session import MIN_BUFFER, BufferPool, check_cuda, grow
from fasttts_cli.build import tensorrt_build as tb
from fasttts_cli.errors import SynthesisError
from fasttts_cli.spec.engine_folder import ComponentEntry
from fasttts_cli.spec.presets import Limits, load_preset

HAS_TRT = importlib.util.find_spec("tensorrt") is not None
CONSTANTS = {"s2mel": {"sr": 22050, "hop_length": 256}, "gpt": {"num_latents": 32}}


def test_profiles_follow_preset_limits() -> None:
    lim = Limits(max_batch=8, max_text_tokens=120, max_mel_tokens=1500, max_ref_seconds=15.0)
    gen = math.floor(1.72 * 1500) + 1
    ref_mel = math.ceil(15 * 22050 / 256) + 2
    voc = tb.axis_ranges("bigvgan", lim, CONSTANTS)
    assert (voc["batch"].min, voc["batch"].max) == (1, 8)
    assert voc["frames"].max == gen and "samples" not in voc  # an output axis: hop * frames
    dit = tb.axis_ranges("dit_cfg_step", lim, CONSTANTS)
    assert (dit["batch"].min, dit["batch"].max) == (2, 16)  # cond + uncond rows per line
    assert dit["time"].max == ref_mel + gen
    gpt = tb.axis_ranges("gpt_trunk", lim, CONSTANTS)
    assert gpt["past"].min == 0  # prefill runs with an empty cache
    assert gpt["total"].max == 34 + 120 + 3 + 1500 + 2 and gpt["batch"].max == 24
    w2v = tb.axis_ranges("w2v_bert", lim, CONSTANTS)
    assert w2v["time"].max == 15 * 50 + 2
    # a bigger preset limit gives a bigger profile
    big = tb.axis_ranges("bigvgan", Limits(max_batch=16, max_mel_tokens=3000), CONSTANTS)
    assert big["frames"].max > voc["frames"].max and big["batch"].max == 16
    for comp in (
        "w2v_bert",
        "codec_quantize",
        "codec_vq2emb",
        "campplus",
        "speaker_conditioner",
        "emotion_conditioner",
        "gpt_trunk",
        "s2mel_content",
        "length_regulator",
        "dit_cfg_step",
        "bigvgan",
    ):
        for r in tb.axis_ranges(comp, lim, CONSTANTS).values():
            assert 0 <= r.min <= r.opt <= r.max


def test_profile_shapes_from_manifest_io() -> None:
    lim = load_preset("fp16").limits
    inputs = {"mel": ["batch", 80, "frames"], "lengths": ["batch"]}
    prof = tb.profile_for("bigvgan", inputs, lim, CONSTANTS)
    lo, opt, hi = prof.shapes["mel"]
    assert lo == (1, 80, 2) and hi == (lim.max_batch, 80, math.floor(1.72 * lim.max_mel_tokens) + 1)
    assert opt[1] == 80 and lo[0] <= opt[0] <= hi[0]
    assert prof.shapes["lengths"] == ((1,), (opt[0],), (hi[0],))
    assert prof.to_json()["mel"][2] == list(hi)
    with pytest.raises(tb.TensorRTBuildError, match="axis 'mystery'"):
        tb.profile_for("bigvgan", {"mel": ["batch", "mystery"], "lengths": ["frames"]}, lim, CONSTANTS)
    with pytest.raises(tb.TensorRTBuildError, match="no optimization profile"):
        tb.axis_ranges("nonexistent", lim)


def test_plan_manifest_entry(tmp_path: Path) -> None:
    plan = tmp_path / tb.plan_name("bigvgan")
    plan.write_bytes(b"serialized-engine")
    src = ComponentEntry(
        "bigvgan.onnx",
        "onnxruntime-cpu",
        "fp32",
        {"mel": ["batch", 80, "frames"]},
        {"wav": ["batch", "samples"]},
        "abc",
    )
    e = tb.plan_entry(src, plan, "fp32")
    assert (e.file, e.backend, e.precision) == ("bigvgan.plan", "tensorrt", "fp32")
    assert e.inputs == src.inputs and e.outputs == src.outputs
    import hashlib

    assert e.sha256 == hashlib.sha256(b"serialized-engine").hexdigest()


def test_buffer_pool_grows_and_frees() -> None:
    live: dict[int, int] = {}
    counter = iter(range(1, 1000))

    def malloc(n: int) -> int:
        p = next(counter)
        live[p] = n
        return p

    pool = BufferPool(malloc, lambda p: live.pop(p))
    a = pool.get("past_key_0", 0)
    assert live[a] == MIN_BUFFER  # empty cache still has an address
    assert pool.get("past_key_0", 100) == a  # fits: no realloc
    b = pool.get("past_key_0", 1000)
    assert b != a and a not in live and live[b] == 1500
    assert pool.get("past_key_0", 1400) == b
    pool.get("logits", 10)
    pool.close()
    assert live == {}
    assert grow(0, 1) == MIN_BUFFER and grow(2000, 10) == 2000


def test_check_cuda() -> None:
    assert check_cuda((0, 123), "x") == 123
    assert check_cuda((0,), "x") == ()
    with pytest.raises(SynthesisError, match="cudaMalloc"):
        check_cuda((2, None), "cudaMalloc")


def test_build_without_tensorrt_says_what_to_install(tmp_path: Path) -> None:
    if HAS_TRT:
        pytest.skip("tensorrt is installed here")
    from fasttts_cli.errors import MissingDependencyError

    with pytest.raises(MissingDependencyError, match="tensorrt"):
        tb.build_plan(tmp_path / "a.onnx", tmp_path / "a.plan", tb.Profile())


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_TRT, reason="tensorrt is not installed (NVIDIA GPU machines: extra `gpu`)")
def test_build_and_run_small_plan(tmp_path: Path) -> None:  # pragma: no cover - GPU only
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from fasttts_cli.backends.tensorrt.session import TrtSession

    w = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "time", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "time", 8])],
        [numpy_helper.from_array(w, "W")],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    prof = tb.Profile({"x": ((1, 1, 16), (2, 8, 16), (4, 32, 16))})
    info = tb.build_plan(tmp_path / "m.onnx", tmp_path / "m.plan", prof, timing_cache=tmp_path / "tc")
    assert info.strongly_typed and (tmp_path / "tc").stat().st_size > 0
    s = TrtSession(tmp_path / "m.plan")
    x = np.random.default_rng(1).standard_normal((3, 5, 16)).astype(np.float32)
    y = s.run(None, {"x": x})["y"]
    np.testing.assert_allclose(y, x @ w, rtol=1e-3, atol=1e-3)
