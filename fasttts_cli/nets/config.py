"""`config.yaml` of an IndexTTS-2 checkpoint (official schema, spec §1.2) as small frozen dataclasses.

Every module size comes from here and from the tensors, never from constants, so the real checkpoint and
shrunken ones (the parity checkpoint, our tiny one) load through the same code. Errors name the file and
the dotted key. The `gpt` table is checked strictly (the original passes it as `UnifiedVoice(**cfg.gpt)`,
which rejects unknown keys too); other tables may carry keys we do not use (v1 leftovers), which are kept
in `raw` and otherwise ignored.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from fasttts_cli.errors import InputError
from fasttts_cli.spec.text_files import parse_text_file

EMOTIONS = ("happy", "angry", "sad", "afraid", "disgusted", "melancholic", "surprised", "calm")


class ConfigError(InputError):
    """config.yaml lacks a key, has one of the wrong type, or one the strict tables do not know."""


@dataclass(frozen=True)
class ConditionModuleConfig:
    output_size: int
    linear_units: int
    attention_heads: int
    num_blocks: int
    input_layer: str = "conv2d2"
    perceiver_mult: int = 2


@dataclass(frozen=True)
class GPTConfig:
    """The `gpt` table as the file holds it; the sizes derived from it (position rows, head width) are
    `UnifiedVoiceConfig`'s, the one the net and the engine build read."""

    model_dim: int
    layers: int
    heads: int
    max_mel_tokens: int
    max_text_tokens: int
    number_text_tokens: int
    number_mel_codes: int
    start_mel_token: int
    stop_mel_token: int
    start_text_token: int
    stop_text_token: int
    emo_condition_module: ConditionModuleConfig
    # the speaker conditioner; IndexTTS-2 requires it, 2.5's campplus mode accepts it but builds nothing
    condition_module: ConditionModuleConfig | None = None
    use_mel_codes_as_input: bool = True
    mel_length_compression: int = 1024
    train_solo_embeddings: bool = False
    condition_type: str = "conformer_perceiver"
    condition_num_latent: int = 32
    max_conditioning_inputs: int = 1
    types: int = 1


@dataclass(frozen=True)
class SemanticCodecConfig:
    codebook_size: int
    hidden_size: int
    codebook_dim: int
    vocos_dim: int
    vocos_intermediate_dim: int
    vocos_num_layers: int
    num_quantizers: int = 1
    downsample_scale: int = 1


@dataclass(frozen=True)
class SpectConfig:
    n_fft: int
    win_length: int
    hop_length: int
    n_mels: int
    fmin: float = 0.0
    fmax: float | None = None


@dataclass(frozen=True)
class LengthRegulatorConfig:
    channels: int
    in_channels: int
    sampling_ratios: tuple[int, ...]
    is_discrete: bool = False
    content_codebook_size: int = 2048
    vector_quantize: bool = False
    n_codebooks: int = 1
    quantizer_dropout: float = 0.0
    f0_condition: bool = False
    n_f0_bins: int = 512


@dataclass(frozen=True)
class DiTConfig:
    hidden_dim: int
    num_heads: int
    depth: int
    in_channels: int
    content_dim: int
    block_size: int = 8192
    class_dropout_prob: float = 0.1
    style_condition: bool = True
    final_layer_type: str = "wavenet"
    target: str = "mel"
    content_codebook_size: int = 1024
    content_type: str = "discrete"
    f0_condition: bool = False
    n_f0_bins: int = 512
    content_codebooks: int = 1
    is_causal: bool = False
    long_skip_connection: bool = True
    zero_prompt_speech_token: bool = False
    time_as_token: bool = False
    style_as_token: bool = False
    uvit_skip_connection: bool = True
    add_resblock_in_transformer: bool = False


@dataclass(frozen=True)
class WaveNetConfig:
    hidden_dim: int
    num_layers: int
    kernel_size: int
    dilation_rate: int = 1
    p_dropout: float = 0.0
    style_condition: bool = True


@dataclass(frozen=True)
class S2MelConfig:
    sr: int
    spect: SpectConfig
    style_dim: int
    length_regulator: LengthRegulatorConfig
    dit: DiTConfig
    wavenet: WaveNetConfig


@dataclass(frozen=True)
class IndexTTS2Config:
    """config.yaml of either model: `model` says which schema it was read with ("indextts2", or
    "indextts2.5", whose file has no `dataset.bpe_model`: `bpe_model` is "" then)."""

    path: Path
    bpe_model: str
    gpt: GPTConfig
    semantic_codec: SemanticCodecConfig
    s2mel: S2MelConfig
    gpt_checkpoint: str
    w2v_stat: str
    s2mel_checkpoint: str
    emo_matrix: str
    spk_matrix: str
    emo_num: tuple[int, ...]
    version: str
    vocoder_name: str = ""
    qwen_emo_path: str = ""
    model: str = "indextts2"
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


# ---------------------------------------------------------------- parsing


def _type_ok(value: Any, tp: Any) -> tuple[bool, Any]:
    """(ok, converted). YAML gives ints for floats like `0`; bools must be real bools."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in typing.get_args(tp):
            return True, None
        for arg in typing.get_args(tp):
            if arg is not type(None):
                ok, v = _type_ok(value, arg)
                if ok:
                    return True, v
        return False, value
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return (isinstance(value, int) and not isinstance(value, bool)), value
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return True, float(value)
        return False, value
    if tp is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return True, str(value)
        return False, value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            return False, value
        (inner, _) = typing.get_args(tp)
        out = []
        for v in value:
            ok, c = _type_ok(v, inner)
            if not ok:
                return False, value
            out.append(c)
        return True, tuple(out)
    return True, value


def _table(path: Path, raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(path, f"key {where} must be a mapping, got {type(raw).__name__}")
    return raw


def _build(cls: type, path: Path, raw: Any, where: str, *, strict: bool, nested: dict | None = None) -> Any:
    """Fill dataclass `cls` from mapping `raw`; `nested` maps a field name to a callable(raw, where)."""
    data = _table(path, raw, where or "<top level>")
    hints = typing.get_type_hints(cls)

    def key(k: str) -> str:
        return f"{where}.{k}" if where else k

    names = {f.name for f in fields(cls)}
    if strict:
        for k in data:
            if k not in names:
                raise ConfigError(
                    path, f"unknown key {key(k)}", hint=f"known keys: {', '.join(sorted(names))}"
                )
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if nested and f.name in nested:
            if f.name not in data:
                if f.default is not MISSING:
                    continue
                raise ConfigError(path, f"missing key {key(f.name)}")
            kwargs[f.name] = nested[f.name](data[f.name], key(f.name))
            continue
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(path, f"missing key {key(f.name)}")
            continue
        value = data[f.name]
        if isinstance(value, str) and value == "None":  # the official YAML writes fmax: None
            value = None
        ok, conv = _type_ok(value, hints[f.name])
        if not ok:
            raise ConfigError(
                path, f"key {key(f.name)} = {value!r} has the wrong type (expected {hints[f.name]})"
            )
        kwargs[f.name] = conv
    return cls(**kwargs)


def dotted(data: Mapping[str, Any], key: str, missing: Callable[[], Exception]) -> Any:
    """data["a"]["b"] for key "a.b"; raises missing() where a part is absent or its parent no mapping.
    config.yaml's readers (this module's and the s2mel net's) each word the error for their reader."""
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise missing()
        node = node[part]
    return node


def _get(path: Path, data: dict[str, Any], key: str) -> Any:
    return dotted(data, key, lambda: ConfigError(path, f"missing key {key}"))


MODELS = ("indextts2", "indextts2.5")


def parse_config(data: dict[str, Any], path: Path, model: str = "indextts2") -> IndexTTS2Config:
    """`model` "indextts2.5" reads the 2.5 schema (delta §1.2): no `dataset.bpe_model`, an optional
    `gpt.condition_module` (campplus mode builds no speaker conditioner), and `semantic_codec` with
    exactly EnhancedCodec's keys (any other raises TypeError there), `downsample_scale` 2 when absent."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}")
    v25 = model == "indextts2.5"
    data = _table(path, data, "<top level>")

    def cond(raw: Any, where: str) -> ConditionModuleConfig:
        return _build(ConditionModuleConfig, path, raw, where, strict=False)

    gpt = _build(
        GPTConfig,
        path,
        _get(path, data, "gpt"),
        "gpt",
        strict=True,
        nested={"condition_module": cond, "emo_condition_module": cond},
    )
    if gpt.model_dim % gpt.heads:
        raise ConfigError(path, f"gpt.model_dim {gpt.model_dim} is not a multiple of gpt.heads {gpt.heads}")
    if gpt.condition_module is None and not v25:
        raise ConfigError(path, "missing key gpt.condition_module")
    raw_codec = _get(path, data, "semantic_codec")
    codec = _build(SemanticCodecConfig, path, raw_codec, "semantic_codec", strict=v25)
    if v25:
        codec = _enhanced_codec_sizes(codec, raw_codec, path)
    pp = _get(path, data, "s2mel.preprocess_params")
    s2 = S2MelConfig(
        sr=_build(_Sr, path, pp, "s2mel.preprocess_params", strict=False).sr,
        spect=_build(
            SpectConfig,
            path,
            _get(path, data, "s2mel.preprocess_params.spect_params"),
            "s2mel.preprocess_params.spect_params",
            strict=False,
        ),
        style_dim=_build(
            _Dim, path, _get(path, data, "s2mel.style_encoder"), "s2mel.style_encoder", strict=False
        ).dim,
        length_regulator=_build(
            LengthRegulatorConfig,
            path,
            _get(path, data, "s2mel.length_regulator"),
            "s2mel.length_regulator",
            strict=False,
        ),
        dit=_build(DiTConfig, path, _get(path, data, "s2mel.DiT"), "s2mel.DiT", strict=False),
        wavenet=_build(WaveNetConfig, path, _get(path, data, "s2mel.wavenet"), "s2mel.wavenet", strict=False),
    )
    emo_num = _get(path, data, "emo_num")
    ok, emo_num = _type_ok(emo_num, tuple[int, ...])
    if not ok or len(emo_num) != len(EMOTIONS) or min(emo_num) < 1:
        raise ConfigError(path, f"key emo_num must be {len(EMOTIONS)} positive integers, got {emo_num!r}")
    top = _build(_Top, path, data, "", strict=False)
    vocoder = data.get("vocoder") or {}
    return IndexTTS2Config(
        path=path,
        bpe_model="" if v25 else str(_get(path, data, "dataset.bpe_model")),
        gpt=gpt,
        semantic_codec=codec,
        s2mel=s2,
        gpt_checkpoint=top.gpt_checkpoint,
        w2v_stat=top.w2v_stat,
        s2mel_checkpoint=top.s2mel_checkpoint,
        emo_matrix=top.emo_matrix,
        spk_matrix=top.spk_matrix,
        emo_num=emo_num,
        version=top.version,
        vocoder_name=str(vocoder.get("name", "")) if isinstance(vocoder, dict) else "",
        qwen_emo_path=top.qwen_emo_path,
        model=model,
        raw=data,
    )


def _enhanced_codec_sizes(codec: SemanticCodecConfig, raw: dict[str, Any], path: Path) -> SemanticCodecConfig:
    """The constraints 2.5's EnhancedCodec puts on its sizes (delta §1.2): `decode` supplies one code
    stream, and defines its output only when downsample_scale > 1 (then it upsamples by 2 whatever the
    value: the `down`/`up` convolutions are fixed at stride 2)."""
    if "downsample_scale" not in raw:
        codec = replace(codec, downsample_scale=2)
    if codec.num_quantizers != 1:
        raise ConfigError(
            path, f"semantic_codec.num_quantizers is {codec.num_quantizers}; 2.5 decodes exactly 1"
        )
    if codec.downsample_scale <= 1:
        raise ConfigError(
            path, f"semantic_codec.downsample_scale is {codec.downsample_scale}; 2.5's decode needs > 1"
        )
    return codec


@dataclass(frozen=True)
class _Sr:
    sr: int


@dataclass(frozen=True)
class _Dim:
    dim: int


@dataclass(frozen=True)
class _Top:
    gpt_checkpoint: str
    w2v_stat: str
    s2mel_checkpoint: str
    emo_matrix: str
    spk_matrix: str
    version: str
    qwen_emo_path: str = ""


def load_config(path: Path | str, model: str = "indextts2") -> IndexTTS2Config:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(path, "file not found", hint="a checkpoint directory holds config.yaml")
    data = parse_text_file(path, yaml.safe_load, yaml.YAMLError, "YAML", ConfigError)
    return parse_config(data, path, model)
