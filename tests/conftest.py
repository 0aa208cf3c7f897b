from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.parity import ParityCase, checkpoint_for, load_cases, parity_dir
from tests.parity25 import Parity25Case, checkpoint25_for, load_case25, modules25, parity25_dir, parity25_keys

HAS_TORCH = importlib.util.find_spec("torch") is not None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Any test taking `parity_case` runs once per vector set found in $FASTTTS_PARITY_DIR.
    if "parity_case" in metafunc.fixturenames:
        folder = parity_dir()
        names = [p.stem for p in sorted(folder.glob("vectors_*.npz"))] if folder.is_dir() else []
        metafunc.parametrize("parity_case", names or ["<missing>"], indirect=True)
    # and any test taking `parity25_case` once per 2.5 vector set in $FASTTTS_PARITY25_DIR
    # A delta set (an emotion case) does not repeat the stages that equal its base's by construction (its
    # sidecar's stages_not_repeated): a test marked `parity25_needs(keys)` runs only on the sets that hold
    # those keys, so a fresh clone reports no skip for a stage that is simply not in a set.
    if "parity25_case" in metafunc.fixturenames:
        folder = parity25_dir()
        paths = sorted(folder.glob("vectors25_*.npz")) if folder.is_dir() else []
        needs = [k for m in metafunc.definition.iter_markers("parity25_needs") for k in m.args]
        names = [p.stem for p in paths if not needs or set(needs) <= parity25_keys(p)]
        metafunc.parametrize("parity25_case", names or ["<missing>"], indirect=True, scope="session")


_CASES: dict[str, ParityCase] = {}


@pytest.fixture
def parity_case(request: pytest.FixtureRequest) -> ParityCase:
    if request.param == "<missing>":
        pytest.skip(f"no parity vectors in {parity_dir()} (set FASTTTS_PARITY_DIR)")
    if not _CASES:
        _CASES.update({c.name: c for c in load_cases()})
    return _CASES[request.param]


@pytest.fixture
def parity_checkpoint(parity_case: ParityCase) -> Path:
    if not HAS_TORCH:
        pytest.skip("torch is not installed (the `build` extra); it is needed to regenerate the checkpoint")
    return checkpoint_for(parity_case.weight_seed)


@pytest.fixture(scope="session")
def parity25_case(request: pytest.FixtureRequest) -> Parity25Case:
    if request.param == "<missing>":
        pytest.skip(f"no 2.5 parity vectors in {parity25_dir()} (set FASTTTS_PARITY25_DIR)")
    return load_case25(parity25_dir() / f"{request.param}.npz")


@pytest.fixture(scope="session")
def parity25_checkpoint(parity25_case: Parity25Case) -> Path:
    """The case's random 2.5 checkpoint, regenerated once per session into tests/.cache (and kept there)."""
    if not HAS_TORCH:
        pytest.skip("torch is not installed (the `build` extra); it is needed to regenerate the checkpoint")
    return checkpoint25_for(parity25_case)


@pytest.fixture(scope="session")
def parity25_modules(parity25_checkpoint: Path):  # -> nets.checkpoint25.IndexTTS25Modules
    return modules25(parity25_checkpoint)


def _has_cuda() -> bool:
    if not HAS_TORCH:
        return False
    import torch

    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # GPU tests run only where a CUDA device is visible; elsewhere they are skipped with the reason.
    if any(item.get_closest_marker("gpu") for item in items) and not _has_cuda():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CUDA (none visible to torch here)")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


# The tiny IndexTTS-2.5 checkpoint and its cpu-fp32 engine: here, not in a test module, so every module that
# needs them shares one session-wide build.
@pytest.fixture(scope="session")
def checkpoint25_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not HAS_TORCH:
        pytest.skip("torch (the `build` extra) is needed to write and build the tiny 2.5 checkpoint")
    import torch

    from fasttts_cli.build.tiny import write_tiny_checkpoint25

    torch.set_num_threads(1)
    return write_tiny_checkpoint25(tmp_path_factory.mktemp("tiny25") / "ckpt", stop_bias=0.0)


@pytest.fixture(scope="session")
def engine25_dir(checkpoint25_dir: Path) -> Path:
    from fasttts_cli.build.export import build_engine

    out = checkpoint25_dir.parent / "engine"
    return build_engine(checkpoint25_dir, "cpu-fp32", out, overwrite=True)  # detects 2.5 by itself
