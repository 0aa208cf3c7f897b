"""The planning seam (app/fleet.py): a pool plans self-contained tasks with the guard, and a task's plan
does not depend on its batch-mates."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fasttts_cli.app.fleet import EngineSpec, LineOutcome, LineTask, OnFinal, Pool, open_pool
from fasttts_cli.app.fleet_procs import ProcessPool, cuda_visible_for, worker_setups
from fasttts_cli.backends.onnxruntime.session import available_cpus
from fasttts_cli.dubbing.cache import line_seed
from fasttts_cli.errors import InputError, MissingDependencyError, UsageError
from fasttts_cli.synth.synthesizer import EmotionSpec
from tests.conftest_engine import *  # noqa: F403 (fixtures: tiny_engine_dir, voice_wav, voice_wav2)


def _task(text: str, voice: Path, key: str) -> LineTask:
    return LineTask(key, text, voice, voice.stem, EmotionSpec(), line_seed(text, voice.stem, 0), None, key)


def test_local_pool_plans_each_task_independently_of_its_batch(
    tiny_engine_dir: Path, voice_wav: Path, voice_wav2: Path
) -> None:
    from fasttts_cli.indextts2.synthesizer import IndexTTS2Synthesizer

    synth = IndexTTS2Synthesizer.load(tiny_engine_dir, "cpu-fp32")
    try:
        pool = open_pool(EngineSpec(str(tiny_engine_dir), "cpu-fp32"), synth=synth)
        a = _task("Hello there, how are you?", voice_wav, "a")
        b = _task("A second line, said by someone else.", voice_wav2, "b")
        c = _task("And a third.", voice_wav, "c")
        together: dict[str, LineOutcome] = {}
        pool.run([[a, b], [c]], 1, lambda out: together.setdefault(out.key, out))
        alone: dict[str, LineOutcome] = {}
        pool.run([[b]], 1, lambda out: alone.setdefault(out.key, out))
        assert sorted(together) == ["a", "b", "c"]
        assert all(o.ok and o.worker == "local" for o in together.values())
        assert pool.identity() == synth.identity()
        pb, pa = together["b"].plan, alone["b"].plan
        assert pb is not None and pa is not None and pb.payload is not None and pa.payload is not None
        assert np.array_equal(pb.payload, pa.payload)  # codes: the same whoever shares the batch
        pool.close()
    finally:
        synth.close()


# ---- worker processes (app/fleet_procs.py) ---------------------------------------------------------

_TEXTS = [
    "Hello there, how are you?",
    "A second line, said by someone else.",
    "And a third.",
    "Four is a short one.",
    "Five comes with a little more to say than four did.",
    "Six.",
]


def _tasks(voice: Path, voice2: Path) -> list[LineTask]:
    return [_task(t, voice if i % 2 == 0 else voice2, f"k{i}") for i, t in enumerate(_TEXTS)]


def _codes(outcomes: dict[str, LineOutcome]) -> dict[str, list[int]]:
    got = {}
    for k, o in outcomes.items():
        assert o.ok, (k, o.problem)
        assert o.plan is not None and o.plan.payload is not None
        got[k] = o.plan.payload.tolist()
    return got


def _collect(
    pool: Pool, batches: list[list[LineTask]], seen: list[str], hook: OnFinal | None = None
) -> dict[str, LineOutcome]:
    outs: dict[str, LineOutcome] = {}

    def final(out: LineOutcome) -> None:
        seen.append(out.key)
        outs[out.key] = out
        if hook is not None:
            hook(out)

    pool.run(batches, 1, final)
    return outs


@pytest.fixture(scope="module")
def local_run(tiny_engine_dir: Path, voice_wav: Path, voice_wav2: Path) -> tuple[dict[str, list[int]], str]:
    """The tasks' codes and the engine identity, planned in this process (an engine of the pool's own)."""
    pool = open_pool(EngineSpec(str(tiny_engine_dir), "cpu-fp32"))
    try:
        return _codes(_collect(pool, [_tasks(voice_wav, voice_wav2)], [])), pool.identity()
    finally:
        pool.close()


def test_process_pool_plans_what_the_local_pool_plans(
    tiny_engine_dir: Path, voice_wav: Path, voice_wav2: Path, local_run: tuple[dict[str, list[int]], str]
) -> None:
    tasks = _tasks(voice_wav, voice_wav2)
    seen: list[str] = []
    with open_pool(EngineSpec(str(tiny_engine_dir), "cpu-fp32"), workers=2) as pool:
        assert isinstance(pool, ProcessPool) and pool.workers == 2
        outs = _collect(pool, [tasks[:2], tasks[2:4], tasks[4:]], seen)
        assert pool.identity() == local_run[1]
        workers = {o.worker for o in outs.values()}
        pids = pool.pids()
        threads = {e["FASTTTS_THREADS"] for e in pool.worker_env().values()}
        assert threads == {os.environ.get("FASTTTS_THREADS") or str(max(1, available_cpus() // 2))}
    assert sorted(seen) == sorted(t.key for t in tasks)  # each once
    assert _codes(outs) == local_run[0]
    assert workers <= {"proc0", "proc1"}
    assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()


def test_process_pool_survives_a_killed_worker(
    tiny_engine_dir: Path, voice_wav: Path, voice_wav2: Path, local_run: tuple[dict[str, list[int]], str]
) -> None:
    tasks = _tasks(voice_wav, voice_wav2)
    seen: list[str] = []
    killed: list[int] = []
    with ProcessPool(EngineSpec(str(tiny_engine_dir), "cpu-fp32"), 2) as pool:

        def kill_its_worker(out: LineOutcome) -> None:
            if not killed:  # the worker of the first line dies with batches still to come its way
                killed.append(pool.pids()[out.worker])
                os.kill(killed[0], signal.SIGKILL)

        outs = _collect(pool, [[t] for t in tasks], seen, kill_its_worker)
        assert pool.restarts == 1 and killed[0] not in pool.pids().values()
    assert sorted(seen) == sorted(t.key for t in tasks)  # every line, none handed over twice
    assert _codes(outs) == local_run[0]


def test_each_device_worker_sees_its_own_gpu_alone(
    tiny_engine_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device split, checked with CPU engines (no GPU here): what each worker's process saw."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    with ProcessPool(EngineSpec(str(tiny_engine_dir), "cpu-fp32"), devices=["cuda:1", "cuda:0"]) as pool:
        seen = {k: e["CUDA_VISIBLE_DEVICES"] for k, e in pool.worker_env().items()}
    assert seen == {"proc0": "7", "proc1": "5"}
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5,7"  # the driver's own is as it was


def test_a_batch_that_raises_in_its_worker_raises_the_same_error_here(
    tiny_engine_dir: Path, voice_wav: Path, voice_wav2: Path, tmp_path: Path
) -> None:
    tasks = _tasks(voice_wav, voice_wav2)
    missing = _task("No voice file behind this one.", tmp_path / "missing.wav", "bad")
    with ProcessPool(EngineSpec(str(tiny_engine_dir), "cpu-fp32"), 1) as pool:
        seen: list[str] = []
        with pytest.raises(InputError, match=r"missing\.wav: no such file") as e:
            _collect(pool, [tasks[:2], [missing], tasks[2:]], seen)
        assert e.value.exit_code == 2 and e.value.path == tmp_path / "missing.wav"  # its class and fields
        assert seen == ["k0", "k1"]  # what came back before stays handed over; nothing after is sent
        again: list[str] = []
        _collect(pool, [tasks[2:]], again)  # the worker goes on
        assert sorted(again) == [t.key for t in tasks[2:]] and pool.restarts == 0


def test_a_worker_that_cannot_load_its_engine_is_the_missing_engine_error(tmp_path: Path) -> None:
    with pytest.raises(MissingDependencyError, match="not an engine folder"):
        ProcessPool(EngineSpec(str(tmp_path / "nowhere"), "cpu-fp32"), 1)


def test_worker_setups_split_threads_and_give_each_worker_its_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("FASTTTS_THREADS", raising=False)
    setups = worker_setups(None, ["cuda:0", "cuda:1"])
    assert [s.cuda_visible for s in setups] == ["0", "1"]
    assert setups[1].env()["CUDA_VISIBLE_DEVICES"] == "1"
    assert setups[0].env()["FASTTTS_THREADS"] == str(max(1, available_cpus() // 2))
    assert cuda_visible_for("cuda:1", "4,6") == "6"  # relative to what this process may see
    assert cuda_visible_for("cpu") == ""
    with pytest.raises(UsageError, match="cuda:2 is not visible"):
        cuda_visible_for("cuda:2", "4,6")
    with pytest.raises(UsageError, match="not a device"):
        cuda_visible_for("gpu1")
    monkeypatch.setenv("FASTTTS_THREADS", "3")
    assert "FASTTTS_THREADS" not in worker_setups(4, None)[0].env()  # the user's cap is theirs


def test_importing_the_worker_module_imports_no_gpu_library() -> None:
    """A worker's CUDA_VISIBLE_DEVICES only holds if nothing imported before it touched CUDA."""
    code = (
        "import sys, fasttts_cli.app.fleet_procs; "
        "bad = [m for m in ('torch', 'tensorrt', 'onnxruntime', 'cuda') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


# ---- Ray actors (app/fleet_ray.py) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster() -> object:
    """A local Ray cluster of its own (address "local": never another one running on this machine)."""
    ray = pytest.importorskip("ray", reason="ray (the `ray` extra, in `test`) is not installed")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_pool_plans_what_the_local_pool_plans_and_survives_a_lost_actor(
    ray_cluster: object,
    tiny_engine_dir: Path,
    voice_wav: Path,
    voice_wav2: Path,
    local_run: tuple[dict[str, list[int]], str],
) -> None:
    from fasttts_cli.app.fleet_ray import RayPool

    tasks = _tasks(voice_wav, voice_wav2)
    with open_pool(EngineSpec(str(tiny_engine_dir), "cpu-fp32"), ray="auto", workers=2) as pool:
        assert isinstance(pool, RayPool) and pool.workers == 2 and not pool.gpu
        assert pool.identity() == local_run[1]
        seen: list[str] = []
        outs = _collect(pool, [tasks[:3], tasks[3:]], seen)
        assert sorted(seen) == sorted(t.key for t in tasks)
        assert _codes(outs) == local_run[0]
        assert {o.worker for o in outs.values()} <= {"ray0", "ray1"}

        seen = []
        killed: list[str] = []

        def kill_the_other_actor(out: LineOutcome) -> None:
            if not killed:  # the other actor has a batch in flight (six batches for two actors)
                killed.append(next(n for n in pool.handles() if n != out.worker))
                ray_cluster.kill(pool.handles()[killed[0]], no_restart=True)  # type: ignore[attr-defined]

        outs = _collect(pool, [[t] for t in tasks], seen, kill_the_other_actor)
        assert pool.restarts == 1
    assert sorted(seen) == sorted(t.key for t in tasks)  # every line, none handed over twice
    assert _codes(outs) == local_run[0]


def test_ray_missing_is_a_missing_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from fasttts_cli.app.fleet_ray import import_ray

    real = builtins.__import__

    def no_ray(name: str, *a: object, **k: object) -> object:
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(MissingDependencyError, match="ray package is not installed") as e:
        import_ray()
    assert e.value.exit_code == 3 and "fasttts-cli[ray]" in str(e.value)


class _RayInit:
    """Records ray.init calls; "auto" finds no cluster, as Ray's own raises when none runs."""

    def __init__(self, running: bool = False) -> None:
        self.calls: list[dict[str, object]] = []
        self.running = running

    def is_initialized(self) -> bool:
        return self.running

    def init(self, **kw: object) -> None:
        self.calls.append(kw)
        if kw.get("address") == "auto":
            raise ConnectionError("Could not find any running Ray instance.")
        self.running = True


def test_ray_auto_attaches_or_starts_a_local_cluster_and_a_dead_address_is_exit_3() -> None:
    import socket

    from fasttts_cli.app.fleet_ray import connect

    fake = _RayInit()
    assert connect(fake, "auto", num_cpus=2) is True  # none runs: a local one, for this run
    assert [c.get("address") for c in fake.calls] == ["auto", None]
    assert fake.calls[1]["num_cpus"] == 2 and fake.calls[1]["include_dashboard"] is False
    assert connect(fake, "auto") is False  # already connected: not ours to shut down

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fake = _RayInit()
    with pytest.raises(MissingDependencyError, match=f"--ray 127.0.0.1:{port}: no Ray cluster answers") as e:
        connect(fake, f"127.0.0.1:{port}")
    assert e.value.exit_code == 3 and "ray start --head" in str(e.value) and fake.calls == []


def test_a_batch_that_keeps_killing_its_worker_fails_its_lines_not_the_run(
    tiny_engine_dir: Path, voice_wav: Path, voice_wav2: Path
) -> None:
    from collections import deque

    from fasttts_cli.app.fleet_procs import MAX_WORKER_DEATHS, _Batch

    tasks = _tasks(voice_wav, voice_wav2)
    with ProcessPool(EngineSpec(str(tiny_engine_dir), "cpu-fp32"), 1) as pool:
        for deaths, requeued in ((0, True), (MAX_WORKER_DEATHS - 1, False)):
            w = pool._pool[0]
            os.kill(w.pid, signal.SIGKILL)
            w.process.join(30)
            queue: deque[_Batch] = deque()
            got: list[LineOutcome] = []
            pool._died(w, _Batch(0, tasks[:2], deaths), queue, got.append)
            if requeued:  # it runs again, first
                assert [t.key for t in queue[0].left] == ["k0", "k1"] and not got
            else:
                assert not queue and [o.key for o in got] == ["k0", "k1"]
                assert all(not o.ok and "died (exit code -9)" in (o.problem or "") for o in got)
        assert pool.restarts == 2
        fine: list[str] = []
        _collect(pool, [tasks[:2]], fine)  # the fresh worker plans
        assert sorted(fine) == ["k0", "k1"]


def test_which_specs_need_a_gpu() -> None:
    from fasttts_cli.app.fleet import needs_gpu

    assert needs_gpu(EngineSpec(None, "fp16")) and needs_gpu(EngineSpec(None, "gpu-torch-fp16"))
    assert not needs_gpu(EngineSpec(None, "cpu-fp32")) and not needs_gpu(EngineSpec(None, None))
    assert needs_gpu(EngineSpec(None, "cpu-fp32", device="cuda:1"))  # the device says so
    assert not needs_gpu(EngineSpec(None, "no-such-preset"))  # the engine load reports that one
