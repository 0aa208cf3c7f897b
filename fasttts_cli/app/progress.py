"""Progress for people (rich bars on stderr when it is a terminal) and for programs (JSON Lines).

Nothing here writes to stdout: stdout carries only the final JSON object of `--json`.

JSONL events, one object per line, each with "event" and "t" (seconds since start):
    start        {"command", "version"}
    plan         {"lines", "batches", "to_synthesize", "cached", "work_dir"}
    cache        {"to_synthesize", "cached"}  (the plan cache looked up)
    render       {"to_render", "cached"}  (the render cache looked up)
    stage        {"name", "status": "start"|"done", "seconds"}
    batch_start  {"batch", "lines"}
    batch_done   {"batch", "lines", "seconds", "audio_seconds", "rtf"}
    line_done    {"line", "cached", "duration", "rtf", "retries", "error"}  (as each line is final; a
                 cached line's right after `cache`, with cached true and rtf null)
    stage_progress {"stage", "done", "total", "unit"} (+ "pass" for loudness): a long stage moving; at
                 most one per STAGE_PROGRESS_INTERVAL per stage, plus the first and the last (done = total)
    build_component {"component", "index", "total", "seconds", "elapsed"}: one per component built
    warning      {"message"}
    done         {"ok": true, ...summary}
    error        {"ok": false, "error", "exit_code"}

`fasttts batch` adds `batch_plan` {"jobs", "to_synthesize", "batches", "workers"}, `job_start` {"job", "row"}
and `job_done` {"job", "ok", "exit_code", "error"}; every event of a job's own reporter (`child`) carries
"job"."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

LOG = logging.getLogger("fasttts")

QUIET, NORMAL, VERBOSE = 0, 1, 2
# Seconds between two stage_progress events of one stage: a 2-hour film's blocks and lines would otherwise
# write thousands of events; ten a second still looks live to a program drawing its own bar.
STAGE_PROGRESS_INTERVAL = 0.1


def setup_logging(verbosity: int) -> None:
    """Log to stderr only: warnings when quiet, info normally, debug with -v."""
    level = {QUIET: logging.ERROR, NORMAL: logging.INFO}.get(verbosity, logging.DEBUG)
    LOG.handlers.clear()
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("fasttts: %(message)s"))
    LOG.addHandler(h)
    LOG.setLevel(level)
    LOG.propagate = False


class Reporter:
    """Collects warnings and stage timings, emits JSONL events, drives the progress bars."""

    def __init__(
        self,
        *,
        verbosity: int = NORMAL,
        jsonl: str | None = None,
        bars: bool | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.verbosity = verbosity
        self.stderr = stderr or sys.stderr
        self.t0 = time.monotonic()
        self.warnings: list[str] = []
        self.timings: dict[str, float] = {}
        self._jsonl: TextIO | None = None
        self._own_jsonl = False
        if jsonl == "-":
            self._jsonl = self.stderr
        elif jsonl:
            # Line-buffered so a tail -f or a wrapper sees each event as it happens.
            self._jsonl = open(jsonl, "w", encoding="utf-8", buffering=1)  # noqa: SIM115
            self._own_jsonl = True
        if bars is None:
            bars = _isatty(self.stderr) and verbosity >= NORMAL and jsonl != "-"
        self.bars = bars
        # One live display at a time (rich allows no more): a stage's spinner, the synthesis bars or a
        # stage's bar; `_live_kind` says which.
        self._progress: Progress | None = None
        self._live_kind = ""
        self._tasks: dict[str, TaskID] = {}
        # stage -> (t, (done, total, extra)) of the last stage_progress event written
        self._last_sp: dict[str, tuple[float, tuple[float, float, tuple[Any, ...]]]] = {}
        self._audio_s = 0.0
        self._synth_s = 0.0
        self._context: dict[str, Any] = {}  # fields every event carries (a batch job's "job")
        self._parent: Reporter | None = None
        self._prefix = ""

    def child(self, prefix: str, **context: Any) -> Reporter:
        """A reporter for one part of a run (a job of `fasttts batch`): its own warnings and timings, the
        same event stream with `context` in every event, its messages prefixed and printed through this
        reporter (above its bars); it draws no bars of its own."""
        r = Reporter(verbosity=self.verbosity, bars=False, stderr=self.stderr)
        r.t0, r._jsonl, r._context, r._parent = self.t0, self._jsonl, context, self
        r._prefix = prefix
        return r

    @contextlib.contextmanager
    def showing(self, progress: Progress) -> Iterator[Progress]:
        """Draw a caller's own bars (`fasttts batch`'s job bars) as this reporter's live display."""
        self._start_live("custom", progress)
        try:
            yield progress
        finally:
            self._stop_live()

    # ---- events and messages ----

    def event(self, kind: str, **data: Any) -> None:
        if self._jsonl is None:
            return
        rec = {"event": kind, "t": round(time.monotonic() - self.t0, 3), **self._context, **data}
        self._jsonl.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
        self._jsonl.flush()

    def info(self, msg: str) -> None:
        if self.verbosity >= NORMAL:
            self._print(f"fasttts: {msg}")

    def debug(self, msg: str) -> None:
        if self.verbosity >= VERBOSE:
            self._print(f"fasttts: {msg}")

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)
        self.event("warning", message=msg)
        if self.verbosity >= NORMAL:
            self._print(f"fasttts: warning: {msg}")

    def _print(self, text: str) -> None:
        if self._parent is not None:
            self._parent._print(text.replace("fasttts: ", f"fasttts: [{self._prefix}] ", 1))
        elif self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stderr, flush=True)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage; the timing lands in the JSON result whether the stage succeeds or not."""
        self.event("stage", name=name, status="start")
        self.debug(f"{name}...")
        if self.bars and self._progress is None:
            self._start_live(f"spin:{name}", _spinner(self.stderr))
            assert self._progress is not None
            self._progress.add_task(name, total=None)
        t = time.monotonic()
        try:
            yield
        finally:
            dt = time.monotonic() - t
            if self._live_kind in (f"spin:{name}", f"stage:{name}"):
                self._stop_live()
            self.timings[name] = round(self.timings.get(name, 0.0) + dt, 3)
            self.event("stage", name=name, status="done", seconds=round(dt, 3))

    def stage_progress(self, stage: str, done: float, total: float, *, unit: str, **extra: Any) -> None:
        """A long stage moving (`done` of `total` `unit`s). Events are rate-limited per stage; the first,
        the last (done >= total) and any after STAGE_PROGRESS_INTERVAL get through."""
        now = time.monotonic()
        last = self._last_sp.get(stage)
        where = (done, total, tuple(sorted(extra.items())))
        final = done >= total
        # a new pass of the stage (loudness) or a new total starts over: its first event gets through
        restart = last is not None and (done < last[1][0] or where[1:] != last[1][1:])
        due = last is None or restart or now - last[0] >= STAGE_PROGRESS_INTERVAL
        if (final and (last is None or last[1] != where)) or (due and not final):
            self._last_sp[stage] = (now, where)
            self.event("stage_progress", stage=stage, done=_num(done), total=_num(total), unit=unit, **extra)
        if not self.bars:
            return
        if self._live_kind != f"stage:{stage}":
            self._start_live(f"stage:{stage}", _bar(self.stderr))
            assert self._progress is not None
            self._tasks["stage"] = self._progress.add_task(stage, total=total, rtf="")
        assert self._progress is not None
        label = stage if "pass" not in extra else f"{stage} {extra['pass']}"
        self._progress.update(self._tasks["stage"], completed=done, total=total, description=label)

    def build_component(self, component: str, index: int, total: int, seconds: float) -> None:
        """One component of `fasttts build` is written (index is 1-based)."""
        elapsed = time.monotonic() - self.t0
        self.event(
            "build_component",
            component=component,
            index=index,
            total=total,
            seconds=round(seconds, 3),
            elapsed=round(elapsed, 3),
        )
        if self.bars:
            if self._live_kind != "build":
                self._start_live("build", _bar(self.stderr))
                assert self._progress is not None
                self._tasks["build"] = self._progress.add_task("build", total=total, rtf="")
            assert self._progress is not None
            self._progress.update(self._tasks["build"], completed=index, rtf=component)
            if index >= total:
                self._stop_live()
        elif self.verbosity >= NORMAL:
            self._print(f"fasttts: [{index}/{total}] {component} ({seconds:.1f} s, {elapsed:.0f} s in all)")

    def _start_live(self, kind: str, progress: Progress) -> None:
        self._stop_live()
        self._progress, self._live_kind = progress, kind
        progress.start()

    def _stop_live(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        self._progress, self._live_kind = None, ""

    # ---- synthesis progress ----

    def add_synthesis(self, seconds: float, audio_seconds: float) -> None:
        """Synthesis done for this run elsewhere (`fasttts batch` plans a job's lines before the job
        runs): it counts in `synthesis_rtf` as the run's own batches do."""
        self._synth_s += seconds
        self._audio_s += audio_seconds

    def begin_synthesis(self, n_lines: int, n_batches: int) -> None:
        # One reporter per run: the totals (from __init__, and add_synthesis) are not reset here.
        if not self.bars or n_lines == 0:
            return
        self._start_live("synthesis", _bar(self.stderr))
        assert self._progress is not None
        self._tasks["lines"] = self._progress.add_task("lines", total=n_lines, rtf="")
        self._tasks["batches"] = self._progress.add_task("batches", total=n_batches, rtf="")

    def batch_start(self, batch: int, n_lines: int) -> None:
        self.event("batch_start", batch=batch, lines=n_lines)

    def batch_done(self, batch: int, n_lines: int, seconds: float, audio_seconds: float) -> None:
        self._synth_s += seconds
        self._audio_s += audio_seconds
        rtf = seconds / audio_seconds if audio_seconds > 0 else None
        self.event(
            "batch_done",
            batch=batch,
            lines=n_lines,
            seconds=round(seconds, 3),
            audio_seconds=round(audio_seconds, 3),
            rtf=None if rtf is None else round(rtf, 4),
        )
        if self._live_kind == "synthesis" and self._progress is not None:
            total_rtf = self._synth_s / self._audio_s if self._audio_s else 0.0
            self._progress.update(self._tasks["batches"], advance=1, rtf=f"RTF {total_rtf:.3f}")

    def line_done(
        self,
        line: int,
        *,
        cached: bool,
        duration: float | None,
        rtf: float | None,
        retries: int = 0,
        error: str | None = None,
    ) -> None:
        self.event(
            "line_done",
            line=line,
            cached=cached,
            duration=None if duration is None else round(duration, 3),
            rtf=None if rtf is None else round(rtf, 4),
            retries=retries,
            error=error,
        )
        if self._live_kind == "synthesis" and self._progress is not None and not cached:
            self._progress.update(self._tasks["lines"], advance=1)

    def end_synthesis(self) -> None:
        if self._live_kind == "synthesis":
            self._stop_live()

    @property
    def synthesis_rtf(self) -> float | None:
        """Synthesis seconds per second of audio over the run (lower is faster)."""
        return self._synth_s / self._audio_s if self._audio_s else None

    def close(self) -> None:
        self._stop_live()
        if self._own_jsonl and self._jsonl is not None:
            self._jsonl.close()
        self._jsonl = None


def counted(items: Iterable[Any], total: int, rep: Reporter, stage: str, unit: str) -> Iterator[Any]:
    """`items`, reporting `stage` progress as each one is consumed (a line placed on the timeline)."""
    if total == 0:
        rep.stage_progress(stage, 0, 0, unit=unit)
    for k, item in enumerate(items, 1):
        yield item
        rep.stage_progress(stage, k, total, unit=unit)


class PassProgress:
    """A block source (`channels`, `n`, `read`) that reports each pass a reader makes over it, in seconds
    of audio: the loudness normalizer reads the programme two or more times, and a pass starts when frame
    0 is read again."""

    def __init__(self, src: Any, sr: int, rep: Reporter, stage: str) -> None:
        self.src, self.sr, self.rep, self.stage = src, sr, rep, stage
        self.channels = src.channels
        self.passes = 0

    @property
    def n(self) -> int:
        return int(self.src.n)

    def read(self, start: int, stop: int) -> np.ndarray:
        if start == 0:
            self.passes += 1
        y = self.src.read(start, stop)
        total = round(self.n / self.sr, 3)
        self.rep.stage_progress(
            self.stage, round(stop / self.sr, 3), total, unit="seconds", **{"pass": self.passes}
        )
        return y


def _bar(stderr: TextIO) -> Progress:
    return Progress(
        TextColumn("{task.description:<8}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[rtf]}"),
        console=Console(file=stderr, stderr=True),
        transient=False,
    )


def _spinner(stderr: TextIO) -> Progress:
    # Transient: once the stage is over the line goes; the next stage's spinner or bar takes its place.
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(file=stderr, stderr=True),
        transient=True,
    )


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(float(x), 3)


def _isatty(f: TextIO) -> bool:
    try:
        return f.isatty()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return False
