"""Block-wise audio storage for long programmes: disk-backed arrays, an in-memory twin, block writers.

A feature-length mix does not fit in memory several times over (2 h of 5.1 float32 at 48 kHz is 8.3 GB), so
the assembly keeps the timeline and the mix in `DiskArray`s: raw float32 frames in a temporary file in the
work dir, read and written with pread/pwrite one block at a time. Plain file I/O rather than np.memmap on
purpose: pages of a memory map count toward the process's resident set as they are touched, while the page
cache behind pread/pwrite does not, so the process's own footprint stays at a few blocks.

`MemArray` has the same interface over a numpy array: the small in-memory API (render_timeline, mix_tracks,
normalize_loudness) runs the same block code with one block.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import numpy as np
import soundfile as sf

from fasttts_cli.partials import create_partial, write_failed

# Frames per block: about 5.5 s at 48 kHz, a few MB per channel per intermediate array.
BLOCK = 1 << 18


def block_ranges(n: int, block: int) -> Iterator[tuple[int, int]]:
    """[start, stop) ranges covering 0..n in steps of `block` (none for n == 0)."""
    if block < 1:
        raise ValueError(f"block size must be >= 1, got {block}")
    for start in range(0, n, block):
        yield start, min(n, start + block)


class MemArray:
    """A growable float32 `(channels, n)` array in memory with DiskArray's interface."""

    def __init__(self, channels: int, n: int = 0) -> None:
        self.channels = channels
        self.data = np.zeros((channels, n), dtype=np.float32)

    @property
    def n(self) -> int:
        return self.data.shape[1]

    def resize(self, n: int) -> None:
        if n > self.n:
            self.data = np.pad(self.data, ((0, 0), (0, n - self.n)))

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.data[:, max(0, start) : max(0, min(stop, self.n))]

    def write(self, start: int, block: np.ndarray) -> None:
        block = np.atleast_2d(block)
        self.resize(start + block.shape[1])
        self.data[:, start : start + block.shape[1]] = block

    def add(self, start: int, mono: np.ndarray) -> None:
        """Sum a mono clip into channel 0 (the timeline): float32 `+=` in placement order."""
        self.resize(start + mono.size)
        self.data[0, start : start + mono.size] += mono

    def close(self) -> None:
        pass


class DiskArray(contextlib.AbstractContextManager):  # `with`: __enter__ returns self
    """Float32 frames `(n, channels)` in a temporary file in `folder`; removed on close.

    The file is sparse until written, so an unwritten range reads as silence and a long, mostly silent
    timeline costs little disk. Its name is `<prefix><pid>-<random>.partial.f32`, which a later run's sweep
    (`partials.sweep_partials`) recognises and removes if this process is killed. A failed write (the disk
    filling up as the sparse file fills in) is a WriteError naming the file."""

    def __init__(self, folder: Path, channels: int, n: int = 0, *, prefix: str = ".fasttts-block-") -> None:
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            fd, self.path = create_partial(Path(folder) / "scratch.f32", prefix=prefix)
        except OSError as e:
            raise write_failed(Path(folder) / f"{prefix}*.partial.f32", e, hint=self._hint(folder)) from None
        self._fd = fd
        self.channels = channels
        self.n = 0
        self.resize(n)

    def _frame_bytes(self) -> int:
        return 4 * self.channels

    @staticmethod
    def _hint(folder: Path) -> str:
        return (
            f"that is scratch audio, removed when done: free some space in {folder} and run the same "
            "command again (finished lines stay cached)"
        )

    def resize(self, n: int) -> None:
        if n > self.n:
            try:
                os.ftruncate(self._fd, n * self._frame_bytes())
            except OSError as e:
                raise write_failed(self.path, e, hint=self._hint(self.path.parent)) from None
            self.n = n

    def read(self, start: int, stop: int) -> np.ndarray:
        """Frames [start, stop) clipped to the array, as a float32 `(channels, m)` copy."""
        start, stop = max(0, start), max(0, min(stop, self.n))
        m = max(0, stop - start)
        frames = np.empty((m, self.channels), dtype="<f4")
        view = memoryview(frames).cast("B")
        got, offset = 0, start * self._frame_bytes()
        while got < view.nbytes:
            k = os.preadv(self._fd, [view[got:]], offset + got)
            if k <= 0:
                raise OSError(f"{self.path}: short read at byte {offset + got}")
            got += k
        return np.ascontiguousarray(frames.T, dtype=np.float32)

    def write(self, start: int, block: np.ndarray) -> None:
        block = np.atleast_2d(np.asarray(block, dtype=np.float32))
        if block.shape[0] != self.channels:
            raise ValueError(f"block has {block.shape[0]} channels, the array {self.channels}")
        self.resize(start + block.shape[1])
        view = memoryview(np.ascontiguousarray(block.T, dtype="<f4")).cast("B")
        done, offset = 0, start * self._frame_bytes()
        try:
            while done < view.nbytes:
                done += os.pwrite(self._fd, view[done:], offset + done)
        except OSError as e:
            raise write_failed(self.path, e, hint=self._hint(self.path.parent)) from None

    def add(self, start: int, mono: np.ndarray) -> None:
        """Sum a mono clip into channel 0 of a mono array (read, add in float32, write back)."""
        mono = np.asarray(mono, dtype=np.float32)
        self.resize(start + mono.size)
        cur = self.read(start, start + mono.size)
        cur[0] += mono
        self.write(start, cur)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            with contextlib.suppress(OSError):
                self.path.unlink()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten array must not leave gigabytes in the work dir
        with contextlib.suppress(Exception):
            self.close()


# ---- block-wise file output ----------------------------------------------------------------------------

_SOUNDFILE_FORMATS = {".wav": "WAV", ".flac": "FLAC"}


class AudioFileWriter(contextlib.AbstractContextManager):
    """WAV/FLAC written block by block to a partial file next to `path`
    (`.<stem>.<pid>-<random>.partial<ext>`, unique to this run), renamed on `commit()`. A failed write or
    close (a full disk) removes the partial and raises WriteError naming `path`.

    PCM 24-bit, like `mux.write_audio`: samples beyond +/-1.0 are clipped (the mix is normalized first)."""

    def __init__(self, path: Path, sr: int, channels: int, *, subtype: str = "PCM_24") -> None:
        self.path = Path(path)
        fmt = _SOUNDFILE_FORMATS.get(self.path.suffix.lower())
        if fmt is None:
            raise ValueError(f"{self.path}: block-wise output is WAV or FLAC only")
        self.channels = channels
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, self.tmp = create_partial(self.path)
            os.close(fd)  # libsndfile opens it by name; O_EXCL above made the name ours
            self._f = sf.SoundFile(str(self.tmp), "w", sr, channels, subtype=subtype, format=fmt)
        except (OSError, sf.SoundFileError) as e:
            if hasattr(self, "tmp"):
                with contextlib.suppress(OSError):
                    self.tmp.unlink()
            raise write_failed(self.path, e) from None

    def write(self, block: np.ndarray) -> None:
        block = np.atleast_2d(np.asarray(block, dtype=np.float32))
        try:
            self._f.write(np.ascontiguousarray(block.T))
        except (OSError, sf.SoundFileError) as e:
            self.abort()
            raise write_failed(self.path, e) from None

    def commit(self) -> Path:
        try:
            self._f.close()
            os.replace(self.tmp, self.path)
        except (OSError, sf.SoundFileError) as e:
            self.abort()
            raise write_failed(self.path, e) from None
        return self.path

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._f.close()
        with contextlib.suppress(OSError):
            self.tmp.unlink()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is None:
            if not self._f.closed:
                self.commit()
        else:
            self.abort()


def export_audio(
    src_wav: Path, out: Path, *, block: int = BLOCK, lang: str | None = None, title: str | None = None
) -> Path:
    """The finished dub WAV as the user's audio file, by extension, without loading it whole.

    .wav: a copy; .flac: re-written block by block (24-bit, the same samples); .m4a/.mp3/.opus: encoded by
    ffmpeg from the WAV with `mux.write_audio`'s codec settings, tagged with `lang` (ISO 639-2) and
    `title`."""
    from fasttts_cli.media.mux import atomic_output, audio_format, encode_audio

    out = Path(out)
    info = sf.info(str(src_wav))
    fmt = audio_format(out, info.channels)
    with atomic_output(out) as tmp:
        if fmt == "wav":
            shutil.copyfile(src_wav, tmp)
        elif fmt == "flac":
            with (
                sf.SoundFile(str(src_wav)) as src,
                sf.SoundFile(
                    str(tmp), "w", info.samplerate, info.channels, subtype="PCM_24", format="FLAC"
                ) as dst,
            ):
                for frames in src.blocks(blocksize=block, dtype="float32", always_2d=True):
                    dst.write(frames)
        else:
            encode_audio(src_wav, tmp, fmt, info.channels, out=out, lang=lang, title=title)
    return out
