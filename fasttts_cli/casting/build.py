"""Build a cast: for each speaker asked for, a timbre reference cut from the source audio of that speaker's
solo spans (spans.py, reference.py), written as a WAV under `<work>/cast/`, and the cast.toml that records
them (castfile.py)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from fasttts_cli.audio.load import AudioReader, to_mono
from fasttts_cli.casting.castfile import CastEntry, file_sha256, write_cast
from fasttts_cli.casting.reference import MIN_SECONDS, build_reference, programme_levels
from fasttts_cli.casting.spans import solo_spans
from fasttts_cli.dubbing.cache import atomic_write
from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.errors import UsageError

REF_SR = 24000  # the references' rate: above what every engine's front end resamples to
DEFAULT_NAME = "default"  # the cast name of lines without a speaker


def safe_stem(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "speaker"
    return stem[:60]


def load_source(path: Path) -> np.ndarray:
    """The source as mono at REF_SR, decoded block by block (audio.load.AudioReader): a film's 5.1 track
    at its own rate is never in memory whole, only the mono result (10 min of 48 kHz 5.1: 233 MB peak
    RSS against 1.35 GB for a whole-file decode)."""
    blocks = []
    with AudioReader(path, REF_SR) as reader:
        while (block := reader.read(1 << 20)).shape[1]:
            blocks.append(to_mono(block))
    return np.concatenate(blocks) if blocks else np.zeros(0, np.float32)


def write_wav(path: Path, audio: np.ndarray, sr: int) -> Path:
    import soundfile as sf

    return atomic_write(path, lambda f: sf.write(f, audio, sr, format="WAV", subtype="PCM_16"))


def build_cast(
    cues: Sequence[Cue],
    speakers: Sequence[str | None],
    source: Path,
    work_dir: Path,
    *,
    flag: str = "--voice NAME=from-video",
    ref_dir: Path | None = None,
    on_short: Callable[[str, float], None] | None = None,
    audio: np.ndarray | None = None,
) -> list[CastEntry]:
    """One CastEntry per speaker in `speakers` (None: the lines without a speaker), references written under
    `ref_dir` (default `work_dir/cast/`). A speaker with under MIN_SECONDS of clean solo speech is a
    UsageError naming the speaker and the seconds found, or, given `on_short`, reported to it (name,
    seconds found) and left out. `audio`: `source` already decoded (mono at REF_SR), when the caller has
    it."""
    audio = load_source(source) if audio is None else audio
    levels = programme_levels(audio, REF_SR)
    sha = file_sha256(source)
    entries: list[CastEntry] = []
    used: set[str] = set()
    for speaker in speakers:
        name = speaker.strip() if speaker and speaker.strip() else DEFAULT_NAME
        ref, found = build_reference(audio, REF_SR, solo_spans(cues, speaker), levels)
        if ref is None and on_short is not None:
            on_short(name, found)
            continue
        if ref is None:
            who = f"speaker {name!r}" if speaker else "the lines without a speaker"
            raise UsageError(
                f"{flag}: {who}: only {found:.1f} s of clean speech with no other speaker overlapping "
                f"found in {source} (a reference needs at least {MIN_SECONDS:.0f} s)",
                hint=f"pass a reference file for it: --voice {name}=PATH" if speaker else "--voice PATH",
            )
        stem = safe_stem(name)
        while stem in used:
            stem += "_"
        used.add(stem)
        path = write_wav((ref_dir or work_dir / "cast") / f"{stem}.wav", ref.audio, ref.sample_rate)
        entries.append(CastEntry(name, path, str(source), sha, ref.spans, ref.seconds, ref.score))
    return entries


def write_work_cast(work_dir: Path, entries: list[CastEntry]) -> Path:
    return write_cast(work_dir / "cast.toml", entries)
