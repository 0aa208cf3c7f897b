"""Audio written as it is made: 16-bit PCM, and a WAV header for a stream whose length is not known yet.

A streaming WAV header says 0xFFFFFFFF for the RIFF and data sizes (what ffmpeg and most players read as
"until the end of the stream"); a seekable file gets its real sizes written over them once the stream
ends, so a finished file is an ordinary WAV. `fasttts synth --stream` and `fasttts serve` both use this.
"""

from __future__ import annotations

import struct
from typing import BinaryIO

import numpy as np

UNKNOWN = 0xFFFFFFFF
HEADER_BYTES = 44


def pcm16(audio: np.ndarray) -> bytes:
    """float32 [-1, 1] -> 16-bit little-endian PCM (clipped, rounded)."""
    a = np.clip(np.asarray(audio, np.float32).reshape(-1), -1.0, 1.0)
    return np.round(a * 32767.0).astype("<i2").tobytes()


def wav_header(sample_rate: int, data_bytes: int | None = None, channels: int = 1) -> bytes:
    """A 44-byte PCM16 WAV header; `data_bytes` None: a stream of unknown length (sizes 0xFFFFFFFF)."""
    block = 2 * channels
    data = UNKNOWN if data_bytes is None else int(data_bytes)
    riff = UNKNOWN if data_bytes is None else 36 + int(data_bytes)
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, int(sample_rate), int(sample_rate) * block, block, 16)
        + b"data"
        + struct.pack("<I", data)
    )


class WavStreamWriter:
    """Writes a streaming WAV (or raw PCM with `header=False`) to a binary file as audio comes; `close`
    writes the real sizes over the header where the file can seek."""

    def __init__(self, out: BinaryIO, sample_rate: int, *, header: bool = True) -> None:
        self.out = out
        self.sample_rate = int(sample_rate)
        self.header = header
        self.data_bytes = 0
        if header:
            out.write(wav_header(self.sample_rate))
        out.flush()

    def write(self, audio: np.ndarray) -> None:
        b = pcm16(audio)
        self.out.write(b)
        self.out.flush()
        self.data_bytes += len(b)

    def close(self) -> None:
        """Finalize the header (a seekable file only: a pipe keeps the streaming sizes)."""
        if self.header and _seekable(self.out):
            self.out.seek(0)
            self.out.write(wav_header(self.sample_rate, self.data_bytes))
            self.out.seek(0, 2)
        self.out.flush()


def _seekable(f: BinaryIO) -> bool:
    try:
        return bool(f.seekable())
    except (AttributeError, OSError, ValueError):
        return False
