"""What runs inside TensorRT-LLM's environment on the build side: our model class, its registration in
`tensorrt_llm.models.MODEL_MAP`, weight-only finalisation and `trtllm-build`.

Registration is needed wherever TensorRT-LLM turns a config.json into objects, not only when building:
`Engine.from_dir` reads the engine's config.json through `EngineConfig.from_json_str` ->
`PretrainedConfig.from_dict`, which looks `config['architecture']` up in `MODEL_MAP` (tensorrt_llm
1.2 `models/modeling_utils.py`, `PretrainedConfig.from_dict`; KeyError for an unknown name). So the build
command and the worker both call `register_architecture()`, the one place that does it.

numpy only at module level; everything that needs tensorrt_llm imports it inside the function.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fasttts_cli.backends.tensorrt_llm.names import ARCHITECTURE, CONFIG_FILE, WEIGHTS_FILE
from fasttts_cli.backends.tensorrt_llm.safetensors_io import read_safetensors

_WEIGHT_ONLY = ("attention.qkv", "attention.dense", "mlp.fc", "mlp.proj")
# The GEMM weights TensorRT-LLM's weight-only quantization covers (not embeddings, norms or lm_head).
WEIGHT_ONLY_SUFFIXES = tuple(f".{k}.weight" for k in _WEIGHT_ONLY)


def model_class() -> type:
    """IndexTTS2GPTForCausalLM for TensorRT-LLM 1.2's engine backend, built on its GPTForCausalLM:
    ln_f becomes LayerNorm -> final_norm (child `final_norm`, checkpoint `transformer.ln_f.final_norm.*`)
    and marks the result as `last_hidden_state` (the latent; build with --gather_context_logits so the
    context pass returns every position); the head gets a bias. Everything else (prompt table, learned
    positions fed by our position_ids, GPT-2 blocks, weight-only W8A16/W4A16) is the stock model."""
    from tensorrt_llm.layers import ColumnLinear, LayerNorm
    from tensorrt_llm.models.gpt.model import GPTForCausalLM

    class _TwoNorms(LayerNorm):  # type: ignore[misc, valid-type]
        def __init__(self, hidden: int, eps: float, dtype: Any) -> None:
            super().__init__(normalized_shape=hidden, eps=eps, dtype=dtype)
            self.final_norm = LayerNorm(normalized_shape=hidden, eps=eps, dtype=dtype)

        def forward(self, x: Any) -> Any:
            h = self.final_norm(super().forward(x))
            h.mark_output("last_hidden_state", self.dtype)
            return h

    class IndexTTS2GPTForCausalLM(GPTForCausalLM):  # type: ignore[misc, valid-type]
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.transformer.ln_f = _TwoNorms(config.hidden_size, config.norm_epsilon, config.dtype)
            if self.lm_head is not None:
                self.lm_head = ColumnLinear(
                    config.hidden_size,
                    self.lm_head.out_features * config.mapping.tp_size,
                    bias=True,
                    dtype=config.dtype,
                    tp_group=config.mapping.tp_group,
                    tp_size=config.mapping.tp_size,
                    gather_output=True,
                )

    return IndexTTS2GPTForCausalLM


def register_architecture() -> type:
    """Put our class in `tensorrt_llm.models.MODEL_MAP` (once per process) and return it."""
    import tensorrt_llm.models as models

    cls = models.MODEL_MAP.get(ARCHITECTURE)
    if cls is None:
        cls = models.MODEL_MAP[ARCHITECTURE] = model_class()
    return cls


def finalize(ckpt_dir: Path | str) -> None:  # pragma: no cover - needs tensorrt_llm's torch ops (GPU env)
    """Quantize the GEMM weights for W8A16/W4A16 with TensorRT-LLM's own per-channel quantizer + kernel
    layout, exactly as its GPT converter does. A float checkpoint is left as it is."""
    d = Path(ckpt_dir)
    cfg = json.loads((d / CONFIG_FILE).read_text(encoding="utf-8"))
    algo = cfg["quantization"]["quant_algo"]
    if algo is None or cfg["indextts2"].get("weights_finalized"):
        return
    import tensorrt_llm  # noqa: F401  (registers torch.ops.trtllm)
    import torch
    from safetensors.torch import save_file

    qtype = {"W8A16": torch.int8, "W4A16": torch.quint4x2}[algo]
    out = {}
    for name, a in read_safetensors(d / WEIGHTS_FILE).items():
        t = torch.from_numpy(np.array(a, dtype=np.float32)).to(torch.float16)
        if name.endswith(WEIGHT_ONLY_SUFFIXES):
            prefix = name[: -len(".weight")]
            q, scale = torch.ops.trtllm.symmetric_quantize_last_axis_of_batched_matrix(
                t.t().contiguous(), qtype
            )
            out[f"{prefix}.weight"] = q
            out[f"{prefix}.per_channel_scale"] = scale
        else:
            out[name] = t
    save_file(out, str(d / (WEIGHTS_FILE + ".tmp")))
    os.replace(d / (WEIGHTS_FILE + ".tmp"), d / WEIGHTS_FILE)
    cfg["indextts2"]["weights_finalized"] = True
    (d / CONFIG_FILE).write_text(json.dumps(cfg, indent=2), encoding="utf-8")


def build_argv(ckpt_dir: str, out_dir: str, extra: tuple[str, ...], config: dict[str, Any]) -> list[str]:
    """trtllm-build's arguments: ours plus `extra`; the prompt table defaults to max_batch_size * n_conds
    and the beam width to the checkpoint's."""
    args = ["--checkpoint_dir", ckpt_dir, "--output_dir", out_dir, *extra]
    if "--max_prompt_embedding_table_size" not in extra:
        batch = int(extra[extra.index("--max_batch_size") + 1]) if "--max_batch_size" in extra else 8
        args += ["--max_prompt_embedding_table_size", str(batch * config["indextts2"]["n_conds"])]
    if "--max_beam_width" not in extra:
        args += ["--max_beam_width", str(config["indextts2"]["max_beam_width"])]
    return args


def build_engine_cli(ckpt_dir: str, out_dir: str, *extra: str) -> None:
    """`trtllm-build` (tensorrt_llm.commands.build.main, which reads sys.argv) with our architecture
    registered."""
    from tensorrt_llm.commands import build

    cfg = json.loads((Path(ckpt_dir) / CONFIG_FILE).read_text(encoding="utf-8"))
    register_architecture()
    saved = sys.argv
    sys.argv = ["trtllm-build", *build_argv(ckpt_dir, out_dir, extra, cfg)]
    try:
        build.main()
    finally:
        sys.argv = saved
