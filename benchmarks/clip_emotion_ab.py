"""A line's own emotion clip over a prepared speaker (A/B), in one process:

    python benchmarks/clip_emotion_ab.py ENGINE SPEAKER.wav CLIP.wav [CLIP.wav ...] --rounds 3

A: the whole voice flow per clip, `voice_conditioning(speaker, clip)` (what each line cost before
indextts2/clip_emotion.py). B: the clip's emotion chain alone, `clip_emovec(clip)` (the speaker's own
conditioning is prepared once and reused). The two alternate clip by clip, A, B, A, B..., so a drift in
machine speed hits both alike. Prints the median seconds of each, their ratio, the largest difference of
the emovecs and the bytes each would store in the voice cache.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

import numpy as np

from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer


def _npz_bytes(arrays: dict[str, np.ndarray]) -> int:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.tell()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine")
    ap.add_argument("speaker")
    ap.add_argument("clips", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    e = IndexTTS2Synthesizer.load(args.engine).engine
    speaker = e.speaker_audio(args.speaker)
    e.voice_conditioning(speaker, e.emotion_audio(args.speaker))  # warm the sessions
    a_s, b_s, diff = [], [], 0.0
    sizes = (0, 0)
    for _ in range(args.rounds):
        for clip in args.clips:
            emo16 = e.emotion_audio(clip)
            t0 = time.perf_counter()
            whole = e.voice_conditioning(speaker, emo16)
            t1 = time.perf_counter()
            emovec = e.clip_emovec(emo16)
            t2 = time.perf_counter()
            a_s.append(t1 - t0)
            b_s.append(t2 - t1)
            diff = max(diff, float(np.abs(whole.emovec - emovec).max()))
            sizes = (_npz_bytes(whole.arrays()), _npz_bytes({"emovec": emovec}))
    a, b = statistics.median(a_s), statistics.median(b_s)
    print(f"A whole voice per clip: median {a:.3f} s ({len(a_s)} runs); cache entry {sizes[0]} bytes")
    print(f"B clip emotion chain:   median {b:.3f} s ({len(b_s)} runs); cache entry {sizes[1]} bytes")
    print(f"A/B = {a / b:.2f}x; max |emovec A - B| = {diff:.2e}")
    e.close()


if __name__ == "__main__":
    main()
