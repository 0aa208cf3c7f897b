"""`fasttts doctor` fails (exit 3, saying why) exactly when `dub`'s engine cannot be loaded: a missing
$FASTTTS_ENGINE, a folder without a manifest, a manifest that is not one, a component file gone; and
`dub --json` names the preset its engine runs (issue 29)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest_engine import *  # noqa: F403 (fixtures: tiny_engine_dir)
from tests.faults import run_cli as run

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _no_manifest(d: Path) -> Path:
    d.mkdir()
    return d


def _list_manifest(d: Path) -> Path:
    d.mkdir()
    (d / "manifest.json").write_text("[1]", encoding="utf-8")
    return d


def _garbled_manifest(d: Path) -> Path:
    d.mkdir()
    (d / "manifest.json").write_bytes(b"\xff\xfe{not json")
    return d


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d: d / "nonexistent", "is not an engine folder"),
        (_no_manifest, "is not an engine folder"),
        (_list_manifest, "a manifest is a JSON object, not list"),
        (_garbled_manifest, "unreadable manifest"),
    ],
)
def test_doctor_exits_3_when_the_configured_engine_cannot_load(
    make: Callable[[Path], Path],
    says: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FASTTTS_ENGINE", str(make(tmp_path / "eng")))
    code, out, err = run(capsys, "doctor", "--json")
    r = json.loads(out)
    assert code == 3 and r["ok"] is False and "Traceback" not in err
    assert any("selected by default" in p and says in p for p in r["problems"]), r["problems"]
    # and dub refuses the same engine with the same exit code
    code, out, _ = run(
        capsys, "dub", SAMPLES / "demo.tsv", "--voice", SAMPLES / "voices" / "bob.wav", "--json"
    )
    assert code == 3 and says in json.loads(out)["error"]


def test_doctor_exits_3_for_an_engine_missing_a_component_and_passes_a_whole_one(
    tiny_engine_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FASTTTS_ENGINE", str(tiny_engine_dir))
    code, out, _ = run(capsys, "doctor", "--json")
    assert json.loads(out)["problems"] == [] and code == 0
    broken = shutil.copytree(tiny_engine_dir, tmp_path / "broken")
    (broken / "gpt_trunk.onnx").unlink()
    monkeypatch.setenv("FASTTTS_ENGINE", str(broken))
    code, out, err = run(capsys, "doctor")
    assert code == 3 and "gpt_trunk.onnx is missing" in out and "Traceback" not in err


def test_dub_json_reports_the_engines_preset(
    tiny_engine_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fasttts_cli.app.engine_load import engine_info, load_synthesizer
    from fasttts_cli.spec.engine_folder import read_manifest
    from fasttts_cli.synth.engine_select import select_engine

    own = read_manifest(tiny_engine_dir).preset
    sel = select_engine(str(tiny_engine_dir))
    synth = load_synthesizer(sel, None)
    try:
        assert engine_info(sel, synth, None)["preset"] == own  # what a dub that ran reports
    finally:
        synth.close()
    voice = SAMPLES / "voices" / "bob.wav"
    args = ["--voice", voice, "--engine", tiny_engine_dir, "--output-dir", tmp_path, "--dry-run", "--json"]
    code, out, _ = run(capsys, "dub", SAMPLES / "demo.tsv", *args)
    assert code == 0 and json.loads(out)["engine"]["preset"] == own
