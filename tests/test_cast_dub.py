"""The cast wired into `fasttts dub`: `--voice [NAME=]from-video` builds cast.toml and the references the
lines are spoken with, `--cast FILE` reuses one (an edited reference re-synthesizes only its speaker's
lines), `--emotion-from-line` gives each line its own cue audio as emotion reference (cached, with a
counted fallback), `--dialogue-stem` is the source instead of the mix; the exit-2 cases through the CLI."""

from __future__ import annotations

import json
import shutil
import tomllib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.app.job import DubOptions
from fasttts_cli.app.pipeline import run_dub
from fasttts_cli.casting.castfile import file_sha256
from fasttts_cli.cli.commands import main
from fasttts_cli.dubbing.speakers import FROM_VIDEO, parse_voice_flags
from fasttts_cli.errors import ExitCode, UsageError
from fasttts_cli.media.ffmpeg import run_ffmpeg
from fasttts_cli.synth.synthesizer import EmotionSpec, SynthRequest, SynthResult, Voice

SR = 24000
DURATION = 24.0
# (start, end, speaker, text, pitch): A and B alternate; line 4 (A) overlaps B's line 3; line 7's cue is
# silent in the source (its emotion falls back to the speaker's reference).
CUES = [
    (0.5, 3.5, "A", "The first thing I said.", 140),
    (4.0, 7.0, "B", "And here I answer you.", 230),
    (7.5, 10.5, "B", "Then I go on a while.", 230),
    (9.5, 13.0, "A", "I cut in over the top.", 140),
    (13.5, 17.0, "A", "And then I speak alone.", 140),
    (17.5, 20.5, "B", "So do I, at the end.", 230),
    (21.0, 23.0, "A", "A silent line.", 0),
]


def _voiced(t: np.ndarray, f0: float, rate: float) -> np.ndarray:
    phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.03 * np.sin(2 * np.pi * 5 * t))) / SR
    x = sum(np.sin(k * phase) / k for k in range(1, 10))
    return x * (0.55 + 0.45 * np.sin(2 * np.pi * rate * t) ** 2)


def _episode(folder: Path, bed: float = 0.01) -> dict[str, Path]:
    """dialogue.wav (the speech alone), me.wav (a noise bed), ep.mkv (their mix), ep.tsv (labeled cues)."""
    folder.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(DURATION * SR)) / SR
    speech = np.zeros_like(t)
    for k, (s, e, _, _, f0) in enumerate(CUES):
        if not f0:
            continue
        m = (t >= s) & (t < e)
        if k == 3:  # the overlapping A line starts where B's line 3 ends
            m &= t >= 10.5
        speech[m] += 0.3 * _voiced(t[m] - s, f0, 2.0 + k)  # a different delivery per line
    noise = bed * np.random.default_rng(0).standard_normal(t.size)
    paths = {"dialogue": folder / "dialogue.wav", "me": folder / "me.wav", "mix": folder / "mix.wav"}
    sf.write(paths["dialogue"], speech.astype(np.float32), SR)
    sf.write(paths["me"], noise.astype(np.float32), SR)
    sf.write(paths["mix"], (speech + noise).astype(np.float32), SR)
    paths["video"] = folder / "ep.mkv"
    args = ["-f", "lavfi", "-i", f"color=c=gray:s=16x16:r=2:d={DURATION}", "-i", str(paths["mix"])]
    args += [
        "-map",
        "0:v",
        "-map",
        "1:a",
        "-c:v",
        "mpeg4",
        "-c:a",
        "pcm_s16le",
        "-shortest",
        str(paths["video"]),
    ]
    run_ffmpeg(args, what="test video")
    rows = ["start\tend\tspeaker\ttext"] + [f"{s}\t{e}\t{spk}\t{txt}" for s, e, spk, txt, _ in CUES]
    paths["script"] = folder / "ep.tsv"
    paths["script"].write_text("\n".join(rows) + "\n", encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def episode(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _episode(tmp_path_factory.mktemp("episode"))


class SpyFake:
    """A cloning fake whose voice key is the reference's (and emotion reference's) content, as a real
    engine's is; records every line it speaks and every voice it prepares."""

    name = "spy"
    sample_rate = SR

    def __init__(self, clones: bool = True) -> None:
        self.clones_voice = clones
        self.spoken: list[SynthRequest] = []
        self.prepared: list[Voice] = []

    def identity(self) -> str:
        return "spy-1"

    def count_tokens(self, text: str) -> int:
        return len(text)

    def prepare_voice(
        self, path: Path, *, name: str | None = None, emotion: EmotionSpec | None = None
    ) -> Voice:
        v = Voice(name or path.stem, path, file_sha256(path), emotion=emotion or EmotionSpec())
        self.prepared.append(v)
        return v

    def synthesize(self, requests: Sequence[SynthRequest]) -> list[SynthResult]:
        self.spoken += requests
        out = []
        for r in requests:
            n = int(0.05 * len(r.text) * SR)
            tone = 0.2 * np.sin(2 * np.pi * 180 * np.arange(n) / SR)
            out.append(SynthResult(r.line_id, tone.astype(np.float32), SR, n_tokens=len(r.text)))
        return out

    def close(self) -> None:
        pass


def _opts(ep: dict[str, Path], out: Path, **kw) -> DubOptions:
    kw.setdefault("voices", [FROM_VIDEO])
    return DubOptions(script=ep["script"], video=ep["video"], output_dir=out, work_dir=out / "work", **kw)


def _spoken_by(fake: SpyFake) -> dict[str, Path]:
    return {r.text: r.voice.path for r in fake.spoken}


def test_from_video_builds_the_cast_and_speaks_with_it(episode: dict[str, Path], tmp_path: Path) -> None:
    fake = SpyFake()
    res = run_dub(_opts(episode, tmp_path), synthesizer=fake)
    cast_file = tmp_path / "work" / "cast.toml"
    doc = tomllib.loads(cast_file.read_text(encoding="utf-8"))["speakers"]
    assert set(doc) == {"A", "B"}
    for name, t in doc.items():
        own = [(s, e) for s, e, spk, _, _ in CUES if spk == name]
        other = [(s, e) for s, e, spk, _, _ in CUES if spk != name]
        for a, b in t["spans"]:
            assert any(s <= a and b <= e for s, e in own), (name, a, b)
            assert all(b <= s or a >= e for s, e in other), (name, a, b)
        ref = cast_file.parent / t["reference"]
        assert 3.0 <= sf.info(str(ref)).duration <= 12.0
        assert t["source_sha256"] == file_sha256(episode["video"])
    # every line is spoken with its speaker's reference from the cast, as a user's file would be
    for _, _, spk, text, _ in CUES:
        assert _spoken_by(fake)[text] == cast_file.parent / doc[spk]["reference"]
    assert res.outputs["cast"] == str(cast_file)
    assert set(res.to_json()["cast"]["speakers"]) == {"A", "B"}
    report = json.loads((tmp_path / "work" / "report.json").read_text(encoding="utf-8"))
    assert report["cast"]["speakers"]["A"]["from"] == "source"
    assert [Path(ln["reference"]).name for ln in report["lines"]] == [f"{c[2]}.wav" for c in CUES]


def test_an_explicit_voice_wins_and_a_file_named_from_video_is_a_file(
    episode: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "mine.wav"
    shutil.copy(episode["dialogue"], mine)
    fake = SpyFake()
    run_dub(_opts(episode, tmp_path, voices=[FROM_VIDEO, f"B={mine}"]), synthesizer=fake)
    doc = tomllib.loads((tmp_path / "work" / "cast.toml").read_text(encoding="utf-8"))["speakers"]
    assert set(doc) == {"A"}  # B has a file of its own: nothing is cut for it
    assert _spoken_by(fake)["And here I answer you."] == mine
    monkeypatch.chdir(tmp_path)
    shutil.copy(mine, tmp_path / FROM_VIDEO)
    vm = parse_voice_flags([f"./{FROM_VIDEO}", f"A={FROM_VIDEO}"])
    assert vm.default == Path(FROM_VIDEO) and vm.from_video == ("A",)


def test_a_reused_cast_with_one_edited_reference_resynthesizes_only_that_speaker(
    episode: dict[str, Path], tmp_path: Path
) -> None:
    run_dub(_opts(episode, tmp_path / "ep1"), synthesizer=SpyFake())
    # The cast travels to the next episode's folder (cast.toml and its references beside it).
    kept = tmp_path / "show"
    shutil.copytree(tmp_path / "ep1" / "work" / "cast", kept / "cast")
    shutil.copy(tmp_path / "ep1" / "work" / "cast.toml", kept / "cast.toml")
    first = SpyFake()
    res = run_dub(_opts(episode, tmp_path / "ep2", voices=[], cast=kept / "cast.toml"), synthesizer=first)
    assert res.lines["synthesized"] == len(CUES)
    assert {p.parent for p in _spoken_by(first).values()} == {kept / "cast"}
    again = SpyFake()
    assert run_dub(_opts(episode, tmp_path / "ep2", voices=[], cast=kept / "cast.toml"), synthesizer=again)
    assert again.spoken == []
    # Edit A's reference: only A's lines are synthesized again.
    ref_a = kept / tomllib.loads((kept / "cast.toml").read_text())["speakers"]["A"]["reference"]
    audio, sr = sf.read(ref_a, dtype="float32")
    sf.write(ref_a, 0.5 * audio, sr)
    edited = SpyFake()
    res = run_dub(_opts(episode, tmp_path / "ep2", voices=[], cast=kept / "cast.toml"), synthesizer=edited)
    assert sorted(r.text for r in edited.spoken) == sorted(t for _, _, spk, t, _ in CUES if spk == "A")
    assert res.lines["cached"] == sum(1 for c in CUES if c[2] == "B")
    assert res.to_json()["cast"]["speakers"]["B"]["from"] == "cast"


def test_emotion_from_line_gives_each_line_its_own_cue_and_reruns_from_the_cache(
    episode: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = SpyFake()
    o = _opts(episode, tmp_path, emotion_from_line=True, emotion=EmotionSpec(alpha=0.7))
    res = run_dub(o, synthesizer=fake)
    by_text = {r.text: r.voice.emotion for r in fake.spoken}
    clips = [by_text[t].audio for _, _, _, t, f0 in CUES if f0]
    assert all(c is not None and c.is_relative_to(tmp_path / "work" / "emotion") for c in clips)
    assert len(set(clips)) == len(clips)  # a clip per line, not per speaker
    assert all(by_text[t].alpha == 0.7 for _, _, _, t, _ in CUES)
    assert by_text["A silent line."].audio is None  # the fallback: the speaker's own reference
    assert res.lines["emotion_fallbacks"] == 1 and res.lines["emotion_from_line"] == len(CUES) - 1
    report = json.loads((tmp_path / "work" / "report.json").read_text(encoding="utf-8"))
    assert [ln["emotion_fallback"] for ln in report["lines"]] == [not c[4] for c in CUES]
    stamps = {c: c.stat().st_mtime_ns for c in clips}
    again = SpyFake()
    res = run_dub(o, synthesizer=again)
    assert again.spoken == [] and res.lines["cached"] == len(CUES)
    assert {c: c.stat().st_mtime_ns for c in clips} == stamps  # cut once, not rewritten
    # the same work folder spelled another way: the clips' keys name their content, not their path
    monkeypatch.chdir(tmp_path)
    relative = SpyFake()
    o.work_dir, o.output_dir = Path("work"), Path(".")
    assert run_dub(o, synthesizer=relative).lines["cached"] == len(CUES) and relative.spoken == []


def test_dialogue_stem_is_the_source_and_background_takes_the_me_stem(
    episode: dict[str, Path], tmp_path: Path
) -> None:
    fake = SpyFake()
    o = _opts(
        episode,
        tmp_path,
        dialogue_stem=episode["dialogue"],
        emotion_from_line=True,
        background=episode["me"],
        mix="background",
    )
    res = run_dub(o, synthesizer=fake)
    doc = tomllib.loads((tmp_path / "work" / "cast.toml").read_text(encoding="utf-8"))["speakers"]
    assert {t["source"] for t in doc.values()} == {str(episode["dialogue"])}
    assert res.to_json()["cast"]["source"] == str(episode["dialogue"])
    assert res.lines["emotion_fallbacks"] == 1


def test_draft_voice_still_builds_the_cast_and_says_piper_does_not_clone(
    episode: dict[str, Path], tmp_path: Path
) -> None:
    res = run_dub(_opts(episode, tmp_path), synthesizer=SpyFake(clones=False))
    assert (tmp_path / "work" / "cast.toml").is_file()
    assert any("does not clone" in w and "cast.toml" in w for w in res.warnings)
    assert set(res.to_json()["cast"]["speakers"]) == {"A", "B"}


def test_too_little_clean_speech_names_the_speaker(episode: dict[str, Path], tmp_path: Path) -> None:
    script = tmp_path / "short.tsv"
    script.write_text("start\tend\tspeaker\ttext\n0.5\t3.5\tA\tHello.\n4.0\t5.0\tB\tHi.\n", encoding="utf-8")
    o = DubOptions(
        script=script, voices=[FROM_VIDEO], video=episode["video"], output_dir=tmp_path, dry_run=True
    )
    with pytest.raises(UsageError) as e:
        run_dub(o, synthesizer=SpyFake())
    assert e.value.exit_code == ExitCode.USAGE
    assert "'B'" in e.value.message and "--voice B=PATH" in (e.value.hint or "")


# ---- the CLI, as a user drives it ----------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, dict]:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out = capsys.readouterr().out
    return int(e.value.code), json.loads(out) if out.strip() else {}


def test_cli_dry_run_builds_the_cast(episode: dict[str, Path], tmp_path: Path, capsys) -> None:
    code, r = _cli(
        capsys, "dub", episode["script"], "--video", episode["video"], "--voice", FROM_VIDEO,
        "--output-dir", tmp_path, "--dry-run", "--json",
    )  # fmt: skip
    assert code == 0, r
    assert set(r["cast"]["speakers"]) == {"A", "B"} and Path(r["cast"]["file"]).is_file()


FROM_LINE = ["--video", "VIDEO", "--emotion-from-line"]


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--voice", FROM_VIDEO], "--voice from-video"),  # no --video
        (["--voice", f"A={FROM_VIDEO}", "--voice", "B=VOICE"], "--voice from-video"),
        (["--voice", "VOICE", "--emotion-from-line"], "--emotion-from-line"),  # no --video
        (["--voice", "VOICE", *FROM_LINE, "--emotion-audio", "VOICE"], "--emotion-from-line"),
        (["--voice", "VOICE", *FROM_LINE, "--emotion-vector", "0,0,0,0,0,0,0,1"], "--emotion-from-line"),
        (["--voice", FROM_VIDEO, "--video", "VIDEO", "--dialogue-stem", "SHORT"], "--dialogue-stem"),
        (["--voice", FROM_VIDEO, "--video", "VIDEO", "--dialogue-stem", "MISSING"], "--dialogue-stem"),
        (["--voice", "VOICE", "--cast", "MISSING"], "--cast"),
    ],
)  # fmt: skip
def test_cli_exit_2_names_the_flag(
    episode: dict[str, Path], tmp_path: Path, capsys, extra: list[str], flag: str
) -> None:
    short = tmp_path / "short.wav"
    sf.write(short, np.zeros(SR * 10, np.float32), SR)
    subst = {
        "VOICE": episode["dialogue"],
        "VIDEO": episode["video"],
        "SHORT": short,
        "MISSING": tmp_path / "missing.wav",
    }
    args = [str(subst.get(a, a)) if "=" not in a else a.replace("VOICE", str(subst["VOICE"])) for a in extra]
    code, r = _cli(capsys, "dub", episode["script"], *args, "--output-dir", tmp_path, "--dry-run", "--json")
    assert code == int(ExitCode.USAGE), r
    assert flag in r["error"], r


def test_flags_with_nothing_to_act_on_warn(episode: dict[str, Path], tmp_path: Path) -> None:
    other = tmp_path / "other.toml"
    other.write_text('[speakers.ZED]\nreference = "z.wav"\n', encoding="utf-8")
    shutil.copy(episode["dialogue"], tmp_path / "z.wav")
    o = _opts(
        episode, tmp_path, voices=[str(episode["dialogue"])], cast=other, dialogue_stem=episode["dialogue"]
    )
    res = run_dub(o, synthesizer=SpyFake())
    assert any("names none of the script's speakers" in w and "ZED" in w for w in res.warnings)
    assert any("--dialogue-stem" in w and "not used" in w for w in res.warnings)


SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.mark.skipif(
    not (SAMPLES / "dialogue.mp4").is_file(), reason="samples/dialogue.mp4 is not in this tree"
)
def test_the_two_speaker_sample_casts_from_its_own_cues(tmp_path: Path, capsys) -> None:
    from fasttts_cli.dubbing.readers import read_script_full

    script = SAMPLES / "dialogue.ass"
    code, r = _cli(
        capsys, "dub", script, "--video", SAMPLES / "dialogue.mp4", "--voice", FROM_VIDEO,
        "--output-dir", tmp_path, "--dry-run", "--json",
    )  # fmt: skip
    assert code == 0, r
    cues = read_script_full(script).cues
    doc = tomllib.loads(Path(r["cast"]["file"]).read_text(encoding="utf-8"))["speakers"]
    assert set(doc) == {c.speaker for c in cues}
    for name, t in doc.items():
        own = [(c.start, c.end) for c in cues if c.speaker == name]
        other = [(c.start, c.end) for c in cues if c.speaker != name]
        for a, b in t["spans"]:
            assert any(s <= a and b <= e for s, e in own) and all(b <= s or a >= e for s, e in other)
        assert 3.0 <= sf.info(str(Path(r["cast"]["file"]).parent / t["reference"])).duration <= 12.0


def test_an_edited_emotion_audio_resynthesizes_its_lines(episode: dict[str, Path], tmp_path: Path) -> None:
    emo = tmp_path / "emo.wav"
    shutil.copy(episode["dialogue"], emo)
    o = _opts(episode, tmp_path, voices=[str(episode["dialogue"])], emotion=EmotionSpec(audio=emo))
    run_dub(o, synthesizer=SpyFake())
    o.emotion = EmotionSpec(audio=emo)  # a fresh run's options, as the CLI makes them
    same = SpyFake()
    run_dub(o, synthesizer=same)
    assert same.spoken == []
    audio, sr = sf.read(emo, dtype="float32")
    sf.write(emo, 0.5 * audio, sr)
    o.emotion = EmotionSpec(audio=emo)
    edited = SpyFake()
    run_dub(o, synthesizer=edited)
    assert len(edited.spoken) == len(CUES)
