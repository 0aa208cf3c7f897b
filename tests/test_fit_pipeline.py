"""The dub job in two phases with a two-phase fake engine: plan, time on natural lengths, render to target."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.app.pipeline import DubOptions, run_dub
from fasttts_cli.app.single_line import SynthOptions, synth_one
from fasttts_cli.dubbing.cache import LineCache
from fasttts_cli.errors import ExitCode, UsageError
from fasttts_cli.synth.synthesizer import LinePlan, RenderRequest, SynthRequest, SynthResult
from tests.test_pipeline import FakeSynth

SR = 22050
HOP = 256
PER_CHAR = 0.06  # natural seconds per character of the fake voice


class TwoPhaseFake(FakeSynth):
    """Plans a line as one int32 'code' per character (natural: PER_CHAR s each); renders it to exactly
    `frames * hop` samples (or its natural length), a tone whose pitch comes from the seed."""

    sample_rate = SR
    hop = HOP
    renders_to_length = True

    def __init__(self) -> None:
        super().__init__()
        self.plans: list[list[str]] = []
        self.renders: list[list[tuple[str, int | None]]] = []

    def plan(self, requests: Sequence[SynthRequest]) -> list[LinePlan]:
        self.plans.append([r.text for r in requests])
        return [
            LinePlan(
                r.line_id,
                SR,
                round(PER_CHAR * len(r.text) * SR),
                np.arange(len(r.text), dtype=np.int32),
                {"chars": len(r.text)},
                n_tokens=len(r.text),
            )
            for r in requests
        ]

    def render(self, items: Sequence[RenderRequest]) -> list[SynthResult]:
        self.renders.append([(it.request.text, it.frames) for it in items])
        out = []
        for it in items:
            assert it.plan.info == {"chars": len(it.request.text)} and it.plan.payload.dtype == np.int32
            n = it.plan.natural_samples if it.frames is None else it.frames * HOP
            t = np.arange(n) / SR
            f0 = 150 + it.request.seed % 50
            out.append(
                SynthResult(it.plan.line_id, (0.3 * np.sin(2 * np.pi * f0 * t)).astype(np.float32), SR)
            )
        return out

    def synthesize(self, requests: Sequence[SynthRequest]) -> list[SynthResult]:
        return self.render([RenderRequest(r, p) for r, p in zip(requests, self.plan(requests), strict=True)])


# Natural 1.62, 2.04, 1.44, 3.0 and 0.6 s. Line 1 fits; line 2 has 1.82 s before the next cue (needs
# 1.12x: the model alone); line 3 fits by borrowing; line 4 has 2.12 s (needs 1.415x: the model 1.25x,
# the DSP the rest); line 5 fits.
TEXTS = [
    "Twenty eight characters ok.",
    "This line has thirty-four chars ok",
    "Twenty-five chars, fine.",
    "x" * 50,
    "Short end.",
]
SLOTS = [(0.0, 2.0), (2.5, 4.2), (4.4, 5.6), (7.0, 9.0), (9.2, 10.0)]


def _script(folder: Path, slots: list[tuple[float, float]]) -> Path:
    rows = ["start\tend\tspeaker\ttext"]
    for (s, e), text in zip(slots, TEXTS, strict=True):
        rows.append(f"{s:.3f}\t{e:.3f}\tA\t{text}")
    (folder / "ep.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    sf.write(folder / "a.wav", np.zeros(10, dtype=np.float32), 16000)
    return folder / "ep.tsv"


def _job(folder: Path, slots: list[tuple[float, float]] = SLOTS, **kw) -> DubOptions:
    script = _script(folder, slots)
    return DubOptions(
        script=script, voices=[f"A={folder / 'a.wav'}"], lang="eng", output_dir=folder / "out", **kw
    )


def _lines(res) -> list[dict]:
    return json.loads(Path(res.report_path).read_text())["lines"]


def test_lines_inside_the_render_bounds_need_no_dsp(tmp_path: Path) -> None:
    fake = TwoPhaseFake()
    res = run_dub(_job(tmp_path), synthesizer=fake)
    lines = _lines(res)
    one, two, three, four, five = lines
    assert one["frames"] is None and one["render_factor"] == 1.0 and one["stretch_factor"] == 1.0
    assert two["render_factor"] > 1.0 and two["stretch_factor"] == 1.0
    assert abs(two["duration"] - two["target"]) <= 0.02
    assert two["target"] == pytest.approx(two["frames"] * HOP / SR, abs=1e-4)
    assert three["action"] == "borrowed" and three["frames"] is None
    assert four["render_factor"] == pytest.approx(1.25, rel=5e-3) and four["stretch_factor"] > 1.0
    assert four["duration"] == pytest.approx(9.2 - 0.08 - 7.0, abs=1e-3)  # the DSP lands it on the room
    assert four["factor"] == pytest.approx(3.0 / 2.12, rel=1e-3) and five["frames"] is None
    s = res.lines
    assert s["rendered_to_fit"] == 2 and s["stretched"] == 1 and s["fit"] == "model"
    assert s["max_stretch"] == pytest.approx(four["stretch_factor"], abs=1e-4)
    # Every line was planned once and rendered once.
    assert sum(len(p) for p in fake.plans) == 5 and sum(len(r) for r in fake.renders) == 5
    # The two layers: an int32 plan under the line's key, the render under its render key, each meta
    # naming its own key.
    plans, renders = LineCache(res.work_dir / "plans"), LineCache(res.work_dir / "lines")
    p = plans.get(two["key"])
    assert p is not None and p.audio.dtype == np.int32 and p.meta["key"] == two["key"]
    assert p.meta["info"] == {"chars": len(TEXTS[1])}
    r = renders.get(two["render_key"])
    assert r is not None and len(r.audio) == two["frames"] * HOP and r.meta["plan_key"] == two["key"]


def test_retiming_renders_again_without_planning(tmp_path: Path) -> None:
    run_dub(_job(tmp_path), synthesizer=TwoPhaseFake())
    moved = [SLOTS[0], (2.6, 4.2), *SLOTS[2:]]  # line 2 starts later: less room, another target
    fake = TwoPhaseFake()
    res = run_dub(_job(tmp_path, moved), synthesizer=fake)
    assert fake.plans == [] and res.lines["synthesized"] == 0 and res.lines["cached"] == 5
    assert [t for batch in fake.renders for t, _ in batch] == [TEXTS[1]]
    assert res.lines["rendered"] == 1


def test_stretch_mode_renders_natural_and_stretches(tmp_path: Path) -> None:
    fake = TwoPhaseFake()
    res = run_dub(_job(tmp_path, fit="stretch"), synthesizer=fake)
    lines = _lines(res)
    assert all(ln["frames"] is None and ln["render_factor"] == 1.0 for ln in lines)
    assert (
        lines[1]["stretch_factor"] == pytest.approx(lines[1]["factor"]) and lines[1]["stretch_factor"] > 1.0
    )
    assert all(f is None for batch in fake.renders for _, f in batch)
    assert res.lines["stretched"] >= 2


def test_an_engine_that_cannot_render_to_a_length_is_stretched_with_a_warning(tmp_path: Path) -> None:
    fake = TwoPhaseFake()
    fake.renders_to_length = False
    res = run_dub(_job(tmp_path), synthesizer=fake)
    assert any("cannot render a line to a length" in w for w in res.warnings)
    assert all(ln["frames"] is None for ln in _lines(res))


def test_only_plans_and_renders_the_forced_lines_again(tmp_path: Path) -> None:
    run_dub(_job(tmp_path), synthesizer=TwoPhaseFake())
    fake = TwoPhaseFake()
    res = run_dub(_job(tmp_path, only="2"), synthesizer=fake)
    assert fake.plans == [[TEXTS[1]]] and [t for b in fake.renders for t, _ in b] == [TEXTS[1]]
    assert res.ok


def test_synth_duration_renders_exactly_and_refuses_outside_the_bounds(tmp_path: Path) -> None:
    voice = tmp_path / "v.wav"
    sf.write(voice, np.zeros(16000, dtype=np.float32), 16000)
    text = "Forty characters, exactly, in this line!"  # natural 2.4 s
    out = tmp_path / "o.wav"
    r = synth_one(SynthOptions(text, voice, out, duration=2.7), synthesizer=TwoPhaseFake())
    assert r["samples"] == round(2.7 * SR / HOP) * HOP and r["natural"] == pytest.approx(2.4, abs=1e-3)
    assert sf.info(str(out)).frames == r["samples"]
    with pytest.raises(
        UsageError, match=r"--duration 3.2: outside the render bounds .* 2.400 s: 1.920-3.000"
    ) as e:
        synth_one(SynthOptions(text, voice, out, duration=3.2), synthesizer=TwoPhaseFake())
    assert e.value.exit_code == ExitCode.USAGE
    with pytest.raises(UsageError, match="--duration must be a positive"):
        synth_one(SynthOptions(text, voice, out, duration=0.0), synthesizer=TwoPhaseFake())
