"""The backend registry: every backend fasttts runs, in one table.

A `BackendSpec` says what a backend is (its device kind), what it can run (precisions, preset component
groups, the kind of artifact an engine folder holds for it), how a component is opened (a factory named
by import path and resolved only when a component is opened, so importing this module imports no GPU
library), and what it needs installed (`requires`, for `fasttts doctor` and the MissingDependencyError
hint). Presets' validation, `fasttts presets` / `doctor`, the manifest check and the engine's session
opening all read this table; nothing else lists backends.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path
from typing import Any

from fasttts_cli.errors import MissingDependencyError, UsageError

# Preset component groups (a preset's `[components.NAME]`); an engine folder's manifest components
# (w2v_bert, codec_quantize, gpt_trunk, ...) each belong to one of them.
COMPONENTS = ("w2v_bert", "codec", "campplus", "conditioners", "gpt", "s2mel", "dit", "vocoder")
# Every precision some backend runs, in the order messages list them.
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "int4", "w8a16", "w4a16")

# What an engine folder holds for a component of a backend: a graph file whose IO names the runtime
# checks (ONNX model or TensorRT plan), a folder a worker process runs, or nothing (the backend runs
# straight from a checkpoint directory and needs no engine folder).
GRAPH, FOLDER, NO_ENGINE = "graph", "folder", "none"
CPU, CUDA = "cpu", "cuda"
# The runtime library a backend drives (ONNX Runtime backends share graphs and their quantization).
ONNXRUNTIME, TENSORRT, TENSORRT_LLM, TORCH = "onnxruntime", "tensorrt", "tensorrt-llm", "torch"

TRTLLM_PYTHON_ENV = "FASTTTS_TRTLLM_PYTHON"  # same name as gpu_stack.TRTLLM_PYTHON_ENV


@dataclass(frozen=True)
class Requirement:
    """One thing a backend needs: an importable module (optionally from a given distribution), or, for
    a backend run in its own environment, an interpreter named by an environment variable."""

    module: str
    install: str  # how to get it, shown by doctor and in the MissingDependencyError hint
    dist: str | None = None  # the distribution that must provide the module (onnxruntime-gpu)
    env: str | None = None  # an interpreter path in this variable satisfies it too
    label: str | None = None  # the name to show, when not the module's or the distribution's

    def importable(self) -> bool:
        """The module imports here (or the variable names an interpreter that has it)."""
        if self.env and Path(os.environ.get(self.env) or "-").is_file():
            return True
        return _importable(self.module)

    def present(self) -> bool:
        """Importable, and from the named distribution (onnxruntime-gpu, not the CPU wheel)."""
        return self.importable() and (self.dist is None or _dist_version(self.dist) is not None)

    def describe(self) -> str:
        what = self.label or self.dist or self.module
        return f"{what} (or ${self.env})" if self.env else what


@dataclass(frozen=True)
class BackendSpec:
    name: str  # the preset's / manifest's `backend` value
    runtime: str  # ONNXRUNTIME | TENSORRT | TENSORRT_LLM | TORCH
    device: str  # CPU | CUDA
    precisions: tuple[str, ...]
    components: tuple[str, ...]  # preset component groups it can run
    artifact: str  # GRAPH | FOLDER | NO_ENGINE
    # "module:callable(path, SessionOptions, **context) -> session", None for NO_ENGINE; `context` is
    # what a component's opener needs from the engine beyond its file (the TensorRT-LLM GPT: the host tables)
    opener: str | None
    requires: tuple[Requirement, ...]
    needs: str  # one line for `fasttts presets`: what a machine needs to run it

    def missing(self) -> list[Requirement]:
        return [r for r in self.requires if not r.present()]

    def available(self) -> bool:
        """Whether it runs on this machine: what it imports is there, and a GPU for a CUDA backend."""
        return not self.missing() and (self.device == CPU or has_gpu())

    def require(self, what: str) -> None:
        """Raise MissingDependencyError naming `what` needs this backend and how to install it, when a
        module it imports is absent (which distribution provides it the session itself finds out: ONNX
        Runtime says which providers it has)."""
        missing = [r for r in self.requires if not r.importable()]
        if missing:
            raise MissingDependencyError(
                f"{what}: backend {self.name} needs {', '.join(r.describe() for r in missing)}, "
                "which is not installed",
                hint="; ".join(r.install for r in missing),
            )

    def factory(self) -> Callable[..., Any]:
        if self.opener is None:
            raise UsageError(f"backend {self.name} runs from a checkpoint directory, not an engine folder")
        module, _, attr = self.opener.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj

    def open(self, path: Path, options: Any, **context: Any) -> Any:
        """Open one component of an engine folder (`path`: its file or folder) with SessionOptions and the
        opener's `context`. A folder backend runs in a worker process whose own interpreter has the
        library (and which says what is missing when it starts), so only a graph backend's modules are
        checked here."""
        if self.artifact != FOLDER:
            self.require(str(path))
        return self.factory()(path, options, **context)


_ORT = Requirement("onnxruntime", "pip install onnxruntime")
_ORT_GPU = Requirement(
    "onnxruntime",
    "pip uninstall -y onnxruntime && pip install onnxruntime-gpu  "
    "(the two packages share one module; install only one)",
    dist="onnxruntime-gpu",
)
_TRT = Requirement(
    "tensorrt",
    "pip install 'fasttts-cli[gpu]'  (tensorrt from NVIDIA's index: --extra-index-url https://pypi.nvidia.com)",
)
_CUDA_PYTHON = Requirement("cuda", "pip install 'cuda-python>=12,<13'", label="cuda-python")
_TRTLLM = Requirement(
    "tensorrt_llm",
    "a separate Python 3.12 environment: python3.12 -m venv ~/trtllm && ~/trtllm/bin/pip install "
    "'tensorrt-llm>=1.2,<1.3' --extra-index-url https://pypi.nvidia.com; then export "
    f"{TRTLLM_PYTHON_ENV}=~/trtllm/bin/python",
    env=TRTLLM_PYTHON_ENV,
)
_TORCH = Requirement("torch", "pip install 'fasttts-cli[build]'")

BACKENDS: dict[str, BackendSpec] = {
    s.name: s
    for s in (
        BackendSpec(
            "onnxruntime-cpu",
            ONNXRUNTIME,
            CPU,
            ("fp32", "int8", "int4"),
            COMPONENTS,
            GRAPH,
            "fasttts_cli.backends.onnxruntime.session:OrtSession",
            (_ORT,),
            "CPU (onnxruntime)",
        ),
        BackendSpec(
            "onnxruntime-cuda",
            ONNXRUNTIME,
            CUDA,
            ("fp32", "fp16", "int8", "int4"),
            COMPONENTS,
            GRAPH,
            "fasttts_cli.backends.onnxruntime.cuda_session:CudaOrtSession",
            (_ORT_GPU,),
            "NVIDIA GPU + onnxruntime-gpu",
        ),
        BackendSpec(
            "tensorrt",
            TENSORRT,
            CUDA,
            ("fp32", "fp16", "bf16"),
            COMPONENTS,
            GRAPH,
            "fasttts_cli.backends.tensorrt.session:TrtSession",
            (_TRT, _CUDA_PYTHON),
            "NVIDIA GPU + TensorRT (extra `gpu`)",
        ),
        BackendSpec(
            "tensorrt-llm",
            TENSORRT_LLM,
            CUDA,
            ("fp32", "fp16", "bf16", "w8a16", "w4a16"),
            ("gpt",),
            FOLDER,
            "fasttts_cli.indextts2.gpt_trtllm:open_worker",
            (_TRTLLM,),
            "NVIDIA GPU + TensorRT-LLM (extra `trtllm`)",
        ),
        BackendSpec(
            "torch",
            TORCH,
            CUDA,
            ("fp32", "fp16", "bf16"),
            COMPONENTS,
            NO_ENGINE,
            None,
            (_TORCH,),
            "PyTorch (extra `build`)",
        ),
    )
}


def names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def get(name: str) -> BackendSpec:
    spec = BACKENDS.get(name)
    if spec is None:
        raise UsageError(f"backend {name!r} is not known", hint=f"allowed: {', '.join(BACKENDS)}")
    return spec


def install_hint(name: str) -> str:
    """How to install what backend `name` needs (its requirements' install lines)."""
    return "; ".join(r.install for r in get(name).requires)


def with_artifact(artifact: str) -> tuple[str, ...]:
    """Names of the backends whose engine-folder components are of this artifact kind."""
    return tuple(n for n, s in BACKENDS.items() if s.artifact == artifact)


def of_runtime(runtime: str) -> tuple[str, ...]:
    """Names of the backends that drive this runtime library."""
    return tuple(n for n, s in BACKENDS.items() if s.runtime == runtime)


def on_device(device: str) -> tuple[str, ...]:
    """Names of the backends that run on this device kind (CPU | CUDA)."""
    return tuple(n for n, s in BACKENDS.items() if s.device == device)


def precisions() -> dict[str, tuple[str, ...]]:
    return {n: s.precisions for n, s in BACKENDS.items()}


def runs(backend: str, group: str) -> bool:
    """Whether `backend` can run the preset component group `group`."""
    spec = BACKENDS.get(backend)
    return spec is not None and group in spec.components


# ------------------------------------------------------------------------------------------ probes


def _importable(module: str) -> bool:
    if module in sys.modules:  # also a fake put there by a test or --sim-cpu
        return True
    try:
        return util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _dist_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def has_gpu() -> bool:
    """An NVIDIA GPU is visible (driver's /proc entries or nvidia-smi); nothing is imported or run."""
    return Path("/proc/driver/nvidia/gpus").is_dir() or shutil.which("nvidia-smi") is not None
