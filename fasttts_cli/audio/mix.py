"""Place lines on a timeline and mix the dub with the original audio or a background stem.

All arrays are float32 at one sample rate (48 kHz in the pipeline). The dub is mono `(n,)`; originals and
stems are `(channels, n)` in ffmpeg's channel order. Inputs are summed at unity gain: no `amix`-style 1/N
scaling, the final loudness normalization sets the level once.

Channel placement: mono and stereo get the dub in every channel (stereo: the same signal left and right, a
phantom centre); 5.1 / 5.1(side) get it in FC only, the other channels carry the original (or background).
Other layouts are refused with a UsageError naming the supported ones.

Long programmes go block by block: `place_clips` sums clips into any `ClipTarget` (a disk-backed array in the
pipeline), and `mix_blocks` produces the mix one block at a time, reading the dub through a `(start, stop)`
reader and the bed sequentially; the ducking envelope looks at the dub around each block (far enough that
the result does not depend on the block size). The in-memory functions run the same code over one block.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fasttts_cli.audio.blockio import MemArray, block_ranges
from fasttts_cli.errors import UsageError

MODES = ("replace", "keep", "duck", "background")
LAYOUTS: dict[str, int] = {"mono": 1, "stereo": 2, "5.1": 6, "5.1(side)": 6}
FC = 2  # front centre in ffmpeg's 5.1 order: FL FR FC LFE (B|S)L (B|S)R


def timeline_length(clips: Sequence[tuple[float, np.ndarray]], duration: float, sr: int) -> int:
    """Samples the timeline needs: `duration`, or more when a clip runs past it (the timeline grows)."""
    n = round(duration * sr)
    for start, audio in clips:
        n = max(n, round(start * sr) + int(np.asarray(audio).shape[-1]))
    return n


def timeline_overrun(clips: Sequence[tuple[float, np.ndarray]], duration: float, sr: int) -> float:
    """Seconds by which the clips run past `duration` (0.0 when they fit): for the run report."""
    return max(0.0, timeline_length(clips, duration, sr) / sr - duration)


class ClipTarget(Protocol):
    """Where `place_clips` sums clips: a growable mono float32 array (blockio.MemArray or DiskArray)."""

    @property
    def n(self) -> int: ...

    def resize(self, n: int) -> None: ...

    def add(self, start: int, mono: np.ndarray) -> None: ...


def place_clips(
    target: ClipTarget, clips: Iterable[tuple[float, np.ndarray]], duration: float, sr: int
) -> int:
    """Sum mono clips placed at their start times (seconds) into `target`, one clip at a time (`clips` may
    be a generator that loads each clip when it is placed). The target is at least `duration` long and
    grows when a clip ends after it. Returns the final length in samples."""
    target.resize(round(duration * sr))
    for start, audio in clips:
        a = np.asarray(audio, dtype=np.float32)
        if a.ndim != 1:
            raise ValueError(f"timeline clips must be mono (n,), got shape {a.shape}")
        if start < 0:
            raise ValueError(f"clip placed before the start of the timeline ({start:.3f} s)")
        target.add(round(start * sr), a)
    return target.n


def render_timeline(clips: list[tuple[float, np.ndarray]], duration: float, sr: int) -> np.ndarray:
    """Sum mono clips placed at their start times (seconds) into a float32 `(n,)` timeline.

    Overlapping clips add up. A clip that ends after `duration` makes the timeline longer rather than being
    cut: dropping the end of a line silently is worse than a longer track (see `timeline_overrun`).
    """
    out = MemArray(1)
    place_clips(out, clips, duration, sr)
    return out.data[0]


@dataclass(frozen=True)
class DuckOptions:
    depth_db: float = -12.0  # gain on the original while the dub speaks
    attack_s: float = 0.05  # the original is fully down when the dub starts (look-ahead ramp)
    release_s: float = 0.3  # ramp back up after the dub stops
    hold_s: float = 0.15  # stay down through short pauses between words
    threshold_dbfs: float = -45.0  # a 5 ms frame of dub above this counts as speech
    frame_s: float = 0.005
    surround_all: bool = False  # 5.1: duck every channel, not only FC where the original dialogue lives


DubReader = Callable[[int, int], np.ndarray]  # (start, stop) -> mono float32 samples of the dub


def array_reader(x: np.ndarray) -> DubReader:
    """A DubReader over a mono array; samples past its end read as silence."""
    x = np.asarray(x, dtype=np.float32)

    def read(start: int, stop: int) -> np.ndarray:
        part = x[max(0, start) : max(0, stop)]
        return part if part.size == stop - start else np.pad(part, (0, stop - start - part.size))

    return read


def duck_gain_range(
    dub: DubReader, sr: int, n: int, start: int, stop: int, opts: DuckOptions = DuckOptions()
) -> np.ndarray:
    """`duck_gain` for samples [start, stop) of an `n`-sample programme, reading only the dub around them.

    Frames lie on the programme's own 5 ms grid. The envelope at a frame depends on the last active frame
    before it (only within hold + release) and the next one after it (only within the attack), and samples
    interpolate between neighbouring frame centres, so frames that far either side of the range are
    enough: the result equals the whole-programme computation."""
    if stop <= start:
        return np.ones(0, dtype=np.float32)
    hop = max(1, round(opts.frame_s * sr))
    nf = -(-n // hop)
    hold, rel, att = opts.hold_s / opts.frame_s, opts.release_s / opts.frame_s, opts.attack_s / opts.frame_s
    f0 = max(0, start // hop - 2 - math.ceil(hold + rel))
    f1 = min(nf, (stop - 1) // hop + 3 + math.ceil(att))
    d = np.asarray(dub(f0 * hop, f1 * hop), dtype=np.float64)  # silence past the dub's end
    rms = np.sqrt(np.mean(np.square(d.reshape(f1 - f0, hop)), axis=1))
    active = rms > 10.0 ** (opts.threshold_dbfs / 20.0)
    if not np.any(active):
        return np.ones(stop - start, dtype=np.float32)
    k = np.arange(f0, f1, dtype=np.float64)
    # Distance (in frames) to the latest active frame at or before k, and to the next one at or after k.
    last = np.maximum.accumulate(np.where(active, k, -np.inf))
    nxt = np.minimum.accumulate(np.where(active, k, np.inf)[::-1])[::-1]
    down_after = np.clip(1.0 - (k - last - hold) / max(rel, 1e-9), 0.0, 1.0)
    # Reach full depth one frame early: the gain is interpolated between frame centres, and the first
    # active frame's centre is half a frame after its first loud sample.
    down_before = np.clip(1.0 - (nxt - 1 - k) / max(att, 1e-9), 0.0, 1.0)
    depth = np.maximum(down_after, down_before)
    gain_frames = 10.0 ** (depth * opts.depth_db / 20.0)
    centres = (k + 0.5) * hop
    return np.interp(np.arange(start, stop), centres, gain_frames).astype(np.float32)


def duck_gain(dub: np.ndarray, sr: int, n: int, opts: DuckOptions = DuckOptions()) -> np.ndarray:
    """Per-sample linear gain `(n,)` for the original: `depth_db` wherever the dub is active, ramping down
    over `attack_s` before each dub onset and back up over `release_s` after `hold_s` past its end."""
    return duck_gain_range(array_reader(dub), sr, n, 0, n, opts)


def _channels_for(layout: str) -> int:
    if layout not in LAYOUTS:
        raise UsageError(
            f"audio layout '{layout}' is not supported for the dub mix; supported: {', '.join(LAYOUTS)}",
            hint="use --mix replace with a mono or stereo output, or convert the original audio first",
        )
    return LAYOUTS[layout]


def _fit(x: np.ndarray, n: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.shape[-1] >= n:
        return x[..., :n]
    pad = [(0, 0)] * (x.ndim - 1) + [(0, n - x.shape[-1])]
    return np.pad(x, pad)


def place_dub(dub: np.ndarray, layout: str) -> np.ndarray:
    """Mono dub -> `(channels, n)` for `layout`: every channel for mono/stereo, FC only for 5.1."""
    nch = _channels_for(layout)
    dub = np.asarray(dub, dtype=np.float32)
    if nch <= 2:
        return np.repeat(dub[None, :], nch, axis=0)
    out = np.zeros((nch, dub.size), dtype=np.float32)
    out[FC] = dub
    return out


def _bed_for(x: np.ndarray, layout: str, what: str) -> np.ndarray:
    """Bring a bed (original or background) to the layout's channel count."""
    nch = _channels_for(layout)
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    have = x.shape[0]
    if have == nch:
        return x
    if have == 1 and nch == 2:
        return np.repeat(x, 2, axis=0)
    if have == 2 and nch == 1:
        return x.mean(axis=0, keepdims=True)
    if nch == 6 and have in (1, 2):
        out = np.zeros((6, x.shape[1]), dtype=np.float32)
        if have == 1:
            out[FC] = x[0]
        else:
            out[0], out[1] = x[0], x[1]
        return out
    raise UsageError(f"{what} has {have} channels, which cannot be laid out as '{layout}'")


def check_mix(mode: str, layout: str, *, has_original: bool, has_background: bool) -> int:
    """UsageErrors for a mode/layout/inputs combination that cannot be mixed; the layout's channel count."""
    if mode not in MODES:
        raise UsageError(f"--mix {mode}: unknown mode; choose one of {', '.join(MODES)}")
    nch = _channels_for(layout)
    if mode == "background" and not has_background:
        raise UsageError("--mix background needs a music-and-effects stem: pass --background PATH")
    if mode == "duck" and not has_background and not has_original:
        raise UsageError("--mix duck needs the original audio, and the input has no audio track")
    return nch


BedReader = Callable[[int], np.ndarray]  # m -> the next m frames `(channels, m)` of the bed, in order


def mix_blocks(
    dub: DubReader,
    n: int,
    mode: str,
    layout: str,
    bed: BedReader | None = None,
    *,
    bed_what: str = "the original audio",
    duck: DuckOptions = DuckOptions(),
    sr: int = 48000,
    block: int | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """The dub track block by block: `(start, float32 (channels, m))` for consecutive blocks of `n` frames.

    `bed` is the original (duck) or the background stem, already decided by the caller (see `mix_tracks`
    for the modes); it is read sequentially and must return exactly m frames (silence past its end)."""
    nch = _channels_for(layout)
    for start, stop in block_ranges(n, max(1, block or n)):
        d = dub(start, stop)
        out = place_dub(d, layout)
        if bed is None:
            yield start, out
            continue
        b = _bed_for(bed(stop - start), layout, bed_what).copy()
        if mode == "duck":
            g = duck_gain_range(dub, sr, n, start, stop, duck)
            if nch == 6 and not duck.surround_all:
                b[FC] *= g
            else:
                b *= g[None, :]
        yield start, (out + b).astype(np.float32)


def mix_tracks(
    dub: np.ndarray,
    mode: str,
    original: np.ndarray | None,
    layout: str,
    background: np.ndarray | None = None,
    *,
    duck: DuckOptions = DuckOptions(),
    sr: int = 48000,
) -> np.ndarray:
    """The dub track as float32 `(channels, n)`.

    - replace: the dub alone.
    - keep: the dub alone here; the original stays a separate (second) track in the mux.
    - duck: the original, attenuated by `duck.depth_db` wherever the dub speaks, plus the dub.
    - background: a music-and-effects stem at unity under the dub, instead of the original.
    With `background` given, it is the bed in every mode (ducked under the dub in duck mode).
    The result is as long as the longest input.
    """
    check_mix(mode, layout, has_original=original is not None, has_background=background is not None)
    dub = np.asarray(dub, dtype=np.float32)
    if dub.ndim != 1:
        raise ValueError(f"the dub must be mono (n,), got shape {dub.shape}")

    bed, what = None, ""
    if background is not None:
        bed, what = _bed_for(background, layout, "the background stem"), "the background stem"
    elif mode == "duck":
        bed, what = _bed_for(original, layout, "the original audio"), "the original audio"
    n = max(dub.size, bed.shape[1] if bed is not None else 0)
    reader = None
    if bed is not None:
        fitted = _fit(bed, n)
        reader = lambda m: fitted[:, :m]  # noqa: E731  (one block: all of it)
    blocks = mix_blocks(array_reader(dub), n, mode, layout, reader, bed_what=what, duck=duck, sr=sr)
    parts = [b for _, b in blocks]
    if not parts:
        return np.zeros((_channels_for(layout), 0), dtype=np.float32)
    return parts[0]
