"""What accelerator stack this machine has, and what each preset needs of it.

`detect()` looks without side effects: package versions come from installed metadata, the GPU from
`nvidia-smi` or /proc, and nothing heavy is imported (torch only when asked, TensorRT-LLM never: it
lives in its own Python 3.12 environment, found through $FASTTTS_TRTLLM_PYTHON). `requirements(preset)`
lists, per backend the preset uses, what must be installed and whether it is; `check_preset(preset)`
validates the per-component backend/precision/options combinations with errors naming the preset
file, the key and the allowed values. `fasttts doctor` and `fasttts presets` print these.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata, util
from pathlib import Path
from typing import Any

from fasttts_cli.errors import InputError
from fasttts_cli.spec import registry
from fasttts_cli.spec.presets import INTEGER_PRECISIONS, Preset

TRTLLM_PYTHON_ENV = "FASTTTS_TRTLLM_PYTHON"

# Which precisions each backend implements, and for which components: the backend registry's.
BACKEND_PRECISIONS: dict[str, tuple[str, ...]] = registry.precisions()
# Integer weights only where measured safe: the GPT, w2v-BERT, the conditioners and (dynamic int8 only)
# the DiT, whose full-size 25-step mel moved 0.19% of its range. BigVGAN stays fp32: dynamic int8 ran
# 3x slower there (ConvInteger) at 13.8 dB SNR. The codec and CAMPPlus are tiny and feed integer codes
# and the speaker style.
QUANTIZABLE = ("gpt", "w2v_bert", "conditioners", "dit")
# Components whose int8 must be the dynamic method (MatMulNBits was not measured there).
DYNAMIC_ONLY = ("dit",)
TRTLLM_COMPONENTS = registry.get("tensorrt-llm").components
BLOCK_SIZES = (16, 32, 64, 128, 256)
ACCURACY_LEVELS = (0, 1, 2, 3, 4)
QUANT_METHODS = ("matmulnbits", "dynamic")

# Options each backend understands: name -> (type check, allowed description).
_INT = "an integer"
_NUM = "a number"
_BOOL = "true or false"


@dataclass(frozen=True)
class GpuStack:
    gpus: tuple[str, ...] = ()  # GPU model names
    driver: str | None = None
    torch: str | None = None
    torch_cuda: bool | None = None  # None: not probed (importing torch takes seconds)
    onnx: str | None = None
    onnxruntime: str | None = None  # version of whichever onnxruntime package is installed
    onnxruntime_package: str | None = None  # "onnxruntime" or "onnxruntime-gpu"
    ort_providers: tuple[str, ...] = ()
    tensorrt: str | None = None
    cuda_python: str | None = None
    tensorrt_llm: str | None = None
    tensorrt_llm_python: str | None = None  # interpreter of the environment that has it
    notes: tuple[str, ...] = ()

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Requirement:
    what: str  # e.g. "tensorrt>=10,<12"
    stage: str  # "build" | "run" | "both"
    components: tuple[str, ...]  # preset components that need it
    present: bool
    detail: str  # what was found, or why it is missing
    install: str = ""  # how to get it

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "components": list(self.components)}


# ------------------------------------------------------------------------------------------ detect


def _version(*dists: str) -> str | None:
    for d in dists:
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            continue
    return None


def _gpus() -> tuple[tuple[str, ...], str | None]:
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=15,
                check=False,
            )
            rows = [r.split(",") for r in out.stdout.strip().splitlines() if r.strip()]
            if out.returncode == 0 and rows:
                return tuple(r[0].strip() for r in rows), rows[0][-1].strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    proc = Path("/proc/driver/nvidia/gpus")
    names = []
    if proc.is_dir():
        for info in sorted(proc.glob("*/information")):
            for line in info.read_text(errors="replace").splitlines():
                if line.startswith("Model:"):
                    names.append(line.split(":", 1)[1].strip())
    driver = None
    ver = Path("/proc/driver/nvidia/version")
    if ver.is_file():
        driver = ver.read_text(errors="replace").split("\n", 1)[0].strip() or None
    return tuple(names), driver


def _ort() -> tuple[str | None, str | None, tuple[str, ...]]:
    pkg = next(
        (p for p in ("onnxruntime-gpu", "onnxruntime") if _version(p) is not None),
        None,
    )
    if util.find_spec("onnxruntime") is None:
        return None, pkg, ()
    try:
        import onnxruntime as ort

        return ort.__version__, pkg, tuple(ort.get_available_providers())
    except Exception as e:  # a broken install must not break `doctor`
        return None, f"{pkg} (import failed: {e})", ()


def _trtllm() -> tuple[str | None, str | None]:
    """TensorRT-LLM here, or in the separate environment named by $FASTTTS_TRTLLM_PYTHON (not imported:
    importing it initialises CUDA and MPI)."""
    if util.find_spec("tensorrt_llm") is not None:
        return _version("tensorrt-llm", "tensorrt_llm") or "unknown", sys.executable
    py = os.environ.get(TRTLLM_PYTHON_ENV)
    if not py:
        return None, None
    if not Path(py).is_file():
        return None, f"{py} (${TRTLLM_PYTHON_ENV}: not a file)"
    code = "import importlib.metadata as m; print(m.version('tensorrt_llm'))"
    try:
        out = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{py} ({e})"
    if out.returncode != 0:
        return None, f"{py} (no tensorrt_llm there)"
    return out.stdout.strip() or "unknown", py


def detect(*, probe_torch: bool = False) -> GpuStack:
    """What is installed. probe_torch=True imports torch to ask torch.cuda.is_available()."""
    gpus, driver = _gpus()
    ort_v, ort_pkg, providers = _ort()
    trtllm_v, trtllm_py = _trtllm()
    torch_v = _version("torch") if util.find_spec("torch") is not None else None
    torch_cuda = None
    notes = []
    if probe_torch and torch_v:
        try:
            import torch

            torch_cuda = bool(torch.cuda.is_available())
        except Exception as e:
            notes.append(f"torch import failed: {e}")
    if _version("onnxruntime") and _version("onnxruntime-gpu"):
        notes.append(
            "both onnxruntime and onnxruntime-gpu are installed; they share one module and conflict: "
            "`pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu`"
        )
    return GpuStack(
        gpus=gpus,
        driver=driver,
        torch=torch_v,
        torch_cuda=torch_cuda,
        onnx=_version("onnx"),
        onnxruntime=ort_v,
        onnxruntime_package=ort_pkg,
        ort_providers=providers,
        tensorrt=_version("tensorrt", "tensorrt-cu13", "tensorrt-cu12")
        if util.find_spec("tensorrt") is not None
        else None,
        cuda_python=_version("cuda-python", "cuda-bindings")
        if (util.find_spec("cuda") is not None)
        else None,
        tensorrt_llm=trtllm_v,
        tensorrt_llm_python=trtllm_py,
        notes=tuple(notes),
    )


# ------------------------------------------------------------------------------------------ validate


def _where(preset: Preset) -> object:
    return preset.source if preset.source is not None else f"preset {preset.name}"


def _major(version: str | None) -> int | None:
    try:
        return int(str(version).split(".")[0])
    except (TypeError, ValueError):
        return None


def _check_option(preset: Preset, comp: str, key: str, value: Any, allowed: tuple[Any, ...] | str) -> None:
    where = _where(preset)
    if isinstance(allowed, tuple):
        ok = (
            any(value == a and type(value) is type(a) for a in allowed)
            if not isinstance(value, bool)
            else value in allowed and all(isinstance(a, bool) for a in allowed)
        )
        if not ok:
            shown = ", ".join(str(a).lower() if isinstance(a, bool) else repr(a) for a in allowed)
            raise InputError(where, f"components.{comp}.{key} = {value!r}", hint=f"allowed: {shown}")
        return
    good = {
        _INT: isinstance(value, int) and not isinstance(value, bool) and value > 0,
        _NUM: isinstance(value, int | float) and not isinstance(value, bool) and value > 0,
        _BOOL: isinstance(value, bool),
    }[allowed]
    if not good:
        raise InputError(where, f"components.{comp}.{key} = {value!r}", hint=f"allowed: {allowed} (> 0)")


def _allowed_options(backend: str, precision: str, options: dict[str, Any]) -> dict[str, Any]:
    """option name -> tuple of allowed values or a type description."""
    if backend in registry.of_runtime(registry.ONNXRUNTIME) and precision in INTEGER_PRECISIONS:
        method = options.get("method", "matmulnbits")
        if method == "dynamic":
            return {"method": QUANT_METHODS, "per_channel": (True, False)}
        return {
            "method": QUANT_METHODS,
            "block_size": BLOCK_SIZES,
            "accuracy_level": ACCURACY_LEVELS,
            "symmetric": (True, False),
        }
    if backend == "onnxruntime-cuda" and precision == "fp16":
        return {"keep_io_types": (True, False)}
    if backend == "tensorrt":
        return {"workspace_gb": _NUM, "opt_level": (0, 1, 2, 3, 4, 5), "profiles": _INT}
    if backend in ("tensorrt-llm", "torch"):  # beam rows the engine / CUDA graphs are sized for
        return {"max_beam_width": (1, 2, 3, 4, 5, 6, 7, 8)}
    return {}


def check_preset(preset: Preset) -> None:
    """Raise InputError (naming the preset file, the key and the allowed values) for a component whose
    backend, precision and options do not fit together."""
    where = _where(preset)
    for comp, spec in sorted(preset.components.items()):
        allowed_prec = BACKEND_PRECISIONS.get(spec.backend, ())
        if spec.precision not in allowed_prec:
            raise InputError(
                where,
                f"components.{comp}.precision = {spec.precision!r} is not available with backend "
                f"{spec.backend!r}",
                hint=f"allowed with {spec.backend}: {', '.join(allowed_prec)}",
            )
        if spec.backend == "tensorrt-llm" and comp not in TRTLLM_COMPONENTS:
            raise InputError(
                where,
                f"components.{comp}.backend = 'tensorrt-llm': only the GPT runs on TensorRT-LLM",
                hint="allowed for this component: onnxruntime-cpu, onnxruntime-cuda, tensorrt, torch",
            )
        if spec.precision in INTEGER_PRECISIONS and comp not in QUANTIZABLE:
            raise InputError(
                where,
                f"components.{comp}.precision = {spec.precision!r}: weight-only quantization is only "
                f"offered for {', '.join(QUANTIZABLE)}",
                hint=f"allowed for {comp}: fp32" + (", fp16" if spec.backend != "onnxruntime-cpu" else ""),
            )
        allowed = _allowed_options(spec.backend, spec.precision, spec.options)
        for key, value in spec.options.items():
            if key not in allowed:
                raise InputError(
                    where,
                    f"unknown option components.{comp}.{key} for backend {spec.backend!r}, "
                    f"precision {spec.precision!r}",
                    hint=f"allowed: {', '.join(allowed) or '(none)'}",
                )
            _check_option(preset, comp, key, value, allowed[key])
        if (
            comp in DYNAMIC_ONLY
            and spec.precision in INTEGER_PRECISIONS
            and spec.options.get("method") != "dynamic"
        ):
            raise InputError(
                where,
                f"components.{comp}.precision = {spec.precision!r} needs method = 'dynamic' "
                "(int8 weights and activations; the only integer form measured for it)",
                hint=f"set components.{comp} = {{ ..., precision = 'int8', method = 'dynamic', "
                "per_channel = true }, or precision = 'fp32'",
            )
        if spec.options.get("method") == "dynamic" and spec.precision != "int8":
            raise InputError(
                where,
                f"components.{comp}.method = 'dynamic' needs precision 'int8', got {spec.precision!r}",
                hint="allowed: method = 'matmulnbits' for int4",
            )


# ------------------------------------------------------------------------------------------ requirements

_INSTALL = {
    "onnxruntime": "pip install onnxruntime",
    "onnxruntime-gpu": (
        "pip uninstall -y onnxruntime && pip install onnxruntime-gpu  "
        "(the two packages share one module; install only one)"
    ),
    "gpu": "an NVIDIA GPU with its driver (nvidia-smi must list it)",
    "tensorrt": "pip install 'fasttts-cli[gpu]'  (tensorrt from NVIDIA's index: --extra-index-url https://pypi.nvidia.com)",
    "cuda-python": "pip install 'cuda-python>=12,<13'  (CUDA 12, as the tensorrt-cu12 wheel)",
    "tensorrt-llm": (
        "a separate Python 3.12 environment: python3.12 -m venv ~/trtllm && ~/trtllm/bin/pip install "
        f"'tensorrt-llm>=1.2,<1.3' --extra-index-url https://pypi.nvidia.com; then export "
        f"{TRTLLM_PYTHON_ENV}=~/trtllm/bin/python"
    ),
    "build": "pip install 'fasttts-cli[build]'",
    "torch-cuda": "a CUDA build of torch (https://pytorch.org/get-started/locally/)",
}


def requirements(preset: Preset, stack: GpuStack | None = None) -> list[Requirement]:
    """Everything `preset` needs to be built and run, each with whether this machine has it."""
    st = stack if stack is not None else detect()
    by_backend: dict[str, list[str]] = {}
    for comp, spec in sorted(preset.components.items()):
        by_backend.setdefault(spec.backend, []).append(comp)
    out: list[Requirement] = []
    every = tuple(sorted(preset.components))
    build_ok = st.torch is not None and st.onnx is not None
    out.append(
        Requirement(
            "torch + onnx (the `build` extra)",
            "build",
            every,
            build_ok,
            f"torch {st.torch or 'missing'}, onnx {st.onnx or 'missing'}",
            "" if build_ok else _INSTALL["build"],
        )
    )
    gpu_needed = [c for b, cs in by_backend.items() if b != "onnxruntime-cpu" for c in cs]
    if gpu_needed:
        out.append(
            Requirement(
                "NVIDIA GPU",
                # TensorRT engines are built on (and for) the GPU that runs them.
                "both" if {"tensorrt", "tensorrt-llm"} & set(by_backend) else "run",
                tuple(gpu_needed),
                st.has_gpu,
                ", ".join(st.gpus) + (f" (driver {st.driver})" if st.driver else "")
                if st.has_gpu
                else "no NVIDIA GPU found (nvidia-smi, /proc/driver/nvidia)",
                "" if st.has_gpu else _INSTALL["gpu"],
            )
        )
    if "onnxruntime-cpu" in by_backend:
        comps = tuple(by_backend["onnxruntime-cpu"])
        ok = "CPUExecutionProvider" in st.ort_providers
        quant = [c for c in comps if preset.components[c].precision in INTEGER_PRECISIONS]
        detail = f"{st.onnxruntime_package or 'onnxruntime'} {st.onnxruntime or 'missing'}"
        # 8-bit MatMulNBits on the CPU EP arrived in 1.22 (PR #24384).
        if ok and quant and _version_tuple(st.onnxruntime) < (1, 22):
            ok, detail = False, detail + "; MatMulNBits 8-bit on CPU needs onnxruntime >= 1.22"
        out.append(
            Requirement(
                "onnxruntime (CPU provider)",
                "run",
                comps,
                ok,
                detail,
                "" if ok else _INSTALL["onnxruntime"],
            )
        )
    if "onnxruntime-cuda" in by_backend:
        ok = "CUDAExecutionProvider" in st.ort_providers
        out.append(
            Requirement(
                "onnxruntime-gpu (CUDA provider)",
                "run",
                tuple(by_backend["onnxruntime-cuda"]),
                ok,
                f"{st.onnxruntime_package or 'onnxruntime'} {st.onnxruntime or 'missing'}, providers: "
                f"{', '.join(st.ort_providers) or 'none'}",
                "" if ok else _INSTALL["onnxruntime-gpu"],
            )
        )
    if "tensorrt" in by_backend:
        comps = tuple(by_backend["tensorrt"])
        major = _major(st.tensorrt)
        ok = major in (10, 11)
        out.append(
            Requirement(
                "tensorrt>=10,<12",
                "both",
                comps,
                ok,
                f"tensorrt {st.tensorrt}" if st.tensorrt else "tensorrt is not installed",
                "" if ok else _INSTALL["tensorrt"],
            )
        )
        out.append(
            Requirement(
                "cuda-python",
                "run",
                comps,
                st.cuda_python is not None,
                f"cuda-python {st.cuda_python}" if st.cuda_python else "cuda-python is not installed",
                "" if st.cuda_python else _INSTALL["cuda-python"],
            )
        )
    if "tensorrt-llm" in by_backend:
        v = st.tensorrt_llm
        ok = v is not None and v.startswith("1.2")
        detail = (
            f"tensorrt_llm {v} in {st.tensorrt_llm_python}"
            if v
            else (st.tensorrt_llm_python or f"not installed here and ${TRTLLM_PYTHON_ENV} is not set")
        )
        if v and not ok:
            detail += " (needs 1.2.x: the last line with the TensorRT engine-build backend)"
        out.append(
            Requirement(
                "tensorrt-llm 1.2.x (own Python 3.12 environment)",
                "both",
                tuple(by_backend["tensorrt-llm"]),
                ok,
                detail,
                "" if ok else _INSTALL["tensorrt-llm"],
            )
        )
    if "torch" in by_backend:
        comps = tuple(by_backend["torch"])
        ok = st.torch is not None and st.torch_cuda is not False and st.has_gpu
        out.append(
            Requirement(
                "torch with CUDA",
                "run",
                comps,
                ok,
                f"torch {st.torch or 'missing'}, cuda available: "
                f"{'not probed' if st.torch_cuda is None else st.torch_cuda}",
                "" if ok else _INSTALL["torch-cuda"],
            )
        )
    return out


def _version_tuple(v: str | None) -> tuple[int, ...]:
    parts = []
    for p in (v or "0").split(".")[:3]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@dataclass(frozen=True)
class PresetStatus:
    name: str
    can_build: bool
    can_run: bool  # with an engine already built for this machine
    missing: list[str] = field(default_factory=list)  # one line per missing requirement

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


_STAGE_WORDS = {"build": "build", "run": "run", "both": "build and run"}


def preset_status(preset: Preset, stack: GpuStack | None = None) -> PresetStatus:
    """Can this machine build / run `preset`, and if not, why (one line per missing thing)."""
    reqs = requirements(preset, stack)
    missing = [
        f"{r.what} (to {_STAGE_WORDS[r.stage]}): {r.detail}" + (f" -> {r.install}" if r.install else "")
        for r in reqs
        if not r.present
    ]
    run_ok = all(r.present for r in reqs if r.stage in ("run", "both"))
    build_ok = all(r.present for r in reqs if r.stage in ("build", "both"))
    return PresetStatus(preset.name, build_ok, run_ok, missing)
