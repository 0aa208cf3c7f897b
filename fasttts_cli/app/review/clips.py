"""Each line's rendered audio as a WAV the browser can play, in the work folder's `review/lines/`.

The line cache keeps float32 `.npy` files, which no browser plays. The page's "dubbed line" player needs a
file, so each rendered line is written once as 16-bit PCM WAV at the engine's rate, named by its render key
(a retake has a new key, so a new file). Its loudness as rendered (before the mix levels it) is measured
at the same time and kept in `review/lines/loudness.json`, so a later page costs neither step again.
Files no current line uses are removed: the folder holds the reviewed state, not every take ever made.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fasttts_cli.dubbing.cache import LineCache, atomic_write, atomic_write_json
from fasttts_cli.partials import sweep_partials

CLIPS = Path("review") / "lines"


def line_clips(
    work_dir: Path, lines: Sequence[Mapping[str, Any]], warn: Callable[[str], None]
) -> dict[str, float | None]:
    """render key -> loudness (LUFS, None for silence) of every line whose WAV is in `review/lines/`."""
    import soundfile as sf

    from fasttts_cli.audio.loudness_meter import line_loudness

    folder = work_dir / CLIPS
    folder.mkdir(parents=True, exist_ok=True)
    sweep_partials(folder)  # what a killed run left (the caller holds the work folder's lock)
    cache = LineCache(work_dir / "lines")
    store = folder / "loudness.json"
    try:
        known: dict[str, float | None] = json.loads(store.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    out: dict[str, float | None] = {}
    missing: list[int] = []
    for ln in lines:
        key = ln.get("render_key")
        if not key or ln.get("error") is not None:
            continue
        wav = folder / f"{key}.wav"
        if wav.is_file() and key in known:
            out[key] = known[key]
            continue
        hit = cache.get(key)
        if hit is None:
            missing.append(int(ln["index"]))
            continue

        def write(f: Any, audio: Any = hit.audio, sr: int = hit.sample_rate) -> None:
            sf.write(f, audio, sr, format="WAV", subtype="PCM_16")

        atomic_write(wav, write)
        value = line_loudness(hit.audio, hit.sample_rate)
        out[key] = round(value, 2) if math.isfinite(value) else None
    if missing:
        from fasttts_cli.app.job import format_ranges

        warn(
            f"review page: no cached audio for lines {format_ranges(missing)} (removed from the work "
            "folder?); their players are empty"
        )
    for old in folder.glob("*.wav"):
        if old.stem not in out:
            with contextlib.suppress(OSError):
                old.unlink()
    if out != known:
        atomic_write_json(store, out)
    return out
