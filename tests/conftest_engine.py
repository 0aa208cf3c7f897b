"""Fixtures for the engine tests: engine folders built from our tiny checkpoint and from the parity one.

Imported by tests/test_engine*.py (`from tests.conftest_engine import *`). Builds go to pytest's temporary
folders or tests/.cache (never engines/); each is built once per test session, the parity engine once
per cache (under a file lock, like the parity checkpoint itself).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.parity import CACHE, ParityCase, checkpoint_for

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_TINY = importlib.util.find_spec("fasttts_cli.build.tiny") is not None


def write_test_voice(
    path: Path, seconds: float = 2.0, sr: int = 24000, f0: float = 140.0, seed: int = 0
) -> Path:
    """A voice-like signal: a glottal-ish harmonic tone with vibrato and a little noise (not silent)."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.03 * np.sin(2 * np.pi * 5 * t))) / sr
    x = sum(np.sin(k * phase) / k for k in range(1, 12))
    env = 0.5 + 0.5 * np.sin(2 * np.pi * 2.5 * t) ** 2
    x = 0.2 * x * env + 0.01 * rng.standard_normal(t.size)
    sf.write(str(path), x.astype(np.float32), sr, subtype="PCM_16")
    return path


def _build(ckpt: Path, out: Path) -> Path:
    import torch

    from fasttts_cli.build.export import build_engine

    torch.set_num_threads(1)
    return build_engine(ckpt, "cpu-fp32", out, overwrite=True)


@pytest.fixture(scope="session")
def tiny_checkpoint_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not HAS_TORCH:
        pytest.skip("torch (the `build` extra) is needed to write the tiny checkpoint")
    if not HAS_TINY:
        pytest.skip("fasttts_cli.build.tiny is not available")
    from fasttts_cli.build.tiny import write_tiny_checkpoint

    # stop_bias 0: these tests pin every line to max_tokens, so lengths never hinge on a sampled stop.
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt", stop_bias=0.0)


@pytest.fixture(scope="session")
def tiny_engine_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("FASTTTS_TEST_ENGINE")  # a prebuilt engine folder, for quick local runs
    if given:
        return Path(given)
    ckpt = request.getfixturevalue("tiny_checkpoint_dir")
    return _build(ckpt, tmp_path_factory.mktemp("tiny-engine") / "engine")


@pytest.fixture(scope="session")
def voice_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_voice(tmp_path_factory.mktemp("voices") / "voice.wav")


@pytest.fixture(scope="session")
def voice_wav2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_voice(tmp_path_factory.mktemp("voices2") / "other.wav", 5.0, 16000, 210.0, 1)


def _current(folder: Path) -> bool:
    """A cached engine this runtime still drives (an export change such as a new graph input makes it
    stale)."""
    from fasttts_cli.errors import FastTTSError
    from fasttts_cli.indextts2.components import built_for_target_frames
    from fasttts_cli.indextts2.engine import check_manifest
    from fasttts_cli.spec.engine_folder import read_manifest

    if not (folder / "manifest.json").is_file():
        return False
    try:
        manifest = read_manifest(folder)
        check_manifest(manifest, folder)
    except FastTTSError:
        return False
    # an engine from before s2mel_content took its target frames still runs (natural length only)
    return built_for_target_frames(manifest)


def parity_engine_for(case: ParityCase) -> Path:
    """The parity checkpoint's engine, built once into tests/.cache (file lock for parallel runs)."""
    ckpt = checkpoint_for(case.weight_seed, case.folder)
    out = CACHE / f"parity-engine-seed{case.weight_seed}"
    with open(CACHE / f"parity-engine-seed{case.weight_seed}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = out / "built-from.txt"
        want = (ckpt / "make_checkpoint.json").read_text(encoding="utf-8")
        if not _current(out) or not stamp.is_file() or stamp.read_text() != want:
            if out.exists():
                shutil.rmtree(out)
            _build(ckpt, out)
            stamp.write_text(want)
    return out


@pytest.fixture
def parity_engine_dir(parity_case: ParityCase) -> Path:
    if not HAS_TORCH:
        pytest.skip("torch (the `build` extra) is needed to build the parity engine")
    return parity_engine_for(parity_case)


def parity25_engine_for(case: Any, ckpt: Path) -> Path:
    """The 2.5 parity checkpoint's cpu-fp32 engine, built once into tests/.cache per checkpoint digest
    (file lock for parallel runs; a folder this runtime no longer drives is rebuilt)."""
    from fasttts_cli.errors import FastTTSError
    from fasttts_cli.indextts25.components import check_manifest25
    from fasttts_cli.spec.engine_folder import read_manifest

    digest = str(case.sidecar["checkpoint_digest"])[:16]
    out = CACHE / f"parity25-engine-{digest}"
    with open(CACHE / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = out / "built-from.txt"
        try:
            current = stamp.is_file() and stamp.read_text() == digest
            if current:
                check_manifest25(read_manifest(out), out)
        except FastTTSError:
            current = False
        if not current:
            if out.exists():
                shutil.rmtree(out)
            _build(ckpt, out)
            stamp.write_text(digest)
    return out


@pytest.fixture(scope="session")
def parity25_engine_dir(parity25_case: Any, parity25_checkpoint: Path) -> Path:
    return parity25_engine_for(parity25_case, parity25_checkpoint)
