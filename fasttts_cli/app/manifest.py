"""The job manifest of `fasttts batch`: one `dub` job per row of a JSONL or CSV file.

A row's keys are dub's own flags by their long names with underscores (`script`, `voice`, `output_dir`,
...) plus an optional `id`. Each row becomes dub's own argv and is parsed by dub's own command (the
`DubParser` the CLI hands in), so every flag, default and check is dub's; the flags given to `batch` after
JOBS are the defaults each row may override. The whole manifest is checked before anything runs: unknown
keys, wrong types, bad values, duplicate ids and two rows writing the same output or work folder are
each a problem naming the row (number, id, file line) and the key; all of them together are one
ManifestError (exit 2). A job's own files (its script, its voices) are not looked at here: a missing one
fails that job alone, as a single `dub` would fail."""

from __future__ import annotations

import csv
import difflib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fasttts_cli.app.job import DubOptions, resolve_outputs, validate_options
from fasttts_cli.errors import FastTTSError, InputError, UsageError

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
SCRIPT = "script"
ID = "id"
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


@dataclass(frozen=True)
class Flag:
    """One of dub's parameters as a manifest key."""

    name: str  # the key: the parameter's name ("output_dir")
    opt: str  # its long option ("--output-dir"); "" for the positional script
    multiple: bool = False  # repeatable (--voice): a list in the manifest
    switch: bool = False  # an on/off flag without a value (--soft-subtitles)
    off: str | None = None  # the switch's "off" option, if it has one


class FieldProblem(Exception):
    """A row's value that dub's parser refused; `key` names the manifest key (None: not known)."""

    def __init__(self, key: str | None, message: str) -> None:
        super().__init__(message)
        self.key, self.message = key, message


class DubParser(Protocol):
    """dub's own flag parsing, as the CLI layer provides it."""

    flags: Mapping[str, Flag]

    def parse(self, argv: list[str]) -> dict[str, Any]:
        """Every dub parameter from a dub argv (FieldProblem on a refused value)."""
        ...

    def options(self, params: Mapping[str, Any]) -> DubOptions:
        """DubOptions from the parameters, as dub builds them (its own files are not checked)."""
        ...


@dataclass(frozen=True)
class Problem:
    row: int
    id: Any
    line: int
    key: str | None
    message: str

    def text(self, manifest: Path) -> str:
        where = f"{manifest}: row {self.row} (id {self.id}, line {self.line})"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"row": self.row, "id": self.id, "line": self.line, "key": self.key, "message": self.message}


class ManifestError(UsageError):
    """The manifest is invalid (exit 2); `problems` lists every problem found, not just the first."""

    def __init__(self, manifest: Path, problems: Sequence[Problem], hint: str | None = None) -> None:
        first = problems[0].text(manifest)
        more = f" (and {len(problems) - 1} more problem(s) in the manifest)" if len(problems) > 1 else ""
        super().__init__(first + more, hint=hint or "fix the manifest; nothing has run")
        self.problems = list(problems)
        self.manifest = manifest


@dataclass
class Row:
    number: int  # 1-based among the rows
    line: int  # where it starts in the file
    values: dict[str, Any]  # key -> value as written (None / empty cells left out)
    from_csv: bool = False
    broken: str | None = None  # why the row could not be read at all (it is a problem, not a stop)


@dataclass
class ManifestJob:
    """One validated row: its id and the DubOptions of its dub."""

    id: Any
    row: int
    line: int
    options: DubOptions
    media: Path = field(default=Path())
    work_dir: Path = field(default=Path())


# ---- reading -------------------------------------------------------------------------------------


def read_rows(path: Path) -> list[Row]:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(
            f"JOBS {path}: a manifest is a .jsonl or .csv file (got {path.suffix or 'no extension'})",
            hint="one job per line as a JSON object, or a CSV file with a header row of keys; dub flags go "
            "after JOBS (`fasttts batch jobs.jsonl --engine DIR`)",
        )
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(path, "no such manifest file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(path, f"cannot read the manifest: {getattr(e, 'strerror', None) or e}") from None
    rows = list(_jsonl_rows(path, text) if fmt == "jsonl" else _csv_rows(path, text))
    if not rows:
        raise InputError(path, "the manifest has no jobs")
    return rows


def _jsonl_rows(path: Path, text: str) -> Iterator[Row]:
    n = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        n += 1
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            yield Row(n, lineno, {}, broken=f"not valid JSON ({e.msg}, column {e.colno})")
            continue
        except RecursionError:  # json's C decoder gives up on thousands of nested brackets
            yield Row(n, lineno, {}, broken="not valid JSON (nested too deeply)")
            continue
        if not isinstance(obj, dict):
            yield Row(n, lineno, {}, broken=f"a job is a JSON object of keys, not {type(obj).__name__}")
            continue
        yield Row(n, lineno, {_key(k): v for k, v in obj.items() if v is not None})


def _csv_rows(path: Path, text: str) -> Iterator[Row]:
    reader = csv.reader(text.splitlines(keepends=True))
    header: list[str] | None = None
    n, prev = 0, 0
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            # csv's own limit (131,072 characters a cell) is kept: a manifest cell is a path or a flag
            # value, none of which is legitimately that long (PATH_MAX is 4,096), so a cell that long
            # is a broken file (an unclosed quote swallowing the rest, a pasted blob), not a job.
            what = f"row {n + 1}" if header is not None else "the header"
            raise InputError(path, f"{what}: not a valid CSV row ({e})", line=prev + 1) from None
        start, prev = prev + 1, reader.line_num
        if not any(c.strip() for c in cells):
            continue
        if header is None:
            header = [_key(c.strip()) for c in cells]
            dup = next((k for k in header if header.count(k) > 1), None)
            if dup is not None:
                raise InputError(path, f"the header names column {dup!r} twice", line=start)
            continue
        n += 1
        if len(cells) > len(header):
            yield Row(n, start, {}, True, f"{len(cells)} cells for {len(header)} columns in the header")
            continue
        values = {k: c.strip() for k, c in zip(header, cells, strict=False) if c.strip() and k}
        yield Row(n, start, values, from_csv=True)


def _key(k: Any) -> str:
    return str(k).strip().replace("-", "_")


# ---- one row -------------------------------------------------------------------------------------


def row_argv(row: Row, flags: Mapping[str, Flag]) -> list[str]:
    """The row as a dub command line (FieldProblem for a value of the wrong shape)."""
    argv: list[str] = []
    for key, value in row.values.items():
        if key in (SCRIPT, ID):
            continue
        f = flags[key]
        if f.switch:
            on = _as_bool(key, value)
            if on:
                argv.append(f.opt)
            elif f.off:
                argv.append(f.off)
        elif f.multiple:
            argv += [f"{f.opt}={item}" for item in _as_list(key, value, row.from_csv)]
        else:
            argv.append(f"{f.opt}={_as_scalar(key, value)}")
    return [*argv, "--", _as_scalar(SCRIPT, row.values[SCRIPT])]


def _as_bool(key: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
        return v.strip().lower() in _TRUE
    raise FieldProblem(key, f"expected true or false, got {json.dumps(v)}")


def _as_scalar(key: str, v: Any) -> str:
    if isinstance(v, bool | list | dict):
        raise FieldProblem(key, f"expected a single value, got {json.dumps(v)}")
    return str(v)


def _as_list(key: str, v: Any, from_csv: bool) -> list[str]:
    """A JSON list, or one value; a CSV cell is a JSON list or `;`-separated values."""
    if isinstance(v, str) and from_csv:
        s = v.strip()
        if s.startswith("["):
            try:
                v = json.loads(s)
            except json.JSONDecodeError as e:
                raise FieldProblem(key, f"not a valid JSON list ({e.msg})") from None
        else:
            return [p.strip() for p in s.split(";") if p.strip()]
    items = v if isinstance(v, list) else [v]
    return [_as_scalar(key, item) for item in items]


def _row_id(row: Row) -> Any:
    v = row.values.get(ID)
    if v is None:
        return row.number
    if isinstance(v, bool) or not isinstance(v, str | int) or (isinstance(v, str) and not v.strip()):
        raise FieldProblem(ID, f"expected a string or an integer, got {json.dumps(v)}")
    return v.strip() if isinstance(v, str) else v


def _key_of_message(message: str, flags: Mapping[str, Flag]) -> str | None:
    """The key a dub error message is about: the longest of dub's options it names."""
    named = [f for f in flags.values() if f.opt and f.opt in message]
    return max(named, key=lambda f: len(f.opt)).name if named else None


def row_hint(job: ManifestJob, e: FastTTSError) -> str:
    """A job's bad-input hint in a batch: which row (and key, when its message names a flag) to fix."""
    flag = re.match(r"(--[a-z][a-z0-9-]*)\b", e.message)
    key = f": fix its `{flag.group(1)[2:].replace('-', '_')}` key" if flag else ""
    where = f"job {job.id} is row {job.row} (line {job.line}) of the manifest{key}"
    return f"{e.hint}; {where}" if e.hint else where


# ---- the whole manifest --------------------------------------------------------------------------


def load_jobs(path: Path, parser: DubParser, default_argv: Sequence[str] = ()) -> list[ManifestJob]:
    """Every row validated and turned into its job's DubOptions; ManifestError listing every problem."""
    try:
        defaults = parser.parse([*default_argv, "--", "-"])
    except FieldProblem as e:
        raise UsageError(
            f"batch: {e.message}", hint="flags after JOBS are dub's flags: the jobs' defaults"
        ) from None
    rows = read_rows(path)
    known = dict(parser.flags)
    problems: list[Problem] = []
    jobs: list[ManifestJob] = []
    seen_ids: dict[str, int] = {}
    for row in rows:
        if row.broken is not None:
            problems.append(Problem(row.number, None, row.line, None, row.broken))
            continue
        try:
            rid = _row_id(row)
        except FieldProblem as e:
            problems.append(Problem(row.number, row.values.get(ID), row.line, e.key, e.message))
            continue
        bad = [Problem(row.number, rid, row.line, k, m) for k, m in _row_structure(row, known)]
        if str(rid) in seen_ids:
            first = seen_ids[str(rid)]
            bad.append(Problem(row.number, rid, row.line, ID, f"id {rid!r} is also row {first}'s"))
        seen_ids.setdefault(str(rid), row.number)
        job, more = _checked_job(row, rid, parser, defaults, skip_script=any(p.key == SCRIPT for p in bad))
        problems += bad + more
        if job is not None and not bad:
            jobs.append(job)
    problems += _collisions(jobs)
    if problems:
        problems.sort(key=lambda p: p.row)
        raise ManifestError(path, problems)
    return jobs


def _row_structure(row: Row, known: Mapping[str, Flag]) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = []
    for k in row.values:
        if k != ID and k not in known:
            near = difflib.get_close_matches(k, [*known, ID], n=1)
            also = f"; did you mean {near[0]!r}?" if near else ""
            out.append((k, f"unknown key (not a `fasttts dub` flag){also}"))
    script = row.values.get(SCRIPT)
    if script is None or (isinstance(script, str) and not script.strip()):
        out.append((SCRIPT, "missing: every job needs its script"))
    elif str(script).strip() == "-":
        out.append((SCRIPT, "a batch job cannot read its script from stdin"))
    return out


def _checked_job(
    row: Row, rid: Any, parser: DubParser, defaults: Mapping[str, Any], *, skip_script: bool
) -> tuple[ManifestJob | None, list[Problem]]:
    """The row's job, and every problem of its known keys: dub's parser stops at the first value it
    refuses, so a refused key is set aside and the rest parsed again until none is refused (unknown keys
    are left out here; they are problems of their own)."""
    known = parser.flags
    values = {k: v for k, v in row.values.items() if k in known or k == ID}
    if skip_script:
        values[SCRIPT] = "-"  # a placeholder so the other keys still get checked
    problems: list[Problem] = []
    while True:
        trial = Row(row.number, row.line, values, row.from_csv)
        try:
            return _row_job(trial, rid, parser, defaults), problems
        except FieldProblem as e:
            key, message = e.key, e.message
        except FastTTSError as e:
            if skip_script:  # with the placeholder script, dub's own checks may be about it
                return None, problems
            key, message = _key_of_message(e.message, known), e.message
        problems.append(Problem(row.number, rid, row.line, key, message))
        if key is None or key not in values or key == SCRIPT:
            return None, problems
        values = {k: v for k, v in values.items() if k != key}  # shrinks every round: this ends


def _row_job(row: Row, rid: Any, parser: DubParser, defaults: Mapping[str, Any]) -> ManifestJob:
    """The row's DubOptions: dub's parse of the row, with the command line's value for each key the row
    leaves out; then dub's own option checks and output paths."""
    try:
        parsed = parser.parse(row_argv(row, parser.flags))
    except FieldProblem as e:
        if e.key in row.values:
            raise FieldProblem(e.key, f"{e.message} (got {json.dumps(row.values[e.key])})") from None
        raise
    params = {k: (parsed[k] if k in row.values else defaults[k]) for k in parsed}
    o = parser.options(params)
    validate_options(o)
    paths = resolve_outputs(o)
    return ManifestJob(rid, row.number, row.line, o, paths.media.resolve(), paths.work_dir.resolve())


def _collisions(jobs: Sequence[ManifestJob]) -> list[Problem]:
    """Two jobs writing the same output file or sharing a work folder."""
    out: list[Problem] = []
    seen: dict[tuple[str, Path], ManifestJob] = {}
    for j in jobs:
        o = j.options
        for what, path, key in (
            ("writes", j.media, "output" if o.output is not None else "output_dir"),
            ("uses the work folder", j.work_dir, "work_dir" if o.work_dir is not None else "output_dir"),
        ):
            other = seen.setdefault((what, path), j)
            if other is not j:
                msg = f"{what} {path}, as row {other.row} (id {other.id}) does; give each job its own {key}"
                out.append(Problem(j.row, j.id, j.line, key, msg))
                break
    return out
