"""Takes (`--retake`, `--take`, the work folder's takes.json) with a fake engine whose audio depends on the
seed: a new take is a new seed and a new cache entry, earlier takes stay, going back synthesizes nothing
and gives the earlier output bit for bit, the choice survives a plain run, a line that moves keeps it and
a changed text starts afresh; on the tiny seeded IndexTTS-2 engine a take is reproducible. The real
draft voice on the demo: tests/test_takes_e2e.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.app.job import DubOptions
from fasttts_cli.app.manifest import load_jobs
from fasttts_cli.app.pipeline import run_dub
from fasttts_cli.cli.batch import DubArgv
from fasttts_cli.dubbing.cache import line_seed, take_seed
from fasttts_cli.dubbing.takes import TAKES_FILE, existing_takes, line_slots, parse_take
from fasttts_cli.errors import UsageError
from fasttts_cli.synth.synthesizer import SynthRequest, SynthResult
from tests.conftest_engine import *  # noqa: F403 (fixtures: tiny_engine_dir, voice_wav)
from tests.test_cli import run
from tests.test_pipeline import SCRIPT, SR, FakeSynth, make_job

LINE2 = "Second line, a bit longer."


class SeedSynth(FakeSynth):
    """FakeSynth whose tone's pitch comes from the seed: two takes of a line sound different."""

    def synthesize(self, requests: Sequence[SynthRequest]) -> list[SynthResult]:
        out = super().synthesize(requests)
        for r, res in zip(requests, out, strict=True):
            if res.audio is not None:
                t = np.arange(len(res.audio)) / SR
                res.audio[:] = 0.3 * np.sin(2 * np.pi * (150 + r.seed % 200) * t)
        return out


def _report(res) -> dict:
    return json.loads(Path(res.report_path).read_text())


def _plans(work: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of the plan cache: its bytes and mtime (ns)."""
    return {str(p.relative_to(work)): (p.read_bytes(), p.stat().st_mtime_ns) for p in work.glob("plans/*/*")}


def _texts(fake: FakeSynth) -> list[str]:
    return [r.text for call in fake.calls for r in call]


@pytest.fixture()
def job(tmp_path: Path) -> DubOptions:
    return make_job(tmp_path)


def test_take_seed_rule() -> None:
    assert take_seed(12345, 1) == 12345  # take 1 is today's seed: old caches stay valid
    seeds = [take_seed(12345, t) for t in range(1, 6)]
    assert len(set(seeds)) == 5 and all(0 <= s < 2**31 for s in seeds)
    assert seeds == [take_seed(12345, t) for t in range(1, 6)]  # reproducible
    assert take_seed(12346, 2) != seeds[1]


def test_retake_take_back_and_a_plain_run_keeps_the_choice(job: DubOptions) -> None:
    first = run_dub(job, synthesizer=SeedSynth())
    work = first.work_dir
    dub1 = (work / "dub.wav").read_bytes()
    before = _plans(work)
    assert not (work / TAKES_FILE).exists()  # a dub that never asked for a take writes no book
    assert [(ln["take"], ln["takes"]) for ln in _report(first)["lines"]] == [(1, [1])] * 3

    job.retake = "2"
    fake = SeedSynth()
    res = run_dub(job, synthesizer=fake)
    voice_b = fake.prepare_voice(job.script.parent / "b.wav").key
    seeds = [r.seed for call in fake.calls for r in call]
    assert _texts(fake) == [LINE2] and seeds == [take_seed(line_seed(LINE2, voice_b, 0), 2)]
    assert res.lines["synthesized"] == 1 and res.lines["cached"] == 2
    assert res.lines["retaken"] == [2] and res.lines["chosen_takes"] == {"2": 2}
    lines = _report(res)["lines"]
    assert [(ln["take"], ln["takes"]) for ln in lines] == [(1, [1]), (2, [1, 2]), (1, [1])]
    assert lines[1]["seed"] == seeds[0]
    after = _plans(work)
    assert {k: v for k, v in after.items() if k in before} == before  # every earlier entry untouched
    assert len(after) == len(before) + 2  # the new take's .npy and .json
    dub2 = (work / "dub.wav").read_bytes()
    assert dub2 != dub1

    # Back to take 1: nothing synthesized, the first output bit for bit.
    job.retake, job.take = None, ["2=1"]
    fake = SeedSynth()
    res = run_dub(job, synthesizer=fake)
    assert fake.calls == [] and res.lines["synthesized"] == 0 and res.lines["chosen_takes"] == {}
    assert (work / "dub.wav").read_bytes() == dub1
    assert [ln["takes"] for ln in _report(res)["lines"]][1] == [1, 2]

    # On take 2 again; a plain run keeps it.
    job.take = ["2=2"]
    run_dub(job, synthesizer=SeedSynth())
    job.take = None
    fake = SeedSynth()
    res = run_dub(job, synthesizer=fake)
    assert fake.calls == [] and (work / "dub.wav").read_bytes() == dub2
    assert [ln["take"] for ln in _report(res)["lines"]] == [1, 2, 1]
    book = json.loads((work / TAKES_FILE).read_text())
    (entry,) = book["slots"].values()
    assert entry == {"line": 2, "text": LINE2, "take": 2, "made": 2}

    # Another retake is take 3 (one past the highest made); --take of a take never made is exit 2.
    job.retake = "2"
    res = run_dub(job, synthesizer=SeedSynth())
    assert res.lines["chosen_takes"] == {"2": 3}
    job.retake, job.take = None, ["2=7"]
    with pytest.raises(UsageError, match=r"--take 2=7: line 2 has no take 7 \(its takes: 1, 2, 3\)"):
        run_dub(job, synthesizer=SeedSynth())


def test_a_changed_text_starts_afresh_and_a_moved_line_keeps_its_take(job: DubOptions) -> None:
    run_dub(job, synthesizer=SeedSynth())
    job.retake = "2"
    run_dub(job, synthesizer=SeedSynth())
    job.retake = None
    edited = SCRIPT.replace(LINE2, "Second line, edited.")
    job.script.write_text(edited, encoding="utf-8")
    res = run_dub(job, synthesizer=SeedSynth())
    assert [(ln["take"], ln["takes"]) for ln in _report(res)["lines"]] == [(1, [1])] * 3

    # Back to the old text: its takes come back with it, the line on take 2 as it was.
    job.script.write_text(SCRIPT, encoding="utf-8")
    fake = SeedSynth()
    res = run_dub(job, synthesizer=fake)
    assert fake.calls == [] and [ln["take"] for ln in _report(res)["lines"]] == [1, 2, 1]

    # A cue inserted before it: the line is number 3 now, and still on its take 2.
    moved = SCRIPT.replace("3.0\t5.0", "2.6\t2.9\tA\tHi.\n3.0\t5.0")
    job.script.write_text(moved, encoding="utf-8")
    fake = SeedSynth()
    res = run_dub(job, synthesizer=fake)
    assert _texts(fake) == ["Hi."]
    assert [(ln["text"], ln["take"]) for ln in _report(res)["lines"]][2] == (LINE2, 2)


def test_lines_with_the_same_words_keep_separate_takes(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    job.script.write_text(SCRIPT.replace("Third one.", "First line here."), encoding="utf-8")
    run_dub(job, synthesizer=SeedSynth())  # lines 1 and 3: same text, same voice, one cache entry
    job.retake = "3"
    res = run_dub(job, synthesizer=SeedSynth())
    lines = _report(res)["lines"]
    assert [ln["take"] for ln in lines] == [1, 1, 2]
    assert lines[0]["takes"] == lines[2]["takes"] == [1, 2]  # the takes of the words are shared
    # Line 1 can take line 3's take without synthesizing.
    job.retake, job.take = None, ["1=2"]
    fake = SeedSynth()
    res = run_dub(job, synthesizer=fake)
    assert fake.calls == [] and [ln["take"] for ln in _report(res)["lines"]] == [2, 1, 2]


def test_a_failed_retake_keeps_the_previous_take_for_later_runs(job: DubOptions) -> None:
    run_dub(job, synthesizer=SeedSynth())
    job.retake, job.on_line_failure, job.max_retries = "2", "silence", 0
    res = run_dub(job, synthesizer=SeedSynth({LINE2: ["error"]}))
    assert any("line 2: its new take 2 failed; later runs keep take 1" in w for w in res.warnings)
    line2 = _report(res)["lines"][1]
    assert line2["take"] == 2 and line2["takes"] == [1] and line2["error"]
    job.retake = None
    fake = SeedSynth()
    res = run_dub(job, synthesizer=fake)
    assert fake.calls == [] and [ln["take"] for ln in _report(res)["lines"]] == [1, 1, 1]
    job.retake = "2"  # the failed take's number is used: the next new take is 3
    assert run_dub(job, synthesizer=SeedSynth()).lines["chosen_takes"] == {"2": 3}


def test_an_unreadable_takes_file_warns_and_starts_on_take_1(job: DubOptions) -> None:
    first = run_dub(job, synthesizer=SeedSynth())
    job.retake = "2"
    run_dub(job, synthesizer=SeedSynth())
    (first.work_dir / TAKES_FILE).write_text("{not json", encoding="utf-8")
    job.retake = None
    res = run_dub(job, synthesizer=SeedSynth())
    assert any("takes.json is unreadable" in w for w in res.warnings)
    assert [(ln["take"], ln["takes"]) for ln in _report(res)["lines"]][1] == (1, [1, 2])


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--retake", "9999"], "--retake 9999: no line 9999 in "),
        (["--retake", "2,9999"], "--retake 2,9999: no line 9999 in "),
        (["--take", "9999=1"], "--take 9999=1: no line 9999 in "),
        (["--take", "2=x"], "--take 2=x: '2=x' is not LINE=TAKE"),
        (["--take", "2=0"], "--take 2=0: line and take numbers start at 1"),
        (["--take", "2=1", "--take", "2=2"], "--take: line 2 is given two takes (1 and 2)"),
        (["--retake", "0"], "--retake 0: cue numbers start at 1"),
    ],
)
def test_bad_line_numbers_are_exit_2_naming_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], says: str
) -> None:
    job = make_job(tmp_path)
    args = ["dub", job.script, *(f"--voice={v}" for v in job.voices), "--dry-run", *flags]
    code, out, err = run(capsys, *args, "--output-dir", tmp_path / "out")
    assert code == 2 and out == "", err
    assert says in err and "Traceback" not in err


def test_retake_and_take_of_one_line_is_exit_2(job: DubOptions) -> None:
    job.retake, job.take = "1-2", ["2=1"]
    with pytest.raises(UsageError, match="--retake and --take both name line 2"):
        run_dub(job, synthesizer=SeedSynth())


def test_parsing_and_slots() -> None:
    assert parse_take(["7=1", "9=2, 10=3"]) == {7: 1, 9: 2, 10: 3}
    assert parse_take(["7=1", "7=1"]) == {7: 1}
    slots = line_slots([(3, "Yes.", "v"), (1, "Yes.", "v"), (2, "Yes.", "w"), (4, " Yes. ", "v")])
    assert slots[1].endswith("#1") and slots[3].endswith("#2") and slots[4].endswith("#3")
    assert slots[1].split("#")[0] == slots[4].split("#")[0] != slots[2].split("#")[0]
    assert existing_takes({1, 2, 6}.__contains__, 4) == [1, 2]
    assert existing_takes({1, 2, 5, 6}.__contains__, 4) == [1, 2, 5, 6]
    assert existing_takes({1, 2}.__contains__, 0) == [1, 2]  # a cache kept without its book


def test_a_manifest_row_takes_retake_and_take(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    rows = [
        {"id": "a", "script": str(job.script), "voice": job.voices, "retake": "1,3"},
        {
            "id": "b",
            "script": str(job.script),
            "voice": job.voices,
            "take": ["2=1", "3=2"],
            "output_dir": str(tmp_path / "b"),
        },
    ]
    m = tmp_path / "jobs.jsonl"
    m.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    a, b = load_jobs(m, DubArgv())
    assert a.options.retake == "1,3" and b.options.take == ["2=1", "3=2"]


def test_a_line_with_nothing_to_say_has_no_takes(job: DubOptions) -> None:
    job.script.write_text(SCRIPT + "8.0\t9.0\tA\t[door slams]\n", encoding="utf-8")
    job.retake = "4"
    with pytest.raises(UsageError, match="--retake: line 4 has nothing to say after cleanup"):
        run_dub(job, synthesizer=SeedSynth())


@pytest.mark.slow
def test_a_take_is_reproducible_on_a_seeded_engine(
    tmp_path: Path, tiny_engine_dir: Path, voice_wav: Path
) -> None:
    """The tiny IndexTTS-2 engine (seeded sampling): take 2 made in two work folders, one after take 1
    and one straight away, is the same key and the same codes, and not take 1's."""
    from fasttts_cli.app.engine_load import load_synthesizer
    from fasttts_cli.synth.engine_select import select_engine

    script = tmp_path / "ep.srt"
    script.write_text("1\n00:00:00,500 --> 00:00:02,500\nHello there.\n", encoding="utf-8")
    synth = load_synthesizer(select_engine(str(tiny_engine_dir)), None, cache_dir=tmp_path / "voices")

    def line1(folder: str, retake: str | None = None) -> tuple[dict, bytes]:
        o = DubOptions(script=script, voices=[str(voice_wav)], output_dir=tmp_path / folder, retake=retake)
        (ln,) = _report(run_dub(o, synthesizer=synth))["lines"]
        return ln, (
            tmp_path / folder / "ep.fasttts" / "plans" / ln["key"][:2] / f"{ln['key']}.npy"
        ).read_bytes()

    try:
        one, codes1 = line1("a")
        a, codes_a = line1("a", "1")
        b, codes_b = line1("b", "1")
    finally:
        synth.close()
    assert (one["take"], a["take"], b["take"]) == (1, 2, 2) and a["takes"] == [1, 2] and b["takes"] == [2]
    assert a["key"] == b["key"] and a["seed"] == b["seed"] == take_seed(one["seed"], 2)
    assert codes_a == codes_b != codes1
