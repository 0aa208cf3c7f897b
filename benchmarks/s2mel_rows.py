"""s2mel + vocoder for one GPT batch of lines of different lengths, as one call vs one line per call.

    python benchmarks/s2mel_rows.py ENGINE_DIR --voice REF.wav --codes 30,45,60,75,90,105,120,150 --steps 5

Runs `IndexTTS2Engine.codes_to_wavs` (latent pass, s2mel, vocoder) for the same lines and noise with the
preset's `s2mel.rows_per_call` set to 0 (the whole batch in each call) and to 1 (one line per call),
alternating, and prints the wall time and the engine's per-stage seconds of each run, and the largest
difference between the two outputs. Random text and random codes: the timing does not depend on them.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from fasttts_cli.indextts2.engine import IndexTTS2Engine, noise_generator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine")
    ap.add_argument("--voice", required=True)
    ap.add_argument("--codes", default="30,45,60,75,90,105,120,150", help="codes per line")
    ap.add_argument("--steps", type=int, default=5, help="Euler steps (the per-step ratio holds for 25)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    e = IndexTTS2Engine.load(args.engine, None, args.threads)
    cond = e.voice_conditioning(e.speaker_audio(args.voice), e.emotion_audio(args.voice))
    rng = np.random.default_rng(0)
    ns = [int(x) for x in args.codes.split(",")]
    vocab = min(e.text.vocab_size, e.embeddings.text_embedding.shape[0])
    texts = [[int(x) for x in rng.integers(3, vocab, 24)] for _ in ns]
    prefixes = [e.prefix(cond.spk_latents, cond.emovec, t) for t in texts]
    codes = [rng.integers(0, e.tokens.stop_mel - 1, n) for n in ns]
    base = e.preset
    outs: dict[int, list[np.ndarray]] = {}
    for _ in range(args.repeats):
        for rows in (0, 1):
            e.preset = replace(base, s2mel=replace(base.s2mel, rows_per_call=rows))
            e.times.seconds.clear()
            t = time.perf_counter()
            noise = [noise_generator(i, 0) for i in range(len(ns))]
            outs[rows] = e.codes_to_wavs([cond] * len(ns), prefixes, codes, noise, steps=args.steps)
            stages = ", ".join(f"{k} {v:.1f}" for k, v in e.times.seconds.items())
            print(f"rows_per_call={rows}: {time.perf_counter() - t:.1f} s ({stages})", flush=True)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(outs[0], outs[1], strict=True))
    print(f"largest difference between the two groupings: {diff:.1e}")


if __name__ == "__main__":
    main()
