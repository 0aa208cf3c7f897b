"""Progress that moves: line_done as each line is final, stage_progress for the assembly stages (rate
limited), the synth command's stages, build's per-component events, bars only on stderr."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.app import assembly
from fasttts_cli.app.pipeline import DubOptions, run_dub
from fasttts_cli.app.progress import QUIET, STAGE_PROGRESS_INTERVAL, Reporter
from fasttts_cli.app.single_line import SynthOptions, synth_one
from fasttts_cli.synth.synthesizer import SynthRequest, SynthResult, deliver, synthesize_rows
from tests.test_pipeline import FakeSynth, make_job


class RowFake(FakeSynth):
    """FakeSynth that reports each row as it is made, writing what it does into a shared `log`."""

    reports_rows = True

    def __init__(self, log: list[str], script: dict[str, list[str]] | None = None) -> None:
        super().__init__(script)
        self.log = log

    def synthesize(self, requests: Sequence[SynthRequest], on_result=None) -> list[SynthResult]:
        out = []
        for k, r in enumerate(requests):
            self.log.append(f"synth {r.line_id}")
            (res,) = FakeSynth.synthesize(self, [r])
            out.append(res)
            deliver(on_result, k, res)
        return out


class LogReporter(Reporter):
    def __init__(self, log: list[str], **kw) -> None:
        super().__init__(verbosity=QUIET, **kw)
        self.log = log

    def line_done(self, line: int, **kw) -> None:
        self.log.append(f"done {line}")
        super().line_done(line, **kw)


@pytest.fixture()
def job(tmp_path: Path) -> DubOptions:
    return make_job(tmp_path, batch_size=8)


def _events(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_each_line_is_done_before_the_next_row_is_synthesized(job: DubOptions, tmp_path: Path):
    log: list[str] = []
    events = tmp_path / "ev.jsonl"
    rep = LogReporter(log, jsonl=str(events))
    job.voices = [str(tmp_path / "a.wav")]  # one voice: all three lines in one batch
    run_dub(job, rep, synthesizer=RowFake(log))
    rep.close()
    # the planner orders a batch as it likes; whatever the order, each row is done before the next starts
    rows = [x.split()[1] for x in log[::2]]
    assert sorted(rows) == ["1", "2", "3"]
    assert log == [x for r in rows for x in (f"synth {r}", f"done {r}")]
    evs = _events(events)
    kinds = [e["event"] for e in evs]
    assert kinds.count("batch_start") == 1
    # every line_done sits inside its batch, before batch_done
    first, last = kinds.index("batch_start"), kinds.index("batch_done")
    assert [k for k, e in enumerate(kinds) if e == "line_done"] == [first + 1, first + 2, first + 3] < [last]
    assert all(e["rtf"] is not None and e["duration"] > 0 for e in evs if e["event"] == "line_done")
    # each line is in the cache as soon as it is done: what an interrupt keeps
    assert len(list((job.output_dir / "ep.fasttts" / "lines").glob("**/*.npy"))) == 3


def test_a_retried_line_is_done_after_its_last_attempt(job: DubOptions, tmp_path: Path):
    log: list[str] = []
    rep = LogReporter(log, jsonl=str(tmp_path / "ev.jsonl"))
    job.voices = [str(tmp_path / "a.wav")]
    run_dub(job, rep, synthesizer=RowFake(log, {"Second line, a bit longer.": ["runaway"]}))
    rep.close()
    # line 2 is not done after its runaway attempt: only after the retry, which follows the others
    first = [x for x in log[:-2] if x.startswith("synth")]
    assert sorted(first) == ["synth 1", "synth 2", "synth 3"] and log[-2:] == ["synth 2", "done 2"]
    assert [x for x in log[:-2] if x.startswith("done")] == [f"done {r[6:]}" for r in first if r != "synth 2"]
    done = [e for e in _events(tmp_path / "ev.jsonl") if e["event"] == "line_done"]
    assert [(e["line"], e["retries"]) for e in done][-1] == (2, 1)
    assert all(e["retries"] == 0 for e in done[:-1])


def test_an_engine_without_row_reports_gets_every_line_at_batch_end(job: DubOptions, tmp_path: Path):
    events = tmp_path / "ev.jsonl"
    rep = Reporter(verbosity=QUIET, jsonl=str(events))
    run_dub(job, rep, synthesizer=FakeSynth())
    rep.close()
    done = [e for e in _events(events) if e["event"] == "line_done"]
    assert sorted(e["line"] for e in done) == [1, 2, 3]
    assert all(
        set(e) == {"event", "t", "line", "cached", "duration", "rtf", "retries", "error"} for e in done
    )


def test_a_failing_callback_is_not_taken_for_a_failing_line():
    class Swallowing(RowFake):
        # like an engine's per-line error handling: catches Exception around its work
        def synthesize(self, requests, on_result=None):
            try:
                return super().synthesize(requests, on_result)
            except Exception as e:
                return [SynthResult(r.line_id, None, 24000, error=str(e)) for r in requests]

    def row(k, res, seconds):
        raise OSError(28, "No space left on device")

    v = FakeSynth().prepare_voice(Path("a.wav"))
    with pytest.raises(OSError, match="No space left"):
        synthesize_rows(Swallowing([]), [SynthRequest("1", "Hello.", v, 0)], row)


def test_stage_progress_reaches_total_for_every_assembly_stage(job, tmp_path, monkeypatch):
    monkeypatch.setattr(assembly, "ASSEMBLY_BLOCK", 4800)  # 0.1 s blocks: ~80 of them
    monkeypatch.setattr("fasttts_cli.app.progress.STAGE_PROGRESS_INTERVAL", 0.0)  # every event gets through
    events = tmp_path / "ev.jsonl"
    rep = Reporter(verbosity=QUIET, jsonl=str(events))
    run_dub(job, rep, synthesizer=FakeSynth())
    rep.close()
    sp = [e for e in _events(events) if e["event"] == "stage_progress"]
    by: dict[str, list[dict]] = {}
    for e in sp:
        by.setdefault(e["stage"], []).append(e)
    assert set(by) == {"render", "tempo", "mix", "loudness", "write"}
    for stage, evs in by.items():
        assert evs[-1]["done"] == evs[-1]["total"] > 0, stage
        assert {e["unit"] for e in evs} == {
            "lines" if stage in ("render", "tempo") else "blocks" if stage == "mix" else "seconds"
        }
    assert [e["done"] for e in by["render"]] == [0, 1, 2, 3]
    assert [e["done"] for e in by["tempo"]] == [1, 2, 3]
    assert len(by["mix"]) == by["mix"][-1]["total"] > 10
    passes = {e["pass"] for e in by["loudness"]}
    assert passes == set(range(1, max(passes) + 1)) and max(passes) >= 2  # measure, then write
    # each pass counts up to the whole programme
    for p in passes:
        dones = [e["done"] for e in by["loudness"] if e["pass"] == p]
        assert dones == sorted(dones) and dones[-1] == by["loudness"][0]["total"]


def test_stage_progress_is_rate_limited_but_keeps_first_and_last(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("fasttts_cli.app.progress.time.monotonic", lambda: clock[0])
    events = tmp_path / "ev.jsonl"
    rep = Reporter(verbosity=QUIET, jsonl=str(events))
    for k in range(1, 10001):
        clock[0] += 0.001  # 10 000 blocks in 10 s
        rep.stage_progress("mix", k, 10000, unit="blocks")
    rep.stage_progress("mix", 10000, 10000, unit="blocks")  # a repeated final is not written twice
    rep.close()
    sp = [e for e in _events(events) if e["event"] == "stage_progress"]
    assert sp[0]["done"] == 1 and sp[-1]["done"] == 10000 == sp[-1]["total"]
    assert sum(1 for e in sp if e["done"] == 10000) == 1
    per_second = len(sp) / 10.0
    assert 5 <= per_second <= 1 / STAGE_PROGRESS_INTERVAL + 1


def test_mux_reports_ffmpeg_progress_against_the_duration(tmp_path):
    from fasttts_cli.media.ffmpeg import run_ffmpeg

    seen: list[float] = []
    out = tmp_path / "tone.m4a"
    run_ffmpeg(
        ["-f", "lavfi", "-i", "sine=f=220:d=3", "-c:a", "aac", str(out)], what="test", on_time=seen.append
    )
    assert out.is_file() and seen
    assert seen == sorted(seen) and 2.5 <= seen[-1] <= 3.1


def test_synth_reports_its_stages_and_its_line(tmp_path):
    voice = tmp_path / "v.wav"
    sf.write(voice, np.zeros(16000, dtype=np.float32), 16000)
    events = tmp_path / "ev.jsonl"
    rep = Reporter(verbosity=QUIET, jsonl=str(events))
    synth_one(SynthOptions("Hello there.", voice, tmp_path / "o.wav"), rep, synthesizer=RowFake([]))
    rep.close()
    evs = _events(events)
    starts = [e["name"] for e in evs if e["event"] == "stage" and e["status"] == "start"]
    assert starts == ["load", "voices", "synthesize", "render", "write"]
    (done,) = [e for e in evs if e["event"] == "line_done"]
    assert done["line"] == 1 and done["duration"] > 0 and done["error"] is None


def test_bars_go_to_stderr_only(job, tmp_path, capsys):
    err = io.StringIO()
    rep = Reporter(verbosity=1, bars=True, stderr=err)
    run_dub(job, rep, synthesizer=RowFake([]))
    rep.build_component("campplus", 1, 2, 0.5)
    rep.build_component("bigvgan", 2, 2, 0.7)
    rep.close()
    assert capsys.readouterr().out == ""
    text = err.getvalue()
    assert "lines" in text and "3/3" in text  # the synthesis bar, drawn on the stderr we gave


def test_build_command_reports_each_component(tmp_path, monkeypatch, capsys):
    from fasttts_cli.build import export
    from fasttts_cli.cli.commands import main

    names = ["w2v_bert", "campplus", "bigvgan"]

    def fake_build(paths, preset, out, *, overwrite, progress, on_component):
        for k, n in enumerate(names, 1):
            progress(f"exporting {n}")
            on_component(export.ComponentBuilt(n, k, len(names), 0.25 * k))
        return tmp_path / "engine"

    monkeypatch.setattr(export, "build_engine", fake_build)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    events = tmp_path / "ev.jsonl"
    with pytest.raises(SystemExit) as ei:
        main(
            [
                "build",
                "--checkpoint",
                str(ckpt),
                "--out",
                str(tmp_path / "e"),
                "--json",
                "--progress-jsonl",
                str(events),
            ]
        )
    assert ei.value.code == 0
    out = capsys.readouterr().out
    assert json.loads(out)["ok"] is True and out.count("\n") == 1  # --json: one object on stdout
    comp = [e for e in _events(events) if e["event"] == "build_component"]
    assert [(e["component"], e["index"], e["total"]) for e in comp] == [
        (n, k, 3) for k, n in enumerate(names, 1)
    ]
    assert all(e["seconds"] > 0 and e["elapsed"] >= 0 for e in comp)


def test_each_loudness_pass_reports_its_end_even_in_one_block(tmp_path):
    events = tmp_path / "ev.jsonl"
    rep = Reporter(verbosity=QUIET, jsonl=str(events))
    for p in (1, 2):
        rep.stage_progress("loudness", 5.0, 5.0, unit="seconds", **{"pass": p})
    rep.close()
    sp = [e for e in _events(events) if e["event"] == "stage_progress"]
    assert [(e["pass"], e["done"], e["total"]) for e in sp] == [(1, 5, 5), (2, 5, 5)]


def test_mux_progress_comes_from_ffmpeg(job, tmp_path, monkeypatch):
    from fasttts_cli.media import ffmpeg

    video = tmp_path / "in.mp4"
    ffmpeg.run_ffmpeg(
        [
            *("-f", "lavfi", "-i", "testsrc2=s=64x36:r=10:d=8", "-f", "lavfi", "-i", "sine=f=220:d=8"),
            *("-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-shortest", str(video)),
        ],
        what="test media",
    )
    times: list[float] = []
    real = ffmpeg._run_reporting

    def spy(cmd, on_time):
        return real(cmd, lambda t: (times.append(t), on_time(t)))

    monkeypatch.setattr(ffmpeg, "_run_reporting", spy)
    monkeypatch.setattr("fasttts_cli.app.progress.STAGE_PROGRESS_INTERVAL", 0.0)
    job.video = video
    events = tmp_path / "ev.jsonl"
    rep = Reporter(verbosity=QUIET, jsonl=str(events))
    res = run_dub(job, rep, synthesizer=FakeSynth())
    rep.close()
    assert Path(res.outputs["video"]).is_file()
    assert times and max(times) > 7.0  # ffmpeg's own report of the output written
    write = [e for e in _events(events) if e["event"] == "stage_progress" and e["stage"] == "write"]
    assert write[0]["done"] == 0 and write[-1]["done"] == write[-1]["total"] == pytest.approx(8.0, abs=0.1)
