"""Is a media file whole? Its streams' packets must run to the end its container announces.

A download or copy that stopped half-way leaves a file whose header still promises the full length (an MP4's
index, a Matroska or WAV header); ffmpeg reads what is there and stops without an error, so a dub of it would
quietly cover half a film. The check compares where each audio and video stream's packets really end against
the container's end, reading only the last seconds: an input `-ss` seek (through the container's index, where
there is one) followed by a stream copy into ffmpeg's `framecrc` muxer, whose per-packet lines carry the
timestamps. No decoding, and the part read is the last half-percent (at least a few seconds) of a clip or
a film. Only when a stream has no packet in that window (its data is missing) do further reads look back
from the end, four times as far each time, to say where the streams do end; that cost falls on broken
files alone.
"""

from __future__ import annotations

import re
import struct
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fasttts_cli.errors import InputError
from fasttts_cli.media.ffmpeg import ffmpeg_path
from fasttts_cli.media.probe import MediaInfo

# Real, complete files have stream ends that differ from the container's: AAC/Opus priming and padding
# (20-50 ms), the last video frame's duration (1/fps: 40 ms at 25 fps, 0.5 s in a 2 fps slideshow), a
# Matroska block without a duration, the container duration printed to 10 ms. None of that reaches half a
# second. What grows with the length is drift between tracks made apart: a track timed at 24 fps muxed with
# one at 23.976 (the 1000/1001 NTSC factor, 0.1%: 7.2 s over 2 hours), an audio track a few seconds short
# of a film's picture. 0.5% (36 s over 2 hours) clears those five times over, and a transfer that stopped
# early loses more: the typical cut is anywhere in the file, not in its last half-percent.
ABS_TOLERANCE_S = 0.5
REL_TOLERANCE = 0.005
# Seconds read before the tolerance window: the input seek lands on the keyframe at or before its target, and
# a stream interleaved late in the file must still show a packet.
_MARGIN_S = 3.0

_TB_RE = re.compile(r"^#tb (\d+): (\d+)/(\d+)$")
_PKT_RE = re.compile(r"^(\d+),\s*(-?\d+),\s*(-?\d+),\s*(-?\d+),")
_NOPTS = -(2**63)


@dataclass(frozen=True)
class StreamEnd:
    index: int  # absolute stream index in the file (the N of `0:N`)
    kind: str  # "audio" or "video"
    end: float | None  # seconds (container timestamps); None: no packet in the part that was read


def tolerance(duration: float) -> float:
    """How far short of the container's end a stream may stop and still count as complete."""
    return max(ABS_TOLERANCE_S, REL_TOLERANCE * duration)


def parse_framecrc(lines: Iterable[str]) -> dict[int, float]:
    """Output stream number -> end of its last packet in seconds, from ffmpeg's `framecrc` output lines."""
    timebase: dict[int, float] = {}
    ends: dict[int, float] = {}
    for line in lines:
        m = _TB_RE.match(line)
        if m:
            timebase[int(m[1])] = int(m[2]) / int(m[3])
            continue
        m = _PKT_RE.match(line)
        if not m or int(m[1]) not in timebase:
            continue
        stream, dts, pts, dur = int(m[1]), int(m[2]), int(m[3]), int(m[4])
        t = pts if pts != _NOPTS else dts
        if t == _NOPTS:
            continue
        end = (t + max(dur, 0)) * timebase[stream]
        ends[stream] = max(end, ends.get(stream, end))
    return ends


def _read_ends(path: Path, streams: list[int], since: float | None) -> dict[int, float]:
    """Absolute stream index -> end of its last packet, reading packets from `since` (None: the start)."""
    cmd = [ffmpeg_path(), "-hide_banner", "-nostdin", "-loglevel", "error", "-copyts"]
    if since is not None:
        cmd += ["-ss", f"{since:.3f}"]
    cmd += ["-i", f"file:{path.resolve()}"]
    for idx in streams:
        cmd += ["-map", f"0:{idx}"]
    # -copyts keeps the container's timestamps, so the ends compare with its start + duration.
    cmd += ["-c", "copy", "-f", "framecrc", "-"]
    # Lines are parsed as they come: a full read of a film is a line per packet, half a million of them.
    with tempfile.TemporaryFile() as err:
        with subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True, errors="replace"
        ) as proc:
            assert proc.stdout is not None
            ends = parse_framecrc(proc.stdout)
        if proc.returncode != 0 and not ends and since is None:
            # Not one packet from the start: past what a probe can see, the file is unreadable.
            err.seek(0)
            log = err.read().decode(errors="replace").strip().splitlines()
            why = " | ".join(log[-2:]) or f"ffmpeg exit {proc.returncode}"
            raise InputError(path, f"corrupt: ffmpeg cannot read its packets ({why})")
    # framecrc numbers the output streams in -map order.
    return {streams[out]: end for out, end in ends.items() if out < len(streams)}


def stream_ends(info: MediaInfo) -> list[StreamEnd]:
    """Where each audio and (real) video stream of `info.path` ends; cheap for an intact file of any size."""
    kinds = {a.index: "audio" for a in info.audio_streams}
    kinds.update({v.index: "video" for v in info.video_streams if not v.attached_pic})
    streams = sorted(kinds)
    if not streams:
        return []
    end = info.start_time + info.duration
    span = tolerance(info.duration) + _MARGIN_S
    while True:
        since = end - span
        ends = _read_ends(info.path, streams, since if since > info.start_time else None)
        if len(ends) == len(streams) or since <= info.start_time:
            return [StreamEnd(i, kinds[i], ends.get(i)) for i in streams]
        # A stream with nothing in the window (its data is missing, or a seek failed): look further back,
        # four times as far each time, so that saying where a cut film stops does not read all of it.
        span *= 4


def wav_lengths(path: Path) -> tuple[float, float] | None:
    """(seconds the header's data chunk announces, seconds the file holds) of a RIFF WAVE file; None for
    another format or a header that announces no length (a WAV written to a pipe, RF64).

    ffmpeg does not help here: when a WAV's data chunk claims more bytes than the file has, it estimates the
    duration from the file size, so a cut WAV looks whole; the header still has the size it was meant to be.
    """
    with path.open("rb") as fh:
        head = fh.read(12)
        if len(head) < 12 or head[:4] not in (b"RIFF", b"RIFX") or head[8:12] != b"WAVE":
            return None
        order = "<" if head[:4] == b"RIFF" else ">"
        size = path.stat().st_size
        byte_rate = 0
        pos = 12
        while pos + 8 <= size:
            fh.seek(pos)
            tag, n = struct.unpack(f"{order}4sI", fh.read(8))
            if tag == b"fmt ":
                fmt = fh.read(16)
                if len(fmt) == 16:
                    byte_rate = struct.unpack(f"{order}HHII", fmt[:12])[3]
            elif tag == b"data":
                # 0 and 0xFFFFFFFF are what writers leave when they cannot seek back to fill the size in.
                if byte_rate <= 0 or n in (0, 0xFFFFFFFF):
                    return None
                return n / byte_rate, max(0, size - pos - 8) / byte_rate
            pos += 8 + n + (n & 1)  # chunks are padded to an even size
    return None


def check_intact(info: MediaInfo) -> None:
    """InputError naming the file when a stream stops well before the end its container announces."""
    wav = wav_lengths(info.path)
    if wav is not None:
        announced, held = wav
        if held < announced - tolerance(announced):
            raise InputError(
                info.path,
                f"truncated or corrupt: its audio ends at {held:.2f} s "
                f"but the WAV header says {announced:.2f} s",
                # A remux writes the header afresh, with the length the file really has.
                hint=f"copy or download it again; to use only the part that is there: "
                f"ffmpeg -i {info.path} -c copy FIXED.wav",
            )
        return
    if info.duration_source != "header" or info.duration <= 0.0:
        # Without a duration of its own (or one ffmpeg guessed from the bitrate) the container promises
        # nothing that packets could fall short of: a cut file of that kind is just a shorter file.
        return
    found = stream_ends(info)
    if not found:
        return
    container_end = info.start_time + info.duration
    limit = container_end - tolerance(info.duration)
    short = [s for s in found if s.end is None or s.end < limit]
    if not short:
        return
    known = [s.end for s in found if s.end is not None]
    if len(short) == len(found):
        what = f"the streams end at {max(known):.2f} s" if known else "no stream has any packet"
    else:
        s = short[0]
        where = f"ends at {s.end:.2f} s" if s.end is not None else "has no packet"
        what = f"its {s.kind} stream 0:{s.index} {where}"
    hint = "copy or download it again"
    if known:
        # Cutting at the shortest stream gives a file whose header and streams agree.
        cut = max(0.0, min(known) - info.start_time)
        hint += f"; to use only the part that is there: ffmpeg -i {info.path} -c copy -t {cut:.2f} FIXED.mkv"
    raise InputError(
        info.path, f"truncated or corrupt: {what} but the container says {container_end:.2f} s", hint=hint
    )
