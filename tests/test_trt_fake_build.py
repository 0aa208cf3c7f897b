"""TensorRT build side against the fake TensorRT: every profile range names a real input axis (the
"frames"/"samples" ranges named output axes and were silently dropped), an unknown name is an error, the
GPT trunk's profile is bounded by an attention-score budget (a 48-row full-length prefill was allowed),
and the static ONNX check flags output sizes computed from input values."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from fasttts_cli.build import tensorrt_build as tb  # noqa: E402
from fasttts_cli.build.onnx_shapes import check_tensorrt_outputs, host_inputs, output_dims  # noqa: E402
from fasttts_cli.indextts2 import decode as dec  # noqa: E402
from fasttts_cli.spec.engine_folder import ComponentEntry  # noqa: E402
from fasttts_cli.spec.presets import ComponentSpec, Limits, load_preset  # noqa: E402
from fasttts_cli.tools.fakes import tensorrt as fake_trt  # noqa: E402
from tests.test_trt_fake_session import _regulator, _reshaper  # noqa: E402

pytestmark = pytest.mark.gpu_fake
CONSTANTS = {"s2mel": {"sr": 22050, "hop_length": 256}, "gpt": {"num_latents": 32, "heads": 20}}


@pytest.fixture(scope="module")
def tiny_io() -> dict[str, dict[str, list]]:
    """Each TensorRT-bound component's inputs as the manifest writes them (name -> dims), from the
    graphs `fasttts build` exports for a tensorrt preset (classic trunk, no contrib ops)."""
    from fasttts_cli.build.export import engine_specs
    from fasttts_cli.build.tiny import ensure_tiny_checkpoint
    from fasttts_cli.nets.checkpoint import load_checkpoint
    from tests.parity import CACHE

    torch.set_num_threads(1)
    m = load_checkpoint(ensure_tiny_checkpoint(CACHE / "tiny-ckpt-seed0", seed=0))
    out = {}
    for sp in engine_specs(m, load_preset("fp16")):
        example = sp.make_inputs(*sp.export_bt, torch.Generator().manual_seed(0))
        out[sp.name] = {
            n: [sp.dynamic_axes.get(n, {}).get(i, int(s)) for i, s in enumerate(x.shape)]
            for n, x in zip(sp.input_names, example, strict=True)
        }
    return out


@pytest.mark.parametrize("preset", ["fp16", "w8a16"])
def test_every_profile_range_applies_to_an_input(tiny_io: dict, preset: str) -> None:
    lim = load_preset(preset).limits
    assert len(tiny_io) == 11
    for comp, inputs in tiny_io.items():
        ranges = tb.axis_ranges(comp, lim, CONSTANTS)
        used = {d for dims in inputs.values() for d in dims if isinstance(d, str)}
        assert set(ranges) == used, comp  # each range reaches TensorRT, each dynamic axis has one
        prof = tb.profile_for(comp, inputs, lim, CONSTANTS)
        assert set(prof.shapes) == set(inputs)


def test_a_range_for_no_input_axis_is_an_error() -> None:
    lim = Limits()
    # bigvgan's range is for "frames": an input axis named otherwise leaves it unused, which is refused
    with pytest.raises(tb.TensorRTBuildError, match=r"\['frames'\] match no input axis"):
        tb.profile_for("bigvgan", {"mel": ["batch", 80, "time"], "lengths": ["batch"]}, lim, CONSTANTS)
    inputs = {"x": ["batch", "time", 16], "x_lens": ["batch"], "y_lens": ["batch"]}
    assert set(tb.profile_for("length_regulator", inputs, lim, CONSTANTS).shapes) == set(inputs)


def test_profile_naming_a_missing_input_fails_the_build(tmp_path: Path) -> None:
    src = _regulator(tmp_path / "lr.onnx")
    shapes = {"x": ((1, 1, 4), (2, 1, 4), (4, 1, 4)), "lens": ((1,), (2,), (4,))}
    with fake_trt.install():
        with pytest.raises(tb.TensorRTBuildError, match=r"\['frames'\], which are not inputs"):
            tb.build_plan(src, tmp_path / "a.plan", tb.Profile({**shapes, "frames": ((1,), (2,), (3,))}))
        info = tb.build_plan(src, tmp_path / "b.plan", tb.Profile(shapes))
    assert info.profile["lens"] == [[1], [2], [4]] and (tmp_path / "b.plan").is_file()


def test_trunk_profile_is_bounded_by_the_score_budget() -> None:
    # the decoder never feeds more than its chunk in one trunk call: the profile's `new` stops there
    chunk = inspect.signature(dec.GPTDecoder.__init__).parameters["chunk"].default
    assert chunk == tb.PREFILL_CHUNK
    lim = load_preset("fp16").limits  # max_batch 16: 48 beam rows
    r = tb.axis_ranges("gpt_trunk", lim, CONSTANTS)
    assert r["batch"].max == 48 and r["new"].max == chunk
    assert tb.scores_bytes(r, 20) <= tb.TRUNK_SCORES_BUDGET
    full = r["batch"].max * 20 * r["total"].max * r["total"].max * 4  # a full-length 48-row prefill
    assert full > 4 * tb.TRUNK_SCORES_BUDGET  # what the profile allowed before: ~10 GB
    with pytest.raises(tb.TensorRTBuildError, match="attention scores exceed"):
        tb.axis_ranges("gpt_trunk", Limits(max_batch=64, max_mel_tokens=3000), CONSTANTS)


def test_static_check_flags_sizes_from_input_values(tmp_path: Path) -> None:
    src = _regulator(tmp_path / "lr.onnx")
    dims = output_dims(src)
    assert [d.kind for d in dims["y"]] == ["expr", "value", "const"]
    assert dims["y"][1].expr == "lens"  # the input whose values set the size
    assert [d.kind for d in dims["twice"]] == ["expr"]
    problems = check_tensorrt_outputs(src, "toy", declared={})
    assert len(problems) == 1 and "output y axis [1]" in problems[0]
    assert check_tensorrt_outputs(src, "toy", declared={"toy": {"y"}}) == []
    stale = check_tensorrt_outputs(src, "toy", declared={"toy": {"y", "twice"}})
    assert stale == ["toy: output twice is declared value-dependent but its size is not"]
    # a size read from a shape tensor (host) input is known before the run: not flagged
    r = _reshaper(tmp_path / "r.onnx")
    assert host_inputs(r) == {"shape"}
    assert check_tensorrt_outputs(r, "toy", declared={}) == []


def test_build_refuses_an_undeclared_value_dependent_output(tmp_path: Path) -> None:
    src = _regulator(tmp_path / "s2mel_content.onnx")
    entry = ComponentEntry(
        file=src.name,
        backend="onnxruntime-cpu",
        precision="fp32",
        inputs={"x": ["batch", 1, 4], "lens": ["batch"]},
        outputs={"y": ["batch", "frames", 4], "twice": ["batch"]},
        sha256="",
    )
    with fake_trt.install():
        with pytest.raises(tb.TensorRTBuildError, match="output y axis"):
            tb.build_component(tmp_path, "w2v_bert", entry, ComponentSpec("tensorrt", "fp32"), Limits())
        # declared (s2mel_content's `cond` is; here the toy output `y`): builds, the session allocates it
        with pytest.raises(tb.TensorRTBuildError, match="declared value-dependent output cond"):
            tb.build_component(tmp_path, "s2mel_content", entry, ComponentSpec("tensorrt", "fp32"), Limits())
