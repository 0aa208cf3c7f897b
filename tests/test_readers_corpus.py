"""The readers against a corpus of subtitle files, checked against reference parsers.

Two corpora share one layout (`good/`, `bad/`, `expected.json`, `SOURCES.md`):
- tests/data/corpus/: files written for this project (untidy on purpose: BOMs, CRLF, CR-only, UTF-16,
  legacy encodings, fansub ASS with signs/karaoke/layers/comments, YouTube auto-captions, damaged files);
- the real-world corpus from public projects' test data and fansub repositories, kept in
  $FASTTTS_CORPUS_DIR (default ../shared/subtitle-corpus beside the checkout: not part of the repository),
  because files taken from other repositories are not committed here.

expected.json maps `good/NAME` to {"encoding": codec (legacy files), "no_speech": N (exact, when known),
"compare_times": false + "why" (the rare file whose times the reference reads differently, for a stated
reason)} and `bad/NAME` to {"error_line": [allowed lines]} where `null` in the list means "`<file>: ` with
no line".

What "agree with the reference" means, per family (the reader sees the same decoded text, newlines
normalised to `\\n`, since srt and pysubs2 do not understand CR-only files):
- SRT (the `srt` library) and WebVTT (webvtt-py): the reference's cues are the file's events, one timing
  line each; every one is a cue of ours (spoken or no_speech, nothing is skipped in these formats), in file
  order, with the same start/end, and its source line is the timing line or the number/identifier line
  right above it.
- ASS/SSA (pysubs2): every non-comment event is either one of our cues, with the same start/end, whose source
  line is that event's line, or a skipped event naming that line; each line is accounted for once. Comment
  events are either all listed as skipped or none of them is (the readers' choice); nothing else is skipped.
- TSV/CSV/JSONL (csv / json of the standard library): one cue per data row, in order.
- End times may be clipped by at most OVERLAP_TOLERANCE to the next cue's start (the readers' documented
  rounding-artefact rule); start times are exact to the millisecond.
- A file of `good/` whose remaining spoken cues truly overlap may be refused by the overlap rule: then the
  InputError must say "overlap" and name the line of an event that the reference shows overlapping an earlier
  one by more than that tolerance. Any other refusal of a good file is a failure.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import os
import re
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import pysubs2
import pytest
import srt
import webvtt

from fasttts_cli.dubbing import readers
from fasttts_cli.dubbing.cues import Cue
from fasttts_cli.dubbing.plan import clean_text
from fasttts_cli.errors import InputError

REPO = Path(__file__).resolve().parent.parent
LOCAL_CORPUS = REPO / "tests" / "data" / "corpus"
TOL = 0.0015  # seconds: ASS has centiseconds, SRT/VTT milliseconds; float rounding on top
CLIP = readers.OVERLAP_TOLERANCE + TOL


def shared_corpus() -> Path:
    return Path(os.environ.get("FASTTTS_CORPUS_DIR", REPO.parent / "shared" / "subtitle-corpus")).resolve()


# --------------------------------------------------------------------------------------- reader adapter


@dataclass(frozen=True)
class Read:
    """What a read gives, whatever the readers' API: cues (spoken and no_speech, in the reader's order),
    which of them are no_speech, and the events left out as (line or None, reason)."""

    cues: list[Cue]
    no_speech: frozenset[int]  # Cue.index values
    skipped: list[tuple[int | None, str]]


def read(path: Path, encoding: str | None = None) -> Read:
    """The one place that knows the readers' API: `read_script_full` -> ScriptRead(cues, skipped), where a
    cue with nothing to say (no text after cleaning, or no length) is what make_plan lists as no_speech."""
    kwargs = {} if encoding is None else {"encoding": encoding}
    got = readers.read_script_full(path, **kwargs)
    no_speech = frozenset(c.index for c in got.cues if c.start == c.end or not clean_text(c.text))
    return Read(got.cues, no_speech, [(source_line(s.source), s.reason) for s in got.skipped])


def source_line(source: str) -> int | None:
    m = re.search(r":(\d+)$", source)
    return int(m[1]) if m else None


# ------------------------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Entry:
    path: Path
    spec: dict

    @property
    def kind(self) -> str:
        return self.path.suffix.lower().lstrip(".")


def load(root: Path) -> list[Entry]:
    manifest = json.loads((root / "expected.json").read_text(encoding="utf-8"))
    return [Entry(root / rel, spec) for rel, spec in sorted(manifest.items())]


def _params(group: str) -> list:
    out = []
    for label, root in (("local", LOCAL_CORPUS), ("shared", shared_corpus())):
        if (root / "expected.json").is_file():
            out += [
                pytest.param(e, id=f"{label}/{e.path.parent.name}/{e.path.name}")
                for e in load(root)
                if e.path.parent.name == group
            ]
    return out


def test_manifests_match_the_folders():
    roots = [r for r in (LOCAL_CORPUS, shared_corpus()) if (r / "expected.json").is_file()]
    assert LOCAL_CORPUS in roots
    for root in roots:
        listed = {e.path for e in load(root)}
        present = {p for p in root.glob("*/*") if p.parent.name in ("good", "bad")}
        assert listed == present, f"{root}: expected.json and good/ bad/ disagree: {listed ^ present}"
        for p in present:
            assert p.stat().st_size < 200_000, f"{p}: corpus files stay under 200 KB"
        assert (root / "SOURCES.md").is_file()


def test_real_world_corpus_is_present():
    root = shared_corpus()
    if not (root / "expected.json").is_file():
        pytest.skip(f"real-world corpus not found at {root} (set FASTTTS_CORPUS_DIR)")
    entries = load(root)
    formats = {e.kind for e in entries if e.path.parent.name == "good"}
    assert len(entries) >= 60 and {"srt", "vtt", "ass", "ssa"} <= formats


# ----------------------------------------------------------------------------------------- references


def decoded(entry: Entry) -> str:
    data = entry.path.read_bytes()
    boms = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
    for bom, codec in boms:
        if data.startswith(bom):
            text = data.decode(codec)
            break
    else:
        text = data.decode(entry.spec.get("encoding", "utf-8"))
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


@dataclass(frozen=True)
class RefEvent:
    line: int | None  # the event's line: SRT/VTT timing line, ASS event line, table row line
    start: float | None
    end: float | None
    comment: bool = False
    empty: bool = False


def reference_events(entry: Entry) -> list[RefEvent]:
    text = decoded(entry)
    lines = text.split("\n")
    if entry.kind == "srt":
        subs = list(srt.parse(text))
        timing = [i + 1 for i, ln in enumerate(lines) if "-->" in ln]
        return _with_lines(
            [(s.start.total_seconds(), s.end.total_seconds(), not s.content.strip()) for s in subs], timing
        )
    if entry.kind == "vtt":
        caps = webvtt.from_buffer(io.StringIO(text)).captions
        timing = [i + 1 for i, ln in enumerate(lines) if "-->" in ln]
        ms = [(c.start_time.in_milliseconds(), c.end_time.in_milliseconds(), c.text) for c in caps]
        return _with_lines([(a / 1000, b / 1000, not t.strip()) for a, b, t in ms], timing)
    if entry.kind in ("ass", "ssa"):
        with warnings.catch_warnings():  # real files' style lines upset pysubs2; only events matter here
            warnings.simplefilter("ignore", RuntimeWarning)
            subs = pysubs2.SSAFile.from_string(text)
        ev_lines, in_events = [], False
        for n, ln in enumerate(lines, 1):
            s = ln.strip()
            if s.startswith("[") and s.endswith("]"):
                in_events = s.lower() == "[events]"
            elif in_events and s.split(":", 1)[0] in ("Dialogue", "Comment"):
                ev_lines.append(n)
        assert len(ev_lines) == len(subs.events), f"{entry.path}: event lines do not match pysubs2's events"
        return [
            RefEvent(n, e.start / 1000, e.end / 1000, e.is_comment, not e.plaintext.strip())
            for n, e in zip(ev_lines, subs.events, strict=True)
        ]
    rows = _table_rows(text, entry.kind)
    return [RefEvent(n, None, None, empty=not t.strip()) for n, t in rows]


def _with_lines(events: list[tuple[float, float, bool]], timing: list[int]) -> list[RefEvent]:
    # Lines are known only when every `-->` line is a cue's timing line (true of every good file so far).
    nums: list[int | None] = list(timing) if len(timing) == len(events) else [None] * len(events)
    return [RefEvent(n, a, b, empty=e) for n, (a, b, e) in zip(nums, events, strict=True)]


def _table_rows(text: str, kind: str) -> list[tuple[int, str]]:
    if kind == "jsonl":
        return [(n, json.loads(ln)["text"]) for n, ln in enumerate(text.split("\n"), 1) if ln.strip()]
    if kind == "tsv":
        rows = [(n, ln.split("\t")) for n, ln in enumerate(text.split("\n"), 1) if ln.strip()]
    else:
        reader, rows, first = csv.reader(io.StringIO(text)), [], 1
        for fields in reader:
            if any(f.strip() for f in fields):
                rows.append((first, fields))
            first = reader.line_num + 1
    col = [h.strip().lower() for h in rows[0][1]].index("text")
    return [(n, f[col]) for n, f in rows[1:]]


def overlapping_lines(events: list[RefEvent]) -> set[int]:
    """Lines of events that start before an earlier (non-comment, non-empty) event ends, beyond the
    tolerance: the only lines an overlap refusal may name."""
    out: set[int] = set()
    live = [e for e in events if not e.comment and not e.empty and e.start is not None]
    live.sort(key=lambda e: e.start)
    latest_end = None
    for e in live:
        if latest_end is not None and latest_end - e.start > readers.OVERLAP_TOLERANCE and e.line is not None:
            out.add(e.line)
        latest_end = e.end if latest_end is None else max(latest_end, e.end)
    return out


# -------------------------------------------------------------------------------------------- the tests


def _check_message(err: InputError, path: Path, allowed: list[int | None]) -> None:
    first = str(err).split("\n", 1)[0]
    prefixes = [f"{path}:{n}: " if n is not None else f"{path}: " for n in allowed]
    assert any(first.startswith(p) for p in prefixes), f"{first!r} should start with one of {prefixes}"


@pytest.mark.parametrize("entry", _params("bad"))
def test_damaged_file_is_refused_naming_file_and_line(entry: Entry):
    with pytest.raises(InputError) as info:
        read(entry.path, entry.spec.get("encoding"))
    _check_message(info.value, entry.path, entry.spec["error_line"])


@pytest.mark.parametrize("entry", _params("good"))
def test_good_file_reads_with_every_event_accounted_for(entry: Entry):
    ref = reference_events(entry)
    try:
        got = read(entry.path, entry.spec.get("encoding"))
    except InputError as e:
        lines = overlapping_lines(ref)
        if "overlap" not in str(e) or not lines:
            raise
        _check_message(e, entry.path, sorted(lines))
        # Allowed by the overlap rule, but worth seeing: real fansub dialogue overlaps (crosstalk, \an8).
        warnings.warn(f"good file refused by the overlap rule: {str(e).splitlines()[0]}", UserWarning, 1)
        return
    for c in got.cues:
        assert c.source.startswith(str(entry.path)), c
    if "no_speech" in entry.spec:
        assert len(got.no_speech) == entry.spec["no_speech"], got.no_speech
    for c in got.cues:
        if c.index not in got.no_speech:
            assert c.text.strip(), f"{c.source}: a spoken cue has text"
    if entry.kind in ("ass", "ssa"):
        _agree_ass(entry, got, ref)
    else:
        if not entry.spec.get("compare_times", True):
            ref = [replace(r, start=None, end=None) for r in ref]
        _agree_in_order(entry, got, ref)


def _close(got: Cue, want: RefEvent) -> None:
    assert abs(got.start - want.start) <= TOL, (got, want)
    assert want.end - CLIP <= got.end <= want.end + TOL, (got, want)


def _agree_in_order(entry: Entry, got: Read, ref: list[RefEvent]) -> None:
    assert not got.skipped, f"nothing is skipped in {entry.kind.upper()}: {got.skipped}"
    assert len(got.cues) == len(ref), f"{len(got.cues)} cues, the reference has {len(ref)}"
    for c, r in zip(got.cues, ref, strict=True):
        line = source_line(c.source)
        if r.line is not None:
            assert line in (r.line, r.line - 1), f"{c.source}: expected line {r.line} (or the one above)"
        if r.start is not None:
            _close(c, r)
        if r.empty:
            assert c.index in got.no_speech, f"{c.source}: an empty cue is no_speech"
        assert "-->" not in c.text, f"{c.source}: a timing line was merged into the text"


def _agree_ass(entry: Entry, got: Read, ref: list[RefEvent]) -> None:
    by_line = {r.line: r for r in ref}
    comments = {r.line for r in ref if r.comment}
    seen: list[int] = []
    for c in got.cues:
        line = source_line(c.source)
        assert line in by_line and line not in comments, f"{c.source}: not a Dialogue event line"
        _close(c, by_line[line])
        seen.append(line)
    skipped_comments = set()
    for line, reason in got.skipped:
        assert line in by_line, f"skipped {reason!r} at {line}: not an event line"
        if line in comments:
            skipped_comments.add(line)
        else:
            seen.append(line)
    assert len(seen) == len(set(seen)), "an event is both a cue and skipped, or listed twice"
    missing = {r.line for r in ref if not r.comment} - set(seen)
    assert not missing, f"events neither read nor skipped: lines {sorted(missing)}"
    assert skipped_comments in (set(), comments), "Comment events are all skipped events or none is"


@pytest.mark.parametrize("entry", [p for p in _params("good") if p.values[0].spec.get("encoding")])
def test_legacy_file_without_its_encoding_is_refused_naming_the_file(entry: Entry):
    data = entry.path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        pytest.skip("these bytes are valid UTF-8 too")
    with pytest.raises(InputError) as info:
        read(entry.path)
    assert str(info.value).startswith(f"{entry.path}:")
