"""A `--voice NAME=` whose NAME matches no speaker is never silent: a warning naming the closest speaker, or
with --strict-voices an error (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.dubbing.speakers import parse_voice_flags, voice_name_problems

SCRIPT = "start\tend\tspeaker\ttext\n0.5\t2.5\tALICE\tHello there.\n3.0\t5.0\tBOB\tHi Alice.\n"


def _cue(i: int, speaker: str | None) -> Cue:
    return Cue(i, float(i), i + 0.5, "Hello.", speaker, f"x.srt:{i}")


def test_a_typo_names_the_closest_speaker_and_its_fallback(tmp_path: Path):
    ref = tmp_path / "v.wav"
    sf.write(ref, np.zeros(10, dtype=np.float32), 16000)
    vm = parse_voice_flags([str(ref), f"BOBB={ref}", f"ALICE={ref}"])
    problems = voice_name_problems([_cue(1, "Alice"), _cue(2, "Bob")], vm)
    assert len(problems) == 1
    assert "'BOBB'" in problems[0] and "closest speaker is 'Bob'" in problems[0] and str(ref) in problems[0]


def test_a_name_nothing_like_any_speaker_lists_the_speakers(tmp_path: Path):
    ref = tmp_path / "v.wav"
    sf.write(ref, np.zeros(10, dtype=np.float32), 16000)
    vm = parse_voice_flags([f"Zanzibar={ref}", f"Alice={ref}"])
    (problem,) = voice_name_problems([_cue(1, "alice"), _cue(2, "alice")], vm)
    assert "speakers found: alice" in problem
    assert voice_name_problems([_cue(1, None)], vm)[0].endswith("the script names no speakers")


def _inspect(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    script = tmp_path / "ep.tsv"
    script.write_text(SCRIPT, encoding="utf-8")
    ref = tmp_path / "v.wav"
    sf.write(ref, np.zeros(10, dtype=np.float32), 16000)
    args = [sys.executable, "-m", "fasttts_cli", "inspect", str(script), "--voice", str(ref)]
    args += ["--voice", f"BOBB={ref}", "--json", *extra]
    return subprocess.run(args, capture_output=True, text=True, check=False)


def test_cli_warns_by_default_and_refuses_with_strict_voices(tmp_path: Path):
    proc = _inspect(tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert any("BOBB" in w and "'BOB'" in w for w in out["warnings"])
    strict = _inspect(tmp_path, "--strict-voices")
    assert strict.returncode == 2
    err = json.loads(strict.stdout)
    assert err["ok"] is False and "BOBB" in err["error"] and "Traceback" not in strict.stderr


def test_inspect_runs_without_voices_and_says_who_has_none(tmp_path: Path):
    script = tmp_path / "ep.tsv"
    script.write_text(SCRIPT, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "fasttts_cli", "inspect", str(script), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {k: v["voice"] for k, v in out["speakers"].items()} == {"ALICE": None, "BOB": None}
    assert all(b["voice"] is None for b in out["batches"]) and len(out["batches"]) == 2
    assert any("no voice yet for ALICE, BOB" in w for w in out["warnings"])


def test_inspect_help_documents_every_option():
    proc = subprocess.run(
        [sys.executable, "-m", "fasttts_cli", "inspect", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = proc.stdout.splitlines()
    # An entry whose flag and values fill the first column (`--overflow [shift|overlap|truncate|fail]`)
    # has its help on the next line, indented, as click lays it out.
    entries = [
        ln if len(ln.split()) > 2 else f"{ln} {lines[k + 1].strip() if k + 1 < len(lines) else ''}"
        for k, ln in enumerate(lines)
        if ln.strip().startswith("--")
    ]
    assert entries and all(len(e.split()) > 2 for e in entries), entries


def test_the_dry_run_forecasts_the_batches_the_draft_voice_will_run(tmp_path: Path):
    # Two voices, but the draft voice does not clone: the run regroups them into one batch.
    script = tmp_path / "ep.tsv"
    script.write_text(SCRIPT, encoding="utf-8")
    ref = tmp_path / "v.wav"
    sf.write(ref, np.zeros(10, dtype=np.float32), 16000)
    args = [sys.executable, "-m", "fasttts_cli", "dub", str(script), "--voice", f"ALICE={ref}"]
    args += ["--voice", f"BOB={ref.with_name('w.wav')}", "--engine", "draft", "--dry-run", "--json"]
    sf.write(ref.with_name("w.wav"), np.zeros(10, dtype=np.float32), 16000)
    proc = subprocess.run([*args, "--output-dir", str(tmp_path / "o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["lines"]["batches"] == 1
    plan = json.loads((tmp_path / "o" / "ep.fasttts" / "plan.json").read_text())
    assert plan["synthesis_batches"] == 1 and len(plan["batches"]) == 2
