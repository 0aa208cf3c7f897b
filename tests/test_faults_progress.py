"""`--progress-jsonl`: a cached line gets its `line_done` too (`cached: true`), as README says, and the
`render` event carries what README documents (issue 29)."""

from __future__ import annotations

import json
from pathlib import Path

from fasttts_cli.app.pipeline import run_dub
from fasttts_cli.app.progress import QUIET, Reporter
from tests.test_pipeline import FakeSynth, make_job


def _events(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_a_rerun_sends_line_done_for_every_cached_line(tmp_path: Path) -> None:
    job = make_job(tmp_path, batch_size=8)
    for run in ("first", "second"):
        rep = Reporter(verbosity=QUIET, jsonl=str(tmp_path / f"{run}.jsonl"))
        run_dub(job, rep, synthesizer=FakeSynth())
        rep.close()
    first = [e for e in _events(tmp_path / "first.jsonl") if e["event"] == "line_done"]
    evs = _events(tmp_path / "second.jsonl")
    second = [e for e in evs if e["event"] == "line_done"]
    assert sorted(e["line"] for e in second) == [1, 2, 3] and all(e["cached"] for e in second)
    assert all(not e["cached"] for e in first)
    # the same natural durations as the run that synthesized them, and no synthesis numbers
    assert {e["line"]: e["duration"] for e in second} == {e["line"]: e["duration"] for e in first}
    assert all(e["rtf"] is None and e["error"] is None for e in second)
    (render,) = [e for e in evs if e["event"] == "render"]
    assert set(render) == {"event", "t", "to_render", "cached"} and render["to_render"] == 0
