"""Measure `fasttts cast`: clustering accuracy (share of cues on the right speaker, up to renaming) and the
time of each step (load encoder, decode, embed, cluster, write), on three cases:

- sample: samples/dialogue.mp4 with its unlabeled SRT (two speakers, clearly different: WORLD f0 x1.7 /
  formants x1.18 against f0 x0.9 / formants x0.96); truth from samples/dialogue.ass.
- three_pitch: a harder case built here: three speakers of similar pitch, the same Piper voice re-voiced
  with f0 shifted 0, +2 and +4 semitones, formants kept (one vocal tract at three pitches), five lines each
  in a fixed shuffled order, under the same music bed.
- three_tract: the same lines and order, pitch as close (0, +1, +2 semitones) but three vocal tracts:
  formants x0.93, x1.0, x1.08.
- one: a single speaker (that voice unshifted, ten lines): the right answer is one speaker.

    python scripts/cast_bench.py [--engine NAME|PATH] [--rounds N] [--work DIR]

Each case runs the real CLI (`python -m fasttts_cli cast ... -o FILE --json`) in a fresh process, `--rounds`
times; times are medians over the rounds. Each case also runs once with `--speakers` set to the true count
(`accuracy_with_true_count`: how well the clustering separates when the number is known). Needs the
`draft`, `bench` and `cast` extras.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

THREE_LINES = [
    "The train leaves at seven, so we should be ready by six.",
    "I packed the bags last night, they are by the door.",
    "Did anyone remember to water the plants?",
    "The neighbours said they would look after them.",
    "We still need bread and something for the journey.",
    "There is a bakery next to the station.",
    "Then we buy it there and save ourselves the walk.",
    "Who has the tickets? I cannot find mine.",
    "They are on your phone, in the email from Monday.",
    "Right. And the charger, does somebody have a charger?",
    "In the front pocket of the blue bag.",
    "Good. Then I think we have everything.",
    "We always think that, and we always forget something.",
    "This time I wrote a list, and I checked it twice.",
    "Then let us go before the traffic starts.",
]
THREE_ORDER = ["A", "B", "C", "A", "A", "C", "B", "C", "A", "B", "B", "C", "A", "C", "B"]
SEMITONE = 2 ** (1 / 12)


def build_cases(work: Path) -> dict[str, tuple[Path, Path, list[str]]]:
    """case -> (video, unlabeled subtitles, true speaker per cue)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from dialogue_sample import Line, VoiceShape, make_dialogue
    from make_samples import bed_expression

    from fasttts_cli.dubbing.readers import read_script

    bed = f"{bed_expression(1.0)}|{bed_expression(1.003)}"
    sample = ROOT / "samples" / "dialogue"
    cases = {
        "sample": (
            sample.with_suffix(".mp4"),
            sample.with_suffix(".srt"),
            [str(c.speaker) for c in read_script(sample.with_suffix(".ass"))],
        )
    }
    three = {"A": VoiceShape(1.0, 1.0), "B": VoiceShape(SEMITONE**2, 1.0), "C": VoiceShape(SEMITONE**4, 1.0)}
    lines = [Line(s, t) for s, t in zip(THREE_ORDER, THREE_LINES, strict=True)]
    tract = {
        "A": VoiceShape(1.0, 0.93),
        "B": VoiceShape(SEMITONE, 1.0),
        "C": VoiceShape(SEMITONE**2, 1.08),
    }
    for name, voices in (("three_pitch", three), ("three_tract", tract)):
        stem = work / name
        if not stem.with_suffix(".mp4").exists():
            make_dialogue(stem, lines, voices, bed, f"{name}: three similar speakers")
        cases[name] = (stem.with_suffix(".mp4"), stem.with_suffix(".srt"), THREE_ORDER)
    stem = work / "one"
    if not stem.with_suffix(".mp4").exists():
        make_dialogue(stem, [Line("A", t) for t in THREE_LINES[:10]], {"A": VoiceShape(1.0, 1.0)}, bed, "one")
    cases["one"] = (stem.with_suffix(".mp4"), stem.with_suffix(".srt"), ["A"] * 10)
    return cases


def run_case(video: Path, subs: Path, out: Path, engine: str | None, *extra: str) -> dict:
    cmd = [sys.executable, "-m", "fasttts_cli", "cast", str(video), str(subs), "-o", str(out), "--json", "-q"]
    cmd += extra
    if engine:
        cmd += ["--engine", engine]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"fasttts cast failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", help="Engine for the CAM++ encoder (default: draft -> Resemblyzer).")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", type=Path, help="Keep the built cases here (default: a temp folder).")
    args = ap.parse_args(argv)
    from fasttts_cli.casting.cluster import agreement

    with tempfile.TemporaryDirectory() as td:
        work = args.work or Path(td)
        work.mkdir(parents=True, exist_ok=True)
        cases = build_cases(work)
        report = {}
        for name, (video, subs, truth) in cases.items():
            runs = [
                run_case(video, subs, work / f"{name}.labeled.ass", args.engine) for _ in range(args.rounds)
            ]
            r = runs[-1]
            found = [int(c["speaker"].split("_")[1]) - 1 for c in r["cues"]]
            steps = {
                k: round(statistics.median(x["timings"].get(k, 0.0) for x in runs), 3) for k in r["timings"]
            }
            forced = run_case(
                video, subs, work / f"{name}.k.ass", args.engine, "--speakers", str(len(set(truth)))
            )
            forced_found = [int(c["speaker"].split("_")[1]) - 1 for c in forced["cues"]]
            report[name] = {
                "cues": len(truth),
                "true_speakers": len(set(truth)),
                "found_speakers": r["speakers"],
                "accuracy": round(agreement(found, truth), 3),
                "accuracy_with_true_count": round(agreement(forced_found, truth), 3),
                "rule": r["rule"],
                "silhouettes": r["silhouettes"],
                "min_confidence": min(c["confidence"] for c in r["cues"]),
                "encoder": r["encoder"],
                "median_seconds": steps,
            }
            print(f"{name}: {json.dumps(report[name])}", flush=True)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
