"""IndexTTS-2.5 on the torch backend, on CPU torch with the tiny 2.5 checkpoint: its stages against the
ONNX 2.5 engine built from the same checkpoint (fp32: voice conditioning, prefix, forced GPT logits,
codes -> audio, whole lines for the same seeds), the languages 2.5 adds, and a 2.5 checkpoint folder
routed to it by --engine. CUDA graphs and half precision on a GPU are the acceptance run's
(tools/accept_torch.py --model indextts2.5)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fasttts_cli.indextts2.generate_loop import forced  # noqa: E402
from fasttts_cli.spec.presets import ComponentSpec, load_preset  # noqa: E402
from fasttts_cli.synth.synthesizer import SynthRequest  # noqa: E402
from tests.conftest_engine import write_test_voice  # noqa: E402

TOKENS = 12
OPTIONS = {"max_tokens": TOKENS}
TEXT = "hola mundo"
TOL = 1e-4  # fp32 PyTorch against the fp32 ONNX graphs (relative, as the export's own check)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a64 - b64) / max(np.linalg.norm(b64), 1e-12))


def fp32_torch_preset():
    p = load_preset("gpu-torch-fp16")
    return dataclasses.replace(p, components={k: ComponentSpec("torch", "fp32") for k in p.components})


@pytest.fixture(scope="module")
def voice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_voice(tmp_path_factory.mktemp("voice25t") / "voice.wav")


@pytest.fixture(scope="module")
def torch25(checkpoint25_dir: Path):
    from fasttts_cli.indextts25.synthesizer_torch import TorchSynthesizer25

    torch.set_num_threads(1)
    s = TorchSynthesizer25.load(checkpoint25_dir, fp32_torch_preset(), device="cpu")
    yield s
    s.close()


@pytest.fixture(scope="module")
def onnx25(engine25_dir: Path):
    from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer

    s = IndexTTS25Synthesizer.load(engine25_dir, threads=1)
    yield s
    s.close()


def test_voice_conditioning_and_prefix_equal_the_onnx_engine(torch25, onnx25, voice: Path) -> None:
    a, b = torch25.prepare_voice(voice).state, onnx25.prepare_voice(voice).state
    for name in ("spk_latents", "emovec", "style", "ref_mel", "prompt_condition"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape, name
        assert _rel(x, y) < TOL, name
    assert a.spk_latents.shape[0] == 1  # 2.5: one CAM++ speaker row, no conditioner latents
    front = onnx25.engine.text
    ids = front.segments(TEXT, "ja", onnx25.engine.max_text_tokens)[0]
    row = front.lang_index("ja")
    pa = torch25.engine.prefix25(a.spk_latents, a.emovec, ids, row)
    pb = onnx25.engine.prefix25(b.spk_latents, b.emovec, ids, row)
    assert pa.shape == pb.shape and _rel(pa, pb) < TOL


def test_forced_gpt_logits_equal_the_onnx_trunk(torch25, onnx25, voice: Path) -> None:
    cond = onnx25.prepare_voice(voice).state
    e = onnx25.engine
    ids = e.text.segments(TEXT, "es", e.max_text_tokens)[0]
    prefix = e.prefix25(cond.spk_latents, cond.emovec, ids, e.text.lang_index("es"))
    codes = np.random.default_rng(0).integers(0, 8000, size=9)
    lt, ht = forced(torch25.engine.gpt, prefix, codes)
    lo, ho = forced(e.decoder, prefix, codes)
    assert lt.shape == lo.shape == (codes.size + 1, torch25.engine.gpt.vocab)
    assert _rel(lt, lo) < TOL and _rel(ht, ho) < TOL


def test_codes_to_wavs_equal_the_onnx_engine_and_render_to_frames(torch25, onnx25, voice: Path) -> None:
    cond = onnx25.prepare_voice(voice).state
    rng = np.random.default_rng(1)
    codes = [rng.integers(0, 8000, size=n) for n in (7, 11)]
    kw = {"steps": 3, "cfg_rate": 0.7}
    args = ([cond, cond], [None, None], codes)
    wt = torch25.engine.codes_to_wavs(*args, [np.random.default_rng(s) for s in (5, 6)], **kw)
    wo = onnx25.engine.codes_to_wavs(*args, [np.random.default_rng(s) for s in (5, 6)], **kw)
    hop = torch25.hop
    for n, x, y in zip((7, 11), wt, wo, strict=True):
        assert x.shape == y.shape == (int(2 * n * 1.72) * hop,)  # 2.5's natural length
        assert _rel(x, y) < 1e-3  # 3 CFM steps and BigVGAN compound the 1e-5 steps
    (w,) = torch25.engine.codes_to_wavs(
        [cond], [None], codes[:1], [np.random.default_rng(5)], **kw, frames=[30]
    )
    assert w.shape == (30 * hop,)


def test_it_speaks_ja_es_ar_and_lines_equal_the_onnx_engine(torch25, onnx25, voice: Path) -> None:
    def run(s) -> dict[str, np.ndarray]:
        v = s.prepare_voice(voice)
        reqs = [SynthRequest(g, TEXT, v, seed=3, options=OPTIONS, lang=g) for g in ("ja", "es", "ar")]
        res = s.synthesize(reqs)
        assert all(r.ok for r in res), [r.error for r in res]
        return {r.line_id: r.audio for r in res}

    wt, wo = run(torch25), run(onnx25)
    for g in ("ja", "es", "ar"):
        assert wt[g].dtype == np.float32 and np.isfinite(wt[g]).all()
        assert wt[g].shape == wo[g].shape  # the same codes: the same sampler on the same logits
        assert _rel(wt[g], wo[g]) < 1e-3
    assert not np.array_equal(wt["ja"], wt["es"]) and not np.array_equal(wt["es"], wt["ar"])
    assert "indextts25-torch@" in torch25.identity() and torch25.needs_language


def test_a_line_without_a_language_names_the_flag(torch25, voice: Path) -> None:
    (r,) = torch25.synthesize([SynthRequest("x", TEXT, torch25.prepare_voice(voice), seed=1)])
    assert not r.ok and "--lang" in str(r.error)


def test_a_2_5_checkpoint_folder_routes_to_the_2_5_torch_engine(
    checkpoint25_dir: Path, tmp_path: Path
) -> None:
    from fasttts_cli.app.engine_load import load_synthesizer, token_counter
    from fasttts_cli.indextts25.synthesizer_torch import TorchSynthesizer25
    from fasttts_cli.synth.engine_select import TORCH, select_engine

    sel = select_engine(str(checkpoint25_dir))
    assert sel.kind == TORCH and sel.path == checkpoint25_dir
    count, source = token_counter(sel, "gpu-torch-bf16")
    assert source == "checkpoint tokenizer" and count(TEXT) > 0
    s = load_synthesizer(sel, "gpu-torch-bf16", cache_dir=tmp_path)
    try:
        assert isinstance(s, TorchSynthesizer25) and s.engine.gpt.dtype == torch.bfloat16
    finally:
        s.close()


def test_the_cli_speaks_japanese_from_a_2_5_checkpoint_folder(
    capsys: pytest.CaptureFixture[str], checkpoint25_dir: Path, voice: Path, tmp_path: Path
) -> None:
    import json

    import soundfile as sf

    from fasttts_cli.cli.commands import main

    out = tmp_path / "ja.wav"
    argv = ["synth", TEXT, "--voice", str(voice), "-o", str(out), "--engine", str(checkpoint25_dir)]
    with pytest.raises(SystemExit) as e:
        main([*argv, "--preset", "gpu-torch-fp16", "--lang", "ja", "--json"])
    r = json.loads(capsys.readouterr().out)
    assert e.value.code == 0, r
    assert r["engine"]["kind"] == "torch" and r["engine"]["identity"].startswith("indextts25-torch@")
    audio, sr = sf.read(str(out))
    assert sr == 22050 and audio.size > 0


def test_doctor_names_a_2_5_checkpoint_folder_as_a_torch_engine(
    checkpoint25_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fasttts_cli.app.doctor import check_engines
    from fasttts_cli.synth.engine_select import ENV_VAR

    monkeypatch.setenv(ENV_VAR, str(checkpoint25_dir))
    (row,) = [c for c in check_engines() if c.name == f"engine {checkpoint25_dir.name}"]
    assert "indextts2.5 checkpoint directory" in row.detail and "random weights" in row.detail
    assert "manifest.json" not in row.detail  # not reported as a broken engine folder
