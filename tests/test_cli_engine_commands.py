"""The engine-side commands' error contract (build, bench, calibrate, emotion flags) and engine selection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasttts_cli.cli import main
from fasttts_cli.engine_select import TORCH, select_engine

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
