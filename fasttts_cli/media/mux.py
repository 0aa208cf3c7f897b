"""Write the results: the dub muxed into the video (video stream-copied), or audio-only files.

Video: every video stream is copied bit for bit (`-c:v copy`). Dub audio: AAC for MP4/M4V/MOV (192 kb/s up
to stereo, 384 kb/s for 5.1), Opus for MKV/WebM (96/128/256 kb/s for mono/stereo/5.1); Opus because Matroska
carries it natively and it is transparent at lower rates. The dub is the first audio track, tagged with an
ISO 639-2 language and a title, and is the only one with the `default` disposition; with keep_original the
source's audio tracks follow it, copied when the container takes their codec (else re-encoded like the
dub), with `default` cleared. Soft subtitles: mov_text in MP4/MOV, SRT (or ASS for .ass input) in MKV,
WebVTT in WebM. MP4/MOV get `+faststart` so playback starts before the whole file is downloaded.

Every file is written to `.<stem>.<pid>-<random>.partial<ext>` in the output folder (unique to the run, the
real extension kept last so tools recognise it) and renamed over the final name only when complete. A write
that fails on the way (a full disk, also when ffmpeg reports it) is a WriteError naming the output.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import soundfile as sf

from fasttts_cli.errors import FastTTSError, InputError, MissingDependencyError, UsageError
from fasttts_cli.media.ffmpeg import ffmpeg_path, run_ffmpeg
from fasttts_cli.media.probe import probe, require_video
from fasttts_cli.partials import DISK_ERRNOS, WriteError, create_partial, disk_full_text, write_failed

# ---------------------------------------------------------------------------------------------------------
# Language tags

# ISO 639-1 -> (ISO 639-2/T, ISO 639-2/B); the two differ for about twenty languages.
_ISO1: dict[str, tuple[str, str]] = {
    "af": ("afr", "afr"), "am": ("amh", "amh"), "ar": ("ara", "ara"), "az": ("aze", "aze"),
    "be": ("bel", "bel"), "bg": ("bul", "bul"), "bn": ("ben", "ben"), "bo": ("bod", "tib"),
    "bs": ("bos", "bos"), "ca": ("cat", "cat"), "cs": ("ces", "cze"), "cy": ("cym", "wel"),
    "da": ("dan", "dan"), "de": ("deu", "ger"), "el": ("ell", "gre"), "en": ("eng", "eng"),
    "eo": ("epo", "epo"), "es": ("spa", "spa"), "et": ("est", "est"), "eu": ("eus", "baq"),
    "fa": ("fas", "per"), "fi": ("fin", "fin"), "fr": ("fra", "fre"), "ga": ("gle", "gle"),
    "gl": ("glg", "glg"), "gu": ("guj", "guj"), "ha": ("hau", "hau"), "he": ("heb", "heb"),
    "hi": ("hin", "hin"), "hr": ("hrv", "hrv"), "hu": ("hun", "hun"), "hy": ("hye", "arm"),
    "id": ("ind", "ind"), "ig": ("ibo", "ibo"), "is": ("isl", "ice"), "it": ("ita", "ita"),
    "ja": ("jpn", "jpn"), "ka": ("kat", "geo"), "kk": ("kaz", "kaz"), "km": ("khm", "khm"),
    "kn": ("kan", "kan"), "ko": ("kor", "kor"), "ku": ("kur", "kur"), "la": ("lat", "lat"),
    "lo": ("lao", "lao"), "lt": ("lit", "lit"), "lv": ("lav", "lav"), "mk": ("mkd", "mac"),
    "ml": ("mal", "mal"), "mn": ("mon", "mon"), "mr": ("mar", "mar"), "ms": ("msa", "may"),
    "mt": ("mlt", "mlt"), "my": ("mya", "bur"), "nb": ("nob", "nob"), "ne": ("nep", "nep"),
    "nl": ("nld", "dut"), "nn": ("nno", "nno"), "no": ("nor", "nor"), "pa": ("pan", "pan"),
    "pl": ("pol", "pol"), "ps": ("pus", "pus"), "pt": ("por", "por"), "ro": ("ron", "rum"),
    "ru": ("rus", "rus"), "si": ("sin", "sin"), "sk": ("slk", "slo"), "sl": ("slv", "slv"),
    "so": ("som", "som"), "sq": ("sqi", "alb"), "sr": ("srp", "srp"), "sv": ("swe", "swe"),
    "sw": ("swa", "swa"), "ta": ("tam", "tam"), "te": ("tel", "tel"), "th": ("tha", "tha"),
    "tl": ("tgl", "tgl"), "tr": ("tur", "tur"), "uk": ("ukr", "ukr"), "ur": ("urd", "urd"),
    "uz": ("uzb", "uzb"), "vi": ("vie", "vie"), "xh": ("xho", "xho"), "yo": ("yor", "yor"),
    "zh": ("zho", "chi"), "zu": ("zul", "zul"),
}  # fmt: skip
_B_TO_T = {b: t for t, b in _ISO1.values() if t != b}
_T_TO_B = {t: b for t, b in _ISO1.values() if t != b}
# The QuickTime (MOV) language list ffmpeg's MOV writer accepts (isom.c); anything else is not stored.
_MOV_LIST = (
    "eng fra ger ita dut sve spa dan por nor heb jpn ara fin gre ice mlt tur chi urd hin tha kor lit pol hun "
    "est lav rus iri alb ron ces slk slv yid mac bul ukr bel uzb kaz aze arm geo mol kir tgk tuk mon pus kur "
    "kas snd tib nep san mar ben asm guj ori mal kan tam tel bur khm lao vie ind tgl may amh tir orm som swa "
    "kin run nya mlg epo wel"
)
_MOV_LANGS = frozenset(_MOV_LIST.split())
_MOV_SPELLING = {
    "deu": "ger", "fre": "fra", "nld": "dut", "swe": "sve", "ell": "gre", "isl": "ice",
    "zho": "chi", "rum": "ron", "cze": "ces", "slo": "slk", "sqi": "alb", "mkd": "mac",
    "hye": "arm", "kat": "geo", "bod": "tib", "mya": "bur", "msa": "may", "cym": "wel",
}  # fmt: skip


def normalize_lang(lang: str, *, flag: str = "--lang") -> str:
    """User language -> ISO 639-2/T code: "es", "es-ES", "pt_BR", "spa", "ger" -> "spa", ..., "deu".

    Any three-letter code is accepted (ISO 639-2 has ~480); two-letter codes must be known; anything else
    is a UsageError naming the flag."""
    raw = (lang or "").strip()
    code = re.split(r"[-_]", raw, maxsplit=1)[0].lower()
    if re.fullmatch(r"[a-z]{3}", code):
        return _B_TO_T.get(code, code)
    if re.fullmatch(r"[a-z]{2}", code):
        if code in _ISO1:
            return _ISO1[code][0]
        raise UsageError(
            f"{flag} {raw}: unknown two-letter code; give the ISO 639-2 three-letter code (e.g. spa)"
        )
    raise UsageError(f"{flag} {lang!r}: not a language code; use an ISO 639-2 code such as spa, deu, jpn")


_T_TO_ISO1 = {t: one for one, (t, _) in _ISO1.items()}


def iso639_1(lang: str) -> str | None:
    """The two-letter code of a --lang value (None for `und` and for languages without one)."""
    return _T_TO_ISO1.get(normalize_lang(lang))


def container_lang(lang: str, container: str) -> str | None:
    """The spelling `container` stores for ISO 639-2/T `lang` (None when it cannot store it at all).

    MP4 wants 639-2/T, Matroska's language element 639-2/B, MOV only its QuickTime list."""
    t = normalize_lang(lang)
    if container == "matroska" or container == "webm":
        return _T_TO_B.get(t, t)
    if container == "mov":
        spelt = _MOV_SPELLING.get(t, t)
        return spelt if spelt in _MOV_LANGS else None
    return t


def default_title(lang: str) -> str:
    return f"Dub ({normalize_lang(lang)}) — fasttts"


# ---------------------------------------------------------------------------------------------------------
# Containers and codecs

_CONTAINERS = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska", ".webm": "webm"}
_AUDIO_FORMATS = {".wav": "wav", ".flac": "flac", ".m4a": "m4a", ".mp3": "mp3", ".opus": "opus"}


def _dub_codec(container: str, channels: int) -> list[str]:
    """Encoder options for the dub stream (stream specifier filled in by the caller)."""
    if container in ("matroska", "webm"):
        rate = {1: "96k", 2: "128k"}.get(channels, "256k")
        return ["libopus", rate]
    rate = "384k" if channels > 2 else "192k"
    return ["aac", rate]


def _relabel(i: int, layout: str, channels: int, encoder: str) -> list[str]:
    """Filter options naming output audio stream i's layout without remixing (channelmap renames only).

    libopus takes 5.1 but not 5.1(side); the side and back pairs are the same two speakers in a home setup."""
    if encoder == "libopus" and layout == "5.1(side)":
        layout = "5.1"
    if channels != 6 or layout not in ("5.1", "5.1(side)"):
        return []
    return [f"-filter:a:{i}", f"channelmap=map=0|1|2|3|4|5:channel_layout={layout}"]


@functools.cache
def _encoders() -> frozenset[str]:
    out = subprocess.run(
        [ffmpeg_path(), "-hide_banner", "-encoders"], capture_output=True, text=True, check=False
    ).stdout
    return frozenset(m.group(1) for m in re.finditer(r"^\s*[VASD][.F][.S][.X][.B][.D]\s+(\S+)", out, re.M))


def _needs(encoder: str, what: str) -> None:
    if encoder not in _encoders():
        raise MissingDependencyError(f"this ffmpeg has no {encoder} encoder, needed for {what}")


# ---------------------------------------------------------------------------------------------------------
# Atomic output


@contextlib.contextmanager
def atomic_output(out: Path) -> Iterator[Path]:
    """Yield a new partial path in out's folder; rename it to `out` on success, remove it on failure.

    A folder that cannot be created or written is an InputError naming the path (exit 2); a write that
    fails on the way (OSError, libsndfile, or ffmpeg saying the disk is full) is a WriteError naming `out`
    (exit 1), never the file being read."""
    out = Path(out)
    if out.is_dir():
        raise InputError(out, "is a folder; give a file name for the output")
    for folder in (out.parent, *out.parent.parents):
        if folder.exists():
            if not folder.is_dir():
                raise InputError(out, f"cannot write the output: {folder} is a file, not a folder")
            break
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(out.parent, f"cannot create the output folder: {exc.strerror or exc}") from None
    try:
        fd, tmp = create_partial(out)
        os.close(fd)
    except OSError as exc:
        if exc.errno in DISK_ERRNOS:
            raise write_failed(out, exc) from None
        raise InputError(out, f"cannot write the output here: {exc.strerror or exc}") from None
    try:
        yield tmp
        os.replace(tmp, out)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, (OSError, sf.SoundFileError)):
            raise write_failed(out, exc) from None
        if isinstance(exc, FastTTSError) and not isinstance(exc, WriteError):
            full = disk_full_text(exc.message)
            if full:
                raise WriteError(out, full) from None
        raise


def _src(path: Path) -> str:
    # "file:" stops ffmpeg reading a name like "a:b.wav" as a protocol or "-x.wav" as an option.
    return f"file:{Path(path).resolve()}"


# ---------------------------------------------------------------------------------------------------------
# Audio-only output


def audio_format(path: Path, channels: int) -> str:
    """The audio-only format for `path`'s extension (wav, flac, m4a, mp3, opus), checked against the
    channel count and this ffmpeg's encoders, with an error naming the file otherwise."""
    fmt = _AUDIO_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(
            f"{path}: cannot tell the audio format from '{path.suffix}'; "
            f"use one of {', '.join(_AUDIO_FORMATS)}"
        )
    if fmt == "mp3" and channels > 2:
        raise UsageError(f"{path}: MP3 holds at most 2 channels; use .m4a, .flac or .wav for {channels}")
    if fmt in ("mp3", "opus", "m4a"):
        _needs({"mp3": "libmp3lame", "opus": "libopus", "m4a": "aac"}[fmt], f"writing {path.suffix} files")
    return fmt


def encode_audio(
    src_wav: Path,
    tmp: Path,
    fmt: str,
    channels: int,
    *,
    out: Path,
    bitrate: str | None = None,
    lang: str | None = None,
    title: str | None = None,
) -> None:
    """ffmpeg-encode a float WAV into `tmp` (the partial name of `out`) as m4a (AAC), mp3 (LAME) or opus,
    tagged with the dub's language and title as the video's dub track would be."""
    args = ["-i", _src(src_wav), "-map", "0:a:0", "-map_metadata", "-1"]
    code = normalize_lang(lang) if lang else None
    if code and code != "und":
        # MP4 and Ogg keep a per-stream language; ID3 (mp3) has one for the file (TLAN).
        args += ["-metadata" if fmt == "mp3" else "-metadata:s:a:0", f"language={code}"]
    if title:
        args += ["-metadata", f"title={title}"]
    if fmt == "mp3":
        args += ["-c:a", "libmp3lame", "-b:a", bitrate or "192k", "-f", "mp3"]
    elif fmt == "opus":
        rate = bitrate or {1: "96k", 2: "128k"}.get(channels, "256k")
        args += ["-c:a", "libopus", "-b:a", rate, "-f", "opus"]
    else:
        args += ["-c:a", "aac", "-b:a", bitrate or ("384k" if channels > 2 else "192k")]
        args += ["-movflags", "+faststart", "-f", "ipod"]
    run_ffmpeg([*args, _src(tmp)], what=f"writing {out}")


def write_audio(path: Path, x: np.ndarray, sr: int, *, bitrate: str | None = None) -> Path:
    """Write mono `(n,)` or `(channels, n)` float audio by extension, atomically.

    .wav: PCM 24-bit; .flac: 24-bit; .m4a: AAC (192k, 384k for >2 ch); .mp3: LAME 192k; .opus: Opus.
    Samples beyond +/-1.0 are clipped by the integer formats (the mix is normalized to -1 dBTP first)."""
    path = Path(path)
    a = np.asarray(x, dtype=np.float32)
    frames = a[:, None] if a.ndim == 1 else a.T  # soundfile wants (frames, channels)
    channels = frames.shape[1]
    fmt = audio_format(path, channels)
    with atomic_output(path) as tmp:
        if fmt in ("wav", "flac"):
            sf.write(str(tmp), frames, sr, subtype="PCM_24", format=fmt.upper())
        else:
            fd, src = create_partial(path, ext=".src.wav")
            os.close(fd)
            try:
                sf.write(str(src), frames, sr, subtype="FLOAT", format="WAV")
                encode_audio(src, tmp, fmt, channels, out=path, bitrate=bitrate)
            finally:
                with contextlib.suppress(OSError):
                    src.unlink()
    return path


# ---------------------------------------------------------------------------------------------------------
# Mux into the video


def mux(
    video: Path,
    dub_audio: Path,
    out: Path,
    *,
    lang: str,
    title: str = "",
    keep_original: bool = False,
    subtitles: Path | None = None,
    original_lang: str | None = None,
    subtitle_lang: str | None = None,
    dub_layout: str | None = None,
    warnings: list[str] | None = None,
    default_subtitles: bool = False,
    on_time: Callable[[float], None] | None = None,
) -> Path:
    """Mux `dub_audio` into `video` as the default, language-tagged track; write `out` atomically.

    The container comes from out's extension (.mp4 .m4v .mov .mkv .webm). `title` defaults to
    "Dub (<lang>) — fasttts". `dub_layout` relabels the dub's channels (a 6-channel WAV reads as 5.1; pass
    "5.1(side)" when the mix followed a 5.1(side) original). Notes for the user (e.g. a language MOV cannot
    store) go to `warnings`. `on_time(seconds)`: ffmpeg's progress, seconds of the output written."""
    video, dub_audio, out = Path(video), Path(dub_audio), Path(out)
    notes = warnings if warnings is not None else []
    container = _CONTAINERS.get(out.suffix.lower())
    if container is None:
        raise UsageError(
            f"{out}: unsupported video container '{out.suffix}'; use one of {', '.join(_CONTAINERS)} "
            "(or an audio extension for audio only)"
        )
    if out.resolve() == video.resolve():
        raise UsageError(f"{out}: the output would overwrite the input video; choose another name")
    vinfo = require_video(video)
    if container == "webm":
        bad = [v.codec for v in vinfo.video_streams if v.codec not in ("vp8", "vp9", "av1")]
        if bad:
            raise UsageError(
                f"{out}: WebM only holds VP8/VP9/AV1 video and the video is {bad[0]}; use .mkv or .mp4 "
                "(the video is copied, never re-encoded)"
            )
    dinfo = probe(dub_audio)
    if not dinfo.audio_streams:
        raise InputError(dub_audio, "no audio stream")
    dub_channels = dinfo.audio_streams[0].channels or 2
    dub_layout = dub_layout or dinfo.audio_streams[0].layout
    lang_t = normalize_lang(lang)
    title = title or default_title(lang_t)
    enc, rate = _dub_codec(container, dub_channels)
    _needs(enc, f"the dub track in {out.suffix}")

    def tagged(code: str, what: str) -> str | None:
        stored = container_lang(code, container)
        if stored is None:
            notes.append(f"{out}: MOV cannot store the language '{code}' for the {what}; use .mp4 or .mkv")
        return stored

    originals = vinfo.audio_streams if keep_original else []
    sub_codec = None
    if subtitles is not None:
        subtitles = Path(subtitles)
        if not subtitles.is_file():
            raise InputError(subtitles, "no such subtitle file")
        if container in ("mp4", "mov"):
            sub_codec = "mov_text"
        elif container == "webm":
            sub_codec = "webvtt"
        else:
            sub_codec = "ass" if subtitles.suffix.lower() in (".ass", ".ssa") else "srt"

    def command(copy_originals: bool) -> list[str]:
        # No -itsoffset for a video whose timestamps start late (MPEG-TS): ffmpeg rebases every input to
        # its own start, so the copied video and the dub both begin at 0 in the output.
        args = ["-i", _src(video), "-i", _src(dub_audio)]
        if subtitles is not None:
            args += ["-i", _src(subtitles)]
        args += ["-map", "0:v", "-map", "1:a:0"]
        for s in originals:
            args += ["-map", f"0:{s.index}"]
        if subtitles is not None:
            args += ["-map", "2:s:0"]
        args += ["-map_metadata", "0", "-map_chapters", "0", "-c:v", "copy"]
        args += ["-c:a:0", enc, "-b:a:0", rate, "-disposition:a:0", "default"]
        args += _relabel(0, dub_layout, dub_channels, enc)
        dub_tag = tagged(lang_t, "dub")
        if dub_tag:
            args += ["-metadata:s:a:0", f"language={dub_tag}"]
        args += ["-metadata:s:a:0", f"title={title}"]
        if container in ("mp4", "mov"):  # players show an MP4/MOV track's handler name as its label
            args += ["-metadata:s:a:0", f"handler_name={title}"]
        for i, s in enumerate(originals, start=1):
            if copy_originals:
                args += [f"-c:a:{i}", "copy"]
            else:
                o_enc, o_rate = _dub_codec(container, s.channels or 2)
                args += [f"-c:a:{i}", o_enc, f"-b:a:{i}", o_rate, *_relabel(i, s.layout, s.channels, o_enc)]
            args += [f"-disposition:a:{i}", "0"]
            o_lang = original_lang if (original_lang and not s.language) else None
            if o_lang:
                o_tag = tagged(normalize_lang(o_lang, flag="--original-lang"), "original audio")
                if o_tag:
                    args += [f"-metadata:s:a:{i}", f"language={o_tag}"]
            # Set the title explicitly: an MP4 source's title (its `name` box) is not carried over by itself.
            o_title = s.title or "Original"
            args += [f"-metadata:s:a:{i}", f"title={o_title}"]
            if container in ("mp4", "mov"):
                args += [f"-metadata:s:a:{i}", f"handler_name={o_title}"]
        if sub_codec is not None:
            s_tag = tagged(normalize_lang(subtitle_lang or lang_t, flag="--lang"), "subtitles")
            args += ["-c:s:0", sub_codec, "-disposition:s:0", "default" if default_subtitles else "0"]
            if s_tag:
                args += ["-metadata:s:s:0", f"language={s_tag}"]
            args += ["-metadata:s:s:0", f"title=Dub subtitles ({lang_t})"]
        if container in ("mp4", "mov"):
            args += ["-movflags", "+faststart"]
        return args

    with atomic_output(out) as tmp:
        try:
            run_ffmpeg([*command(True), "-f", container, _src(tmp)], what=f"writing {out}", on_time=on_time)
        except FastTTSError as e:
            if not originals or disk_full_text(e.message):
                raise
            # The source's audio codec may not fit this container (e.g. PCM into MP4): re-encode it instead.
            notes.append(f"{out}: the original audio could not be copied into {out.suffix}; re-encoded it")
            run_ffmpeg([*command(False), "-f", container, _src(tmp)], what=f"writing {out}", on_time=on_time)
        if sub_codec is not None and container in ("mp4", "mov") and not default_subtitles:
            from fasttts_cli.media.mp4_tracks import disable_tracks

            # ffmpeg enables the only subtitle track of an MP4 whatever its disposition: players then
            # show it by default.
            disable_tracks(tmp)
    return out


def stream_md5(path: Path, selector: str = "v") -> str:
    """MD5 of the packets of the `selector` streams (e.g. "v"), copied out: equal iff the bytes are equal."""
    proc = run_ffmpeg(
        ["-i", _src(path), "-map", f"0:{selector}", "-c", "copy", "-f", "md5", "pipe:1"],
        what=f"hashing {path}",
    )
    return proc.stdout.decode().strip().removeprefix("MD5=")
