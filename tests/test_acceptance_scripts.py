"""Defect 4 of issue 18: the GPU acceptance scripts ran a heredoc with `python` and no PYTHONPATH, needed
packages the GPU machine lacks with no offline step, and ended their GPU tests with `| tail -5 || true`.
Now each script is a thin wrapper around an importable program; these checks pin that, and that each
program module imports with the base dependencies (+ torch for the torch one) and nothing of the GPU stack."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = {
    "gpu-torch-acceptance.sh": "fasttts_cli.tools.accept_torch",
    "gpu-acceptance.sh": "fasttts_cli.tools.accept_tensorrt",
}
# what no acceptance program may need just to import (--prepare and --sim-cpu run where these are absent)
GPU_STACK = ("tensorrt", "tensorrt_llm", "cuda", "cupy", "pycuda")
# the torch program's run path, beyond torch, numpy and PyYAML: none of these on the lent GPU machine
NOT_ON_GPU_MACHINE = (
    "soundfile",
    "soxr",
    "pyloudnorm",
    "imageio_ffmpeg",
    "onnxruntime",
    "onnx",
    "transformers",
)


def _code_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_script_is_a_thin_wrapper(script: str) -> None:
    text = (REPO / "scripts" / script).read_text(encoding="utf-8")
    code = _code_lines(text)
    assert code[0] == "set -euo pipefail"
    assert not re.search(r"\|\|\s*true", text), "a failure must reach the exit status"
    assert not re.search(r"\|\s*tail\b", text), "piping a command through tail hides its exit status"
    assert "<<" not in text, "no heredoc: the program is an importable module"
    assert any(ln.startswith('export PYTHONPATH="$REPO') for ln in code), "the source tree must be importable"
    assert not re.search(r"\bpython(?![\w.-])", "\n".join(code)), "`python` may not exist: use python3"
    assert code[-1] == f'exec python3 -m {SCRIPTS[script]} "$@"'


def test_wrapper_runs_the_program_with_its_arguments(tmp_path: Path) -> None:
    """The torch wrapper from another working directory: PYTHONPATH and the arguments reach the program."""
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu-torch-acceptance.sh"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "--sim-cpu" in r.stdout and "accept_torch" in r.stdout


def _import_blocking(module: str, blocked: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        f"""
        import importlib.abc, sys
        BLOCKED = {blocked!r}
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"blocked: {{name}}")
                return None
        sys.meta_path.insert(0, Block())
        import {module}
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=_env(), timeout=300
    )


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.mark.parametrize("module", sorted({*SCRIPTS.values(), "fasttts_cli.tools.accept_trtllm"}))
def test_program_imports_without_the_gpu_stack(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is another helper's program and not in this tree yet")
    r = _import_blocking(module, GPU_STACK)
    assert r.returncode == 0, r.stderr[-2000:]


def test_torch_run_path_imports_with_what_the_gpu_machine_has() -> None:
    """Everything accept_torch imports while it runs (parity and bench), with the packages the lent GPU
    machine lacks blocked: it has torch, numpy and PyYAML, and no soundfile, soxr, onnxruntime..."""
    modules = [
        "fasttts_cli.tools.accept_torch",
        "fasttts_cli.tools.bench_torch",
        "fasttts_cli.tools.parity_torch",
        "fasttts_cli.nets.unified_voice",
        "fasttts_cli.nets.s2mel",
        "fasttts_cli.nets.bigvgan",
        "fasttts_cli.tools.prepare",
    ]
    r = _import_blocking(", ".join(modules), (*GPU_STACK, *NOT_ON_GPU_MACHINE))
    assert r.returncode == 0, r.stderr[-2000:]
