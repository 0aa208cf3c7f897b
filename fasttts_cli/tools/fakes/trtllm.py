"""An API-faithful fake of TensorRT-LLM 1.2 (the parts our worker and converter use), for CI and for
`python -m fasttts_cli.tools.accept_trtllm --sim-cpu`.

`install()` puts a fresh module tree into sys.modules (and takes it out after): `tensorrt_llm`,
`.models` (MODEL_MAP with the stock GPT only, as in a new process), `.models.gpt.model`, `.layers`,
`.builder` (Engine, EngineConfig), `.runtime` / `.runtime.generation` (GenerationSession, SamplingConfig,
ModelConfig, RuntimeTensor), `.runtime.model_runner` and `.commands.build` (trtllm-build). What each
follows of the real library is said in `trtllm_build.py`, `trtllm_runtime.py` and `trtllm_engine.py`.

TensorRT-LLM lives in its own Python environment, reached through $FASTTTS_TRTLLM_PYTHON; `fake_python()`
writes an executable that stands in for that interpreter: it runs `-m module args` or `script args` with
the fake installed, so the client's worker subprocess and the build's `trtllm_convert.py` subprocesses
run against the fake unchanged.
"""

from __future__ import annotations

import contextlib
import runpy
import sys
import types
from collections.abc import Iterator, Sequence
from pathlib import Path

from fasttts_cli.tools.fakes import trtllm_build as fb
from fasttts_cli.tools.fakes import trtllm_types as ft

_MODULES = (
    "tensorrt_llm",
    "tensorrt_llm.models",
    "tensorrt_llm.models.gpt",
    "tensorrt_llm.models.gpt.model",
    "tensorrt_llm.models.modeling_utils",
    "tensorrt_llm.layers",
    "tensorrt_llm.builder",
    "tensorrt_llm.runtime",
    "tensorrt_llm.runtime.generation",
    "tensorrt_llm.runtime.model_runner",
    "tensorrt_llm.commands",
    "tensorrt_llm.commands.build",
)


def _lazy_session(name: str) -> object:
    """GenerationSession on first use: the session needs torch, the fake build and finalize do not."""
    if name == "GenerationSession":
        from fasttts_cli.tools.fakes.trtllm_runtime import GenerationSession

        return GenerationSession
    raise AttributeError(name)


def _module_tree() -> dict[str, types.ModuleType]:
    mods = {name: types.ModuleType(name) for name in _MODULES}
    top = mods["tensorrt_llm"]
    top.__version__ = fb.VERSION  # type: ignore[attr-defined]
    top.Mapping = fb.Mapping  # type: ignore[attr-defined]
    contents = {
        "tensorrt_llm.models": {"MODEL_MAP": fb.stock_model_map(), "PretrainedConfig": fb.PretrainedConfig},
        "tensorrt_llm.models.gpt.model": {"GPTForCausalLM": fb.GPTForCausalLM, "GPTConfig": fb.GPTConfig},
        "tensorrt_llm.models.modeling_utils": {"PretrainedConfig": fb.PretrainedConfig},
        "tensorrt_llm.layers": {"LayerNorm": fb.LayerNorm, "ColumnLinear": fb.ColumnLinear},
        "tensorrt_llm.builder": {
            "Engine": fb.Engine,
            "EngineConfig": fb.EngineConfig,
            "BuildConfig": fb.BuildConfig,
        },
        "tensorrt_llm.commands.build": {"main": fb.main, "parse_arguments": fb._parser},
        "tensorrt_llm.runtime.model_runner": {
            "_engine_config_to_model_config": ft._engine_config_to_model_config
        },
    }
    runtime = {
        "SamplingConfig": ft.SamplingConfig,
        "ModelConfig": ft.ModelConfig,
        "RuntimeTensor": ft.RuntimeTensor,
        "KVCacheType": ft.KVCacheType,
    }
    contents["tensorrt_llm.runtime"] = runtime
    contents["tensorrt_llm.runtime.generation"] = dict(runtime)
    for name in ("tensorrt_llm.runtime", "tensorrt_llm.runtime.generation"):
        mods[name].__getattr__ = _lazy_session  # type: ignore[attr-defined]  (PEP 562)
    for name, attrs in contents.items():
        for key, value in attrs.items():
            setattr(mods[name], key, value)
    for name, mod in mods.items():  # submodules are attributes of their parents, as after an import
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(mods[parent], child, mod)
    return mods


@contextlib.contextmanager
def install() -> Iterator[types.ModuleType]:
    """A fresh fake `tensorrt_llm` in sys.modules for the duration; what was there before comes back."""
    saved = {name: sys.modules[name] for name in _MODULES if name in sys.modules}
    mods = _module_tree()
    sys.modules.update(mods)
    try:
        yield mods["tensorrt_llm"]
    finally:
        for name in _MODULES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def fake_python(folder: Path | str) -> Path:
    """An executable standing in for the TensorRT-LLM environment's python (for $FASTTTS_TRTLLM_PYTHON)."""
    path = Path(folder) / "trtllm-fake-python"
    path.parent.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[3]  # the folder holding fasttts_cli/
    path.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="{root}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" '
        '-m fasttts_cli.tools.fakes.trtllm "$@"\n',
        encoding="utf-8",
    )
    path.chmod(0o755)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """`-m module args...` or `script.py args...`, run as __main__ with the fake installed."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(
            "usage: python -m fasttts_cli.tools.fakes.trtllm (-m MODULE | SCRIPT) [ARGS...]", file=sys.stderr
        )
        return 2
    with install():
        try:
            if args[0] == "-m":
                sys.argv = [args[1], *args[2:]]
                runpy.run_module(args[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = args
                runpy.run_path(args[0], run_name="__main__")
        except SystemExit as e:
            code = e.code
            return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
