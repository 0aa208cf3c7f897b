"""Fault cases of casting (issue 29): a cast.toml whose keys have the wrong type or shape is exit 2 naming
the file and the key; silent or missing cue audio is refused by `fasttts cast` (exit 2 naming the video
or the cues), with no numpy warning on stderr."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.casting.castfile import read_cast
from fasttts_cli.cli.commands import main
from fasttts_cli.errors import InputError

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def run(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ei:
        main([str(a) for a in args])
    cap = capsys.readouterr()
    return int(ei.value.code or 0), cap.out, cap.err


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
