from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.parity import ParityCase, checkpoint_for, load_cases, parity_dir

HAS_TORCH = importlib.util.find_spec("torch") is not None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Any test taking `parity_case` runs once per vector set found in $FASTTTS_PARITY_DIR.
    if "parity_case" in metafunc.fixturenames:
        folder = parity_dir()
        names = [p.stem for p in sorted(folder.glob("vectors_*.npz"))] if folder.is_dir() else []
        metafunc.parametrize("parity_case", names or ["<missing>"], indirect=True)


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
