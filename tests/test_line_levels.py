"""A line's level never depends on its tempo: every placed line of a mixed-tempo job measures within 0.5 LU of
the lines' mean in the final audio (issue: sped-up lines came out 1.3-3.5 LU quieter)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fasttts_cli.app.pipeline import DubOptions, run_dub
from fasttts_cli.audio.loudness_meter import line_loudness
from fasttts_cli.audio.tempo import change_tempo
from fasttts_cli.synth.synthesizer import SynthRequest, SynthResult
from tests.test_pipeline import FakeSynth

SR = 24000
SECONDS_PER_CHAR = 0.07


def _speechlike(seconds: float, seed: int) -> np.ndarray:
    """Harmonics on a gliding pitch, gated into 4 Hz syllables, plus breath noise: time-stretching this
    lowers its loudness the way it lowers real speech (a steady sine would not show the effect)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    phase = 2 * np.pi * np.cumsum(140 + 30 * np.sin(2 * np.pi * 3 * t)) / SR
    voiced = sum(np.sin(k * phase) / k for k in range(1, 20))
    env = np.clip(np.sin(2 * np.pi * 4 * t), 0, None)
    return ((0.2 * voiced + 0.02 * rng.standard_normal(t.size)) * env).astype(np.float32)


class SpeechlikeSynth(FakeSynth):
    """The pipeline tests' fake engine, speaking the speech-like signal instead of a tone."""

    def synthesize(self, requests: Sequence[SynthRequest]) -> list[SynthResult]:
        return [
            SynthResult(r.line_id, _speechlike(SECONDS_PER_CHAR * len(r.text), len(r.text)), SR, n_tokens=1)
            for r in requests
        ]


def _slot_script(factors: Sequence[float], gap: float) -> str:
    """Back-to-back cues (exactly `gap` apart, so no silence can be borrowed) whose slots force `factors`;
    the last line can borrow the silence after it, so it should be at 1.0."""
    rows, t = ["start\tend\tspeaker\ttext"], 0.5
    for n, f in enumerate(factors):
        text = f"Line number {n} says {'la ' * (12 + 2 * n)}".strip() + "."
        slot = SECONDS_PER_CHAR * len(text) / f
        rows.append(f"{t:.3f}\t{t + slot:.3f}\tA\t{text}")
        t += slot + gap
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize("factors", [(1.0, 1.2, 1.0, 1.1, 1.25, 1.0), (1.03, 1.0, 1.15, 1.0)])
def test_every_line_within_half_an_lu_of_the_mean_whatever_its_tempo(tmp_path: Path, factors):
    if (
        abs(
            line_loudness(change_tempo(_speechlike(3.0, 0), SR, 1.2), SR)
            - line_loudness(_speechlike(3.0, 0), SR)
        )
        < 0.5
    ):
        pytest.skip("this ffmpeg's stretcher does not change the test signal's loudness: nothing to pin")
    script = tmp_path / "ep.tsv"
    script.write_text(_slot_script(factors, gap=0.08), encoding="utf-8")
    sf.write(tmp_path / "a.wav", np.zeros(10, dtype=np.float32), 16000)
    job = DubOptions(
        script=script,
        voices=[f"A={tmp_path / 'a.wav'}"],
        lang="eng",
        output_dir=tmp_path / "out",
        max_factor_step=1.0,  # no smoothing: each line keeps the factor its slot forces
    )
    res = run_dub(job, synthesizer=SpeechlikeSynth())
    report = json.loads(Path(res.report_path).read_text())
    got = sorted(round(ln["factor"], 2) for ln in report["lines"])
    assert got == sorted(round(f, 2) for f in factors), "the script no longer forces the tempo mix under test"
    audio, sr = sf.read(res.outputs["audio"], dtype="float32", always_2d=True)
    levels = []
    for ln in report["lines"]:
        a, b = round(ln["start"] * sr), round(ln["end"] * sr)
        levels.append(line_loudness(audio[a:b, 0], sr))
    mean = float(np.mean(levels))
    assert max(abs(v - mean) for v in levels) <= 0.5, (levels, [ln["factor"] for ln in report["lines"]])
