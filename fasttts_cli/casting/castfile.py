"""cast.toml: one `[speakers.NAME]` table per speaker with its timbre reference and where it came from.

Keys per speaker: `reference` (a WAV, relative to the cast file's folder), `source` and `source_sha256`
(the audio the reference was cut from), `spans` ([start, end] pairs in seconds of the source), `seconds`
(their total), `score` (speech-to-background dB, reference.py); `fasttts cast` adds `cues` and
`confidence` (one per cue). Read with tomllib; written by the small writer below, which knows exactly the
value types a cast holds (strings, numbers, lists of them), so no TOML library is needed for it.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttts_cli.dubbing.cache import atomic_write_text
from fasttts_cli.errors import InputError
from fasttts_cli.spec.engine_folder import file_sha256  # noqa: F401 (the cast records sources by it)

CAST_HINT = "make one with `fasttts cast VIDEO SUBS -o FILE`, or a dub with --voice NAME=from-video"


@dataclass(frozen=True)
class CastEntry:
    name: str
    reference: Path  # absolute
    source: str
    source_sha256: str
    spans: list[tuple[float, float]]
    seconds: float
    score: float
    extra: dict[str, Any] = field(default_factory=dict)  # cues / confidence from `fasttts cast`


def _string(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"cast.toml holds finite numbers only (got {v})")
        return repr(float(v))  # numpy floats are floats too, but repr() would name their type
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cast.toml cannot hold {type(v).__name__}")


def dumps(doc: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """TOML text of `{table: {name: {key: value}}}` (the only shape a cast has)."""
    lines = ["# fasttts cast: one timbre reference per speaker (README, 'A cast from the video')"]
    for table, entries in doc.items():
        for name, keys in entries.items():
            lines.append("")
            lines.append(f"[{table}.{_string(name)}]")
            lines.extend(f"{k} = {_value(v)}" for k, v in keys.items())
    return "\n".join(lines) + "\n"


def write_cast(path: Path, entries: list[CastEntry]) -> Path:
    folder = path.parent.resolve()
    table: dict[str, dict[str, Any]] = {}
    for e in entries:
        ref = e.reference.resolve()
        rel = ref.relative_to(folder).as_posix() if ref.is_relative_to(folder) else str(ref)
        table[e.name] = {
            "reference": rel,
            "source": e.source,
            "source_sha256": e.source_sha256,
            "spans": [[a, b] for a, b in e.spans],
            "seconds": e.seconds,
            "score": e.score,
            **e.extra,
        }
    return atomic_write_text(path, dumps({"speakers": table}))


def read_cast(path: Path, flag: str = "--cast") -> list[CastEntry]:
    """The entries of a cast file; every problem is an InputError naming the file, the speaker and the key."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise InputError(path, f"{flag}: no such cast file", hint=CAST_HINT)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(path, f"{flag}: not a valid TOML cast file: {e}", hint=CAST_HINT) from None
    except OSError as e:
        raise InputError(
            path, f"{flag}: cannot read the cast file: {e.strerror or e}", hint=CAST_HINT
        ) from None
    speakers = doc.get("speakers")
    if not isinstance(speakers, dict) or not speakers:
        raise InputError(path, f"{flag}: no [speakers.NAME] tables", hint=CAST_HINT)
    return [_entry(path, flag, name, t) for name, t in speakers.items()]


_KNOWN = ("reference", "source", "source_sha256", "spans", "seconds", "score")


def _entry(path: Path, flag: str, name: str, t: Any) -> CastEntry:
    """One [speakers.NAME] table, every key checked for its type and shape (TOML lets any key hold a
    table, a date, an array of anything, inf or nan: each is refused by name, not let through to fail
    later as an internal error)."""

    def bad(key: str, what: str) -> InputError:
        shown = json.dumps(t[key], default=str) if isinstance(t, dict) and key in t else "?"
        return InputError(path, f"{flag}: [speakers.{name}] {key} = {shown[:80]}: {what}", hint=CAST_HINT)

    if not isinstance(t, dict) or not isinstance(t.get("reference"), str):
        raise InputError(path, f'{flag}: [speakers.{name}] has no reference = "FILE.wav"', hint=CAST_HINT)
    ref = Path(t["reference"]).expanduser()
    ref = ref if ref.is_absolute() else path.parent / ref
    if not ref.is_file():
        raise InputError(path, f"{flag}: speaker {name!r}: reference {str(ref)!r} not found", hint=CAST_HINT)
    for key in ("source", "source_sha256"):
        if not isinstance(t.get(key, ""), str):
            raise bad(key, "expected a string")
    for key in ("seconds", "score"):
        if _finite(t.get(key, 0.0)) is None:
            raise bad(key, "expected a finite number")
    pairs = _spans(t.get("spans", []))
    if pairs is None:
        raise bad("spans", "expected a list of [start, end] pairs of seconds, 0 <= start <= end")
    extra = {k: v for k, v in t.items() if k not in _KNOWN}
    if "cues" in extra and not (
        isinstance(extra["cues"], list) and all(type(c) is int and c >= 0 for c in extra["cues"])
    ):
        raise bad("cues", "expected a list of cue numbers")
    if "confidence" in extra and not (
        isinstance(extra["confidence"], list) and all(_finite(c) is not None for c in extra["confidence"])
    ):
        raise bad("confidence", "expected a list of finite numbers")
    for key, v in extra.items():  # the cast is written back (a dub's work folder): what it cannot hold
        try:
            _value(v)
        except (TypeError, ValueError):
            raise bad(key, "a cast file holds strings, numbers and lists of them here") from None
    return CastEntry(
        name=name,
        reference=ref,
        source=t.get("source", ""),
        source_sha256=t.get("source_sha256", ""),
        spans=pairs,
        seconds=float(t.get("seconds", 0.0)),
        score=float(t.get("score", 0.0)),
        extra=extra,
    )


def _spans(v: Any) -> list[tuple[float, float]] | None:
    """[[start, end], ...] as pairs of seconds; None if it is anything else."""
    if not isinstance(v, list):
        return None
    out = []
    for p in v:
        a, b = (_finite(p[0]), _finite(p[1])) if isinstance(p, list) and len(p) == 2 else (None, None)
        if a is None or b is None or a < 0 or b < a:
            return None
        out.append((a, b))
    return out


def _finite(v: Any) -> float | None:
    """v as a float if it is a finite number (not a bool, which TOML keeps apart but Python does not)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)
