"""Regenerate samples/dense.tsv: a dense dialogue whose lines mostly run 5-25% longer than their slots.

    python scripts/make_dense_sample.py [--out samples/dense.tsv]

The slots come from the draft voice's own natural durations (Piper `joe`, noise off so the measurement is
repeatable): 80% of lines get a slot 1.05-1.25x shorter than their speech (seeded), the rest a slot 10%
longer; cues follow each other with 0.15-0.35 s of silence, so little can be borrowed. With the default
voice noise the durations move by a few percent, so the benchmark still sees most lines in that band.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

LINES = [
    ("ALICE", "We have to leave before the tide comes in, or the road will be gone."),
    ("BOB", "I know, but the engine still makes that grinding noise."),
    ("ALICE", "Then we walk. The lighthouse is only two miles from here."),
    ("BOB", "Two miles in the dark, with the wind coming off the water."),
    ("ALICE", "You said the same thing last winter, and we made it."),
    ("BOB", "Last winter we had a lantern that actually worked."),
    ("ALICE", "Take the torch from the glove box and stop complaining."),
    ("BOB", "Fine. But if we get lost, I am telling everyone it was your idea."),
    ("ALICE", "Everyone already knows that every good idea is mine."),
    ("BOB", "Did you hear that? Something moved behind the dunes."),
    ("ALICE", "It is a seal. They sleep on the sand when the sea is rough."),
    ("BOB", "Seals do not usually whistle like that, do they?"),
    ("ALICE", "Then it is the keeper, calling us in. Keep walking."),
    ("BOB", "The light just went out. Look, the top of the tower is dark."),
    ("ALICE", "The generator fails every time the storm gets this strong."),
    ("BOB", "So the keeper is up there without power, alone, in this weather."),
    ("ALICE", "Which is exactly why we are going, and not turning back."),
    ("BOB", "All right. Give me your hand, the rocks are slippery here."),
    ("ALICE", "Thank you. Careful, the next step is broken."),
    ("BOB", "I can see the door now. It is open, and swinging in the wind."),
    ("ALICE", "Hello? Is anybody there? We came from the village."),
    ("BOB", "There are wet footprints on the stairs, going up."),
    ("ALICE", "Then we follow them, quietly, and we stay together."),
    ("BOB", "Together. That is the only part of this plan I like."),
]


def stamp(t: float) -> str:
    ms = round(t * 1000)
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent.parent / "samples" / "dense.tsv"
    )
    args = ap.parse_args()
    from fasttts_cli.synth.draft import DraftSynthesizer
    from fasttts_cli.synth.synthesizer import SynthRequest, Voice

    synth = DraftSynthesizer(deterministic=True)
    voice = Voice("narrator", Path("unused.wav"), "0" * 64)
    reqs = [SynthRequest(str(k), text, voice, seed=0) for k, (_, text) in enumerate(LINES)]
    natural = [len(r.audio) / r.sample_rate for r in synth.synthesize(reqs) if r.audio is not None]
    if len(natural) != len(LINES):
        raise SystemExit("the draft voice failed on a line")
    rng = np.random.default_rng(19)
    rows = ["start\tend\tspeaker\ttext"]
    t = 0.6
    for (speaker, text), d in zip(LINES, natural, strict=True):
        over = rng.uniform(1.05, 1.25) if rng.random() < 0.8 else 0.9
        slot = d / over
        rows.append(f"{stamp(t)}\t{stamp(t + slot)}\t{speaker}\t{text}")
        t += slot + rng.uniform(0.15, 0.35)
    args.out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(LINES)} lines, {t:.1f} s")


if __name__ == "__main__":
    main()
