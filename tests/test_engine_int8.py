"""The cpu-int8 engine end to end on the tiny checkpoint: which graphs take which integer form, the
integer DiT's one-line-per-call rule (a line's audio never depends on its batch-mates), its distance
from fp32, and s2mel pieces that follow the engine's DiT precision."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.build.quantize import count_ops
from tests.conftest_engine import *  # noqa: F403

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def int8_engine_dir(tiny_engine_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fasttts_cli.build.quantize import convert_engine
    from fasttts_cli.spec.presets import load_preset

    out = tmp_path_factory.mktemp("int8") / "engine"
    return convert_engine(tiny_engine_dir, out, load_preset("cpu-int8"))


def test_integer_forms_per_component(int8_engine_dir: Path) -> None:
    from fasttts_cli.spec.engine_folder import read_manifest

    m = read_manifest(int8_engine_dir)
    # many rows per call: dynamic int8 (weights int8 per channel, activations quantized per call)
    for name in ("w2v_bert", "speaker_conditioner", "emotion_conditioner", "dit_cfg_step"):
        assert m.components[name].precision == "int8"
        assert count_ops(int8_engine_dir / m.components[name].file).get("MatMulInteger", 0) > 0, name
        rep = m.config["precision"][name]
        assert rep["method"] == "dynamic" and rep["per_channel"] is True
    # the GPT keeps per-row blocks; BigVGAN stays float
    assert count_ops(int8_engine_dir / m.components["gpt_trunk"].file).get("MatMulNBits", 0) > 0
    voc = count_ops(int8_engine_dir / m.components["bigvgan"].file)
    assert not {"MatMulInteger", "ConvInteger", "MatMulNBits"} & set(voc)


def _lines(e, voice_wav: Path, voice_wav2: Path):
    from fasttts_cli.indextts2.engine import noise_generator

    vs = [e.voice_conditioning(e.speaker_audio(w), e.emotion_audio(w)) for w in (voice_wav, voice_wav2)]
    rng = np.random.default_rng(4)
    codes = [rng.integers(0, 8192, n) for n in (9, 4)]
    prefixes = [e.prefix(v.spk_latents, v.emovec, ids) for v, ids in zip(vs, ([5, 6, 7], [8]), strict=True)]
    return vs, prefixes, codes, lambda: [noise_generator(i, 0) for i in range(2)]


def test_integer_dit_takes_one_line_per_call(
    int8_engine_dir: Path, voice_wav: Path, voice_wav2: Path
) -> None:
    from fasttts_cli.indextts2.engine import IndexTTS2Engine

    e = IndexTTS2Engine.load(int8_engine_dir, threads=1)
    # even a run-time preset asking for whole-batch calls gets one line per call
    e.preset = replace(e.preset, s2mel=replace(e.preset.s2mel, rows_per_call=0))
    assert e.s2mel_rows(5) == 1
    vs, prefixes, codes, noise = _lines(e, voice_wav, voice_wav2)
    before = e.times.calls.get("vocoder", 0)
    both = e.codes_to_wavs(vs, prefixes, codes, noise(), steps=3)
    assert e.times.calls["vocoder"] - before == 2
    for i in range(2):
        (one,) = e.codes_to_wavs([vs[i]], [prefixes[i]], [codes[i]], [noise()[i]], steps=3)
        np.testing.assert_array_equal(both[i], one)


def test_integer_dit_stays_near_fp32(
    tiny_engine_dir: Path, int8_engine_dir: Path, voice_wav: Path, voice_wav2: Path
) -> None:
    """Same conditioning and start noise through both engines' 25-step CFM; the mel moves by a small
    fraction of its range (the full-size random-weight figure is in README: 0.19%)."""
    from fasttts_cli.indextts2.engine import IndexTTS2Engine

    f, q = (IndexTTS2Engine.load(d, threads=1) for d in (tiny_engine_dir, int8_engine_dir))
    vs, prefixes, codes, _ = _lines(f, voice_wav, voice_wav2)
    lat = f.latent(prefixes[:1], codes[:1])
    cond, ylens = f.s2mel_content(lat, codes[:1])
    inp = f.cfm_inputs(vs[:1], cond, ylens)
    z = np.random.default_rng(1).standard_normal((1, 80, int(inp.x_lens[0]))).astype(np.float32)
    a, b = f.cfm(inp, z, steps=25), q.cfm(inp, z, steps=25)
    p = int(inp.prompt_lens[0])
    a, b = a[0, :, p:], b[0, :, p:]
    assert not np.array_equal(a, b)  # really a different graph
    mae = float(np.abs(a - b).mean())
    assert mae < 0.01 * float(a.max() - a.min()), (mae, float(a.max() - a.min()))  # 0.14-0.32%


def test_pieces_follow_the_engine_dit_precision(
    int8_engine_dir: Path, tiny_checkpoint_dir: Path, tmp_path: Path
) -> None:
    import shutil

    import yaml

    from fasttts_cli.build.s2mel_pieces import PIECES_DIR, export_pieces_into_engine
    from fasttts_cli.nets.s2mel import load_s2mel

    engine = Path(shutil.copytree(int8_engine_dir, tmp_path / "engine"))
    cfg = yaml.safe_load((tiny_checkpoint_dir / "config.yaml").read_text(encoding="utf-8"))["s2mel"]
    dit = load_s2mel(tiny_checkpoint_dir / "s2mel.pth", cfg).cfm.estimator
    index = json.loads(export_pieces_into_engine(engine, dit).read_text(encoding="utf-8"))
    for name, spec in index["pieces"].items():
        ops = count_ops(engine / PIECES_DIR / spec["file"])
        if name.startswith("diag_"):
            assert spec["precision"] == "fp32" and "MatMulInteger" not in ops, name
        elif name.startswith(("attn_", "ffn_")):
            assert spec["precision"] == "int8" and ops.get("MatMulInteger", 0) > 0, name
