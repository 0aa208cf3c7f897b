"""The CLI contract: exit codes, one-line messages naming the file/line/flag, --json, --dry-run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli import __version__
from fasttts_cli.app import pipeline, synthesis
from fasttts_cli.cli.commands import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
ALICE = SAMPLES / "voices" / "alice.wav"
BOB = SAMPLES / "voices" / "bob.wav"
VOICES = [f"--voice=ALICE={ALICE}", f"--voice=BOB={BOB}"]

needs_samples = pytest.mark.skipif(
    not (SAMPLES / "demo.tsv").is_file() or not ALICE.is_file() or not BOB.is_file(),
    reason="samples not generated yet",
)


def run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ei:
        main([str(a) for a in args])
    cap = capsys.readouterr()
    return int(ei.value.code or 0), cap.out, cap.err


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("fasttts: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture()
def voices(tmp_path: Path) -> dict[str, Path]:
    t = np.arange(48000 * 4) / 48000
    good = tmp_path / "good.wav"
    sf.write(good, (0.2 * np.sin(2 * np.pi * 200 * t)).astype(np.float32), 48000)
    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(48000 * 4, dtype=np.float32), 48000)
    short = tmp_path / "short.wav"
    sf.write(short, (0.2 * np.sin(2 * np.pi * 200 * t[:12000])).astype(np.float32), 48000)
    return {"good": good, "silent": silent, "short": short}


@pytest.fixture()
def srt(tmp_path: Path) -> Path:
    p = tmp_path / "ep.srt"
    p.write_text(
        "1\n00:00:01,000 --> 00:00:02,500\nHello there.\n\n2\n00:00:03,000 --> 00:00:04,500\nBye now.\n"
    )
    return p


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"fasttts {__version__}"


def test_missing_script_file_is_exit_2(capsys, tmp_path, voices):
    code, out, err = run(capsys, "dub", tmp_path / "nope.srt", "--voice", voices["good"])
    assert code == 2 and out == ""
    assert "nope.srt" in one_error_line(err) and "not found" in err


def test_corrupt_subtitle_names_the_line(capsys, tmp_path, voices):
    bad = tmp_path / "bad.srt"
    bad.write_text("1\n00:00:01,000 --> 00:00:02,000\nFine.\n\n2\n00:00:03,000 --> garbage\nBroken.\n")
    code, _, err = run(capsys, "dub", bad, "--voice", voices["good"], "--dry-run")
    assert code == 2
    line = one_error_line(err)
    assert f"{bad}:6" in line


def test_unmapped_speaker_lists_speakers(capsys, tmp_path):
    script = tmp_path / "s.tsv"
    script.write_text("start\tend\tspeaker\ttext\n1\t2\tALICE\tHi.\n3\t4\tBOB\tHello.\n")
    t = np.arange(48000 * 4) / 48000
    v = tmp_path / "a.wav"
    sf.write(v, (0.2 * np.sin(2 * np.pi * 200 * t)).astype(np.float32), 48000)
    code, _, err = run(capsys, "dub", script, "--voice", f"ALICE={v}", "--dry-run")
    assert code == 2
    line = one_error_line(err)
    assert "BOB" in line


@pytest.mark.parametrize("which,word", [("silent", "silent"), ("short", "too short")])
def test_bad_reference_voice_is_exit_2(capsys, tmp_path, srt, voices, which, word):
    code, _, err = run(capsys, "dub", srt, "--voice", voices[which], "--output-dir", tmp_path / "o")
    assert code == 2
    line = one_error_line(err)
    assert str(voices[which]) in line and word in line


def test_video_without_video_stream_is_exit_2(capsys, tmp_path, srt, voices):
    code, _, err = run(capsys, "dub", srt, "--voice", voices["good"], "--video", voices["good"], "--dry-run")
    assert code == 2
    line = one_error_line(err)
    assert str(voices["good"]) in line and "no video stream" in line


def test_unwritable_output_dir_is_exit_2(capsys, tmp_path, srt, voices):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    code, _, err = run(
        capsys, "dub", srt, "--voice", voices["good"], "--output-dir", blocker / "sub", "--dry-run"
    )
    assert code == 2
    line = one_error_line(err)
    assert "--output-dir" in line and "cannot write" in line


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--only", "3-1"], "--only"),
        (["--only", "7"], "--only"),
        (["--only", "x"], "--only"),
        (["--mix", "loud"], "--mix"),
        (["--overflow", "wrap"], "--overflow"),
        (["--on-line-failure", "ignore"], "--on-line-failure"),
        (["--batch-size", "0"], "--batch-size"),
        (["--batch-size", "abc"], "--batch-size"),
        (["--max-speedup", "0.5"], "--max-speedup"),
        (["--lang", "english"], "--lang"),
        (["--loudness", "3"], "--loudness"),
        (["--mix", "duck"], "--mix duck needs --video"),
        (["--no-such-flag"], "--no-such-flag"),
    ],
)
def test_bad_flag_values_are_exit_2_naming_the_flag(capsys, srt, voices, args, needle):
    code, out, err = run(capsys, "dub", srt, "--voice", voices["good"], "--dry-run", *args)
    assert code == 2, err
    assert needle in one_error_line(err)
    assert out == ""


def test_missing_engine_is_exit_3(capsys, tmp_path, srt, voices):
    code, _, err = run(capsys, "dub", srt, "--voice", voices["good"], "--engine", tmp_path / "noengine")
    assert code == 3
    assert "not an engine folder" in one_error_line(err)


def test_json_error_is_one_object(capsys, tmp_path, voices):
    code, out, err = run(capsys, "dub", tmp_path / "nope.srt", "--voice", voices["good"], "--json")
    assert code == 2
    obj = json.loads(out)  # exactly one JSON document on stdout
    assert obj["ok"] is False and obj["exit_code"] == 2 and "nope.srt" in obj["error"]
    assert "fasttts: error:" in err


def test_json_usage_error_is_one_object(capsys, srt):
    code, out, _ = run(capsys, "dub", srt, "--json", "--bogus")
    assert code == 2 and json.loads(out)["exit_code"] == 2


def test_interrupt_is_130_and_unexpected_error_is_1(capsys, monkeypatch, srt, voices):
    def interrupted(*a, **k):
        raise synthesis.DubInterrupted(
            "interrupted: 3 of the 5 lines to synthesize are finished and cached in W"
        )

    monkeypatch.setattr(pipeline, "run_dub", interrupted)
    code, out, err = run(capsys, "dub", srt, "--voice", voices["good"], "--json")
    assert code == 130 and json.loads(out)["exit_code"] == 130
    assert "3 of the 5 lines" in one_error_line(err)

    def boom(*a, **k):
        raise RuntimeError("kaput")

    monkeypatch.setattr(pipeline, "run_dub", boom)
    code, _, err = run(capsys, "dub", srt, "--voice", voices["good"])
    assert code == 1 and "internal error: RuntimeError: kaput" in one_error_line(err)
    code, _, err = run(capsys, "dub", srt, "--voice", voices["good"], "-v")
    assert code == 1 and "Traceback" in err  # -v shows it


def test_dry_run_loads_no_model(capsys, monkeypatch, tmp_path, srt, voices):
    def no(*a, **k):
        raise AssertionError("a model was loaded during --dry-run")

    monkeypatch.setattr(pipeline, "load_synthesizer", no)
    monkeypatch.setattr("fasttts_cli.synth.draft.DraftSynthesizer.__init__", no)
    code, out, err = run(
        capsys, "dub", srt, "--voice", voices["good"], "--dry-run", "--json", "--output-dir", tmp_path / "o"
    )
    assert code == 0, err
    obj = json.loads(out)
    assert obj["ok"] and obj["dry_run"] and obj["lines"]["total"] == 2
    assert Path(obj["outputs"]["plan"]).is_file()
    assert not (tmp_path / "o" / "ep.und.wav").exists()


@needs_samples
def test_inspect_json(capsys):
    code, out, _ = run(capsys, "inspect", SAMPLES / "demo.tsv", *VOICES, "--json")
    assert code == 0
    obj = json.loads(out)
    assert len(obj["cues"]) == 7 and set(obj["speakers"]) == {"ALICE", "BOB"}
    assert sorted(i for b in obj["batches"] for i in b["lines"]) == list(range(1, 8))
    assert len(obj["forecast"]["lines"]) == 7
    assert all(t["factor"] <= 1.25 + 1e-9 for t in obj["forecast"]["lines"])


def test_presets_and_doctor_json(capsys):
    code, out, _ = run(capsys, "presets", "--json")
    assert code == 0
    names = [p["name"] for p in json.loads(out)["presets"]]
    assert "cpu-fp32" in names
    code, out, _ = run(capsys, "doctor", "--json")
    obj = json.loads(out)
    assert code == (0 if obj["ok"] else 3)
    names = {c["name"] for c in obj["checks"]}
    assert {"ffmpeg", "onnxruntime", "draft voice (piper)", "ffmpeg filter rubberband"} <= names
    assert any("GPL-3.0" in row["licence"] for row in obj["licences"].get("draft", []))


def test_progress_jsonl_bad_path_is_exit_2(capsys, tmp_path, srt, voices):
    code, _, err = run(
        capsys,
        "dub",
        srt,
        "--voice",
        voices["good"],
        "--dry-run",
        "--progress-jsonl",
        tmp_path / "no" / "p.jsonl",
    )
    assert code == 2 and "--progress-jsonl" in one_error_line(err)
