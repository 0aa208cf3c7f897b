"""Fault cases of casting (issue 29): a cast.toml whose keys have the wrong type or shape is exit 2 naming
the file and the key; silent or missing cue audio is refused by `fasttts cast` (exit 2 naming the video
or the cues), with no numpy warning on stderr."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.casting.castfile import read_cast
from fasttts_cli.errors import InputError
from tests.faults import run_cli as run

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


BAD_KEYS = [
    ("spans = [[1.0]]", "spans"),
    ("spans = [1.0, 2.0]", "spans"),
    ('spans = [["a", "b"]]', "spans"),
    ("spans = [[2.0, 1.0]]", "spans"),
    ("spans = [[-1.0, 1.0]]", "spans"),
    ("spans = [[0.0, inf]]", "spans"),
    ('spans = "0-3"', "spans"),
    ("spans = {a = 1}", "spans"),
    ('seconds = "ten"', "seconds"),
    ("seconds = nan", "seconds"),
    ("seconds = true", "seconds"),
    ("seconds = [1]", "seconds"),
    ("score = 1979-05-27", "score"),
    ("score = {x = 1}", "score"),
    ("source = 3", "source"),
    ("source_sha256 = [1]", "source_sha256"),
    ('cues = ["one"]', "cues"),
    ("cues = 3", "cues"),
    ('confidence = ["high"]', "confidence"),
    ("notes = 1979-05-27T07:32:00Z", "notes"),
    ("notes = {a = 1}", "notes"),
]


@pytest.mark.parametrize(("line", "key"), BAD_KEYS)
def test_a_cast_key_of_the_wrong_type_names_the_file_and_key(tmp_path: Path, line: str, key: str) -> None:
    sf.write(tmp_path / "ref.wav", np.zeros(16000, np.float32), 16000)
    cast = tmp_path / "cast.toml"
    cast.write_text(f'[speakers.ALICE]\nreference = "ref.wav"\n{line}\n', encoding="utf-8")
    with pytest.raises(InputError) as ei:
        read_cast(cast)
    assert str(cast) in ei.value.message and f"[speakers.ALICE] {key} = " in ei.value.message


def test_dub_with_a_malformed_cast_is_exit_2_naming_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cast = tmp_path / "cast.toml"
    cast.write_text(
        f'[speakers.ALICE]\nreference = "{SAMPLES / "voices" / "alice.wav"}"\n'
        'spans = [[1.0]]\nseconds = "ten"\n',
        encoding="utf-8",
    )
    code, out, err = run(
        capsys, "dub", SAMPLES / "demo.tsv", "--cast", cast, "--voice", SAMPLES / "voices" / "bob.wav",
        "--output-dir", tmp_path, "--dry-run", "--json", "--engine", "draft",
    )  # fmt: skip
    r = json.loads(out)
    assert code == 2 and r["exit_code"] == 2 and r["kind"] == "InputError", r
    assert str(cast) in r["error"] and "seconds" in r["error"] and "Traceback" not in err


# ---- `fasttts cast` on audio with no speech ------------------------------------------------------

ROOT = SAMPLES.parent
needs_resemblyzer = pytest.mark.skipif(
    importlib.util.find_spec("resemblyzer") is None, reason="the `cast` extra (Resemblyzer) is not installed"
)


def _srt(path: Path, times: list[tuple[float, float]]) -> Path:
    stamp = lambda t: f"00:{int(t // 60):02d}:{t % 60:06.3f}".replace(".", ",")  # noqa: E731
    path.write_text(
        "".join(f"{k}\n{stamp(a)} --> {stamp(b)}\nLine number {k}.\n\n" for k, (a, b) in enumerate(times, 1)),
        encoding="utf-8",
    )
    return path


def _cast_cli(*args: object) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FASTTTS_ENGINE", None)  # the draft path: Resemblyzer
    cmd = [sys.executable, "-m", "fasttts_cli", "cast", *map(str, args), "--json"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=300)


@needs_resemblyzer
def test_a_silent_video_is_refused_naming_it_with_no_warnings(tmp_path: Path) -> None:
    video = tmp_path / "silent.wav"
    sf.write(video, np.zeros(16000 * 12, np.float32), 16000)
    subs = _srt(tmp_path / "s.srt", [(1.0, 3.0), (4.0, 6.0), (7.0, 9.0)])
    proc = _cast_cli(video, subs)
    r = json.loads(proc.stdout)
    assert proc.returncode == 2 and r["exit_code"] == 2, proc.stderr
    assert r["error"].startswith(f"{video}: its audio is silent")
    assert "Warning" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@needs_resemblyzer
def test_cues_all_past_the_end_of_the_audio_are_refused_naming_them(tmp_path: Path) -> None:
    subs = _srt(tmp_path / "s.srt", [(100.0, 102.0), (103.0, 105.0), (106.0, 108.0)])
    proc = _cast_cli(SAMPLES / "dialogue.mp4", subs)
    r = json.loads(proc.stdout)
    assert proc.returncode == 2 and r["exit_code"] == 2, proc.stderr
    assert (
        r["error"].startswith(f"{subs}: only 0 of 3 cues have speech") and "cue 1: past the end" in r["error"]
    )
    assert "Warning" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


class _Pitch:
    """A stand-in encoder: the spectrum's energy in 16 bands (tones of two pitches are two speakers); it
    makes NaN of silence, as Resemblyzer's level normalisation does."""

    name = "pitch"

    def embed(self, audio: np.ndarray) -> np.ndarray:
        spec = np.abs(np.fft.rfft(audio, 4096))[:1024].reshape(16, -1).sum(axis=1)
        return (spec / spec.sum()).astype(np.float32)


def test_a_silent_cue_among_speech_takes_its_neighbours_speaker_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import warnings

    from fasttts_cli.app import cast_job

    sr = 16000
    audio = np.zeros(sr * 16, np.float32)
    t = np.arange(sr * 2) / sr
    for start, hz in ((1, 200), (4, 900), (7, 200), (10, 900)):
        audio[start * sr : start * sr + len(t)] = 0.3 * np.sin(2 * np.pi * hz * t)
    video = tmp_path / "tones.wav"
    sf.write(video, audio, sr)
    subs = _srt(tmp_path / "s.srt", [(1.0, 3.0), (4.0, 6.0), (7.0, 9.0), (10.0, 12.0), (13.0, 15.0)])
    monkeypatch.setattr(cast_job, "load_encoder", lambda *a: (_Pitch(), "pitch", None))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        code, out, err = run(capsys, "cast", video, subs, "--speakers", "2", "--json")
    r = json.loads(out)
    assert code == 0, err
    speakers = [c["speaker"] for c in r["cues"]]
    assert speakers[:4] == ["SPEAKER_1", "SPEAKER_2", "SPEAKER_1", "SPEAKER_2"] and speakers[4] == "SPEAKER_2"
    assert r["cues"][4]["confidence"] == 0.0
    assert any("cues 5" in w and "silent" in w for w in r["warnings"]), r["warnings"]


def test_an_output_that_is_a_folder_is_exit_2_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "labeled.ass"
    out.mkdir()
    code, stdout, err = run(
        capsys, "cast", SAMPLES / "dialogue.mp4", SAMPLES / "dialogue.srt", "-o", out, "--json"
    )
    r = json.loads(stdout)
    assert code == 2 and r["error"].startswith(f"-o {out}: a folder is in the way"), r
    assert "load_encoder" not in r.get("timings", {}) and "Traceback" not in err
