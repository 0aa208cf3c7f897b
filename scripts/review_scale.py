"""How big the review page of a feature film is, and how fast headless Chromium opens it.

    python scripts/review_scale.py OUT_DIR [--lines 1500] [--hours 2] [--chromium /usr/bin/chromium]

A real draft-voice dub of 1,500 lines takes hours on a shared 2-core machine, so this builds a synthetic
work folder of that size instead: a report.json with the keys `fasttts dub` writes (statuses spread as a
dense dub spreads them: most lines rendered to fit, some sped up, shifted, a few overflowing, truncated,
failed), a line-cache entry of real length for each line (the draft voice's 22,050 Hz, 1.2-4 s of tone
bursts) and a 2-hour source (8 kHz, noise bursts at the cues) for the envelope. Then it runs what
`fasttts review` runs, and loads the page in Chromium: the time to the timeline drawn (the page's
`data-ready`), the time to show a filter and to zoom in.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from fasttts_cli.app.progress import QUIET, Reporter
from fasttts_cli.app.review import review_work_dir
from fasttts_cli.dubbing.cache import LineCache, render_key

WORDS = [
    "the",
    "tide",
    "road",
    "lighthouse",
    "keeper",
    "lantern",
    "storm",
    "door",
    "stairs",
    "village",
    "water",
    "wind",
    "dark",
]


def build(out: Path, n_lines: int, seconds: float, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    work = out / "film.fasttts"
    cache = LineCache(work / "lines")
    sr = 22050
    slot_starts = np.sort(rng.uniform(1.0, seconds - 6.0, n_lines))
    lines = []
    for k, s in enumerate(slot_starts, 1):
        slot_len = float(rng.uniform(1.2, 4.0))
        e = max(s + 0.8, min(s + slot_len, slot_starts[k] - 0.1)) if k < n_lines else s + slot_len
        natural = (e - s) * float(rng.uniform(0.85, 1.3))
        render = min(1.25, max(1.0, natural / (e - s)))
        stretch = min(1.25, max(1.0, natural / render / (e - s)))
        duration = natural / render / stretch
        r = rng.random()
        shift = float(rng.uniform(0.05, 0.6)) if r < 0.04 else 0.0
        overflow = max(0.0, natural / render / stretch - (e - s)) if r > 0.98 else 0.0
        failed = r > 0.995
        action = "sped-up" if render * stretch > 1.0001 else "fit"
        action = "shifted" if shift else action
        key = f"{k:064x}"
        rkey = render_key(key, round(duration * sr / 256))
        text = " ".join(rng.choice(WORDS, int(rng.integers(4, 14)))).capitalize() + "."
        entry = {
            "index": k,
            "source": f"film.srt:{4 * k - 2}",
            "speaker": f"SPEAKER_{1 + k % 6}",
            "text": text,
            "slot": [round(float(s), 3), round(float(e), 3)],
            "natural": round(natural, 4),
            "target": round(natural / render, 4),
            "render_factor": round(render, 4),
            "stretch_factor": round(stretch, 4),
            "frames": None,
            "duration": round(duration, 4),
            "factor": round(render * stretch, 4),
            "start": None if failed else round(float(s) + shift, 4),
            "end": None if failed else round(float(s) + shift + duration, 4),
            "shift": round(shift, 4),
            "overflow": round(overflow, 4),
            "truncated": False,
            "action": "skipped" if failed else action,
            "note": "",
            "residual": 1.0,
            "rendered": True,
            "render_key": None if failed else rkey,
            "cached": True,
            "retries": int(rng.random() < 0.02),
            "seed": int(rng.integers(0, 2**31)),
            "key": key,
            "n_tokens": None,
            "error": "synthesis failed (synthetic)" if failed else None,
            "reference": f"voices/speaker_{1 + k % 6}.wav",
            "emotion_reference": None,
            "emotion_fallback": False,
        }
        lines.append(entry)
        if not failed:
            t = np.arange(round(duration * sr)) / sr
            audio = (0.2 * np.sin(2 * np.pi * 180 * t) * (np.sin(2 * np.pi * 3 * t) > 0)).astype(np.float32)
            cache.put(rkey, audio, sr, {"synthetic": True})
    src = out / "film.wav"
    src_sr = 8000
    with sf.SoundFile(src, "w", src_sr, 1, subtype="PCM_16") as f:
        for b in range(int(seconds // 60) + 1):  # a minute at a time
            x = rng.normal(0, 0.02, 60 * src_sr)
            t0 = b * 60
            for s, e in (ln["slot"] for ln in lines if t0 - 5 < ln["slot"][0] < t0 + 60):
                a, z = max(0, int((s - t0) * src_sr)), min(60 * src_sr, int((e - t0) * src_sr))
                if z > a:
                    x[a:z] += rng.normal(0, 0.25, z - a)
            f.write(np.clip(x, -1, 1).astype(np.float32)[: max(0, int((seconds - t0) * src_sr))])
    dub = work / "dub.wav"
    if not dub.exists():
        dub.hardlink_to(src)
    report = {
        "version": 1,
        "script": "film.srt",
        "video": None,
        "engine": {"kind": "draft"},
        "options": {"dialogue_stem": str(src.resolve()), "loudness": -23.0},
        "summary": {"total": n_lines, "loudness_lufs": -23.0, "max_factor": 1.5625},
        "warnings": [],
        "lines": lines,
        "command": {
            "argv": ["fasttts", "dub", "film.srt", "--voice", "from-video"],
            "cwd": str(out.resolve()),
        },
    }
    (work / "report.json").write_text(json.dumps(report, indent=2))
    return work


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--lines", type=int, default=1500)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    work = build(a.out, a.lines, a.hours * 3600)
    print(f"synthetic work folder: {a.lines} lines, {a.hours} h, {time.perf_counter() - t:.1f} s")
    for label in ("first (envelope decoded, line WAVs written)", "again (both reused)"):
        t = time.perf_counter()
        page = review_work_dir(work, a.out / "film.review.html", Reporter(verbosity=QUIET))
        took = time.perf_counter() - t
        print(f"review page {label}: {took:.2f} s, {page.size} bytes ({page.size / 1024:.0f} KiB)")

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=a.chromium)
        for run in range(3):
            pg = b.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            pg.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
            pg.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            t = time.perf_counter()
            pg.goto(page.path.as_uri())
            pg.wait_for_selector("body[data-ready]")
            loaded = time.perf_counter() - t
            nav = pg.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
            blocks = pg.locator(".blk").count()
            t = time.perf_counter()
            pg.select_option("#filter", "faster-1.15")
            pg.evaluate("new Promise(r => requestAnimationFrame(() => r()))")
            filt = time.perf_counter() - t
            t = time.perf_counter()
            pg.click("#zoom-in")
            pg.evaluate("new Promise(r => requestAnimationFrame(() => r()))")
            zoom = time.perf_counter() - t
            print(
                f"chromium run {run + 1}: timeline drawn {loaded:.2f} s after goto (DOMContentLoaded at "
                f"{nav:.0f} ms), {blocks} blocks; filter {filt * 1000:.0f} ms; zoom in {zoom * 1000:.0f} ms; "
                f"console errors: {errors or 'none'}"
            )
            pg.close()
        b.close()


if __name__ == "__main__":
    main()
