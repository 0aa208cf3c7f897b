"""The work dir and its content-addressed per-line audio cache.

Layout of `<stem>.fasttts/`:
    plan.json          the plan of the last run
    report.json        the per-line report of the last run
    plans/ab/<key>.npy  a line's plan (synthesizer.LinePlan's payload: IndexTTS-2's codes as int32, the draft
                        voice's natural audio as float32), under the line's key
    plans/ab/<key>.json meta: the line's natural length, the engine's plan info, n_tokens, seed, ...
    lines/ab/<key>.npy float32 mono audio at the engine's sample rate, as rendered to one target length,
                       under `render_key(line key, frames)`
    lines/ab/<key>.json meta: sample_rate, n_samples, dtype, shape, audio_sha256, plan_key, frames, ...
    dub.wav            the final mix before muxing
    takes.json         each line's chosen take (takes.py), once a take was asked for
    .lock, .lock.owner one run at a time (worklock.py)

A line's key is the sha256 of everything that can change its audio: normalized text, the voice key
(reference audio hash + emotion), the synthesizer identity (model, engine build, preset, code
version), the synthesis parameters and the seed. The seed itself comes from (text, voice, base
seed), never from the line's position or batch-mates, so an edit re-renders only the edited lines; a
line's take n > 1 (`--retake`) uses `take_seed(seed, n)`, so each take is an entry of its own. A
rendered entry's key adds the target length (`render_key`): re-timing a line renders it again from its
cached plan and never re-runs the GPT.

Every file is written to a partial name unique to the run (`partials.partial_path`) in the same folder and
renamed (atomic on POSIX), and a cache entry counts only once its .json (written last) exists: Ctrl-C or a
kill at any point leaves either a complete entry or none. The meta also records the audio's dtype, shape
and sha256, and every read verifies them: an entry damaged by anything else (a truncated copy, a bad disk,
an edit) is reported and re-synthesized, never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.partials import WriteError, create_partial, write_failed

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


def take_seed(seed: int, take: int) -> int:
    """The seed of a line's take number `take` (1-based) from the line's own seed. Take 1 is the line's
    seed itself, so a dub that never asked for a take keeps its keys and audio bit for bit; every other
    take is a fixed function of (seed, take), so a take is reproducible. Retries derive from it."""
    if take == 1:
        return int(seed)
    return int(_sha(["take", int(seed), int(take)])[:8], 16) & 0x7FFFFFFF


def line_key(text: str, voice_key: str, identity: str, params: Mapping[str, Any], seed: int) -> str:
    return _sha(["line", KEY_VERSION, normalize_text(text), voice_key, identity, dict(params), int(seed)])


def render_key(key: str, frames: int | None) -> str:
    """The rendered audio of the line with key `key` at a target of `frames` (None: its natural length)."""
    return _sha(["render", KEY_VERSION, key, None if frames is None else int(frames)])


# ---- atomic writes -------------------------------------------------------------------------------


def atomic_write(path: Path, write: Callable[[Any], None], *, mode: str = "wb") -> Path:
    """Write through `write(fileobj)` to a partial file next to `path`, fsync, then rename over it.

    The partial name is unique to this run (`partials.partial_path`), and the file gets the mode a plain
    open() would give it. An I/O failure is a WriteError naming `path` (exit 1); the partial is removed."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = create_partial(path)
    except OSError as e:
        raise write_failed(path, e) from None
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if "b" not in mode else {})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise write_failed(path, e) from None
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text), mode="w")


def atomic_write_json(path: Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


# ---- the line cache ------------------------------------------------------------------------------

META_KEYS = ("sample_rate", "n_samples")


@dataclass(frozen=True)
class CachedLine:
    key: str
    audio: np.ndarray  # float32 mono
    sample_rate: int
    meta: dict[str, Any]

    @property
    def duration(self) -> float:
        return len(self.audio) / self.sample_rate


@dataclass(frozen=True)
class EntryCheck:
    """What reading an entry found. `status`: "ok", "missing" (never written, or its meta, the commit
    marker, never landed), or "damaged" (`reason` says how: unreadable meta, a truncated or foreign .npy,
    audio that disagrees with its meta or its checksum)."""

    status: str
    reason: str = ""
    meta: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class _Damaged(Exception):
    pass


# What an entry may hold: float32 audio (and the draft voice's plans), int32 codes (IndexTTS-2's plans).
DTYPES = {"float32": np.dtype("<f4"), "int32": np.dtype("<i4")}


def audio_checksum(audio: np.ndarray) -> str:
    """sha256 of the samples as stored (little-endian, C order; float32 unless the array is int32)."""
    return hashlib.sha256(np.ascontiguousarray(audio, dtype=_stored(audio)).data).hexdigest()


def _stored(a: np.ndarray) -> np.dtype:
    return DTYPES["int32"] if np.issubdtype(a.dtype, np.integer) else DTYPES["float32"]


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise _Damaged(f"its meta file is unreadable ({type(e).__name__})") from None
    if not isinstance(meta, dict):
        raise _Damaged("its meta file is not a JSON object")
    missing = [k for k in META_KEYS if not isinstance(meta.get(k), int) or meta[k] < 0]
    if missing or meta["sample_rate"] <= 0:
        raise _Damaged(f"its meta file lacks a valid {', '.join(missing) or 'sample_rate'}")
    return meta


def _read_npy(path: Path, n_samples: int, dtype_name: str = "float32") -> np.ndarray:
    """The 1-D array in `path`, checked against the meta's length and dtype before anything is allocated:
    the header must say little-endian float32 (or the meta's int32), C order, shape (n_samples,), and the
    file must hold exactly that many bytes after it (a truncated or padded file is damaged)."""
    want = DTYPES.get(dtype_name)
    if want is None:
        raise _Damaged(f"its meta names an unknown dtype {dtype_name!r}")
    fmt = np.lib.format
    try:
        with path.open("rb") as f:
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = fmt.read_array_header_2_0(f)
            else:
                raise _Damaged(f"its audio file is not a readable .npy (version {version})")
            if dtype != want or fortran or len(shape) != 1:
                raise _Damaged(f"its audio is {dtype} {shape}, not {dtype_name} mono")
            if shape[0] != n_samples:
                raise _Damaged(f"its audio has {shape[0]} samples, its meta says {n_samples}")
            size = os.fstat(f.fileno()).st_size - f.tell()
            if size != 4 * n_samples:  # checked before reading: a bogus header must not allocate
                what = "truncated" if size < 4 * n_samples else "longer than its header says"
                raise _Damaged(f"its audio file is {what}")
            data = f.read(4 * n_samples)
    except FileNotFoundError:
        raise _Damaged("its audio file is missing") from None
    except (OSError, ValueError, EOFError) as e:
        raise _Damaged(f"its audio file is not a readable .npy ({e})") from None
    if len(data) != 4 * n_samples:
        raise _Damaged("its audio file is truncated")  # shrank while being read
    return np.frombuffer(data, dtype=want).astype(want.newbyteorder("="), copy=False)


class LineCache:
    """Per-line audio keyed by `line_key`; safe against interruption at any point.

    Every read is verified: the meta's sample count, the .npy header and size, and the sha256 of the samples
    (`audio_sha256` in the meta). An entry written before the checksum existed is checked for everything
    but the checksum, and `verify` then records the checksum of what it read, so later damage is caught.
    A damaged entry is never returned: `get` gives None and `verify` says why."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _paths(self, key: str) -> tuple[Path, Path]:
        d = self.root / key[:2]
        return d / f"{key}.npy", d / f"{key}.json"

    def has(self, key: str) -> bool:
        """Both files are there (no verification: for counts; `verify` before using an entry)."""
        npy, meta = self._paths(key)
        return meta.is_file() and npy.is_file()

    def _load(self, key: str) -> tuple[CachedLine | None, EntryCheck]:
        npy, meta_p = self._paths(key)
        if not meta_p.exists():
            return None, EntryCheck("missing")
        try:
            meta = _read_meta(meta_p)
            audio = _read_npy(npy, meta["n_samples"], str(meta.get("dtype", "float32")))
            want = meta.get("audio_sha256")
            if want is not None and audio_checksum(audio) != want:
                raise _Damaged("its audio does not match its checksum")
        except _Damaged as e:
            return None, EntryCheck("damaged", str(e))
        return CachedLine(key, audio, int(meta["sample_rate"]), meta), EntryCheck("ok", meta=meta)

    def get(self, key: str) -> CachedLine | None:
        """The verified entry, or None when it is missing or damaged."""
        return self._load(key)[0]

    def verify(self, key: str) -> EntryCheck:
        """Read and check an entry in full (the audio is read and hashed, then dropped). An entry from
        before the checksum that passes the other checks gets its checksum recorded (best effort)."""
        hit, check = self._load(key)
        if hit is not None and "audio_sha256" not in hit.meta:
            meta = {**hit.meta, **_audio_fields(hit.audio)}
            with contextlib.suppress(Exception):  # an upgrade only: a read-only cache still serves the entry
                atomic_write_json(self._paths(key)[1], meta)
            check = EntryCheck("ok", meta=meta)
        return check

    def meta(self, key: str) -> dict[str, Any] | None:
        """An entry's meta (sample_rate, n_samples, retries, ...) without reading its audio; None when the
        entry is missing or its meta is unreadable. Not a verification of the audio: see `verify`."""
        npy, meta_p = self._paths(key)
        if not (meta_p.is_file() and npy.is_file()):
            return None
        try:
            return _read_meta(meta_p)
        except _Damaged:
            return None

    def discard(self, key: str) -> None:
        """Remove an entry: meta first (the commit marker), so a failure half-way leaves a plain miss."""
        for p in reversed(self._paths(key)):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def put(self, key: str, audio: np.ndarray, sample_rate: int, meta: Mapping[str, Any]) -> CachedLine:
        """Store an entry. The .npy is serialized in memory first, so a full disk shows as a plain write
        error on it (numpy's own file writes lose the errno); either file failing raises WriteError naming
        it, and leaves the entry absent (its meta, written last, is the commit marker)."""
        audio = np.ascontiguousarray(audio, dtype=_stored(np.asarray(audio))).reshape(-1)
        npy, meta_p = self._paths(key)
        full = {
            **dict(meta),
            "key": key,
            "sample_rate": int(sample_rate),
            "n_samples": len(audio),
            "duration": len(audio) / sample_rate,
            **_audio_fields(audio),
        }
        buf = io.BytesIO()
        np.save(buf, audio, allow_pickle=False)
        # Audio first, meta last: the meta file is the commit marker. A stale meta from an earlier,
        # damaged entry goes first, so it can never pair with the new audio before the new meta lands.
        with contextlib.suppress(FileNotFoundError):
            meta_p.unlink()
        try:
            atomic_write(npy, lambda f: f.write(buf.getbuffer()))
            atomic_write_json(meta_p, full)
        except WriteError as e:
            e.hint = e.hint or (
                f"the lines finished so far stay cached in {self.root.parent}: free some space (or fix the "
                "folder) and run the same command again"
            )
            raise
        return CachedLine(key, audio, int(sample_rate), full)

    def keys(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*/*.json"))


def _audio_fields(audio: np.ndarray) -> dict[str, Any]:
    name = "int32" if _stored(audio) == DTYPES["int32"] else "float32"
    return {"dtype": name, "shape": [len(audio)], "audio_sha256": audio_checksum(audio)}


def check_hits(cache: LineCache, keys: Mapping[int, str]) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """Verify the entries of `keys` (line -> key) in full: (meta of each good hit, reason of each damaged
    entry). Damaged entries are removed, so they are re-synthesized like misses and never read again."""
    hits: dict[int, dict[str, Any]] = {}
    damaged: dict[int, str] = {}
    for i, key in keys.items():
        check = cache.verify(key)
        if check.ok:
            assert check.meta is not None
            hits[i] = check.meta
        elif check.status == "damaged":
            damaged[i] = check.reason
            with contextlib.suppress(OSError):
                cache.discard(key)
    return hits, damaged
