"""Audio in: decode any file to float32, resample once (soxr HQ), level helpers, reference-voice checks.

Everything downstream works in float32 at 48 kHz. Arrays are mono `(n,)` or multichannel `(channels, n)`.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import numpy as np
import soxr

from fasttts_cli.errors import FastTTSError, InputError
from fasttts_cli.media.ffmpeg import ffmpeg_path, run_ffmpeg

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
    from fasttts_cli.media.probe import probe, require_audio

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


class AudioReader(contextlib.AbstractContextManager):  # `with`: __enter__ returns self
    """A file's first audio stream decoded block by block, keeping its channels, at `sr`: `read(m)` returns
    the next float32 `(channels, m)` frames (fewer only at the end). For originals and stems as long as a
    film: memory stays at a block whatever the length.

    Decoding and resampling match `load_audio_channels` sample for sample: libsndfile for the formats it
    reads, else ffmpeg at the stream's own rate and channel count (raw f32le through a pipe), then one soxr
    HQ stream, whose output equals soxr's one-shot resample. Use as a context manager."""

    _CHUNK = 1 << 16  # source frames per decode step

    def __init__(self, path: Path, sr: int = WORK_SR) -> None:
        self.path = path = Path(path)
        if not path.exists():
            raise InputError(path, "no such file")
        if path.is_dir():
            raise InputError(path, "is a folder, not an audio file")
        self._sf = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._err = None
        if path.suffix.lower() in _SOUNDFILE_EXTS:
            import soundfile as sf

            try:
                self._sf = sf.SoundFile(str(path))
            except (RuntimeError, sf.LibsndfileError, TypeError, ValueError):
                self._sf = None  # let ffmpeg try, as _decode does
        if self._sf is not None:
            self.channels, sr_in = int(self._sf.channels), int(self._sf.samplerate)
        else:
            self.channels, sr_in = self._start_ffmpeg()
        self.sr = sr
        self._rs = (
            soxr.ResampleStream(sr_in, sr, self.channels, dtype="float32", quality="HQ")
            if sr_in != sr
            else None
        )
        self._buf = np.zeros((self.channels, 0), dtype=np.float32)
        self._eof = False

    def _start_ffmpeg(self) -> tuple[int, int]:
        from fasttts_cli.media.probe import probe, require_audio

        path = self.path
        stream = require_audio(probe(path))
        if stream.channels <= 0 or stream.sample_rate <= 0:
            raise InputError(
                path, f"cannot tell the channels/sample rate of its audio ({stream.layout or '?'})"
            )
        args = [ffmpeg_path(), "-hide_banner", "-nostdin", "-loglevel", "error"]
        args += ["-i", f"file:{path.resolve()}", "-map", f"0:{stream.index}", "-vn", "-sn", "-dn"]
        args += [
            "-ac",
            str(stream.channels),
            "-ar",
            str(stream.sample_rate),
            "-f",
            "f32le",
            "-c:a",
            "pcm_f32le",
        ]
        # stderr to a file: a chatty decoder must not block on a full pipe while we read stdout
        self._err = tempfile.TemporaryFile()  # noqa: SIM115  (closed in close(), with the process)
        self._proc = subprocess.Popen([*args, "pipe:1"], stdout=subprocess.PIPE, stderr=self._err)
        return stream.channels, stream.sample_rate

    def _decode_chunk(self) -> np.ndarray | None:
        """The next frames at the source rate `(channels, k)`, or None at the end."""
        if self._sf is not None:
            data = self._sf.read(self._CHUNK, dtype="float32", always_2d=True)
            return np.ascontiguousarray(data.T) if len(data) else None
        assert self._proc is not None and self._proc.stdout is not None
        raw = self._proc.stdout.read(self._CHUNK * self.channels * 4)
        if not raw:
            if self._proc.wait() != 0:
                assert self._err is not None
                self._err.seek(0)
                tail = self._err.read().decode(errors="replace").strip().splitlines()[-3:]
                msg = " | ".join(tail) or f"ffmpeg exit {self._proc.returncode}"
                raise InputError(self.path, f"cannot decode its audio: {msg}")
            return None
        flat = np.frombuffer(raw, dtype="<f4")
        k = flat.size // self.channels
        return np.ascontiguousarray(flat[: k * self.channels].reshape(k, self.channels).T, dtype=np.float32)

    def _more(self) -> None:
        src = self._decode_chunk()
        if src is not None and not np.all(np.isfinite(src)):
            raise InputError(self.path, "audio holds NaN or infinite samples")
        if self._rs is None:
            out = src
        elif src is None:
            out = self._rs.resample_chunk(np.zeros((0, self.channels), dtype=np.float32), last=True)
            out = np.ascontiguousarray(np.reshape(out, (-1, self.channels)).T)
        else:
            out = np.reshape(self._rs.resample_chunk(np.ascontiguousarray(src.T)), (-1, self.channels))
            out = np.ascontiguousarray(out.T)
        if src is None:
            self._eof = True
        if out is not None and out.shape[1]:
            self._buf = np.concatenate([self._buf, out], axis=1) if self._buf.shape[1] else out

    def read(self, m: int) -> np.ndarray:
        while self._buf.shape[1] < m and not self._eof:
            self._more()
        out, self._buf = self._buf[:, :m], self._buf[:, m:]
        return out

    def read_exact(self, m: int) -> np.ndarray:
        """The next m frames, silence past the end (a bed fitted to the programme's length)."""
        out = self.read(m)
        return out if out.shape[1] == m else np.pad(out, ((0, 0), (0, m - out.shape[1])))

    def close(self) -> None:
        if self._sf is not None:
            self._sf.close()
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            with contextlib.suppress(Exception):
                self._proc.wait(timeout=10)
                if self._proc.stdout is not None:
                    self._proc.stdout.close()
        if self._err is not None:
            self._err.close()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


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
