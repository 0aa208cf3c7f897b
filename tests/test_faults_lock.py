"""One writer per work folder, with real processes: the second run waits (or exits 2 with --no-wait), a
SIGKILLed holder wedges nothing, and the next holder sweeps the partial files the killed run left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.audio.blockio import AudioFileWriter
from fasttts_cli.dubbing.worklock import OWNER_NAME, hold_work_dir, read_owner
from fasttts_cli.errors import UsageError
from fasttts_cli.partials import parse_partial, partial_path, sweep_partials
from tests.faults import RUNNER
from tests.test_pipeline import write_job_folder

ROOT = Path(__file__).resolve().parent.parent

# `fasttts dub` through the real CLI with the gated fake engine (tests/faults.py): FAULT_STARTED is
# touched when synthesis starts (the run holds the lock by then); FAULT_GATE: synthesis waits for it.


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    return write_job_folder(tmp_path)


def _dub(
    folder: Path, *extra: str, started: Path | None = None, gate: Path | None = None
) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "FASTTTS_ENGINE"}
    env["PYTHONPATH"] = str(ROOT)
    env.pop("FAULT_STARTED", None)
    env.pop("FAULT_GATE", None)
    if started is not None:
        env["FAULT_STARTED"] = str(started)
    if gate is not None:
        env["FAULT_GATE"] = str(gate)
    args = [sys.executable, "-c", RUNNER, "dub", str(folder / "ep.tsv"), "--lang", "eng"]
    args += [f"--voice=A={folder / 'a.wav'}", f"--voice=B={folder / 'b.wav'}"]
    args += ["--output-dir", str(folder / "out"), *extra]
    return subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"holder exited early ({proc.returncode}): {proc.communicate()[1]}")
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.05)


def _finish(proc: subprocess.Popen, timeout: float = 120.0) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@pytest.mark.slow
def test_second_run_waits_then_both_succeed(folder: Path):
    started, gate = folder / "started", folder / "gate"
    holder = _dub(folder, started=started, gate=gate)
    try:
        _wait_for(started, holder)
        owner = read_owner(folder / "out" / "ep.fasttts")
        assert owner.pid == holder.pid and "dub" in (owner.command or "")
        jsonl = folder / "w.jsonl"
        waiter = _dub(folder, "--json", "--progress-jsonl", str(jsonl))
        t0 = time.monotonic()
        while "waiting for it to finish" not in (jsonl.read_text() if jsonl.exists() else ""):
            assert waiter.poll() is None, waiter.communicate()
            assert time.monotonic() - t0 < 60, "the second run never said it was waiting"
            time.sleep(0.05)
        time.sleep(0.5)
        assert waiter.poll() is None  # still waiting: the holder has not finished
        gate.touch()
        code, _, err = _finish(holder)
        assert code == 0, err
        code, out, err = _finish(waiter)
    finally:
        gate.touch()
        for p in (holder, locals().get("waiter")):
            if p is not None and p.poll() is None:
                p.kill()
    assert code == 0, err
    msg = f"is locked by pid {holder.pid} (another fasttts run): waiting for it to finish"
    assert err.count(msg) == 1, err
    obj = json.loads(out)
    assert obj["ok"] and obj["lines"]["cached"] == 3 and any(msg in w for w in obj["warnings"])
    evs = [json.loads(x) for x in (folder / "w.jsonl").read_text().splitlines()]
    assert any(e["event"] == "warning" and msg in e["message"] for e in evs)
    assert any(e["event"] == "stage" and e["name"] == "wait" and e["status"] == "done" for e in evs)
    info = sf.info(str(folder / "out" / "ep.eng.wav"))
    assert info.frames > 48000  # a real programme, not a header-only file
    assert not (folder / "out" / "ep.fasttts" / OWNER_NAME).exists()


@pytest.mark.slow
def test_no_wait_exits_2_naming_the_pid(folder: Path):
    started, gate = folder / "started", folder / "gate"
    holder = _dub(folder, started=started, gate=gate)
    try:
        _wait_for(started, holder)
        code, out, err = _finish(_dub(folder, "--no-wait", "--json"))
        assert code == 2, err
        work = folder / "out" / "ep.fasttts"
        line = next(x for x in err.splitlines() if x.startswith("fasttts: error:"))
        assert line == (
            f"fasttts: error: {work} is locked by pid {holder.pid} (another fasttts run); "
            "wait for it or use another --work-dir"
        )
        assert json.loads(out)["exit_code"] == 2 and "Traceback" not in err
        gate.touch()
        code, _, err = _finish(holder)
        assert code == 0, err
    finally:
        gate.touch()
        if holder.poll() is None:
            holder.kill()


@pytest.mark.slow
def test_sigkilled_holder_leaves_nothing_wedged_and_its_partials_are_swept(folder: Path):
    started, gate = folder / "started", folder / "gate"
    holder = _dub(folder, started=started, gate=gate)
    _wait_for(started, holder)
    work, out = folder / "out" / "ep.fasttts", folder / "out"
    # What a run killed while assembling leaves, named as its own writers name them (its pid inside).
    dead = holder.pid
    left = [
        work / f".dub.{dead}-0123abcd.partial.wav",
        work / f".timeline-{dead}-89abcdef.partial.f32",
        out / f".ep.eng.{dead}-deadbeef.partial.wav",
        out / f".ep.eng.{dead}-feedf00d.partial.srt",
    ]
    for p in left:
        p.write_bytes(b"RIFF partial")
    keep = [
        out / f".other.{dead}-deadbeef.partial.wav",  # another job's output name: not ours to touch
        out / ".ep.eng.partial.wav",  # not our pattern
        work / ".dub.1-0123abcd.partial.wav",  # a live writer (pid 1)
    ]
    for p in keep:
        p.write_bytes(b"x")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    assert holder.returncode == -signal.SIGKILL
    assert read_owner(work).pid == dead  # its owner record is stale, and harmless

    code, _, err = _finish(_dub(folder, "--no-wait"))  # the kernel dropped the flock: no waiting
    assert code == 0, err
    assert [p for p in left if p.exists()] == []
    assert all(p.exists() for p in keep)
    assert sf.info(str(out / "ep.eng.wav")).frames > 48000


def test_lock_in_process_no_wait_and_release(tmp_path: Path):
    work = tmp_path / "w"
    with hold_work_dir(work, wait=False):
        assert read_owner(work).pid == os.getpid()
        errs: list[BaseException] = []

        def second() -> None:
            try:
                with hold_work_dir(work, wait=False):
                    pass
            except BaseException as e:
                errs.append(e)

        t = threading.Thread(target=second)
        t.start()
        t.join()
        assert len(errs) == 1 and isinstance(errs[0], UsageError)
        assert f"{work} is locked by pid {os.getpid()}" in str(errs[0])
    assert not (work / OWNER_NAME).exists()
    with hold_work_dir(work, wait=False):  # free again
        pass


def test_temp_names_are_unique_and_keep_the_extension(tmp_path: Path):
    final = tmp_path / "ep.eng.mp4"
    names = {partial_path(final).name for _ in range(50)}
    assert len(names) == 50
    for n in names:
        assert n.startswith(".ep.eng.") and n.endswith(".partial.mp4")
        assert parse_partial(n) == ("ep.eng", os.getpid())
    # Two writers of the same output at once write different files; each commit is whole.
    a = AudioFileWriter(tmp_path / "d.wav", 48000, 1)
    b = AudioFileWriter(tmp_path / "d.wav", 48000, 1)
    assert a.tmp != b.tmp
    a.write(np.full((1, 4800), 0.1, np.float32))
    b.write(np.full((1, 9600), 0.2, np.float32))
    a.commit()
    assert sf.info(str(tmp_path / "d.wav")).frames == 4800
    b.commit()
    assert sf.info(str(tmp_path / "d.wav")).frames == 9600
    assert not [p for p in tmp_path.iterdir() if parse_partial(p.name)]


def test_sweep_removes_only_dead_writers_partials(tmp_path: Path):
    dead = _dead_pid()
    gone = tmp_path / f".x.{dead}-00000000.partial.wav"
    mine = tmp_path / f".x.{os.getpid()}-00000001.partial.wav"  # a pid reused from a killed run
    live = tmp_path / ".x.1-00000002.partial.wav"
    other = tmp_path / f".y.{dead}-00000003.partial.wav"
    plain = tmp_path / "x.wav"
    for p in (gone, mine, live, other, plain):
        p.write_bytes(b"x")
    assert sorted(sweep_partials(tmp_path, stems={"x"})) == sorted([gone, mine])
    assert live.exists() and other.exists() and plain.exists()
    assert sweep_partials(tmp_path) == [other]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_work_dir_that_cannot_hold_a_lock_is_exit_2_naming_the_flag(tmp_path: Path):
    work = tmp_path / "w"
    (work / ".lock").mkdir(parents=True)  # something else sits where the lock file goes
    with (
        pytest.raises(UsageError, match=r"--work-dir: cannot lock .*\.lock") as ei,
        hold_work_dir(work, wait=False),
    ):
        pass
    assert ei.value.exit_code == 2
