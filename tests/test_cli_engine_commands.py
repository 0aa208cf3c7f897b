"""The engine-side commands' error contract (build, bench, calibrate, emotion flags) and engine selection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasttts_cli.cli.commands import main
from fasttts_cli.synth.engine_select import TORCH, select_engine
from tests.conftest_engine import *  # noqa: F403 (fixtures: tiny_engine_dir)

REPO = Path(__file__).resolve().parent.parent
ALICE = REPO / "samples" / "voices" / "alice.wav"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr().out
    return int(e.value.code), (json.loads(out) if out.strip() else {})


def test_build_names_a_missing_checkpoint(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, r = run(
        capsys, "build", "--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "e"), "--json"
    )
    assert code == 2 and not r["ok"] and "--checkpoint" in r["error"] and "nope" in r["error"]


def test_bench_needs_an_engine_or_random_weights(capsys: pytest.CaptureFixture[str]) -> None:
    code, r = run(capsys, "bench", "--json")
    assert code == 2 and "--engine" in r["error"]
    code, r = run(capsys, "bench", "--random-weights", "--batch", "1,x", "--json")
    assert code == 2 and "--batch" in r["error"]


def test_calibrate_without_pieces_asks_for_the_checkpoint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, r = run(
        capsys, "calibrate", "--engine", str(tmp_path), "--voice", str(ALICE), "--text", "Hi.", "--json"
    )
    assert code == 3 and "manifest.json" in r["error"]  # not an engine folder at all
    code, r = run(
        capsys,
        "calibrate",
        "--engine",
        str(tmp_path),
        "--voice",
        str(ALICE),
        "--text",
        "Hi.",
        "--level",
        "T9",
        "--json",
    )
    assert code == 2 and "--level T9" in r["error"]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--emotion-vector", "1,2"], "--emotion-vector"),
        (["--emotion-vector", "0,0,0,0,0,0,0,2"], "--emotion-vector"),
        (["--emotion-alpha", "1.5"], "--emotion-alpha"),
        (["--emotion-audio", "missing.wav"], "--emotion-audio"),
    ],
)
def test_emotion_flags_are_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], needle: str
) -> None:
    code, r = run(
        capsys, "synth", "Hi there.", "--voice", str(ALICE), "-o", str(tmp_path / "x.wav"), *flags, "--json"
    )
    assert code == 2 and needle in r["error"]
    assert not (tmp_path / "x.wav").exists()


def test_a_checkpoint_directory_selects_the_torch_backend(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("gpt: {}\n")
    (tmp_path / "gpt.pth").write_bytes(b"")
    sel = select_engine(str(tmp_path), env={})
    assert sel.kind == TORCH and sel.path == tmp_path


# ---- honest random-weight engines (the session's tiny engine, tests/conftest_engine.py) ---------------

SAMPLES = REPO / "samples"
RANDOM_WARNING = "has random weights: it does not clone and speaks noise"


def test_synth_failure_flags_are_checked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "x.wav"
    code, r = run(
        capsys, "synth", "Hi.", "--voice", str(ALICE), "-o", str(out), "--on-line-failure", "skip", "--json"
    )
    assert code == 2 and "--on-line-failure" in r["error"] and "skip" in r["hint"]
    code, r = run(
        capsys, "synth", "Hi.", "--voice", str(ALICE), "-o", str(out), "--max-retries", "-1", "--json"
    )
    assert code == 2 and "--max-retries" in r["error"]
    assert not out.exists()


class _Failing:
    """A synthesizer whose every line fails: synth's failure policy decides what is written."""

    name = "failing"
    clones_voice = True
    sample_rate = 16000

    def __init__(self) -> None:
        self.calls = 0

    def identity(self) -> str:
        return "failing"

    def prepare_voice(self, path: Path, *, name: str | None = None, emotion=None):
        from fasttts_cli.synth.synthesizer import Voice

        return Voice(name="v", path=path, audio_sha256="0" * 64)

    def synthesize(self, requests):
        from fasttts_cli.synth.synthesizer import SynthResult

        self.calls += 1
        return [SynthResult(r.line_id, None, self.sample_rate, error="boom") for r in requests]

    def close(self) -> None:
        pass


def test_synth_on_line_failure_silence_writes_the_lines_length(tmp_path: Path) -> None:
    import soundfile as sf

    from fasttts_cli.app.single_line import SynthOptions, synth_one
    from fasttts_cli.errors import SynthesisError

    out = tmp_path / "x.wav"
    fail = _Failing()
    with pytest.raises(SynthesisError):
        synth_one(SynthOptions("Hello there.", ALICE, out, max_retries=1), synthesizer=fail)
    assert fail.calls == 2 and not out.exists()  # one try + --max-retries 1
    fail = _Failing()
    r = synth_one(
        SynthOptions("Hello there.", ALICE, out, max_retries=0, on_line_failure="silence"), synthesizer=fail
    )
    assert fail.calls == 1 and r["failed"] and r["error"] == "boom" and r["retries"] == 0
    audio, sr = sf.read(str(out))
    assert sr == 16000 and len(audio) > 0.5 * sr and not audio.any()
    assert r["engine"]["random_weights"] is False and r["engine"]["clones_voice"] is True


def test_manifests_without_the_field_are_real_weights() -> None:
    from fasttts_cli.spec.engine_folder import Manifest

    m = Manifest.from_dict(
        {
            "model_id": "indextts2",
            "model_version": "2.0",
            "checkpoint_digest": "0" * 64,
            "preset": "cpu-fp32",
            "preset_build_keys": {},
            "components": {},
        }
    )
    assert m.random_weights is False


def test_a_random_engine_says_so_and_synth_exits_0(
    tiny_engine_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from fasttts_cli.indextts2.synthesizer import RANDOM_MAX_TOKENS, IndexTTS2Synthesizer

    s = IndexTTS2Synthesizer.load(tiny_engine_dir)
    assert s.random_weights and s.engine.preset.decode.max_tokens == RANDOM_MAX_TOKENS
    out = tmp_path / "x.wav"
    # this tiny checkpoint never stops (stop bias 0): every line hits the token limit, which the runaway
    # guard would retry and then fail; random weights skip the guard instead
    code, r = run(
        capsys,
        "synth",
        "Hi there.",
        "--voice",
        str(ALICE),
        "-o",
        str(out),
        "--engine",
        str(tiny_engine_dir),
        "--json",
    )
    assert code == 0 and out.is_file() and r["retries"] == 0 and not r["failed"]
    assert r["engine"]["random_weights"] is True and r["engine"]["clones_voice"] is False
    assert any(RANDOM_WARNING in w for w in r["warnings"])


def test_doctor_warns_about_a_random_engine(tiny_engine_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttts_cli.app.doctor import check_engines

    monkeypatch.setenv("FASTTTS_ENGINE", str(tiny_engine_dir))
    rows = [c for c in check_engines() if c.name == f"engine {tiny_engine_dir.name}"]
    assert len(rows) == 1 and rows[0].status == "warn" and RANDOM_WARNING in rows[0].detail


def _demo_dub(engine: Path, out: Path) -> list[str]:
    """README's tiny-engine dub of the demo (its --video added by the caller that needs it)."""
    voices = ["--voice", f"ALICE={ALICE}", "--voice", f"BOB={SAMPLES / 'voices' / 'bob.wav'}"]
    return [
        "dub",
        str(SAMPLES / "demo.tsv"),
        *voices,
        "--lang",
        "eng",
        "--engine",
        str(engine),
        "--output-dir",
        str(out),
        "--json",
    ]


def test_dry_run_reports_random_weights(
    tiny_engine_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, r = run(capsys, *_demo_dub(tiny_engine_dir, tmp_path), "--dry-run")
    assert code == 0 and r["engine"]["random_weights"] is True


@pytest.mark.slow
def test_the_readme_tiny_engine_dub_of_the_demo_exits_0(
    tiny_engine_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, r = run(capsys, *_demo_dub(tiny_engine_dir, tmp_path), "--video", str(SAMPLES / "demo.mp4"))
    assert code == 0, r
    assert r["engine"]["random_weights"] is True and r["engine"]["clones_voice"] is False
    assert any(RANDOM_WARNING in w for w in r["warnings"])
    assert r["lines"]["failed"] == 0 and r["lines"]["retries"] == 0
    assert Path(r["outputs"]["video"]).is_file()


def test_the_torch_backend_on_a_random_checkpoint_says_so(tiny_checkpoint_dir: Path) -> None:
    import dataclasses

    pytest.importorskip("torch")
    from fasttts_cli.indextts2.synthesizer import RANDOM_MAX_TOKENS
    from fasttts_cli.indextts2.synthesizer_torch import TorchSynthesizer
    from fasttts_cli.spec.presets import ComponentSpec, load_preset

    p = load_preset("gpu-torch-fp16")
    p = dataclasses.replace(p, components={k: ComponentSpec("torch", "fp32") for k in p.components})
    s = TorchSynthesizer.load(tiny_checkpoint_dir, p, device="cpu")
    assert s.random_weights and s.engine.preset.decode.max_tokens == RANDOM_MAX_TOKENS
    assert f'max_tokens": {RANDOM_MAX_TOKENS}' in s.identity()  # the cap reaches every line's cache key


def test_cast_with_a_random_engine_uses_resemblyzer_and_its_campplus_embeds(
    capsys: pytest.CaptureFixture[str], tiny_engine_dir: Path
) -> None:
    """`fasttts cast --engine` on a random-weight engine: its CAM++ would tell nobody apart, so Resemblyzer
    stands in (warned); the CAM++ wiring itself gives one unit vector per cue."""
    import importlib.util

    from fasttts_cli.app.engine_load import load_synthesizer
    from fasttts_cli.audio.load import load_audio
    from fasttts_cli.casting.embed import EMBED_SR, StyleEncoder, embed_cues
    from fasttts_cli.dubbing.readers import read_script

    video, subs = SAMPLES / "dialogue.mp4", SAMPLES / "dialogue.srt"
    if importlib.util.find_spec("resemblyzer") is not None:
        code, r = run(capsys, "cast", str(video), str(subs), "--engine", str(tiny_engine_dir), "--json")
        assert code == 0 and r["encoder"].startswith("resemblyzer")
        assert any("random weights" in w and "Resemblyzer" in w for w in r["warnings"])
    synth = load_synthesizer(select_engine(str(tiny_engine_dir)), None)
    try:
        cues = read_script(subs)[:3]
        emb = embed_cues(load_audio(video, EMBED_SR), cues, StyleEncoder(synth.engine.style))
    finally:
        synth.close()
    assert emb.shape[0] == 3 and emb.shape[1] > 1
    assert emb == pytest.approx(emb / ((emb**2).sum(axis=1, keepdims=True) ** 0.5))
