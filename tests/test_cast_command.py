"""`fasttts cast VIDEO SUBS` on the two-speaker sample (samples/dialogue.*): the unlabeled SRT's cues are
assigned to the right speaker (up to renaming), the labeled file reads back with the labels, and the cast
file loads and its spans stay inside each speaker's own cues. Plus the clustering rule on known embeddings,
the writers' round trips, and the exit codes of bad input."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.app.cast_job import labeled_text
from fasttts_cli.casting.castfile import read_cast
from fasttts_cli.casting.cluster import agreement, cluster_speakers
from fasttts_cli.casting.spans import merge
from fasttts_cli.cli.commands import main
from fasttts_cli.dubbing.readers import read_script

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "dialogue"
needs_resemblyzer = pytest.mark.skipif(
    importlib.util.find_spec("resemblyzer") is None, reason="the `cast` extra (Resemblyzer) is not installed"
)


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FASTTTS_ENGINE", None)  # the draft path: Resemblyzer
    cmd = [sys.executable, "-m", "fasttts_cli", "cast", *map(str, args), "--json"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


@pytest.fixture(scope="module")
def cast_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("cast") / "new" / "labeled.ass"  # a missing folder is made
    proc = _cli(SAMPLE.with_suffix(".mp4"), SAMPLE.with_suffix(".srt"), "-o", out)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), out


@needs_resemblyzer
def test_cues_assigned_to_the_right_speaker(cast_run):
    result, _ = cast_run
    truth = [c.speaker for c in read_script(SAMPLE.with_suffix(".ass"))]
    found = [int(c["speaker"].split("_")[1]) - 1 for c in result["cues"]]
    assert result["speakers"] == 2, result["rule"]
    assert agreement(found, truth) >= 0.9
    assert all(isinstance(c["confidence"], float) for c in result["cues"])


@needs_resemblyzer
def test_labeled_file_reads_back_with_the_labels(cast_run):
    result, out = cast_run
    back = read_script(out)
    assert [c.speaker for c in back] == [c["speaker"] for c in result["cues"]]
    assert [c.text for c in back] == [c.text for c in read_script(SAMPLE.with_suffix(".srt"))]


@needs_resemblyzer
def test_cast_file_loads_and_its_spans_are_each_speakers_own(cast_run):
    result, out = cast_run
    cast_file = out.with_name("labeled.cast.toml")
    assert result["outputs"]["cast"] == str(cast_file)
    entries = read_cast(cast_file)
    assert sorted(e.name for e in entries) == ["SPEAKER_1", "SPEAKER_2"]
    cues = {c["index"]: c for c in result["cues"]}
    for e in entries:
        assert len(e.extra["cues"]) == len(e.extra["confidence"]) == result["cast"][e.name]["cues"]
        own = merge((cues[i]["start"], cues[i]["end"]) for i in e.extra["cues"])
        others = [(c["start"], c["end"]) for c in cues.values() if c["speaker"] != e.name]
        for a, b in e.spans:
            assert any(s <= a and b <= t for s, t in own)
            assert all(b <= s or a >= t for s, t in others)
        assert 3.0 <= sf.info(str(e.reference)).duration <= 12.0
        assert e.reference.parent == out.parent / "labeled.cast"


@pytest.mark.parametrize("ext", [".vtt", ".tsv", ".csv", ".ass"])
def test_each_format_reads_back_with_speakers(tmp_path, ext):
    cues = read_script(SAMPLE.with_suffix(".ass"))
    named = [replace(c, speaker=f"SPEAKER_{1 + (c.speaker == 'BOB')}") for c in cues]
    path = tmp_path / f"x{ext}"
    path.write_text(labeled_text(ext[1:], named), encoding="utf-8")
    back = read_script(path)
    assert [(c.speaker, c.text) for c in back] == [(c.speaker, c.text) for c in named]
    assert [c.start for c in back] == pytest.approx([c.start for c in named], abs=0.011)


def _blobs(centres: list[int], per: int, spread: float, dim: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((max(centres) + 1, dim))
    x = np.stack([base[c] + spread * rng.standard_normal(dim) for c in centres for _ in range(per)])
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_clustering_finds_the_number_of_speakers():
    three = _blobs([0, 1, 2], 5, 0.3)
    got = cluster_speakers(three)
    assert got.speakers == 3 and max(got.silhouettes, key=got.silhouettes.get) == 3
    assert got.labels[:5] == [0] * 5  # numbered by first appearance
    assert agreement(got.labels, [str(i // 5) for i in range(15)]) == 1.0
    assert min(got.confidence) > 0
    one = _blobs([0], 12, 0.3, seed=1)
    assert cluster_speakers(one).speakers == 1
    assert cluster_speakers(three, speakers=2).speakers == 2
    assert cluster_speakers(three[:2]).speakers == 1  # two cues: no silhouette, one speaker


def test_agreement_is_up_to_renaming():
    assert agreement([1, 1, 0, 0], ["A", "A", "B", "B"]) == 1.0
    assert agreement([0, 0, 0, 1], ["A", "A", "B", "B"]) == 0.75


def _run(capsys, *args: object) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ei:
        main(["cast", *map(str, args)])
    return int(ei.value.code or 0), capsys.readouterr().err


def test_bad_input_is_exit_2(capsys, tmp_path):
    video, srt = SAMPLE.with_suffix(".mp4"), SAMPLE.with_suffix(".srt")
    one = tmp_path / "one.srt"
    one.write_text("1\n00:00:01,000 --> 00:00:02,000\nHello.\n", encoding="utf-8")
    code, err = _run(capsys, video, one)
    assert code == 2 and "one.srt" in err and "at least 2" in err
    code, err = _run(capsys, tmp_path / "missing.mp4", srt)
    assert code == 2 and "missing.mp4" in err
    code, err = _run(capsys, video, srt, "--speakers", "50")
    assert code == 2 and "--speakers 50" in err
    code, err = _run(capsys, video, srt, "-o", tmp_path / "x.doc")
    assert code == 2 and "x.doc" in err
    code, err = _run(capsys, video, srt, "-o", tmp_path / "x.srt")
    assert code == 2 and "x.srt" in err and "x.vtt" in err


def test_missing_encoder_is_exit_3(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "resemblyzer", None)  # import fails as if not installed
    monkeypatch.delenv("FASTTTS_ENGINE", raising=False)
    code, err = _run(capsys, SAMPLE.with_suffix(".mp4"), SAMPLE.with_suffix(".srt"))
    assert code == 3 and "fasttts-cli[cast]" in err
