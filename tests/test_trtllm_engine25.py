"""IndexTTS-2.5 on the w8a16 / w4a16 presets: the GPT on TensorRT-LLM, the rest on TensorRT (both through
the fakes here: the numpy reference backend of the GPT worker, the fake TensorRT). The converted GPT takes
the whole 2.5 prefix through its prompt table (MergedLayout.text_in_prompt): 3 conditioning rows and the
text rows, each with the line's language row the host added; its logits equal the ONNX trunk's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from fasttts_cli.indextts2.generate_loop import forced  # noqa: E402
from fasttts_cli.indextts2.gpt_trtllm import TRTLLM_BACKEND_ENV, TRTLLM_PYTHON_ENV, LinePrompt  # noqa: E402
from fasttts_cli.synth.synthesizer import SynthRequest  # noqa: E402
from fasttts_cli.tools.fakes import tensorrt as fake_trt  # noqa: E402
from tests.conftest_engine import write_test_voice  # noqa: E402

pytestmark = pytest.mark.gpu_fake
LANGS = ("ja", "es", "ar")
TEXT = "hola mundo"


@pytest.fixture(scope="module")
def llm_engine25(checkpoint25_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fasttts_cli.build.export import build_engine

    torch.set_num_threads(1)
    mp = pytest.MonkeyPatch()
    mp.setenv(TRTLLM_BACKEND_ENV, "reference")
    try:
        with fake_trt.install():
            return build_engine(checkpoint25_dir, "w8a16", tmp_path_factory.mktemp("llm25") / "w8a16")
    finally:
        mp.undo()


@pytest.fixture
def reference_worker(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(TRTLLM_BACKEND_ENV, "reference")
    with fake_trt.install():
        yield


def test_the_gpt_is_a_tensorrt_llm_folder_that_takes_the_text_through_its_prompt_table(
    llm_engine25: Path,
) -> None:
    m = json.loads((llm_engine25 / "manifest.json").read_text())
    assert m["model_id"] == "indextts2.5" and "gpt_trunk" not in m["components"]
    assert m["components"]["gpt_trtllm"]["backend"] == "tensorrt-llm"
    assert m["components"]["gpt_trtllm"]["precision"] == "w8a16"
    lay = json.loads((llm_engine25 / "gpt_trtllm" / "checkpoint" / "config.json").read_text())["indextts2"]
    assert lay["text_in_prompt"] == 1 and lay["n_conds"] == 3 + lay["text_pos_rows"]


def test_forced_logits_equal_the_onnx_trunk_on_a_2_5_prefix(
    llm_engine25: Path, engine25_dir: Path, tmp_path: Path, reference_worker: None
) -> None:
    from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer

    voice = write_test_voice(tmp_path / "v.wav")
    ref = IndexTTS25Synthesizer.load(engine25_dir, threads=1)
    s = IndexTTS25Synthesizer.load(llm_engine25, threads=1)
    try:
        cond = ref.prepare_voice(voice).state
        e, r = s.engine, ref.engine
        ids = r.text.segments(TEXT, "ar", r.max_text_tokens)[0]
        row = r.text.lang_index("ar")
        prompt = e.prefix25(cond.spk_latents, cond.emovec, ids, row)
        prefix = r.prefix25(cond.spk_latents, cond.emovec, ids, row)
        assert isinstance(prompt, LinePrompt) and len(prompt) == prefix.shape[0]
        codes = np.random.default_rng(0).integers(0, 8000, size=10)
        lt, ht = forced(e.decoder, prompt, codes)
        lo, ho = forced(r.decoder, prefix, codes)
    finally:
        s.close()
        ref.close()
    # the w8a16 checkpoint holds the GPT's float weights in fp16 (its activation type), which the reference
    # backend runs: fp16 weight rounding, 6e-4 here; another language's row gives 0.85
    assert lt.shape == lo.shape and (lt.argmax(1) == lo.argmax(1)).all()
    assert float(np.linalg.norm(lt - lo) / np.linalg.norm(lo)) < 2e-3
    assert float(np.linalg.norm(ht - ho) / np.linalg.norm(ho)) < 2e-3


def test_it_speaks_ja_es_ar_in_one_batch(llm_engine25: Path, tmp_path: Path, reference_worker: None) -> None:
    from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer

    s = IndexTTS25Synthesizer.load(llm_engine25, threads=1)
    try:
        v = s.prepare_voice(write_test_voice(tmp_path / "v.wav"))
        opts = {"max_tokens": 12, "beams": 3}
        res = s.synthesize([SynthRequest(g, TEXT, v, seed=3, options=opts, lang=g) for g in LANGS])
        kind = type(s.engine.decoder).__name__
    finally:
        s.close()
    assert kind == "TrtllmGPT"
    assert all(r.ok for r in res), [r.error for r in res]
    assert all(r.audio.size == int(2 * r.n_tokens * 1.72) * s.hop and np.isfinite(r.audio).all() for r in res)
    assert not np.array_equal(res[0].audio, res[1].audio)


def test_without_the_trtllm_environment_the_build_says_what_to_set(
    checkpoint25_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fasttts_cli.build.export import build_engine
    from fasttts_cli.errors import MissingDependencyError

    monkeypatch.delenv(TRTLLM_PYTHON_ENV, raising=False)
    monkeypatch.delenv(TRTLLM_BACKEND_ENV, raising=False)
    with pytest.raises(MissingDependencyError, match=TRTLLM_PYTHON_ENV):
        build_engine(checkpoint25_dir, "w4a16", tmp_path / "e")
    assert not (tmp_path / "e").exists()
