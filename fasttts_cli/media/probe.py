"""What is inside a media file: streams, codecs, layouts and tags, from `ffmpeg -i` (there is no ffprobe).

`ffmpeg -i FILE` with no output prints the container and stream summary on stderr and exits 1 ("At least one
output file must be specified"); that summary is stable enough across ffmpeg releases to parse with a few
regular expressions, and it avoids depending on a second binary that imageio-ffmpeg does not ship.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from fasttts_cli.errors import InputError
from fasttts_cli.media.ffmpeg import ffmpeg_path

# Channel counts of the layouts ffmpeg prints; "N channels" is handled separately.
LAYOUT_CHANNELS: dict[str, int] = {
    "mono": 1,
    "stereo": 2,
    "2.1": 3,
    "3.0": 3,
    "3.0(back)": 3,
    "4.0": 4,
    "quad": 4,
    "quad(side)": 4,
    "3.1": 4,
    "4.1": 5,
    "5.0": 5,
    "5.0(side)": 5,
    "5.1": 6,
    "5.1(side)": 6,
    "6.0": 6,
    "6.0(front)": 6,
    "hexagonal": 6,
    "6.1": 7,
    "6.1(back)": 7,
    "6.1(front)": 7,
    "7.0": 7,
    "7.0(front)": 7,
    "7.1": 8,
    "7.1(wide)": 8,
    "7.1(wide-side)": 8,
    "downmix": 2,
}


@dataclass(frozen=True)
class AudioStreamInfo:
    index: int  # absolute stream index in the file (the N of `0:N`)
    codec: str
    channels: int
    layout: str  # as ffmpeg names it: "mono", "stereo", "5.1(side)", "6 channels", ...
    sample_rate: int
    language: str | None  # tag as stored, None when absent or "und"
    title: str | None = None
    default: bool = False
    audio_index: int = 0  # position among the audio streams (the N of `0:a:N`)


@dataclass(frozen=True)
class VideoStreamInfo:
    index: int
    codec: str
    width: int | None
    height: int | None
    fps: float | None
    attached_pic: bool = False  # cover art, not a real video track


@dataclass(frozen=True)
class SubtitleStreamInfo:
    index: int
    codec: str
    language: str | None
    title: str | None = None
    default: bool = False


@dataclass(frozen=True)
class MediaInfo:
    path: Path
    duration: float  # seconds; 0.0 when ffmpeg could not tell
    has_video: bool
    video_codec: str | None
    audio_streams: list[AudioStreamInfo]
    video_streams: list[VideoStreamInfo] = field(default_factory=list)
    subtitle_streams: list[SubtitleStreamInfo] = field(default_factory=list)
    format_name: str = ""
    start_time: float = 0.0  # container start timestamp (MPEG-TS files often start at 1.4 s, not 0)
    # Where `duration` comes from: "header" (the container says so), "estimated" (ffmpeg guessed it from
    # the bitrate, e.g. an MP3 without a Xing header) or "decoded" (the header had none; probe() decoded).
    duration_source: str = "header"


_INPUT_RE = re.compile(r"^Input #0, (?P<fmt>.+?), from '")
_DURATION_RE = re.compile(
    r"^\s*Duration: (?P<d>N/A|\d+:\d\d:\d\d(?:\.\d+)?)(?:, start: (?P<start>-?\d+(?:\.\d+)?))?"
)
# "  Stream #0:1[0x2](eng): Audio: aac (LC) (mp4a / 0x6134706D), 48000 Hz, stereo, fltp, 128 kb/s (default)"
_STREAM_RE = re.compile(
    r"^\s*Stream #0:(?P<idx>\d+)(?:\[[^\]]*\])?(?:\((?P<lang>[^)]*)\))?: (?P<kind>Video|Audio|Subtitle|Data|"
    r"Attachment): (?P<rest>.*)$"
)
_META_RE = re.compile(r"^\s+(?P<key>[^:]+?)\s*: (?P<value>.*)$")


# Boxes an MP4/MOV file starts with: with one of them first, "moov atom not found" means the file was cut
# before its index; without, the file is something else that was merely named .mp4.
_MP4_FIRST_BOXES = {b"ftyp", b"mdat", b"free", b"skip", b"wide", b"pnot", b"moov"}


def _hms(text: str) -> float:
    h, m, s = text.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def _lang(tag: str | None) -> str | None:
    if not tag or tag.lower() == "und":
        return None
    return tag


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses ("yuv420p(tv, bt709)" stays one field)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def _channels_of(layout: str) -> int:
    if layout in LAYOUT_CHANNELS:
        return LAYOUT_CHANNELS[layout]
    m = re.match(r"(\d+) channels", layout)
    if m:
        return int(m.group(1))
    return 0


def _parse_audio(rest: str) -> tuple[str, int, str, int]:
    fields = _split_top(rest)
    codec = fields[0].split()[0] if fields and fields[0] else "unknown"
    rate, layout = 0, ""
    for i, f in enumerate(fields[1:], start=1):
        m = re.match(r"(\d+) Hz$", f)
        if m:
            rate = int(m.group(1))
            if i + 1 < len(fields):
                layout = fields[i + 1]
            break
    return codec, rate, layout, _channels_of(layout)


def _parse_video(rest: str) -> tuple[str, int | None, int | None, float | None]:
    fields = _split_top(rest)
    codec = fields[0].split()[0] if fields and fields[0] else "unknown"
    width = height = None
    fps = None
    for f in fields[1:]:
        m = re.match(r"(\d+)x(\d+)\b", f)
        if m and width is None:
            width, height = int(m.group(1)), int(m.group(2))
        m = re.match(r"([\d.]+)(k?) fps$", f)
        if m:
            fps = float(m.group(1)) * (1000 if m.group(2) else 1)
    return codec, width, height, fps


def parse_ffmpeg_info(path: Path, stderr: str) -> MediaInfo:
    """Parse the summary that `ffmpeg -i` prints for input #0 (split out so it can be tested on text)."""
    fmt = ""
    duration = start = 0.0
    streams: list[dict] = []
    cur: dict | None = None
    in_input = False
    for line in stderr.splitlines():
        m = _INPUT_RE.match(line)
        if m:
            in_input, fmt = True, m.group("fmt")
            continue
        if not in_input:
            continue
        if line.startswith(("Input #", "Output #", "Stream mapping")) or not line.startswith(" "):
            # Input #0's block ends at the first unindented line.
            break
        m = _DURATION_RE.match(line)
        if m:
            if m.group("d") != "N/A":
                duration = _hms(m.group("d"))
            if m.group("start"):
                start = float(m.group("start"))
            cur = None
            continue
        m = _STREAM_RE.match(line)
        if m:
            rest = m.group("rest")
            disp = set(re.findall(r"\((default|forced|attached pic|dub|original|comment)\)", rest))
            cur = {
                "idx": int(m.group("idx")),
                "lang": _lang(m.group("lang")),
                "kind": m.group("kind"),
                "rest": rest,
                "disp": disp,
                "meta": {},
            }
            streams.append(cur)
            continue
        m = _META_RE.match(line)
        if m and cur is not None and m.group("key").strip().lower() != "metadata":
            cur["meta"].setdefault(m.group("key").strip().lower(), m.group("value").strip())

    audio: list[AudioStreamInfo] = []
    video: list[VideoStreamInfo] = []
    subs: list[SubtitleStreamInfo] = []
    for s in streams:
        meta = s["meta"]
        # MP4 stores a track title in its `name` box, Matroska in `title`.
        title = meta.get("title") or meta.get("name")
        lang = s["lang"] or _lang(meta.get("language"))
        default = "default" in s["disp"]
        if s["kind"] == "Audio":
            codec, rate, layout, channels = _parse_audio(s["rest"])
            audio.append(
                AudioStreamInfo(
                    index=s["idx"],
                    codec=codec,
                    channels=channels,
                    layout=layout,
                    sample_rate=rate,
                    language=lang,
                    title=title,
                    default=default,
                    audio_index=len(audio),
                )
            )
        elif s["kind"] == "Video":
            codec, w, h, fps = _parse_video(s["rest"])
            video.append(
                VideoStreamInfo(s["idx"], codec, w, h, fps, attached_pic="attached pic" in s["disp"])
            )
        elif s["kind"] == "Subtitle":
            codec = s["rest"].split(",")[0].split()[0] if s["rest"] else "unknown"
            subs.append(SubtitleStreamInfo(s["idx"], codec, lang, title, default))
    real_video = [v for v in video if not v.attached_pic]
    return MediaInfo(
        path=path,
        duration=duration,
        has_video=bool(real_video),
        video_codec=real_video[0].codec if real_video else None,
        audio_streams=audio,
        video_streams=video,
        subtitle_streams=subs,
        format_name=fmt,
        start_time=start,
        duration_source="estimated" if "Estimating duration from bitrate" in stderr else "header",
    )


def _decoded_duration(path: Path) -> float:
    """Duration by decoding (for inputs whose header has none, e.g. raw streams); 0.0 if it cannot tell."""
    proc = subprocess.run(
        [
            ffmpeg_path(),
            "-hide_banner",
            "-nostdin",
            "-i",
            f"file:{path}",
            "-map",
            "0:a:0?",
            "-map",
            "0:v:0?",
            "-f",
            "null",
            "-",
        ],
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
    )
    times = re.findall(r"time=(\d+:\d\d:\d\d(?:\.\d+)?)", proc.stderr)
    return _hms(times[-1]) if times else 0.0


def probe(path: Path, *, check_complete: bool = False) -> MediaInfo:
    """Streams, codecs and tags of a media file; InputError naming the file if it is missing or not media.

    `check_complete` also reads the file's last seconds of packets: InputError when it is truncated (see
    fasttts_cli/media/intact.py).
    For the user's inputs, before any slow work; not needed for files we wrote."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file")
    if path.is_dir():
        raise InputError(path, "is a folder, not a media file")
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    proc = subprocess.run(
        [ffmpeg_path(), "-hide_banner", "-nostdin", "-i", f"file:{path.resolve()}"],
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
    )
    err = proc.stderr
    if "moov atom not found" in err and head[4:8] in _MP4_FIRST_BOXES:
        # An MP4/MOV whose index was to be written at the end, by a muxer or transfer that never got there.
        raise InputError(
            path,
            "truncated or corrupt: no MP4/MOV index (moov atom not found), as when a recording, download "
            "or copy did not finish",
            hint="copy or download it again; a recording cut off this way needs a repair tool (untrunc)",
        )
    if "Input #0" not in err:
        last = [ln for ln in err.strip().splitlines() if ln.strip()]
        why = "not a media file ffmpeg can read"
        if any("Invalid data found" in ln for ln in last):
            why += " (invalid data)"
        elif last:
            why += f" ({last[-1].strip()})"
        raise InputError(path, why)
    info = parse_ffmpeg_info(path, err)
    if not info.audio_streams and not info.video_streams:
        raise InputError(path, "has no audio or video stream")
    if info.duration <= 0.0:
        decoded = _decoded_duration(path.resolve())
        info = MediaInfo(**{**info.__dict__, "duration": decoded, "duration_source": "decoded"})
    if check_complete:
        from fasttts_cli.media.intact import check_intact

        check_intact(info)
    return info


def require_video(path: Path, *, check_complete: bool = False) -> MediaInfo:
    """probe() that also insists on a real video stream (cover art does not count)."""
    info = probe(path, check_complete=check_complete)
    if not info.has_video:
        raise InputError(path, "no video stream (pass the video file, or leave out --video for audio only)")
    return info


def require_audio(info: MediaInfo) -> AudioStreamInfo:
    """The first audio stream, or InputError when the file has none (e.g. --mix duck on a silent video)."""
    if not info.audio_streams:
        raise InputError(info.path, "no audio stream")
    return info.audio_streams[0]
