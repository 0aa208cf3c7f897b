"""The GPT stage of `fasttts build` for a preset whose GPT runs on TensorRT-LLM.

TensorRT-LLM lives in its own Python 3.12 environment ($FASTTTS_TRTLLM_PYTHON, README), so this module
never imports it: it writes the converted checkpoint with numpy (`trtllm_convert.write_checkpoint`),
then runs `trtllm_convert.py finalize` (weight-only quantization with TensorRT-LLM's own kernels' layout)
and `trtllm_convert.py build` (trtllm-build with our architecture registered) in that environment as
subprocesses. The engine folder gets:

    gpt_trtllm/checkpoint/   config.json + rank0.safetensors (float weights; the numpy reference
                             backend of the worker runs these)
    gpt_trtllm/engine/       config.json + rank0.engine (what the runtime's worker loads)

With FASTTTS_TRTLLM_BACKEND=reference the build stops after the checkpoint: the runtime then drives the
GPT through the same worker protocol with numpy (slow; for checking a conversion and for CPU tests).
The quantized copy `finalize` writes is temporary: only the engine built from it is kept.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fasttts_cli.backends.tensorrt_llm import trtllm_convert as tc
from fasttts_cli.errors import FastTTSError, MissingDependencyError
from fasttts_cli.indextts2.gpt_trtllm import (
    CHECKPOINT_DIR,
    ENGINE_DIR,
    ENGINE_FILE,
    GPT_TRTLLM,
    TRTLLM_BACKEND_ENV,
    TRTLLM_PYTHON_ENV,
    backend_choice,
)
from fasttts_cli.spec.engine_folder import ComponentEntry, file_sha256
from fasttts_cli.spec.presets import ComponentSpec, Limits

_CONVERT_SCRIPT = Path(tc.__file__).resolve()
_STDERR_TAIL = 30


class TrtllmBuildError(FastTTSError):
    """The TensorRT-LLM GPT engine could not be built."""


def trtllm_python() -> str | None:
    return os.environ.get(TRTLLM_PYTHON_ENV) or None


def require_stack() -> None:
    """Refuse before any export when the engine cannot be built here (reference: nothing needed)."""
    if backend_choice() == "reference":
        return
    py = trtllm_python()
    if py is None:
        raise MissingDependencyError(
            f"this preset builds its GPT with TensorRT-LLM, which runs in its own Python environment, and "
            f"${TRTLLM_PYTHON_ENV} is not set",
            hint=f"export {TRTLLM_PYTHON_ENV}=/path/to/trtllm-env/bin/python (README: TensorRT-LLM); "
            f"or {TRTLLM_BACKEND_ENV}=reference to write the converted checkpoint only (numpy GPT, slow)",
        )
    if not (Path(py).is_file() and os.access(py, os.X_OK)):
        raise MissingDependencyError(
            f"${TRTLLM_PYTHON_ENV} = {py}: not an executable file",
            hint="point it at the python of the environment where tensorrt-llm 1.2 is installed",
        )


@dataclass(frozen=True)
class GptSizes:
    """What the converted checkpoint needs from config.yaml (tensors do not carry the head count)."""

    heads: int
    n_conds: int
    start_mel: int
    stop_mel: int
    start_text: int
    stop_text: int
    text_in_prompt: bool = False  # IndexTTS-2.5 (trtllm_convert.MergedLayout.text_in_prompt)


def engine_flags(layout: tc.MergedLayout, limits: Limits, comp: ComponentSpec) -> list[str]:
    """trtllm-build flags for the worker's TrtllmBackend (backends/tensorrt_llm/session.py says why each
    is needed; `--kv_cache_type` takes continuous, paged or disabled in tensorrt_llm 1.2's build command).

    Beams are batch rows to our worker (it samples, TensorRT-LLM runs greedy), so the engine's batch is
    the preset's lines times its beam width and `--max_beam_width` stays 1. The longest context is the
    latent pass: conditioning rows + every text position + every mel position (IndexTTS-2.5's prompt rows
    include the text positions)."""
    beams = int(comp.options.get("max_beam_width", 3))
    rows = limits.max_batch * beams
    text = 0 if layout.text_in_prompt else layout.text_pos_rows  # 2.5: the text rows are prompt rows
    longest = layout.n_conds + text + layout.mel_pos_rows
    return [
        "--gpt_attention_plugin", "auto",
        "--gemm_plugin", "auto",
        "--remove_input_padding", "enable",
        "--kv_cache_type", "continuous",  # not the deprecated --paged_kv_cache disable
        "--max_beam_width", "1",
        "--max_batch_size", str(rows),
        "--max_input_len", str(longest),
        "--max_seq_len", str(longest),
        "--max_num_tokens", str(max(8192, limits.max_batch * longest)),
        "--max_prompt_embedding_table_size", str(rows * layout.n_conds),
    ]  # fmt: skip


def run_tool(cmd: list[str], what: str, say: Callable[[str], None]) -> None:
    say(what)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-_STDERR_TAIL:])
        raise TrtllmBuildError(
            f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}",
            hint=f"check the TensorRT-LLM environment (${TRTLLM_PYTHON_ENV}) and the GPU",
        )


def build_gpt(
    gpt_pth: Path,
    sizes: GptSizes,
    comp: ComponentSpec,
    limits: Limits,
    out_dir: Path,
    say: Callable[[str], None] = lambda _m: None,
) -> ComponentEntry:
    """Write `out_dir/gpt_trtllm/` (checkpoint, and the engine unless the backend is `reference`) and
    return the manifest entry for it."""
    root = out_dir / GPT_TRTLLM
    ckpt = root / CHECKPOINT_DIR
    say("converting the GPT to a TensorRT-LLM checkpoint")
    state = tc.state_from_gpt_pth(gpt_pth)
    tokens = {
        "start_mel": sizes.start_mel,
        "stop_mel": sizes.stop_mel,
        "start_text": sizes.start_text,
        "stop_text": sizes.stop_text,
    }
    tc.write_checkpoint(
        ckpt,
        state,
        heads=sizes.heads,
        n_conds=sizes.n_conds,
        precision=comp.precision,
        tokens=tokens,
        max_beam_width=int(comp.options.get("max_beam_width", 3)),
        text_in_prompt=sizes.text_in_prompt,
    )
    layout = tc.layout_from_state(
        state, n_conds=sizes.n_conds, tokens=tokens, text_in_prompt=sizes.text_in_prompt
    )
    del state
    digest_files = [ckpt / tc.CONFIG_FILE, ckpt / tc.WEIGHTS_FILE]
    if backend_choice() != "reference":
        py = trtllm_python()
        assert py is not None  # require_stack ran first
        quantized = root / ".quantized"
        shutil.rmtree(quantized, ignore_errors=True)
        shutil.copytree(ckpt, quantized)
        try:
            run_tool([py, str(_CONVERT_SCRIPT), "finalize", str(quantized)], "finalizing weights", say)
            run_tool(
                [
                    py,
                    str(_CONVERT_SCRIPT),
                    "build",
                    str(quantized),
                    str(root / ENGINE_DIR),
                    *engine_flags(layout, limits, comp),
                ],
                "building the TensorRT-LLM engine",
                say,
            )
        finally:
            shutil.rmtree(quantized, ignore_errors=True)
        engine = root / ENGINE_DIR / ENGINE_FILE
        if not engine.is_file():
            raise TrtllmBuildError(f"trtllm-build finished but wrote no {engine}")
        digest_files.append(engine)
    return ComponentEntry(
        file=GPT_TRTLLM,
        backend="tensorrt-llm",
        precision=comp.precision,
        sha256=file_sha256(*digest_files),
    )
