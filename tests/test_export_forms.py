"""The export-friendly forms used where ONNX Runtime's kernels are slow equal the forms they replace."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from fasttts_cli.nets.bigvgan import LowPassFilter1d, UpSample1d, replicate_rows  # noqa: E402
from fasttts_cli.nets.wavenet import pad_rows  # noqa: E402


@pytest.mark.parametrize("n", [7, 12, 13, 101])
def test_polyphase_upsample_equals_grouped_transpose(n: int) -> None:
    g = torch.Generator().manual_seed(n)
    up = UpSample1d(2, 12, 5)
    x = torch.randn(3, 5, n, generator=g)
    want = F.conv_transpose1d(x, up.filter.expand(5, -1, -1), stride=2, groups=5)
    got = up.polyphase(x)
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("n", [23, 24, 112])
def test_folded_downsample_equals_grouped_conv(n: int) -> None:
    g = torch.Generator().manual_seed(n)
    lp = LowPassFilter1d(2, 12, 5)
    x = torch.randn(3, 5, n, generator=g)
    want = F.conv1d(x, lp.filter.expand(5, -1, -1), stride=2, groups=5)
    got = lp.single_channel(x)
    assert got.shape == want.shape
    assert torch.equal(got, want)


def test_replicate_rows_matches_per_row_padding_where_it_is_read() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 40, generator=g)
    lens = torch.tensor([40, 29, 1])
    left, right = 5, 6
    got, want = replicate_rows(x, left, right, lens), pad_rows(x, left, right, lens, "replicate")
    assert got.shape == want.shape
    for b, n in enumerate(lens.tolist()):
        # each row's own samples, its left edge and the `right` samples past its end
        assert torch.equal(got[b, :, : left + n + right], want[b, :, : left + n + right])
    assert not torch.equal(x[1, :, 28], x[1, :, 35])  # the rows really differ past the end


def test_export_form_is_used_only_while_exporting() -> None:
    from fasttts_cli.nets import bigvgan

    assert not bigvgan._export_form(12, 2)


def test_relative_key_bias_equals_transformers_einsum() -> None:
    hf = pytest.importorskip("transformers.models.wav2vec2_bert.modeling_wav2vec2_bert")
    from fasttts_cli.nets.w2v_bert import _relative_key_bias

    class Attn(torch.nn.Module):
        left_max_position_embeddings = 64
        right_max_position_embeddings = 8
        scaling = 0.125

        def __init__(self) -> None:
            super().__init__()
            self.distance_embedding = torch.nn.Embedding(73, 16)

    m = Attn()
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 3, 90, 16, generator=g), torch.randn(2, 3, 90, 16, generator=g)
    want = hf._apply_relative_key_position_encoding(m, q, k)[1]
    got = _relative_key_bias(m, q, k)[1]
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


def test_conv_module_as_matmuls_equals_transformers_conv_module() -> None:
    hf = pytest.importorskip("transformers.models.wav2vec2_bert.modeling_wav2vec2_bert")
    from fasttts_cli.nets.w2v_bert import _conv_module_as_matmuls, _conv_modules_as_matmuls

    cfg = hf.Wav2Vec2BertConfig(hidden_size=24, conv_depthwise_kernel_size=5)
    torch.manual_seed(0)
    m = hf.Wav2Vec2BertConvolutionModule(cfg).eval()
    x = torch.randn(2, 17, 24)
    mask = torch.ones(2, 17, dtype=torch.int64)
    mask[1, 11:] = 0
    with torch.no_grad():
        want = m(x, attention_mask=mask)
        got = _conv_module_as_matmuls(m, x, mask)
        with _conv_modules_as_matmuls():
            routed = m(x, attention_mask=mask)
        after = m(x, attention_mask=mask)
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-6, rtol=1e-5)
    assert torch.equal(routed, got)
    assert torch.equal(after, want)  # the class's own forward is back


@pytest.mark.parametrize(("input_size", "width"), [(64, 5), (64, 31), (64, 64), (17, 4)])
def test_banded_subsampling_equals_one_wide_linear(input_size: int, width: int) -> None:
    from fasttts_cli.nets.conformer import ConformerConfig, Conv2dSubsampling2, subsampling_in_freq_groups

    torch.manual_seed(input_size + width)
    sub = Conv2dSubsampling2(ConformerConfig(input_size, 8, 2, 16, 1, max_len=64)).eval()
    keys = set(sub.state_dict())
    x = torch.randn(2, 21, input_size)
    with torch.no_grad():
        want, pos_want = sub(x)
        with subsampling_in_freq_groups(sub, width):
            got, pos_got = sub(x)
            bands = [n for n, _ in sub.named_buffers() if n.startswith("band_w")]
        after, _ = sub(x)
    bins = (input_size - 1) // 2
    assert len(bands) == -(-bins // width)
    assert got.shape == want.shape == (2, 10, 8)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
    assert torch.equal(pos_got, pos_want)
    assert torch.equal(after, want)
    assert set(sub.state_dict()) == keys and sub.freq_group is None  # nothing left behind


def test_dit_attention_additive_mask_equals_bool_mask() -> None:
    from types import SimpleNamespace

    from fasttts_cli.nets.dit import Attention, apply_rope, rope_table

    attn = Attention(SimpleNamespace(hidden_dim=32, num_heads=4, head_dim=8))  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 10, 32, generator=g)
    rope = rope_table(10, 8, 10000.0, x.device)
    keep = torch.arange(10)[None, :] < torch.tensor([10, 6])[:, None]
    key_mask = keep[:, None, None, :]
    got = attn(x, rope, key_mask)
    b, t, _ = x.shape
    q, k, v = attn.wqkv(x).split(32, dim=-1)
    q = apply_rope(q.view(b, t, 4, 8), rope).transpose(1, 2)
    k = apply_rope(k.view(b, t, 4, 8), rope).transpose(1, 2)
    v = v.view(b, t, 4, 8).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)  # the bool mask, as the original
    want = attn.wo(y.transpose(1, 2).reshape(b, t, 32))
    assert torch.allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("mask_rows", [2, 1])
def test_dit_attention_as_ort_contrib_ops_equals_standard_export(tmp_path, mask_rows: int) -> None:
    """The DiT attention exported with ONNX Runtime's RotaryEmbedding (CPU engines, pieces) gives
    what the standard export and the eager module give, with a per-row or a shared key mask; the flag
    changes nothing outside an export."""
    from types import SimpleNamespace

    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from fasttts_cli.build.quantize import count_ops
    from fasttts_cli.nets.dit import Attention, rope_table, use_ort_attention

    class Wrap(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = Attention(SimpleNamespace(hidden_dim=32, num_heads=4, head_dim=8))  # type: ignore[arg-type]

        def forward(self, x, x_lens):
            t = x.shape[1]
            key_mask = (torch.arange(t)[None, :] < x_lens[:, None])[:, None, None, :]
            return self.attn(x, rope_table(t, 8, 10000.0, x.device), key_mask)

    g = torch.Generator().manual_seed(3)
    w = Wrap().eval()
    x = torch.randn(2, 11, 32, generator=g)
    lens = torch.tensor([11, 7])[:mask_rows]
    want = w(x, lens)
    paths = {}
    for on in (False, True):
        use_ort_attention(w, on)
        assert torch.equal(w(x, lens), want)  # eager: the flag matters only while exporting
        paths[on] = tmp_path / f"attn_{on}.onnx"
        with torch.no_grad():
            torch.onnx.export(
                w,
                (x, lens),
                str(paths[on]),
                input_names=["x", "x_lens"],
                output_names=["y"],
                dynamic_axes={"x": {0: "b", 1: "t"}, "x_lens": {0: "r"}},
                opset_version=17,
                dynamo=False,
            )
    ops = count_ops(onnx.load(str(paths[True])))
    std = count_ops(onnx.load(str(paths[False])))
    assert ops["RotaryEmbedding"] == 2 and "RotaryEmbedding" not in std
    assert std["Mul"] >= ops.get("Mul", 0) + 7  # the products of each rotation are gone
    for n in (11, 5):  # the time axis is dynamic in both forms
        xn, ln = x[:, :n], torch.clamp(lens, max=n)
        ref = w(xn, ln).detach().numpy()
        for on, path in paths.items():
            s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            got = s.run(None, {"x": xn.numpy(), "x_lens": ln.numpy()})[0]
            assert abs(got - ref).max() < 1e-5, (on, n)


@pytest.mark.parametrize(("kernel", "dilation"), [(5, 1), (5, 2), (1, 1)])
def test_wavenet_conv_as_matmul_equals_plain_conv(kernel: int, dilation: int, tmp_path) -> None:
    """The exported form (shifted copies stacked, one MatMul with a constant right operand) equals the
    conv, eager and in ONNX Runtime, and leaves no Conv for dynamic int8 to miss."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from fasttts_cli.build.quantize import count_ops
    from fasttts_cli.nets.wavenet import SConv1d

    torch.manual_seed(dilation)
    conv = SConv1d(6, 10, kernel, dilation=dilation).eval()
    x = torch.randn(2, 6, 30)
    want = conv(x)
    got = conv._as_matmul(F.pad(x, (conv.pad_left, conv.pad_right), mode="reflect"))
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-5)
    path = tmp_path / "conv.onnx"
    with torch.no_grad():
        torch.onnx.export(
            conv,
            (x,),
            str(path),
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "b", 2: "t"}},
            opset_version=17,
            dynamo=False,
        )
    ops = count_ops(onnx.load(str(path)))
    assert ops["MatMul"] == 1 and "Conv" not in ops
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for n in (30, 13):
        xn = x[..., :n]
        assert abs(s.run(None, {"x": xn.numpy()})[0] - conv(xn).detach().numpy()).max() < 1e-5


def test_head_crop_keeps_every_velocity_the_cfm_uses() -> None:
    """DiT.head on frames [min(prompt_lens) - margin, T) only: v from each row's prompt end on equals the
    uncropped head's (the WaveNet reads at most `head_margin` frames to the left), zero before the crop;
    the CFM result is then the same, with and without the per-row reflect padding."""
    from fasttts_cli.nets.random_model import dit_config, random_dit

    dit = random_dit(dit_config(hidden=64, depth=3, heads=2, content_dim=64, style_dim=192, wavenet_layers=3))
    assert dit.head_margin == 3 * 2  # three k=5 layers, dilation 1
    g = torch.Generator().manual_seed(3)
    b, t = 3, 57
    x_lens = torch.tensor([57, 50, 44])
    prompt_lens = torch.tensor([30, 21, 40])
    args = (
        torch.randn(b, 80, t, generator=g),
        torch.randn(b, 80, t, generator=g),
        x_lens,
        torch.rand(b, generator=g),
        torch.randn(b, 192, generator=g),
        torch.randn(b, t, 64, generator=g),
    )
    with torch.no_grad():
        for row_padding in (True, False):
            full = dit(*args, row_padding=row_padding)
            crop = dit(*args, row_padding=row_padding, prompt_lens=prompt_lens)
            start = int(prompt_lens.min()) - dit.head_margin
            assert torch.equal(crop[:, :, :start], torch.zeros_like(crop[:, :, :start]))
            assert not torch.equal(full[:, :, :start], crop[:, :, :start])
            for r in range(b):
                p, n = int(prompt_lens[r]), int(x_lens[r])
                torch.testing.assert_close(crop[r, :, p:n], full[r, :, p:n], rtol=0, atol=2e-5)
            # one frame less of margin would not be exact: the crop really is as tight as it can be
            tight = dit.head(
                *_head_inputs(dit, args), x_lens if row_padding else None, torch.tensor(start + 1)
            )
            p = int(prompt_lens.min())
            assert not torch.allclose(tight[:, :, p : p + 1], full[:, :, p : p + 1], atol=1e-4)


def _head_inputs(dit, args):
    inp = dit.embed(*args)
    h = inp.h
    skips = {}
    for i, block in enumerate(dit.transformer.layers):
        src = dit.skip_plan.get(i)
        h = block(h, inp.c, inp.rope, inp.key_mask, skips.pop(src) if src is not None else None)
        if i in set(dit.skip_plan.values()):
            skips[i] = h
    return h, inp, args[3]


def test_contrib_op_forms_only_for_onnxruntime_cpu_graphs() -> None:
    """TensorRT cannot parse contrib ops and the CUDA graphs go through the fp16 converter: only CPU
    presets' DiT graphs (and the s2mel pieces, always run on the CPU provider) take them."""
    from fasttts_cli.build.export import ort_contrib_fits
    from fasttts_cli.spec.presets import load_preset

    assert ort_contrib_fits(load_preset("cpu-fp32").components["dit"])
    assert ort_contrib_fits(load_preset("cpu-int8").components["dit"])
    for name in ("fp16", "w8a16", "w4a16"):
        assert not ort_contrib_fits(load_preset(name).components["dit"]), name
