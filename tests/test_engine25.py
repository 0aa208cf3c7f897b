"""The IndexTTS-2.5 engine end to end on the tiny 2.5 checkpoint: build, torch-free synthesis in the
languages 2.5 adds, the two-phase contract, and --lang through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.cli.commands import main
from tests.conftest_engine import write_test_voice

REPO = Path(__file__).resolve().parent.parent
TOKENS = 12  # codes per segment: short lines, and every line runs to it (stop bias 0)
OPTIONS = {"max_tokens": TOKENS}
TEXT = "hola mundo"  # one text for every language: what differs is the language alone


@pytest.fixture(scope="session")
def voice25(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_voice(tmp_path_factory.mktemp("voice25") / "voice.wav")


@pytest.fixture(scope="session")
def synth25(engine25_dir: Path):
    from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer

    s = IndexTTS25Synthesizer.load(engine25_dir, threads=1)
    yield s
    s.close()


def _requests(synth, voice_path: Path, langs: list[str], text: str = TEXT) -> list:
    from fasttts_cli.synth.synthesizer import SynthRequest

    voice = synth.prepare_voice(voice_path)
    return [SynthRequest(f"l{i}", text, voice, seed=3, options=OPTIONS, lang=g) for i, g in enumerate(langs)]


def test_the_build_writes_a_2_5_engine_folder(engine25_dir: Path) -> None:
    m = json.loads((engine25_dir / "manifest.json").read_text())
    assert m["model_id"] == "indextts2.5" and str(m["model_version"]) == "2.5"
    comps = set(m["components"])
    assert {"codec_decode", "gpt_trunk", "length_regulator", "emotion_conditioner", "w2v_bert"} <= comps
    assert not comps & {"codec_quantize", "codec_vq2emb", "speaker_conditioner", "s2mel_content"}
    assert (engine25_dir / m["files"]["tokenizer"]).is_file()
    lang = np.load(engine25_dir / m["files"]["gpt_lang_embedding"])
    assert lang.shape == (m["config"]["gpt"]["lang_rows"], m["config"]["gpt"]["model_dim"])


def test_it_speaks_ja_es_ar_torch_free_and_the_language_changes_the_audio(
    engine25_dir: Path, voice25: Path, tmp_path: Path
) -> None:
    out = tmp_path / "wavs.npz"
    code = (
        "import sys, numpy as np\n"
        "from pathlib import Path\n"
        "from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer\n"
        "from fasttts_cli.synth.synthesizer import SynthRequest\n"
        f"s = IndexTTS25Synthesizer.load({str(engine25_dir)!r}, threads=1)\n"
        f"v = s.prepare_voice(Path({str(voice25)!r}))\n"
        f"rs = [SynthRequest(g, {TEXT!r}, v, seed=3, options={OPTIONS!r}, lang=g)\n"
        "      for g in ('ja', 'es', 'ar')]\n"
        "res = s.synthesize(rs)\n"
        "assert all(r.ok for r in res), [r.error for r in res]\n"
        f"np.savez({str(out)!r}, **{{r.line_id: r.audio for r in res}})\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    wavs = dict(np.load(out))
    assert set(wavs) == {"ja", "es", "ar"}
    for w in wavs.values():
        assert w.dtype == np.float32 and w.size > 0 and np.isfinite(w).all()
    assert not np.array_equal(wavs["ja"], wavs["es"])
    assert not np.array_equal(wavs["es"], wavs["ar"])
    assert not np.array_equal(wavs["ja"], wavs["ar"])


def test_the_natural_length_is_int_2n_times_1_72_frames(synth25, voice25: Path) -> None:
    (plan,) = synth25.plan(_requests(synth25, voice25, ["es"]))
    assert plan.ok and plan.n_tokens == TOKENS
    assert plan.natural_samples == int(2 * TOKENS * 1.72) * synth25.hop


def test_plan_and_render_at_the_natural_length_equal_synthesize(synth25, voice25: Path) -> None:
    from fasttts_cli.synth.synthesizer import RenderRequest

    reqs = _requests(synth25, voice25, ["ja", "ar"])
    whole = synth25.synthesize(reqs)
    plans = synth25.plan(reqs)
    parts = synth25.render([RenderRequest(r, p) for r, p in zip(reqs, plans, strict=True)])
    for a, b, p in zip(whole, parts, plans, strict=True):
        assert a.ok and b.ok
        assert np.array_equal(a.audio, b.audio) and a.audio.size == p.natural_samples


@pytest.mark.parametrize("frames", [37, 90])
def test_render_to_frames_gives_exactly_frames_times_hop_samples(synth25, voice25: Path, frames: int) -> None:
    from fasttts_cli.synth.synthesizer import RenderRequest

    assert synth25.renders_to_length
    reqs = _requests(synth25, voice25, ["es"])
    (plan,) = synth25.plan(reqs)
    (res,) = synth25.render([RenderRequest(reqs[0], plan, frames=frames)])
    assert res.ok, res.error
    assert res.audio.size == frames * synth25.hop


def test_a_line_without_a_language_fails_with_the_flag_named(synth25, voice25: Path) -> None:
    (res,) = synth25.synthesize(_requests(synth25, voice25, [None]))  # type: ignore[list-item]
    assert not res.ok and "--lang" in (res.error or "")


def _synth_cli(capsys: pytest.CaptureFixture[str], engine: Path, voice: Path, out: Path, lang: str):
    with pytest.raises(SystemExit) as e:
        main(
            [
                "synth",
                TEXT,
                "--voice",
                str(voice),
                "-o",
                str(out),
                "--engine",
                str(engine),
                "--lang",
                lang,
                "--json",
            ]
        )
    text = capsys.readouterr().out
    return int(e.value.code), (json.loads(text) if text.strip() else {})


@pytest.mark.parametrize("lang", ["fra", "und"])
def test_the_cli_refuses_a_language_2_5_cannot_speak_or_und(
    capsys: pytest.CaptureFixture[str], engine25_dir: Path, voice25: Path, tmp_path: Path, lang: str
) -> None:
    out = tmp_path / "x.wav"
    code, r = _synth_cli(capsys, engine25_dir, voice25, out, lang)
    assert code == 2 and f"--lang {lang}" in r["error"] and "ja" in r["error"]
    assert not out.exists()


def test_the_cli_speaks_japanese(
    capsys: pytest.CaptureFixture[str], engine25_dir: Path, voice25: Path, tmp_path: Path
) -> None:
    import soundfile as sf

    out = tmp_path / "ja.wav"
    code, r = _synth_cli(capsys, engine25_dir, voice25, out, "ja")
    assert code == 0, r
    assert r["engine"]["kind"] == "indextts2.5"
    audio, sr = sf.read(str(out))
    assert sr == 22050 and audio.size > 0


# ------------------------------------------------------------------------------------ integer presets

# preset -> the GPT trunk's MatMulNBits bits; both presets run the DiT, w2v-BERT and the emotion
# conditioner in dynamic int8 and keep the codec decode, the length regulator and BigVGAN fp32
INTEGER_PRESETS = {"cpu-int8": 8, "cpu-int4": 4}


@pytest.mark.parametrize("preset", sorted(INTEGER_PRESETS))
def test_fasttts_build_an_integer_preset_and_it_speaks(
    capsys: pytest.CaptureFixture[str], checkpoint25_dir: Path, voice25: Path, tmp_path: Path, preset: str
) -> None:
    from fasttts_cli.build.quantize import count_ops
    from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer
    from fasttts_cli.spec.engine_folder import read_manifest

    out = tmp_path / "engine"
    argv = ["build", "--checkpoint", str(checkpoint25_dir), "--preset", preset, "--out", str(out), "--json"]
    with pytest.raises(SystemExit) as e:
        main(argv)
    r = json.loads(capsys.readouterr().out)
    assert int(e.value.code) == 0 and r["ok"], r
    m = read_manifest(out)
    assert m.model_id == "indextts2.5" and m.preset == preset
    prec = {n: c.precision for n, c in m.components.items()}
    assert prec["gpt_trunk"] == preset.removeprefix("cpu-")
    assert count_ops(out / m.components["gpt_trunk"].file).get("MatMulNBits", 0) > 0
    for name in ("w2v_bert", "emotion_conditioner", "dit_cfg_step"):
        assert prec[name] == "int8", name
        assert count_ops(out / m.components[name].file).get("MatMulInteger", 0) > 0, name
    for name in ("codec_decode", "length_regulator", "bigvgan", "campplus"):
        assert prec[name] == "fp32", name
    synth = IndexTTS25Synthesizer.load(out, threads=1)
    try:
        reqs = _requests(synth, voice25, ["es", "ja"])
        res = synth.synthesize(reqs)
        assert all(x.ok for x in res), [x.error for x in res]
        for x in res:
            assert x.audio.size == int(2 * TOKENS * 1.72) * synth.hop and np.isfinite(x.audio).all()
            assert np.abs(x.audio).max() > 0
    finally:
        synth.close()


def test_convert_engine_derives_the_integer_presets_from_the_fp32_2_5_engine(
    engine25_dir: Path, voice25: Path, tmp_path: Path
) -> None:
    from fasttts_cli.build.quantize import convert_engine
    from fasttts_cli.indextts25.synthesizer import IndexTTS25Synthesizer
    from fasttts_cli.spec.presets import load_preset

    out = convert_engine(engine25_dir, tmp_path / "int8", load_preset("cpu-int8"))
    synth = IndexTTS25Synthesizer.load(out, threads=1)
    try:
        assert synth.engine.manifest.components["codec_decode"].precision == "fp32"
        (res,) = synth.synthesize(_requests(synth, voice25, ["ar"]))
        assert res.ok, res.error
        assert res.audio.size == int(2 * TOKENS * 1.72) * synth.hop and np.isfinite(res.audio).all()
    finally:
        synth.close()
