"""`fasttts batch`'s progress for people: an overall bar of the lines planned across jobs (lines/s, ETA) and
one bar per job, drawn as the batch reporter's live display; without a terminal, one line per finished
job. Programs read the JSONL events instead (`job_start`, `job_done`, and every job's own events carrying
`"job"`)."""

from __future__ import annotations

import time
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

from fasttts_cli.app.progress import Reporter

ALL = "all jobs"


class JobBars:
    def __init__(self, rep: Reporter, ids: list[str]) -> None:
        self.rep, self.ids = rep, ids
        self.progress: Progress | None = None
        self.tasks: dict[str, TaskID] = {}
        self.done = 0
        self.total = 0
        self.finished = 0
        self.t0 = time.monotonic()
        self._ctx: Any = None

    def __enter__(self) -> JobBars:
        if self.rep.bars:
            self.progress = Progress(
                TextColumn("{task.description:<16}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[note]}"),
                console=Console(file=self.rep.stderr, stderr=True),
                transient=False,
            )
            self._ctx = self.rep.showing(self.progress)
            self._ctx.__enter__()
            self.tasks[ALL] = self.progress.add_task(ALL, total=None, note="")
            for i in self.ids:
                self.tasks[i] = self.progress.add_task(i, total=None, note="waiting")
        return self

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
            self.progress.update(self.tasks[job], note="rendering and assembling")

    def job_done(self, job: str, ok: bool, error: str | None) -> None:
        self.finished += 1
        what = "done" if ok else f"failed: {error}"
        if self.progress is not None:
            t = self.tasks[job]
            task = self.progress.tasks[self.ids.index(job) + 1]
            self.progress.update(t, total=task.total or 1, completed=task.total or 1, note=what)
        else:
            self.rep.info(f"job {job} ({self.finished}/{len(self.ids)}): {what}")
