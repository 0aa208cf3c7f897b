"""`fasttts calibrate --engine DIR`: s2mel cache policies calibrated on an engine folder's own pieces, on
calibration lines built from the user's voices and texts exactly as synthesis builds its CFM inputs.

The model side of calibration (it drives an `IndexTTS2Engine`); the calibration itself is the
backend-neutral `s2mel_cache.calibrate`, which never imports the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.errors import SynthesisError, UsageError
from fasttts_cli.indextts2.cfm import ort_opener
from fasttts_cli.indextts2.engine import IndexTTS2Engine, segment_seed_generator
from fasttts_cli.indextts2.s2mel_cache.calibrate import calibrate_ort
from fasttts_cli.indextts2.s2mel_cache.piecewise_ort import PIECES_DIR, OrtPieces
from fasttts_cli.indextts2.s2mel_cache.policy import PolicySet, engine_identity, write_policy_set

RETRIES = 3  # extra seeds per calibration line whose generation stops at once


def engine_rows(
    engine: Any, voices: Sequence[Any], texts: Sequence[str], seed: int = 0, max_codes: int | None = None
) -> list[dict[str, np.ndarray]]:
    """Calibration lines from an engine: every voice with every text (first text segment), codes sampled
    with the engine's preset (at most `max_codes`) from per-line generators seeded from `seed`, then the
    s2mel content and the CFM inputs exactly as synthesis builds them."""
    from fasttts_cli.indextts2.synthesizer import line_options

    over = {} if max_codes is None else {"max_tokens": int(max_codes)}
    params = line_options(engine.preset, over).sampling(engine.tokens.stop_mel, engine.max_codes)
    rows = []
    for i, (voice, text) in enumerate((v, t) for v in voices for t in texts):
        speaker = engine.speaker_audio(voice)
        vc = engine.voice_conditioning(speaker, engine.emotion_audio(voice))
        segs = [s for s in engine.text.segments(text) if s]
        if not segs:
            raise UsageError(f"--text {text!r}: no speakable tokens")
        prefix = engine.prefix(vc.spk_latents, vc.emovec, segs[0])
        # A sampled line can stop before its first code; like synthesis's guard, try other seeds.
        for attempt in range(RETRIES + 1):
            gen = segment_seed_generator(seed + i + 1000 * attempt, 0)
            codes = engine.generate([prefix], [params], [gen])[0].codes
            if codes.size:
                break
        if codes.size == 0:
            continue
        lat = engine.latent([prefix], [codes])
        cond, ylens = engine.s2mel_content(lat, [codes])
        inp = engine.cfm_inputs([vc], cond, ylens)
        n, p = int(inp.x_lens[0]), int(inp.prompt_lens[0])
        rows.append({"mu": inp.cat_condition[0, :n], "prompt": inp.prompt[0, :, :p], "style": inp.style[0]})
    if not rows:
        raise SynthesisError(
            f"no calibration line produced speech codes ({RETRIES + 1} seeds each)",
            hint="use other --text/--voice lines or another --seed",
        )
    return rows


def calibrate(
    engine_dir: Any,
    voices: Sequence[Any],
    texts: Sequence[str],
    levels: Sequence[str] = ("T1", "T2", "T3", "T4", "T5", "T6"),
    *,
    seed: int = 0,
    threads: int | None = None,
    max_codes: int | None = None,
    write: bool = True,
    progress: Callable[[str], None] | None = None,
    **options: Any,
) -> PolicySet:
    """`fasttts calibrate --engine DIR --voice REF.wav ... --text "..."`: calibrate the engine's own
    pieces (`s2mel_pieces/`, see export_pieces) on a few lines of the user's voices and texts, for the
    s2mel steps/schedule/CFG rate of the engine's preset, and write the policy into the engine folder.
    `max_codes` caps each calibration line's generated codes (shorter lines calibrate faster).
    `options` go to calibrate_ort (group_first, max_trials, head_branch_skip)."""
    folder = Path(engine_dir)
    engine = IndexTTS2Engine.load(folder, threads=threads)
    pieces = OrtPieces.load(folder / PIECES_DIR, ort_opener(threads), diag=True)
    s2 = engine.preset.s2mel
    rows = engine_rows(engine, voices, texts, seed, max_codes)
    if progress:
        progress(f"calibrating on {len(rows)} lines, {sum(r['mu'].shape[0] for r in rows)} frames")
    ps, _ = calibrate_ort(
        pieces,
        rows,
        levels,
        engine_id=engine_identity(engine.manifest),
        steps=s2.steps,
        schedule=s2.schedule,
        cfg_rate=s2.cfg_rate,
        seed=seed,
        progress=progress,
        **options,
    )
    if write:
        write_policy_set(folder, ps)
    return ps
