"""The dub job with a scripted fake engine: cache keys, runaway guard, failure policies, outputs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.app.job import DubOptions, GuardBand, OutputPaths, format_ranges, resolve_outputs
from fasttts_cli.app.pipeline import run_dub
from fasttts_cli.dubbing.cache import line_seed
from fasttts_cli.errors import ExitCode, SynthesisError, UsageError
from fasttts_cli.synth.synthesizer import EmotionSpec, SynthRequest, SynthResult, Voice

SR = 24000


class FakeSynth:
    """Speaks a 180 Hz tone, 0.07 s per character; `script` maps text -> list of behaviours per attempt."""

    name = "fake"
    sample_rate = SR
    clones_voice = True

    def __init__(self, script: dict[str, list[str]] | None = None, version: str = "1") -> None:
        self.script = script or {}
        self.version = version
        self.calls: list[list[SynthRequest]] = []
        self.attempts: dict[str, int] = {}

    def identity(self) -> str:
        return f"fake-{self.version}"

    def count_tokens(self, text: str) -> int:
        return len(text)

    def prepare_voice(
        self, path: Path, *, name: str | None = None, emotion: EmotionSpec | None = None
    ) -> Voice:
        return Voice(name or path.stem, path, audio_sha256=path.name * 2, emotion=emotion or EmotionSpec())

    def synthesize(self, requests: Sequence[SynthRequest]) -> list[SynthResult]:
        self.calls.append(list(requests))
        out = []
        for r in requests:
            k = self.attempts.get(r.text, 0)
            self.attempts[r.text] = k + 1
            plan = self.script.get(r.text, [])
            what = plan[k] if k < len(plan) else "ok"
            if what == "error":
                out.append(SynthResult(r.line_id, None, SR, error="engine exploded"))
                continue
            seconds = 40.0 if what == "runaway" else 0.07 * len(r.text)
            t = np.arange(int(seconds * SR)) / SR
            audio = (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)
            out.append(
                SynthResult(r.line_id, audio, SR, n_tokens=len(r.text), hit_token_limit=what == "limit")
            )
        return out

    def close(self) -> None:
        pass


SCRIPT = """start\tend\tspeaker\ttext
0.5\t2.5\tA\tFirst line here.
3.0\t5.0\tB\tSecond line, a bit longer.
5.5\t7.5\tA\tThird one.
"""


def write_job_folder(folder: Path) -> Path:
    """`ep.tsv` (SCRIPT) and the two voices A and B in `folder` (the fake never reads the voices)."""
    (folder / "ep.tsv").write_text(SCRIPT, encoding="utf-8")
    for n in ("a.wav", "b.wav"):
        sf.write(folder / n, np.zeros(10, dtype=np.float32), 16000)
    return folder


def make_job(folder: Path, **options) -> DubOptions:
    """The three-line job over write_job_folder's files, output in `folder/out`."""
    write_job_folder(folder)
    return DubOptions(
        script=folder / "ep.tsv",
        voices=[f"A={folder / 'a.wav'}", f"B={folder / 'b.wav'}"],
        lang="eng",
        output_dir=folder / "out",
        **options,
    )


@pytest.fixture()
def job(tmp_path: Path) -> DubOptions:
    return make_job(tmp_path)


def _report(res) -> dict:
    return json.loads(Path(res.report_path).read_text())


def test_full_run_then_cache_hits_then_edit(job: DubOptions, tmp_path: Path):
    fake = FakeSynth()
    res = run_dub(job, synthesizer=fake)
    assert res.ok and res.lines["synthesized"] == 3 and res.lines["cached"] == 0
    out = Path(res.outputs["audio"])
    assert out == tmp_path / "out" / "ep.eng.wav" and out.is_file()
    assert Path(res.outputs["subtitles"]) == tmp_path / "out" / "ep.eng.srt"
    assert res.work_dir == tmp_path / "out" / "ep.fasttts"
    assert (res.work_dir / "plan.json").is_file()
    rep = _report(res)
    assert [ln["index"] for ln in rep["lines"]] == [1, 2, 3]
    for ln in rep["lines"]:
        assert {"slot", "natural", "factor", "shift", "overflow", "retries", "cached", "error"} <= set(ln)
        assert ln["factor"] <= 1.25 + 1e-9
    # Each line's seed comes from its text and voice only.
    voice_a = fake.prepare_voice(tmp_path / "a.wav").key
    seeds = {r.text: r.seed for call in fake.calls for r in call}
    assert seeds["First line here."] == line_seed("First line here.", voice_a, 0)

    fake2 = FakeSynth()
    res2 = run_dub(job, synthesizer=fake2)
    assert res2.lines["synthesized"] == 0 and res2.lines["cached"] == 3 and fake2.calls == []

    job.script.write_text(SCRIPT.replace("Third one.", "Third one, edited."), encoding="utf-8")
    fake3 = FakeSynth()
    res3 = run_dub(job, synthesizer=fake3)
    assert [r.text for call in fake3.calls for r in call] == ["Third one, edited."]
    assert [ln["cached"] for ln in _report(res3)["lines"]] == [True, True, False]

    # A new engine identity invalidates every line.
    res4 = run_dub(job, synthesizer=FakeSynth(version="2"))
    assert res4.lines["synthesized"] == 3


def test_only_forces_just_those_lines(job: DubOptions):
    run_dub(job, synthesizer=FakeSynth())
    job.only = "2"
    fake = FakeSynth()
    res = run_dub(job, synthesizer=fake)
    assert [r.text for call in fake.calls for r in call] == ["Second line, a bit longer."]
    assert res.lines["synthesized"] == 1 and res.lines["cached"] == 2


def test_runaway_line_is_retried_with_a_new_seed(job: DubOptions):
    fake = FakeSynth({"Third one.": ["runaway", "limit", "ok"]})
    res = run_dub(job, synthesizer=fake)
    tries = [r.seed for call in fake.calls for r in call if r.text == "Third one."]
    assert len(tries) == 3 and len(set(tries)) == 3
    line3 = _report(res)["lines"][2]
    assert line3["retries"] == 2 and line3["error"] is None
    assert res.lines["retries"] == 2


def test_failure_policy_fail_is_exit_1_and_keeps_finished_lines(job: DubOptions):
    fake = FakeSynth({"Third one.": ["error"] * 3})
    with pytest.raises(
        SynthesisError, match=r"ep\.tsv:4: line 3 failed after 2 retries: engine exploded"
    ) as ei:
        run_dub(job, synthesizer=fake)
    assert ei.value.exit_code == ExitCode.RUNTIME
    # It stops at the failing batch (voice A: lines 1 and 3), after caching line 1: a re-run
    # synthesizes line 3 and line 2 (whose batch never ran), not line 1.
    fake2 = FakeSynth()
    run_dub(job, synthesizer=fake2)
    assert sorted(r.text for call in fake2.calls for r in call) == [
        "Second line, a bit longer.",
        "Third one.",
    ]


@pytest.mark.parametrize("policy", ["silence", "skip"])
def test_failure_policy_silence_and_skip(job: DubOptions, policy: str):
    job.on_line_failure = policy
    job.max_retries = 0
    res = run_dub(job, synthesizer=FakeSynth({"Second line, a bit longer.": ["runaway"]}))
    assert res.ok and res.lines["failed"] == 1
    assert any("line 2 failed" in w for w in res.warnings)
    line2 = _report(res)["lines"][1]
    assert line2["action"] == ("silence" if policy == "silence" else "skipped")
    assert "too long" in line2["error"]
    srt = Path(res.outputs["subtitles"]).read_text()
    assert ("Second line" in srt) == (policy == "silence")


def test_dry_run_synthesizes_nothing(job: DubOptions):
    job.dry_run = True
    fake = FakeSynth()
    res = run_dub(job, synthesizer=fake)
    assert res.dry_run and fake.calls == [] and res.report_path is None
    assert res.lines["total"] == 3
    assert not (job.output_dir / "ep.eng.wav").exists()


def test_untimed_text_is_laid_out_from_real_durations(tmp_path: Path):
    script = tmp_path / "s.txt"
    script.write_text("One short line.\nAnd another, longer line of text.\n", encoding="utf-8")
    sf.write(tmp_path / "v.wav", np.zeros(10, dtype=np.float32), 16000)
    o = DubOptions(script=script, voices=[str(tmp_path / "v.wav")], lang="eng")
    res = run_dub(o, synthesizer=FakeSynth())
    lines = _report(res)["lines"]
    assert lines[0]["start"] == 0.0 and lines[0]["factor"] == 1.0
    assert lines[1]["start"] == pytest.approx(lines[0]["natural"] + 0.5, abs=1e-3)


def test_guard_band():
    g = GuardBand()
    assert g.check("Hello there.", 0.9, False) is None
    assert "too short" in g.check("Hello there, how are you doing today?", 0.1, False)
    assert "too long" in g.check("Hi.", 30.0, False)
    assert "token limit" in g.check("Hi.", 0.5, True)


def test_output_naming(tmp_path: Path):
    o = DubOptions(script=tmp_path / "ep.srt", lang="spa", video=tmp_path / "ep.mkv")
    p = resolve_outputs(o)
    assert p == OutputPaths(tmp_path / "ep.spa.mkv", tmp_path / "ep.spa.srt", tmp_path / "ep.fasttts", "ep")
    o = DubOptions(script=tmp_path / "ep.srt", lang="spa", output=tmp_path / "x" / "dub.wav")
    assert resolve_outputs(o).subtitles == tmp_path / "x" / "dub.srt"
    with pytest.raises(UsageError, match="extension"):
        resolve_outputs(DubOptions(script=tmp_path / "ep.srt", output=tmp_path / "dub.mp4"))


def test_ranges():
    assert format_ranges([7, 1, 2, 3, 9, 10]) == "1-3, 7, 9-10"


def test_progress_events(job: DubOptions, tmp_path: Path):
    from fasttts_cli.app.progress import QUIET, Reporter

    events = tmp_path / "events.jsonl"
    rep = Reporter(verbosity=QUIET, jsonl=str(events))
    job.batch_size = 1
    run_dub(job, rep, synthesizer=FakeSynth())
    rep.close()
    evs = [json.loads(line) for line in events.read_text().splitlines()]
    kinds = [e["event"] for e in evs]
    assert kinds[-1] == "done" and evs[-1]["ok"] is True
    assert kinds.count("batch_start") == kinds.count("batch_done") == 3  # one line per batch
    done = [e for e in evs if e["event"] == "line_done"]
    assert sorted(e["line"] for e in done) == [1, 2, 3]
    assert all(e["cached"] is False and e["duration"] > 0 and e["rtf"] is not None for e in done)
    assert {"read", "plan", "synthesize", "tempo", "loudness", "write"} <= {
        e["name"] for e in evs if e["event"] == "stage"
    }
    assert all(evs[k]["t"] <= evs[k + 1]["t"] for k in range(len(evs) - 1))
