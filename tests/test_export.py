"""`build_engine`: ONNX per component, each verified against its PyTorch module; the engine folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fasttts_cli.backends.onnxruntime.session import OrtSession, SessionOptions  # noqa: E402
from fasttts_cli.build.export import (  # noqa: E402
    ExportError,
    build_engine,
    engine_specs,
    export_graph,
    trunk_spec,
    verify_graph,
)
from fasttts_cli.build.tiny import TINY_CONFIG, ensure_tiny_checkpoint  # noqa: E402
from fasttts_cli.errors import UsageError  # noqa: E402
from fasttts_cli.indextts2 import decode as dec  # noqa: E402
from fasttts_cli.indextts2.decode_inplace import (  # noqa: E402
    InplaceGPTDecoder,
    decoder_for,
    inplace_inputs,
)
from fasttts_cli.indextts2.sampling import SamplingParams  # noqa: E402
from fasttts_cli.nets.checkpoint import load_checkpoint  # noqa: E402
from fasttts_cli.spec.engine_folder import read_manifest  # noqa: E402
from fasttts_cli.spec.presets import load_preset  # noqa: E402
from tests.parity import CACHE, ParityCase, rel  # noqa: E402

COMPONENTS = {
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
}


@pytest.fixture(scope="module")
def tiny() -> Path:
    torch.set_num_threads(1)
    return ensure_tiny_checkpoint(CACHE / "tiny-ckpt-seed0", seed=0)


@pytest.fixture(scope="module")
def tiny_engine(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_engine(tiny, "cpu-fp32", tmp_path_factory.mktemp("engines") / "tiny-cpu-fp32")


def test_engine_folder_is_complete(tiny: Path, tiny_engine: Path) -> None:
    m = read_manifest(tiny_engine, expect_model="indextts2")
    assert set(m.components) == COMPONENTS
    assert m.preset == "cpu-fp32" and m.preset_build_keys == load_preset("cpu-fp32").build_keys()
    assert m.checkpoint_digest == load_checkpoint(tiny).digest()
    g = TINY_CONFIG["gpt"]
    assert m.config["gpt"]["model_dim"] == g["model_dim"] and m.config["gpt"]["layers"] == g["layers"]
    assert m.config["vocoder"]["hop"] == 256 and m.config["emo_num"] == TINY_CONFIG["emo_num"]
    trunk = m.components["gpt_trunk"]
    # ONNX Runtime CPU engines get the in-place trunk (decode_inplace.py)
    assert set(trunk.inputs) == set(inplace_inputs(g["layers"]))
    assert trunk.inputs[dec.INPUTS_EMBEDS] == ["batch", "new", g["model_dim"]]
    for comp in m.components.values():
        assert comp.backend == "onnxruntime-cpu" and comp.precision == "fp32" and len(comp.sha256) == 64
    for key in ("bpe_model", "spk_matrix", "emo_matrix", "w2v_stat_mean"):
        assert (tiny_engine / m.files[key]).is_file()
    emb = dec.HostEmbeddings.load(tiny_engine)
    assert emb.mel_pos.shape == (g["max_mel_tokens"] + 3, g["model_dim"])
    assert emb.text_embedding.shape == (g["number_text_tokens"] + 1, g["model_dim"])
    assert np.load(tiny_engine / m.files["emo_matrix"]).shape == (73, g["model_dim"])


def test_every_component_matches_pytorch_on_fresh_inputs(tiny: Path, tiny_engine: Path) -> None:
    mods = load_checkpoint(tiny)
    for spec in engine_specs(mods, load_preset("cpu-fp32")):
        worst = verify_graph(spec, tiny_engine / f"{spec.name}.onnx", seed=1234)
        assert worst < 1e-4, spec.name


def test_verification_catches_a_wrong_graph(tiny: Path, tmp_path: Path) -> None:
    mods = load_checkpoint(tiny)
    spec = trunk_spec(mods.gpt)
    path = export_graph(spec, tmp_path)
    with torch.no_grad():
        mods.gpt.final_norm.bias.add_(0.5)
    with pytest.raises(ExportError, match="gpt_trunk"):
        verify_graph(spec, path)


def test_conditioners_export_band_by_band(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several subsampling bands (the tiny model has fewer bins than one full-size band): each band is
    its own plain MatMul initializer, and ONNX Runtime matches the module's one wide Linear."""
    import onnx

    from fasttts_cli.nets import conformer

    mods = load_checkpoint(tiny)
    monkeypatch.setattr(conformer, "FREQ_GROUP", 4)
    for name in ("speaker_conditioner", "emotion_conditioner"):
        spec = next(s for s in engine_specs(mods, load_preset("cpu-fp32")) if s.name == name)
        path = export_graph(spec, tmp_path)
        enc = getattr(
            mods.gpt,
            "conditioning_encoder" if name == "speaker_conditioner" else "emo_conditioning_encoder",
        )
        linear, d = enc.embed.out[0], enc.embed.conv[0].out_channels
        bins = linear.in_features // d
        w = linear.weight.detach().view(linear.out_features, d, bins)
        bands = [w[:, :, lo : lo + 4].reshape(linear.out_features, -1).t() for lo in range(0, bins, 4)]
        assert len(bands) >= 3
        inits = [onnx.numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer]
        for band in bands:  # each band's slice of the Linear, as a plain MatMul weight
            assert any(a.shape == band.shape and np.array_equal(a, band.numpy()) for a in inits)
        wide = {tuple(linear.weight.shape), tuple(linear.weight.shape[::-1])}
        assert not any(a.shape in wide for a in inits)  # the wide weight is gone
        feats, lengths = spec.make_inputs(2, 37, torch.Generator().manual_seed(5))
        with torch.no_grad():  # outside the wrapper: the module's own wide Linear
            want = (
                mods.gpt.speaker_latents(feats, lengths)
                if name == "speaker_conditioner"
                else mods.gpt.emovec_of(feats, lengths)
            ).numpy()
        got = OrtSession(path, SessionOptions()).run(
            spec.output_names, {"features": feats.numpy(), "lengths": lengths.numpy()}
        )[spec.output_names[0]]
        assert rel(got, want) < 1e-5, name


def test_tiny_engine_decodes(tiny_engine: Path) -> None:
    m = read_manifest(tiny_engine)
    g = m.config["gpt"]
    tokens = dec.GPTTokens(
        g["start_text_token"], g["stop_text_token"], g["start_mel_token"], g["stop_mel_token"]
    )
    emb = dec.HostEmbeddings.load(tiny_engine, tokens)
    sess = OrtSession(tiny_engine / m.components["gpt_trunk"].file, SessionOptions(threads=1))
    d = decoder_for(sess, emb, layers=g["layers"], heads=g["heads"])
    assert isinstance(d, InplaceGPTDecoder)
    rng = np.random.default_rng(0)
    prefixes = [
        emb.prefix(rng.normal(size=(g["num_latents"], g["model_dim"])), rng.normal(size=g["model_dim"]), ids)
        for ids in ([5, 6, 7], [9, 10, 11, 12, 13, 14])
    ]
    res = d.generate_codes(prefixes, SamplingParams(beams=3, max_tokens=6), [1, 2])
    for r in res:
        assert 0 < len(r.codes) <= 6 and r.codes.max() < g["start_mel_token"]
    lat = d.latents(prefixes, [r.codes for r in res])
    assert [x.shape for x in lat] == [(len(r.codes), g["model_dim"]) for r in res]


def test_existing_out_dir_and_unsupported_preset(tiny: Path, tiny_engine: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="already exists"):
        build_engine(tiny, "cpu-fp32", tiny_engine)
    p = tmp_path / "int4.toml"
    p.write_text('name = "x"\n[components]\nvocoder = { backend = "onnxruntime-cpu", precision = "int4" }\n')
    with pytest.raises(UsageError, match="vocoder"):
        build_engine(tiny, p, tmp_path / "out")
    p.write_text('name = "x"\n[components]\ngpt = { backend = "torch", precision = "fp32" }\n')
    with pytest.raises(UsageError, match="torch"):
        build_engine(tiny, p, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_int8_preset_quantizes_and_records_error(tiny: Path, tmp_path: Path) -> None:
    out = build_engine(tiny, "cpu-int8", tmp_path / "int8", components=["gpt_trunk", "codec_vq2emb"])
    m = read_manifest(out)
    assert m.components["gpt_trunk"].precision == "int8" and m.components["gpt_trunk"].file.endswith(
        ".int8.onnx"
    )
    assert m.components["codec_vq2emb"].precision == "fp32"
    info = m.config["build"]["gpt_trunk"]
    assert 0 < info["rel_error_vs_pytorch"] < 0.2 and info["conversion"]["quantized"] > 0
    assert not (out / "gpt_trunk.onnx").exists()  # the fp32 intermediate is not shipped
    from fasttts_cli.build.quantize import count_ops

    ops = count_ops(out / m.components["gpt_trunk"].file)
    # every weight matrix quantized: 4 per block (qkv, attention out, fc, proj) and the mel head
    assert ops.get("MatMulNBits") == 4 * TINY_CONFIG["gpt"]["layers"] + 1, ops
    assert "Gemm" not in ops and "GroupQueryAttention" in ops


# ----------------------------------------------------------------------------------------- parity


_PARITY_ENGINES: dict[str, Path] = {}


@pytest.mark.slow
@pytest.mark.parity
def test_parity_engine_components(
    parity_case: ParityCase, parity_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The exported components reproduce the original's stage outputs (ONNX Runtime vs the vectors)."""
    key = str(parity_checkpoint)
    if key not in _PARITY_ENGINES:
        torch.set_num_threads(1)
        _PARITY_ENGINES[key] = build_engine(
            parity_checkpoint, "cpu-fp32", tmp_path_factory.mktemp("pe") / "e"
        )
    eng = _PARITY_ENGINES[key]
    V = parity_case

    def run(name: str, **feeds: np.ndarray) -> dict[str, np.ndarray]:
        return OrtSession(eng / f"{name}.onnx", SessionOptions(threads=1)).run(None, feeds)

    i64 = lambda *x: np.asarray(x, dtype=np.int64)  # noqa: E731
    t = V["spk_cond_emb"].shape[1]
    out = run("w2v_bert", input_features=V["w2v_input_features"], attention_mask=V["w2v_attention_mask"])
    assert rel(out["spk_cond_emb"], V["spk_cond_emb"]) < 1e-4
    if "w2v_emo_input_features" in V:
        out = run(
            "w2v_bert", input_features=V["w2v_emo_input_features"], attention_mask=V["w2v_emo_attention_mask"]
        )
        assert rel(out["spk_cond_emb"], V["emo_cond_emb"]) < 1e-4
    out = run("codec_quantize", features=V["spk_cond_emb"], mask=np.ones((1, t), np.int64))
    assert np.array_equal(out["indices"], V["codec_ref_indices"])
    assert rel(out["quantized"], V["codec_S_ref"]) < 1e-4
    out = run("campplus", fbank=V["campplus_fbank"][None])
    assert rel(out["style"], V["campplus_style"]) < 1e-4
    out = run("speaker_conditioner", features=V["spk_cond_emb"], lengths=i64(t))
    assert rel(out["latents"], V["spk_latents"]) < 1e-4
    te = V["emo_cond_emb"].shape[1]
    emo = run("emotion_conditioner", features=V["emo_cond_emb"], lengths=i64(te))["emovec"]
    base = run("emotion_conditioner", features=V["spk_cond_emb"], lengths=i64(t))["emovec"]
    assert rel(emo, V["emovec_emo"]) < 1e-4 and rel(base, V["emovec_base"]) < 1e-4
    alpha = float(V.case["emo_alpha_used"])
    assert rel(base + alpha * (emo - base), V["emovec"]) < 1e-4
    codes = V["gpt_forced_codes"][None]
    n = codes.shape[1]
    out = run("codec_vq2emb", codes=codes)
    assert rel(out["embedding"], V["s2mel_vq2emb"]) < 1e-4
    # the host passes the natural target, floor(1.72 n) (the vectors' own), and gets that many frames
    want_len = np.asarray(V["s2mel_target_len"], np.int64).reshape(-1)
    out = run(
        "s2mel_content", latent=V["gpt_latent"], vq_emb=V["s2mel_vq2emb"], code_lens=i64(n), ylens=want_len
    )
    assert out["cond"].shape[1] == int(want_len[0])
    assert rel(out["cond"], V["s2mel_cond"]) < 1e-4
    tm = V["refmel"].shape[-1]
    out = run("length_regulator", x=V["codec_S_ref"], x_lens=i64(t), y_lens=i64(tm))
    assert rel(out["y"], V["prompt_condition"]) < 1e-4
    mu = V["s2mel_cat_condition"]
    total = mu.shape[1]
    prompt = np.zeros((1, 80, total), np.float32)
    prompt[..., :tm] = V["refmel"]
    for k in (0, 12, 24) if "cfm_step_x" in V else ():  # a delta set may leave the CFM trace out
        want = 1.7 * V["cfm_step_v"][k, 0] - 0.7 * V["cfm_step_v"][k, 1]
        # prompt_lens 0: the head runs on every frame (the vectors hold the whole velocity); tm: the
        # head skips the prompt region, whose velocity the CFM discards, and the rest is unchanged
        for prompt_len in (0, tm):
            out = run(
                "dit_cfg_step",
                x=V["cfm_step_x"][k][None],
                prompt_x=prompt,
                x_lens=i64(total),
                t=V["cfm_step_t"][k : k + 1],
                style=V["campplus_style"],
                mu=mu,
                cfg_rate=np.array([0.7], np.float32),
                prompt_lens=i64(prompt_len),
            )
            assert rel(out["v"][0, :, prompt_len:], want[:, prompt_len:]) < 1e-4, (k, prompt_len)
    if "cfm_mel" in V and "bigvgan_wav" in V:
        out = run("bigvgan", mel=V["cfm_mel"], lengths=i64(V["cfm_mel"].shape[-1]))
        assert rel(out["wav"], V["bigvgan_wav"][:, 0]) < 1e-4
