"""Fault cases of `fasttts batch`'s manifest and jobs (issue 29): every problem of a manifest printed, a
CSV cell over csv's field limit, a job's missing voice file naming the row and the path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults import run_cli as run

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def test_every_problem_of_every_row_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(
        "\n".join(
            [
                json.dumps({"script": "a.srt", "bogus": 1, "voicee": "x", "batch_size": "many"}),
                json.dumps({"script": "b.srt", "lang": "!!", "fit": "zzz", "mix": "loud"}),
                "[1, 2]",
                json.dumps({"nope": 2, "seed": "q"}),
                "{broken",
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    code, out, err = run(capsys, "batch", jobs, "--json")
    assert code == 2 and "Traceback" not in err
    got = {(p["row"], p["key"]) for p in json.loads(out)["problems"]}
    assert got == {
        (1, "bogus"),
        (1, "voicee"),
        (1, "batch_size"),
        (2, "lang"),
        (2, "fit"),
        (2, "mix"),
        (3, None),
        (4, "nope"),
        (4, "script"),
        (4, "seed"),
        (5, None),
    }
    # the terminal run prints every one of them too, each naming the manifest, row and line
    code, _, err = run(capsys, "batch", jobs)
    assert code == 2
    assert "row 2 (id 2, line 2): mix:" in err and "row 5 (id None, line 5): not valid JSON" in err
    assert "row 3 (id None, line 3): a job is a JSON object" in err


def test_a_csv_cell_over_the_field_limit_names_the_manifest_and_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(f"script,voice,lang\na.srt,b.wav,eng\nc.srt,{'x' * 140_000},eng\n", encoding="utf-8")
    code, out, err = run(capsys, "batch", jobs, "--json")
    r = json.loads(out)
    assert code == 2 and r["exit_code"] == 2 and "internal" not in r["error"]
    assert r["error"].startswith(f"{jobs}:3: row 2: ") and "field limit" in r["error"]
    assert "Traceback" not in err


def test_a_jobs_missing_voice_names_job_row_voice_and_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    row = {
        "id": "ep1",
        "script": str(SAMPLES / "demo.tsv"),
        "voice": ["ALICE=voices/alice.wav", f"BOB={SAMPLES / 'voices' / 'bob.wav'}"],
        "engine": "draft",
        "dry_run": True,
    }
    first = {**row, "id": "ep0", "voice": str(SAMPLES / "voices" / "bob.wav"), "output_dir": "o0"}
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(f"{json.dumps(first)}\n{json.dumps({**row, 'output_dir': 'o1'})}\n", encoding="utf-8")
    code, out, err = run(capsys, "batch", jobs, "--json")
    job = json.loads(out)["jobs"][1]
    assert code == 1 and job["exit_code"] == 2 and (job["id"], job["row"], job["line"]) == ("ep1", 2, 2)
    assert "speaker ALICE's voice file 'voices/alice.wav' not found" in job["error"]
    assert str(tmp_path) in job["hint"]
    assert "row 2 (line 2) of the manifest: fix its `voice` key" in job["hint"]
    assert "NAME=PATH" not in job["hint"] and "Traceback" not in err
    code, out, _ = run(capsys, "batch", jobs)  # a terminal run prints what to do too
    assert code == 1 and "ep1: failed (exit 2): --voice ALICE=voices/alice.wav" in out
    assert "  hint: fix the path" in out and "row 2 (line 2) of the manifest" in out
