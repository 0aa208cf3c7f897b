"""Audio in: decode any file to float32, resample once (soxr HQ), level helpers, reference-voice checks.

Everything downstream works in float32 at 48 kHz. Arrays are mono `(n,)` or multichannel `(channels, n)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soxr

from fasttts_cli.errors import FastTTSError, InputError
from fasttts_cli.ffmpeg import run_ffmpeg

WORK_SR = 48000
# Extensions libsndfile reads natively; anything else (mp3, m4a, opus, video files) goes through ffmpeg.
_SOUNDFILE_EXTS = {".wav", ".flac", ".ogg", ".oga", ".aif", ".aiff", ".w64", ".rf64"}

REF_MIN_SECONDS = 1.0
REF_LONG_SECONDS = 30.0
REF_SILENT_DBFS = -60.0


def db_to_gain(db: float) -> float:
    return float(10.0 ** (db / 20.0))


def gain_to_db(gain: float) -> float:
    return float(20.0 * np.log10(gain)) if gain > 0 else float("-inf")


def peak_dbfs(x: np.ndarray) -> float:
    """Sample peak in dBFS over all channels (-inf for silence or empty input)."""
    if x.size == 0:
        return float("-inf")
    return gain_to_db(float(np.max(np.abs(x))))


def rms_dbfs(x: np.ndarray) -> float:
    """RMS in dBFS over all channels and samples (a full-scale sine reads -3 dBFS)."""
    if x.size == 0:
        return float("-inf")
    ms = float(np.mean(np.square(x, dtype=np.float64)))
    return float(10.0 * np.log10(ms)) if ms > 0 else float("-inf")


def resample(x: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    """soxr HQ resampling; mono `(n,)` or `(channels, n)`; returns float32."""
    x = np.asarray(x, dtype=np.float32)
    if sr_in == sr_out or x.shape[-1] == 0:
        return x.copy()
    if x.ndim == 1:
        return soxr.resample(x, sr_in, sr_out, quality="HQ").astype(np.float32, copy=False)
    # soxr wants (frames, channels)
    y = soxr.resample(np.ascontiguousarray(x.T), sr_in, sr_out, quality="HQ")
    return np.ascontiguousarray(y.T, dtype=np.float32)


def to_mono(x: np.ndarray) -> np.ndarray:
    """Mean of the channels: keeps a centred voice at its level in a stereo file."""
    if x.ndim == 1:
        return x.astype(np.float32, copy=False)
    return x.mean(axis=0, dtype=np.float64).astype(np.float32)


def _read_soundfile(path: Path) -> tuple[np.ndarray, int] | None:
    import soundfile as sf

    try:
        data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    except (RuntimeError, sf.LibsndfileError, TypeError, ValueError):
        return None  # let ffmpeg try: e.g. a .wav holding a codec libsndfile lacks
    return np.ascontiguousarray(data.T), int(sr)


def _read_ffmpeg(path: Path) -> tuple[np.ndarray, int]:
    from fasttts_cli.probe import probe, require_audio

    info = probe(path)
    stream = require_audio(info)
    if stream.channels <= 0 or stream.sample_rate <= 0:
        raise InputError(path, f"cannot tell the channels/sample rate of its audio ({stream.layout or '?'})")
    # Decode at the stream's own rate and channel count: the one resample happens in soxr, not in ffmpeg.
    args = ["-i", f"file:{path.resolve()}", "-map", f"0:{stream.index}", "-vn", "-sn", "-dn"]
    args += ["-ac", str(stream.channels), "-ar", str(stream.sample_rate), "-f", "f32le", "-c:a", "pcm_f32le"]
    try:
        proc = run_ffmpeg([*args, "pipe:1"], what=f"decoding {path}")
    except FastTTSError as exc:
        raise InputError(path, f"cannot decode its audio: {exc.message}") from None
    flat = np.frombuffer(proc.stdout, dtype="<f4")
    n = flat.size // stream.channels
    data = flat[: n * stream.channels].reshape(n, stream.channels).T
    return np.ascontiguousarray(data, dtype=np.float32), stream.sample_rate


def _decode(path: Path) -> tuple[np.ndarray, int]:
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file")
    if path.is_dir():
        raise InputError(path, "is a folder, not an audio file")
    got = _read_soundfile(path) if path.suffix.lower() in _SOUNDFILE_EXTS else None
    if got is None:
        got = _read_ffmpeg(path)
    data, sr = got
    if not np.all(np.isfinite(data)):
        raise InputError(path, "audio holds NaN or infinite samples")
    return data, sr


def load_audio_channels(path: Path, sr: int = WORK_SR) -> np.ndarray:
    """Decode the first audio stream keeping its channels -> float32 `(channels, n)` at `sr`."""
    data, sr_in = _decode(path)
    return resample(data, sr_in, sr)


def load_audio(path: Path, sr: int = WORK_SR) -> np.ndarray:
    """Decode any audio (or a video's first audio stream) -> float32 mono `(n,)` at `sr`."""
    data, sr_in = _decode(path)
    # Mix down before resampling: one soxr pass over one channel instead of N.
    return resample(to_mono(data), sr_in, sr)


@dataclass(frozen=True)
class VoiceCheck:
    path: Path
    duration: float
    rms_dbfs: float
    peak_dbfs: float
    warnings: list[str] = field(default_factory=list)


def inspect_reference_voice(path: Path) -> VoiceCheck:
    """Check a reference voice clip; InputError when unusable, warnings for merely odd clips."""
    path = Path(path)
    x = load_audio(path, WORK_SR)
    duration = x.size / WORK_SR
    if x.size == 0:
        raise InputError(path, "reference voice holds no audio")
    if duration < REF_MIN_SECONDS:
        raise InputError(
            path,
            f"reference voice is too short ({duration:.2f} s; at least {REF_MIN_SECONDS:.0f} s is needed)",
            hint="use 3-10 s of clean speech",
        )
    rms = rms_dbfs(x)
    if rms < REF_SILENT_DBFS:
        raise InputError(
            path,
            f"reference voice is silent (RMS {rms:.1f} dBFS, below {REF_SILENT_DBFS:.0f} dBFS)",
            hint="use 3-10 s of clean speech",
        )
    warnings = []
    if duration > REF_LONG_SECONDS:
        warnings.append(
            f"{path}: reference voice is long ({duration:.1f} s); 3-10 s of clean speech clones as well "
            "and conditions faster"
        )
    pk = peak_dbfs(x)
    if pk >= -0.1:
        warnings.append(f"{path}: reference voice reaches full scale ({pk:.1f} dBFS): it may be clipped")
    return VoiceCheck(path=path, duration=duration, rms_dbfs=rms, peak_dbfs=pk, warnings=warnings)


def check_reference_voice(path: Path) -> float:
    """Duration in seconds of a usable reference voice; InputError if missing, corrupt, short or silent.

    Warnings (long clip, clipping) are available from `inspect_reference_voice`.
    """
    return inspect_reference_voice(path).duration
