"""The work dir and its content-addressed per-line audio cache.

Layout of `<stem>.fasttts/`:
    plan.json          the plan of the last run
    report.json        the per-line report of the last run
    lines/ab/<key>.npy float32 mono audio at the engine's sample rate
    lines/ab/<key>.json meta: sample_rate, duration, n_tokens, hit_token_limit, seed, retries, ...
    dub.wav            the final mix before muxing

A line's key is the sha256 of everything that can change its audio: normalized text, the voice key
(reference audio hash + emotion), the synthesizer identity (model, engine build, preset, code
version), the synthesis parameters and the seed. The seed itself comes from (text, voice, base
seed), never from the line's position or batch-mates, so an edit re-renders only the edited lines.

Every file is written to a temporary name in the same folder and renamed (atomic on POSIX), and a
cache entry counts only once its .json (written last) exists: Ctrl-C or a kill at any point leaves
either a complete entry or none.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

WORK_SUFFIX = ".fasttts"
KEY_VERSION = 1  # bump if the key recipe changes


def work_dir_for(stem: str, output_dir: Path, override: Path | None = None) -> Path:
    """`<stem>.fasttts/` in the output's folder, unless --work-dir says otherwise."""
    return override if override is not None else output_dir / f"{stem}{WORK_SUFFIX}"


def normalize_text(text: str) -> str:
    """What counts as 'the same line': NFC, whitespace collapsed. Case and punctuation change prosody,
    so they stay."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def _sha(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def line_seed(text: str, voice_key: str, base_seed: int) -> int:
    """A line's seed: depends on its text, its voice and --seed only (fits a signed 32-bit int)."""
    return (
        int(_sha(["seed", KEY_VERSION, normalize_text(text), voice_key, int(base_seed)])[:8], 16) & 0x7FFFFFFF
    )


def retry_seed(seed: int, attempt: int) -> int:
    """Seed for the runaway guard's re-synthesis number `attempt` (1, 2, ...)."""
    return int(_sha(["retry", seed, attempt])[:8], 16) & 0x7FFFFFFF


def line_key(text: str, voice_key: str, identity: str, params: Mapping[str, Any], seed: int) -> str:
    return _sha(["line", KEY_VERSION, normalize_text(text), voice_key, identity, dict(params), int(seed)])


# ---- atomic writes -------------------------------------------------------------------------------


def _umask() -> int:
    """The process umask. Read from /proc where possible: setting it to read it back is a (brief) race with
    other threads creating files."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The mode open() gives a new file (0o666 less the umask: 0o644 typically)."""
    return 0o666 & ~_umask()


def atomic_write(path: Path, write: Callable[[Any], None], *, mode: str = "wb") -> Path:
    """Write through `write(fileobj)` to a temp file next to `path`, fsync, then rename over it.

    The file gets the mode a plain open() would give it: mkstemp creates 0600 files, which would leave
    report.json, plan.json and the subtitles unreadable to other users."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, default_file_mode())
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if "b" not in mode else {})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text), mode="w")


def atomic_write_json(path: Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


# ---- the line cache ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CachedLine:
    key: str
    audio: np.ndarray  # float32 mono
    sample_rate: int
    meta: dict[str, Any]

    @property
    def duration(self) -> float:
        return len(self.audio) / self.sample_rate


class LineCache:
    """Per-line audio keyed by `line_key`; safe against interruption at any point."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _paths(self, key: str) -> tuple[Path, Path]:
        d = self.root / key[:2]
        return d / f"{key}.npy", d / f"{key}.json"

    def has(self, key: str) -> bool:
        npy, meta = self._paths(key)
        return meta.is_file() and npy.is_file()

    def get(self, key: str) -> CachedLine | None:
        npy, meta_p = self._paths(key)
        if not meta_p.is_file():
            return None
        try:
            meta = json.loads(meta_p.read_text(encoding="utf-8"))
            audio = np.load(npy, allow_pickle=False)
        except (OSError, ValueError, json.JSONDecodeError):
            return None  # damaged by something outside our control: treat as a miss, re-render
        if audio.dtype != np.float32 or audio.ndim != 1 or meta.get("n_samples") != len(audio):
            return None
        return CachedLine(key, audio, int(meta["sample_rate"]), meta)

    def meta(self, key: str) -> dict[str, Any] | None:
        """An entry's meta (sample_rate, n_samples, retries, ...) without its audio; None on a miss."""
        npy, meta_p = self._paths(key)
        if not (meta_p.is_file() and npy.is_file()):
            return None
        try:
            meta = json.loads(meta_p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or not {"sample_rate", "n_samples"} <= set(meta):
            return None
        return meta

    def put(self, key: str, audio: np.ndarray, sample_rate: int, meta: Mapping[str, Any]) -> CachedLine:
        audio = np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)
        npy, meta_p = self._paths(key)
        full = {
            **dict(meta),
            "key": key,
            "sample_rate": int(sample_rate),
            "n_samples": len(audio),
            "duration": len(audio) / sample_rate,
        }
        # Audio first, meta last: the meta file is the commit marker.
        atomic_write(npy, lambda f: np.save(f, audio, allow_pickle=False))
        atomic_write_json(meta_p, full)
        return CachedLine(key, audio, int(sample_rate), full)

    def keys(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*/*.json"))
