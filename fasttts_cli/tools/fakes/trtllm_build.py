"""The fake TensorRT-LLM's model and build side: `models.MODEL_MAP`, `PretrainedConfig`, the GPT model class
our architecture subclasses, the two layers it uses, `builder.Engine` / `EngineConfig` and the
`trtllm-build` command. Each follows tensorrt_llm 1.2 where the worker and the converter touch it:

- `PretrainedConfig.from_dict` looks `config['architecture']` up in `MODEL_MAP` (KeyError when it is not
  registered) and builds the class's `config_class` (models/modeling_utils.py);
- `Engine.from_dir(dir, rank)` -> `EngineConfig.from_json_file` -> `PretrainedConfig.from_dict` (builder.py);
- `trtllm-build` parses sys.argv (commands/build.py): `--kv_cache_type` takes continuous/paged/disabled
  (case-insensitive), `--paged_kv_cache` is the deprecated spelling, the default cache is paged.

The "engine" it writes is the checkpoint's weights with the IO tensor names the model class declares
(`last_hidden_state` only when its ln_f marks it): `trtllm_runtime.GenerationSession` runs it on the CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fasttts_cli.tools.fakes.trtllm_types import KVCacheType

VERSION = "1.2.0rc2 (fake)"


class Mapping:
    """tensorrt_llm.Mapping at tp = pp = 1."""

    def __init__(self, world_size: int = 1, rank: int = 0, tp_size: int = 1, pp_size: int = 1, **_: Any):
        self.world_size, self.rank, self.tp_size, self.pp_size = world_size, rank, tp_size, pp_size
        self.tp_group, self.gpus_per_node = [0], 8

    def to_dict(self) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "rank": self.rank,
            "tp_size": self.tp_size,
            "pp_size": self.pp_size,
        }


class PretrainedConfig:
    def __init__(self, *, architecture: str, dtype: str, hidden_size: int, num_hidden_layers: int, **kw: Any):
        self.architecture, self.dtype = architecture, dtype
        self.hidden_size, self.num_hidden_layers = hidden_size, num_hidden_layers
        mapping = kw.pop("mapping", None)
        self.mapping = Mapping(**mapping) if isinstance(mapping, dict) else (mapping or Mapping())
        for key, value in kw.items():  # the real one sets unknown keys too ("Implicitly setting ...")
            setattr(self, key, value)

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> PretrainedConfig:
        from tensorrt_llm.models import MODEL_MAP  # the installed fake's map, as the real one imports it

        model_cls = MODEL_MAP[config["architecture"]]
        config_cls = getattr(model_cls, "config_class", cls)
        return config_cls(**config)

    def to_dict(self) -> dict[str, Any]:
        out = dict(vars(self))
        out["mapping"] = self.mapping.to_dict()
        out["mapping"].pop("rank")
        return out

    def set_rank(self, rank: int) -> None:
        self.mapping.rank = rank


class GPTConfig(PretrainedConfig):
    pass


class _Traced:
    """What a layer's forward gets while the fake build traces ln_f: records marked outputs."""

    def __init__(self, marked: list[str]) -> None:
        self.marked = marked

    def mark_output(self, name: str, dtype: Any) -> None:
        self.marked.append(name)


class LayerNorm:
    def __init__(self, normalized_shape: int, eps: float = 1e-5, dtype: Any = None, **_: Any) -> None:
        self.normalized_shape, self.eps, self.dtype = normalized_shape, eps, dtype

    def forward(self, x: Any) -> Any:
        return x

    def __call__(self, x: Any) -> Any:
        return self.forward(x)


class ColumnLinear:
    def __init__(self, in_features: int, out_features: int, bias: bool = True, **_: Any) -> None:
        self.in_features, self.out_features, self.bias = in_features, out_features, bias


class _Transformer:
    def __init__(self, config: PretrainedConfig) -> None:
        self.ln_f = LayerNorm(config.hidden_size, getattr(config, "norm_epsilon", 1e-5), config.dtype)


class GPTForCausalLM:
    config_class = GPTConfig

    def __init__(self, config: PretrainedConfig) -> None:
        self.config = config
        self.transformer = _Transformer(config)
        self.lm_head = ColumnLinear(config.hidden_size, int(config.vocab_size), bias=False)


def stock_model_map() -> dict[str, type]:
    return {"GPTForCausalLM": GPTForCausalLM}


class BuildConfig:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> BuildConfig:
        return cls(**config)

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


class EngineConfig:
    def __init__(self, pretrained_config: PretrainedConfig, build_config: BuildConfig, version: str) -> None:
        self.pretrained_config, self.build_config, self.version = pretrained_config, build_config, version

    @classmethod
    def from_json_file(cls, config_file: str) -> EngineConfig:
        with open(config_file) as f:
            return cls.from_json_str(f.read())

    @classmethod
    def from_json_str(cls, config_str: str) -> EngineConfig:
        config = json.loads(config_str)
        return cls(
            PretrainedConfig.from_dict(config["pretrained_config"]),
            BuildConfig.from_dict(config["build_config"]),
            config["version"],
        )


class Engine:
    def __init__(self, config: EngineConfig, engine: bytes) -> None:
        self.config, self.engine = config, engine

    @classmethod
    def from_dir(cls, engine_dir: str, rank: int = 0) -> Engine:
        with open(Path(engine_dir) / f"rank{rank}.engine", "rb") as f:
            engine_buffer = f.read()
        config = EngineConfig.from_json_file(str(Path(engine_dir) / "config.json"))
        config.pretrained_config.set_rank(rank)
        return cls(config, engine_buffer)


def _kv_cache_type(value: str) -> KVCacheType:
    try:
        return KVCacheType(value.lower())
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid KV cache type: {value.upper()}") from None


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="trtllm-build")
    ap.add_argument("--checkpoint_dir", required=True)
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--kv_cache_type", type=_kv_cache_type, default=argparse.SUPPRESS)
    ap.add_argument("--paged_kv_cache", type=str, default=argparse.SUPPRESS)  # deprecated in 1.2
    for flag in ("--gpt_attention_plugin", "--gemm_plugin"):
        ap.add_argument(flag, default="auto")
    ap.add_argument("--remove_input_padding", choices=["enable", "disable"], default="enable")
    ap.add_argument("--gather_context_logits", action="store_true")
    for flag, default in (("--max_beam_width", 1), ("--max_batch_size", 2048), ("--max_input_len", 1024)):
        ap.add_argument(flag, type=int, default=default)
    for flag in ("--max_seq_len", "--max_num_tokens", "--max_prompt_embedding_table_size"):
        ap.add_argument(flag, type=int, default=None)
    return ap


def main() -> None:
    """`trtllm-build`: the registered model class checked (its ln_f traced for marked outputs), then
    config.json + rank0.engine written."""
    from tensorrt_llm.models import MODEL_MAP

    from fasttts_cli.backends.tensorrt_llm.safetensors_io import read_safetensors
    from fasttts_cli.tools.fakes.trtllm_types import engine_io_names, serialize_engine

    a = _parser().parse_args(sys.argv[1:])
    if "kv_cache_type" not in vars(a):
        a.kv_cache_type = KVCacheType.PAGED
        if "paged_kv_cache" in vars(a):
            print("[W] --paged_kv_cache is deprecated; use --kv_cache_type", file=sys.stderr)
            a.kv_cache_type = KVCacheType.PAGED if a.paged_kv_cache == "enable" else KVCacheType.CONTINUOUS
    ckpt, out = Path(a.checkpoint_dir), Path(a.output_dir)
    raw_cfg = json.loads((ckpt / "config.json").read_text(encoding="utf-8"))
    assert raw_cfg["architecture"] in MODEL_MAP, f"Unsupported model architecture: {raw_cfg['architecture']}"
    config = PretrainedConfig.from_dict(raw_cfg)
    model = MODEL_MAP[raw_cfg["architecture"]](config)
    marked: list[str] = []
    model.transformer.ln_f.forward(_Traced(marked))
    weights = read_safetensors(ckpt / "rank0.safetensors")
    if "lm_head.bias" in weights and not getattr(model.lm_head, "bias", False):
        raise RuntimeError("Provided but not required tensors: {'lm_head.bias'}")
    build = {
        "max_batch_size": a.max_batch_size,
        "max_beam_width": a.max_beam_width,
        "max_input_len": a.max_input_len,
        "max_seq_len": a.max_seq_len or raw_cfg.get("max_position_embeddings"),
        "max_num_tokens": a.max_num_tokens,
        "max_prompt_embedding_table_size": a.max_prompt_embedding_table_size or 0,
        "kv_cache_type": a.kv_cache_type.value,
        "gather_context_logits": a.gather_context_logits,
        "plugin_config": {
            "gpt_attention_plugin": None if a.gpt_attention_plugin == "disable" else a.gpt_attention_plugin,
            "remove_input_padding": a.remove_input_padding == "enable",
            "paged_kv_cache": a.kv_cache_type == KVCacheType.PAGED,
        },
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(
        json.dumps(
            {"version": VERSION, "pretrained_config": config.to_dict(), "build_config": build}, indent=2
        ),
        encoding="utf-8",
    )
    io_names = engine_io_names(int(raw_cfg["num_hidden_layers"]), build, marked)
    (out / "rank0.engine").write_bytes(serialize_engine(io_names, raw_cfg["dtype"], weights))
