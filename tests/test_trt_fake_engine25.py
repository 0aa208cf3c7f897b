"""IndexTTS-2.5 on the fp16 (TensorRT) preset through the fake TensorRT: `fasttts build` plans every 2.5
graph the v2 way (fp16 with fp32 islands, strongly typed, a profile per component), the profiles cover
2.5's shapes (a batch of decoded codes through the length regulator, 2n frames per n codes), and the 2.5
engine runs its lines on TensorRT sessions opened through the backend registry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from fasttts_cli.build import tensorrt_build as tb  # noqa: E402
from fasttts_cli.spec.presets import load_preset  # noqa: E402
from fasttts_cli.synth.synthesizer import SynthRequest  # noqa: E402
from fasttts_cli.tools.fakes import tensorrt as fake_trt  # noqa: E402
from tests.conftest_engine import write_test_voice  # noqa: E402

pytestmark = pytest.mark.gpu_fake
LANGS = ("ja", "es", "ar")


@pytest.fixture(scope="module")
def fp16_engine25(checkpoint25_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fasttts_cli.build.export import build_engine

    torch.set_num_threads(1)
    with fake_trt.install():
        return build_engine(
            checkpoint25_dir, "fp16", tmp_path_factory.mktemp("trt25") / "fp16", overwrite=True
        )


def test_every_2_5_component_is_a_tensorrt_plan_at_the_presets_precision(fp16_engine25: Path) -> None:
    m = json.loads((fp16_engine25 / "manifest.json").read_text())
    assert m["model_id"] == "indextts2.5"
    comps = m["components"]
    assert {c["backend"] for c in comps.values()} == {"tensorrt"}
    for name, c in comps.items():
        assert c["file"] == f"{name}.plan" and fake_trt.plan_path_is_fake(fp16_engine25 / c["file"])
    want = {"gpt_trunk": "fp16", "dit_cfg_step": "fp16", "length_regulator": "fp16", "w2v_bert": "fp16"}
    want |= {"codec_decode": "fp32", "bigvgan": "fp32", "campplus": "fp32"}
    assert {k: comps[k]["precision"] for k in want} == want
    assert m["config"]["build"]["gpt_trunk"]["precision"] == "fp16"  # converted with fp32 islands


def test_the_profiles_cover_2_5_shapes(fp16_engine25: Path) -> None:
    m = json.loads((fp16_engine25 / "manifest.json").read_text())
    lim = load_preset("fp16").limits
    prof = {k: v["profile"] for k, v in m["config"]["tensorrt"].items()}
    # the length regulator stretches a whole batch of decoded codes (2n frames), not just one prompt
    assert prof["length_regulator"]["x"][2][:2] == [lim.max_batch, 2 * (lim.max_mel_tokens + 1)]
    assert prof["codec_decode"]["codes"][2] == [lim.max_batch, lim.max_mel_tokens + 1]
    v2 = tb.axis_ranges("dit_cfg_step", lim, {"s2mel": {}})["time"].max
    v25 = tb.axis_ranges("dit_cfg_step", lim, m["config"])["time"].max
    assert v25 - v2 == int(1.72 * 2 * lim.max_mel_tokens) - int(1.72 * lim.max_mel_tokens)
    assert prof["gpt_trunk"]["inputs_embeds"][2][1] <= tb.PREFILL_CHUNK


def test_the_2_5_engine_speaks_on_tensorrt_sessions(
    fp16_engine25: Path, engine25_dir: Path, tmp_path: Path
) -> None:
    from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer

    voice = write_test_voice(tmp_path / "v.wav")
    ref = IndexTTS25Synthesizer.load(engine25_dir, threads=1)
    with fake_trt.install():
        s = IndexTTS25Synthesizer.load(fp16_engine25, threads=1)
        try:
            v = s.prepare_voice(voice)
            reqs = [
                SynthRequest(g, "hola mundo", v, seed=3, options={"max_tokens": 12}, lang=g) for g in LANGS
            ]
            res = s.synthesize(reqs)  # one batch of 3 rows through codec_decode and the length regulator
            opened = {k: type(x).__name__ for k, x in s.engine.sessions.opened.items()}
            rv = ref.prepare_voice(voice).state
            codes = [np.arange(5, 16), np.arange(100, 107)]
            noise = [np.random.default_rng(k) for k in (1, 2)]
            w16 = s.engine.codes_to_wavs([rv, rv], [None, None], codes, noise, steps=3)
        finally:
            s.close()
    assert all(r.ok for r in res), [r.error for r in res]
    assert all(r.audio.size == int(2 * r.n_tokens * 1.72) * s.hop and np.isfinite(r.audio).all() for r in res)
    assert set(opened.values()) == {"TrtSession"} and {"codec_decode", "gpt_trunk"} <= set(opened)
    w32 = ref.engine.codes_to_wavs(
        [rv, rv], [None, None], codes, [np.random.default_rng(k) for k in (1, 2)], steps=3
    )
    ref.close()
    for a, b in zip(w16, w32, strict=True):
        assert a.shape == b.shape
        err = float(np.linalg.norm(a - b) / np.linalg.norm(b))
        assert err < 1e-2, err  # fp16 DiT / length regulator / w2v-BERT against the fp32 engine


def test_a_torch_preset_is_refused_by_the_build_it_needs_none(checkpoint25_dir: Path, tmp_path: Path) -> None:
    from fasttts_cli.build.export import build_engine
    from fasttts_cli.errors import UsageError

    with pytest.raises(UsageError, match="needs no engine") as e:
        build_engine(checkpoint25_dir, "gpu-torch-bf16", tmp_path / "e")
    assert "--engine" in (e.value.hint or "")
