"""`fasttts batch`: many dub jobs in one process, on one warm engine per (engine, preset).

For each engine, in the manifest's order of first use: load it once, read and plan its jobs and plan
their cache misses together, in batches across jobs (batch_plan.py, through a fleet Pool); then run each
job as a single `dub` on the held engine (`run_dub(..., synthesizer=held)`), which finds its lines
planned and renders, assembles and reports exactly as a single dub does (outputs, work folder, report,
resume). A failed job does not stop the others unless `fail_fast`; a missing dependency (an engine that
cannot be loaded) or an interrupt ends the whole run, every finished line cached."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fasttts_cli.app.batch_plan import JobPlan, plan_one, run_prepass
from fasttts_cli.app.batch_progress import JobBars
from fasttts_cli.app.fleet import EngineSpec, LineOutcome, needs_gpu, open_pool
from fasttts_cli.app.manifest import ManifestJob, row_hint
from fasttts_cli.app.progress import Reporter
from fasttts_cli.errors import ExitCode, FastTTSError, MissingDependencyError
from fasttts_cli.synth.engine_select import select_engine
from fasttts_cli.synth.synthesizer import Synthesizer

OK, FAILED, NOT_RUN = "ok", "failed", "not_run"


@dataclass
class JobOutcome:
    id: Any
    row: int | None = None  # where the job is in the manifest (number among the rows, file line)
    line: int | None = None
    status: str = NOT_RUN
    exit_code: int | None = None
    error: str | None = None
    hint: str | None = None
    kind: str | None = None
    result: dict[str, Any] | None = None  # the job's `dub --json` object

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_json(self) -> dict[str, Any]:
        r = self.result or {}
        return {
            "id": self.id,
            "row": self.row,
            "line": self.line,
            "ok": self.ok,
            "status": self.status,
            "exit_code": self.exit_code,
            "error": self.error,
            "hint": self.hint,
            "kind": self.kind,
            "outputs": r.get("outputs", {}),
            "lines": r.get("lines", {}),
            "report": r.get("report"),
            "work_dir": r.get("work_dir"),
            "warnings": r.get("warnings", []),
        }


@dataclass
class BatchOptions:
    fail_fast: bool = False
    pool: dict[str, Any] = field(default_factory=dict)  # open_pool's workers= / devices= / ray=


@dataclass
class BatchResult:
    jobs: list[JobOutcome]
    stats: dict[str, Any]
    failure: FastTTSError | None = None  # the error that ended the whole run
    interrupted: str | None = None  # what was kept, when Ctrl-C ended it

    @property
    def exit_code(self) -> int:
        if self.interrupted is not None:
            return int(ExitCode.INTERRUPTED)
        if self.failure is not None:
            return int(self.failure.exit_code)
        return 0 if all(j.ok for j in self.jobs) else int(ExitCode.RUNTIME)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "ok": self.exit_code == 0,
            "command": "batch",
            "jobs": [j.to_json() for j in self.jobs],
            **self.stats,
        }
        if self.interrupted is not None:
            d.update(error=self.interrupted, hint=None, kind="interrupted", exit_code=self.exit_code)
        elif self.failure is not None:
            f = self.failure
            d.update(error=f.message, hint=f.hint, kind=type(f).__name__, exit_code=self.exit_code)
        return d


class _Stop(Exception):
    """The run ends here (fail-fast, a missing dependency); the outcomes so far stand."""


def _failed(out: JobOutcome, e: FastTTSError, kind: str | None = None) -> None:
    out.status, out.exit_code, out.error, out.hint = FAILED, int(e.exit_code), e.message, e.hint
    out.kind = kind or type(e).__name__


def as_error(e: Exception) -> tuple[FastTTSError, str]:
    """Any exception a job raised as the error (and the JSON `kind`) a single `dub` reports for it."""
    if isinstance(e, FastTTSError):
        return e, type(e).__name__
    if isinstance(e, OSError):
        from fasttts_cli.partials import os_error_message

        return FastTTSError(os_error_message(e)), "io"
    return FastTTSError(
        f"internal error: {type(e).__name__}: {e}", hint="run the job alone with `fasttts dub -v`"
    ), "internal"


def default_pool(spec: EngineSpec) -> dict[str, Any]:
    """What plans when no --workers/--devices/--ray is given: every visible GPU for a GPU preset (one
    engine per device; $CUDA_VISIBLE_DEVICES narrows what is visible), else the engine in this process."""
    if not needs_gpu(spec):
        return {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        n = len([d for d in visible.split(",") if d.strip()])
    else:
        from fasttts_cli.backends.gpu_stack import detect

        n = len(detect().gpus)
    return {"devices": [f"cuda:{i}" for i in range(n)]} if n > 1 else {}


def _engine_key(o: Any) -> tuple[str, str, str | None]:
    sel = select_engine(o.engine)
    return (sel.kind, str(sel.path), o.preset)


def run_batch(jobs: Sequence[ManifestJob], rep: Reporter, bo: BatchOptions) -> BatchResult:
    """Run every job (see the module's doc); the result holds each job's outcome in manifest order."""
    outcomes = [JobOutcome(j.id, j.row, j.line) for j in jobs]
    result = BatchResult(outcomes, {"engines": 0, "to_synthesize": 0, "batches": 0, "seconds": 0.0})
    t0 = time.monotonic()
    bars = JobBars(rep, [str(j.id) for j in jobs])
    runner = _Runner(jobs, outcomes, rep, bo, bars, result)
    # Jobs by engine, engines in order of first use; a job whose engine is not found is a group alone.
    groups: dict[tuple[str, str, str | None], list[int]] = {}
    for k, j in enumerate(jobs):
        try:
            key = _engine_key(j.options)
        except FastTTSError as e:
            runner.early[k], key = e, ("", f"#{k}", None)
        groups.setdefault(key, []).append(k)
    try:
        with bars:
            for idx in groups.values():
                runner.engine_group(idx)
    except _Stop:
        pass
    except KeyboardInterrupt:
        done = sum(1 for o in outcomes if o.ok)
        if runner.current >= 0 and outcomes[runner.current].status == NOT_RUN:
            o = outcomes[runner.current]
            o.status, o.exit_code, o.error, o.kind = (
                FAILED,
                int(ExitCode.INTERRUPTED),
                "interrupted",
                "interrupted",
            )
        result.interrupted = (
            f"interrupted: {done} of {len(jobs)} jobs finished; every finished line is cached in its job's "
            "work folder; run the same command again to resume"
        )
    finally:
        runner.close()
    for o in outcomes:
        if o.status == NOT_RUN and o.error is None:
            o.error = "not run: the batch stopped before this job"
    result.stats["seconds"] = round(time.monotonic() - t0, 3)
    return result


class _Runner:
    """One batch run's state: the engine it holds, the job now running, failures not yet reported."""

    def __init__(
        self,
        jobs: Sequence[ManifestJob],
        outcomes: list[JobOutcome],
        rep: Reporter,
        bo: BatchOptions,
        bars: JobBars,
        result: BatchResult,
    ) -> None:
        self.jobs, self.outcomes, self.rep, self.bo = jobs, outcomes, rep, bo
        self.bars, self.result = bars, result
        self.reps = [rep.child(str(j.id), job=j.id) for j in jobs]
        self.current = -1
        self.synth: Synthesizer | None = None
        self.planned: dict[int, frozenset[str]] = {}
        # A job that failed before its turn (reading, planning, its engine) is reported at its turn, so
        # --fail-fast still runs the jobs before it.
        self.early: dict[int, Exception] = {}

    def close(self) -> None:
        if self.synth is not None:
            self.synth.close()
            self.synth = None

    def report(self, k: int) -> None:
        o = self.outcomes[k]
        self.bars.job_done(str(o.id), o.ok, o.error)
        self.rep.event("job_done", job=o.id, ok=o.ok, exit_code=o.exit_code, error=o.error)

    def fail(self, k: int, e: Exception) -> None:
        """Job k failed with `e`; the run goes on unless --fail-fast, or `e` is a missing dependency."""
        err, kind = as_error(e)
        _failed(self.outcomes[k], err, kind)
        if err.exit_code == ExitCode.USAGE:  # the job's own input: say which row of the manifest to fix
            self.outcomes[k].hint = row_hint(self.jobs[k], err)
        self.report(k)
        if isinstance(err, MissingDependencyError):
            self.result.failure = err
            raise _Stop
        if self.bo.fail_fast:
            raise _Stop

    def engine_group(self, idx: list[int]) -> None:
        """Load the group's engine, plan its jobs together, run them one by one, close the engine."""
        from fasttts_cli.app.engine_load import load_synthesizer

        live = [k for k in idx if k not in self.early and not self.jobs[k].options.dry_run]
        if live:
            lead = self.jobs[live[0]]
            try:
                with self.rep.stage("load"):
                    sel = select_engine(lead.options.engine)
                    self.synth = load_synthesizer(
                        sel, lead.options.preset, cache_dir=lead.work_dir / "voices"
                    )
            except Exception as e:
                self.early.update(dict.fromkeys(live, e))
            else:
                self.result.stats["engines"] += 1
                # Workers load the same engine by its resolved folder, wherever they start.
                engine = str(sel.path.resolve()) if sel.path is not None else sel.kind
                voices = (lead.work_dir / "voices").resolve()
                self._prepass(live, EngineSpec(engine, lead.options.preset, voices_dir=voices))
        for k in idx:
            if k in self.early:
                self.fail(k, self.early.pop(k))
            elif self.outcomes[k].status == NOT_RUN:
                self._run_job(k)
        self.close()

    def _prepass(self, live: list[int], spec: EngineSpec) -> None:
        assert self.synth is not None
        plans: list[JobPlan] = []
        with self.rep.stage("plan"):
            for k in live:
                try:
                    jp = plan_one(k, self.jobs[k].options, self.reps[k], self.synth)
                except Exception as e:  # the job's own problem (its files, its values): it fails alone
                    self.early[k] = e
                    if self.bo.fail_fast:
                        break
                    continue
                if jp is not None:
                    plans.append(jp)
        if not any(jp.misses for jp in plans):
            return
        try:
            pool = open_pool(spec, synth=self.synth, **(self.bo.pool or default_pool(spec)))
        except FastTTSError as e:  # the pool that was asked for cannot start (no Ray, a dead address)
            self.result.failure = e
            raise _Stop from None
        for jp in plans:
            self.bars.set_total(str(self.jobs[jp.index].id), len(jp.misses))

        def line(jp: JobPlan, i: int, out: LineOutcome) -> None:
            self.bars.advance(str(self.jobs[jp.index].id))
            # A line that failed is planned again by its job, which reports it (and applies its policy).
            if out.ok and out.plan is not None:
                dur = out.plan.natural
                rtf = out.seconds / dur if dur else None
                jp.rep.line_done(i, cached=False, duration=dur, rtf=rtf, retries=out.retries)
                jp.rep.add_synthesis(out.seconds, dur)

        def locked(jp: JobPlan, e: FastTTSError) -> None:
            self.early[jp.index] = e

        try:
            with self.rep.stage("synthesize"):
                counts = run_prepass(plans, pool, self.synth, self.rep, line, locked)
            self.result.stats["to_synthesize"] += counts["to_synthesize"]
            self.result.stats["batches"] += counts["batches"]
        except MissingDependencyError as e:
            self.result.failure = e
            raise _Stop from None
        except FastTTSError as e:
            # Every line finished so far is cached; each job plans the rest itself and fails (or not)
            # on its own, as a single dub would.
            self.rep.warn(f"planning across jobs stopped ({e.message}); each job plans its remaining lines")
        finally:
            pool.close()
            self.planned.update({jp.index: frozenset(jp.planned) for jp in plans})

    def _run_job(self, k: int) -> None:
        from fasttts_cli.app.pipeline import run_dub

        j, out = self.jobs[k], self.outcomes[k]
        self.current = k
        self.rep.event("job_start", job=j.id, row=j.row)
        self.bars.job_running(str(j.id))
        synth = None if j.options.dry_run else self.synth
        try:
            res = run_dub(
                j.options, self.reps[k], synthesizer=synth, planned=self.planned.get(k, frozenset())
            )
        except Exception as e:  # one job's failure is its own (KeyboardInterrupt is not an Exception)
            self.fail(k, e)
            return
        out.status, out.exit_code, out.result = OK, 0, res.to_json()
        self.report(k)
