"""The fake TensorRT-LLM runtime's plain types: `KVCacheType`, `ModelConfig`, `SamplingConfig` (with
`use_beam_hyps`, default True as in 1.2), `RuntimeTensor`, `model_runner._engine_config_to_model_config`,
the execution contexts, and the fake engine's file format (the checkpoint's weights + its IO names)."""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch only where tensors are made: the fake build runs without it
    import torch

import numpy as np

from fasttts_cli.backends.tensorrt_llm.safetensors_io import parse_safetensors, write_safetensors

ENGINE_MAGIC = b"FAKE-TRTLLM-ENGINE1"


class KVCacheType(enum.StrEnum):
    CONTINUOUS = "continuous"
    PAGED = "paged"
    DISABLED = "disabled"


def engine_io_names(layers: int, build: Mapping[str, Any], marked: Iterable[str]) -> list[str]:
    """The IO tensors a GPT engine built this way has (generation.py's expected names) + marked ones."""
    names = ["input_ids", "logits", "last_token_ids", "position_ids", "cache_indirection"]
    names += ["sequence_length", "host_past_key_value_lengths", "context_lengths", "host_request_types"]
    names += ["host_sink_token_length", "host_runtime_perf_knobs", "host_context_progress"]
    names += ["host_max_attention_window_sizes", "host_context_lengths"]
    names += [n for i in range(layers) for n in (f"past_key_value_{i}", f"present_key_value_{i}")]
    if build.get("max_prompt_embedding_table_size", 0) > 0:
        names += ["prompt_embedding_table", "tasks", "prompt_vocab_size"]
    return names + list(marked)


def serialize_engine(io_names: list[str], dtype: str, weights: Mapping[str, np.ndarray]) -> bytes:
    import io
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        write_safetensors(Path(d) / "w.safetensors", weights, dtype="float32")
        blob = (Path(d) / "w.safetensors").read_bytes()
    head = json.dumps({"io": io_names, "dtype": dtype}).encode()
    buf = io.BytesIO()
    buf.write(ENGINE_MAGIC + struct.pack("<Q", len(head)) + head + blob)
    return buf.getvalue()


def parse_engine(buffer: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    if not buffer.startswith(ENGINE_MAGIC):
        raise RuntimeError("not a (fake) TensorRT-LLM engine")
    at = len(ENGINE_MAGIC)
    (n,) = struct.unpack("<Q", buffer[at : at + 8])
    return json.loads(buffer[at + 8 : at + 8 + n]), parse_safetensors(buffer[at + 8 + n :])


@dataclass
class ModelConfig:
    max_batch_size: int
    max_beam_width: int
    vocab_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    hidden_size: int
    gpt_attention_plugin: bool
    remove_input_padding: bool = False
    kv_cache_type: KVCacheType = KVCacheType.CONTINUOUS
    max_prompt_embedding_table_size: int = 0
    gather_context_logits: bool = False
    dtype: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # the pretrained config, for the fake engine


def _engine_config_to_model_config(engine_config: Any, **_: Any) -> ModelConfig:
    p, b = engine_config.pretrained_config, engine_config.build_config
    plugins = b.plugin_config
    names = {"num_layers": "num_hidden_layers", "num_heads": "num_attention_heads"}
    names |= {"num_kv_heads": "num_key_value_heads", "vocab_size": "vocab_size"}
    return ModelConfig(
        **{ours: getattr(p, theirs) for ours, theirs in names.items()},
        **{k: getattr(b, k) for k in ("max_batch_size", "max_beam_width", "max_prompt_embedding_table_size")},
        hidden_size=p.hidden_size,
        gpt_attention_plugin=bool(plugins["gpt_attention_plugin"]),
        remove_input_padding=plugins["remove_input_padding"],
        kv_cache_type=KVCacheType(b.kv_cache_type),
        gather_context_logits=b.gather_context_logits,
        dtype=p.dtype,
        extra=p.to_dict(),
    )


@dataclass
class SamplingConfig:
    """The fields the worker sets (the real one has more, all with defaults)."""

    end_id: int
    pad_id: int
    num_beams: int = 1
    top_k: int = 1  # the fake decoder implements greedy decoding only
    # True in 1.2: finalize_decoder(in_progress=True) then deep-copies the beam hypotheses each step
    use_beam_hyps: bool = True


class RuntimeTensor:
    def __init__(self) -> None:
        self._name, self._shape, self._torch_tensor = "", None, None

    @staticmethod
    def from_torch(
        name: str, data: torch.Tensor, override_shape: Iterable[int] | None = None
    ) -> RuntimeTensor:
        t = RuntimeTensor()
        t._name, t._torch_tensor = name, data.contiguous()  # the same tensor when it is contiguous
        t._shape = list(override_shape) if override_shape is not None else list(data.size())
        return t

    def to_torch(self) -> torch.Tensor:
        return self._torch_tensor

    @property
    def shape(self) -> list[int]:
        return self._shape

    @property
    def name(self) -> str:
        return self._name


class _Runtime:
    """Three execution contexts as in `_Runtime` with one optimization profile (ctx_context is
    context_1); a context is the name -> bound tensor map the engine reads and writes."""

    def __init__(self) -> None:
        self.context_0: dict[str, RuntimeTensor] = {}
        self.context_1: dict[str, RuntimeTensor] = {}
        self.ctx_context = self.context_1

    def _set_tensors(self, context: dict[str, RuntimeTensor], tensors: Mapping[str, RuntimeTensor]) -> None:
        context.update(tensors)
