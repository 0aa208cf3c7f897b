"""A pool of worker processes behind the `Pool` protocol: one engine per process, loaded once.

Each worker is a spawned process (never forked: a forked copy of an engine's ONNX Runtime pools or of a
CUDA context is not safe) that loads its engine from the `EngineSpec`, then plans the batches the driver
sends it with `fleet.plan_tasks`, streaming each line's outcome back the moment it is final. The driver
(`ProcessPool.run`) keeps every worker busy with one batch, hands outcomes to `on_final` in its own
process, and when a worker dies re-runs only the lines of its batch that had not come back, on a fresh
worker; a line handed to `on_final` is never planned again.

CPU threads are split between workers ($FASTTTS_THREADS, OMP_NUM_THREADS: cores / workers) unless
$FASTTTS_THREADS is set. For `devices=["cuda:0", "cuda:1"]` each worker's CUDA_VISIBLE_DEVICES names its
GPU alone, set in the environment the worker's interpreter starts with, so before any CUDA import, and
each engine sees "its" GPU as cuda:0."""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from multiprocessing import connection, get_context
from typing import Any

from fasttts_cli.app.fleet import EngineSpec, LineOutcome, LineTask, OnFinal, VoiceMemo, plan_tasks
from fasttts_cli.backends.onnxruntime.session import THREADS_ENV, available_cpus
from fasttts_cli.errors import FastTTSError, UsageError

CUDA_ENV = "CUDA_VISIBLE_DEVICES"
# A batch whose worker died this many times is not tried again: its remaining lines fail (a line that
# crashes its engine every time must not take the run down with it, nor loop forever).
MAX_WORKER_DEATHS = 2
_ENV_LOCK = threading.Lock()  # os.environ is the spawned interpreter's environment while a worker starts


@dataclass(frozen=True)
class WorkerSetup:
    """What one worker process is given besides the spec: its name, its CPU threads, its GPU."""

    name: str
    threads: int
    cuda_visible: str | None = None  # the CUDA_VISIBLE_DEVICES value; None: inherited

    def env(self) -> dict[str, str]:
        env = {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        if not os.environ.get(THREADS_ENV):  # the user's own cap wins
            env[THREADS_ENV] = str(self.threads)
        if self.cuda_visible is not None:
            env[CUDA_ENV] = self.cuda_visible
        return env


def worker_setups(n: int | None, devices: Sequence[str] | None) -> list[WorkerSetup]:
    """One setup per worker: `devices` (one worker each, or `n` spread over them in turn), else `n` CPU
    workers. Threads: this process's CPUs split evenly, at least one each."""
    devs = list(devices or [])
    count = n if n is not None else max(1, len(devs))
    if count < 1:
        raise UsageError(f"--workers must be at least 1 (got {count})")
    threads = max(1, available_cpus() // count)
    return [
        WorkerSetup(f"proc{i}", threads, cuda_visible_for(devs[i % len(devs)]) if devs else None)
        for i in range(count)
    ]


def cuda_visible_for(device: str, inherited: str | None = None) -> str:
    """CUDA_VISIBLE_DEVICES for a worker on `device` ("cuda:1", "cuda", "cpu"), relative to the GPUs this
    process itself may see (an inherited CUDA_VISIBLE_DEVICES="2,3" makes cuda:1 the physical GPU 3)."""
    inherited = os.environ.get(CUDA_ENV) if inherited is None else inherited
    d = device.strip().lower()
    if d == "cpu":
        return ""  # no GPU at all
    kind, _, idx = d.partition(":")
    if kind != "cuda" or (idx and not idx.isdigit()):
        raise UsageError(f"--devices: {device!r} is not a device (cuda:N or cpu)")
    k = int(idx or 0)
    if inherited is None or inherited == "":
        return str(k)
    visible = [v.strip() for v in inherited.split(",") if v.strip()]
    if k >= len(visible):
        raise UsageError(
            f"--devices: {device} is not visible ({CUDA_ENV}={inherited} shows {len(visible)} GPU(s))"
        )
    return visible[k]


# ---- the worker side ------------------------------------------------------------------------------


def wire_error(e: BaseException) -> tuple[str, Any]:
    """An exception in a form that crosses a pipe: our errors by class, message and hint (their
    constructors take more than the message), others as themselves when they pickle, else as text."""
    if isinstance(e, FastTTSError):
        fields = {k: v for k, v in vars(e).items() if k not in ("message", "hint") and _pickles(v)}
        return "fasttts", (type(e), e.message, e.hint, fields)
    try:
        pickle.loads(pickle.dumps(e))
        return "pickled", e
    except Exception:
        return "text", f"{type(e).__name__}: {e}"


def _pickles(v: object) -> bool:
    try:
        pickle.dumps(v)
        return True
    except Exception:
        return False


def unwire_error(wire: tuple[str, Any], worker: str) -> BaseException:
    kind, body = wire
    if kind == "fasttts":
        cls, message, hint, fields = body
        err = cls.__new__(cls)
        Exception.__init__(err, message)
        err.message, err.hint = message, hint
        vars(err).update(fields)  # InputError's path and line
        return err
    if kind == "pickled":
        return body
    return FastTTSError(f"worker {worker}: {body}")


def _worker_main(spec: EngineSpec, setup: WorkerSetup, conn: connection.Connection) -> None:
    """A worker process: load the engine once, then plan batches until the driver says stop (None) or
    goes away. Ctrl-C is the driver's to handle: it closes the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.update(setup.env())
    from fasttts_cli.app.engine_load import load_synthesizer
    from fasttts_cli.synth.engine_select import select_engine

    try:
        synth = load_synthesizer(select_engine(spec.engine), spec.preset, cache_dir=spec.voices_dir)
    except BaseException as e:
        conn.send(("error", None, wire_error(e)))
        return
    try:
        seen = {k: os.environ.get(k) for k in (CUDA_ENV, THREADS_ENV)}
        conn.send(("ready", synth.identity(), os.getpid(), seen))
        voices = VoiceMemo(synth)
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return
            if msg is None:
                return
            bid, tasks, max_retries = msg

            def send(out: LineOutcome, bid: int = bid) -> None:
                conn.send(("out", bid, out))

            try:
                plan_tasks(synth, voices, tasks, max_retries, send, worker=setup.name)
            except Exception as e:
                conn.send(("error", bid, wire_error(e)))
                continue
            conn.send(("done", bid))
    finally:
        synth.close()


# ---- the driver side ------------------------------------------------------------------------------


@contextmanager
def _environ(extra: dict[str, str]) -> Iterator[None]:
    """os.environ with `extra` while a worker starts (a spawned interpreter inherits it)."""
    with _ENV_LOCK:
        before = dict(os.environ)
        os.environ.update(extra)
        try:
            yield
        finally:
            for k in set(extra) - set(before):
                del os.environ[k]
            os.environ.update({k: before[k] for k in extra if k in before})


@dataclass(eq=False)
class _Worker:
    setup: WorkerSetup
    process: Any
    conn: connection.Connection
    pid: int = 0
    identity: str = ""
    env: dict[str, str | None] = field(default_factory=dict)  # its CUDA_VISIBLE_DEVICES, FASTTTS_THREADS


@dataclass
class _Batch:
    bid: int
    left: list[LineTask]  # the lines whose outcome has not come back
    deaths: int = 0
    problems: list[str] = field(default_factory=list)


class ProcessPool:
    """N worker processes, each with its own engine (see the module's docstring)."""

    def __init__(self, spec: EngineSpec, n: int | None = None, devices: Sequence[str] | None = None) -> None:
        self.spec = spec
        self.setups = worker_setups(n, devices)
        self.workers = len(self.setups)
        self.restarts = 0  # workers started again after one died
        self._ctx = get_context("spawn")
        self._pool: list[_Worker] = []
        started: list[_Worker] = []
        try:
            for s in self.setups:  # all start, then all load, side by side
                started.append(self._start(s))
            for w in started:
                self._ready(w)
        except BaseException:
            self._pool = started
            self.close()
            raise
        self._pool = started
        ids = {w.identity for w in self._pool}
        if len(ids) != 1:
            self.close()
            raise FastTTSError(f"workers loaded different engines: {sorted(ids)}")

    # -- lifecycle

    def _start(self, setup: WorkerSetup) -> _Worker:
        ours, theirs = self._ctx.Pipe(duplex=True)
        p = self._ctx.Process(
            target=_worker_main, args=(self.spec, setup, theirs), name=f"fasttts-{setup.name}", daemon=True
        )
        with _environ(setup.env()):
            p.start()
        theirs.close()
        return _Worker(setup, p, ours)

    def _ready(self, w: _Worker) -> _Worker:
        """Wait for a started worker's engine; raise its load error (a missing engine: exit 3)."""
        try:
            msg = w.conn.recv()
        except EOFError:
            w.process.join(5)
            raise FastTTSError(
                f"worker {w.setup.name} exited (code {w.process.exitcode}) while loading its engine"
            ) from None
        if msg[0] == "error":
            w.process.join(5)
            raise unwire_error(msg[2], w.setup.name)
        _, w.identity, w.pid, w.env = msg
        return w

    def _replace(self, dead: _Worker) -> _Worker:
        self._stop(dead)
        fresh = self._ready(self._start(dead.setup))
        if fresh.identity != dead.identity:
            raise FastTTSError(f"worker {dead.setup.name} came back with another engine ({fresh.identity})")
        self._pool[self._pool.index(dead)] = fresh
        self.restarts += 1
        return fresh

    @staticmethod
    def _stop(w: _Worker) -> None:
        with suppress(OSError, ValueError):  # it may be gone already
            w.conn.send(None)
        w.process.join(10)
        if w.process.is_alive():
            w.process.kill()
            w.process.join(5)
        w.conn.close()

    def pids(self) -> dict[str, int]:
        """The worker processes' ids by worker name (for diagnostics and the crash tests)."""
        return {w.setup.name: w.pid for w in self._pool}

    def worker_env(self) -> dict[str, dict[str, str | None]]:
        """What each worker's engine runs with: its CUDA_VISIBLE_DEVICES and FASTTTS_THREADS, as the
        worker itself read them after loading."""
        return {w.setup.name: dict(w.env) for w in self._pool}

    def identity(self) -> str:
        return self._pool[0].identity

    def close(self) -> None:
        for w in self._pool:
            self._stop(w)
        self._pool = []

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- running

    def run(self, batches: Sequence[Sequence[LineTask]], max_retries: int, on_final: OnFinal) -> None:
        queue = deque(_Batch(i, list(b)) for i, b in enumerate(batches) if b)
        busy: dict[_Worker, _Batch] = {}
        try:
            self._run(queue, busy, max_retries, on_final)
        except BaseException:
            for w in busy:  # Ctrl-C or a driver error: what is in flight is abandoned, not waited for
                w.process.kill()
            raise

    def _run(
        self, queue: deque[_Batch], busy: dict[_Worker, _Batch], max_retries: int, on_final: OnFinal
    ) -> None:
        error: BaseException | None = None
        while queue or busy:
            if error is None:
                for w in [w for w in self._pool if w not in busy]:
                    if not queue:
                        break
                    b = queue.popleft()
                    if not w.process.is_alive():  # it died while idle: a fresh one takes the batch
                        w = self._replace(w)
                    try:
                        w.conn.send((b.bid, b.left, max_retries))
                    except OSError:  # it died just now
                        w = self._replace(w)
                        w.conn.send((b.bid, b.left, max_retries))
                    busy[w] = b
            if not busy:
                break
            waiting = {w.conn: w for w in busy} | {w.process.sentinel: w for w in busy}
            for ready in connection.wait(list(waiting)):
                w = waiting[ready]
                if w not in busy:
                    continue  # its pipe and its sentinel both fired
                try:
                    finished, failure = self._drain(w, busy[w], on_final)
                except (EOFError, OSError):
                    self._died(w, busy.pop(w), queue, on_final)
                    continue
                if failure is not None and error is None:
                    error = failure  # let the other workers finish their batches: no lost work
                if finished:
                    busy.pop(w)
                elif not w.process.is_alive() and not w.conn.poll():
                    self._died(w, busy.pop(w), queue, on_final)
        if error is not None:
            raise error

    @staticmethod
    def _drain(w: _Worker, b: _Batch, on_final: OnFinal) -> tuple[bool, BaseException | None]:
        """Read what a worker sent; (whether its batch is done, the error it ended with)."""
        while w.conn.poll():
            msg = w.conn.recv()
            if msg[0] == "out":
                out: LineOutcome = msg[2]
                k = next((i for i, t in enumerate(b.left) if t.key == out.key), None)
                if k is not None:
                    b.left.pop(k)
                    on_final(out)
            elif msg[0] == "done":
                return True, None
            elif msg[0] == "error":
                return True, unwire_error(msg[2], w.setup.name)
        return False, None

    def _died(self, w: _Worker, b: _Batch, queue: deque[_Batch], on_final: OnFinal) -> None:
        """A worker died planning `b`: a fresh worker takes its place, and the lines of `b` that did not
        come back run again first (or fail, once the batch has killed MAX_WORKER_DEATHS workers)."""
        w.process.join(5)
        b.deaths += 1
        b.problems.append(f"worker {w.setup.name} died (exit code {w.process.exitcode})")
        self._replace(w)
        if not b.left:
            return
        if b.deaths < MAX_WORKER_DEATHS:
            queue.appendleft(b)
            return
        problem = "; ".join(b.problems) + " while planning this line's batch"
        for t in b.left:
            on_final(LineOutcome(t.key, None, 0, problem, 0.0, w.setup.name))
        b.left = []
