"""`fasttts batch`'s progress for people: an overall bar of the lines planned across jobs (lines/s, ETA) and
one bar per job, drawn as the batch reporter's live display; without a terminal, one line per finished
job. Programs read the JSONL events instead (`job_start`, `job_done`, and every job's own events carrying
`"job"`).

The bars keep their counts at any width: a job's note (a failure's error can be a paragraph) is cut to
what the terminal has left after the fixed columns, never the other way round; the full error is in the
closing per-job lines and the JSON."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column

from fasttts_cli.app.progress import Reporter

ALL = "all jobs"
STATUSES = ("ok", "failed", "not_run")  # a job's status in the summary (app/batch.py's JobOutcome)
ID_WIDTH = 16  # a job id longer than this is cut in its bar's label (the JSON and the lines keep it whole)
BAR_WIDTH = 40  # the bar at most; it narrows first when the terminal is narrow
MIN_BAR = 10
MIN_NOTE = 24  # "rendering and assembling" whole when the terminal allows it


def tally(statuses: Iterable[str]) -> dict[str, int]:
    """How many jobs ended in each status (ok, failed, not_run)."""
    got = list(statuses)
    return {s: got.count(s) for s in STATUSES}


def summary_line(counts: dict[str, int]) -> str:
    """The closing line of a batch: "3 jobs: 2 ok, 1 failed" (", 1 not run" when any did not run)."""
    parts = [f"{counts['ok']} ok", f"{counts['failed']} failed"]
    if counts.get("not_run"):
        parts.append(f"{counts['not_run']} not run")
    n = sum(counts.values())
    return f"{n} job{'s' if n != 1 else ''}: {', '.join(parts)}"


def fit(text: str, width: int) -> str:
    """`text` on one line of at most `width` characters, an ellipsis marking a cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(width - 1, 0)] + "…"


class JobBars:
    def __init__(self, rep: Reporter, ids: list[str]) -> None:
        self.rep, self.ids = rep, ids
        self.progress: Progress | None = None
        self.tasks: dict[str, TaskID] = {}
        self.done = 0
        self.total = 0
        self.finished = 0
        self.id_width = ID_WIDTH
        self.bar_width = BAR_WIDTH
        self.t0 = time.monotonic()
        self._ctx: Any = None

    def __enter__(self) -> JobBars:
        if self.rep.bars:
            console = Console(file=self.rep.stderr, stderr=True)
            self.id_width = min(ID_WIDTH, max(len(i) for i in [ALL, *self.ids]))
            self.bar_width = max(MIN_BAR, min(BAR_WIDTH, console.width - self._fixed(0) - MIN_NOTE))
            self.progress = Progress(
                # fixed widths: only the note (the last column) gives way when the line is too long
                TextColumn("{task.description}", table_column=_fixed_col(self.id_width)),
                BarColumn(bar_width=self.bar_width),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[note]}", table_column=Column(overflow="ellipsis")),
                console=console,
                transient=False,
            )
            self._ctx = self.rep.showing(self.progress)
            self._ctx.__enter__()
            self.tasks[ALL] = self.progress.add_task(ALL, total=None, note="")
            for i in self.ids:
                self.tasks[i] = self.progress.add_task(fit(i, self.id_width), total=None, note="waiting")
        return self

    def _fixed(self, bar: int) -> int:
        """Columns taken by everything but the note: label, bar, count, elapsed, "ETA", remaining, and
        one space after each."""
        count = 2 * len(str(max(self.total, 1))) + 1
        return self.id_width + bar + count + len("0:00:00") + len("ETA") + len("-:--:--") + 6

    def _note(self, text: str) -> str:
        assert self.progress is not None
        return fit(text, max(self.progress.console.width - self._fixed(self.bar_width) - 1, 8))

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
            self._ctx = None

    def set_total(self, job: str, n: int) -> None:
        """Job `job` has `n` lines to plan in the pre-pass (the overall bar grows by as many)."""
        self.total += n
        if self.progress is not None:
            self.progress.update(self.tasks[job], total=n, completed=0, note="planning")
            self.progress.update(self.tasks[ALL], total=self.total)

    def advance(self, job: str) -> None:
        self.done += 1
        if self.progress is not None:
            rate = self.done / max(time.monotonic() - self.t0, 1e-6)
            self.progress.update(self.tasks[job], advance=1)
            self.progress.update(self.tasks[ALL], completed=self.done, note=f"{rate:.2f} lines/s")

    def job_running(self, job: str) -> None:
        if self.progress is not None:
            self.progress.update(self.tasks[job], note=self._note("rendering and assembling"))

    def job_done(self, job: str, ok: bool, error: str | None) -> None:
        self.finished += 1
        what = "done" if ok else f"failed: {error}"
        if self.progress is not None:
            t = self.tasks[job]
            task = self.progress.tasks[self.ids.index(job) + 1]
            note = self._note(what)
            self.progress.update(t, total=task.total or 1, completed=task.total or 1, note=note)
        else:
            self.rep.info(f"job {job} ({self.finished}/{len(self.ids)}): {what}")


def _fixed_col(width: int) -> Column:
    return Column(width=width, no_wrap=True, overflow="ellipsis")
