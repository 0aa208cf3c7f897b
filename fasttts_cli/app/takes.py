"""Which take each line of a dub is on (`--retake`, `--take`, the work folder's `takes.json`), and the
book kept after the plan phase. The rule for a take's seed and the book itself are `dubbing.takes`'.

`choose_takes` runs once the line states (take 1) are known and before the plan cache is consulted: it
moves each line to its take (its `seed` and `key` become the take's), so the plan phase, the render
phase and the report need nothing else. A single dub and `fasttts batch`'s pre-pass both call it, so the
pre-pass plans exactly the take the job then uses; `planned` (keys the pre-pass planned for this job)
does not count as an existing take, so the job picks the same new take number the pre-pass did."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttts_cli.app.job import JobInputs, LineState, format_ranges
from fasttts_cli.app.progress import Reporter
from fasttts_cli.dubbing.cache import LineCache, line_key, normalize_text, take_seed
from fasttts_cli.dubbing.takes import BookEntry, TakeBook, existing_takes, line_slots, load_book, save_book
from fasttts_cli.errors import UsageError


@dataclass
class TakeChoice:
    """What `choose_takes` decided: the book as loaded, each line's slot in it, and the loaded book's
    JSON (to write the book only when it changed)."""

    book: TakeBook
    slots: dict[int, str]
    loaded: dict[str, Any]


def choose_takes(
    rep: Reporter,
    job: JobInputs,
    states: dict[int, LineState],
    cache: LineCache,
    work_dir: Path,
    identity: str,
    params: Any,
    planned: frozenset[str] = frozenset(),
) -> TakeChoice:
    """Put every line on its take: a new one for --retake (one past the highest made), the one --take
    names (exit 2 if it does not exist), else the one the book remembers (take 1 when it has none)."""
    book, problem = load_book(work_dir)
    if problem:
        rep.warn(f"{problem}: every line starts on take 1 (its takes stay cached: --take LINE=N goes back)")
    asked = job.retake | set(job.take)
    silent = sorted(asked - set(states))
    if silent:
        flag = "--retake" if silent[0] in job.retake else "--take"
        raise UsageError(
            f"{flag}: line {format_ranges(silent)} has nothing to say after cleanup and is not dubbed, "
            "so it has no takes",
            hint="line numbers are the ones `fasttts inspect` shows",
        )
    both = sorted(job.retake & set(job.take))
    if both:
        raise UsageError(f"--retake and --take both name line {format_ranges(both)}: give one of them")
    slots = line_slots((i, st.line.text, st.voice.key if st.voice else "") for i, st in states.items())
    for i, st in states.items():
        assert st.voice is not None
        text, voice_key, base = st.line.text, st.voice.key, st.seed

        def key_of(t: int, text: str = text, voice_key: str = voice_key, base: int = base) -> str:
            return line_key(text, voice_key, identity, params, take_seed(base, t))

        def has(t: int, key_of: Any = key_of) -> bool:
            k = key_of(t)
            return k not in planned and cache.has(k)

        made = book.made(slots[i])
        have = existing_takes(has, made)
        if i in job.retake:
            take = max(made, 1, *have) + 1
            st.retaken = True
        elif i in job.take:
            take = job.take[i]
            if take != 1 and take not in have:
                takes = ", ".join(map(str, have)) or "none yet"
                raise UsageError(
                    f"--take {i}={take}: line {i} has no take {take} (its takes: {takes})",
                    hint=f"--retake {i} makes a new take",
                )
        else:
            take = book.take(slots[i])
        st.take, st.takes = take, have
        st.seed, st.key = take_seed(base, take), key_of(take)
    retaken = [i for i, st in states.items() if st.retaken]
    if retaken:
        what = ", ".join(f"{i} -> take {states[i].take}" for i in retaken)
        rep.info(f"--retake: line {what}")
    return TakeChoice(book, slots, book.to_json())


def keep_takes(
    rep: Reporter, choice: TakeChoice, states: dict[int, LineState], cache: LineCache, work_dir: Path
) -> None:
    """After the plan phase (finished or not): each line's take is remembered once its plan is cached; a
    new take that failed leaves the line on its previous take for later runs, but its number stays used.
    The book is written (atomically) only when it changed."""
    book = choice.book
    fam = {i: slot.split("#", 1)[0] for i, slot in choice.slots.items()}
    made: dict[str, set[int]] = {}  # per text/voice: the takes this run cached (shared by its lines)
    for i, st in states.items():
        if cache.has(st.key):
            made.setdefault(fam[i], set()).add(st.take)
    for i, st in states.items():
        st.takes = sorted({*st.takes, *made.get(fam[i], ())})
        ok = st.take in made.get(fam[i], ())
        slot = choice.slots[i]
        entry = book.entries.get(slot)
        if entry is None and st.take == 1:
            continue  # a line that never left take 1 needs no entry
        if entry is None:
            entry = book.entries[slot] = BookEntry(1, 1)
        entry.line, entry.text = i, normalize_text(st.line.text)
        entry.made = max(entry.made, st.take)
        if ok:
            entry.take = st.take
        elif st.retaken and st.error is not None:
            rep.warn(f"line {i}: its new take {st.take} failed; later runs keep take {entry.take}")
    if book.to_json() != choice.loaded:
        save_book(work_dir, book)
