"""Where lines are planned: the seam between a run's driver (which owns the caches, the reports and the
order of things) and the engines that plan its lines (the GPT phase), in this process or in others.

The driver hands a pool batches of `LineTask`s; the pool plans each task with the runaway guard and its
retries (`synthesis.synth_with_guard`, the same code a single `dub` runs) and hands each `LineOutcome` back
to the driver's `on_final` the moment it is final; only the driver writes the content-addressed cache. A
task carries everything its outcome depends on (text, reference file, emotion, seed, language), so a line's
plan never depends on its batch-mates, its worker or its job.

`LocalPool` plans in this process on an engine the caller holds; pools of worker processes
(`fleet_procs.ProcessPool`) and Ray actors (`fleet_ray.RayPool`) implement the same `Pool` protocol
(see `open_pool`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fasttts_cli.synth.synthesizer import EmotionSpec, LinePlan, Synthesizer, Voice


@dataclass(frozen=True)
class EngineSpec:
    """How a worker loads its own engine (picklable: it travels to worker processes and Ray actors)."""

    engine: str | None  # the --engine value (None: $FASTTTS_ENGINE, then the default selection)
    preset: str | None
    device: str | None = None  # "cuda:1", "cpu"; None: the preset's default
    voices_dir: Path | None = None  # where prepared voice conditioning is cached on disk


@dataclass(frozen=True)
class LineTask:
    """One line to plan, self-contained. `key` is the driver's cache key for the line's plan."""

    key: str
    text: str
    voice: Path  # the reference audio file
    voice_name: str
    emotion: EmotionSpec
    seed: int
    lang: str | None = None
    label: str = ""  # for messages: "<script>: line N"


@dataclass
class LineOutcome:
    """A task's final outcome: its plan (None when it failed), the retries spent, the problem that remains
    (None: ok), the engine seconds over its attempts, and which worker planned it."""

    key: str
    plan: LinePlan | None
    retries: int
    problem: str | None
    seconds: float
    worker: str = "local"

    @property
    def ok(self) -> bool:
        return self.problem is None and self.plan is not None and self.plan.payload is not None


OnFinal = Callable[[LineOutcome], None]


class Pool(Protocol):
    """Engines that plan batches of tasks. `run` returns once every task's outcome was handed to
    `on_final` (in any order across batches; within a batch as its engine reports rows)."""

    workers: int

    def identity(self) -> str:
        """The engines' `Synthesizer.identity()` (every worker runs the same engine build and preset)."""
        ...

    def run(self, batches: Sequence[Sequence[LineTask]], max_retries: int, on_final: OnFinal) -> None: ...

    def close(self) -> None: ...


@dataclass
class _TaskLine:
    """What the guard reads of a plan line."""

    text: str
    source: str
    index: int


def needs_gpu(spec: EngineSpec) -> bool:
    """Whether the spec's engine runs on a GPU: its device says cuda, or a component of its preset runs on
    a CUDA backend (a preset that does not load is the engine load's to report)."""
    if spec.device is not None:
        return spec.device.startswith("cuda")
    if spec.preset is None:
        return False
    from fasttts_cli.errors import FastTTSError
    from fasttts_cli.spec import registry
    from fasttts_cli.spec.presets import load_preset

    try:
        preset = load_preset(spec.preset)
        return any(registry.get(c.backend).device == registry.CUDA for c in preset.components.values())
    except (FastTTSError, OSError, ValueError):
        return False


class VoiceMemo:
    """Each (reference, emotion) prepared once per engine, whatever job or batch asks for it."""

    def __init__(self, synth: Synthesizer) -> None:
        self.synth = synth
        self._voices: dict[tuple[Path, str, str], Voice] = {}

    def get(self, task: LineTask) -> Voice:
        k = (task.voice, task.voice_name, task.emotion.key())
        if k not in self._voices:
            self._voices[k] = self.synth.prepare_voice(task.voice, name=task.voice_name, emotion=task.emotion)
        return self._voices[k]


def plan_tasks(
    synth: Synthesizer,
    voices: VoiceMemo,
    tasks: Sequence[LineTask],
    max_retries: int,
    on_final: OnFinal,
    worker: str = "local",
) -> None:
    """Plan one batch on `synth` with the guard and retries; the worker side of every pool."""
    from fasttts_cli.app.job import LineState
    from fasttts_cli.app.synthesis import synth_with_guard

    states = {
        i: LineState(_TaskLine(t.text, t.label, i), voices.get(t), t.seed, t.key, t.lang)
        for i, t in enumerate(tasks)
    }

    def final(i: int, plan: LinePlan | None, retries: int, problem: str | None, secs: float) -> None:
        on_final(LineOutcome(tasks[i].key, plan, retries, problem, secs, worker))

    synth_with_guard(max_retries, synth, states, list(states), on_final=final)


class LocalPool:
    """Plans in this process on an engine the caller loaded (and closes)."""

    workers = 1

    def __init__(self, synth: Synthesizer, *, owned: bool = False) -> None:
        self.synth = synth
        self.voices = VoiceMemo(synth)
        self._owned = owned

    @classmethod
    def load(cls, spec: EngineSpec) -> LocalPool:
        """A pool on an engine of its own, loaded here from `spec` (closed with the pool)."""
        from fasttts_cli.app.engine_load import load_synthesizer
        from fasttts_cli.synth.engine_select import select_engine

        synth = load_synthesizer(select_engine(spec.engine), spec.preset, cache_dir=spec.voices_dir)
        return cls(synth, owned=True)

    def identity(self) -> str:
        return self.synth.identity()

    def run(self, batches: Sequence[Sequence[LineTask]], max_retries: int, on_final: OnFinal) -> None:
        for tasks in batches:
            plan_tasks(self.synth, self.voices, tasks, max_retries, on_final)

    def close(self) -> None:
        if self._owned:  # else the engine is the caller's
            self.synth.close()

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_pool(spec: EngineSpec, *, synth: Synthesizer | None = None, **how: Any) -> Pool:
    """A pool for `spec`. `how`: `ray=ADDRESS` (Ray actors, `fleet_ray`; `workers=N` actors, default one
    per GPU or CPU slot), else `devices=[...]` / `workers=N` over 1 (worker processes, `fleet_procs`),
    else this process: on `synth` when given (the caller's to close), or on an engine loaded from `spec`
    (the pool's to close)."""
    unknown = set(how) - {"workers", "devices", "ray"}
    if unknown:
        raise TypeError(f"open_pool: unknown options {sorted(unknown)}")
    workers, devices, ray = how.get("workers"), how.get("devices"), how.get("ray")
    if ray:
        from fasttts_cli.app.fleet_ray import RayPool

        return RayPool(spec, ray, workers, devices=devices)
    if devices or (workers is not None and workers != 1):
        from fasttts_cli.app.fleet_procs import ProcessPool

        return ProcessPool(spec, workers, devices=devices)
    if synth is not None:
        return LocalPool(synth)
    return LocalPool.load(spec)
