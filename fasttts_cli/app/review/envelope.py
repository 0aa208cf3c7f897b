"""The original audio's envelope for the review timeline: one peak per 50 ms, one byte each.

Computed once per source file (path, size and modification time) and kept in the work folder as
`review/envelope.json`, so `fasttts review` and a re-run of the dub do not decode a film's audio again.
A 2-hour programme is 144,000 peaks: 144 KB of bytes, 192 KB as base64 in the page.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.dubbing.cache import atomic_write_json

HOP_S = 0.05  # seconds per peak: finer than a pixel at any zoom that shows more than ~20 s
# Decoding rate: peaks do not need the source's bandwidth, and a low rate keeps a film's decode cheap.
ENVELOPE_SR = 8000
FORMAT = 1  # bump when the stored envelope's meaning changes: an old file is then recomputed


@dataclass(frozen=True)
class Envelope:
    hop: float  # seconds per peak
    peaks: bytes  # sqrt(peak) * 255, rounded: the square root keeps quiet passages visible in one byte

    def to_json(self) -> dict[str, Any]:
        return {"hop": self.hop, "scale": "sqrt", "peaks": base64.b64encode(self.peaks).decode("ascii")}


def peak_bytes(x: np.ndarray, hop: int) -> bytes:
    """Peaks of `x` (channels, n) per `hop` samples, quantized to one byte on a square-root scale."""
    mono = np.max(np.abs(x), axis=0) if x.ndim == 2 else np.abs(x)
    n = -(-mono.size // hop) * hop
    padded = np.pad(mono, (0, n - mono.size)).reshape(-1, hop)
    peaks = np.clip(padded.max(axis=1), 0.0, 1.0)
    return np.round(np.sqrt(peaks) * 255.0).astype(np.uint8).tobytes()


def _identity(source: Path) -> dict[str, Any]:
    st = source.stat()
    return {"format": FORMAT, "source": str(source.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def source_envelope(source: Path, work_dir: Path) -> Envelope:
    """The envelope of `source`'s first audio stream, from the work folder's copy when it is current."""
    from fasttts_cli.audio.load import AudioReader

    stored = work_dir / "review" / "envelope.json"
    ident = _identity(source)
    try:
        got = json.loads(stored.read_text(encoding="utf-8"))
        if {k: got.get(k) for k in ident} == ident:
            return Envelope(float(got["hop"]), base64.b64decode(got["peaks"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # absent or damaged: computed again below
    hop = round(HOP_S * ENVELOPE_SR)
    parts: list[bytes] = []
    with AudioReader(source, ENVELOPE_SR) as reader:
        while True:
            block = reader.read(hop * 200)  # 10 s, whole hops: no peak straddles two blocks
            if block.shape[1] == 0:
                break
            parts.append(peak_bytes(block, hop))
    env = Envelope(HOP_S, b"".join(parts))
    atomic_write_json(stored, {**ident, **env.to_json()})
    return env
