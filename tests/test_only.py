"""`--only` with no cue in it is a usage error (exit 2 naming the flag), never "re-render everything"."""

from __future__ import annotations

import json

import pytest

from tests.test_cli import ALICE, SAMPLES, needs_samples, one_error_line, run


@needs_samples
@pytest.mark.parametrize("command", ["dub", "inspect"])
@pytest.mark.parametrize("spec", ["", " , "])
def test_an_empty_selection_is_exit_2(capsys, tmp_path, command: str, spec: str) -> None:
    args = [command, SAMPLES / "demo.srt", "--voice", ALICE, "--only", spec]
    if command == "dub":
        args += ["--dry-run", "-o", tmp_path / "out.wav"]
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    want = f'--only "{spec}": empty selection; give cue numbers like 3,7-9'
    assert one_error_line(err) == f"fasttts: error: {want}"


@needs_samples
def test_a_selection_picks_just_its_lines(capsys, tmp_path) -> None:
    args = ["dub", SAMPLES / "demo.srt", "--voice", ALICE, "--only", "2,4-5", "--dry-run", "--json"]
    code, out, err = run(capsys, *args, "-o", tmp_path / "out.wav")
    assert code == 0, err
    chosen = [ln["index"] for ln in json.loads(out)["plan"]["lines"] if ln["synthesize"]]
    assert chosen == [2, 4, 5]
