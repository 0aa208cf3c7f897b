"""Two `fasttts batch` runs on one manifest, as real processes: the one that waited for the work-folder
lock reads the plan cache again once the lock is its own, and plans only what is still missing; the
first run's entries are never planned again nor rewritten (issue 29)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults import RUNNER
from tests.test_pipeline import write_job_folder

ROOT = Path(__file__).resolve().parent.parent

# `fasttts batch` with the gated fake engine (tests/faults.py): every text it plans goes to FAULT_LOG;
# FAULT_STARTED is touched when planning starts (the lock is held by then); FAULT_GATE holds planning.


def _batch(folder: Path, log: Path, *extra: str, **files: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FASTTTS_ENGINE", "FAULT_"))}
    env.update(PYTHONPATH=str(ROOT), FAULT_LOG=str(log))
    env.update({f"FAULT_{k.upper()}": str(v) for k, v in files.items()})
    args = [sys.executable, "-c", RUNNER, "batch", str(folder / "jobs.jsonl"), "--json", *extra]
    return subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow
def test_the_batch_that_waited_plans_only_what_is_still_missing(tmp_path: Path) -> None:
    folder = write_job_folder(tmp_path)
    row = {"id": "ep", "script": str(folder / "ep.tsv"), "lang": "eng", "output_dir": str(folder / "out")}
    row["voice"] = [f"A={folder / 'a.wav'}", f"B={folder / 'b.wav'}"]
    (folder / "jobs.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    started, gate, events = folder / "started", folder / "gate", folder / "waiter.jsonl"
    first_log, second_log = folder / "first.log", folder / "second.log"
    first = _batch(folder, first_log, started=started, gate=gate)
    second = None
    try:
        t0 = time.monotonic()
        while not started.exists():  # the first run holds the lock and is planning
            assert first.poll() is None, first.communicate()
            assert time.monotonic() - t0 < 120, "the first run never started planning"
            time.sleep(0.05)
        second = _batch(folder, second_log, "--progress-jsonl", str(events))
        while "waiting for it to finish" not in (events.read_text() if events.exists() else ""):
            assert second.poll() is None, second.communicate()
            assert time.monotonic() - t0 < 120, "the second run never waited for the lock"
            time.sleep(0.05)
        gate.touch()
        out1, err1 = first.communicate(timeout=120)
        out2, err2 = second.communicate(timeout=120)
    finally:
        gate.touch()
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
    assert first.returncode == 0 and second.returncode == 0, err1 + err2
    assert sorted(first_log.read_text().splitlines()) == sorted(
        ["First line here.", "Second line, a bit longer.", "Third one."]
    )
    assert not second_log.exists(), f"the second run planned again: {second_log.read_text()}"
    r1, r2 = json.loads(out1), json.loads(out2)
    assert r1["to_synthesize"] == 3 and r1["jobs"][0]["lines"]["synthesized"] == 3
    assert r2["to_synthesize"] == 0 and r2["jobs"][0]["lines"]["cached"] == 3
    assert r2["jobs"][0]["lines"]["synthesized"] == 0
    assert "Traceback" not in err1 + err2
