"""The planning seam (app/fleet.py): a pool plans self-contained tasks with the guard, and a task's plan
does not depend on its batch-mates."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fasttts_cli.app.fleet import EngineSpec, LineOutcome, LineTask, open_pool
from fasttts_cli.dubbing.cache import line_seed
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
