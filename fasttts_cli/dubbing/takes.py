"""Takes: more than one rendition of a line, and which one the dub uses.

A line's take n has the seed `cache.take_seed(line seed, n)`; take 1 is the line's own seed, so a dub that
never asked for a take is unchanged. Every take is an entry of the plan cache under its own key, so
earlier takes stay cached and going back to one synthesizes nothing.

The work folder remembers each line's chosen take in `takes.json` (the `TakeBook`), written atomically
under the work folder's lock. A line is found in it by its *slot*: the hash of its normalized text and
voice key (reference audio and emotion), plus its occurrence among the lines with that same text and voice.
So a line that moves (a cue inserted before it) keeps its take, two lines that say the same words in the
same voice keep separate choices, and a changed text, voice or emotion is a new slot: its takes start
afresh at take 1. The takes that exist for a line are those of its text/voice/emotion (shared by every
occurrence): what the plan cache holds under their keys.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttts_cli.dubbing.cache import atomic_write_json, normalize_text
from fasttts_cli.dubbing.plan import spec_parts
from fasttts_cli.errors import UsageError

TAKES_FILE = "takes.json"
BOOK_VERSION = 1


def parse_take(values: Iterable[str], flag: str = "--take") -> dict[int, int]:
    """`["7=1", "9=2,10=3"]` -> {7: 1, 9: 2, 10: 3}; a bad item is a UsageError naming it."""
    out: dict[int, int] = {}
    for value in values:
        for part in spec_parts(value, flag, "LINE=TAKE pairs like 7=1,9=2"):
            m = re.fullmatch(r"(\d+)\s*=\s*(\d+)", part)
            if not m:
                raise UsageError(f"{flag} {value}: {part!r} is not LINE=TAKE", hint=f"e.g. {flag} 7=1,9=2")
            line, take = int(m[1]), int(m[2])
            if line < 1 or take < 1:
                raise UsageError(f"{flag} {value}: line and take numbers start at 1 (got {part!r})")
            if out.get(line, take) != take:
                raise UsageError(f"{flag}: line {line} is given two takes ({out[line]} and {take})")
            out[line] = take
    return out


def line_slots(lines: Iterable[tuple[int, str, str]]) -> dict[int, str]:
    """Each line's slot in the book, from (index, text, voice key): `<family>#<occurrence>`, where the
    family is the hash of (normalized text, voice key) and the occurrence counts, in line order, the
    lines of that family (1, 2, ...)."""
    seen: dict[str, int] = {}
    out: dict[int, str] = {}
    for index, text, voice_key in sorted(lines):
        fam = family(text, voice_key)
        seen[fam] = seen.get(fam, 0) + 1
        out[index] = f"{fam}#{seen[fam]}"
    return out


def family(text: str, voice_key: str) -> str:
    """The hash naming a line's text and voice (its takes are shared by every line that says it)."""
    blob = json.dumps(["takes", normalize_text(text), voice_key], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


@dataclass
class BookEntry:
    """One slot: the take it is on and the highest take ever made for it (so a new take never reuses a
    number, even when that take failed or its entry is gone). `line` and `text` are for people reading
    the file; the slot is what finds the entry."""

    take: int
    made: int
    line: int = 0
    text: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "text": self.text, "take": self.take, "made": self.made}


@dataclass
class TakeBook:
    """The chosen take of every slot that ever had one other than 1 (`takes.json`)."""

    entries: dict[str, BookEntry] = field(default_factory=dict)

    def made(self, slot: str) -> int:
        """The highest take made for the slot's family (every occurrence shares the family's takes)."""
        fam = slot.split("#", 1)[0]
        return max((e.made for s, e in self.entries.items() if s.split("#", 1)[0] == fam), default=0)

    def take(self, slot: str) -> int:
        e = self.entries.get(slot)
        return e.take if e is not None else 1

    def to_json(self) -> dict[str, Any]:
        return {"version": BOOK_VERSION, "slots": {s: e.to_json() for s, e in sorted(self.entries.items())}}


def load_book(work_dir: Path) -> tuple[TakeBook, str | None]:
    """The work folder's book (empty when there is none) and, when the file cannot be used, why: the run
    then starts every line on take 1 (the takes stay in the cache, so `--take` can go back to one)."""
    path = work_dir / TAKES_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return TakeBook(), None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return TakeBook(), f"{path} is unreadable ({type(e).__name__})"
    slots = raw.get("slots") if isinstance(raw, dict) else None
    if not isinstance(slots, dict) or raw.get("version") != BOOK_VERSION:
        return TakeBook(), f"{path} is not a version-{BOOK_VERSION} takes file"
    book = TakeBook()
    for slot, e in slots.items():
        if not isinstance(e, dict):
            continue
        take, made = e.get("take"), e.get("made")
        if isinstance(take, int) and isinstance(made, int) and take >= 1:
            line = e.get("line") if isinstance(e.get("line"), int) else 0
            book.entries[str(slot)] = BookEntry(take, max(made, take), line, str(e.get("text", "")))
    return book, None


def save_book(work_dir: Path, book: TakeBook) -> Path:
    """Write the book atomically (temporary name, then rename); the caller holds the work folder's lock."""
    return atomic_write_json(work_dir / TAKES_FILE, book.to_json())


def existing_takes(has: Callable[[int], bool], made: int) -> list[int]:
    """The takes whose entry `has(take)` finds: every take up to `made`, then on upwards while there is
    one (a cache kept without its book still shows its takes)."""
    found = [t for t in range(1, made + 1) if has(t)]
    t = max(made, 0) + 1
    while has(t):
        found.append(t)
        t += 1
    return found
