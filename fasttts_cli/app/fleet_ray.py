"""Ray actors behind the `Pool` protocol: the same workers as `fleet_procs`, on a Ray cluster.

`--ray auto` attaches to a running cluster (RAY_ADDRESS, else the latest one `ray start` began on this
machine) and starts a local one when none runs; `--ray HOST:PORT` or `ray://HOST:PORT` attaches to that
one. Each actor loads its engine once (one GPU each, `num_gpus=1`, for a GPU preset: Ray sets the actor's
CUDA_VISIBLE_DEVICES, so its engine sees that GPU as cuda:0; else `num_cpus=k` slots). A batch is one
actor task whose outcomes come back through Ray's object store together; the driver hands them to
`on_final` as tasks complete (`ray.wait`). An actor that dies takes only its in-flight batch with it
(Ray restarts it and retries the task once; after that the driver re-runs the batch on a fresh actor):
a line handed to `on_final` is never planned again.

Every node needs fasttts installed and the engine at the same path (or the same name under engines/)."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fasttts_cli.app.fleet import EngineSpec, LineOutcome, LineTask, OnFinal, VoiceMemo, needs_gpu, plan_tasks
from fasttts_cli.app.fleet_procs import MAX_WORKER_DEATHS, unwire_error, wire_error
from fasttts_cli.backends.onnxruntime.session import THREADS_ENV
from fasttts_cli.errors import FastTTSError, MissingDependencyError, UsageError

RAY_HINT = "pip install 'fasttts-cli[ray]' (Ray 2.9 or newer)"
CPUS_PER_SLOT = 4  # a CPU actor's share when --workers is not given: one actor per 4 of the cluster's CPUs
RESOURCE_WAIT_S = 15.0  # how long a cluster may take to report its CPUs (and GPUs) after ray.init
# Ray's own recovery of a lost actor before the driver's: restart it (reloading its engine) and retry the
# task there once.
ACTOR_RESTARTS = 1
TASK_RETRIES = 1


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingDependencyError("--ray: the ray package is not installed", hint=RAY_HINT) from None
    return ray


def connect(ray: Any, address: str, **local: Any) -> bool:
    """Attach to the cluster at `address` ("auto": the running one, else start one here with `local`'s
    ray.init options). Returns whether this call connected (and so should disconnect at the end)."""
    if ray.is_initialized():
        return False
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING}  # fasttts's stderr stays its own
    hint = "start one with `ray start --head` (it prints its address), or use --ray auto"
    if address != "auto":
        problem = unreachable(address)
        if problem:  # ray.init would retry for minutes before giving up
            raise MissingDependencyError(
                f"--ray {address}: no Ray cluster answers there ({problem})", hint=hint
            )
    try:
        ray.init(address=address, **quiet)
        return True
    except ConnectionError as e:
        if address != "auto":
            raise MissingDependencyError(
                f"--ray {address}: no Ray cluster answers there ({e})", hint=hint
            ) from None
    ray.init(**{"include_dashboard": False, **quiet, **local})
    return True


def unreachable(address: str, timeout: float = 5.0) -> str | None:
    """Why nothing listens at a "[ray://]HOST:PORT" address (None: something does, or it names no port)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return None
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


class PlannerActor:
    """The actor's body (made a Ray actor class by `RayPool`): an engine loaded once, batches planned on
    it. Errors come back as values (`wire_error`): ours carry a hint and a path Ray's pickling loses."""

    def __init__(self, spec: EngineSpec, name: str, threads: int) -> None:
        self.name = name
        if not os.environ.get(THREADS_ENV):
            os.environ[THREADS_ENV] = str(threads)  # read when the engine opens its sessions
        from fasttts_cli.app.engine_load import load_synthesizer
        from fasttts_cli.synth.engine_select import select_engine

        self.error: tuple[str, Any] | None = None
        try:
            self.synth = load_synthesizer(select_engine(spec.engine), spec.preset, cache_dir=spec.voices_dir)
            self.voices = VoiceMemo(self.synth)
        except Exception as e:
            self.error = wire_error(e)

    def ready(self) -> tuple[str, Any]:
        if self.error is not None:
            return "error", self.error
        return "ready", (self.synth.identity(), os.getpid())

    def plan(self, tasks: list[LineTask], max_retries: int) -> tuple[str, Any]:
        if self.error is not None:  # restarted by Ray, and its engine did not load this time
            return "error", (self.error, [])
        outs: list[LineOutcome] = []
        try:
            plan_tasks(self.synth, self.voices, tasks, max_retries, outs.append, worker=self.name)
        except Exception as e:
            return "error", (wire_error(e), outs)
        return "done", outs


@dataclass(eq=False)
class _Actor:
    name: str
    handle: Any
    pid: int = 0
    identity: str = ""


@dataclass
class _Batch:
    bid: int
    tasks: list[LineTask]
    deaths: int = 0


def wait_for_resources(ray: Any, timeout: float = RESOURCE_WAIT_S, poll: float = 0.2) -> dict[str, Any]:
    """The cluster's resource table once it reports CPUs. Right after ray.init a loaded machine's table
    may come back without its CPU entry (the node not registered yet; a node registers its GPUs with its
    CPUs): wait for it, a bounded time; what the table holds then is what actor_shares judges."""
    deadline = time.monotonic() + timeout
    while True:
        resources = dict(ray.cluster_resources())
        if resources.get("CPU", 0) > 0 or time.monotonic() >= deadline:
            return resources
        time.sleep(poll)


def actor_shares(resources: dict[str, Any], gpu: bool, n: int | None) -> tuple[int, float]:
    """(actors, CPUs reserved by each): one per GPU for a GPU pool; else `n` (--workers), by default one per
    CPUS_PER_SLOT CPUs, and at least one: a cluster smaller than a slot still plans on one actor. More
    actors than CPUs get fractional shares, so every one of them is scheduled (none waits forever)."""
    cpu = float(resources.get("CPU", 0) or 0)
    if gpu:
        n = n or int(resources.get("GPU", 0) or 0)
        if n < 1:
            raise UsageError(
                f"--ray: the cluster reports no GPU for a GPU preset (resources: {resources})",
                hint="give the cluster GPUs (`ray start --num-gpus N`), or use a CPU preset",
            )
        return n, 1.0
    if cpu <= 0:
        raise UsageError(
            f"--ray: the cluster reports no CPU after {RESOURCE_WAIT_S:g} s (resources: {resources})",
            hint="check the cluster with `ray status`, or plan without Ray: --workers 1",
        )
    n = n or max(1, int(cpu // CPUS_PER_SLOT))
    share = float(cpu // n) if cpu >= n else round(cpu / n, 4)
    return n, share


class RayPool:
    """`n` planner actors on a Ray cluster (see the module's docstring)."""

    def __init__(
        self,
        spec: EngineSpec,
        address: str = "auto",
        n: int | None = None,
        *,
        devices: Sequence[str] | None = None,
        local: dict[str, Any] | None = None,
    ) -> None:
        self.ray = ray = import_ray()
        self.spec = spec
        self._actors: list[_Actor] = []
        self._starting: dict[Any, _Actor] = {}  # answer to `ready` -> a fresh actor loading its engine
        self.restarts = 0  # actors started again after one was lost
        self._identity = ""
        self._owns_ray = connect(ray, address, **(local or {}))
        self.gpu = bool(devices) or needs_gpu(spec)
        try:
            resources = wait_for_resources(ray)
            n, cpus = actor_shares(resources, self.gpu, n if n is not None else len(devices or ()) or None)
        except FastTTSError:
            self.close()
            raise
        self.workers = n
        self.threads = 1 if self.gpu else max(1, int(cpus))
        opts: dict[str, Any] = {"max_restarts": ACTOR_RESTARTS, "max_task_retries": TASK_RETRIES}
        opts |= {"num_gpus": 1, "num_cpus": 1} if self.gpu else {"num_cpus": cpus}
        self._cls = ray.remote(**opts)(PlannerActor)
        x = ray.exceptions  # what a batch in flight is lost to (its actor, its node, or its result)
        self._lost_errors = (
            x.RayActorError,
            x.WorkerCrashedError,
            x.NodeDiedError,
            x.ObjectLostError,
            x.OutOfMemoryError,
        )
        try:
            started = [self._start(f"ray{i}") for i in range(n)]
            self._actors = started
            for a in started:
                self._ready(a)
        except BaseException:
            self.close()
            raise

    # -- lifecycle

    def _start(self, name: str) -> _Actor:
        return _Actor(name, self._cls.remote(self.spec, name, self.threads))

    def _ready(self, a: _Actor, answer: Any = None) -> None:
        """Wait for an actor's engine (or take its `answer` to `ready`); raise its load error (a missing
        engine: exit 3)."""
        try:
            kind, body = self.ray.get(answer if answer is not None else a.handle.ready.remote())
        except self.ray.exceptions.RayActorError as e:
            raise FastTTSError(f"Ray actor {a.name} died while loading its engine ({e})") from None
        if kind == "error":
            raise unwire_error(body, a.name)
        a.identity, a.pid = body
        self._identity = self._identity or a.identity
        if a.identity != self._identity:
            raise FastTTSError(f"Ray actor {a.name} loaded another engine ({a.identity})")

    def _replace(self, dead: _Actor) -> None:
        """A fresh actor for a lost one. It joins the pool once its engine is loaded (`run` waits for it
        with the batches), so the others go on meanwhile, and a fresh actor the cluster has no room for
        (its node is gone) holds nothing up while others remain."""
        self.ray.kill(dead.handle, no_restart=True)
        self._actors.remove(dead)
        fresh = self._start(dead.name)
        self._starting[fresh.handle.ready.remote()] = fresh
        self.restarts += 1

    def handles(self) -> dict[str, Any]:
        """The actors' handles by worker name (for diagnostics and the crash tests)."""
        return {a.name: a.handle for a in self._actors}

    def identity(self) -> str:
        return self._identity

    def close(self) -> None:
        for a in [*self._actors, *self._starting.values()]:
            try:
                self.ray.kill(a.handle, no_restart=True)
            except Exception:  # already gone with its cluster
                continue
        self._actors, self._starting = [], {}
        if self._owns_ray and self.ray.is_initialized():
            self.ray.shutdown()
        self._owns_ray = False

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- running

    def run(self, batches: Sequence[Sequence[LineTask]], max_retries: int, on_final: OnFinal) -> None:
        ray = self.ray
        queue = deque(_Batch(i, list(b)) for i, b in enumerate(batches) if b)
        flying: dict[Any, tuple[_Actor, _Batch]] = {}  # object ref -> its actor and batch
        error: BaseException | None = None
        while flying or (queue and error is None):
            if error is None:
                idle = [a for a in self._actors if a not in {x for x, _ in flying.values()}]
                while idle and queue:
                    a, b = idle.pop(0), queue.popleft()
                    flying[a.handle.plan.remote(b.tasks, max_retries)] = (a, b)
            if not flying and not self._starting:
                raise FastTTSError("no Ray actor is left to plan the remaining lines")
            [ref], _ = ray.wait([*flying, *self._starting], num_returns=1)
            if ref in self._starting:
                fresh = self._starting.pop(ref)
                self._ready(fresh, ref)
                self._actors.append(fresh)
                continue
            a, b = flying.pop(ref)
            try:
                kind, body = ray.get(ref)
            except self._lost_errors as e:
                self._lost(a, b, queue, on_final, e)
                continue
            if kind == "error":
                wire, outs = body
                for out in outs:
                    on_final(out)
                error = error or unwire_error(wire, a.name)  # the other batches in flight finish first
                continue
            for out in body:
                on_final(out)
        if error is not None:
            raise error

    def _lost(self, a: _Actor, b: _Batch, queue: deque[_Batch], on_final: OnFinal, e: BaseException) -> None:
        """An actor was lost with `b` in flight: a fresh one takes its place and `b` runs again first (or
        its lines fail, once it has lost MAX_WORKER_DEATHS actors)."""
        b.deaths += 1
        self._replace(a)
        if b.deaths < MAX_WORKER_DEATHS:
            queue.appendleft(b)
            return
        why = type(e).__name__
        problem = f"Ray actor {a.name} was lost {b.deaths} times planning this line's batch ({why})"
        for t in b.tasks:
            on_final(LineOutcome(t.key, None, 0, problem, 0.0, a.name))
